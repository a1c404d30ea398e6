"""Run a Python script under Proton, as `python -m triton.profiler.proton` does, with the
two things that command cannot do: one capture per rank, and an instrumentation mode.

    python proton_launch.py [-n NAME] [-b BACKEND] [-c CONTEXT] [-d DATA] [-k triton]
                            [--mode MODE] [--env] SCRIPT.py [ARGS ...]

Under a launcher that starts one process per GPU (torchrun sets RANK, Slurm's srun
SLURM_PROCID, mpirun OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK), each process writes
NAME.rank<R>.hatchet (or .chrome_trace) for its global rank R, so that ranks on any
number of hosts never write to one file; where LOCAL_RANK is unset, it is exported from
the launcher's local rank, so that each rank can pick its own GPU. Alone, it writes
NAME.hatchet, as Proton's command line does. Everything after SCRIPT.py is the script's,
a `--` included.

--mode takes Proton's mode as aorta's recipes write it. For the instrumentation
backend, "default" or "default:granularity=warp:sampling_strategy=selective:
sampling_options=0" (the fields of proton.mode.Default) becomes the typed object Proton
needs (there, a mode string fails; and Triton 3.6 and 3.7's command line drop -m), and
Triton-language scopes are enabled (pl.enable_semantic). Other backends get the string.

--env starts no profiler: it only exports AORTA_PROTON_NAME with the rank in it, for a
script that calls proton.start() itself (a recipe's mode: env).

Exit status: the script's own; 2 for bad arguments or a GPU the backend cannot
instrument.
"""

import argparse
import os
import runpy
import sys

# The instrumentation backend reads the SM (CU) id, which AMD's compiler does only for
# these architectures; it stops with a fatal error on any other.
AMD_INSTRUMENTABLE = ("gfx942", "gfx950")


def fail(message):
    print(f"proton_launch: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, instead of argparse's usage block
        fail(message)


# The options that take a value: the first word that is neither one of them, nor a value,
# nor an option is the script.
VALUED = {"-n", "--name", "-b", "--backend", "-c", "--context", "-d", "--data", "-k", "--hook",
          "--mode"}  # fmt: skip


def parse(argv):
    at = 0
    while at < len(argv) and argv[at].startswith("-") and argv[at] != "-":
        at += 2 if argv[at] in VALUED else 1
    # argparse would drop a `--` right after the script; the script's words are kept as given.
    argv, script_args = argv[: at + 1], argv[at + 1 :]
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--name", default="proton", help="output path without extension")
    parser.add_argument("-b", "--backend", help="Proton's backend (default: Proton picks)")
    parser.add_argument("-c", "--context", default="shadow", choices=["shadow", "python"])
    parser.add_argument("-d", "--data", default="tree", choices=["tree", "trace"])
    parser.add_argument("-k", "--hook", choices=["triton"])
    parser.add_argument("--mode", help="instrumentation mode, e.g. default:granularity=warp")
    parser.add_argument("--env", action="store_true", help="export the name; start nothing")
    parser.add_argument("script", metavar="SCRIPT.py")
    args = parser.parse_args(argv)
    args.args = script_args
    if not args.script.endswith(".py"):
        fail(f"expected a .py script, got {args.script[:60]!r}")
    if not os.path.isfile(args.script):
        fail(f"no such script: {args.script[:200]!r}")
    return args


def _whole(environ, var):
    value = environ[var]
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        fail(f"{var} must be a whole number >= 0, got {value[:30]!r}")
    return int(value)


def global_rank(environ=os.environ, pid=None, ppid=None):
    """The rank the launcher that started this process gave it, or None alone.

    A RANK left exported in a shell reaches every task srun starts, so srun's own
    SLURM_PROCID wins where srun started this process (SLURM_TASK_PID is this process or
    the shell that runs it); torchrun's RANK (it sets TORCHELASTIC_RUN_ID beside it) and
    an MPI launcher's rank are each process's own. Else RANK, else SLURM_PROCID."""
    pid = os.getpid() if pid is None else pid
    ppid = os.getppid() if ppid is None else ppid
    srun_task = environ.get("SLURM_TASK_PID") in (str(pid), str(ppid))
    order = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK", "SLURM_PROCID"]
    if "TORCHELASTIC_RUN_ID" in environ:
        order.insert(0, "RANK")
    elif srun_task:
        order.insert(order.index("RANK"), "SLURM_PROCID")
    for var in order:
        if var in environ:
            return _whole(environ, var)
    return None


def rank_name(name, environ=os.environ, pid=None, ppid=None):
    """name with .rank<R> for the global rank a launcher gave this process, else name."""
    rank = global_rank(environ, pid, ppid)
    return name if rank is None else f"{name}.rank{rank}"


def export_local_rank(environ=os.environ):
    """Export LOCAL_RANK, where it is unset, from an MPI launcher's or srun's local rank."""
    if "LOCAL_RANK" in environ:
        return
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if var in environ:
            environ["LOCAL_RANK"] = str(_whole(environ, var))
            return


def typed_mode(spec):
    """proton.mode.Default(...) (or MMA) from "default[:field=value...]"; any other
    mode as the string, for Proton to judge."""
    from triton.profiler import mode

    kind, *pairs = spec.split(":")
    typed = {"default": getattr(mode, "Default", None), "mma": getattr(mode, "MMA", None)}
    if typed.get(kind) is None:
        return spec
    fields = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            fail(f"instrumentation mode field {pair[:30]!r} is not key=value")
        fields[key] = value
    try:
        for key, field in typed[kind].__dataclass_fields__.items():  # buffer_size is an int
            if key in fields and field.type in (int, "int"):
                fields[key] = int(fields[key])
        return typed[kind](**fields)
    except (TypeError, ValueError, KeyError) as e:
        fail(f"instrumentation mode {spec[:60]!r}: {' '.join(str(e).split())[:120]}")


def check_instrumentable():
    """Refuse an AMD GPU whose architecture the instrumentation backend cannot compile for."""
    from triton.runtime import driver

    target = driver.active.get_current_target()
    arch = str(target.arch)
    if target.backend == "hip" and not arch.startswith(AMD_INSTRUMENTABLE):
        fail(
            f"the instrumentation backend compiles for {' and '.join(AMD_INSTRUMENTABLE)} only, "
            f"not {arch[:30]}"
        )


def run_script(script, args):
    """Run script as __main__ with its arguments, as `python script.py` would; return
    its exit status (a SystemExit is caught, so that the profile is still written)."""
    sys.argv = [script, *args]
    path = os.path.abspath(script)  # frames named by full path: their source lines are found
    sys.path[0] = os.path.dirname(path)  # this file's folder, till now
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return e.code
    return 0


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    name = rank_name(args.name)
    export_local_rank()
    if args.env:
        os.environ["AORTA_PROTON_NAME"] = name
        return run_script(args.script, args.args)

    import triton.profiler as proton

    mode = args.mode
    if args.backend == "instrumentation":
        import triton.profiler.language as pl

        check_instrumentable()
        pl.enable_semantic("triton")
        mode = typed_mode(args.mode or "default")
    backend = args.backend if args.backend not in (None, "auto") else None
    proton.start(name, context=args.context, data=args.data, backend=backend, mode=mode,
                 hook=args.hook)  # fmt: skip
    try:
        return run_script(args.script, args.args)
    finally:
        proton.finalize()


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
