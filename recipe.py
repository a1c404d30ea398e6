"""Read an aorta recipe's collect.proton block and check it as aorta does.

    PYTHONSAFEPATH=1 python recipe.py RECIPE [--data D] [--backend B] [--context C] [--hook H]

Prints what profile.sh needs, one value per line in the order of FIELDS (an unset one as an
empty line): the recipe's options, each flag given overriding its key for one run and
checked the same way, Proton's --mode as aorta renders it, and the recipe's trials.
PYTHONSAFEPATH imports nothing from the current folder while PYTHONPATH still counts (a
PyYAML installed there is found; -I would hide it).
Exit status: 0, or 2 with one line on stderr for a recipe aorta would refuse.
"""

import argparse
import sys
from reprlib import repr as short  # a value quoted in a one-line message, cut short

FIELDS = ["mode", "backend", "context", "data", "hook", "proton_mode", "trials"]
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
DEFAULTS = {"mode": "cli", "backend": "auto", "context": "shadow", "data": "tree"}
MAX_TRIALS = 999


class Refused(Exception):
    """A recipe aorta would not run: a one-line message."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, not argparse's usage
        text = message[:200]
        self.exit(2, f"recipe.py: error: {text if text.isprintable() else ascii(text)}\n")


def one_of(where: str, value: object, allowed: list[str]) -> str:
    if value not in allowed:
        raise Refused(f"{where}: {short(value)} is not one of {', '.join(allowed)}")
    return value


def options(recipe: object, overrides: dict | None = None) -> dict:
    """collect.proton of a decoded recipe, checked, with the defaults filled in, each
    override given (data, backend, context, hook) in place of the recipe's, proton_mode
    (Proton's --mode, or None) and trials."""
    collect = recipe.get("collect") if isinstance(recipe, dict) else None
    proton = collect.get("proton") if isinstance(collect, dict) else None
    if not isinstance(proton, dict):
        raise Refused("no collect.proton mapping")
    chosen = dict(DEFAULTS)
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
    chosen["proton_mode"] = proton_mode(chosen, "rocprof" in collect)
    chosen["trials"] = trials = recipe.get("trials", 1)
    if type(trials) is not int or not 1 <= trials <= MAX_TRIALS:
        raise Refused(f"trials must be a whole number from 1 to {MAX_TRIALS}, got {short(trials)}")
    return chosen


def proton_mode(chosen: dict, rocprof: bool) -> str | None:
    """Proton's --mode, as aorta renders it: the backend mode bare, else the intra-kernel
    mode with its granularity; None when neither is set. Refuses what aorta refuses."""
    backend = chosen["backend"]
    intra = [key for key in ("instrumentation_mode", "granularity") if key in chosen]
    if "backend_mode" in chosen:
        if intra:
            raise Refused(
                f"collect.proton.backend_mode conflicts with {', '.join(intra)}: both become "
                "Proton's one --mode; set only one"
            )
        if backend not in BACKEND_MODES:
            raise Refused(
                f"collect.proton.backend_mode needs a pinned backend ({', '.join(BACKEND_MODES)}),"
                f" not {backend}"
            )
        where = f"collect.proton.backend_mode for backend {backend}"
        return one_of(where, chosen["backend_mode"], BACKEND_MODES[backend])
    if intra and backend != "instrumentation":
        raise Refused(
            f"collect.proton.{' and '.join(intra)} need backend instrumentation (they set the "
            f"intra-kernel mode), not {backend}"
        )
    if rocprof and backend in ("auto", "rocprofiler", "roctracer"):
        raise Refused(
            f"rocprof and proton (backend {backend}) both intercept HSA queues; use backend: "
            "instrumentation, or drop one"
        )
    if not intra:
        return None
    mode = chosen.get("instrumentation_mode", "default")
    return mode + (f":granularity={chosen['granularity']}" if "granularity" in chosen else "")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    for key in ("data", "backend", "context", "hook"):
        parser.add_argument(f"--{key}", default="")
    overrides = vars(parser.parse_args(argv))
    path = overrides.pop("recipe")
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            chosen = options(yaml.safe_load(f), overrides)
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
    else:
        print("\n".join(str(chosen.get(field) or "") for field in FIELDS))
        return 0
    shown = path[:200] if path[:200].isprintable() else repr(path[:200])
    print(f"profile.sh: error: {shown}: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
