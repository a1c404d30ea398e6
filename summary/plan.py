"""profile.sh's run as one value, a Plan, made by a pure function of the command line
(Options), the recipe (summary/recipe.py) and the host: the run's kind and folder, each
trial's command and folder, the summariser's command and the provenance. profile_run.py
prints a plan (--dry-run) or runs it; docs/profiling.md draws the route."""

import os
import shlex
from dataclasses import dataclass, field

from summary.recipe import Recipe, Refused

AB_TRIALS = 5  # a side, whatever the recipe says
MAX_WORLD = 2**16  # as parse_hatchet.py's --world-size takes it
NO_SCRIPT = "the command must run a .py script through its interpreter or launcher"


@dataclass(frozen=True)
class Options:
    """profile.sh's command line: python is the workload's interpreter, which runs the driver
    and the summariser; command the words after --; gate the words of GATE."""

    python: str = "python3"
    command: tuple[str, ...] = ()
    recipe: str = "recipe.yaml"
    results: str = "profiling_results"
    output: str = ""
    data: str = ""
    backend: str = ""
    context: str = ""
    hook: str = ""
    trials: int | None = None
    rev: str = ""
    base_script: str = ""
    gate: tuple[str, ...] = ()
    compare: tuple[str, ...] = ()
    world_size: int | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Host:
    """What the plan is told of the machine: the tooling's folder, the current folder, the
    run's id (<UTC time>-<pid>), the GPUs' vendor (nvidia, amd; None where none is seen),
    whether a GPU is there or assumed, the *_VISIBLE_DEVICES set, whether RESULTS/ceiling
    holds make ceiling's records, and where the current folder lies in its git checkout
    (an A/B run against a revision)."""

    here: str
    cwd: str
    stamp: str
    vendor: str | None = None
    gpu: bool = False
    devices: tuple[tuple[str, str], ...] = ()
    ceiling: bool = False
    git_prefix: str | None = None


@dataclass(frozen=True)
class Trial:
    """One run of the command: side is "" or, in an A/B run, "base" or "now"."""

    side: str
    number: int
    folder: str
    cwd: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The run: its kind (profile, trace, intra, intra-trace, ab, compare) and folder; where
    latest and previous move ("" for none: --output); the capture's extension; the trials;
    the summariser's command; the provenance and the files it goes to; the device variables
    set (a value) or unset (None) for the trials; where a revision is unpacked ("" for
    none); where an A/B run's base runs and its script there; whether the command would start
    here with no GPU visible."""

    kind: str
    folder: str
    links: str
    capture: str
    trials: tuple[Trial, ...]
    summarise: tuple[str, ...]
    provenance: dict = field(default_factory=dict)
    records: tuple[str, ...] = ()
    environ: tuple[tuple[str, str | None], ...] = ()
    tree: str = ""
    base: tuple[str, str] = ()
    no_gpu: bool = False

    @property
    def processes(self) -> tuple[tuple[str, ...], ...]:
        """Every command the run starts, in order (a revision's git archive apart)."""
        return (*(trial.command for trial in self.trials), self.summarise)


def split(options: Options) -> tuple[list, list, bool]:
    """The command's interpreter or launcher words, the script and its words, and whether
    the interpreter runs the script alone (no launcher)."""
    command = list(options.command)
    start = next((command[:at] for at, word in enumerate(command) if word.endswith(".py")), [])
    if not start:
        raise Refused(f"{NO_SCRIPT} (-- python mine.py)")
    return start, command[len(start) :], start == [options.python]


def given(recipe: Recipe) -> tuple[str | None, str | None]:
    """The backend and mode Proton is given: None where Proton picks, or in env mode the
    script; the instrumentation backend's typed default mode."""
    if recipe.mode == "env":
        return None, None
    intra = recipe.backend == "instrumentation"
    backend = None if recipe.backend == "auto" else recipe.backend
    return backend, recipe.proton_mode or ("default" if intra else None)


def flags(recipe: Recipe) -> list[str]:
    """proton_launch.py's options: Proton's, or in env mode the recipe's to export."""
    backend, mode = given(recipe)
    if recipe.mode == "env":
        backend, mode = (None if recipe.backend == "auto" else recipe.backend), recipe.proton_mode
    out = ["-c", recipe.context, "-d", recipe.data]
    out += ["-b", backend] if backend else []
    out += ["-k", recipe.hook] if recipe.hook else []
    return out + (["--mode", mode] if mode else [])


def kind_of(recipe: Recipe, ab: bool) -> str:
    kind = "profile" if recipe.data == "tree" else "trace"
    if recipe.backend == "instrumentation":
        kind = "intra" if kind == "profile" else "intra-trace"
    return "ab" if ab else kind


def moves(recipe: Recipe, host: Host) -> tuple:
    """Proton's AMD backends that intercept queues refuse HIP_ and CUDA_VISIBLE_DEVICES and
    honour ROCR_VISIBLE_DEVICES: the selection moves there, as aorta moves it."""
    amd = recipe.backend == "auto" and host.vendor == "amd"
    if not (recipe.backend.startswith("roc") or amd):
        return ()
    devices, out = dict(host.devices), []
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if var in devices:
            devices.setdefault("ROCR_VISIBLE_DEVICES", devices.pop(var))
            out.append((var, None))
    return (*out, ("ROCR_VISIBLE_DEVICES", devices["ROCR_VISIBLE_DEVICES"])) if out else ()


def hidden(host: Host, environ: tuple) -> bool:
    """No GPU here, or one hidden by a device variable set to nothing or -1."""
    devices = dict(host.devices) | dict(environ)
    return not host.gpu or any(devices.get(var) in ("", "-1") for var in devices)


def resolved(host: Host, path: str) -> str:
    """path from host's current folder, links kept (realpath -s)."""
    return os.path.normpath(os.path.join(host.cwd, path))


def at_of(options: Options, host: Host) -> str:
    """The script's path from the current folder, as it lies in the base's tree."""
    return os.path.relpath(resolved(host, split(options)[1][0]), host.cwd)


def base_of(options: Options, host: Host, folder: str, at: str) -> tuple[str, str]:
    """Where an A/B run's base runs and its script there."""
    if options.base_script:
        return ".", options.base_script
    if host.git_prefix is None:  # a folder holding a copy of the tree
        return options.rev, at
    return os.path.normpath(os.path.join(folder, "tree", host.git_prefix)), at


def trials_of(options: Options, recipe: Recipe, host: Host, folder: str) -> tuple:
    start, script, alone = split(options)
    launch = [*start, os.path.join(host.here, "proton_launch.py")]
    launch += ([] if alone else ["--ranked"]) + (["--env"] if recipe.mode == "env" else [])
    ab = bool(options.rev or options.base_script)
    if ab and "/" in launch[0]:  # the base runs elsewhere
        launch[0] = resolved(host, launch[0])
    base = base_of(options, host, folder, at_of(options, host))
    count = options.trials or (AB_TRIALS if ab else recipe.trials)
    out = []
    for k in range(1, count + 1):
        for side in ("base", "now")[:: 1 if k % 2 else -1] if ab else ("",):
            inside = folder if count == 1 and not ab else os.path.join(folder, side, f"trial{k}")
            cwd, words = base if side == "base" else (".", script[0])
            command = (*launch, "-n", os.path.join(inside, "proton"), *flags(recipe), words)
            out.append(Trial(side, k, inside, cwd, (*command, *script[1:])))
    return tuple(out)


def summariser(options: Options, host: Host, folder: str, sides: tuple) -> tuple[str, ...]:
    """parse_hatchet.py's command: the run summarised, or its two sides (now, base) compared."""
    out = [options.python, os.path.join(host.here, "parse_hatchet.py")]
    if sides:
        out += [sides[0], "--diff", sides[1], "--table", "-o", os.path.join(folder, "compare.json")]
        out += ["--markdown", os.path.join(folder, "compare.md")]
    else:
        out += [folder, "-o", os.path.join(folder, "summary.json")]
    out += ["--html", os.path.join(folder, "report.html")]
    out += [*options.gate] if sides else ["--table"]
    out += ["--world-size", str(options.world_size)] if options.world_size else []
    ceiling = os.path.join(no_option(options.results), "ceiling")
    return (*out, *(["--ceiling", ceiling] if host.ceiling else []))


def no_option(path: str) -> str:
    """A folder named with a leading - would reach Proton and the summariser as an option."""
    return f"./{path}" if path.startswith("-") else path


def folders(options: Options, host: Host, kind: str) -> tuple[str, str]:
    """The run's folder and where its latest and previous links move ("" for none)."""
    links = os.path.join(no_option(options.results), kind)
    if options.output:
        return no_option(options.output), ""
    return os.path.join(links, host.stamp), links


def compare_plan(options: Options, host: Host) -> Plan:
    folder, links = folders(options, host, "compare")
    summarise = summariser(options, host, folder, options.compare)
    return Plan("compare", folder, links, "", (), summarise)


def make_plan(options: Options, recipe: Recipe, host: Host) -> Plan:
    """The run that options ask for, under recipe, on host; Refused for a command that
    runs no .py script. A pure function: it reads and writes nothing."""
    if options.compare:
        return compare_plan(options, host)
    ab = bool(options.rev or options.base_script)
    kind = kind_of(recipe, ab)
    folder, links = folders(options, host, kind)
    if ab:
        folder = resolved(host, folder)
    trials = trials_of(options, recipe, host, folder)
    sides = tuple(os.path.join(folder, side) for side in ("now", "base")) if ab else ()
    backend, mode = given(recipe)
    alone = split(options)[2]
    provenance = dict(backend_asked=recipe.backend, backend_used=backend)
    provenance.update(mode_asked=recipe.proton_mode, mode_used=mode, run_id=host.stamp)
    provenance["world_size"] = options.world_size or (1 if alone else None)
    records = [os.path.join(side, "provenance.json") for side in sides or (folder,)]
    environ = moves(recipe, host)
    start = os.path.basename(options.command[0])
    no_gpu = hidden(host, environ) and (start.startswith("python") or start == "torchrun")
    tree = os.path.join(folder, "tree") if ab and host.git_prefix is not None else ""
    return Plan(
        kind,
        folder,
        links,
        "hatchet" if recipe.data == "tree" else "chrome_trace",
        trials,
        summariser(options, host, folder, sides),
        provenance,
        tuple(records),
        environ,
        tree,
        base_of(options, host, folder, at_of(options, host)) if ab else (),
        no_gpu,
    )


def quoted(word: str) -> str:
    """word as bash reads it back, on one line whatever it holds, as printf %q quotes it."""
    return shlex.quote(word) if word.isprintable() else f"$'{''.join(map(escaped, word))}'"


def escaped(c: str) -> str:
    if c in "\\'":
        return "\\" + c
    if c.isprintable():
        return c
    if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte of a name that is not UTF-8, as Python keeps it
        return f"\\x{ord(c) - 0xDC00:02x}"
    return f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\U{ord(c):08x}"


def moved(plan: Plan) -> list[str]:
    """The device variables' moves, as commands of bash."""
    return [f"unset {v}" if x is None else f"export {v}={quoted(x)}" for v, x in plan.environ]


def lines(plan: Plan) -> list[str]:
    """The plan as --dry-run prints it: the run's folder, the device variables' moves, each
    command that runs, shell-quoted (cd FOLDER && where it runs elsewhere), and the files
    the driver itself writes."""
    out = [f"# run folder: {quoted(plan.folder)}", *moved(plan)]
    for trial in plan.trials:
        where = "" if trial.cwd == "." else f"cd {quoted(trial.cwd)} && "
        out.append(where + " ".join(map(quoted, trial.command)))
    out += [f"# provenance: {quoted(record)}" for record in plan.records if plan.trials]
    return [*out, " ".join(map(quoted, plan.summarise))]
