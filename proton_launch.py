"""Run a Python script under Proton, as `python -m triton.profiler.proton` does, with the
two things that command cannot do: one capture per rank, and an instrumentation mode.

    python proton_launch.py [-n NAME] [-b BACKEND] [-c CONTEXT] [-d DATA] [-k triton]
                            [--mode MODE] [--env] [--run-id ID] SCRIPT.py [ARGS ...]
    python proton_launch.py --provenance [-n NAME] [-b BACKEND] [--mode MODE] [--env]
                            [--run-id ID]

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

Beside each capture it writes NAME[.rank<R>].provenance.json, what made it: the Triton
and torch versions, the device, the backend and mode asked for and those used (null
where the run cannot tell: a script that starts Proton itself chooses its own), and
the run's --run-id. --provenance writes only that file, for a run that Proton's own
command line made in this environment (so that Proton would choose the same backend).

Exit status: the script's own; 2 for bad arguments or a GPU the backend cannot
instrument.
"""

import argparse
import importlib
import importlib.metadata
import json
import os
import runpy
import signal
import sys

# The instrumentation backend reads the SM (CU) id, which AMD's compiler does only for
# these architectures; it stops with a fatal error on any other.
AMD_INSTRUMENTABLE = ("gfx942", "gfx950")
# The device nodes of NVIDIA's and AMD's drivers.
GPU_NODES = ("/dev/nvidiactl", "/dev/kfd")


def fail(message):
    print(f"proton_launch: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, instead of argparse's usage block
        fail(message)


# The options that take a value: the first word that is neither one of them, nor a value,
# nor an option is the script.
VALUED = {"-n", "--name", "-b", "--backend", "-c", "--context", "-d", "--data", "-k", "--hook",
          "--mode", "--run-id"}  # fmt: skip


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
    parser.add_argument("--run-id", help="the run's id, for the provenance file")
    parser.add_argument("--provenance", action="store_true", help="write only the provenance")
    parser.add_argument("script", metavar="SCRIPT.py", nargs="?")
    args = parser.parse_args(argv)
    args.args = script_args
    if args.provenance:
        if args.script is not None:
            fail("--provenance runs no script")
        return args
    if args.script is None:
        fail("no script: give SCRIPT.py")
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


def backend_chosen(backend):
    """The backend Proton uses when asked for `backend` (None or auto: its own choice, by
    its private _select_backend, the function proton.start calls); None where it cannot
    tell (no GPU, or a Triton without that function)."""
    if backend not in (None, "auto"):
        return backend
    try:
        from triton.profiler.profile import _select_backend

        return str(_select_backend())
    except Exception:  # no active driver, or another Triton
        return None


def version(module):
    """A module's version: from the module where it is loaded, else from its package's
    metadata (no import: torch's takes seconds), else by importing it; None without it."""
    if module not in sys.modules:
        try:
            return importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:  # another name: a ROCm build's
            pass
    try:
        return importlib.import_module(module).__version__
    except Exception:
        return None


def device_name():
    """The current GPU's name; None where none is visible (torch is imported only where a
    driver's device node says there may be one)."""
    if "torch" not in sys.modules and not any(map(os.path.exists, GPU_NODES)):
        return None
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:  # no torch, or a GPU that cannot be queried
        return None


def provenance(args, backend_used, mode_used):
    """What made this process's capture, every value a short string or None."""
    record = {"triton": version("triton"), "torch": version("torch"), "device": device_name(),
              "backend_asked": args.backend or "auto", "backend_used": backend_used,
              "mode_asked": args.mode, "mode_used": mode_used, "run_id": args.run_id}  # fmt: skip
    return {key: None if v is None else str(v)[:200] for key, v in record.items()}


def write_provenance(name, record):
    """NAME.provenance.json, replaced atomically (a link is written through); a failure is
    a warning: the capture stands without it."""
    path = f"{name}.provenance.json"
    text = json.dumps(record, indent=2) + "\n"
    try:
        if os.path.islink(path) or (os.path.exists(path) and not os.path.isfile(path)):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return
        folder, base = os.path.split(path)
        temporary = os.path.join(folder, f".{base[:200]}.{os.getpid()}")
        # SIGTERM and SIGINT wait until the file is in place: none leaves the temporary file.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            # O_EXCL: never through a file someone else put there; 0o666: the umask's mode.
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(temporary, path)
            except BaseException:
                os.unlink(temporary)
                raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except OSError as e:
        print(f"proton_launch: warning: no {path[:200]}: {e.strerror or e}", file=sys.stderr)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    name = rank_name(args.name)
    export_local_rank()
    if args.provenance or args.env:
        # The script (or Proton's command line) chose its own backend and mode.
        status = 0
        if not args.provenance:
            os.environ["AORTA_PROTON_NAME"] = name
            status = run_script(args.script, args.args)
        used = (backend_chosen(args.backend), None) if not args.env else (None, None)
        write_provenance(name, provenance(args, *used))
        return status

    import triton.profiler as proton

    mode = args.mode
    if args.backend == "instrumentation":
        import triton.profiler.language as pl

        check_instrumentable()
        pl.enable_semantic("triton")
        mode = typed_mode(args.mode or "default")
    backend = args.backend if args.backend not in (None, "auto") else None
    used = (backend_chosen(backend), None if mode is None else str(mode))
    proton.start(name, context=args.context, data=args.data, backend=backend, mode=mode,
                 hook=args.hook)  # fmt: skip
    try:
        return run_script(args.script, args.args)
    finally:
        proton.finalize()
        write_provenance(name, provenance(args, *used))


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
