"""Run a Python script under Proton as `python -m triton.profiler.proton` does, with what
that command cannot do (a capture per rank, an instrumentation mode): each trial of
profile.sh's runs through it. Everything after SCRIPT.py is the script's, a `--` included.
Exit status: the script's own, 130 on Ctrl-C; 2 for bad arguments or a GPU the
instrumentation backend cannot compile for. check_launch_metadata checks a kernel's
launch_metadata on the CPU, for a user's test. docs/profiling.md tells each part.
"""

import argparse
import inspect
import json
import math
import os
import runpy
import site
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import NoReturn

# The instrumentation backend reads the CU id, which AMD's compiler does only here.
AMD_INSTRUMENTABLE = ("gfx942", "gfx950")
# Options that take a value: the first word that is none of them, nor their value, is the script.
VALUED = {"-n", "-b", "-c", "-d", "-k", "--mode", "--imports"}
# The launch_metadata keys Proton's launch hook turns into roofline metrics.
ROOFLINE = ["bytes", "flops", "flops8", "flops16", "flops32", "flops64"]


def fail(message: str) -> NoReturn:
    print(f"proton_launch: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line and exit 2, not argparse's usage
        fail(message[:200] if message[:200].isprintable() else ascii(message[:200]))


def parse(argv: list[str]) -> argparse.Namespace:
    at = 0
    while at < len(argv) and argv[at].startswith("-") and argv[at] != "-":
        at += 2 if argv[at] in VALUED else 1
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", dest="name", default="proton", help="output path, no extension")
    parser.add_argument("--ranked", action="store_true", help="NAME.rank<R>, for launchers")
    parser.add_argument("-b", dest="backend", help="Proton's backend (default: Proton picks)")
    parser.add_argument("-c", dest="context", default="shadow", choices=["shadow", "python"])
    parser.add_argument("-d", dest="data", default="tree", choices=["tree", "trace"])
    parser.add_argument("-k", dest="hook", choices=["triton"])
    parser.add_argument("--mode", help="Proton's mode, e.g. default:granularity=warp")
    parser.add_argument("--env", action="store_true", help="export the name; start nothing")
    parser.add_argument("--imports", metavar="FILE", help="write each module's file here (JSON)")
    parser.add_argument("script", metavar="SCRIPT.py")
    # argparse would drop a `--` after the script: the script's words are kept as given.
    args = parser.parse_args(argv[: at + 1])
    args.args = argv[at + 1 :]
    if not (args.script.endswith(".py") and os.path.isfile(args.script)):
        parser.error(f"no such .py script: {args.script[:200]!r}")
    return args


def global_rank(environ: dict = os.environ, pid: int | None = None) -> int:
    """torchrun's RANK comes with TORCHELASTIC_RUN_ID; where srun started this process
    (SLURM_TASK_PID is it or its parent), SLURM_PROCID wins over a RANK left in the shell."""
    pid = os.getpid() if pid is None else pid
    order = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"]
    if "TORCHELASTIC_RUN_ID" in environ:
        order.insert(0, "RANK")
    elif environ.get("SLURM_TASK_PID") in (str(pid), str(os.getppid())):
        order.insert(0, "SLURM_PROCID")
    for var in order:
        if var in environ:
            return whole(environ, var)
    fail(f"--ranked, but none of {', '.join(dict.fromkeys(order))} is set")


def whole(environ: dict, var: str) -> int:
    value = environ[var]
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        fail(f"{var} must be a whole number, got {value[:30]!r}")
    return int(value)


def export_local_rank(environ: dict = os.environ) -> None:  # from MPI's or srun's
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if "LOCAL_RANK" not in environ and var in environ:
            environ["LOCAL_RANK"] = str(whole(environ, var))


def typed_mode(spec: str) -> object:
    """proton.mode.Default (or MMA) from "default[:field=value...]"; another mode as the
    string, for Proton to judge."""
    from triton.profiler import mode

    kind, *pairs = spec.split(":")
    typed = {"default": mode.Default, "mma": mode.MMA}
    if kind not in typed:
        return spec
    fields = dict(pair.partition("=")[::2] for pair in pairs)
    try:
        if "buffer_size" in fields:  # the one int field; the others take strings
            fields["buffer_size"] = int(fields["buffer_size"])
        return typed[kind](**fields)
    except (TypeError, ValueError) as e:
        fail(f"mode {spec[:60]!r}: {' '.join(str(e).split())[:120]}")


def check_instrumentable() -> None:
    from triton.runtime import driver

    target = driver.active.get_current_target()
    if target.backend == "hip" and not str(target.arch).startswith(AMD_INSTRUMENTABLE):
        only = " and ".join(AMD_INSTRUMENTABLE)
        fail(f"the instrumentation backend compiles for {only} only, not {str(target.arch)[:30]}")


def run_script(script: str, args: list[str], imports: str | None = None) -> int:
    """As `python script.py` would; returns its exit status (a SystemExit is caught, so
    that the profile is still written). imports: where to write the modules it imported."""
    sys.argv = [script, *args]
    path = os.path.abspath(script)  # frames named by full path: their lines are found
    if not sys.flags.safe_path:  # as python script.py (-P: the path as it is, PYTHONPATH first)
        sys.path[0] = os.path.dirname(path)
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)  # as Python does for SystemExit("why")
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the shell's status for it, and no traceback
        return 130
    finally:
        if imports:
            write_imports(imports)
    return 0


def write_imports(path: str) -> None:
    """The modules imported, by name, and their files, as JSON: "own", those from outside
    the interpreter's folders (its prefix and site-packages, a .venv in the checkout too),
    and "installed", the top-level ones from inside them; make ab checks each side ran its
    own tree's."""
    dirs = (sys.prefix, sys.base_prefix, *site.getsitepackages(), site.getusersitepackages())
    inside = tuple(os.path.join(os.path.realpath(folder), "") for folder in dirs)
    found = {"own": {}, "installed": {}}
    for name, module in dict(sys.modules).items():
        file = getattr(module, "__file__", None)
        placed = isinstance(file, str) and os.path.isabs(file)  # torch.classes': "_classes.py"
        if name in ("__main__", "__mp_main__") or not placed:  # multiprocessing's alias too
            continue
        if not os.path.realpath(file).startswith(inside):
            found["own"][name] = file
        elif "." not in name:
            found["installed"][name] = file
    with open(f"{path}.{os.getpid()}", "w", encoding="utf-8") as f:
        json.dump(found, f, indent=1)
    os.replace(f"{path}.{os.getpid()}", path)  # whole, whichever rank writes it last


def check_launch_metadata(kernel: object, launch: Callable[[], object]) -> dict:
    """What kernel's launch_metadata returns for the first launch launch() makes, called as
    Proton's hook calls it; ValueError unless its name is a str and its bytes, flops and
    flops8 to flops64 (one at least) finite numbers >= 0. docs/profiling.md shows a test."""
    jit = kernel
    while not inspect.isfunction(jit.fn):  # an autotuner or heuristics around the kernel
        jit = jit.fn
    # A compiled kernel keeps it as an attribute, the interpreter's among its options.
    kwargs = getattr(jit, "kwargs", {})
    hook = getattr(jit, "launch_metadata", None) or kwargs.get("launch_metadata")
    launches = []

    def record(*args: object, grid: object, warmup: bool, **options: object) -> object:
        launches.append((args, grid, options))
        return type(jit).run(jit, *args, grid=grid, warmup=warmup, **options)

    jit.run = record  # this instance's, for this one call
    try:
        launch()
    finally:
        del jit.run
    if hook is None or not launches:
        raise ValueError(f"{jit.fn.__name__}: no launch_metadata, or launch() did not launch it")
    args, grid, options = launches[0]
    named = {k: v for k, v in options.items() if k in jit.arg_names}
    bound = inspect.signature(jit.fn).bind(*args, **named)
    bound.apply_defaults()
    grid = grid(bound.arguments) if callable(grid) else grid
    got = hook(grid, SimpleNamespace(name=jit.fn.__name__), dict(bound.arguments))
    if not isinstance(got, dict) or not isinstance(got.get("name"), str):
        raise ValueError(f"launch_metadata must return a dict whose name is a str: {got!r:.200}")
    if not (rates := {key: got[key] for key in ROOFLINE if key in got}):
        raise ValueError(f"launch_metadata returns none of {', '.join(ROOFLINE)}")
    for key, value in rates.items():
        if isinstance(value, bool) or not math.isfinite(float(value)) or float(value) < 0:
            raise ValueError(f"launch_metadata's {key} must be a finite number >= 0: {value!r:.60}")
    return got


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    name = f"{args.name}.rank{global_rank()}" if args.ranked else args.name
    export_local_rank()
    # Before the script imports torch: Triton 3.8 with rocprofiler-sdk can hang at exit else.
    import triton.profiler as proton

    if args.env:
        exports = dict(DIR=os.path.dirname(name) or ".", NAME=name, CONTEXT=args.context)
        exports.update(DATA=args.data, BACKEND=args.backend, MODE=args.mode, HOOK=args.hook)
        os.environ.update({f"AORTA_PROTON_{key}": v for key, v in exports.items() if v})
        return run_script(args.script, args.args, args.imports)
    mode = args.mode
    if args.backend == "instrumentation":
        import triton.profiler.language as pl

        check_instrumentable()
        pl.enable_semantic("triton")
        mode = mode and typed_mode(mode)
    options = dict(context=args.context, data=args.data, backend=args.backend, hook=args.hook)
    proton.start(name, mode=mode, **options)
    from triton.profiler.flags import flags

    flags.command_line = True  # as Proton's command line sets it: the script's start() ignored
    try:
        return run_script(args.script, args.args, args.imports)
    finally:
        proton.finalize()


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
