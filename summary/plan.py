"""profile.sh's run as one value: its arguments read into Options (parse), and the Plan a
pure function (make_plan) makes of them, the Recipe and the Host. profile_run.py prints a
plan (lines) or runs it; docs/profiling.md tells each part."""

import os
import shlex
from dataclasses import dataclass

from summary import Refused
from summary.recipe import MAX_TRIALS, Recipe
from summary.run import compile_only, number

# A run's kind, by its data and whether it runs the instrumentation backend.
KINDS = {("tree", False): "profile", ("trace", False): "trace", ("tree", True): "intra"}
KINDS["trace", True] = "intra-trace"
# The options that take a value: the recipe's for one run, the comparison's gate (as
# parse_hatchet.py takes it: a number >= 0 below 1e15, or a regex), whole numbers up to a most,
# the rest.
OVERRIDES = ("--data", "--backend", "--context", "--hook")
GATE = ("--fail-above", "--min-ms", "--only")
MOST = {"--trials": MAX_TRIALS, "--max-trials": MAX_TRIALS, "--world-size": 2**16}
AB_TRIALS, AB_MOST = 5, 20  # an A/B's trials a side, and the most while rows are unsettled
VALUED = (*OVERRIDES, *GATE, *MOST, "--recipe", "--results", "--output", "--rev", "--base-script")


@dataclass(frozen=True)
class Options:
    """profile.sh's arguments (its header tells each); python, the workload's interpreter."""

    python: str = "python3"
    command: tuple = ()
    recipe: str = "recipe.yaml"
    results: str = "profiling_results"
    output: str = ""
    overrides: tuple = ()  # (key, value) of --data, --backend, --context, --hook
    trials: int | None = None
    max_trials: int | None = None
    rev: str = ""
    base_script: str = ""
    gate: tuple = ()
    compare: tuple = ()
    world_size: int | None = None
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not (self.compare or self.command):
            raise Refused("no command: give one after -- (e.g. -- python mine.py)")
        if self.gate and not (self.rev or self.base_script or self.compare):
            raise Refused(f"{self.gate[0]} needs a comparison: --rev, --base-script or --compare")
        if self.max_trials and not (self.rev or self.base_script):
            raise Refused("--max-trials needs an A/B run: --rev or --base-script")
        if self.max_trials and self.max_trials < (first := self.trials or AB_TRIALS):
            raise Refused(f"--max-trials is below the {first} trials a side the run starts with")
        if self.max_trials and "--fail-above" not in self.gate:
            raise Refused(
                "--max-trials needs --fail-above: rounds are added for rows it could fail"
            )


@dataclass(frozen=True)
class Host:
    """This machine, as a plan needs it."""

    here: str  # the tooling's folder
    cwd: str
    stamp: str  # the run's id
    amd: bool = False  # AMD's GPUs here, or assumed
    gpu: bool = False  # a GPU visible, or assumed
    devices: tuple = ()  # the *_VISIBLE_DEVICES set, (name, value)
    ceiling: str = ""  # RESULTS/ceiling, where it exists
    git_prefix: str | None = None  # where cwd lies in its checkout, for a REV not a folder
    copy: str = ""  # for a REV that is a folder, cwd's place in that copy of the checkout
    top: str = ""  # for a REV, the checkout cwd lies in (cwd, outside any)


@dataclass(frozen=True)
class Trial:
    side: str  # "", or in an A/B run "base" or "now"
    number: int
    folder: str
    cwd: str
    command: tuple
    root: str = ""  # put first on PYTHONPATH: its side's tree, in a run against a REV


@dataclass(frozen=True)
class Plan:
    """The run, as lines() prints it, and what it checks before it starts."""

    kind: str
    folder: str
    links: str  # where latest and previous move ("": nowhere)
    capture: str = ""  # the captures' extension
    start: tuple = ()  # each trial's launch, the recipe's flags, the script's words
    sides: tuple = ()  # (side, cwd, script, root) of each, base first
    count: int = 0  # the rounds run first
    most: int = 0  # the rounds an A/B may run while rows are unsettled
    summarise: tuple = ()
    provenance: tuple = ()  # (key, value): a record, as the plan's other values, frozen
    records: tuple = ()  # the provenance's files
    environ: tuple = ()  # the device variables set (None: unset)
    tree: str = ""  # where a revision is unpacked
    base: tuple = ()  # where the base runs, and its script
    no_gpu: bool = False  # the command starts here, and no GPU is visible

    @property
    def trials(self) -> tuple:
        """The trials of the rounds run first, an A/B's warm-up before them."""
        first = 0 if len(self.sides) > 1 else 1
        return tuple(trial for k in range(first, self.count + 1) for trial in round_of(self, k))

    @property
    def processes(self) -> tuple:
        """Every command the run starts, in order (a revision's git archive apart)."""
        return (*(trial.command for trial in self.trials), self.summarise)


def parse(python: str, argv: list) -> Options:
    """profile.sh's arguments as Options; Refused for what they cannot mean."""
    settings, overrides, gate, words = {}, [], [], list(argv)
    while words and (word := words.pop(0)) != "--":
        key = word[2:].replace("-", "_")
        if word == "--dry-run":
            settings[key] = True
        elif word == "--any-device":
            gate.append(word)
        elif word == "--compare":
            settings[key] = (take(word, words), take(word, words))
        elif word not in VALUED:
            raise Refused(f"unknown argument: {word[:60]} (see --help)")
        elif word in OVERRIDES:
            overrides.append((key, take(word, words)))
        elif word in GATE:
            gate += [word, take(word, words)]
        else:
            settings[key] = take(word, words)
    return Options(python, tuple(words), overrides=tuple(overrides), gate=tuple(gate), **settings)


def take(option: str, words: list) -> str | int:
    """The word after option, taken from words (a whole number for those of MOST); Refused
    where there is none, or none that option takes."""
    if not words or words[0] in ("", "--"):  # -- ends the options: the command follows
        raise Refused(f"{option} needs a value" + ", not an empty one" * (words[:1] == [""]))
    word = words.pop(0)
    if option == "--only":
        return compile_only(word).pattern
    if option in GATE and ((value := number(word)) is None or value >= 1e15):
        raise Refused(f"{option} takes a number >= 0, not {word[:30]}")
    digits = len(word) < 7 and word.isascii() and word.isdecimal() and word[0] != "0"
    if option in MOST and not (digits and int(word) <= MOST[option]):
        raise Refused(f"{option} takes 1 to {MOST[option]}")
    return int(word) if option in MOST else word


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
    pairs = [("-c", recipe.context), ("-d", recipe.data), ("-b", backend)]
    pairs += [("-k", recipe.hook), ("--mode", mode)]
    return [word for pair in pairs if pair[1] not in (None, "auto") for word in pair]


def moves(recipe: Recipe, host: Host) -> tuple:
    """Proton's AMD backends that intercept queues refuse HIP_ and CUDA_VISIBLE_DEVICES and
    honour ROCR_VISIBLE_DEVICES: the selection moves there, as aorta moves it."""
    amd = recipe.backend.startswith("roc") or (recipe.backend == "auto" and host.amd)
    devices = dict(host.devices)
    moved = [var for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if var in devices]
    if not (amd and moved):
        return ()
    rocr = devices.get("ROCR_VISIBLE_DEVICES", devices[moved[0]])
    return (*((var, None) for var in moved), ("ROCR_VISIBLE_DEVICES", rocr))


def plain(path: str) -> str:
    """A folder named with a leading - would reach Proton and the summariser as an option."""
    return f"./{path}" if path.startswith("-") else path


def summariser(options: Options, host: Host, folder: str, sides: tuple) -> tuple:
    """parse_hatchet.py's command: the run summarised, or its two sides (now, base) compared."""
    html = ["--html", os.path.join(folder, "report.html")]
    if sides:
        out = [sides[0], "--diff", sides[1], "--table", "-o", os.path.join(folder, "compare.json")]
        out += ["--markdown", os.path.join(folder, "compare.md"), *html, *options.gate]
    else:
        out = [folder, "-o", os.path.join(folder, "summary.json"), *html, "--table"]
    out += ["--world-size", str(options.world_size)] if options.world_size else []
    out += ["--ceiling", host.ceiling] if host.ceiling else []
    return (options.python, os.path.join(host.here, "parse_hatchet.py"), *out)


def launched(options: Options, recipe: Recipe, host: Host, ab: bool) -> tuple:
    """The words before the script (its interpreter or launcher, proton_launch.py and its
    options), the script and its words, and whether the interpreter runs it alone."""
    command = list(options.command)
    start = next((command[:at] for at, word in enumerate(command) if word.endswith(".py")), [])
    if not start:
        raise Refused("the command must run a .py script through its interpreter or launcher")
    # The interpreter alone, its own options (-u, -X dev) included, unless it runs a
    # launcher's module (-m torch.distributed.run).
    alone = start[0] == options.python and "-m" not in start
    launch = [*start, os.path.join(host.here, "proton_launch.py")]
    launch += ([] if alone else ["--ranked"]) + (["--env"] if recipe.mode == "env" else [])
    if ab and "/" in launch[0]:  # the base runs elsewhere: the interpreter by its whole path
        launch[0] = os.path.normpath(os.path.join(host.cwd, launch[0]))
    return launch, command[len(start) :], alone


def round_of(plan: Plan, k: int) -> tuple:
    """Round k's trials: in an A/B run one a side, base first in odd rounds and in the
    warm-up (k 0, into RUN/warmup/<side>, recording its imports); else trial k."""
    launch, flags, args = plan.start
    trials = []
    for side, cwd, script, root in plan.sides[:: -1 if k and k % 2 == 0 else 1]:
        inside = os.path.join(plan.folder, side, f"trial{k}")
        inside = plan.folder if plan.count == 1 and not side else inside
        inside = inside if k else os.path.join(plan.folder, "warmup", side)
        imports = () if k else ("--imports", os.path.join(inside, "imports.json"))
        name = ("-n", os.path.join(inside, "proton"))
        trials.append(
            Trial(side, k, inside, cwd, (*launch, *imports, *name, *flags, script, *args), root)
        )
    return tuple(trials)


def make_plan(options: Options, recipe: Recipe | None, host: Host) -> Plan:
    """The run options ask for, under recipe (None for a --compare), on host; Refused for a
    command that runs no .py script. A pure function: it reads and writes nothing."""
    ab = bool(options.rev or options.base_script)
    kind = "compare" if options.compare else "ab" if ab else ""
    kind = kind or KINDS[recipe.data, recipe.backend == "instrumentation"]
    links = "" if options.output else os.path.join(plain(options.results), kind)
    folder = plain(options.output) or os.path.join(links, host.stamp)
    if options.compare:
        return Plan(
            kind, folder, links, summarise=summariser(options, host, folder, options.compare)
        )
    if ab and recipe.backend == "instrumentation":
        raise Refused("an A/B run compares times, not the instrumentation backend's cycles")
    if ab and recipe.data == "trace" and "--any-device" not in options.gate:
        raise Refused("a trace records no device: an A/B of traces needs --any-device")
    if ab:  # the base runs in another folder: the run's by its whole path
        folder = os.path.normpath(os.path.join(host.cwd, folder))
    compared = (os.path.join(folder, "now"), os.path.join(folder, "base")) if ab else ()
    launch, (script, *args), alone = launched(options, recipe, host, ab)
    at = os.path.relpath(os.path.join(host.cwd, script), host.cwd)  # in the base's folder
    tree = os.path.join(folder, "tree") if options.rev and host.git_prefix is not None else ""
    root = tree or options.rev and os.path.normpath(os.path.join(host.cwd, options.rev))
    sides = (("now" if ab else "", ".", script, root and host.top),)
    if options.base_script:
        sides = (("base", ".", options.base_script, ""), *sides)
    elif tree:  # the revision, unpacked into the run's folder
        sides = (("base", os.path.normpath(os.path.join(tree, host.git_prefix)), at, root), *sides)
    elif options.rev:  # a folder holding a copy of the tree
        sides = (("base", host.copy or options.rev, at, root), *sides)
    count = options.trials or (AB_TRIALS if ab else recipe.trials)  # whatever the recipe says
    most = (options.max_trials or max(count, AB_MOST)) if "--fail-above" in options.gate else 0
    backend, mode = given(recipe)
    provenance = dict(backend_asked=recipe.backend, backend_used=backend, run_id=host.stamp)
    provenance.update(mode_asked=recipe.proton_mode, mode_used=mode)
    provenance["world_size"] = options.world_size or (1 if alone else None)
    records = tuple(os.path.join(side, "provenance.json") for side in compared or (folder,))
    environ = moves(recipe, host)
    hidden = any(value in ("", "-1") for value in (dict(host.devices) | dict(environ)).values())
    first = os.path.basename(options.command[0])
    no_gpu = (hidden or not host.gpu) and (first.startswith("python") or first == "torchrun")
    capture = "hatchet" if recipe.data == "tree" else "chrome_trace"
    summarise = summariser(options, host, folder, compared)
    return Plan(
        kind, folder, links, capture, (tuple(launch), tuple(flags(recipe)), tuple(args)), sides,
        count, max(count, most), summarise, tuple(provenance.items()), records, environ, tree,
        sides[0][1:3] if ab else (), no_gpu,
    )  # fmt: skip


def shares(count: int, most: int) -> list:
    """Alpha spending over an A/B's looks: the k-th comparison's rate divided by 2^k, the
    last one the rounds may reach taking the rest (looks of 5, 10, 20 trials a side: 2, 4,
    4), so that 1/2 + 1/4 + 1/4 = 1 and false alarms over the whole run stay within alpha."""
    looks = 1
    while count < most:
        count, looks = min(2 * count, most), looks + 1
    return [1] if looks == 1 else [2**k for k in range(1, looks)] + [2 ** (looks - 1)]


def quoted(word: str) -> str:
    """word as bash reads it back, on one line whatever it holds (as printf %q quotes it)."""
    if word.isprintable():
        return shlex.quote(word)
    raw = word.encode("utf-8", "surrogateescape")  # a name's bytes, UTF-8 or not
    escaped = "".join(chr(b) if 31 < b < 127 and b not in b"\\'" else f"\\x{b:02x}" for b in raw)
    return f"$'{escaped}'"


def lines(plan: Plan) -> list:
    """The plan as --dry-run prints it: the run's folder, the device variables' moves, each
    command (cd FOLDER && where it runs elsewhere), the provenance's files, the summariser."""
    out = [f"# run folder: {quoted(plan.folder)}", *moved(plan)]
    out += ["# warm-up: each side runs once first, its capture set aside"] * (len(plan.sides) > 1)
    for trial in plan.trials:
        where = "" if trial.cwd == "." else f"cd {quoted(trial.cwd)} && "
        path = (
            f"PYTHONPATH={quoted(trial.root)}${{PYTHONPATH:+:$PYTHONPATH}} " if trial.root else ""
        )
        out.append(where + path + " ".join(map(quoted, trial.command)))
    if plan.most > plan.count:
        out.append(f"# more rounds, up to {plan.most} a side, while the gate is unsettled")
    out += [f"# provenance: {quoted(record)}" for record in plan.records]
    return [*out, " ".join(map(quoted, plan.summarise))]


def moved(plan: Plan) -> list:
    """The device variables' moves, as bash's commands."""
    return [f"unset {v}" if x is None else f"export {v}={quoted(x)}" for v, x in plan.environ]
