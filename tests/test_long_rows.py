"""long_rows.py: rows too long for one program, cut into tiles across programs; its plan,
its kernels against torch.softmax, and the layout of the counters they trade through.

On a CPU machine the kernels run in Triton's interpreter, where only the lagged kernel can
run a row of several tiles (one program at a time); the tests marked gpu run both kernels
on a real GPU at full size.
"""

import pytest
import torch
from test_softmax import DTYPES, check, randn, tiled  # noqa: F401 (a fixture)

import long_rows as lr
import softmax as sm


def plan(n_rows, n_cols, itemsize=4, aligned=False, n_sms=1, interpret=True):
    return lr.plan(n_rows, n_cols, itemsize, aligned, n_sms, 32, interpret)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 9), (2, 15), (4, 16), (3, 17), (2, 100), (5, 1025)], ids=str)
@pytest.mark.usefixtures("tiled")
def test_tiled_path_matches_torch(shape, dtype):
    assert plan(*shape, dtype.itemsize).kernel is lr.softmax_long_rows_lagged_kernel
    check(randn(*shape, dtype))


@pytest.mark.usefixtures("tiled")
def test_long_rows_merge_their_partials_a_chunk_at_a_time(monkeypatch):
    # The row's last tile merges its partials MERGE_TILES at a time, with a running max
    # and sum: here 2 at a time over 25 tiles, the first chunks all -inf in one row.
    monkeypatch.setattr(lr, "MERGE_TILES", 2)
    assert plan(4, 200).tiles == 2
    x = randn(4, 200, scale=10)
    x[1, :100] = -float("inf")
    x[2, :] = -float("inf")
    y = check(x)
    assert (y[1, :100] == 0).all() and y[2].isnan().all()


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


@pytest.mark.parametrize("itemsize, aligned", [(4, True), (2, True), (2, False)])
@pytest.mark.parametrize("sms", [1, 132])
@pytest.mark.parametrize("cols", [65536, 132 * 8192, 132 * 8192 + 1, 132 * 16384, 132 * 16384 + 1])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_the_plan_on_a_gpu(monkeypatch, itemsize, aligned, sms, cols, amd):
    monkeypatch.setattr(lr, "AMD", lr.tl.constexpr(amd))
    p = plan(64, cols, itemsize, aligned, sms, interpret=False)
    # Tiles of 32 KiB (8192 float32 or 16384 half columns; 8192 columns where rows do not
    # load 16 bytes at a time), 64 elements a thread, a ticket a tile. A tile an SM at
    # most: each held by its program; more: lag more programs write the last tiles.
    tile = 8192 if itemsize == 4 or not aligned else 16384
    n_tiles = -(-cols // tile)
    assert p.block_n == tile and p.num_warps == tile // (64 * 32)
    assert p.n_tiles == n_tiles and p.tiles >= n_tiles
    if n_tiles <= sms:
        assert p.kernel is lr.softmax_long_rows_kernel and p.grid == (64 * n_tiles, 1, 1)
        # Held 16-bit tiles in fewer registers, so that more programs fit an SM; only on
        # NVIDIA, as Triton's AMD backend refuses the option.
        capped = itemsize == 2 and aligned and not amd
        assert p.maxnreg == (lr.HALF_TILE_REGS if capped else 0)
    else:
        assert p.kernel is lr.softmax_long_rows_lagged_kernel and p.maxnreg == 0
        assert p.lag == n_tiles + lr.LAG_PER_SM * sms
        assert p.grid == (64 * n_tiles + p.lag, 1, 1)


def test_the_interpreter_never_holds_a_row():
    # It runs one program at a time: a held tile would wait for ever for the next.
    assert plan(64, 20000, 4, True, n_sms=132).kernel is lr.softmax_long_rows_lagged_kernel


def test_rows_are_aligned_only_where_they_load_16_bytes_at_a_time():
    # The held kernel keeps a 16-bit tile in pairs of values only where its loads are
    # vectorised; elsewhere it takes tiles of 8192 columns (test_the_plan_on_a_gpu).
    assert lr.aligned(randn(4, 64)) and lr.aligned(randn(4, 80)[:, :64])
    assert not lr.aligned(randn(4, 50))  # a row length not a multiple of 16
    assert not lr.aligned(randn(4, 72)[:, :64])  # nor a row stride
    assert not lr.aligned(randn(64, 4).t())  # a column stride
    assert not lr.aligned(randn(1, 4 * 64 + 1)[0, 1:].view(4, 64))  # a start 4 bytes in


@pytest.mark.parametrize("cols, held", [(12, True), (40, False)], ids=["held", "lagged"])
def test_each_rows_counter_has_a_line_of_its_own(monkeypatch, cols, held):
    # Counters COUNTER_STRIDE int32s apart: the ticket counter first, then a row's
    # arrivals (a tile each; the lagged kernel's merge arrives once more), nothing between.
    # Tiles of 16 float32 columns on one SM: 12 columns are one tile, held by its program
    # (which then waits for no other, so the interpreter can run it); 40, three, lagged.
    monkeypatch.setattr(lr, "TILE_BYTES", 64)
    monkeypatch.setattr(sm, "INTERPRET", False)  # plan as for a GPU of one SM
    x = randn(5, cols)
    kernel, grid, options, workspaces, fixed = lr.launch(x, 1, 32, False)
    assert kernel is (lr.softmax_long_rows_kernel if held else lr.softmax_long_rows_lagged_kernel)
    out = torch.empty_like(x)
    partial_max, partial_sum, counters = workspaces(x)
    kernel[grid](out, x, partial_max, partial_sum, counters, *fixed, **options)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), atol=1e-6, rtol=0)
    n_tiles = -(-cols // 16)
    assert counters.shape == (6, lr.COUNTER_STRIDE.value)
    assert counters[0, 0] == grid[0]  # a ticket a program
    assert (counters[1:, 0] == n_tiles + (0 if held else 1)).all()
    assert (counters[:, 1:] == 0).all()


@pytest.mark.parametrize("dtype, cols", [(torch.float16, 2 * 16384), (torch.float32, 3 * 8192)])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_only_held_half_tiles_launch_with_fewer_registers(monkeypatch, dtype, cols, amd):
    # maxnreg reaches the launch for aligned 16-bit tiles on NVIDIA only: Triton's AMD
    # backend refuses the option (KeyError), and other tiles need their registers.
    monkeypatch.setattr(lr, "AMD", lr.tl.constexpr(amd))
    monkeypatch.setattr(sm, "INTERPRET", False)
    x = randn(2, cols, dtype)
    kernel, _, options, _, _ = lr.launch(x, 132, 32, False)
    assert kernel is lr.softmax_long_rows_kernel
    capped = dtype == torch.float16 and not amd
    assert options.pop("maxnreg", None) == (lr.HALF_TILE_REGS if capped else None)
    assert options == {"num_warps": 32768 // dtype.itemsize // (64 * 32)}


# On the GPU, at full size.


def gpu_plan(x):
    props = torch.cuda.get_device_properties(x.device)
    return lr.plan(*x.shape, x.element_size(), lr.aligned(x), props.multi_processor_count,
                   props.warp_size, False)  # fmt: skip


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
    y = check(x)
    assert y[1].isnan().all() and (y[2, : tile + 7] == 0).all()
    check(randn(2 * cols, 9, dtype).t())  # strided: column stride 9
    check(randn(9, cols + 64, dtype)[:, 64:])  # row stride wider than the row


@pytest.mark.gpu
@pytest.mark.skipif(sm.HIP, reason="maxnreg is an NVIDIA option")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_held_half_tiles_fit_their_registers(dtype):
    # HALF_TILE_REGS a thread lets 5 programs of 8 warps share an SM; read as Triton's
    # fused-softmax tutorial reads them. Triton 3.9 spills a little there (docs).
    x = randn(8, 8 * 16384, dtype)
    kernel, grid, options, workspaces, fixed = lr.launch(x, 132, 32, False)
    assert kernel is lr.softmax_long_rows_kernel and options["maxnreg"] == lr.HALF_TILE_REGS
    compiled = kernel.warmup(torch.empty_like(x), x, *workspaces(x), *fixed, grid=grid, **options)
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


@pytest.mark.parametrize(
    "env, hip, usable",
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
def test_a_partitioned_gpu_holds_rows_only_on_the_sms_it_may_use(monkeypatch, env, hip, usable):
    # A held row spins until all its tiles arrive: on SMs the process cannot use they
    # never would. No MPS daemon can be started here: the variables stand in for it.
    monkeypatch.setattr(sm, "HIP", hip)
    assert lr.usable_sms(132, env) == usable
    for name in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "HSA_CU_MASK", "ROC_GLOBAL_CU_MASK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sm, "INTERPRET", False)
    x = randn(2, 100 * 8192)  # 100 float32 tiles a row
    kernel, grid, _, _, fixed = lr.launch(x, 132, 32, False)
    held = usable >= 100
    assert kernel is (lr.softmax_long_rows_kernel if held else lr.softmax_long_rows_lagged_kernel)
    if not held:
        assert fixed[6] == 100 + lr.LAG_PER_SM * usable  # lag: at least a row's tiles


@pytest.mark.gpu
def test_gpu_long_rows_under_an_mps_share(monkeypatch):
    # Planned for a quarter of the SMs: rows of more tiles than that take the lagged path.
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    monkeypatch.setattr(sm, "_launches", {})
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = randn(4, (n_sms // 4 + 1) * 8192)
    assert lr.launch(x, n_sms, 32, False)[0] is lr.softmax_long_rows_lagged_kernel
    check(x)
