"""few_rows.py: a few long rows in two launches, partials then their merge, against
torch.softmax in Triton's interpreter (the merge after the partials in stream order), how
it launches where the GPU has programmatic dependent launch (PDL), and on a GPU.
"""

import sys
from types import SimpleNamespace

import pytest
import torch

# softmax.py first: it picks Triton's interpreter where there is no GPU, before Triton loads.
import softmax as sm
from conftest import run
from test_softmax import DTYPES, Recorder, check, randn

# isort: split
import few_rows as fr


def tiled(block_n):
    """few_rows.softmax with tiles of block_n columns: rows of a few tiles stay small."""

    def softmax(x):
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        fr.launch(sm.as_rows(x), out, block_n, 1, False)
        return out

    return softmax


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 7), (3, 64), (2, 100), (16, 37)], ids=str)
def test_two_launches_match_torch(shape, dtype):
    check(randn(*shape, dtype, scale=10), tiled(16))


def test_strided_inputs_and_any_rank():
    check(randn(6, 140)[:, :100], tiled(16))  # row stride wider than the row
    check(randn(100, 6).t(), tiled(16))  # column stride 6
    check(randn(12, 100)[::2, ::3], tiled(16))
    check(torch.randn(2, 3, 40, device=sm.DEVICE), fr.softmax)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_awkward_values(dtype):
    y = check(randn(2, 50, dtype, scale=1e4), tiled(16))  # exp() would overflow unshifted
    assert torch.isfinite(y).all()
    x = randn(5, 50, dtype)
    x[0, ::3] = -float("inf")  # some -inf: those entries become 0
    x[1, :32] = -float("inf")  # whole tiles of -inf add nothing
    x[2, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    x[4, 40] = float("nan")  # a NaN: a row of NaN, as torch
    y = check(x, tiled(16))
    assert (y[0, ::3] == 0).all() and (y[1, :32] == 0).all() and y[2].isnan().all()
    assert torch.isfinite(y[3]).all() and y[4].isnan().all()


@pytest.mark.parametrize("wrapped", [False, True], ids=["eager", "op"])
def test_the_merge_overlaps_the_partials_by_pdl_unless_wrapped(monkeypatch, wrapped):
    # Unwrapped, the partials let the merge launch early (PDL) and the merge is launched
    # with launch_pdl; wrap_triton passes no launch_pdl on, so wrapped, neither.
    partials, merge = Recorder(), Recorder()
    monkeypatch.setattr(fr, "softmax_partials_kernel", partials)
    monkeypatch.setattr(fr, "softmax_merge_kernel", merge)
    wrap = (lambda kernel: kernel) if wrapped else None
    x = randn(3, 1000)
    fr.launch(x, torch.empty_like(x), 256, 2, True, wrap)
    ((grid, p_args),) = partials.launches
    ((m_grid, m_args),) = merge.launches
    assert grid == m_grid == (12,) and p_args["n_tiles"] == m_args["n_tiles"] == 4
    assert p_args["part_ptr"] is m_args["part_ptr"] and p_args["part_ptr"].numel() == 2 * 12
    assert "out_ptr" not in p_args and m_args["TILES"] == 4 and p_args["num_warps"] == 2
    assert p_args["PDL"] == m_args["PDL"] == (not wrapped)
    assert m_args.get("launch_pdl") == (None if wrapped else True)


def test_pdl_on_nvidia_from_hopper_on(monkeypatch):
    hopper, ampere = SimpleNamespace(major=9), SimpleNamespace(major=8)
    assert fr.has_pdl(hopper) and not fr.has_pdl(ampere)
    monkeypatch.setattr(torch.version, "hip", "7.0")  # an MI300X's gfx942 reads as major 9
    assert not fr.has_pdl(hopper)


def test_the_command_line_checks_a_lone_row():
    p = run(sys.executable, "few_rows.py", "--cols", 20000, "--dtype", "bfloat16")
    assert p.returncode == 0 and p.stdout.endswith("softmax: PASS\n"), p.stderr
    assert "rows=1 cols=20000" in p.stdout


def test_the_command_line_refuses_rows_of_more_tiles_than_the_merge_holds():
    p = run(sys.executable, "few_rows.py", "--cols", fr.MAX_TILES * fr.BLOCK_N + 1)
    assert p.returncode == 2 and p.stderr.startswith("softmax: error: rows of more than")
    assert "python long_rows.py" in p.stderr and not p.stdout


# On the GPU.


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("cols", [32000, 151936])
@pytest.mark.parametrize("rows", [1, 16])
def test_gpu_two_launches(dtype, cols, rows):
    x = randn(rows, cols, dtype, scale=10)
    x[0, : fr.BLOCK_N + 5] = -float("inf")  # a whole tile of -inf adds nothing
    y = check(x, fr.softmax)
    assert (y[0, : fr.BLOCK_N + 5] == 0).all()
    graph, y = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):  # nothing zeroed: every replay starts afresh
        y = fr.softmax(x)
    for _ in range(3):
        x.normal_()
        graph.replay()
        torch.cuda.synchronize()
        check(x, lambda _: y)
