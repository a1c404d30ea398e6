"""softmax.py: the kernels against torch.softmax, and the command line.

On a CPU machine every kernel runs in Triton's interpreter; the tests marked gpu run
the same checks on a real GPU at full size.
"""

import contextlib
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
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)  # x untouched
    return y


def randn(rows, cols, dtype=torch.float32, scale=1.0):
    return (torch.randn(rows, cols, device=sm.DEVICE) * scale).to(dtype)


@pytest.fixture
def tiled(monkeypatch):
    """Rows longer than 8 columns cut into tiles of 32 bytes (8 float32 or 16 half
    columns): in the interpreter, the kernel that writes each tile lag tickets after
    reducing it."""
    monkeypatch.setattr(sm, "MAX_FUSED_COLS", 8)
    monkeypatch.setattr(sm, "TILE_BYTES", 32)
    monkeypatch.setattr(sm, "_launches", {})  # launches bound to the real limits' kernels
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
    assert sm._plan(*shape, dtype.itemsize, False, -1).kernel == "softmax_long_rows_lagged_kernel"
    check(randn(*shape, dtype))


def test_long_rows_merge_their_partials_a_chunk_at_a_time(tiled, monkeypatch):
    # The row's last tile merges its partials MERGE_TILES at a time, with a running max
    # and sum: here 2 at a time over 25 tiles, the first chunks all -inf in one row.
    monkeypatch.setattr(sm, "MERGE_TILES", 2)
    assert sm._plan(4, 200, 4, False, -1).tiles == 2
    x = randn(4, 200, scale=10)
    x[1, :100] = -float("inf")
    x[2, :] = -float("inf")
    y = check(x)
    assert (y[1, :100] == 0).all() and y[2].isnan().all()


def test_short_rows_share_a_program():
    block_m, block_n, _ = sm.launch_config(4096, 256, 132, 32)
    assert block_m > 1 and block_n == 256
    assert sm.launch_config(4096, 1024, 132, 32)[0] == 1
    assert sm.launch_config(256, 262144, 132, 32) is None  # too long for one program


def test_the_interpreter_gets_few_large_programs():
    # Each program is interpreted in Python: the default shape runs as 64, not 4096.
    plan = sm._plan(4096, 1024, 4, True, -1)
    assert plan.kernel == "softmax_kernel" and plan.grid == (4096 // plan.block_m, 1, 1)
    assert plan.grid[0] <= 64


@pytest.mark.parametrize("itemsize, aligned", [(4, True), (2, True), (2, False)])
@pytest.mark.parametrize("sms", [1, 132])
@pytest.mark.parametrize(
    "cols", [1024, 65536, 132 * 8192, 132 * 8192 + 1, 132 * 16384, 132 * 16384 + 1]
)
def test_the_plan_on_a_gpu(monkeypatch, itemsize, aligned, sms, cols):
    props = SimpleNamespace(multi_processor_count=sms, warp_size=32)
    monkeypatch.setattr(sm, "INTERPRET", False)
    monkeypatch.setattr(sm, "_HIP", False)  # an NVIDIA GPU, also where torch is a ROCm build
    monkeypatch.setattr(sm.torch.cuda, "get_device_properties", lambda device: props)
    sm._plan.cache_clear()
    try:
        plan = sm._plan(64, cols, itemsize, aligned, 0)
    finally:
        sm._plan.cache_clear()
    if cols <= sm.MAX_FUSED_COLS:
        assert plan.kernel == "softmax_kernel"
        return
    # Long rows: tiles of 32 KiB (8192 float32 or 16384 half columns; 8192 columns where
    # rows do not load 16 bytes at a time), 64 elements a thread, a ticket a tile. A tile
    # an SM at most: each held by its program; more: lag more programs write the last tiles.
    tile = 8192 if itemsize == 4 or not aligned else 16384
    n_tiles = -(-cols // tile)
    assert plan.block_n == tile and plan.num_warps == tile // (64 * 32)
    assert plan.n_tiles == n_tiles and plan.tiles >= n_tiles
    if n_tiles <= sms:
        assert plan.kernel == "softmax_long_rows_kernel" and plan.grid == (64 * n_tiles, 1, 1)
        # Held 16-bit tiles in fewer registers, so that more programs fit an SM.
        assert plan.maxnreg == (sm.HALF_TILE_REGS if itemsize == 2 and aligned else 0)
    else:
        assert plan.kernel == "softmax_long_rows_lagged_kernel" and plan.maxnreg == 0
        assert plan.lag == n_tiles + sm.LAG_PER_SM * sms
        assert plan.grid == (64 * n_tiles + plan.lag, 1, 1)


def test_rows_are_aligned_only_where_they_load_16_bytes_at_a_time():
    # The held kernel keeps a 16-bit tile in pairs of values only where its loads are
    # vectorised; elsewhere it takes tiles of 8192 columns (test_the_plan_on_a_gpu).
    assert sm._aligned(randn(4, 64)) and sm._aligned(randn(4, 80)[:, :64])
    assert not sm._aligned(randn(4, 50))  # a row length not a multiple of 16
    assert not sm._aligned(randn(4, 72)[:, :64])  # nor a row stride
    assert not sm._aligned(randn(64, 4).t())  # a column stride
    assert not sm._aligned(randn(1, 4 * 64 + 1)[0, 1:].view(4, 64))  # a start 4 bytes in


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
    x = randn(5, 50, dtype)
    x[0, ::3] = -float("inf")  # some -inf: those entries become 0
    x[1, :20] = -float("inf")  # whole tiles of -inf on the tiled path
    x[2, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    x[4, 48:] = float("nan")  # a last tile of NaN and -inf padding: a row of NaN, as torch
    y = check(x)
    assert (y[0, ::3] == 0).all() and (y[1, :20] == 0).all() and y[2].isnan().all()
    assert torch.isfinite(y[3]).all() and y[4].isnan().all()


def test_empty_and_bad_inputs():
    assert sm.softmax(randn(0, 5)).shape == (0, 5)
    for rows, cols in [(2**31 - 2**16 + 1, 5), (3, 2**31)]:  # views of one element
        with pytest.raises(ValueError, match="too large for 32-bit indices"):
            sm.softmax(torch.zeros(1, 1, device=sm.DEVICE).expand(rows, cols))
    with pytest.raises(ValueError, match="2-D"):
        sm.softmax(torch.zeros(2, 2, 2, device=sm.DEVICE))
    with pytest.raises(ValueError, match="float32, float16 and bfloat16"):
        sm.softmax(torch.zeros(2, 2, device=sm.DEVICE, dtype=torch.float64))
    for other in ([[1.0]], torch.zeros(2, 2).to_sparse()):  # no strides to key on
        with pytest.raises(ValueError, match="expects a dense torch.Tensor"):
            sm.softmax(other)


def test_launches_are_kept_by_key():
    # A key's later calls skip the checks and the compile: a key that failed to form
    # would still give right answers, every call paying the first call's cost.
    x = randn(3, 100)
    sm._launches.clear()
    check(x)
    assert list(sm._launches) == [sm._key(x)]


def test_a_negated_view_is_not_taken_for_its_stored_values():
    # z.conj().imag negates z's imaginary parts lazily (is_neg()); the kernel reads the
    # stored values, so the view launches on a copy that holds them negated.
    z = torch.randn(4, 50, dtype=torch.complex64, device=sm.DEVICE)
    check(z.imag)  # the same strides and storage, not negated: another key
    check(z.conj().imag)


# The launch path of a GPU, on CPU: fakes stand in for Triton's compiled kernels, and
# launch the real kernels in the interpreter with the arguments given.


def interpretable(kernel, args):
    """args with SCOPES off: the interpreter cannot run Proton's scope calls."""
    if kernel.arg_names[-1] == "SCOPES":
        return (*args[:-1], False)
    return args


class FakeCompiled:
    """What kernel.warmup() returns: compiled[grid](*args) launches it."""

    def __init__(self, kernel, num_warps, options):
        self.kernel, self.num_warps, self.options, self.launches = kernel, num_warps, options, []

    def __getitem__(self, grid):
        def runner(*args):
            self.launches.append(grid)
            self.kernel[grid](*interpretable(self.kernel, args), num_warps=self.num_warps)

        return runner


class FakeJit:
    """A @triton.jit kernel: warmup() 'compiles' (each call counted), kernel[grid](...)
    launches it the slow way (counted too)."""

    def __init__(self, kernel):
        self.kernel, self.compiled, self.jit_launches, self.pre_run_hooks = kernel, [], 0, []
        self.arg_names = kernel.arg_names

    def warmup(self, *args, grid, num_warps, **options):
        self.compiled.append(FakeCompiled(self.kernel, num_warps, options))
        return self.compiled[-1]

    def __getitem__(self, grid):
        def run(*args, num_warps, **options):
            self.jit_launches += 1
            self.kernel[grid](*interpretable(self.kernel, args), num_warps=num_warps)

        return run


@pytest.fixture
def gpu_path(monkeypatch):
    """softmax() as it runs on a GPU of one SM (CPU tensors stand in), kernels faked."""
    fakes = {}
    for name in ("softmax_kernel", "softmax_long_rows_kernel", "softmax_long_rows_lagged_kernel"):
        fakes[name] = FakeJit(getattr(sm, name))
        monkeypatch.setattr(sm, name, fakes[name])
    monkeypatch.setattr(sm, "INTERPRET", False)
    monkeypatch.setattr(sm, "_launches", {})
    monkeypatch.setattr(sm, "_one_gpu", sm._one_gpu)  # _launch sets it: restored afterwards
    monkeypatch.setattr(sm.torch.cuda, "current_device", lambda: -1)  # a CPU tensor's index
    props = SimpleNamespace(multi_processor_count=1, warp_size=32)
    monkeypatch.setattr(sm.torch.cuda, "get_device_properties", lambda device: props)
    sm._plan.cache_clear()
    yield fakes
    sm._plan.cache_clear()


def compiles(fakes):
    return {name: len(fake.compiled) for name, fake in fakes.items() if fake.compiled}


def test_a_key_compiles_once_and_then_launches_the_compiled_kernel(gpu_path):
    fakes = gpu_path
    x = randn(5, 100)
    for _ in range(3):
        check(x)
    check(randn(5, 100))  # other values, same key
    assert compiles(fakes) == {"softmax_kernel": 1}
    (compiled,) = fakes["softmax_kernel"].compiled
    assert compiled.launches == [sm._plan(5, 100, 4, False, -1).grid] * 4
    assert fakes["softmax_kernel"].jit_launches == 0


@pytest.mark.parametrize("precompile", [True, False], ids=["compiled", "kernel[grid]"])
@pytest.mark.parametrize("hip", [False, True], ids=["nvidia", "amd"])
@pytest.mark.parametrize(
    "dtype, cols",
    [(torch.float16, 2 * 16384), (torch.bfloat16, 2 * 16384 - 8), (torch.float32, 3 * 8192)],
    ids=["half", "half-unaligned", "float32"],
)
def test_only_held_half_tiles_are_compiled_for_fewer_registers(
    gpu_path, monkeypatch, precompile, hip, dtype, cols
):
    # maxnreg reaches the compiler for aligned 16-bit tiles on NVIDIA only: Triton's AMD
    # backend refuses the option (KeyError), and other tiles need their registers.
    monkeypatch.setattr(sm, "_HIP", hip)
    props = SimpleNamespace(multi_processor_count=132, warp_size=32)
    monkeypatch.setattr(sm.torch.cuda, "get_device_properties", lambda device: props)
    x = randn(2, cols, dtype)
    run, _, _ = sm._prepare(torch.empty_like(x), x, 0, precompile=precompile)
    if precompile:
        (compiled,) = gpu_path["softmax_long_rows_kernel"].compiled
        options = compiled.options
    else:  # kernel[grid] with its options bound, launched on each call
        options = {k: v for k, v in run.keywords.items() if k != "num_warps"}
    capped = dtype == torch.float16 and not hip
    assert options == ({"maxnreg": sm.HALF_TILE_REGS} if capped else {})


@pytest.mark.parametrize("cols, held", [(12, True), (40, False)], ids=["held", "lagged"])
def test_each_rows_counter_has_a_line_of_its_own(gpu_path, monkeypatch, cols, held):
    # Counters COUNTER_STRIDE int32s apart: the ticket counter first, then a row's
    # arrivals (a tile each; the lagged kernel's merge arrives once more), nothing between.
    # Tiles of 16 float32 columns on one SM: 12 columns are one tile, held by its program
    # (which then waits for no other, so the interpreter can run it); 40, three, lagged.
    monkeypatch.setattr(sm, "MAX_FUSED_COLS", 8)
    monkeypatch.setattr(sm, "TILE_BYTES", 64)
    x = randn(5, cols)
    plan = sm._plan(*x.shape, 4, sm._aligned(x), -1)
    assert plan.kernel == "softmax_long_rows_" + ("kernel" if held else "lagged_kernel")
    out = torch.empty_like(x)
    run, workspaces, fixed = sm._launch(x, keep=False)
    counters = workspaces(x)[2]
    run(out, x, *workspaces(x)[:2], counters, *fixed)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), atol=1e-6, rtol=0)
    assert counters.shape == (6, sm.COUNTER_STRIDE.value)
    assert counters[0, 0] == plan.grid[0]  # a ticket a program
    assert (counters[1:, 0] == plan.n_tiles + (0 if held else 1)).all()
    assert (counters[:, 1:] == 0).all()


def test_the_launch_cache_is_bounded(gpu_path, monkeypatch):
    # One entry a key: a workload of ever new shapes starts the cache again, not grows it.
    monkeypatch.setattr(sm, "MAX_LAUNCHES", 2)
    for cols in (100, 101, 102, 103, 100):
        check(randn(5, cols))
    assert len(sm._launches) <= 2


@pytest.mark.parametrize(
    "hook",
    [
        lambda monkeypatch, fake: fake.pre_run_hooks.append(print),
        lambda monkeypatch, fake: monkeypatch.setattr(sm.knobs.runtime, "jit_cache_hook", print),
    ],
    ids=["pre_run_hooks", "jit_cache_hook"],
)
def test_per_call_hooks_launch_through_triton(gpu_path, monkeypatch, hook):
    # Hooks that kernel[grid] runs on every call, and a compiled kernel would skip.
    fake = gpu_path["softmax_kernel"]
    hook(monkeypatch, fake)
    check(randn(5, 100))
    assert fake.jit_launches == 1 and fake.compiled == []


def aligned_pair():
    base = torch.randn(504, device=sm.DEVICE)
    return base[:500].view(5, 100), base[1:501].view(5, 100)  # same strides, 4 bytes apart


def big_storage():
    # 2 GiB and more of storage, never touched but for the view's 500 elements.
    return torch.empty(2**29 + 4, device=sm.DEVICE)[:500].view(5, 100).normal_()


@pytest.mark.parametrize(
    "other",
    [
        lambda mp: randn(5, 100, torch.bfloat16),  # dtype
        lambda mp: randn(5, 112),  # columns divisible by 16: another specialisation
        lambda mp: randn(1, 100),  # one row: Triton folds n_rows == 1 into the code
        lambda mp: randn(100, 5).t(),  # strides
        lambda mp: aligned_pair()[1],  # a pointer off 16-byte alignment
        lambda mp: mp.setattr(sm.knobs.runtime, "debug", True) or randn(5, 100),
        lambda mp: (
            mp.setattr(sm.knobs.compilation, "instrumentation_mode", "default") or randn(5, 100)
        ),
        lambda mp: mp.setenv("TRITON_FPSAN_HOMOMORPHIC_CASTS", "1") or randn(5, 100),
    ],
    ids=[
        "dtype",
        "cols%16",
        "rows==1",
        "strides",
        "alignment",
        "debug",
        "instrumentation",
        "fpsan",
    ],  # fmt: skip
)
def test_what_the_compiled_code_depends_on_gets_its_own_kernel(gpu_path, monkeypatch, other):
    if "fpsan" in str(other.__code__.co_consts) and not hasattr(
        sm.knobs.compilation, "fpsan_homomorphic_casts"
    ):
        pytest.skip("Triton before 3.9 has no float sanitizer")
    check(aligned_pair()[0])
    check(other(monkeypatch))
    assert compiles(gpu_path) == {"softmax_kernel": 2}


@pytest.mark.parametrize("hip", [True, False], ids=["amd", "nvidia"])
def test_a_storage_past_2_gib_gets_its_own_kernel_on_amd(gpu_path, monkeypatch, hip):
    # AMD's buffer loads need a storage under 2 GiB; NVIDIA compiles the same code.
    monkeypatch.setattr(sm, "_HIP", hip)
    check(randn(5, 100))
    check(big_storage())
    assert compiles(gpu_path) == {"softmax_kernel": 2 if hip else 1}


def test_a_tensor_off_the_current_device_is_launched_on_its_own(gpu_path, monkeypatch):
    # Triton compiles for and launches on the current device, torch allocates on the
    # tensor's: a tensor elsewhere is compiled for and launched under its own device.
    entered = []

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        yield

    monkeypatch.setattr(sm.torch.cuda, "device", device)
    monkeypatch.setattr(sm, "_one_gpu", False)  # a machine of several GPUs
    x = randn(5, 100)
    for current in (-1, 3, 3, -1):  # a CPU tensor's index is -1
        monkeypatch.setattr(sm.torch.cuda, "current_device", lambda current=current: current)
        check(x)
    # At 3, the first call's compile and launch, then the second's launch.
    assert entered == [-1] * 3


def test_long_rows_beyond_the_gpu_are_written_lag_tickets_later(gpu_path, tiled):
    # Seven tiles a row on a GPU of one SM: a program waits only for lower tickets, all
    # taken by programs already running, so even one program at a time finishes.
    fakes = gpu_path
    for _ in range(2):
        check(randn(3, 50))
    assert compiles(fakes) == {"softmax_long_rows_lagged_kernel": 1}
    lag = 7 + sm.LAG_PER_SM
    assert (
        fakes["softmax_long_rows_lagged_kernel"].compiled[0].launches == [(3 * 7 + lag, 1, 1)] * 2
    )


def test_a_tensor_elsewhere_is_refused(gpu_path, monkeypatch):
    x = randn(5, 100)
    monkeypatch.setattr(sm, "DEVICE", "cuda")  # a GPU machine, given a CPU tensor
    with pytest.raises(ValueError, match="softmax expects a tensor on cuda, got one on cpu"):
        sm.softmax(x)


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


def main(capsys, *argv):
    """softmax.main in this process: (exit status, stdout, stderr)."""
    try:
        status = sm.main([str(a) for a in argv])
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "0"], "argument --rows: must be at least 1, got 0"),
        (["--cols", "-3"], "argument --cols: must be at least 1, got -3"),
        (["--iters", "1.5"], "argument --iters: expected a whole number, got '1.5'"),
        (["--rows", "many"], "argument --rows: expected a whole number, got 'many'"),
        (["--rows", "9" * 99], "argument --rows: must be below 2147483648, got 999999"),
        (["--rows", "9" * 5000], "argument --rows: expected a whole number, got '999999"),
        (["--seed", str(2**63)], "argument --seed: must be below 9223372036854775808"),
        (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
        (["--cols"], "argument --cols: expected one argument"),
        (["--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--cols", "2147483647"], "needs about"),
    ],
)
def test_cli_refuses_bad_arguments(capsys, args, message):
    status, out, err = main(capsys, *args)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("softmax: error: ")
    assert message in err and len(err) < 200


@pytest.mark.parametrize("wrong", [torch.zeros_like, lambda y: torch.full_like(y, float("nan"))])
def test_cli_fails_on_a_wrong_result(monkeypatch, capsys, wrong):
    real = sm.softmax
    monkeypatch.setattr(sm, "softmax", lambda x: wrong(real(x)))
    status, out, err = main(capsys, "--rows", 8, "--cols", 16, "--iters", 1)
    assert status == 1 and "softmax: PASS" not in out
    assert err == "softmax: FAIL result differs from torch.softmax\n"


def test_cli_marks_its_lines_with_the_rank_under_a_launcher(monkeypatch, capsys):
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    status, out, _ = main(capsys, "--rows", 8, "--cols", 16)
    assert status == 0 and len(out.splitlines()) == 4
    assert all(line.startswith("softmax[rank 3]: ") for line in out.splitlines())
    assert out.endswith("softmax[rank 3]: PASS\n")
    monkeypatch.setenv("WORLD_SIZE", "1")  # a launcher of one process: as when alone
    assert main(capsys, "--rows", 8, "--cols", 16)[1].endswith("\nsoftmax: PASS\n")
    monkeypatch.setenv("LOCAL_RANK", "one")
    status, out, err = main(capsys)
    assert status == 2 and out == "" and err.count("\n") == 1 and "LOCAL_RANK" in err


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
    # key goes to its compiled kernel.
    inputs = [randn(4096, 1024), randn(4096, 1000, torch.bfloat16), randn(1024, 300).t(),
              randn(7, 40000, torch.float16), randn(1, 64), randn(300, 1025)[:, 1:],
              randn(3, 2**20 + 1)]  # fmt: skip
    sm._launches.clear()
    for _ in range(3):
        for x in inputs:
            check(x.normal_())
    assert len(sm._launches) == len(inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tiles", [3, 8, 64, 128, 1000])
def test_gpu_long_rows(dtype, tiles, aligned):
    # Up to a tile an SM, each held by its program; 1000 tiles, written lag tickets later.
    # Rows of a length not a multiple of 16 load an element at a time, in smaller tiles.
    tile = sm.TILE_BYTES // (dtype.itemsize if aligned else 4)
    cols = tiles * tile - (16 if aligned else 5)  # the last tile part padding
    assert sm._aligned(randn(1, cols, dtype)) == aligned
    plan = sm._plan(9, cols, dtype.itemsize, aligned, 0)
    held = tiles <= torch.cuda.get_device_properties(0).multi_processor_count
    assert plan.kernel == "softmax_long_rows_" + ("kernel" if held else "lagged_kernel")
    assert plan.n_tiles == tiles
    x = randn(9, cols, dtype, scale=10)
    x[1, :] = -float("inf")  # a row of -inf: NaN, as torch gives
    x[2, : tile + 7] = -float("inf")  # a whole tile of -inf: it adds nothing
    y = check(x)
    assert y[1].isnan().all() and (y[2, : tile + 7] == 0).all()
    check(randn(2 * cols, 9, dtype).t())  # strided: column stride 9
    check(randn(9, cols + 64, dtype)[:, 64:])  # row stride wider than the row


@pytest.mark.gpu
@pytest.mark.skipif(sm._HIP, reason="maxnreg is an NVIDIA option")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_held_half_tiles_fit_their_registers(dtype):
    # HALF_TILE_REGS a thread lets 5 programs of 8 warps share an SM; read as Triton's
    # fused-softmax tutorial reads them. Triton 3.9 spills a little there (README).
    x = randn(8, 8 * 16384, dtype)
    plan = sm._plan(*x.shape, x.element_size(), sm._aligned(x), 0)
    assert plan.kernel == "softmax_long_rows_kernel" and plan.maxnreg == sm.HALF_TILE_REGS
    _, workspaces, fixed = sm._prepare(torch.empty_like(x), x, 0, precompile=False)
    kernel = sm.softmax_long_rows_kernel.warmup(
        torch.empty_like(x), x, *workspaces(x), *fixed, grid=plan.grid,
        num_warps=plan.num_warps, maxnreg=plan.maxnreg,
    )  # fmt: skip
    kernel._init_handles()
    assert kernel.n_regs <= sm.HALF_TILE_REGS
    if tuple(map(int, sm.triton.__version__.split(".")[:2])) < (3, 9):
        assert kernel.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("held", [True, False], ids=["held", "lagged"])
def test_gpu_long_rows_replayed_from_a_cuda_graph(held, dtype):
    # The counters are zeroed inside the graph, so every replay starts afresh.
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = randn(8, (16 if held else n_sms + 1) * sm.TILE_BYTES // dtype.itemsize, dtype)
    plan = sm._plan(*x.shape, x.element_size(), sm._aligned(x), 0)
    assert plan.kernel == "softmax_long_rows_" + ("kernel" if held else "lagged_kernel")
    sm.softmax(x)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = sm.softmax(x)
    for _ in range(3):
        x.normal_()
        graph.replay()
        torch.cuda.synchronize()
        ref = torch.softmax(x.float(), dim=1)
        torch.testing.assert_close(y.float(), ref, atol=sm.TOLERANCE[dtype], rtol=0)


@pytest.mark.gpu
def test_gpu_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="softmax expects a tensor on cuda, got one on cpu"):
        sm.softmax(torch.randn(4, 4))


@pytest.mark.gpu
def test_gpu_scopes_leave_no_trace_without_instrumentation():
    # With instrumentation off, pl scopes compile to nothing, SCOPES True or False: the
    # same code, and no clock read in it. Under Proton's instrumentation they read clocks.
    x, out = randn(64, 1024), torch.empty(64, 1024, device="cuda")
    args = (out, x, 64, 1024, 1024, 1, 1024, 1, 1024)
    plain = sm.softmax_kernel.warmup(*args, False, grid=(64,), num_warps=4).asm["ptx"]
    scoped = sm.softmax_kernel.warmup(*args, True, grid=(64,), num_warps=4).asm["ptx"]
    assert plain == scoped and "%clock" not in plain and "globaltimer" not in plain
