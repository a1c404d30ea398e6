"""An aorta recipe's collect.proton block, read once and checked as aorta checks it, into a
Recipe: what profile.sh's run asks of Proton."""

import sys
from dataclasses import dataclass
from reprlib import repr as short  # a value quoted in a one-line message, cut short

from summary import Refused

ALLOWED = {
    "mode": ["cli", "env"],
    "backend": ["auto", "cupti", "rocprofiler", "roctracer", "instrumentation"],
    "context": ["shadow", "python"],
    "data": ["tree", "trace"],
    "hook": ["triton"],
    "instrumentation_mode": ["default", "mma", "pcsampling"],
    "granularity": ["cta", "warp", "warp_2", "warp_4", "warp_8"]
    + ["warp_group", "warp_group_2", "warp_group_4", "warp_group_8"],
    "backend_mode": ["pcsampling", "periodic_flushing"],
}
BACKEND_MODES = dict(cupti=ALLOWED["backend_mode"], rocprofiler=ALLOWED["backend_mode"])
BACKEND_MODES["roctracer"] = ["periodic_flushing"]
MAX_TRIALS = 999


@dataclass(frozen=True)
class Recipe:
    """collect.proton with aorta's defaults filled in; proton_mode is Proton's --mode as
    aorta renders it (None: none set); trials, the recipe's."""

    mode: str = "cli"
    backend: str = "auto"
    context: str = "shadow"
    data: str = "tree"
    hook: str | None = None
    proton_mode: str | None = None
    trials: int = 1


def one_of(where: str, value: object, allowed: list[str]) -> str:
    if value not in allowed:
        raise Refused(f"{where}: {short(value)} is not one of {', '.join(allowed)}")
    return value


def options(recipe: object, overrides: dict | None = None) -> Recipe:
    """The Recipe of a decoded recipe, each override given (data, backend, context, hook)
    in place of the recipe's and checked the same way; Refused for what aorta refuses."""
    collect = recipe.get("collect") if isinstance(recipe, dict) else None
    proton = collect.get("proton") if isinstance(collect, dict) else None
    if not isinstance(proton, dict):
        raise Refused("no collect.proton mapping")
    chosen = {}
    for key, value in proton.items():
        if key not in ALLOWED:
            raise Refused(f"unknown key collect.proton.{short(key)} (known: {', '.join(ALLOWED)})")
        if not isinstance(value, str):
            raise Refused(f"collect.proton.{key} must be a string, got {short(value)}")
        # aorta compares the values stripped and lower-cased.
        chosen[key] = one_of(f"collect.proton.{key}", value.strip().lower(), ALLOWED[key])
    for key, value in (overrides or {}).items():
        if value:
            chosen[key] = one_of(f"--{key}", value, ALLOWED[key])
    trials = recipe.get("trials", 1)
    if type(trials) is not int or not 1 <= trials <= MAX_TRIALS:
        raise Refused(f"trials must be a whole number from 1 to {MAX_TRIALS}, got {short(trials)}")
    backend = chosen.get("backend", "auto")
    mode = proton_mode(backend, chosen, "rocprof" in collect)
    kept = {key: value for key, value in chosen.items() if key in Recipe.__dataclass_fields__}
    return Recipe(**kept, proton_mode=mode, trials=trials)


def proton_mode(backend: str, chosen: dict, rocprof: bool) -> str | None:
    """Proton's --mode, as aorta renders it: the backend mode bare, else the intra-kernel
    mode with its granularity; None when neither is set. Refuses what aorta refuses."""
    intra = [key for key in ("instrumentation_mode", "granularity") if key in chosen]
    where = "collect.proton.backend_mode"
    if "backend_mode" in chosen:
        if intra:
            raise Refused(f"{where} conflicts with {', '.join(intra)} (one --mode): set one")
        if backend not in BACKEND_MODES:
            raise Refused(f"{where} needs a pinned backend ({', '.join(BACKEND_MODES)})")
        return one_of(
            f"{where} for backend {backend}", chosen["backend_mode"], BACKEND_MODES[backend]
        )
    if intra and backend != "instrumentation":
        keys = " and ".join(intra)
        raise Refused(f"collect.proton.{keys} need backend instrumentation, not {backend}")
    if rocprof and backend in ("auto", "rocprofiler", "roctracer"):
        why = "both intercept HSA queues; use backend: instrumentation, or drop one"
        raise Refused(f"rocprof and proton (backend {backend}) {why}")
    if not intra:
        return None
    mode = chosen.get("instrumentation_mode", "default")
    return mode + (f":granularity={chosen['granularity']}" if "granularity" in chosen else "")


def load(path: str, overrides: dict | None = None) -> Recipe:
    """The Recipe in the file at path; Refused, naming the file, for one that cannot be read
    or that aorta would refuse."""
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            return options(yaml.safe_load(f), overrides)
    except ImportError:
        why = f"{sys.executable} has no PyYAML to read it with (make setup, or pip install PyYAML)"
    except OSError as e:
        why = (e.strerror or str(e)).lower()
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except yaml.YAMLError as e:
        why = f"not valid YAML: {' '.join(str(e).split())[:200]}"
    except Refused as e:
        why = str(e)
    raise Refused(f"{path[:200]}: {why}")
