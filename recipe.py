"""Read an aorta recipe's collect.proton block and check it as aorta does.

    PYTHONSAFEPATH=1 python recipe.py RECIPE [DATA] [BACKEND] [CONTEXT]

Prints the options profile.sh needs, one a line, in the order of FIELDS (an unset one
as an empty line); DATA, BACKEND and CONTEXT, when not empty, override the recipe's for
one run and are checked the same way. profile.sh runs this with the workload's own
interpreter, by its path and with PYTHONSAFEPATH, so that nothing in the current folder is
imported while PYTHONPATH still is (a PyYAML installed there is found; -I would hide it).
Exit status: 0, or 2 with one line on stderr for a recipe aorta would refuse.
"""

import os
import stat
import sys

FIELDS = ["mode", "backend", "context", "data", "hook", "proton_mode"]
ALLOWED = {
    "mode": ["cli", "env"],
    "backend": ["auto", "cupti", "rocprofiler", "roctracer", "instrumentation"],
    "context": ["shadow", "python"],
    "data": ["tree", "trace"],
    "hook": ["triton"],
    "instrumentation_mode": ["default", "mma", "pcsampling"],
    "granularity": [
        "cta",
        "warp",
        "warp_2",
        "warp_4",
        "warp_8",
        "warp_group",
        "warp_group_2",
        "warp_group_4",
        "warp_group_8",
    ],  # fmt: skip
    "backend_mode": ["pcsampling", "periodic_flushing"],
}
BACKEND_MODES = {
    "cupti": ["pcsampling", "periodic_flushing"],
    "rocprofiler": ["pcsampling", "periodic_flushing"],
    "roctracer": ["periodic_flushing"],
}
DEFAULTS = {"mode": "cli", "backend": "auto", "context": "shadow", "data": "tree"}


class Refused(Exception):
    """A recipe aorta would not run; the message is one line."""


def shown(text, most=200):
    """text for a one-line message: control characters escaped, the first characters."""
    text = text if len(text) <= most else text[:most] + "..."
    return text if text.isprintable() else repr(text)[1:-1]


def short(value):
    """A value as a message may quote it: a string's first characters, a small number,
    else its kind. (A YAML alias bomb is small in memory, but its repr is not.)"""
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    if (
        value is None
        or isinstance(value, bool | float)
        or (isinstance(value, int) and abs(value) < 10**30)
    ):
        return repr(value)
    return {"list": "a list", "dict": "a mapping"}.get(type(value).__name__, "a value")


def options(recipe, data=None, backend=None, context=None):
    """collect.proton of a decoded recipe, checked, with the defaults filled in and
    proton_mode, the string Proton's --mode takes (or None)."""
    collect = recipe.get("collect") if isinstance(recipe, dict) else None
    proton = collect.get("proton") if isinstance(collect, dict) else None
    if not isinstance(proton, dict):
        raise Refused("no collect.proton mapping")
    for key, value in proton.items():
        if key not in ALLOWED:
            name = shown(key, 40) if isinstance(key, str) else short(key)
            raise Refused(f"unknown key collect.proton.{name} (known: {', '.join(ALLOWED)})")
        if not isinstance(value, str):
            raise Refused(f"collect.proton.{key} must be a string, got {short(value)}")
    # aorta compares the values stripped and lower-cased.
    chosen = {**DEFAULTS, **{key: value.strip().lower() for key, value in proton.items()}}
    overrides = (("--data", "data", data), ("--backend", "backend", backend),
                 ("--context", "context", context))  # fmt: skip
    for flag, key, value in overrides:
        if value and value not in ALLOWED[key]:
            raise Refused(f"{flag}: {short(value)} is not one of {', '.join(ALLOWED[key])}")
        chosen[key] = value or chosen[key]
    for key, value in chosen.items():
        if value not in ALLOWED[key]:
            raise Refused(
                f"collect.proton.{key}: {short(value)} is not one of {', '.join(ALLOWED[key])}"
            )

    intra = [key for key in ("instrumentation_mode", "granularity") if key in chosen]
    if "backend_mode" in chosen:
        if intra:
            raise Refused(
                f"collect.proton.backend_mode conflicts with {', '.join(intra)}: both become "
                "Proton's one --mode; set only one"
            )
        allowed = BACKEND_MODES.get(chosen["backend"])
        if allowed is None:
            raise Refused(
                f"collect.proton.backend_mode needs a pinned backend ({', '.join(BACKEND_MODES)}), "
                f"not {chosen['backend']}"
            )
        if chosen["backend_mode"] not in allowed:
            raise Refused(
                f"collect.proton.backend_mode: {short(chosen['backend_mode'])} is not one of "
                f"{', '.join(allowed)} for backend {chosen['backend']}"
            )
    if intra and chosen["backend"] != "instrumentation":
        raise Refused(
            f"collect.proton.{' and '.join(intra)} need backend instrumentation (they set the "
            f"intra-kernel mode), not {chosen['backend']}"
        )
    if chosen["mode"] == "cli" and chosen["backend"] == "roctracer":
        raise Refused(
            "backend roctracer in cli mode captures an empty tree on AMD; use mode: env, "
            "or backend: auto"
        )
    if "rocprof" in collect and chosen["backend"] in ("auto", "rocprofiler", "roctracer"):
        raise Refused(
            f"rocprof and proton (backend {chosen['backend']}) both intercept HSA queues; use "
            "backend: instrumentation, or drop one"
        )

    # Proton's --mode, as aorta renders it: the backend mode bare, else the intra-kernel
    # mode with its granularity; none when neither is set.
    if "backend_mode" in chosen:
        chosen["proton_mode"] = chosen["backend_mode"]
    elif intra:
        chosen["proton_mode"] = chosen.get("instrumentation_mode", "default")
        if "granularity" in chosen:
            chosen["proton_mode"] += f":granularity={chosen['granularity']}"
    return chosen


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path, data, backend, context = ([*argv, "", "", ""])[:4]

    def refuse(message):
        print(f"profile.sh: error: {shown(path)}: {message}", file=sys.stderr)
        return 2

    try:
        import yaml
    except ImportError:
        return refuse(f"{shown(sys.executable)} has no PyYAML to read it with (make setup, "
                      "or pip install PyYAML)")  # fmt: skip
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe would block the read
            return refuse("not a regular file")
        with open(path, encoding="utf-8") as f:
            chosen = options(yaml.safe_load(f), data, backend, context)
    except OSError as e:
        return refuse((e.strerror or str(e)).lower())
    except UnicodeDecodeError:
        return refuse("not UTF-8 text")
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: a huge integer
        return refuse(f"not valid YAML: {shown(' '.join(str(e).split()))}")
    except Refused as e:
        return refuse(str(e))
    for field in FIELDS:
        print(chosen.get(field) or "")
    return 0


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
