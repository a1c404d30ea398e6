"""long_rows.py: rows too long for one program, cut into tiles across programs (packed
partials, small batches by program id, peeled rows, whole float32 rows); its plan, its
launch, its kernels against torch.softmax, and what Triton compiles them to for sm_90 and
gfx942.

In Triton's interpreter one program runs at a time, so a held tile can only wait for
itself: the held kernel runs here with one tile a row (planned for a GPU whose SMs hold
them), whole rows and lagged tiles as they come. The tests marked gpu run every path on a
real GPU at full size, at the logits' vocabularies.
"""

import json
import re
import sys

import pytest
import torch

# softmax.py first: it picks Triton's interpreter where there is no GPU, before Triton loads.
import softmax as sm
from conftest import ROOT, run
from test_softmax import DTYPES, Recorder, assert_close, check, gpu, randn

# isort: split
import triton
import triton.language as tl

import few_rows
import long_rows as lr

VOCABS = (32000, 50257, 128256, 151936, 256000)


@pytest.fixture(autouse=True)
def fresh_plans():
    lr.plan.cache_clear()
    yield
    lr.plan.cache_clear()


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 32 bytes (8 float32 or 16 half columns), so that short rows span tiles;
    whole rows of at most 8 float32 columns, so that longer ones are tiled."""
    monkeypatch.setattr(lr, "TILE_BYTES", 32)
    monkeypatch.setattr(lr, "WHOLE_ROW_COLS", 8)


def on_a_gpu(monkeypatch, sms, tile_bytes=None, **kernels):
    """long_rows planned for a GPU of `sms` SMs (tiles of tile_bytes where given),
    its kernels replaced by those given. Held tiles then run in the interpreter where a
    row is one tile."""
    gpu(monkeypatch, sms)
    if tile_bytes:
        monkeypatch.setattr(lr, "TILE_BYTES", tile_bytes)
    planned = lr.plan.__wrapped__  # for device 0, whatever the tensor's
    monkeypatch.setattr(lr, "plan", lambda *args: planned(*args[:4], 0, *args[5:]))
    for name, kernel in kernels.items():
        monkeypatch.setattr(lr, name, kernel)


class Held(Recorder):
    """The held kernel, its launches recorded and whether each found its slots empty;
    run only where a row is one tile (more would wait for ever in the interpreter)."""

    def __init__(self):
        super().__init__(lr.softmax_long_rows_kernel)
        self.empty = []

    def __getitem__(self, grid):
        def launch(**args):
            assert args["n_tiles"] == 1, "a held row of several tiles never ends here"
            self.empty.append(not args["slot_ptr"].any())
            super(Held, self).__getitem__(grid)(**args)

        return launch


def held(monkeypatch, sms):
    """The held kernel, planned for `sms` SMs, recorded: tiles of 64 float32 (or 128 half
    columns loaded 16 bytes at a time), one a row for the rows tested here."""
    spy = Held()
    on_a_gpu(monkeypatch, sms, 256, softmax_long_rows_kernel=spy)
    return spy


def vectors(x):
    """Whether x's rows load 16 bytes at a time: what launch() plans them by."""
    return lr.aligned(x) or lr.peel(x) is not None


# In the interpreter.


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 17), (2, 100)], ids=str)
@pytest.mark.usefixtures("small_tiles")
def test_lagged_tiles_match_torch(shape, dtype):
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


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.usefixtures("small_tiles")
def test_lagged_rows_keep_their_running_max_past_an_early_spike(monkeypatch, dtype):
    # Merged 2 partials at a time, a row whose first tile holds its max: the later
    # chunks' sums are scaled to that max, or exp() of the spike less theirs overflows.
    monkeypatch.setattr(lr, "MERGE_TILES", 2)
    x = randn(3, 100, dtype)
    x[0, 0], x[1, 9], x[2, 60] = 120.0, 100.0, 90.0
    y = check(x, lr.softmax)
    assert y[0, 0] == 1 and y[1, 9] == 1 and y[2, 60] == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_held_rows_of_several_tiles_scale_each_tile_s_sum_to_the_row_s_max(dtype):
    # The interpreter runs one program at a time, so a held row of several tiles would
    # wait for ever: here each row's slots hold every tile's partials before the launch,
    # as its other programs would publish them, and each program merges them as on a GPU.
    # An early spike makes the tiles' maxes differ by far.
    rows, block_n, n_tiles, line = 3, 16, 4, lr.LINE_SLOTS.value
    x = randn(rows, block_n * n_tiles - 5, dtype)  # the last tile part padding
    x[0, 1], x[1, 40], x[2, -1] = 20.0, 15.0, 12.0
    padded = torch.full((rows, block_n * n_tiles), -float("inf"), device=sm.DEVICE)
    padded[:, : x.shape[1]] = x.float()
    tiles = padded.view(rows, n_tiles, block_n)
    m = tiles.max(dim=-1).values
    s = torch.exp(tiles - m[..., None]).sum(dim=-1)
    packed = (m.view(torch.int32).long() << 32) | (s.view(torch.int32).long() & 0xFFFFFFFF)
    slots = torch.zeros(line + rows * line, dtype=torch.int64, device=sm.DEVICE)
    slots[line:].view(rows, line)[:, :n_tiles] = packed
    out = torch.full_like(x, float("nan"))
    with sm.launching(x):
        lr.softmax_long_rows_kernel[(rows * n_tiles,)](
            out, x, slots, rows, x.shape[1], x.shape[1], 1, 0, 0, n_tiles,
            BLOCK_N=block_n, TILES=line, VECTORS=False, PEELED=False, TICKET=False,
        )  # fmt: skip
    assert_close(out, torch.softmax(x.float(), dim=1))


@pytest.mark.usefixtures("small_tiles")
def test_strided_inputs_and_any_rank():
    check(randn(6, 140)[:, :100], lr.softmax)  # row stride wider than the row
    check(randn(100, 6).t(), lr.softmax)  # transposed: column stride 6, row stride 1
    check(randn(12, 100)[::2, ::3], lr.softmax)  # both strides arbitrary
    check(torch.randn(2, 3, 40, device=sm.DEVICE), lr.softmax)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.usefixtures("small_tiles")
def test_lagged_awkward_values(dtype):
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


def test_the_interpreter_never_holds_a_row():
    # It runs one program at a time: a held tile would wait for ever for the next.
    assert lr.plan(64, 40000, 4, True, None).kernel is lr.softmax_long_rows_lagged_kernel
    assert lr.plan(1, 20000, 2, True, None).kernel is lr.softmax_long_rows_lagged_kernel


def test_each_lagged_rows_counter_has_a_line_of_its_own(monkeypatch):
    # Counters COUNTER_STRIDE int32s apart: the ticket counter first, then a row's
    # arrivals (a tile each, and the merge once more), nothing between. Tiles of 16
    # float32 columns on one SM: 40 columns are three tiles, lagged.
    spy = Recorder(lr.softmax_long_rows_lagged_kernel)
    on_a_gpu(monkeypatch, 1, 64, softmax_long_rows_lagged_kernel=spy)
    x = randn(5, 40)
    out = torch.empty_like(x)
    lr.launch(x, out)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), atol=1e-6, rtol=0)
    ((grid, args),) = spy.launches
    counters, n_tiles = args["counter_ptr"], args["n_tiles"]
    assert counters.shape == (6, lr.COUNTER_STRIDE.value)
    assert counters[0, 0] == grid[0]  # a ticket a program
    assert (counters[1:, 0] == n_tiles + 1).all()
    assert (counters[:, 1:] == 0).all()


def test_whole_float32_rows_in_the_interpreter():
    # A whole row waits for nothing: the interpreter runs it as it comes.
    p = lr.plan(3, 20000, 4, True, None)
    assert p.kernel is sm.softmax_kernel and p.grid == (3,) and p.block_n == 32768
    assert not p.ticket
    x = randn(4, 20000, scale=10)
    x[1, :] = -float("inf")
    x[2, 7] = float("nan")
    y = check(x, lr.softmax)
    assert y[1].isnan().all() and y[2].isnan().all() and torch.isfinite(y[3]).all()
    assert lr.plan(3, 32769, 4, True, None).kernel is lr.softmax_long_rows_lagged_kernel
    assert lr.plan(3, 20000, 2, True, None).kernel is lr.softmax_long_rows_lagged_kernel


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_held_rows_by_program_id(monkeypatch, dtype):
    # 5 rows of one tile on 132 SMs: every program runs at once, no ticket.
    spy = held(monkeypatch, sms=132)
    for x in (randn(5, 32, dtype), randn(40, 5, dtype).t()):  # aligned; a column stride
        check(x, lr.softmax)
    (grid, aligned), (_, strided) = spy.launches
    assert grid == (5,) and not aligned["TICKET"] and not strided["TICKET"]
    assert aligned["VECTORS"] and not strided["VECTORS"]
    assert not aligned["PEELED"] and not strided["PEELED"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_held_rows_by_ticket(monkeypatch, dtype):
    # 5 rows of one tile on 2 SMs: tiles by ticket, in start order.
    spy = held(monkeypatch, sms=2)
    check(randn(5, 32, dtype), lr.softmax)
    ((grid, args),) = spy.launches
    assert grid == (5,) and args["TICKET"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("sms", [132, 2], ids=["program id", "ticket"])
def test_held_awkward_values(monkeypatch, sms, dtype):
    # Rows of 50 columns: peeled (not a multiple of 16 bytes), one tile each.
    held(monkeypatch, sms)
    y = check(randn(4, 50, dtype, scale=1e4), lr.softmax)
    assert torch.isfinite(y).all()
    check(torch.full((3, 50), 7.0, device=sm.DEVICE, dtype=dtype), lr.softmax)
    check(torch.zeros(3, 50, device=sm.DEVICE, dtype=dtype), lr.softmax)  # a max of +0.0
    x = randn(5, 50, dtype)  # row 1 starts inside 16 bytes, rows 0 and 2 end inside them
    x[0, ::3] = -float("inf")
    x[1, 1:] = -float("inf")  # all but the first element, which is then 1
    x[2, -1] = float("nan")  # a NaN in the tail: a row of NaN, as torch
    x[3, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    y = check(x, lr.softmax)
    assert (y[0, ::3] == 0).all() and y[1, 0] == 1 and y[2].isnan().all() and y[3].isnan().all()


def test_each_rows_slots_hold_its_packed_partials_on_a_line_of_their_own(monkeypatch):
    # The ticket alone on the first 16 int64s; then each row's TILES slots (at least 16:
    # 128 bytes), a tile's max in the high 32 bits and its sum in the low, the rest 0.
    spy = held(monkeypatch, sms=2)
    x = randn(5, 12, scale=3)
    lr.softmax(x)
    ((grid, args),) = spy.launches
    slots, tiles = args["slot_ptr"], args["TILES"]
    assert tiles == lr.LINE_SLOTS.value and slots.shape == (16 + 5 * tiles,)
    assert slots[0] == grid[0] and (slots[1:16] == 0).all()  # a ticket a program
    rows = slots[16:].view(5, tiles)
    assert (rows[:, 1:] == 0).all()
    sums, maxes = rows[:, 0].contiguous().view(torch.float32).view(5, 2).unbind(1)  # little-endian
    torch.testing.assert_close(maxes, x.max(dim=1).values, rtol=0, atol=0)
    ref = torch.exp(x - x.max(dim=1, keepdim=True).values).sum(dim=1)
    torch.testing.assert_close(sums, ref, rtol=1e-6, atol=0)


def test_every_call_starts_from_empty_slots(monkeypatch):
    # Zeroed on the launch's stream, so CUDA-graph replays start empty too (the GPU
    # test replays them): a slot left full would let a row go on without its tiles.
    spy = held(monkeypatch, sms=2)
    x = randn(3, 20)
    for _ in range(2):
        check(x, lr.softmax)
    assert spy.empty == [True, True]


def peeled_rows(dtype):
    """Rows not aligned() whose column stride is 1, and the lead launch() finds."""
    chunk = 16 // dtype.itemsize
    return {
        "contiguous": (randn(6, 27, dtype), 0),  # rows start anywhere within 16 bytes
        "padded": (randn(6, 32, dtype)[:, :27], 0),  # rows on 16 bytes, out's rows not
        "offset": (randn(6, 30, dtype)[:, 3:], 3 % chunk),  # row 0 starts 3 elements in
        "short": (randn(6, 9, dtype)[:, 1:4], 1 % chunk),  # no whole chunk in a row
        "one row": (randn(1, 60, dtype)[:, 5:], 5 % chunk),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("sms", [132, 2], ids=["program id", "ticket"])
def test_peeled_rows_match_torch(monkeypatch, sms, dtype):
    spy = held(monkeypatch, sms)
    for name, (x, lead) in peeled_rows(dtype).items():
        assert not lr.aligned(x) and lr.peel(x) == lead, name
        x[:, 0] = x[:, -1] = 30.0  # the head's and the tail's the largest: merged first
        check(x, lr.softmax)
        grid, args = spy.launches[-1]
        # The tile starts on the 16 bytes the first row starts in, `lead` elements in.
        assert args["PEELED"] and args["VECTORS"] and args["lead"] == lead, name
        assert args["in_ptr"].data_ptr() % 16 == 0, name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_peeled_rows_write_only_their_output(monkeypatch, dtype):
    # Whole chunks, head and tail: written once each, nothing beside them; here into an
    # output that starts 2 elements past 16 bytes, which Triton then stores an element
    # at a time.
    held(monkeypatch, sms=132)
    x = randn(4, 60, dtype)[:, 3:]
    buf = torch.full((4 * 57 + 4,), float("nan"), device=sm.DEVICE, dtype=dtype)
    out = buf[2 : 2 + 4 * 57].view(4, 57)
    lr.launch(x, out)
    assert buf[:2].isnan().all() and buf[-2:].isnan().all()
    assert_close(out, torch.softmax(x.float(), dim=1))


def test_rows_peel_where_their_columns_are_contiguous_and_storage_starts_on_16():
    assert lr.peel(randn(4, 50)) == 0 and lr.peel(randn(4, 50)[:, 1:]) == 1
    assert lr.peel(randn(4, 50, torch.bfloat16)[:, 9:]) == 1  # 9 elements: 16 bytes and 2
    assert lr.peel(randn(64, 4).t()) is None  # a column stride
    # Storage that itself starts inside 16 bytes: the 16 bytes before its first row are
    # not its own, so nothing is peeled.
    data = bytearray(320)
    offset = 4 if (torch.frombuffer(data, dtype=torch.uint8).data_ptr() + 4) % 16 else 8
    x = torch.frombuffer(data, dtype=torch.float32, count=64, offset=offset).view(4, 16)
    assert x.data_ptr() % 16 and x.storage_offset() == 0 and lr.peel(x) is None


def test_the_command_line_checks_long_rows():
    # Float32 rows of 20000 columns: whole rows, in the interpreter.
    p = run(sys.executable, "long_rows.py", "--rows", 2, "--cols", 20000)
    assert p.returncode == 0 and p.stdout.endswith("softmax: PASS\n"), p.stderr
    assert "rows=2 cols=20000" in p.stdout


def test_the_command_line_fails_on_a_wrong_result(monkeypatch, capsys):
    monkeypatch.setattr(lr, "softmax", lambda x: torch.softmax(x.float(), -1) + 1e-3)
    assert lr.main(["--rows", "2", "--cols", "20000"]) == 1
    assert "FAIL result differs from torch.softmax" in capsys.readouterr().err


def test_the_command_line_counts_each_rows_scratch(monkeypatch, capsys):
    # A row's slots or counters take a 128-byte line whatever its length: a million rows
    # of one half column need 16 MB as data, 128 MB with them, and 64 MiB free is refused.
    monkeypatch.setattr(sm, "free_bytes", lambda: 64 * 2**20)
    monkeypatch.setattr(lr, "softmax", None)  # refused before any run
    assert lr.main(["--rows", "1000000", "--cols", "1", "--dtype", "float16"]) == 2
    assert capsys.readouterr().err.startswith("softmax: error: 1000000 x 1 float16 needs about")


# The plan and the launch as a GPU makes them, on CPU.


@pytest.mark.parametrize("itemsize, vec", [(4, True), (2, True), (2, False)])
@pytest.mark.parametrize("sms", [1, 132])
@pytest.mark.parametrize("cols", [65536, 132 * 8192, 132 * 8192 + 1, 132 * 16384, 132 * 16384 + 1])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_the_plan_on_a_gpu(monkeypatch, itemsize, vec, sms, cols, amd):
    monkeypatch.setattr(lr, "AMD", tl.constexpr(amd))
    gpu(monkeypatch, sms)
    p = lr.plan(64, cols, itemsize, vec, 0)
    # Tiles of 32 KiB (8192 float32 or 16384 half columns; 8192 columns where rows load an
    # element at a time), 64 elements for each thread. A tile an SM at most: each held by
    # its program, taken by ticket as 64 rows of them outnumber the SMs; more: lagged.
    tile = 8192 if itemsize == 4 or not vec else 16384
    n_tiles = -(-cols // tile)
    assert p.block_n == tile and p.num_warps == tile // (64 * 32)
    assert p.n_tiles == n_tiles and p.tiles >= n_tiles
    if n_tiles <= sms:
        assert p.kernel is lr.softmax_long_rows_kernel and p.grid == (64 * n_tiles,)
        assert p.ticket and p.tiles >= lr.LINE_SLOTS.value and p.lag == 0
        # Held 16-bit tiles in fewer registers, so that more programs fit an SM; only on
        # NVIDIA, as Triton's AMD backend refuses the option.
        capped = itemsize == 2 and vec and not amd
        assert p.maxnreg == (lr.HALF_TILE_REGS if capped else 0)
    else:
        assert p.kernel is lr.softmax_long_rows_lagged_kernel and p.maxnreg == 0
        assert p.lag == n_tiles + lr.LAG_PER_SM * sms
        assert p.grid == (64 * n_tiles + p.lag,)


@pytest.mark.parametrize("cols", VOCABS)
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("rows", [1, 16])
def test_small_batches_of_logits_take_tiles_by_program_id(monkeypatch, cols, itemsize, rows):
    # On 132 SMs (an H100 or H200): a program id a tile where every tile of every row
    # has an SM of its own; a ticket where they outnumber the SMs.
    gpu(monkeypatch, sms=132)
    p = lr.plan(rows, cols, itemsize, True, 0)
    assert p.kernel is lr.softmax_long_rows_kernel
    assert p.ticket == (rows * p.n_tiles > 132)
    by_id = [(2, 32000), (2, 50257), (2, 128256), (4, 32000), (4, 50257)]  # at 16 rows
    assert p.ticket == (rows == 16 and (itemsize, cols) not in by_id)
    assert p.tiles >= lr.LINE_SLOTS.value  # a row's slots on a line of their own


@pytest.mark.parametrize(
    "rows, cols, itemsize, vectors, major, few",
    [
        (1, 151936, 2, True, 9, True),  # a lone row on an H100
        (16, 128256, 2, True, 9, True),
        (16, 151936, 4, True, 9, True),  # 2.4 M elements
        (16, 50257, 2, True, 9, True),  # peeled: measured faster in two launches too
        (16, 256000, 2, True, 9, False),  # 4.1 M: measured slower in two launches
        (1, 2**20, 2, True, 9, True),  # 128 tiles of 8192 columns, one an SM
        (17, 32000, 2, True, 9, False),  # more than FEW_ROWS
        (1, 151936, 2, False, 9, False),  # an element at a time
        (1, 151936, 2, True, 8, False),  # no PDL before Hopper
        (1, 2000 * 8192, 4, True, 9, False),  # more tiles than SMs: lagged
    ],
)
def test_a_few_rows_take_two_launches_where_the_gpu_has_pdl(
    monkeypatch, rows, cols, itemsize, vectors, major, few
):
    gpu(monkeypatch, sms=132, major=major)
    p = lr.plan(rows, cols, itemsize, vectors, 0)
    assert (p.kernel is few_rows.softmax_partials_kernel) == few
    if few:  # the tiles, warps and grid the held kernel would have had
        monkeypatch.setattr(lr, "FEW_ROWS", 0)
        held_ = lr.plan.__wrapped__(rows, cols, itemsize, True, 0)
        assert held_.kernel is lr.softmax_long_rows_kernel
        assert (p.block_n, p.num_warps, p.grid) == (held_.block_n, held_.num_warps, held_.grid)


def test_amd_takes_no_two_launches(monkeypatch):
    monkeypatch.setattr(lr, "AMD", True)
    monkeypatch.setattr(torch.version, "hip", "7.0")
    gpu(monkeypatch, sms=304, warp_size=64, major=9)  # an MI300X: gfx942 reads as major 9
    assert lr.plan(1, 151936, 2, True, 0).kernel is lr.softmax_long_rows_kernel


@pytest.mark.parametrize("wrapped", [False, True], ids=["eager", "op"])
def test_a_few_rows_launch_through_few_rows(monkeypatch, wrapped):
    launches = []
    gpu(monkeypatch, sms=132, major=9)
    planned = lr.plan.__wrapped__
    monkeypatch.setattr(lr, "plan", lambda *args: planned(*args[:4], 0, *args[5:]))
    monkeypatch.setattr(few_rows, "launch", lambda *args: launches.append(args))
    wrap = (lambda kernel: kernel) if wrapped else None
    x, out = randn(2, 50000, torch.bfloat16), torch.empty(2, 50000, dtype=torch.bfloat16)
    lr.launch(x, out, wrap)
    ((rows, into, block_n, num_warps, pdl, wrapper),) = launches
    assert rows is x and into is out and (block_n, num_warps) == (8192, 4)
    assert pdl and wrapper is wrap  # few_rows.launch drops PDL where wrapped


def test_an_mps_share_takes_tickets_sooner(monkeypatch):
    # 16 rows of 8 half tiles: 128 programs, on all 132 SMs by program id; by ticket
    # on half of them.
    gpu(monkeypatch, sms=132)
    assert not lr.plan(16, 128256, 2, True, 0).ticket
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50")
    lr.plan.cache_clear()
    assert lr.plan(16, 128256, 2, True, 0).ticket


@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_whole_float32_rows_where_they_fill_the_gpu(monkeypatch, amd):
    # At least 8 rows an SM of up to 32768 float32 columns: a row a program of 16 warps
    # (32 lanes or 64), in softmax.py's kernel. Fewer rows, or longer, or half: tiles.
    monkeypatch.setattr(lr, "AMD", tl.constexpr(amd))
    gpu(monkeypatch, sms=132, warp_size=64 if amd else 32)
    for cols in (16385, 32000, 32768):
        p = lr.plan(8 * 132, cols, 4, True, 0)
        assert p.kernel is sm.softmax_kernel and p.grid == (8 * 132,)
        assert p.block_n == 32768 and p.num_warps == 16 and p.n_tiles == 1
    assert lr.plan(8 * 132 - 1, 32000, 4, True, 0).kernel is lr.softmax_long_rows_kernel
    assert lr.plan(8 * 132, 32769, 4, True, 0).kernel is lr.softmax_long_rows_kernel
    assert lr.plan(8 * 132, 32000, 2, True, 0).kernel is lr.softmax_long_rows_kernel


def test_rows_are_aligned_only_where_they_load_16_bytes_at_a_time():
    # Held 16-bit tiles keep their values in pairs only where loads are vectorised;
    # rows that load an element at a time take tiles of 8192 columns (test_the_plan_on_a_gpu).
    assert lr.aligned(randn(4, 64)) and lr.aligned(randn(4, 80)[:, :64])
    assert not lr.aligned(randn(4, 50))  # a row length not a multiple of 16
    assert not lr.aligned(randn(4, 72)[:, :64])  # nor a row stride
    assert not lr.aligned(randn(64, 4).t())  # a column stride
    assert not lr.aligned(randn(1, 4 * 64 + 1)[0, 1:].view(4, 64))  # a start 4 bytes in


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
    monkeypatch.setattr(lr, "AMD", tl.constexpr(amd))
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


@pytest.mark.parametrize(
    "rows, cols, itemsize, vectors, block_n",
    [
        (1, 151936, 2, True, 8192),  # a lone 16-bit row: 19 tiles of 16 KB, not 10 of 32
        (8, 128256, 2, True, 8192),  # 128 tiles of 8192 columns fit 132 SMs
        (16, 128256, 2, True, 16384),  # 256 would not: 32 KB tiles
        (1, 151936, 4, True, 8192),  # float32 rows keep their 32 KB tiles
        (1, 151936, 2, False, 8192),  # an element a register: 32 KB of registers
    ],
)
def test_a_small_batch_of_16_bit_rows_takes_smaller_tiles(
    monkeypatch, rows, cols, itemsize, vectors, block_n
):
    gpu(monkeypatch, sms=132)
    p = lr.plan(rows, cols, itemsize, vectors, 0)
    assert p.block_n == block_n and p.kernel is lr.softmax_long_rows_kernel
    assert p.grid == (rows * -(-cols // block_n),) and p.num_warps == block_n // 2048


@pytest.mark.parametrize("wrapped", [False, True], ids=["eager", "op"])
def test_the_launch_on_a_gpu(monkeypatch, wrapped):
    # Held tiles get their layout (VECTORS, PEELED with its lead and out's shift), TICKET
    # and empty slots, and maxnreg (16-bit, outside the op: wrap_triton does not pass it
    # on); lagged tiles their lag and counters; whole rows softmax.py's arguments.
    held_, lagged, whole = Recorder(), Recorder(), Recorder()
    on_a_gpu(
        monkeypatch,
        132,
        softmax_long_rows_kernel=held_,
        softmax_long_rows_lagged_kernel=lagged,
    )
    monkeypatch.setattr(sm, "softmax_kernel", whole)
    wrap = (lambda kernel: kernel) if wrapped else None
    x = randn(40, 2 * 16384, torch.float16)  # 80 tiles of 16384: 160 of 8192 pass 132 SMs
    lr.launch(x, torch.empty_like(x), wrap)
    ((grid, args),) = held_.launches
    assert grid == (80,) and args["in_ptr"] is x and args["n_tiles"] == 2
    assert args["BLOCK_N"] == 16384 and args["num_warps"] == 8
    assert args["VECTORS"] and not args["PEELED"] and not args["TICKET"]
    assert args["slot_ptr"].shape == (16 + 40 * 16,) and not args["slot_ptr"].any()
    assert args.get("maxnreg") == (None if wrapped else lr.HALF_TILE_REGS)
    assert "lag" not in args and lagged.launches == [] and whole.launches == []
    x = randn(2, 50257, torch.bfloat16)  # peeled: 16-byte loads, a small batch's tiles
    lr.launch(x, torch.empty_like(x), wrap)
    grid, args = held_.launches[-1]
    assert grid == (14,) and args["n_tiles"] == 7 and args["BLOCK_N"] == 8192
    assert args["VECTORS"] and args["PEELED"] and args["lead"] == 0
    assert args["out_row_shift"] == 0  # out's rows as in's: stored 16 bytes at a time too
    assert args.get("maxnreg") == (None if wrapped else lr.HALF_TILE_REGS)
    lr.launch(randn(2, 200 * 8192), torch.empty(2, 200 * 8192, device=sm.DEVICE))
    ((grid, args),) = lagged.launches
    assert args["lag"] == 200 + lr.LAG_PER_SM * 132 and grid == (400 + args["lag"],)
    assert args["counter_ptr"].shape == (3, lr.COUNTER_STRIDE.value)
    lr.launch(randn(8 * 132, 20000), torch.empty(8 * 132, 20000, device=sm.DEVICE))
    ((grid, args),) = whole.launches
    assert grid == (8 * 132,) and args["BLOCK_M"] == 1 and args["BLOCK_N"] == 32768
    assert args["num_warps"] == 16 and "slot_ptr" not in args


# What Triton compiles the kernels to, for an H100/H200 (sm_90) and an MI300X (gfx942),
# on this machine: Triton's compiler needs no GPU for a target it is given.


@triton.jit
def wait_atomic(slot_ptr, out_ptr, n):
    # The held kernel's wait, alone: until none of n slots is 0.
    t = tl.arange(0, 16)
    seen = tl.atomic_add(slot_ptr + t, 0, mask=t < n, sem="relaxed")
    while tl.sum(((seen == 0) & (t < n)).to(tl.int32), axis=0) > 0:
        seen = tl.atomic_add(slot_ptr + t, 0, mask=t < n, sem="relaxed")
    tl.store(out_ptr + t, seen, mask=t < n)


@triton.jit
def wait_volatile(slot_ptr, out_ptr, n):
    # The same wait by volatile loads: compiled for gfx942, they become buffer loads,
    # which LLVM hoists out of the loop (a wait that would never end).
    t = tl.arange(0, 16)
    seen = tl.load(slot_ptr + t, mask=t < n, volatile=True)
    while tl.sum(((seen == 0) & (t < n)).to(tl.int32), axis=0) > 0:
        seen = tl.load(slot_ptr + t, mask=t < n, volatile=True)
    tl.store(out_ptr + t, seen, mask=t < n)


WAIT_ARGS = {"slot_ptr": "*i64", "out_ptr": "*i64", "n": "i32"}
SM90 = ("cuda", 90, 32)
GFX942 = ("hip", "gfx942", 64)
HELD_ARGS = dict(
    out_ptr="*{}",
    in_ptr="*{}",
    slot_ptr="*i64",
    n_rows="i32",
    n_cols="i32",
    in_row_stride="i32",
    in_col_stride=1,
    lead="i32",
    out_row_shift="i32",
    n_tiles="i32",
    TILES=16,
    VECTORS=True,
    PEELED=False,
    TICKET=True,
)
PARTIALS_ARGS = dict(
    part_ptr="*fp32",
    in_ptr="*{}",
    n_rows="i32",
    n_cols="i32",
    in_row_stride="i32",
    in_col_stride=1,
    n_tiles="i32",
    BLOCK_N=8192,
    PDL=True,
)
MERGE_ARGS = dict(PARTIALS_ARGS, out_ptr="*{}", TILES=16)
KERNEL_ARGS = {
    "held": (lr.softmax_long_rows_kernel, HELD_ARGS),
    "partials": (few_rows.softmax_partials_kernel, PARTIALS_ARGS),
    "merge": (few_rows.softmax_merge_kernel, MERGE_ARGS),
}
# Arguments Triton would specialise on 16 (pointers to 16 bytes, integers of multiples
# of 16): rows of 50257 columns, contiguous (out_row_shift and lead 0) or 50264 apart.
CONTIGUOUS = ["out_ptr", "in_ptr", "slot_ptr", "lead", "out_row_shift"]
PADDED = ["out_ptr", "in_ptr", "slot_ptr", "lead", "in_row_stride"]
# A job: whose kernel (KERNEL_ARGS', or "test": this file's), the target, the dtype,
# constexprs beyond its arguments', the arguments Triton specialises on 16, the warps.
JOBS = {
    "peeled bf16": ("held", SM90, "bf16", dict(BLOCK_N=16384, PEELED=True), CONTIGUOUS, 8),
    "peeled fp32": ("held", SM90, "fp32", dict(BLOCK_N=8192, PEELED=True), CONTIGUOUS, 4),
    "peeled padded": ("held", SM90, "bf16", dict(BLOCK_N=16384, PEELED=True), PADDED, 8),
    "held fp32 gfx942": ("held", GFX942, "fp32", dict(BLOCK_N=8192), CONTIGUOUS, 2),
    "unpeeled bf16": ("held", SM90, "bf16", dict(BLOCK_N=8192, VECTORS=False), ["out_ptr"], 4),
    "partials bf16": ("partials", SM90, "bf16", {}, ["in_ptr", "n_cols", "in_row_stride"], 4),
    "merge bf16": ("merge", SM90, "bf16", {}, ["out_ptr", "in_ptr", "n_cols", "in_row_stride"], 4),
    "merge fp32 gfx942": ("merge", GFX942, "fp32", dict(PDL=False), ["out_ptr", "in_ptr"], 2),
    "wait_atomic": ("test", GFX942, "", {}, [], 1),
    "wait_volatile": ("test", GFX942, "", {}, [], 1),
}


def compile_jobs() -> None:
    """In a process of its own (see `isa`): each of JOBS compiled, its assembly (PTX or
    AMDGCN) printed as JSON; or, for a target this Triton cannot compile even
    wait_atomic for (no backend, no assembler), why not."""
    from triton.backends.compiler import GPUTarget

    def build(kernel, target, signature, constexprs=None, attrs=None, warps=1):
        src = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
        compiled = triton.compile(src, target=GPUTarget(*target), options={"num_warps": warps})
        return compiled.asm["ptx" if target[0] == "cuda" else "amdgcn"]

    cannot = {}
    for target in {job[1] for job in JOBS.values()}:
        try:
            build(wait_atomic, target, WAIT_ARGS)
        except Exception as e:  # noqa: BLE001 - the reason to skip
            cannot[target] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    found = {}
    for name, (where, target, dtype, constants, divisible, warps) in JOBS.items():
        if target in cannot:
            found[name] = cannot[target]
            continue
        kernel, args = (globals()[name], WAIT_ARGS) if where == "test" else KERNEL_ARGS[where]
        args = dict(args)
        args.update(constants)
        signature = {
            a: args[a].format(dtype) if isinstance(args[a], str) else "constexpr"
            for a in kernel.arg_names
        }
        constexprs = {a: v for a, v in args.items() if not isinstance(v, str)}
        attrs = {(kernel.arg_names.index(a),): [["tt.divisibility", 16]] for a in divisible}
        found[name] = build(kernel, target, signature, constexprs, attrs, warps)
    print(json.dumps(found))


@pytest.fixture(scope="module")
def isa(tmp_path_factory):
    """JOBS compiled by a fresh Python: softmax.py picks the interpreter where torch sees
    no GPU, and the interpreter's triton.language cannot compile, so that process lets
    torch see one (nothing launches) and compiles into a cache of its own."""
    code = (
        "import sys, torch; torch.cuda.is_available = lambda: True; "
        f"sys.path[:0] = [{str(ROOT / 'tests')!r}]; "
        "import test_long_rows; test_long_rows.compile_jobs()"
    )
    cache = tmp_path_factory.mktemp("triton-cache")
    env = {"TRITON_CACHE_DIR": str(cache), "TRITON_INTERPRET": "0"}  # not this process's
    p = run(sys.executable, "-c", code, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def assembly(isa, name):
    asm = isa[name]
    if isinstance(asm, dict):
        pytest.skip(f"Triton {triton.__version__} cannot compile {name} here: {asm['error']}")
    return asm


def count(ptx, pattern):
    return len(re.findall(pattern, ptx))


# PTX's global loads and stores of the tiles: 16 bytes (v4.b32), or one 16-bit element,
# with any cache hints.
LOAD_16_BYTES = r"\bld\.global(\.L[12]::\w+)*\.v4\.b32\b"
LOAD_HALF = r"\bld\.global(\.L[12]::\w+)*\.b16\b"
STORE_16_BYTES = r"\bst\.global(\.L[12]::\w+)*\.v4\.b32\b"
STORE_HALF = r"\bst\.global(\.L[12]::\w+)*\.b16\b"


def test_peeled_rows_load_16_bytes_at_a_time_for_sm90(isa):
    # A bf16 tile of 16384 columns on 8 warps, 64 elements a thread: 8 loads of 16 bytes,
    # where the same rows (50257 columns) unpeeled load an element at a time, 64 a
    # thread; and the head and the tail, an element each for some threads. Stores too,
    # where out's rows lie on the same 16 bytes as the input's (contiguous rows).
    peeled, unpeeled = assembly(isa, "peeled bf16"), assembly(isa, "unpeeled bf16")
    assert count(peeled, LOAD_16_BYTES) == 8 and count(peeled, LOAD_HALF) <= 2
    assert count(peeled, STORE_16_BYTES) == 8 and count(peeled, STORE_HALF) <= 1
    assert count(unpeeled, LOAD_16_BYTES) == 0 and count(unpeeled, LOAD_HALF) == 64
    # float32: 8192 columns on 4 warps, 16 loads of 4 columns.
    assert count(assembly(isa, "peeled fp32"), LOAD_16_BYTES) == 16
    # Rows 50264 apart, out's 50257 apart: loads of 16 bytes, stores of an element.
    padded = assembly(isa, "peeled padded")
    assert count(padded, LOAD_16_BYTES) == 8 and count(padded, STORE_16_BYTES) == 0
    assert count(padded, STORE_HALF) == 64 + 1


def test_the_merge_loads_its_tile_before_it_waits_for_the_partials_on_sm90(isa):
    # PDL: each partials program lets the merge launch at once, and the merge loads its
    # tile (bf16, 8192 columns on 4 warps: 8 loads of 16 bytes a thread) before
    # griddepcontrol.wait, which returns once the partials have finished.
    partials, merge = assembly(isa, "partials bf16"), assembly(isa, "merge bf16")
    assert count(partials, r"griddepcontrol\.launch_dependents") == 1
    assert count(partials, LOAD_16_BYTES) == 8
    assert count(merge, r"griddepcontrol\.wait") == 1
    wait = merge.index("griddepcontrol.wait")
    assert count(merge[:wait], LOAD_16_BYTES) == 8 and count(merge[wait:], STORE_16_BYTES) == 8
    assert count(merge[:wait], r"\bld\.global") == 8  # the partials only after the wait
    assert "griddepcontrol" not in assembly(isa, "merge fp32 gfx942")  # AMD: stream order


def loops_read(asm: str) -> list[bool]:
    """For each loop of AMDGCN assembly, whether it reads memory inside it. LLVM marks a
    loop's header block '=>This (Inner) Loop Header' and each other block of it 'in Loop:
    Header=BB...'; a read is a load or an atomic, global, buffer or flat."""
    blocks = re.split(r"\n(?=\.LBB\w+:|; %bb\.\d+:)", asm)
    loops = {}
    for block in blocks:
        label = re.match(r"\.L(BB\w+):", block)
        inside = label if "Loop Header:" in block else re.search(r"in Loop: Header=(BB\w+)", block)
        if inside:
            loops[inside[1]] = loops.get(inside[1], "") + block
    return [bool(re.search(r"\b(global|buffer|flat)_(load|atomic)", b)) for b in loops.values()]


def test_the_wait_reads_its_slots_inside_its_loop_on_amd(isa):
    # The held kernel's one loop, its wait, reads the slots atomically on every pass.
    assert loops_read(assembly(isa, "held fp32 gfx942")) == [True]
    # A volatile load is hoisted out of the same wait (so it would spin for ever on its
    # first value), and the test sees it; an atomic read is not.
    assert loops_read(assembly(isa, "wait_volatile")) == [False]
    assert loops_read(assembly(isa, "wait_atomic")) == [True]


# On the GPU, at full size.


def gpu_plan(x):
    return lr.plan(*x.shape, x.element_size(), vectors(x), x.device.index)


def few(x):
    """Whether x's rows are few enough for few_rows.py's launches on this GPU: FEW_ROWS
    rows or fewer of FEW_ELEMENTS in all, loaded 16 bytes at a time, on an NVIDIA GPU with
    PDL."""
    pdl = few_rows.has_pdl(torch.cuda.get_device_properties(0))
    return pdl and vectors(x) and len(x) <= lr.FEW_ROWS and x.numel() <= lr.FEW_ELEMENTS


def n_sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cols", [50257, 32001, 151939])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_gpu_peeled_rows(dtype, cols, rows):
    x = randn(rows, cols, dtype, scale=10)
    assert not lr.aligned(x) and lr.peel(x) == 0
    whole = dtype == torch.float32 and cols <= lr.WHOLE_ROW_COLS and rows >= 8 * n_sms()
    tiles = few_rows.softmax_partials_kernel if few(x) else lr.softmax_long_rows_kernel
    assert gpu_plan(x).kernel is (sm.softmax_kernel if whole else tiles)
    x[:, 0] = x[:, -1] = 100.0  # head and tail the largest
    if rows > 1:
        x[1, :] = -float("inf")  # a row of -inf: NaN, as torch gives
    y = check(x, lr.softmax)
    assert rows == 1 or y[1].isnan().all()
    check(randn(rows, cols + 9, dtype)[:, 9:], lr.softmax)  # a first row 9 elements in
    check(randn(rows, cols + 7, dtype)[:, :cols], lr.softmax)  # rows further apart


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("cols", VOCABS)
@pytest.mark.parametrize("rows", [1, 2, 16])
def test_gpu_small_batches_of_logits(dtype, cols, rows):
    x = randn(rows, cols, dtype, scale=10)
    p = gpu_plan(x)
    assert p.kernel is (few_rows.softmax_partials_kernel if few(x) else lr.softmax_long_rows_kernel)
    assert few(x) or p.ticket == (rows * p.n_tiles > lr.usable_sms(n_sms()))
    check(x, lr.softmax)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [16385, 20000, 32000, 32768])
def test_gpu_whole_float32_rows(cols):
    x = randn(8 * n_sms(), cols, scale=10)
    assert gpu_plan(x).kernel is sm.softmax_kernel
    x[1, :] = -float("inf")
    x[2, 5] = float("nan")
    y = check(x, lr.softmax)
    assert y[1].isnan().all() and y[2].isnan().all()
    x = randn(8 * n_sms() - 1, cols)
    assert gpu_plan(x).kernel is lr.softmax_long_rows_kernel
    check(x, lr.softmax)


@pytest.mark.gpu
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tiles", [3, 64, 1000])
def test_gpu_long_rows(dtype, tiles, aligned):
    # Up to a tile an SM, each held; 1000 tiles, lagged. Unaligned rows here are strided
    # (not peeled): an element at a time, in tiles of 8192 columns in every dtype.
    tile = lr.TILE_BYTES // (dtype.itemsize if aligned else 4)
    cols = tiles * tile - (16 if aligned else 5)
    x = randn(9, cols, dtype, scale=10)
    if not aligned:
        x = randn(cols, 9, dtype, scale=10).t()
    assert vectors(x) == aligned
    p = gpu_plan(x)
    holds = tiles <= n_sms()
    held_ = few_rows.softmax_partials_kernel if few(x) else lr.softmax_long_rows_kernel
    assert p.kernel is (held_ if holds else lr.softmax_long_rows_lagged_kernel)
    x[1, :] = -float("inf")
    x[2, : tile + 7] = -float("inf")  # a whole tile of -inf: it adds nothing
    y = check(x, lr.softmax)
    assert y[1].isnan().all() and (y[2, : tile + 7] == 0).all()


def path_inputs(dtype):
    """An input for each path on this GPU: (name, x, kernel, ticket)."""
    tile, held_, sms = lr.TILE_BYTES // dtype.itemsize, lr.softmax_long_rows_kernel, n_sms()
    if few(x := randn(2, 4 * tile, dtype)):
        yield "few rows", x, few_rows.softmax_partials_kernel, True
    yield "held, program id", randn(lr.FEW_ROWS + 1, 4 * tile, dtype), held_, False
    yield "held, ticket", randn(64, 16 * tile, dtype), held_, True
    yield "peeled", randn(lr.FEW_ROWS + 1, 50257, dtype), held_, False
    yield "lagged", randn(4, (sms + 1) * tile, dtype), lr.softmax_long_rows_lagged_kernel, True
    if dtype == torch.float32:
        yield "whole rows", randn(8 * sms, 20000, dtype), sm.softmax_kernel, False


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_each_path_replayed_from_a_cuda_graph(dtype):
    # Slots and counters are zeroed inside the graph, so every replay starts afresh.
    for name, x, kernel, ticket in path_inputs(dtype):
        p = gpu_plan(x)
        assert p.kernel is kernel and p.ticket == ticket, name
        lr.softmax(x)  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = lr.softmax(x)
        for _ in range(3):
            x.normal_()
            graph.replay()
            torch.cuda.synchronize()
            assert_close(y, torch.softmax(x.float(), dim=1))


@pytest.mark.gpu
@pytest.mark.skipif(bool(lr.AMD), reason="maxnreg is an NVIDIA option")
@pytest.mark.parametrize("cols", [8 * 16384, 50257], ids=["aligned", "peeled"])
def test_gpu_held_half_tiles_fit_their_registers(monkeypatch, cols):
    # HALF_TILE_REGS a thread; Triton 3.9 spills there (more where peeled).
    x = randn(2, cols, torch.bfloat16)
    recorder = Recorder()
    with monkeypatch.context() as m:
        on_a_gpu(m, n_sms(), softmax_long_rows_kernel=recorder)
        lr.launch(x, torch.empty_like(x))
    ((grid, args),) = recorder.launches
    assert args["maxnreg"] == lr.HALF_TILE_REGS
    compiled = lr.softmax_long_rows_kernel.warmup(**args, grid=grid)
    compiled._init_handles()
    assert compiled.n_regs <= lr.HALF_TILE_REGS


@pytest.mark.gpu
def test_gpu_long_rows_under_an_mps_share(monkeypatch):
    # Planned for a quarter of the SMs: rows of more tiles than that take the lagged path.
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    x = randn(4, (n_sms() // 4 + 1) * 8192)
    assert gpu_plan(x).kernel is lr.softmax_long_rows_lagged_kernel
    check(x, lr.softmax)
