"""long_rows.py: rows too long for one program, cut into tiles across programs; its plan,
its launch, its kernels against torch.softmax, and the counters they trade through.

On a CPU machine the kernels run in Triton's interpreter, where only the lagged kernel can
run a row of several tiles (one program at a time); the tests marked gpu run both kernels
on a real GPU at full size.
"""

import sys

import pytest
import torch

import long_rows as lr
import softmax as sm
from conftest import run
from test_softmax import DTYPES, Recorder, check, gpu, randn


@pytest.fixture(autouse=True)
def fresh_plans():
    lr.plan.cache_clear()
    yield
    lr.plan.cache_clear()


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 32 bytes (8 float32 or 16 half columns), so that short rows span tiles."""
    monkeypatch.setattr(lr, "TILE_BYTES", 32)
    lr.plan.cache_clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 9), (2, 15), (4, 16), (3, 17), (2, 100), (5, 1025)], ids=str)
@pytest.mark.usefixtures("small_tiles")
def test_tiles_match_torch(shape, dtype):
    assert lr.plan(*shape, dtype.itemsize, False, None).kernel is lr.softmax_long_rows_lagged_kernel
    check(randn(*shape, dtype), lr.softmax)


@pytest.mark.usefixtures("small_tiles")
def test_long_rows_merge_their_partials_a_chunk_at_a_time(monkeypatch):
    # The row's last tile merges its partials MERGE_TILES at a time, with a running max
    # and sum: here 2 at a time over 25 tiles, the first chunks all -inf in one row.
    monkeypatch.setattr(lr, "MERGE_TILES", 2)
    assert lr.plan(4, 200, 4, False, None).tiles == 2
    x = randn(4, 200, scale=10)
    x[1, :100] = -float("inf")
    x[2, :] = -float("inf")
    y = check(x, lr.softmax)
    assert (y[1, :100] == 0).all() and y[2].isnan().all()


@pytest.mark.usefixtures("small_tiles")
def test_strided_inputs_and_any_rank():
    check(randn(6, 140)[:, :100], lr.softmax)  # row stride wider than the row
    check(randn(100, 6).t(), lr.softmax)  # transposed: column stride 6, row stride 1
    check(randn(12, 100)[::2, ::3], lr.softmax)  # both strides arbitrary
    check(torch.randn(2, 3, 40, device=sm.DEVICE), lr.softmax)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.usefixtures("small_tiles")
def test_awkward_values(dtype):
    # Near 1e4, exp() would overflow without subtracting each tile's and the row's max.
    y = check(randn(4, 50, dtype, scale=1e4), lr.softmax)
    assert torch.isfinite(y).all()
    check(torch.full((3, 50), 7.0, device=sm.DEVICE, dtype=dtype), lr.softmax)
    x = randn(5, 50, dtype)
    x[0, ::3] = -float("inf")  # some -inf: those entries become 0
    x[1, :20] = -float("inf")  # whole tiles of -inf
    x[2, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    x[4, 48:] = float("nan")  # a last tile of NaN and -inf padding: a row of NaN, as torch
    y = check(x, lr.softmax)
    assert (y[0, ::3] == 0).all() and (y[1, :20] == 0).all() and y[2].isnan().all()
    assert torch.isfinite(y[3]).all() and y[4].isnan().all()


def test_the_command_line_checks_long_rows():
    p = run(sys.executable, "long_rows.py", "--rows", 2, "--cols", 20000)
    assert p.returncode == 0 and p.stdout.endswith("softmax: PASS\n"), p.stderr
    assert "rows=2 cols=20000" in p.stdout


@pytest.mark.parametrize("itemsize, aligned", [(4, True), (2, True), (2, False)])
@pytest.mark.parametrize("sms", [1, 132])
@pytest.mark.parametrize("cols", [65536, 132 * 8192, 132 * 8192 + 1, 132 * 16384, 132 * 16384 + 1])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_the_plan_on_a_gpu(monkeypatch, itemsize, aligned, sms, cols, amd):
    monkeypatch.setattr(lr, "AMD", lr.tl.constexpr(amd))
    gpu(monkeypatch, sms)
    p = lr.plan(64, cols, itemsize, aligned, 0)
    # Tiles of 32 KiB (8192 float32 or 16384 half columns; 8192 columns where rows do not
    # load 16 bytes at a time), 64 elements for each thread, a ticket a tile. A tile an SM
    # at most: each held by its program; more: lag more programs write the last tiles.
    tile = 8192 if itemsize == 4 or not aligned else 16384
    n_tiles = -(-cols // tile)
    assert p.block_n == tile and p.num_warps == tile // (64 * 32)
    assert p.n_tiles == n_tiles and p.tiles >= n_tiles
    if n_tiles <= sms:
        assert p.kernel is lr.softmax_long_rows_kernel and p.grid == (64 * n_tiles,)
        # Held 16-bit tiles in fewer registers, so that more programs fit an SM; only on
        # NVIDIA, as Triton's AMD backend refuses the option.
        capped = itemsize == 2 and aligned and not amd
        assert p.maxnreg == (lr.HALF_TILE_REGS if capped else 0) and p.lag == 0
    else:
        assert p.kernel is lr.softmax_long_rows_lagged_kernel and p.maxnreg == 0
        assert p.lag == n_tiles + lr.LAG_PER_SM * sms
        assert p.grid == (64 * n_tiles + p.lag,)


def test_the_interpreter_never_holds_a_row():
    # It runs one program at a time: a held tile would wait for ever for the next.
    assert lr.plan(64, 20000, 4, True, None).kernel is lr.softmax_long_rows_lagged_kernel


def test_rows_are_aligned_only_where_they_load_16_bytes_at_a_time():
    # The held kernel keeps a 16-bit tile in pairs of values only where its loads are
    # vectorised; elsewhere it takes tiles of 8192 columns (test_the_plan_on_a_gpu).
    assert lr.aligned(randn(4, 64)) and lr.aligned(randn(4, 80)[:, :64])
    assert not lr.aligned(randn(4, 50))  # a row length not a multiple of 16
    assert not lr.aligned(randn(4, 72)[:, :64])  # nor a row stride
    assert not lr.aligned(randn(64, 4).t())  # a column stride
    assert not lr.aligned(randn(1, 4 * 64 + 1)[0, 1:].view(4, 64))  # a start 4 bytes in


def on_a_gpu(monkeypatch, sms, **kernels):
    """long_rows planned for a GPU of `sms` SMs, its kernels replaced by those given."""
    gpu(monkeypatch, sms)
    planned = lr.plan.__wrapped__  # for device 0, whatever the tensor's
    monkeypatch.setattr(lr, "plan", lambda *args: planned(*args[:4], 0))
    for name, kernel in kernels.items():
        monkeypatch.setattr(lr, name, kernel)


@pytest.mark.parametrize("dtype, cols", [(torch.float16, 2 * 16384), (torch.float32, 3 * 8192)])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["eager", "op"])
def test_the_launch_on_a_gpu(monkeypatch, dtype, cols, amd, wrapped):
    # Held tiles get ALIGNED; maxnreg reaches the launch for aligned 16-bit tiles on
    # NVIDIA, outside the op only: Triton's AMD backend refuses the option, and
    # wrap_triton does not pass it on. Lagged tiles get their lag.
    monkeypatch.setattr(lr, "AMD", lr.tl.constexpr(amd))
    held, lagged = Recorder(), Recorder()
    on_a_gpu(
        monkeypatch, 132, softmax_long_rows_kernel=held, softmax_long_rows_lagged_kernel=lagged
    )
    x = randn(2, cols, dtype)
    lr.launch(x, torch.empty_like(x), (lambda kernel: kernel) if wrapped else None)
    ((grid, args),) = held.launches
    tiles = cols // (32768 // dtype.itemsize)
    assert grid == (2 * tiles,) and args["in_ptr"] is x and args["n_tiles"] == tiles
    assert args["num_warps"] == 32768 // dtype.itemsize // (64 * 32)
    capped = dtype == torch.float16 and not amd and not wrapped
    assert args.get("maxnreg") == (lr.HALF_TILE_REGS if capped else None)
    assert args["ALIGNED"] and "lag" not in args and lagged.launches == []
    lr.launch(randn(2, 200 * 8192), torch.empty(2, 200 * 8192, device=sm.DEVICE))
    ((grid, args),) = lagged.launches
    assert args["lag"] == 200 + lr.LAG_PER_SM * 132 and grid == (400 + args["lag"],)


@pytest.mark.parametrize("held", [True, False], ids=["held", "lagged"])
def test_each_rows_counter_has_a_line_of_its_own(monkeypatch, held):
    # Counters COUNTER_STRIDE int32s apart: the ticket counter first, then a row's
    # arrivals (a tile each; the lagged kernel's merge arrives once more), nothing between.
    # Tiles of 16 float32 columns on one SM: 12 columns are one tile, held by its program
    # (which then waits for no other, so the interpreter can run it); 40, three, lagged.
    monkeypatch.setattr(lr, "TILE_BYTES", 64)
    name = "softmax_long_rows_kernel" if held else "softmax_long_rows_lagged_kernel"
    spy = Recorder(getattr(lr, name))
    on_a_gpu(monkeypatch, 1, **{name: spy})
    x = randn(5, 12 if held else 40)
    out = torch.empty_like(x)
    lr.launch(x, out)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), atol=1e-6, rtol=0)
    ((grid, args),) = spy.launches
    counters, n_tiles = args["counter_ptr"], args["n_tiles"]
    assert counters.shape == (6, lr.COUNTER_STRIDE.value)
    assert counters[0, 0] == grid[0]  # a ticket a program
    assert (counters[1:, 0] == n_tiles + (0 if held else 1)).all()
    assert (counters[:, 1:] == 0).all()


@pytest.mark.parametrize(
    "env, amd, usable",
    [
        ({}, False, 132),
        ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}, False, 66),
        ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "12.5"}, False, 16),
        ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "0"}, False, 0),
        ({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "half"}, False, 0),
        ({"HSA_CU_MASK": "0:0-15"}, True, 0),
        ({"ROC_GLOBAL_CU_MASK": "0xffff"}, True, 0),
        ({"HSA_CU_MASK": "0:0-15"}, False, 132),  # an AMD variable on NVIDIA: no effect
    ],
)
def test_a_partitioned_gpu_holds_rows_only_on_the_sms_it_may_use(monkeypatch, env, amd, usable):
    # A held row spins until all its tiles arrive: on SMs the process cannot use they
    # never would. No MPS daemon can be started here: the variables stand in for it.
    monkeypatch.setattr(lr, "AMD", lr.tl.constexpr(amd))
    assert lr.usable_sms(132, env) == usable
    for name in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "HSA_CU_MASK", "ROC_GLOBAL_CU_MASK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    gpu(monkeypatch, sms=132)
    p = lr.plan(2, 100 * 8192, 4, True, 0)  # 100 float32 tiles a row
    held = usable >= 100
    assert p.kernel is (lr.softmax_long_rows_kernel if held else lr.softmax_long_rows_lagged_kernel)
    if not held:
        assert p.lag == 100 + lr.LAG_PER_SM * max(1, usable)  # at least a row's tiles


# On the GPU, at full size.


def gpu_plan(x):
    return lr.plan(*x.shape, x.element_size(), lr.aligned(x), x.device.index)


@pytest.mark.gpu
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tiles", [3, 8, 64, 128, 1000])
def test_gpu_long_rows(dtype, tiles, aligned):
    # Up to a tile an SM, each held by its program; 1000 tiles, written lag tickets later.
    # Rows of a length not a multiple of 16 load an element at a time, in smaller tiles.
    tile = lr.TILE_BYTES // (dtype.itemsize if aligned else 4)
    cols = tiles * tile - (16 if aligned else 5)  # the last tile part padding
    x = randn(9, cols, dtype, scale=10)
    assert lr.aligned(x) == aligned
    p = gpu_plan(x)
    held = tiles <= torch.cuda.get_device_properties(0).multi_processor_count
    assert p.kernel is (lr.softmax_long_rows_kernel if held else lr.softmax_long_rows_lagged_kernel)
    assert p.n_tiles == tiles
    x[1, :] = -float("inf")  # a row of -inf: NaN, as torch gives
    x[2, : tile + 7] = -float("inf")  # a whole tile of -inf: it adds nothing
    y = check(x, lr.softmax)
    assert y[1].isnan().all() and (y[2, : tile + 7] == 0).all()
    check(randn(2 * cols, 9, dtype).t(), lr.softmax)  # strided: column stride 9
    check(randn(9, cols + 64, dtype)[:, 64:], lr.softmax)  # row stride wider than the row


@pytest.mark.gpu
@pytest.mark.skipif(bool(lr.AMD), reason="maxnreg is an NVIDIA option")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_held_half_tiles_fit_their_registers(monkeypatch, dtype):
    # HALF_TILE_REGS a thread lets 5 programs of 8 warps share an SM. Triton 3.9 spills a
    # little there (docs/kernel.md).
    x = randn(8, 8 * 16384, dtype)
    recorder = Recorder()
    with monkeypatch.context() as m:
        on_a_gpu(
            m,
            torch.cuda.get_device_properties(0).multi_processor_count,
            softmax_long_rows_kernel=recorder,
        )
        lr.launch(x, torch.empty_like(x))
    ((grid, args),) = recorder.launches
    assert args["maxnreg"] == lr.HALF_TILE_REGS
    compiled = lr.softmax_long_rows_kernel.warmup(**args, grid=grid)
    compiled._init_handles()
    assert compiled.n_regs <= lr.HALF_TILE_REGS
    if tuple(map(int, sm.triton.__version__.split(".")[:2])) < (3, 9):
        assert compiled.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("held", [True, False], ids=["held", "lagged"])
def test_gpu_long_rows_replayed_from_a_cuda_graph(held, dtype):
    # The counters are zeroed inside the graph, so every replay starts afresh.
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = randn(8, (16 if held else n_sms + 1) * lr.TILE_BYTES // dtype.itemsize, dtype)
    assert gpu_plan(x).kernel is (
        lr.softmax_long_rows_kernel if held else lr.softmax_long_rows_lagged_kernel
    )
    lr.softmax(x)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = lr.softmax(x)
    for _ in range(3):
        x.normal_()
        graph.replay()
        torch.cuda.synchronize()
        ref = torch.softmax(x.float(), dim=1)
        torch.testing.assert_close(y.float(), ref, atol=sm.TOLERANCE[dtype], rtol=0)


@pytest.mark.gpu
def test_gpu_long_rows_under_an_mps_share(monkeypatch):
    # Planned for a quarter of the SMs: rows of more tiles than that take the lagged path.
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = randn(4, (n_sms // 4 + 1) * 8192)
    assert gpu_plan(x).kernel is lr.softmax_long_rows_lagged_kernel
    check(x, lr.softmax)
