"""profile.sh's driver, `python profile_run.py PYTHON [profile.sh's arguments]`, run by the
workload's interpreter (PYTHON): reads the arguments and the recipe once, makes the run's
plan (summary/plan.py), and prints it (--dry-run) or runs it: each trial as a child that
signals reach, the provenance, the summariser, the links. docs/profiling.md draws it."""

import contextlib
import glob
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # summary/, under PYTHONSAFEPATH too
from summary import Refused  # noqa: E402
from summary.plan import (  # noqa: E402
    Host,
    Options,
    Plan,
    lines,
    make_plan,
    moved,
    parse,
    plain,
    round_of,
    shares,
)
from summary.recipe import load  # noqa: E402

DEVICE_FILES = {"amd": "/dev/kfd", "nvidia": "/dev/nvidiactl"}
DEVICES = [f"{vendor}_VISIBLE_DEVICES" for vendor in ("CUDA", "HIP", "ROCR")]
SIGNALS = {signal.SIGHUP: 129, signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's statuses
NO_CAPTURE = (
    "the run wrote no profile (Triton 3.6 writes none when the script raises or calls "
    "sys.exit; in env mode the script calls proton.start() and proton.finalize())"
)
SUMMARISER_NEEDS = ("msgspec", "cxxfilt", "plotly")  # of requirements.txt
# The distributions a platform installs them as (ROCm's wheels name Triton their own way).
PACKAGES = {"triton": ["triton", "pytorch-triton-rocm", "pytorch-triton"], "torch": ["torch"]}


class Failed(Exception):
    """The run ends with status (args[0]), after its line (args[1])."""


def say(line: str, file: object = sys.stderr) -> None:
    """One line, each control character shown as ?, as ls shows names."""
    print("".join(c if c.isprintable() else "?" for c in f"profile.sh: {line}"), file=file)


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def look(options: Options) -> Host:
    """This machine, as the plan needs it; Refused for a --compare run that is not there or
    a REV that is neither a folder nor a revision of a git checkout here."""
    for run in (run for run in options.compare if not os.path.exists(run)):
        raise Refused(f"--compare: no run {run[:200]}")
    rev, prefix, copy = options.rev, None, ""
    place = git("rev-parse", "--show-prefix").stdout.rstrip("\n") if rev else ""  # cwd's
    if rev and os.path.isdir(rev):  # a copy of the tree: the base runs at cwd's place in it
        copy = os.path.normpath(os.path.join(rev, place))
    elif rev:
        if (found := git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")).returncode:
            said = "".join(f" (git: {line[:200]})" for line in found.stderr.splitlines()[:1])
            raise Refused(
                f"{rev[:100]} is neither a folder nor a revision of a git checkout here{said}"
            )
        prefix = place
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    assumed = os.environ.get("PROFILE_ASSUME_GPU", "")
    seen = [vendor for vendor, path in DEVICE_FILES.items() if os.path.exists(path)]
    vendor = assumed if assumed in DEVICE_FILES else (seen or [""])[-1]
    devices = tuple((var, os.environ[var]) for var in DEVICES if var in os.environ)
    here, ceiling = os.path.dirname(os.path.abspath(__file__)), plain(options.results) + "/ceiling"
    ceiling = ceiling if os.path.isdir(ceiling) else ""
    gpu = bool(vendor) or assumed == "1"
    top = os.path.normpath(os.path.join(os.getcwd(), *[".."] * place.count("/"))) if rev else ""
    return Host(here, os.getcwd(), stamp, vendor == "amd", gpu, devices, ceiling, prefix, copy, top)


def refuse(plan: Plan, options: Options) -> None:
    """What would fail once the trials started, refused before: a base script not there; but
    for a dry run, a summariser's package missing, a command that is no program, no GPU
    visible."""
    cwd, script = plan.base or (".", "")
    archived = plan.tree and git("cat-file", "-e", f"{options.rev}:./{script}").returncode == 0
    if plan.base and not (archived or os.path.isfile(os.path.join(cwd, script))):
        why = f"{options.rev[:100]} has no" if options.rev else "no base script"
        raise Refused(f"{why} {script[:200]}")
    if options.dry_run:
        return
    # parse_hatchet.py summarises in this interpreter once the trials have run.
    if missing := [name for name in SUMMARISER_NEEDS if importlib.util.find_spec(name) is None]:
        raise Refused(f"{sys.executable[:200]} has no {', '.join(missing)} (make setup)")
    if not plan.trials:
        return
    if shutil.which(options.command[0]) is None:  # a shell's builtin, say
        raise Refused(f"the command must start with a program, not {options.command[0][:30]}")
    if plan.no_gpu:
        raise Refused("no GPU visible: Proton needs one (check the script alone with: make run)")


def make_folder(plan: Plan, options: Options, children: "Children") -> str:
    """The run's folder, made without -p (no other run has it), and the topmost folder made
    for it; refuses a latest or previous that is not a link: only its own links are replaced."""
    for name in ("latest", "previous") if plan.links else ():
        if os.path.exists(link := os.path.join(plan.links, name)) and not os.path.islink(link):
            raise Refused(f"{link[:200]} is not a link: move it away (nothing is replaced)")
    top = plan.folder
    while (up := os.path.dirname(top)) and not os.path.lexists(up):
        top = up
    try:
        os.makedirs(os.path.dirname(plan.folder) or ".", exist_ok=True)
        os.mkdir(plan.folder)
    except OSError:
        if options.output and os.path.lexists(plan.folder):
            why = f"--output {plan.folder[:200]} exists: name a new folder (nothing is cleared)"
            raise Refused(why) from None
        raise Refused(f"cannot make {plan.folder[:200]}") from None
    if plan.tree:
        unpack(plan, options.rev, top, children)
    return top


def unpack(plan: Plan, rev: str, top: str, children: "Children") -> None:
    """The revision, unpacked where the base runs, each step a child that a signal reaches
    as in a trial; where it is not, what it made is removed and the run refused (or ended
    by the signal)."""
    os.mkdir(plan.tree)
    checkout = git("rev-parse", "--show-toplevel").stdout.rstrip("\n")
    archive = os.path.abspath(f"{plan.tree}.tar")  # the steps run in the tree
    steps = (("git", "-C", checkout, "archive", "-o", archive, rev), ("tar", "-xf", archive))
    done = False
    try:
        done = not any(children.run(step, plan.tree) for step in steps)
    except Failed as e:  # a signal
        raise Failed(
            e.args[0], f"stopped by {children.signal.name}: {rev[:100]} was not unpacked"
        ) from None
    finally:
        if os.path.exists(archive):
            os.remove(archive)
        if not done:  # its own, half unpacked
            shutil.rmtree(plan.tree)
            remove_empty(plan.folder, top)
    if not done:
        raise Refused(f"{rev[:100]} could not be unpacked (git archive, then tar)")


def remove_empty(folder: str, top: str) -> None:
    """The folders this run made, folder up to top, removed while empty: a usage error
    leaves no run folder."""
    while os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)
        if folder == top:
            return
        folder = os.path.dirname(folder)


def link(plan: Plan) -> None:
    """latest to the run, previous to the run latest named: each link made beside, then
    renamed, never half made; latest first, so that a run stopped between the two leaves
    previous at an older run, never at latest's."""
    latest = os.path.join(plan.links, "latest")
    last = os.readlink(latest) if plan.links and os.path.islink(latest) else None
    for name, target in (("latest", os.path.basename(plan.folder)), ("previous", last)):
        if plan.links and target is not None:
            beside = os.path.join(plan.links, f".{name}.{os.getpid()}")
            os.symlink(target, beside)
            os.replace(beside, os.path.join(plan.links, name))


def foreground() -> bool:
    """Whether this process is in its terminal's foreground group."""
    try:
        with open("/dev/tty", "rb", buffering=0) as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


class Children:
    """Runs each command as a child on this terminal and waits for it. The first signal of
    SIGNALS goes on to the child and ends the run, once the child has ended, with Failed."""

    def __init__(self, folder: str) -> None:
        self.folder, self.child, self.signal = folder, None, None
        for sig in SIGNALS:
            if signal.getsignal(sig) != signal.SIG_IGN:  # ignored on entry: stays so, as in bash
                signal.signal(sig, self.caught)

    def caught(self, signum: int, frame: object) -> None:
        for sig in SIGNALS:  # one ends the run
            signal.signal(sig, signal.SIG_IGN)
        self.signal = signal.Signals(signum)
        self.forward()

    def forward(self) -> None:
        """The signal to the child, once. Ctrl-C reaches every process of the terminal's
        foreground group, the command too: a second SIGINT would cut short what it does on
        the first (Proton writes its capture)."""
        child, self.child = self.child, None
        if child and self.signal and (self.signal != signal.SIGINT or not foreground()):
            child.send_signal(self.signal)

    def run(self, command: tuple, cwd: str = ".", env: dict | None = None) -> int:
        """The command's exit status, as a shell gives it (128 + N: killed by signal N)."""
        if self.signal is None:
            child = self.child = subprocess.Popen(command, cwd=cwd, env=env)
            if self.signal:  # caught while the child started
                self.forward()
            status = child.wait()
        if self.signal is not None:
            why = f"the command ended; {self.folder[:200]} has no summary"
            raise Failed(SIGNALS[self.signal], f"stopped by {self.signal.name}: {why}")
        return 128 - status if status < 0 else status


def versions() -> dict:
    """The installed Triton's and torch's versions, from their packages' metadata: importing
    either would cost the run seconds."""
    found = importlib.metadata.distributions
    return {
        package: next((d.version for name in names for d in found(name=name)), None)
        for package, names in PACKAGES.items()
    }


def write_provenance(plan: Plan) -> None:
    """provenance.json from the plan, into each new file it names (written once)."""
    record = json.dumps(versions() | dict(plan.provenance), indent=2) + "\n"
    for path in plan.records:
        with open(path, "x", encoding="utf-8") as f:
            f.write(record)


def execute(plan: Plan, options: Options) -> int:
    """Runs the plan in the folder it makes; 0, or the summariser's status (2: a usage
    error, its empty folders removed)."""
    children = Children(plan.folder)
    top = make_folder(plan, options, children)
    try:
        status = run_plan(plan, children)
    except (Refused, OSError):
        remove_empty(plan.folder, top)
        raise
    if status == 2:
        remove_empty(plan.folder, top)
    return status


def run_plan(plan: Plan, children: "Children") -> int:
    """An A/B's warm-up, then the rounds, more while rows are unsettled, the provenance,
    the summariser; 0, or the summariser's status. Where it summarised, or compared (3: a
    regression), latest moves."""
    if plan.environ:
        say(f"warning: AMD: {' '.join(moved(plan))}")
    for var, value in plan.environ:
        if value is None:
            del os.environ[var]
        else:
            os.environ[var] = value
    if len(plan.sides) > 1:  # compiling and autotuning would slow the first trial alone
        run_rounds(plan, children, 0, 0)
        say("warm-up: each side ran once first, its capture set aside in warmup/")
        check_imports(plan)
    run_rounds(plan, children, 1, count := plan.count)
    share, looks = shares(plan.count, plan.most), 1
    while count < plan.most and (rows := unsettled_rows(plan, share[looks - 1])):
        more, looks = min(2 * count, plan.most), looks + 1
        names = ", ".join(row.label() for row in rows)
        say(f"unsettled after {count} trials a side: {names[:200]}; rounds up to {more}")
        run_rounds(plan, children, count + 1, count := more)
    if len(plan.sides) > 1:
        say(f"{count} trials a side, compared {looks} time{'s' * (looks > 1)}")
    write_provenance(plan)
    divisor = share[looks - 1]
    status = children.run((*plan.summarise, *("--alpha-divisor", str(divisor)) * (divisor > 1)))
    compared = plan.kind in ("ab", "compare")
    if status in ((0, 3) if compared else (0,)):
        link(plan)
    if status == 0 and not compared:
        say(f"wrote {plan.folder}/summary.json", sys.stdout)
    return status


def run_rounds(plan: Plan, children: Children, first: int, last: int) -> None:
    """Rounds first to last (0: the warm-up); order records an A/B's timed trials."""
    for trial in (trial for k in range(first, last + 1) for trial in round_of(plan, k)):
        os.makedirs(trial.folder, exist_ok=True)
        if trial.side and trial.number:
            with open(os.path.join(plan.folder, "order"), "a", encoding="utf-8") as f:
                f.write(f"{trial.side} trial{trial.number}\n")
        path = os.pathsep.join(filter(None, (trial.root, os.environ.get("PYTHONPATH"))))
        env = os.environ | {"PYTHONPATH": path} if trial.root else None
        if status := children.run(trial.command, trial.cwd, env):
            raise Failed(status, f"error: the command exited {status}; no summary written")
        found = glob.glob(os.path.join(glob.escape(trial.folder), f"proton*.{plan.capture}*"))
        if not found:  # .hatchet, .hatchet_msgpack (format=), any ranked or gzipped
            raise Failed(1, f"error: no {trial.folder[:200]}/proton.{plan.capture}: {NO_CAPTURE}")


def check_imports(plan: Plan) -> None:
    """Refused where the warm-up found a side's module in the other side's tree, or a
    package its own tree holds installed instead: that side would not run its own code."""
    warmup = round_of(plan, 0)
    roots = [os.path.join(os.path.realpath(trial.root), "") for trial in warmup if trial.root]
    for trial in warmup if len(roots) == 2 else ():
        with open(os.path.join(trial.folder, "imports.json"), encoding="utf-8") as f:
            imported = json.load(f)
        own = os.path.join(os.path.realpath(trial.root), "")
        for module, file in sorted(imported["own"].items()):
            real = os.path.realpath(file)
            tree = max((root for root in roots if real.startswith(root)), key=len, default=None)
            if tree not in (None, own):
                other = "the working tree" if trial.side == "base" else "the base's tree"
                why = "an editable install (pip install -e) or an absolute PYTHONPATH puts it first"
                raise Refused(
                    f"the {trial.side} imported {module} from {file[:200]}, {other}: {why}"
                )
        for module, file in sorted(imported["installed"].items()):
            if holds(own, module):
                why = "an installed copy runs on both sides: uninstall it, PYTHONPATH=src if there"
                raise Refused(f"the {trial.side} imported {module} from {file[:200]}: {why}")


def holds(root: str, module: str) -> bool:
    """Whether the tree at root has the top-level module, at its top or in src/."""
    names = (f"{module}.py", os.path.join(module, "__init__.py"))
    return any(os.path.isfile(os.path.join(root, *top, n)) for top in ((), ("src",)) for n in names)


def unsettled_rows(plan: Plan, divisor: int) -> list:
    """The rows an A/B's comparison so far leaves unsettled, its rate divided by divisor;
    none where it cannot compare (the final comparison says why)."""
    import parse_hatchet as ph
    from summary.compare import unsettled

    args = ph.parser().parse_args([*plan.summarise[2:], "--alpha-divisor", str(divisor)])
    try:  # its warnings are the final comparison's to say, once
        with contextlib.redirect_stderr(io.StringIO()):
            done, problem, found = ph.summaries(
                args.paths, args.world_size, ph.ceilings(args.ceiling)
            )
        diff, problem = (
            (None, problem) if problem else ph.compare_with_base(args, found, done, set())
        )
    except Refused:
        return []
    return [] if problem else unsettled(diff)


def main() -> int:
    if not getattr(sys.flags, "safe_path", False):
        # This folder came first: after the installed packages, a yaml.py here is not
        # imported for PyYAML (PYTHONPATH still counts; -I would hide it).
        sys.path.append(sys.path.pop(0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed stdout ends it, as it ends bash
    try:
        if len(sys.argv) < 2:
            raise Refused("run through profile.sh, which names the workload's interpreter")
        options = parse(sys.argv[1], sys.argv[2:])
        recipe = None if options.compare else load(options.recipe, dict(options.overrides))
        plan = make_plan(options, recipe, look(options))
        refuse(plan, options)
        if options.dry_run:
            print("\n".join(lines(plan)))
            return 0
        return execute(plan, options)
    except (Refused, OSError) as e:  # OSError: a file of the run's that cannot be written
        say(f"error: {e}")
        return 2
    except Failed as e:
        say(e.args[1])
        return e.args[0]


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
