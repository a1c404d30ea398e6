"""profile.sh's driver, run by the workload's interpreter: reads the command line and the
recipe once, makes the run's plan (summary/plan.py), and prints it (--dry-run) or runs it:
each trial as a child that signals reach, the provenance, the summariser, the links.

    python profile_run.py PYTHON [profile.sh's arguments]

PYTHON: the interpreter profile.sh found in the command. profile.sh's header tells the
arguments and exit statuses; docs/profiling.md draws the route.
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
from summary import Refused  # noqa: E402
from summary.plan import Host, Options, Plan, lines, make_plan, moved, plain  # noqa: E402
from summary.recipe import MAX_TRIALS, load  # noqa: E402

VALUED = "--recipe --results --output --data --backend --context --hook --trials --rev"
VALUED = [*VALUED.split(), "--base-script", "--world-size", "--fail-above", "--min-ms"]
MOST = {"trials": MAX_TRIALS, "world_size": 2**16}  # as the recipe and parse_hatchet.py take them
DEVICE_FILES = {"amd": "/dev/kfd", "nvidia": "/dev/nvidiactl"}
SIGNALS = {signal.SIGHUP: 129, signal.SIGINT: 130, signal.SIGTERM: 143}  # the shell's statuses
NO_CAPTURE = (
    "the run wrote no profile (Triton 3.6 writes none when the script raises or calls "
    "sys.exit; in env mode the script calls proton.start() and proton.finalize())"
)
# The distributions a platform installs them as (ROCm's wheels name Triton their own way).
PACKAGES = {"triton": ["triton", "pytorch-triton-rocm", "pytorch-triton"], "torch": ["torch"]}


class Failed(Exception):
    """The run ends with status (args[0]), after its line (args[1])."""


def say(line: str, file: object = sys.stderr) -> None:
    """One line, each control character shown as ?, as ls shows names."""
    print("".join(c if c.isprintable() else "?" for c in f"profile.sh: {line}"), file=file)


def parse(python: str, argv: list) -> Options | None:
    """profile.sh's arguments as Options; None for --help."""
    given, gate, words = {}, [], list(argv)
    while words and (word := words.pop(0)) != "--":
        if word in ("-h", "--help"):
            return None
        if word == "--dry-run":
            given["dry_run"] = True
        elif word == "--any-device":
            gate.append(word)
        elif word == "--compare":
            if len(words) < 2:
                raise Refused("--compare needs two runs: NOW BASE")
            given["compare"] = (words.pop(0), words.pop(0))
            for run in (r for r in given["compare"] if not os.path.exists(r)):
                raise Refused(f"--compare: no run {run[:200]}")
        elif word not in VALUED:
            raise Refused(f"unknown argument: {word[:60]} (see --help)")
        elif not words or not words[0]:
            raise Refused(f"{word} needs a value, not an empty one")
        else:
            value, key = words.pop(0), word[2:].replace("-", "_")
            gate += [word, value] if key in ("fail_above", "min_ms") else []
            given[key] = whole(word, value, MOST[key]) if key in MOST else value
    picked = ("data", "backend", "context", "hook")
    overrides = tuple((k, given.pop(k, "")) for k in picked)
    given = {k: v for k, v in given.items() if k not in ("fail_above", "min_ms")}
    return Options(python, tuple(words), overrides=overrides, gate=tuple(gate), **given)


def whole(option: str, value: str, most: int) -> int:
    digits = len(value) < 7 and value.isascii() and value.isdecimal() and value[0] != "0"
    if not (digits and int(value) <= most):
        raise Refused(f"{option} takes 1 to {most}")
    return int(value)


def git(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True)
    except OSError:  # no git here
        return subprocess.CompletedProcess(args, 127, "", "")


def look(options: Options) -> Host:
    """This machine, as the plan needs it; Refused for a REV that is neither a folder nor
    a revision of a git checkout here."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    assumed = os.environ.get("PROFILE_ASSUME_GPU", "")
    seen = [name for name in ("amd", "nvidia") if os.path.exists(DEVICE_FILES[name])]
    vendor = assumed if assumed in DEVICE_FILES else (seen or [""])[-1]
    devices = [f"{var}_VISIBLE_DEVICES" for var in ("CUDA", "HIP", "ROCR")]
    devices = tuple((var, os.environ[var]) for var in devices if var in os.environ)
    prefix, rev = None, options.rev
    if rev and not os.path.isdir(rev):
        if git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").returncode:
            raise Refused(f"{rev[:100]} is neither a folder nor a revision of a git checkout here")
        prefix = git("rev-parse", "--show-prefix").stdout.rstrip("\n")
    here, ceiling = os.path.dirname(os.path.abspath(__file__)), plain(options.results) + "/ceiling"
    gpu = bool(vendor) or assumed == "1"
    return Host(here, os.getcwd(), stamp, vendor, gpu, devices, os.path.isdir(ceiling), prefix)


def planned(options: Options) -> Plan:
    """The plan of options; Refused where the recipe or an A/B run's base refuses it."""
    recipe = load(options.recipe, dict(options.overrides)) if not options.compare else None
    plan = make_plan(options, recipe, look(options))
    cwd, script = plan.base or (".", "")
    if options.base_script and not os.path.isfile(script):
        raise Refused(f"no base script {script[:200]}")
    if options.rev and not plan.tree and not os.path.isfile(os.path.join(cwd, script)):
        raise Refused(f"{options.rev[:200]} has no {script[:200]}")
    if plan.tree and git("cat-file", "-e", f"{options.rev}:./{script}").returncode:
        raise Refused(f"{options.rev[:100]} has no {script[:200]}")
    return plan


def make_folder(plan: Plan, options: Options) -> None:
    """The run's folder, made without -p (no other run has it); refuses a latest or previous
    that is not a link: only its own links are replaced."""
    for name in ("latest", "previous") if plan.links else ():
        if os.path.exists(link := os.path.join(plan.links, name)) and not os.path.islink(link):
            raise Refused(f"{link[:200]} is not a link: move it away (nothing is replaced)")
    try:
        os.makedirs(os.path.dirname(plan.folder) or ".", exist_ok=True)
        os.mkdir(plan.folder)
    except OSError:
        if options.output and os.path.lexists(plan.folder):
            why = f"--output {plan.folder[:200]} exists: name a new folder (nothing is cleared)"
            raise Refused(why) from None
        raise Refused(f"cannot make {plan.folder[:200]}") from None
    if plan.tree:  # the revision, unpacked where the base runs
        os.mkdir(plan.tree)
        top = git("rev-parse", "--show-toplevel").stdout.rstrip("\n")
        command = ["git", "-C", top, "archive", options.rev]
        archive = subprocess.Popen(command, stdout=subprocess.PIPE)
        unpacked = subprocess.run(["tar", "-x", "-C", plan.tree], stdin=archive.stdout)
        if archive.wait() or unpacked.returncode:
            raise Refused(f"git archive {options.rev[:100]} failed")


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
        self.folder, self.child, self.signal, self.forwarded = folder, None, None, False
        for sig in SIGNALS:
            if signal.getsignal(sig) != signal.SIG_IGN:  # ignored on entry: stays so, as in bash
                signal.signal(sig, self.caught)

    def caught(self, signum: int, frame: object) -> None:
        for sig in SIGNALS:  # one ends the run
            signal.signal(sig, signal.SIG_IGN)
        self.signal = signal.Signals(signum)
        self.forward()

    def forward(self) -> None:
        # Ctrl-C reaches every process of the terminal's foreground group, the command too:
        # a second SIGINT would cut short what it does on the first (Proton writes its capture).
        if self.child and self.signal and not self.forwarded:
            self.forwarded = True
            if self.signal != signal.SIGINT or not foreground():
                self.child.send_signal(self.signal)

    def run(self, command: tuple, cwd: str = ".") -> int:
        """The command's exit status, as a shell gives it (128 + N: killed by signal N)."""
        if self.signal is None:
            self.child = subprocess.Popen(command, cwd=cwd)
            self.forward()  # a signal caught while the child started
            status = self.child.wait()
        if self.signal is not None:
            why = f"the command ended; {self.folder[:200]} has no summary"
            raise Failed(SIGNALS[self.signal], f"stopped by {self.signal.name}: {why}")
        return 128 - status if status < 0 else status


def versions() -> dict:
    """The installed Triton's and torch's versions, from their packages' metadata: importing
    either would cost the run seconds."""
    found = {
        p: [d.version for n in names for d in importlib.metadata.distributions(name=n)]
        for p, names in PACKAGES.items()
    }
    return {package: (found[package] or [None])[0] for package in PACKAGES}


def write_provenance(plan: Plan) -> None:
    """provenance.json from the plan, into each new file it names (written once)."""
    record = json.dumps(versions() | dict(plan.provenance), indent=2) + "\n"
    for path in plan.records:
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(record)
        except OSError as e:
            say(f"warning: no provenance written to {path[:200]}: {(e.strerror or str(e)).lower()}")


def refuse(plan: Plan, options: Options) -> None:
    """What would fail once the trials started, refused before; the device variables moved."""
    if plan.trials and shutil.which(options.command[0]) is None:  # a shell's builtin, say
        raise Refused(f"the command must start with a program, not {options.command[0][:30]}")
    if plan.trials and plan.no_gpu:
        raise Refused("no GPU visible: Proton needs one (check the script alone with: make run)")
    if plan.environ:
        say(f"warning: AMD: {' '.join(moved(plan))}")
    os.environ.update({var: value for var, value in plan.environ if value is not None})
    for var in (var for var, value in plan.environ if value is None):
        del os.environ[var]


def execute(plan: Plan, options: Options) -> int:
    """Runs the plan; 0, or the summariser's status. Where it summarised, or compared (3: a
    regression), latest moves."""
    refuse(plan, options)
    make_folder(plan, options)
    children = Children(plan.folder)
    for trial in plan.trials:  # base first in odd rounds of an A/B run; order records them
        os.makedirs(trial.folder, exist_ok=True)
        if trial.side:
            with open(os.path.join(plan.folder, "order"), "a", encoding="utf-8") as f:
                f.write(f"{trial.side} trial{trial.number}\n")
        if status := children.run(trial.command, trial.cwd):
            raise Failed(status, f"error: the command exited {status}; no summary written")
        if not glob.glob(os.path.join(glob.escape(trial.folder), f"proton*.{plan.capture}")):
            raise Failed(1, f"error: no {trial.folder[:200]}/proton.{plan.capture}: {NO_CAPTURE}")
    write_provenance(plan)
    status = children.run(plan.summarise)
    if status in ((0, 3) if plan.kind in ("ab", "compare") else (0,)):
        link(plan)
    if status == 0 and plan.kind not in ("ab", "compare"):
        say(f"wrote {plan.folder}/summary.json", sys.stdout)
    return status


def main(argv: list | None = None) -> int:
    if argv is None and not getattr(sys.flags, "safe_path", False):
        # Run as a script, this folder came first: after the installed packages, a yaml.py
        # here is not imported for PyYAML (PYTHONPATH still counts; -I would hide it).
        sys.path.append(sys.path.pop(0))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed stdout ends it, as it ends bash
    python, *args = sys.argv[1:] if argv is None else argv
    try:
        if (options := parse(python, args)) is None:  # --help: profile.sh's header
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile.sh")) as f:
                header = f.read().split("\nset ")[0].splitlines()[1:]
            print("\n".join(line[2:] for line in header))
            return 0
        if not (options.compare or options.command):
            raise Refused("no command: give one after -- (e.g. -- python mine.py)")
        if options.gate and not (options.rev or options.base_script or options.compare):
            raise Refused(
                f"{options.gate[0]} judges a comparison: give --rev, --base-script or --compare"
            )
        if not options.dry_run:
            return execute(planned(options), options)
        print("\n".join(lines(planned(options))))
        return 0
    except Refused as e:
        say(f"error: {e}")
        return 2
    except Failed as e:
        say(e.args[1])
        return e.args[0]
    except OSError as e:  # a file of the run's that cannot be written
        say(f"error: {e}")
        return 2


if __name__ == "__main__":
    # Success returns normally, and the guard names only main, as aorta's checks want.
    status = main()
    if status:
        raise SystemExit(status)
