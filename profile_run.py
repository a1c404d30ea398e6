"""profile.sh's driver, run by the workload's interpreter: reads the command line and the
recipe once, makes the run's plan (summary/plan.py), and prints it (--dry-run) or runs it:
each trial's command as a child that signals reach, the provenance, the summariser, the
latest and previous links. profile.sh's header tells the arguments and exit statuses.

    python profile_run.py PYTHON [profile.sh's arguments]

PYTHON: the interpreter word profile.sh found in the command (the one running this).
"""

import glob
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # summary/, under PYTHONSAFEPATH too

from summary.plan import MAX_WORLD, Host, Options, Plan, lines, make_plan, moved  # noqa: E402
from summary.recipe import MAX_TRIALS, Recipe, Refused, load  # noqa: E402

VALUED = ["--recipe", "--results", "--output", "--data", "--backend", "--context", "--hook"]
VALUED += ["--trials", "--rev", "--base-script", "--world-size", "--fail-above", "--min-ms"]
GATE = ("--fail-above", "--min-ms", "--any-device")
SIGNALS = {signal.SIGHUP: 129, signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's statuses
# The distributions a platform installs them as (ROCm's wheels name Triton their own way).
PACKAGES = {"triton": ["triton", "pytorch-triton-rocm", "pytorch-triton"], "torch": ["torch"]}
NO_CAPTURE = (
    "the run wrote no profile (Triton 3.6 writes none when the script raises or calls "
    "sys.exit; in env mode the script calls proton.start() and proton.finalize())"
)


class Failed(Exception):
    """The run ends with status, after one line saying why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class Stopped(Exception):
    """A signal of SIGNALS ended the run."""


def say(line: str, file: object = sys.stderr) -> None:
    """One line, each control character shown as ?, as ls shows names."""
    print("".join(c if c.isprintable() else "?" for c in f"profile.sh: {line}"), file=file)


def whole(option: str, value: str, most: int) -> int:
    if not (value.isascii() and value.isdecimal() and value[0] != "0" and int(value) <= most):
        raise Refused(f"{option} takes 1 to {most}")
    return int(value)


def parse(python: str, argv: list[str]) -> Options | None:
    """The Options of profile.sh's arguments; None for --help."""
    given, gate, words = {"python": python}, [], list(argv)
    while words:
        word = words.pop(0)
        if word == "--":
            given["command"] = tuple(words)
            break
        if word in ("-h", "--help"):
            return None
        if word == "--compare":
            given["compare"] = runs(words)
            continue
        if word in ("--dry-run", "--any-device"):
            given["dry_run"] = given.get("dry_run") or word == "--dry-run"
            gate += [word] if word in GATE else []
            continue
        if word not in VALUED:
            raise Refused(f"unknown argument: {word[:60]} (see --help)")
        if not words or not words[0]:
            raise Refused(f"{word} needs a value, not an empty one")
        value = words.pop(0)
        gate += [word, value] if word in GATE else []
        given[word[2:].replace("-", "_")] = value
    return typed(given, gate)


def runs(words: list[str]) -> tuple[str, str]:
    """--compare's NOW and BASE, taken from words."""
    if len(words) < 2:
        raise Refused("--compare needs two runs: NOW BASE")
    now, base = words.pop(0), words.pop(0)
    for run in (now, base):
        if not os.path.exists(run):
            raise Refused(f"--compare: no run {run[:200]}")
    return now, base


def typed(given: dict, gate: list) -> Options:
    given = {k: v for k, v in given.items() if k not in ("fail_above", "min_ms")}
    if "trials" in given:
        given["trials"] = whole("--trials", given["trials"], MAX_TRIALS)
    if "world_size" in given:
        given["world_size"] = whole("--world-size", given["world_size"], MAX_WORLD)
    options = Options(**given, gate=tuple(gate))
    if not (options.compare or options.command):
        raise Refused("no command: give one after -- (e.g. -- python mine.py)")
    if gate and not (options.rev or options.base_script or options.compare):
        raise Refused(f"{gate[0]} judges a comparison: give --rev, --base-script or --compare")
    return options


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def look(options: Options) -> Host:
    """What the plan needs to know of this machine; Refused for a REV that is neither a
    folder nor a revision of a git checkout here."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    assumed = os.environ.get("PROFILE_ASSUME_GPU", "")
    seen = {"amd": os.path.exists("/dev/kfd"), "nvidia": os.path.exists("/dev/nvidiactl")}
    vendor = assumed if assumed in seen else "nvidia" if seen["nvidia"] else "amd" * seen["amd"]
    devices = [f"{var}_VISIBLE_DEVICES" for var in ("CUDA", "HIP", "ROCR")]
    devices = tuple((var, os.environ[var]) for var in devices if var in os.environ)
    results = options.results if not options.results.startswith("-") else f"./{options.results}"
    prefix = None
    if options.rev and not os.path.isdir(options.rev):
        if git("rev-parse", "--verify", "--quiet", f"{options.rev}^{{commit}}").returncode:
            rev = options.rev[:100]
            raise Refused(f"{rev} is neither a folder nor a revision of a git checkout here")
        prefix = git("rev-parse", "--show-prefix").stdout.rstrip("\n")
    here = os.path.dirname(os.path.abspath(__file__))
    gpu = bool(vendor) or assumed == "1"
    ceiling = os.path.isdir(os.path.join(results, "ceiling"))
    return Host(here, os.getcwd(), stamp, vendor or None, gpu, devices, ceiling, prefix)


def check_base(plan: Plan, options: Options) -> None:
    """Refused where an A/B run's base lacks its script."""
    cwd, script = plan.base
    if options.base_script:
        if not os.path.isfile(script):
            raise Refused(f"no base script {script[:200]}")
    elif not plan.tree:
        if not os.path.isfile(os.path.join(cwd, script)):
            raise Refused(f"{options.rev[:200]} has no {script[:200]}")
    elif git("cat-file", "-e", f"{options.rev}:./{script}").returncode:
        raise Refused(f"{options.rev[:100]} has no {script[:200]}")


def make_folder(plan: Plan, options: Options) -> None:
    """The run's folder, made without -p (no other run has it); refuses a latest or
    previous that is not a link, as no link of its own is replaced."""
    for name in ("latest", "previous") if plan.links else ():
        link = os.path.join(plan.links, name)
        if os.path.exists(link) and not os.path.islink(link):
            raise Refused(f"{link[:200]} is not a link: move it away (nothing is replaced)")
    try:
        os.makedirs(os.path.dirname(plan.folder) or ".", exist_ok=True)
        os.mkdir(plan.folder)
    except OSError:
        if options.output and os.path.lexists(plan.folder):
            raise Refused(
                f"--output {plan.folder[:200]} exists: name a new folder (nothing is cleared)"
            ) from None
        raise Refused(f"cannot make {plan.folder[:200]}") from None


def unpack(plan: Plan, rev: str) -> None:
    """The revision's tree, git archive'd into the run's folder, where the base runs."""
    os.mkdir(plan.tree)
    top = git("rev-parse", "--show-toplevel").stdout.rstrip("\n")
    archive = subprocess.Popen(["git", "-C", top, "archive", rev], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", plan.tree], stdin=archive.stdout)
    archive.stdout.close()
    if archive.wait() or tar.returncode:
        raise Refused(f"git archive {rev[:100]} failed")


def link(plan: Plan) -> None:
    """latest to the run, previous to the run latest named: each link made beside, then
    renamed, never half made; latest first, so that a run stopped between the two leaves
    previous at an older run, never at latest's."""
    if not plan.links:
        return
    latest = os.path.join(plan.links, "latest")
    last = os.readlink(latest) if os.path.islink(latest) else None
    for name, target in (("latest", os.path.basename(plan.folder)), ("previous", last)):
        if target is not None:
            beside = os.path.join(plan.links, f".{name}.{os.getpid()}")
            os.symlink(target, beside)
            os.replace(beside, os.path.join(plan.links, name))


def foreground() -> bool:
    """Whether this process is in its terminal's foreground group."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class Children:
    """Runs each command as a child, on this terminal, and waits for it. The first signal
    of SIGNALS is forwarded to the child, and ends the run once the child has ended."""

    def __init__(self) -> None:
        self.child, self.signal, self.forwarded = None, None, False
        for sig in SIGNALS:
            if signal.getsignal(sig) != signal.SIG_IGN:  # ignored on entry: stays so, as in bash
                signal.signal(sig, self.caught)

    def caught(self, signum: int, frame: object) -> None:
        for sig in SIGNALS:  # one signal ends the run; the child is waited for
            signal.signal(sig, signal.SIG_IGN)
        self.signal = signal.Signals(signum)
        self.forward()

    def forward(self) -> None:
        # Ctrl-C reaches every process of the terminal's foreground group, the command too:
        # a second SIGINT would cut short what it does on the first (Proton writes its capture).
        if self.child is None or self.forwarded:
            return
        self.forwarded = True
        if self.signal != signal.SIGINT or not foreground():
            self.child.send_signal(self.signal)

    def run(self, command: tuple, cwd: str = ".") -> int:
        """The command's exit status, as a shell gives it (128 + N: killed by signal N)."""
        if self.signal is None:
            self.child = subprocess.Popen(command, cwd=cwd)
            if self.signal is not None:  # caught while the child started
                self.forward()
            status = self.child.wait()
        if self.signal is not None:
            raise Stopped(self.signal)
        return 128 - status if status < 0 else status


def versions() -> dict:
    """The installed Triton's and torch's versions, from their packages' metadata: importing
    either would cost the run seconds."""
    found = {
        package: (d.version for name in names for d in importlib.metadata.distributions(name=name))
        for package, names in PACKAGES.items()
    }
    return {package: next(versions, None) for package, versions in found.items()}


def write_provenance(plan: Plan) -> None:
    """provenance.json, from the plan, into each file it names: new files (a run's
    provenance is written once)."""
    record = json.dumps(versions() | plan.provenance, indent=2) + "\n"
    for path in plan.records:
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(record)
        except OSError as e:
            say(f"warning: no provenance written to {path[:200]}: {(e.strerror or str(e)).lower()}")


def trials(plan: Plan, children: Children) -> None:
    """Each trial in turn, base first in odd rounds of an A/B run; order records them."""
    for trial in plan.trials:
        os.makedirs(trial.folder, exist_ok=True)
        if trial.side:
            with open(os.path.join(plan.folder, "order"), "a", encoding="utf-8") as f:
                f.write(f"{trial.side} trial{trial.number}\n")
        if status := children.run(trial.command, trial.cwd):
            raise Failed(status, f"the command exited {status}; no summary written")
        if not glob.glob(os.path.join(glob.escape(trial.folder), f"proton*.{plan.capture}")):
            raise Failed(1, f"no {trial.folder[:200]}/proton.{plan.capture}: {NO_CAPTURE}")


def check(plan: Plan, options: Options) -> None:
    """What would fail once the run started, refused before it starts."""
    if plan.environ:
        say(f"warning: AMD: {' '.join(moved(plan))}")
    if shutil.which(options.command[0]) is None:  # a shell's builtin, say
        raise Refused(f"the command must start with a program, not {options.command[0][:30]}")
    if plan.no_gpu:
        raise Refused("no GPU visible: Proton needs one (check the script alone with: make run)")


def execute(plan: Plan, options: Options) -> int:
    """Runs the plan: 0, or the summariser's status; a comparison's 3 (a regression) too
    moves latest."""
    children = Children()
    if plan.trials:
        check(plan, options)
    make_folder(plan, options)
    if plan.tree:
        unpack(plan, options.rev)
    for var, value in plan.environ:
        os.environ.pop(var, None) if value is None else os.environ.update({var: value})
    trials(plan, children)
    if plan.trials:
        write_provenance(plan)
    status = children.run(plan.summarise)
    if status in ((0, 3) if plan.kind in ("ab", "compare") else (0,)):
        link(plan)
    if status == 0 and plan.kind not in ("ab", "compare"):
        say(f"wrote {plan.folder}/summary.json", sys.stdout)
    return status


def usage() -> str:
    """profile.sh's header: its usage and exit statuses."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile.sh")) as f:
        header = f.read().split("\nset ")[0].splitlines()[1:]
    return "\n".join(line[2:] if line.startswith("# ") else line[1:] for line in header)


def planned(options: Options) -> Plan:
    recipe = Recipe()
    if not options.compare:
        overrides = dict(data=options.data, backend=options.backend, context=options.context)
        recipe = load(options.recipe, overrides | dict(hook=options.hook))
    plan = make_plan(options, recipe, look(options))
    if plan.base:
        check_base(plan, options)
    return plan


def main(argv: list[str] | None = None) -> int:
    if argv is None and not getattr(sys.flags, "safe_path", False):
        # Run as a script, this folder came first: after the installed packages, a yaml.py
        # here is not imported for PyYAML (PYTHONPATH still counts; -I would hide it).
        sys.path.append(sys.path.pop(0))
    python, *args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed stdout ends it, as it ends bash
    try:
        options = parse(python, args)
        if options is None:
            print(usage())
            return 0
        plan = planned(options)
        if options.dry_run:
            print("\n".join(lines(plan)))
            return 0
        return execute(plan, options)
    except Refused as e:
        say(f"error: {e}")
        return 2
    except Failed as e:
        say(f"error: {e}")
        return e.status
    except Stopped as e:
        say(f"stopped by {e.args[0].name}: the command ended; {plan.folder[:200]} has no summary")
        return SIGNALS[e.args[0]]


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
