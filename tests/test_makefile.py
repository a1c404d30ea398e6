"""The Makefile as a user types it: every variable reaches the shell as the words given,
ARGS defaults to the example's only while SCRIPT is the example, and make clean deletes
nothing that is not this checkout's own. Checked with make -n, and with real runs on
the CPU where they are quick."""

import re
import shlex
import shutil

import pytest

import conftest
from conftest import ROOT, run

VECTOR_ADD = "tests/payloads/vector_add.py"


def recipe(*args, cwd=ROOT):
    """The command make would run last (after its checks), as words."""
    p = run("make", "--no-print-directory", "-n", *args, cwd=cwd)
    assert p.returncode == 0, p.stderr
    return shlex.split(p.stdout.replace("\\\n", " ").splitlines()[-1])


def test_make_help_is_the_default_and_lists_every_variable():
    p = run("make", "--no-print-directory")
    assert p.returncode == 0 and "make profile" in p.stdout and "make compare" in p.stdout
    listed = set(p.stdout.split())
    defined = {
        line.split()[0] for line in (ROOT / "Makefile").read_text().splitlines() if " ?= " in line
    }
    assert defined <= listed, defined - listed


@pytest.mark.parametrize("args", ["--a 'b;c' \"d e\" *", "--x $$HOME", "--y `id`", "--n 5\t--m 6"])
def test_every_word_of_args_reaches_the_script_as_given(args):
    words = recipe("run", f"SCRIPT={VECTOR_ADD}", f"ARGS={args}")
    expected = args.replace("$$", "$").split()  # split on whitespace, nothing else done
    assert words[1:] == [VECTOR_ADD, *expected]


def words_of(line):
    """The words bash makes of a command line that make would run."""
    p = run("bash", "-c", f"printf '%s\\0' {line}")
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\0")[:-1]


@pytest.mark.parametrize("variable", ["SCRIPT", "OUT", "RECIPE", "HOOK", "TRIALS", "NPROC"])
def test_a_newline_or_a_quote_in_a_variable_stays_one_word(variable):
    value = "it's\nodd; touch x"
    p = run("make", "--no-print-directory", "-n", "profile", f"{variable}={value}", "ARGS=")
    assert p.returncode == 0, p.stderr
    assert value in words_of(p.stdout.replace("\\\n", " ").strip().splitlines()[-1])


@pytest.mark.parametrize(
    "target, variable", [("compare", "CUR"), ("compare", "BASE"), ("run", "SCRIPT")]
)
def test_a_path_with_a_leading_dash_reaches_python_as_a_path(target, variable):
    # Taken for an option, CUR=-h would print help and pass a CI gate with exit 0.
    words = recipe(target, f"{variable}=-h")
    assert "./-h" in words and "-h" not in words


def test_a_script_whose_name_holds_a_newline_and_a_quote_runs(tmp_path):
    script = tmp_path / "it's\nodd.py"
    shutil.copy(ROOT / VECTOR_ADD, script)
    p = run("make", "-s", "run", f"SCRIPT={script}", "ARGS=--n 100")
    assert p.returncode == 0 and p.stdout.endswith("vector_add: PASS\n"), p.stderr


def test_the_example_s_arguments_go_only_to_the_example():
    example = re.search(r"^EXAMPLE := (\S+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    words = recipe("run")
    assert (
        words[1] == example
        and words[2:] == "--rows 4096 --cols 1024 --dtype float32 --iters 20".split()
    )
    words = recipe("run", f"SCRIPT={VECTOR_ADD}")
    assert words[1:] == [VECTOR_ADD]


def test_nproc_starts_the_script_through_torch_s_launcher_after_a_double_dash():
    # torchrun would take the script's --n for a prefix of its own --nnodes.
    words = recipe("profile", "NPROC=2", f"SCRIPT={VECTOR_ADD}", "ARGS=--n 5")
    launcher = "-m torch.distributed.run --standalone --nproc-per-node 2"
    assert words[-9:] == [*launcher.split(), "--", VECTOR_ADD, "--n", "5"]
    assert words[-10].endswith("/bin/python")  # VENV's, wherever make test was given it


@pytest.mark.parametrize("target", ["profile", "ab", "compare"])
def test_nproc_is_given_to_profile_sh_as_the_world_size(target):
    # Given, never parsed back out of torchrun's words; one process: no ranks to expect.
    words = recipe(target, "NPROC=2", f"SCRIPT={VECTOR_ADD}", "CUR=.", "BASE=.")
    assert words[words.index("--world-size") + 1] == "2" and words.index(
        "--world-size"
    ) < words.index("--")
    assert "--world-size" not in recipe(target, f"SCRIPT={VECTOR_ADD}", "CUR=.", "BASE=.")


@pytest.mark.parametrize("target", ["run", "profile", "trace", "intra", "intra-trace"])
def test_a_script_that_is_not_there_is_named_in_one_line(tmp_path, target):
    # As in a copy whose example is deleted and SCRIPT left at its default.
    missing = tmp_path / "gone.py"
    p = run("make", "-s", target, f"SCRIPT={missing}", f"OUT={tmp_path / 'out'}")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert p.stderr.splitlines()[0] == f"make {target}: no script {missing}: set SCRIPT=your.py"
    assert list(tmp_path.iterdir()) == []


def test_make_compare_without_runs_says_what_to_run_first(tmp_path):
    p = run("make", "-s", "compare", f"OUT={tmp_path}")
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert p.stderr.splitlines()[0] == (
        f"make compare: no run {tmp_path}/profile/latest: run make profile twice first, "
        "or set CUR= and BASE="
    )


@pytest.mark.parametrize("target", ["ab", "compare"])
@pytest.mark.parametrize("value", ["0", "yes", "1 1"])
def test_any_device_takes_1_or_nothing_in_one_line(tmp_path, target, value):
    p = run("make", "-s", target, f"ANY_DEVICE={value}", f"OUT={tmp_path}", f"CUR={tmp_path}")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.endswith(f"*** ANY_DEVICE takes 1 or nothing: not {value}.  Stop.\n")
    assert list(tmp_path.iterdir()) == []
    assert "--any-device" in recipe(target, "ANY_DEVICE=1")


def exit_tables(tool):
    """The exit codes each page's table for tool lists (`| exit | tool |`), by page."""
    found = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        tables = re.findall(
            rf"^\| exit \| {re.escape(tool)} \|\n\|[- |]+\|\n((?:\|.*\n)+)", page.read_text(), re.M
        )
        for rows in tables:
            found[page.name] = {
                int(n)
                for row in rows.splitlines()
                for n in re.findall(r"\b\d+\b", row.split("|")[1])
            }
    return found


def test_the_documented_exit_codes_are_the_code_s():
    text = (ROOT / "profile.sh").read_text()
    code = text + (ROOT / "profile_run.py").read_text()  # the wrapper and its driver
    found = re.findall(r"\bexit (\d+)$|return (\d+)$|Failed\((\d+)|SIG[A-Z]+: (\d+)", code, re.M)
    coded = {int(n) for row in found for n in row if n}
    header = re.search(r"^# Exit status:(.*?)^set ", text, re.M | re.S)[1]
    assert {int(n) for n in re.findall(r"\b\d+\b", header)} == coded
    assert exit_tables("profile.sh") == {"profiling.md": coded}
    made = {0} | {int(n) for n in re.findall(r"\bexit (\d+)\b", (ROOT / "Makefile").read_text())}
    assert exit_tables("make") == {"README.md": made, "profiling.md": made}


def test_make_run_runs_another_script_on_the_cpu():
    p = run("make", "-s", "run", f"SCRIPT={VECTOR_ADD}", "ARGS=--n 5000 --iters 2")
    assert p.returncode == 0 and p.stdout.endswith("vector_add: PASS\n"), p.stderr


def test_make_view_without_a_capture_says_so_in_one_line(tmp_path):
    out = tmp_path / 'it\'s "odd"'
    p = run("make", "-s", "view", f"OUT={out}")
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"make view: no capture in {out}/profile/latest: run make profile\n")


@pytest.mark.parametrize("venv", ["my venv", "~", "~/venv"])
def test_a_venv_make_would_split_or_put_in_a_home_folder_is_one_line_refused(venv):
    p = run("make", "-s", "-n", "setup", f"VENV={venv}")  # ~: the stamp touched outside
    assert p.returncode == 2 and p.stdout == "", p.stdout
    assert "VENV must be one path without spaces or a leading ~" in p.stderr


@pytest.mark.parametrize("out", [".git", "/", "..", "~", "tracked.py", "/tmp/elsewhere", ""])
def test_make_clean_deletes_only_its_own_untracked_paths(tmp_path, out):
    # In a scratch repository: a broken guard must not cost this checkout anything.
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    (tmp_path / "tracked.py").write_text("")
    for command in (["init", "-q"], ["add", "tracked.py"]):
        assert run("git", *command, cwd=tmp_path).returncode == 0
    p = run("make", "-s", "clean", "VENV=.venv", f"OUT={out}", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("make clean: refusing to delete")
    assert (tmp_path / ".git").is_dir() and (tmp_path / "tracked.py").exists()
    (tmp_path / "my results").mkdir()
    assert run("make", "-s", "clean", "VENV=.venv", "OUT=my results", cwd=tmp_path).returncode == 0
    assert not (tmp_path / "my results").exists()


def test_make_clean_from_another_folder_deletes_nothing_there(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "Makefile", checkout)
    elsewhere = tmp_path / "mine"
    for name in (".venv", "profiling_results", "__pycache__"):
        (elsewhere / name).mkdir(parents=True)
    p = run("make", "-s", "-f", checkout / "Makefile", "clean", "VENV=.venv", cwd=elsewhere)
    assert p.returncode == 2 and "refusing to delete .venv" in p.stderr
    assert all(
        (elsewhere / name).is_dir() for name in (".venv", "profiling_results", "__pycache__")
    )


def test_make_test_spreads_the_tests_over_the_cores_and_pytest_args_come_after():
    # After -n auto, so that PYTEST_ARGS='-n 0' runs the tests in one process.
    words = recipe("test", "PYTEST_ARGS=tests/test_mine.py -n 0")
    assert words[0] == "PYTEST_ADDOPTS=-n auto --dist loadfile tests/test_mine.py -n 0"


def test_make_test_runs_in_one_process_where_a_gpu_is(monkeypatch):
    # The GPU tests time kernels: workers sharing the GPU would slow each other's.
    monkeypatch.setattr(conftest, "HAS_GPU", True)
    assert conftest.pytest_xdist_auto_num_workers(None) == 0
    monkeypatch.setattr(conftest, "HAS_GPU", False)
    assert conftest.pytest_xdist_auto_num_workers(None) is None  # a worker per core


def test_make_lint_names_make_format_which_fixes_what_it_failed_on(tmp_path):
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path)
    for name in ("requirements.txt", "requirements-dev.txt", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    mine = tmp_path / "mine.py"  # a user's own file: imports unsorted, spaced by hand
    mine.write_text("import sys\nimport os\nprint( os.sep,sys.argv )\n")
    made = ["-s", "-o", ".venv/.installed"]  # .venv is made already
    p = run("make", *made, "lint", cwd=tmp_path)
    assert p.returncode == 2 and "make lint: make format fixes the formatting" in p.stderr
    assert run("make", *made, "format", cwd=tmp_path).returncode == 0
    assert mine.read_text() == "import os\nimport sys\n\nprint(os.sep, sys.argv)\n"
