"""profile.sh's run as one value, a Plan, made by a pure function (make_plan) of the command
line (Options), the recipe (summary/recipe.py) and the Host: its folders, each trial's
command, the summariser's and the provenance. profile_run.py prints a plan or runs it."""

import os
import shlex
from dataclasses import dataclass

from summary import Refused
from summary.recipe import Recipe

# A run's kind, by its data and whether it runs the instrumentation backend.
KINDS = {("tree", False): "profile", ("trace", False): "trace", ("tree", True): "intra"}
KINDS["trace", True] = "intra-trace"


@dataclass(frozen=True)
class Options:
    """profile.sh's command line; python is the workload's interpreter, which runs the
    summariser; overrides, the (key, value) of --data, --backend, --context and --hook."""

    python: str = "python3"
    command: tuple = ()
    recipe: str = "recipe.yaml"
    results: str = "profiling_results"
    output: str = ""
    overrides: tuple = ()
    trials: int | None = None
    rev: str = ""
    base_script: str = ""
    gate: tuple = ()
    compare: tuple = ()
    world_size: int | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Host:
    """The machine as a plan needs it: the tooling's folder, the current one, the run's id;
    the GPUs' vendor (nvidia, amd, or ""), whether a GPU is there (or assumed), the
    *_VISIBLE_DEVICES set; whether RESULTS/ceiling exists; where the current folder lies
    in its git checkout (an A/B run against a revision; None where REV is a folder)."""

    here: str
    cwd: str
    stamp: str
    vendor: str = ""
    gpu: bool = False
    devices: tuple = ()
    ceiling: bool = False
    git_prefix: str | None = None


@dataclass(frozen=True)
class Trial:
    side: str  # "", or in an A/B run "base" or "now"
    number: int
    folder: str
    cwd: str
    command: tuple


@dataclass(frozen=True)
class Plan:
    """The run: its kind and folder, where latest and previous move ("": nowhere), the
    captures' extension, the trials, the summariser, the provenance and its files, the
    device variables set (None: unset), where a revision is unpacked, where the base runs
    and its script, and whether the command starts here with no GPU visible."""

    kind: str
    folder: str
    links: str
    capture: str = ""
    trials: tuple = ()
    summarise: tuple = ()
    provenance: tuple = ()  # (key, value): a record, as the plan's other values, frozen
    records: tuple = ()
    environ: tuple = ()
    tree: str = ""
    base: tuple = ()
    no_gpu: bool = False

    @property
    def processes(self) -> tuple:
        """Every command the run starts, in order (a revision's git archive apart)."""
        return (*(trial.command for trial in self.trials), self.summarise)


def given(recipe: Recipe) -> tuple:
    """The backend and mode Proton is given (None: Proton, or in env mode the script,
    picks); the instrumentation backend's mode is Proton's typed default."""
    if recipe.mode == "env":
        return None, None
    intra = "default" if recipe.backend == "instrumentation" else None
    return (None if recipe.backend == "auto" else recipe.backend), recipe.proton_mode or intra


def flags(recipe: Recipe) -> list:
    """proton_launch.py's options: what Proton is given, or in env mode what is exported."""
    env = recipe.mode == "env"
    backend, mode = (recipe.backend, recipe.proton_mode) if env else given(recipe)
    out = ["-c", recipe.context, "-d", recipe.data]
    for flag, value in (("-b", backend), ("-k", recipe.hook), ("--mode", mode)):
        out += [flag, value] if value not in (None, "auto") else []
    return out


def moves(recipe: Recipe, host: Host) -> tuple:
    """Proton's AMD backends that intercept queues refuse HIP_ and CUDA_VISIBLE_DEVICES and
    honour ROCR_VISIBLE_DEVICES: the selection moves there, as aorta moves it."""
    if not (recipe.backend.startswith("roc") or (recipe.backend, host.vendor) == ("auto", "amd")):
        return ()
    devices, out = dict(host.devices), []
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if var in devices:
            devices.setdefault("ROCR_VISIBLE_DEVICES", devices.pop(var))
            out.append((var, None))
    return (*out, ("ROCR_VISIBLE_DEVICES", devices["ROCR_VISIBLE_DEVICES"])) if out else ()


def summariser(options: Options, host: Host, folder: str, sides: tuple) -> tuple:
    """parse_hatchet.py's command: the run summarised, or its two sides (now, base) compared."""
    out = [options.python, os.path.join(host.here, "parse_hatchet.py")]
    at = lambda name: os.path.join(folder, name)  # noqa: E731
    if sides:
        out += [sides[0], "--diff", sides[1], "--table", "-o", at("compare.json")]
        out += ["--markdown", at("compare.md"), "--html", at("report.html"), *options.gate]
    else:
        out += [folder, "-o", at("summary.json"), "--html", at("report.html"), "--table"]
    out += ["--world-size", str(options.world_size)] if options.world_size else []
    ceiling = os.path.join(plain(options.results), "ceiling")
    return (*out, *(["--ceiling", ceiling] if host.ceiling else []))


def plain(path: str) -> str:
    """A folder named with a leading - would reach Proton and the summariser as an option."""
    return f"./{path}" if path.startswith("-") else path


def launched(options: Options, recipe: Recipe, host: Host, ab: bool) -> tuple:
    """The words before the script (the command's interpreter or launcher, proton_launch.py
    and its options), the script and its words, and whether the interpreter runs it alone."""
    command = list(options.command)
    start = next((command[:at] for at, word in enumerate(command) if word.endswith(".py")), [])
    if not start:
        raise Refused("the command must run a .py script through its interpreter or launcher")
    script, alone = command[len(start) :], start == [options.python]
    launch = [*start, os.path.join(host.here, "proton_launch.py")]
    launch += ([] if alone else ["--ranked"]) + (["--env"] if recipe.mode == "env" else [])
    if ab and "/" in launch[0]:  # the base runs elsewhere: the interpreter by its whole path
        launch[0] = os.path.normpath(os.path.join(host.cwd, launch[0]))
    return launch, script, alone


def rounds(launch: list, flags: list, args: list, folder: str, count: int, where: tuple) -> tuple:
    """Each trial: launch, its capture's name, flags, the script and args; count of one side,
    or in rounds count of each side of an A/B run (where: the folder the base runs in and
    its script, then now's), base first in odd rounds."""
    base, now = where
    trials = []
    for k in range(1, count + 1):
        for side in ("base", "now")[:: 1 if k % 2 else -1] if base else ("",):
            inside = folder if count == 1 and not base else os.path.join(folder, side, f"trial{k}")
            cwd, script = base if side == "base" else now
            name = ["-n", os.path.join(inside, "proton")]
            trials.append(Trial(side, k, inside, cwd, (*launch, *name, *flags, script, *args)))
    return tuple(trials)


def make_plan(options: Options, recipe: Recipe, host: Host) -> Plan:
    """The run options ask for, under recipe, on host; Refused for a command that runs no
    .py script. A pure function: it reads and writes nothing."""
    ab = bool(options.rev or options.base_script)
    kind = "compare" if options.compare else "ab" if ab else ""
    kind = kind or KINDS[recipe.data, recipe.backend == "instrumentation"]
    links = os.path.join(plain(options.results), kind)
    folder = plain(options.output) if options.output else os.path.join(links, host.stamp)
    links = "" if options.output else links
    if options.compare:
        return Plan(
            kind, folder, links, summarise=summariser(options, host, folder, options.compare)
        )
    folder = os.path.normpath(os.path.join(host.cwd, folder)) if ab else folder
    launch, script, alone = launched(options, recipe, host, ab)
    at = os.path.relpath(os.path.normpath(os.path.join(host.cwd, script[0])), host.cwd)
    tree = os.path.join(folder, "tree") if ab and host.git_prefix is not None else ""
    base = (options.rev, at) if not tree else (os.path.normpath(f"{tree}/{host.git_prefix}"), at)
    base = (".", options.base_script) if options.base_script else base
    count = options.trials or (5 if ab else recipe.trials)  # 5 a side, whatever the recipe says
    where = (base if ab else None, (".", script[0]))
    trials = rounds(launch, flags(recipe), script[1:], folder, count, where)
    sides = (os.path.join(folder, "now"), os.path.join(folder, "base")) if ab else ()
    backend, mode = given(recipe)
    provenance = dict(backend_asked=recipe.backend, backend_used=backend, run_id=host.stamp)
    provenance.update(mode_asked=recipe.proton_mode, mode_used=mode)
    provenance["world_size"] = options.world_size or (1 if alone else None)
    records = tuple(os.path.join(side, "provenance.json") for side in sides or (folder,))
    environ = moves(recipe, host)
    devices = dict(host.devices) | dict(environ)
    hidden = not host.gpu or any(value in ("", "-1") for value in devices.values())
    first = os.path.basename(options.command[0])
    no_gpu = hidden and (first.startswith("python") or first == "torchrun")
    capture = "hatchet" if recipe.data == "tree" else "chrome_trace"
    summarise = summariser(options, host, folder, sides)
    return Plan(
        kind, folder, links, capture, tuple(trials), summarise, tuple(provenance.items()),
        records, environ, tree, base if ab else (), no_gpu,
    )  # fmt: skip


def quoted(word: str) -> str:
    """word as bash reads it back, on one line whatever it holds (as printf %q quotes it)."""
    if word.isprintable():
        return shlex.quote(word)
    raw = word.encode("utf-8", "surrogateescape")  # a name's bytes, UTF-8 or not
    return (
        "$'"
        + "".join(chr(b) if 31 < b < 127 and b not in b"\\'" else f"\\x{b:02x}" for b in raw)
        + "'"
    )


def lines(plan: Plan) -> list:
    """The plan as --dry-run prints it: the run's folder, the device variables' moves, each
    command (cd FOLDER && where it runs elsewhere), the provenance's files, the summariser."""
    out = [f"# run folder: {quoted(plan.folder)}", *moved(plan)]
    for trial in plan.trials:
        where = "" if trial.cwd == "." else f"cd {quoted(trial.cwd)} && "
        out.append(where + " ".join(map(quoted, trial.command)))
    out += [f"# provenance: {quoted(record)}" for record in plan.records]
    return [*out, " ".join(map(quoted, plan.summarise))]


def moved(plan: Plan) -> list:
    """The device variables' moves, as bash's commands."""
    return [f"unset {v}" if x is None else f"export {v}={quoted(x)}" for v, x in plan.environ]
