"""softmax.py: the kernels against torch.softmax, and the command line.

On a CPU machine every kernel runs in Triton's interpreter; the tests marked gpu run
the same checks on a real GPU at full size.
"""

from types import SimpleNamespace

import pytest
import torch
from conftest import run

import softmax as sm

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def check(x):
    """softmax(x) matches torch.softmax within the CLI's tolerance and leaves x alone."""
    before = x.clone()
    y = sm.softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    ref = torch.softmax(x.float(), dim=1)
    torch.testing.assert_close(y.float(), ref, atol=sm.TOLERANCE[x.dtype], rtol=0, equal_nan=True)
    assert torch.equal(x, before)
    return y


def randn(rows, cols, dtype=torch.float32, scale=1.0):
    return (torch.randn(rows, cols, device=sm.DEVICE) * scale).to(dtype)


@pytest.fixture
def tiled(monkeypatch):
    """Force the two-kernel path for rows longer than 8 columns, in tiles of 16."""
    monkeypatch.setattr(sm, "MAX_FUSED_COLS", 8)
    monkeypatch.setattr(sm, "TILE_COLS", 16)
    sm._plan.cache_clear()  # configurations worked out with the real limits
    yield
    sm._plan.cache_clear()


SHAPES = [(1, 1), (9, 1), (5, 3), (3, 1000), (3, 1023), (3, 1025), (2, 4097), (300, 64)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torch(shape, dtype):
    check(randn(*shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 9), (2, 15), (4, 16), (3, 17), (2, 100), (5, 1025)], ids=str)
def test_tiled_path_matches_torch(tiled, shape, dtype):
    assert sm.launch_config(*shape, 1, 32)[0] == 0
    check(randn(*shape, dtype))


def test_short_rows_share_a_program():
    block_m, block_n, _ = sm.launch_config(4096, 256, 132, 32)
    assert block_m > 1 and block_n == 256
    assert sm.launch_config(4096, 1024, 132, 32)[0] >= 1
    assert sm.launch_config(256, 262144, 132, 32)[0] == 0


@pytest.mark.parametrize("use_tiles", [False, True], ids=["fused", "tiled"])
def test_strided_inputs(request, use_tiles):
    if use_tiles:
        request.getfixturevalue("tiled")
    wide = randn(6, 140)
    check(wide[:, :100])  # row stride wider than the row
    check(randn(100, 6).t())  # transposed: column stride 6, row stride 1
    check(randn(12, 100)[::2, ::3])  # both strides arbitrary


@pytest.mark.parametrize("use_tiles", [False, True], ids=["fused", "tiled"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_awkward_values(request, use_tiles, dtype):
    if use_tiles:
        request.getfixturevalue("tiled")
    # Near 1e4, exp() would overflow without the max subtraction.
    y = check(randn(4, 50, dtype, scale=1e4))
    assert torch.isfinite(y).all()
    check(torch.full((3, 50), 7.0, device=sm.DEVICE, dtype=dtype))  # constant rows
    x = randn(4, 50, dtype)
    x[0, ::3] = -float("inf")  # some -inf: those entries become 0
    x[1, :20] = -float("inf")  # a whole 16-column tile of -inf on the tiled path
    x[2, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    y = check(x)
    assert (y[0, ::3] == 0).all() and (y[1, :20] == 0).all() and y[2].isnan().all()
    assert torch.isfinite(y[3]).all()


def test_empty_and_bad_inputs():
    assert sm.softmax(randn(0, 5)).shape == (0, 5)
    with pytest.raises(ValueError, match="2-D"):
        sm.softmax(torch.zeros(2, 2, 2, device=sm.DEVICE))
    with pytest.raises(ValueError, match="float32, float16 and bfloat16"):
        sm.softmax(torch.zeros(2, 2, device=sm.DEVICE, dtype=torch.float64))


# The launch path of a GPU, on CPU: fakes stand in for Triton's compiled kernels, and
# their launchers run the real kernels in the interpreter with the arguments given.


class FakeCompiled:
    function, packed_metadata = "function-handle", "packed-metadata"

    def __init__(self, kernel, num_warps):
        self.kernel, self.num_warps, self.launches = kernel, num_warps, []

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream)

    def run(self, gx, gy, gz, stream, function, packed, metadata, enter, exit, *args):
        self.launches.append((stream, function, packed, metadata, enter, exit))
        self.kernel[(gx, gy, gz)](*args, num_warps=self.num_warps)


class FakeJit:
    """A @triton.jit kernel whose warmup() 'compiles': each call is counted."""

    def __init__(self, kernel):
        self.kernel, self.compiled = kernel, []

    def warmup(self, *args, grid, num_warps):
        self.compiled.append(FakeCompiled(self.kernel, num_warps))
        return self.compiled[-1]


@pytest.fixture
def gpu_path(monkeypatch):
    """softmax() as it runs on a GPU (device index -1: the CPU), its kernels faked."""
    fakes = {}
    for name in ("softmax_kernel", "softmax_partials_kernel", "softmax_normalize_kernel"):
        fakes[name] = FakeJit(getattr(sm, name))
        monkeypatch.setattr(sm, name, fakes[name])
    monkeypatch.setattr(sm, "INTERPRET", False)
    monkeypatch.setattr(sm, "_kernels", {})
    monkeypatch.setattr(sm.torch.cuda, "current_device", lambda: -1)
    props = SimpleNamespace(multi_processor_count=1, warp_size=32)
    monkeypatch.setattr(sm.torch.cuda, "get_device_properties", lambda device: props)
    streams = []
    active = SimpleNamespace(get_current_stream=lambda device: streams.append(device) or 77)
    monkeypatch.setattr(sm, "driver", SimpleNamespace(active=active))
    sm._plan.cache_clear()
    yield fakes, streams
    sm._plan.cache_clear()


def compiles(fakes):
    return {name: len(fake.compiled) for name, fake in fakes.items() if fake.compiled}


def test_a_key_compiles_once_and_then_launches_directly(gpu_path):
    fakes, streams = gpu_path
    x = randn(5, 100)
    for _ in range(3):
        check(x)
    check(randn(5, 100))  # other values, same key
    assert compiles(fakes) == {"softmax_kernel": 1}
    (compiled,) = fakes["softmax_kernel"].compiled
    assert len(compiled.launches) == 4 and streams == [-1] * 4
    # No launch hook registered: no metadata is built and no hook is called.
    assert compiled.launches[0] == (77, "function-handle", "packed-metadata", None, None, None)


def test_launch_hooks_get_the_metadata(gpu_path):
    # What Proton's -k triton registers: it reads the kernel's launch_metadata.
    fakes, _ = gpu_path
    enter = sm.knobs.runtime.launch_enter_hook
    enter.add(print)
    try:
        check(randn(5, 100))
    finally:
        enter.remove(print)
    stream, function, packed, metadata, *hooks = fakes["softmax_kernel"].compiled[0].launches[0]
    assert metadata == ("metadata", sm._plan(5, 100, -1)[3], 77)
    assert hooks == [enter, sm.knobs.runtime.launch_exit_hook]


@pytest.mark.parametrize(
    "other",
    [
        lambda: randn(5, 100, torch.bfloat16),  # dtype
        lambda: randn(5, 112),  # columns divisible by 16: another specialisation
        lambda: randn(1, 100),  # one row: Triton folds n_rows == 1 into the code
        lambda: randn(100, 5).t(),  # stride pattern
        lambda: randn(5, 101)[:, 1:],  # a pointer off 16-byte alignment
    ],
    ids=["dtype", "cols%16", "rows==1", "transposed", "unaligned"],
)
def test_what_the_compiled_code_depends_on_gets_its_own_kernel(gpu_path, other):
    fakes, _ = gpu_path
    check(randn(5, 100))
    check(other())
    assert compiles(fakes) == {"softmax_kernel": 2}


def test_each_device_compiles_its_own(gpu_path):
    fakes, streams = gpu_path
    x = randn(5, 100)
    plan = sm._plan(5, 100, -1)
    args = (torch.empty_like(x), x, 5, 100, 100, 1, 100, *plan[:2])
    for device in (0, 1, 0):
        sm._launch(fakes["softmax_kernel"], sm._key(x, device, (100, 1), plan), plan[3], 1, *args)
    assert len(fakes["softmax_kernel"].compiled) == 2 and streams == [0, 1, 0]


def test_the_tiled_path_launches_both_kernels_directly(gpu_path, tiled):
    fakes, _ = gpu_path
    for _ in range(2):
        check(randn(3, 50))
    assert compiles(fakes) == {"softmax_partials_kernel": 1, "softmax_normalize_kernel": 1}
    assert all(len(fake.compiled[0].launches) == 2 for fake in fakes.values() if fake.compiled)


# The command line, as a user runs it.


def test_cli_prints_the_four_lines():
    p = run(sm.sys.executable, "softmax.py", "--rows", 64, "--cols", 1000, "--iters", 3)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("softmax: device=")
    assert lines[1] == "softmax: rows=64 cols=1000 iters=3"
    assert lines[2].startswith("softmax: max_abs_err=")
    assert float(lines[2].split("=")[1]) <= 1e-6
    assert lines[3] == "softmax: PASS"
    assert p.stderr == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "0"], "argument --rows: must be at least 1, got 0"),
        (["--cols", "-3"], "argument --cols: must be at least 1, got -3"),
        (["--iters", "1.5"], "argument --iters: expected a whole number, got '1.5'"),
        (["--rows", "many"], "argument --rows: expected a whole number, got 'many'"),
        (["--cols"], "argument --cols: expected one argument"),
        (["--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--cols", "99999999999"], "needs about"),
    ],
)
def test_cli_refuses_bad_arguments(args, message):
    p = run(sm.sys.executable, "softmax.py", *args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("softmax: error: ")
    assert message in p.stderr


@pytest.mark.parametrize("wrong", [torch.zeros_like, lambda y: torch.full_like(y, float("nan"))])
def test_cli_fails_on_a_wrong_result(monkeypatch, capsys, wrong):
    real = sm.softmax
    monkeypatch.setattr(sm, "softmax", lambda x: wrong(real(x)))
    assert sm.main(["--rows", "8", "--cols", "16", "--iters", "1"]) == 1
    out, err = capsys.readouterr()
    assert "softmax: PASS" not in out
    assert err == "softmax: FAIL result differs from torch.softmax\n"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_cli_passes_at_the_default_shape(dtype):
    p = run(sm.sys.executable, "softmax.py", "--dtype", dtype)
    assert p.returncode == 0, p.stderr
    assert "interpreter" not in p.stdout
    assert p.stdout.splitlines()[1] == "softmax: rows=4096 cols=1024 iters=20"
    assert p.stdout.endswith("softmax: PASS\n")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4096, 256), (4096, 16384), (65536, 2048), (256, 262144)])
def test_gpu_matches_torch_at_full_size(shape, dtype):
    x = randn(*shape, dtype)
    x[1, : shape[1] // 2] = -float("inf")
    check(x)
    check(randn(shape[1], 64, dtype).t())


@pytest.mark.gpu
def test_gpu_cached_launches_stay_correct():
    # Interleaved keys, each launched several times: every launch after the first of a
    # key goes straight to its compiled kernel.
    inputs = [randn(4096, 1024), randn(4096, 1000, torch.bfloat16), randn(1024, 300).t(),
              randn(7, 40000, torch.float16), randn(1, 64), randn(300, 1025)[:, 1:]]  # fmt: skip
    sm._kernels.clear()
    for _ in range(3):
        for x in inputs:
            check(x.normal_())
    assert len(sm._kernels) == 7  # one kernel per input, two for the tiled one
