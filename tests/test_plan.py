"""The recipe read once into a typed Recipe (summary/recipe.py, aorta's rules and refusals)
and the run's Plan made from it (summary/plan.py), called directly: the launch command, the
provenance the driver writes from the same value, the processes a run starts, the world
size as given."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import yaml

import profile_run
from conftest import ROOT, recipe, run
from summary import Refused
from summary import plan as pl
from summary import recipe as rc

LAUNCH = str(ROOT / "proton_launch.py")
HOST = pl.Host(here=str(ROOT), cwd="/work", stamp="20260101T000000Z-1", gpu=True)


def planned(command="python mine.py", recipe=None, host=HOST, **options):
    options = pl.Options(python="python", command=tuple(command.split()), **options)
    return pl.make_plan(options, recipe or rc.Recipe(), host)


# summary/recipe.py: aorta's rules.


def test_the_shipped_recipe_is_aorta_s():
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    assert data["schema_version"] == 1 and data["mode"] == "probe"
    assert data["trials"] == 1 and data["timeout_per_trial"] == 1800
    assert data["mitigation_axis"] == ["none"] and data["diagnostic_axis"] == ["none"]
    assert data["env_passthrough_mode"] == "inherit"
    proton = {"mode": "cli", "backend": "auto", "context": "python", "data": "tree"}
    assert data["collect"] == {"proton": proton}


def test_defaults_and_overrides_are_aorta_s_read_into_one_typed_recipe(tmp_path):
    (tmp_path / "r.yaml").write_text("collect: {proton: {}}\n")  # aorta's defaults
    assert rc.load(str(tmp_path / "r.yaml")) == rc.Recipe("cli", "auto", "shadow", "tree")
    (tmp_path / "r.yaml").write_text("collect: {proton: {context: ' Python '}}\n")  # as aorta
    assert rc.load(str(tmp_path / "r.yaml")).context == "python"  # strips and lower-cases
    r = recipe(tmp_path, 999, "{backend: instrumentation, granularity: warp}")
    overrides = dict(data="trace", context="shadow", hook="triton", backend="")
    made = rc.load(str(r), overrides)
    expected = ("cli", "instrumentation", "shadow", "trace", "triton", "default:granularity=warp")
    assert made == rc.Recipe(*expected, 999)
    with pytest.raises(dataclasses.FrozenInstanceError):  # decided once
        made.trials = 1


@pytest.mark.parametrize(
    "row",
    [
        "{proton: {backend: instrumentation}} -> ",
        # roctracer in cli mode captured an empty tree up to Triton 3.7 only: accepted now.
        "{proton: {backend: roctracer}} -> ",
        "{proton: {backend: instrumentation}, rocprof: {}} -> ",  # no queue intercepted twice
        "{proton: {backend: instrumentation, instrumentation_mode: default}} -> default",
        "{proton: {backend: instrumentation, granularity: warp}} -> default:granularity=warp",
        "{proton: {backend: instrumentation, instrumentation_mode: mma, granularity: cta}} -> mma:granularity=cta",
        "{proton: {backend: cupti, backend_mode: pcsampling}} -> pcsampling",
        "{proton: {backend: roctracer, backend_mode: periodic_flushing}} -> periodic_flushing",
    ],
)
def test_accepted_recipes_give_proton_s_mode_as_aorta_renders_it(row):
    collect, mode = row.split(" -> ")
    assert rc.options({"collect": yaml.safe_load(collect)}).proton_mode == (mode or None)


@pytest.mark.parametrize(
    "row",
    [
        "{proton: {colour: red}} -> unknown key collect.proton.'colour'",
        "{proton: {context: 3}} -> collect.proton.context must be a string, got 3",
        "{proton: {data: true}} -> collect.proton.data must be a string, got True",
        "{proton: {data: [1, 2]}} -> collect.proton.data must be a string, got [1, 2]",
        "{proton: {mode: daemon}} -> collect.proton.mode: 'daemon' is not one of cli, env",
        "{proton: {backend: nsys}} -> collect.proton.backend: 'nsys' is not one of auto",
        "{proton: {context: full}} -> collect.proton.context: 'full' is not one of shadow",
        "{proton: {hook: torch}} -> collect.proton.hook: 'torch' is not one of triton",
        "{proton: {mode: " + "x" * 10**6 + "}} -> collect.proton.mode: 'xxxxxxxx",
        "{proton: {granularity: warp}} -> granularity need backend instrumentation",
        "{proton: {backend: cupti, instrumentation_mode: mma}} -> need backend instrumentation",
        "{proton: {backend: instrumentation, instrumentation_mode: fast}} -> 'fast' is not one",
        "{proton: {backend: instrumentation, backend_mode: pcsampling, granularity: warp}} -> backend_mode conflicts with granularity",
        "{proton: {backend_mode: pcsampling}} -> backend_mode needs a pinned backend",
        "{proton: {backend: roctracer, backend_mode: pcsampling}} -> not one of periodic_flushing",
        "{proton: {mode: env}, rocprof: {}} -> both intercept HSA queues",
        "{proton: {backend: rocprofiler}, rocprof: {}} -> both intercept HSA queues",
        "{proton: {backend: roctracer}, rocprof: {}} -> both intercept HSA queues",
        "{rocprof: {}} -> no collect.proton mapping",
        *[
            f"{{proton: {{}}}}, trials: {n} -> trials must be a whole number from 1 to 999"
            for n in ("0", "1000", "-1", "'2'", "true", "1.5", "1" + "0" * 40, "null")
        ],
    ],
    ids=lambda row: row[:60],
)
def test_refused_recipes_are_one_line(tmp_path, row):
    collect, message = row.split(" -> ")
    (tmp_path / "r.yaml").write_text(f"{{collect: {collect}}}\n")
    with pytest.raises(Refused) as refused:
        rc.load(str(tmp_path / "r.yaml"))
    err = str(refused.value)
    assert "\n" not in err and message in err and len(err) < 400, err


# summary/plan.py: the run as one value.


def test_the_launch_command_and_the_provenance_come_from_one_plan(tmp_path):
    made = rc.load(str(recipe(tmp_path, 2, "{backend: instrumentation, granularity: warp}")))
    plan = planned(recipe=made, output=str(tmp_path / "run"))
    record = dict(plan.provenance)
    used = (record["backend_used"], record["mode_used"])
    assert used == ("instrumentation", "default:granularity=warp")
    for trial in plan.trials:
        command = list(trial.command)
        assert (command[command.index("-b") + 1], command[command.index("--mode") + 1]) == used
    os.mkdir(plan.folder)
    profile_run.write_provenance(plan)
    written = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert written == profile_run.versions() | dict(plan.provenance)
    assert written["run_id"] == HOST.stamp and written["mode_asked"] == made.proton_mode
    assert written["backend_used"] == used[0]
    with pytest.raises(dataclasses.FrozenInstanceError):  # nothing changes it on the way
        plan.folder = "elsewhere"


@pytest.mark.parametrize(
    "row",
    [
        "cupti | | cupti cupti None None",
        "instrumentation | default:granularity=warp | instrumentation instrumentation default:granularity=warp default:granularity=warp",
        "instrumentation | | instrumentation instrumentation None default",  # Proton's typed default
        "auto | | auto None None None",  # Proton picks the backend
    ],
)
def test_the_provenance_says_what_was_asked_and_given(row):
    backend, mode, expected = map(str.strip, row.split("|"))
    made = dict(planned(recipe=rc.Recipe(backend=backend, proton_mode=mode or None)).provenance)
    keys = ("backend_asked", "backend_used", "mode_asked", "mode_used")
    assert [str(made[key]) for key in keys] == expected.split()
    env = dict(planned(recipe=rc.Recipe(mode="env", backend=backend)).provenance)
    assert env["backend_used"] is env["mode_used"] is None  # the script starts Proton


@pytest.mark.parametrize(
    "command, world, expected",
    [("python mine.py", None, 1), ("torchrun --nproc-per-node 2 mine.py", None, None)]
    + [("torchrun --nproc-per-node 2 mine.py", 2, 2), ("srun torchrun mine.py", 16, 16)],
)
def test_the_world_size_is_given_or_unknown_never_parsed_back(command, world, expected):
    plan = planned(command, world_size=world)
    assert dict(plan.provenance)["world_size"] == expected
    summarise = list(plan.summarise)
    assert ("--world-size" in summarise) == bool(world)


@pytest.mark.parametrize("trials", [1, 3])
@pytest.mark.parametrize(
    "command", ["python mine.py", "python -m torch.distributed.run --nproc-per-node 8 mine.py"]
)
@pytest.mark.parametrize("ab", [{}, {"rev": "HEAD"}])
def test_at_most_two_python_processes_beside_the_workload_per_trial(trials, command, ab):
    plan = planned(command, trials=trials, **ab)
    start = command.split()[: command.split().index("mine.py")]
    for trial in plan.trials:  # the workload's own command, proton_launch.py in its process
        assert list(trial.command[: len(start) + 1]) == [*start, LAUNCH]
    beside = [p for p in plan.processes if p not in [t.command for t in plan.trials]]
    assert beside == [plan.summarise]  # and the driver itself: 2 in all, whatever the trials
    assert len(plan.trials) == (trials + 1) * 2 if ab else trials  # an A/B's warm-up first


def test_an_a_b_plan_compares_with_the_world_size_and_the_ceiling_and_records_each_side():
    host = dataclasses.replace(HOST, ceiling="profiling_results/ceiling", git_prefix="sub/")
    plan = planned("torchrun mine.py", host=host, rev="HEAD", world_size=2, gate=("--any-device",))
    folder = "/work/profiling_results/ab/" + HOST.stamp
    assert plan.folder == folder and plan.tree == f"{folder}/tree"
    summarise = list(plan.summarise)
    assert summarise[2:5] == [f"{folder}/now", "--diff", f"{folder}/base"]
    assert summarise[-5:] == [
        "--any-device",
        "--world-size",
        "2",
        "--ceiling",
        "profiling_results/ceiling",
    ]
    assert plan.records == (f"{folder}/now/provenance.json", f"{folder}/base/provenance.json")
    sides = [(t.side, t.number, t.cwd) for t in plan.trials]
    base = f"{folder}/tree/sub"
    assert sides == [
        ("base", 0, base),
        ("now", 0, "."),
        ("base", 1, base),
        ("now", 1, "."),
        ("now", 2, "."),
        ("base", 2, base),
    ] + [
        ("base", 3, base),
        ("now", 3, "."),
        ("now", 4, "."),
        ("base", 4, base),
        ("base", 5, base),
        ("now", 5, "."),
    ]


def test_an_a_b_warms_up_each_side_then_adds_rounds_to_most_trials_only_where_a_gate_is():
    host = dataclasses.replace(HOST, git_prefix="", top="/work")
    gate = ("--fail-above", "5")
    plan = planned(host=host, rev="HEAD", trials=2, gate=gate)
    folder, tree = plan.folder, f"{plan.folder}/tree"
    warm = pl.round_of(plan, 0)  # base, then now, set aside, each noting its imports
    assert [(t.side, t.folder, t.root) for t in warm] == [
        ("base", f"{folder}/warmup/base", tree),
        ("now", f"{folder}/warmup/now", "/work"),
    ]
    assert all(t.command[2:4] == ("--imports", f"{t.folder}/imports.json") for t in warm)
    assert plan.trials[:2] == warm and (plan.count, plan.most) == (2, pl.AB_MOST)
    later = pl.round_of(plan, 20)  # the last round of 20 a side: now first, in an even round
    assert [(t.side, t.folder) for t in later] == [
        (s, f"{folder}/{s}/trial20") for s in ("now", "base")
    ]
    assert "--imports" not in later[0].command and pl.round_of(plan, 20) == later  # pure
    printed = pl.lines(plan)
    assert printed[1] == "# warm-up: each side runs once first, its capture set aside"
    assert printed[2].startswith(f"cd {tree} && PYTHONPATH={tree}${{PYTHONPATH:+:$PYTHONPATH}} ")
    assert "# more rounds, up to 20 a side, while the gate is unsettled" in printed
    assert planned(host=host, rev="HEAD", trials=2, max_trials=8, gate=gate).most == 8
    assert planned(host=host, rev="HEAD", trials=30, gate=gate).most == 30
    assert planned(host=host, rev="HEAD").most == 5  # no gate: nothing to settle, no rounds


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-trials", "x"], "--max-trials takes 1 to 999"),
        (["--max-trials", "4", "--rev", "HEAD"], "--max-trials is below the 5 trials a side"),
        (["--trials", "9", "--max-trials", "8", "--rev", "v"], "below the 9 trials a side"),
        (["--max-trials", "8"], "--max-trials needs an A/B run: --rev or --base-script"),
        (["--max-trials", "8", "--rev", "v"], "--max-trials needs --fail-above: rounds are added"),
    ],
)
def test_most_trials_is_refused_below_trials_or_outside_an_a_b(argv, message):
    with pytest.raises(Refused, match=message):
        pl.parse("python", [*argv, "--", "python", "x.py"])


def test_a_compare_plan_runs_the_summariser_alone():
    plan = pl.make_plan(pl.Options(compare=("a", "b"), world_size=4), None, HOST)
    assert plan.trials == () and plan.records == () and plan.kind == "compare"
    assert list(plan.summarise[2:5]) == ["a", "--diff", "b"] and "--world-size" in plan.summarise


@pytest.mark.parametrize("word", ["plain", "it's", "", "new\nline", "tab\t", "\x1b[31m", "\udcff"])
def test_quoted_words_are_one_line_that_bash_reads_back(word):
    line = pl.quoted(word)
    back = subprocess.run(["bash", "-c", f'printf "%s" {line}'], capture_output=True).stdout
    assert "\n" not in line and back == word.encode("utf-8", "surrogateescape")


def test_profile_sh_s_arguments_become_options_and_the_plan_follows_them():
    argv = ["--recipe", "-h", "--trials", "3", "--world-size", "2", "--hook", "triton"]
    argv += ["--fail-above", "5", "--any-device", "--rev", "v1", "--dry-run", "--", "x.py", "--"]
    options = pl.parse("python", argv)
    assert options == pl.Options(
        python="python",
        command=("x.py", "--"),  # the command's words as given, a -- among them
        recipe="-h",  # a value, though it starts like an option
        overrides=(("hook", "triton"),),
        trials=3,
        rev="v1",
        gate=("--fail-above", "5", "--any-device"),
        world_size=2,
        dry_run=True,
    )
    for value in ("9" * 5000, "1000", "0"):  # refused in one line, never a traceback
        with pytest.raises(Refused, match="--trials takes 1 to 999"):
            pl.parse("python", ["--trials", value, "--", "python", "x.py"])


@pytest.mark.parametrize(
    "command, ranked",
    [
        ("python mine.py", False),
        ("python -u -X dev mine.py", False),  # the interpreter's own options: still alone
        ("python -m torch.distributed.run --nproc-per-node 2 -- mine.py", True),
        ("torchrun --nproc-per-node 2 mine.py", True),
    ],
)
def test_only_a_launcher_names_each_rank_s_capture(command, ranked):
    (trial,) = planned(command).trials
    assert ("--ranked" in trial.command) == ranked


def test_a_package_the_summariser_needs_is_refused_before_any_trial(monkeypatch):
    plan = planned()
    options = pl.Options(python="python", command=("python", "mine.py"))
    real = profile_run.importlib.util.find_spec
    monkeypatch.setattr(
        profile_run.importlib.util,
        "find_spec",
        lambda name: None if name == "msgspec" else real(name),
    )
    with pytest.raises(Refused, match=r"has no msgspec \(make setup\)"):
        profile_run.refuse(plan, options)


def test_the_driver_started_alone_says_how_to_start_it():
    p = run(sys.executable, ROOT / "profile_run.py")
    assert p.returncode == 2 and p.stderr == (
        "profile.sh: error: run through profile.sh, which names the workload's interpreter\n"
    )


@pytest.mark.parametrize("count, most", [(5, 20), (2, 5), (5, 10), (3, 100), (5, 5)])
def test_an_a_b_s_looks_spend_no_more_than_alpha_over_the_run(count, most):
    share = pl.shares(count, most)
    looks, n = 1, count
    while n < most:
        n, looks = min(2 * n, most), looks + 1
    assert len(share) == looks and sum(1 / d for d in share) == 1
    assert share == sorted(share) and (share == [1]) == (count >= most)
