"""The repository's layout: the tooling stands apart from the example (it names no example
script beyond SCRIPT's default, and no tooling test imports or runs one, so that a copy
made for another kernel can delete the example's files, listed in .ci/example); imports
point one way; nothing rewrites sys.modules."""

import ast
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, example_files, run

TOOLING = [
    "Makefile",
    "profile.sh",
    "profile_run.py",
    "recipe.yaml",
    "proton_launch.py",
    "parse_hatchet.py",
    "summary/files.py",
    "summary/recipe.py",
    "summary/plan.py",
    "summary/run.py",
    "summary/views.py",
    "bench/ceiling.py",
    "summary/compare.py",
    "Dockerfile",
    ".ci/run",
]
EXAMPLE = re.compile(r"\bsoftmax\.py\b|\b(long|few)_rows\b|^\s*(import|from)\s+softmax\b", re.M)
LISTED = example_files()


def test_the_tooling_names_no_example():
    for name in TOOLING:
        text = (ROOT / name).read_text()
        if name == "Makefile":  # SCRIPT's default runs the example, named once
            text = text.replace("EXAMPLE := softmax.py\n", "", 1)
        assert not EXAMPLE.search(text), f"{name} names the example"


def test_the_tooling_tests_neither_import_nor_run_the_example():
    example = {path for path in LISTED if path.startswith("tests/")} | {"tests/test_tooling.py"}
    for path in (ROOT / "tests").rglob("*.py"):
        if str(path.relative_to(ROOT)) in example:
            continue
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(softmax|long_rows|few_rows)\b", text, re.M), (
            path
        )
        # Captures' frames name softmax.py as data; a command would name it alone.
        assert not re.search(
            r"""["'](\./)?(softmax|(long|few)_rows)\.py["']|SCRIPT=softmax""", text
        ), path


def test_the_example_list_is_what_the_readme_quotes_and_all_of_it_or_none_is_here():
    readme = (ROOT / "README.md").read_text()
    quoted = re.search(r"<!-- example files: \.ci/example -->\n```\n(.*?)```", readme, re.S)
    assert quoted and quoted[1].split() == LISTED
    here = [path for path in LISTED if (ROOT / path).exists()]
    assert here in (LISTED, [])  # the example, or a copy that deleted it


def test_the_docs_start_a_python_script_through_python():
    # The scripts have no execute bit: `parse_hatchet.py RUN` typed as a command fails.
    bare = re.compile(r"(?:\./)?[\w/.-]+\.py\s+\S")
    fenced = re.compile(r"^[ \t]*```.*\n((?:.*\n)*?)[ \t]*```", re.M)  # its lines, each
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        commands = [line for block in fenced.findall(text) for line in block.splitlines()]
        commands += re.findall(r"`([^`]+)`", fenced.sub("", text))
        assert not [c for c in commands if bare.match(c)], page.name


def imports(path):
    """The repository's modules path imports, at its top or inside functions alike."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_imports_point_one_way():
    modules = {path.stem: path for path in ROOT.glob("*.py")}
    graph = {name: imports(path) & set(modules) - {name} for name, path in modules.items()}

    def cycle(name, seen):
        return name in seen or any(cycle(other, seen | {name}) for other in graph[name])

    assert not [name for name in graph if cycle(name, frozenset())], graph


def test_nothing_writes_to_sys_modules():
    for path in [*ROOT.glob("*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            target = (
                node.func.value
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                else None
            )
            targets = getattr(node, "targets", []) + [target]
            written = [t for t in targets if isinstance(t, ast.Subscript | ast.Attribute)]
            assert not any("sys.modules" in ast.unparse(t) for t in written), path


RUFF = Path(sys.executable).parent / "ruff"


@pytest.mark.skipif(not RUFF.exists(), reason="ruff: make setup")
def test_annotations_are_asked_of_the_repository_s_modules_and_never_of_a_user_s(tmp_path):
    # A user's own script, kernels bare, in a copy of the lint config; and one of ours with
    # an annotation dropped.
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    for name in ("mine.py", "tests/test_mine.py"):
        shutil.copy(ROOT / "tests" / "payloads" / "vector_add.py", tmp_path / name)
    assert run(RUFF, "check", "--select", "ANN", ".", cwd=tmp_path).returncode == 0
    ours = (ROOT / "proton_launch.py").read_text().replace("(argv: list[str])", "(argv)", 1)
    (tmp_path / "proton_launch.py").write_text(ours)
    p = run(RUFF, "check", "--select", "ANN", "--output-format", "concise", ".", cwd=tmp_path)
    assert p.returncode == 1 and "proton_launch.py" in p.stdout and "mine" not in p.stdout


def product_files(root):
    """The product's files git lists under root that are there: the README's delete route
    leaves its deletions uncommitted, and git lists them until they are. None outside git."""
    product = ["*.py", "*.sh", "Makefile", ":!bench", ":!tests", ":!docs"]
    listed = run("git", "ls-files", "-z", *product, cwd=root)
    if listed.returncode:
        return None
    return [name for name in listed.stdout.split("\0") if name and (root / name).exists()]


def test_a_file_deleted_and_not_yet_committed_is_no_product_file(tmp_path):
    for name in ("kept.py", "deleted.py"):
        (tmp_path / name).write_text("")
    for command in (["init", "-q"], ["add", "."]):
        assert run("git", *command, cwd=tmp_path).returncode == 0
    (tmp_path / "deleted.py").unlink()
    assert product_files(tmp_path) == ["kept.py"]


def test_no_tooling_file_is_over_450_lines():
    # The tooling: the product less the example's files; without git, the same files found.
    listed = product_files(ROOT)
    if listed is None:
        found = [*ROOT.glob("*.py"), *ROOT.glob("*.sh"), ROOT / "Makefile"]
        listed = [str(f.relative_to(ROOT)) for f in [*found, *ROOT.glob("summary/*.py")]]
    tooling = [f for f in listed if f not in LISTED and (ROOT / f).is_file()]
    long = {f: n for f in tooling if (n := len((ROOT / f).read_text().splitlines())) > 450}
    assert tooling and not long, long


def test_no_product_file_is_over_500_lines():
    # The product: what a user runs or copies, the example included (bench, tests, docs apart).
    listed = product_files(ROOT)
    if listed is None:
        pytest.skip("not a git checkout")
    long = {f: n for f in listed if (n := len((ROOT / f).read_text().splitlines())) > 500}
    assert not long, long
