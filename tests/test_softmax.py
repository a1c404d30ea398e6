"""softmax.py: softmax() against torch.softmax, its launch, its command line, the file
copied alone, and `make profile` / `make intra` of it end to end.

On a CPU machine the kernel runs in Triton's interpreter; the tests marked gpu run the same
checks on a real GPU at full size. Long rows: test_long_rows.py; the op: test_softmax_op.py.
"""

import json
import shutil
import sys
import threading
from types import SimpleNamespace

import pytest
import torch
import yaml

import softmax as sm
from conftest import ROOT, run

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def check(x, softmax=sm.softmax):
    """softmax(x) matches torch.softmax, float32 within the CLI's tolerance and a half type
    within one unit in the last place, and leaves x alone."""
    before = x.clone()
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    assert_close(y, torch.softmax(x.float(), dim=-1))
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)  # x untouched
    return y


def assert_close(y, ref):
    """y is ref (float32) as computed in float32: within the CLI's tolerance in float32,
    and in a half type ref rounded once, within one unit in the last place of each value.
    (TOLERANCE's half bounds, an ulp of 1, are 11-180x what computing in half costs.)"""
    if y.dtype == torch.float32:
        torch.testing.assert_close(y, ref, atol=sm.TOLERANCE[y.dtype], rtol=0, equal_nan=True)
        return
    finfo = torch.finfo(y.dtype)
    _, exponent = torch.frexp(ref.abs())
    # Below the smallest normal value, flushing to zero (or not) is the hardware's choice.
    ulp = (finfo.eps * torch.exp2(exponent.float() - 1)).clamp(min=finfo.smallest_normal)
    err = (y.float() - ref).abs()
    same = (y.float() == ref) | (y.isnan() & ref.isnan())
    # One ulp, not half: the interpreter's cast to bfloat16 truncates; 1% of an ulp more
    # for float32's own rounding of the same sum, which torch adds in another order.
    assert (same | (err <= 1.01 * ulp)).all(), f"{(err / ulp)[~same].max():.3f} ulps off"


def randn(rows, cols, dtype=torch.float32, scale=1.0):
    return (torch.randn(rows, cols, device=sm.DEVICE) * scale).to(dtype)


SHAPES = [(1, 1), (9, 1), (5, 3), (3, 1000), (3, 1023), (3, 1025), (2, 4097), (300, 64)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torch(shape, dtype):
    check(randn(*shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_awkward_values(dtype):
    # Near 1e4, exp() overflows to inf without the max subtraction: rows of inf / inf.
    y = check(randn(4, 50, dtype, scale=1e4))
    assert torch.isfinite(y).all()
    check(torch.full((3, 50), 7.0, device=sm.DEVICE, dtype=dtype))  # constant rows
    x = randn(4, 50, dtype)
    x[0, ::3] = -float("inf")  # some -inf: those entries become 0
    x[1, :] = -float("inf")  # all -inf: NaN, as torch.softmax gives
    x[2, 48:] = float("nan")  # a NaN: a row of NaN, as torch gives
    y = check(x)
    assert (y[0, ::3] == 0).all() and y[1].isnan().all() and y[2].isnan().all()
    assert torch.isfinite(y[3]).all()


@pytest.mark.parametrize("shape", [(7,), (2, 3, 50), (2, 1, 3, 17), (4, 0, 5), (3, 0)], ids=str)
def test_any_rank_over_the_last_dimension(shape):
    check(torch.randn(shape, device=sm.DEVICE))


@pytest.mark.parametrize(
    "make, copied",
    [
        (lambda: torch.randn(4, 6, 50)[:, ::2], False),  # leading dimensions of one row stride
        (lambda: torch.randn(50, 3, 4).permute(1, 2, 0), False),  # columns 12 apart
        (lambda: torch.randn(4, 6, 50).transpose(0, 1), True),  # no one row stride
        (lambda: torch.randn(300, 4).t(), False),  # a column stride of 4
    ],
    ids=["sliced", "permuted", "transposed", "strided columns"],
)
def test_rows_are_a_view_where_the_strides_allow(make, copied):
    # The kernel reads a view of x's rows; only where none exists does it read a copy.
    x = make().to(sm.DEVICE)
    assert (sm.as_rows(x).data_ptr() != x.data_ptr()) == copied
    check(x)


def test_column_offsets_past_32_bits_are_read_from_a_copy():
    # Meta tensors: shapes and strides with no memory behind them.
    big = torch.empty(2**32, device="meta")
    assert sm.as_rows(big.as_strided((2, 3), (1, 2**30))).is_contiguous()  # 2 * 2**30
    assert not sm.as_rows(big.as_strided((2, 3), (1, 2**29))).is_contiguous()


def test_a_negated_view_is_read_as_the_values_it_shows():
    # z.conj().imag negates z's imaginary parts lazily (is_neg()); the kernel reads stored
    # values, so such a view is resolved first.
    z = torch.randn(4, 50, dtype=torch.complex64, device=sm.DEVICE)
    check(z.imag)
    check(z.conj().imag)


def test_empty_and_bad_inputs():
    assert sm.softmax(randn(0, 5)).shape == (0, 5)
    with pytest.raises(ValueError, match="has too many rows for 32-bit indices"):
        sm.softmax(torch.zeros(1, 1, device=sm.DEVICE).expand(2**31 - 2**16 + 1, 5))
    with pytest.raises(ValueError, match="longer than one program holds .*long_rows.py"):
        sm.softmax(torch.zeros(1, 1, device=sm.DEVICE).expand(3, sm.MAX_FUSED_COLS + 1))
    with pytest.raises(ValueError, match="1-D or more .* got a 0-D"):
        sm.softmax(torch.zeros((), device=sm.DEVICE))
    with pytest.raises(ValueError, match="float32, float16 or bfloat16 .* got .*float64"):
        sm.softmax(torch.zeros(2, 2, device=sm.DEVICE, dtype=torch.float64))
    for other in ([[1.0]], torch.zeros(2, 2).to_sparse()):
        with pytest.raises(ValueError, match="expects a dense torch.Tensor"):
            sm.softmax(other)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["to_sparse", "to_sparse_csr", "to_sparse_csc"])
def test_sparse_tensors_are_refused_where_a_gpu_would_take_the_compiled_launch(monkeypatch, layout):
    # Compressed layouts have no is_contiguous(): the layout is asked first.
    monkeypatch.setattr(sm, "INTERPRET", False)
    with pytest.raises(ValueError, match="expects a dense torch.Tensor"):
        sm.softmax(getattr(torch.zeros(2, 2), layout)())


def test_concurrent_calls_all_get_their_own_result():
    # Threads calling softmax() at once: the interpreter patches triton.language while a
    # kernel runs, so interpreted launches take turns; on a GPU each is a launch.
    inputs = [randn(3 + i, 40 + i) for i in range(8)]
    start, results, errors = threading.Barrier(len(inputs)), {}, []

    def call(i):
        start.wait()
        try:
            for _ in range(3):
                results[i] = sm.softmax(inputs[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, x in enumerate(inputs):
        torch.testing.assert_close(results[i], torch.softmax(x, dim=1), atol=1e-6, rtol=0)


# The plan and the launch as a GPU makes them, on CPU: a recorder stands in for the kernel.

ARG_NAMES = sm.softmax_kernel.arg_names  # softmax.py passes its kernel's arguments in order
INTERPRETED = sm.softmax_kernel


class Recorder:
    """Stands in for a @triton.jit kernel: kernel[grid](*args, **kwargs) records grid and
    the arguments by name, and launches `kernel` with them where one is given."""

    def __init__(self, kernel=None):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            args = {**dict(zip(ARG_NAMES, args, strict=False)), **kwargs}
            self.launches.append((grid, args))
            if self.kernel is not None:
                self.kernel[grid](**args)

        return launch


def gpu(monkeypatch, sms, warp_size=32, major=8):
    """torch.cuda.get_device_properties of a GPU of `sms` SMs and compute capability
    `major` (8: no PDL); the plans made anew."""
    props = SimpleNamespace(multi_processor_count=sms, warp_size=warp_size, major=major)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    sm.plan.cache_clear()


@pytest.fixture(autouse=True)
def fresh_plans():
    sm.plan.cache_clear()
    yield
    sm.plan.cache_clear()


@pytest.mark.parametrize(
    "rows, cols, size, sms, warp_size, planned",
    [
        (4096, 256, 2, 132, 32, (4, 256, 2, (1024,))),  # short rows share a program
        (4096, 1024, 2, 132, 32, (1, 1024, 2, (4096,))),  # 16 half elements a thread
        (4096, 1024, 4, 132, 32, (1, 1024, 4, (4096,))),  # 8 float32 elements a thread
        (4096, 16384, 2, 132, 32, (1, 16384, 16, (4096,))),  # at most 16 warps
        (64, 256, 2, 132, 32, (1, 256, 1, (64,))),  # two programs an SM come first
        (4096, 256, 2, 304, 64, (4, 256, 1, (1024,))),  # an MI300X: 304 CUs of 64 lanes
    ],
)
def test_the_plan_on_a_gpu(monkeypatch, rows, cols, size, sms, warp_size, planned):
    gpu(monkeypatch, sms, warp_size)
    assert tuple(sm.plan(rows, cols, 0, size)) == planned


def test_the_interpreter_gets_few_large_programs():
    # Each program is interpreted in Python: 256 rows of 1024 run as 4 programs, not 256.
    assert sm.plan(256, 1024, None, 4).grid == (4,)


def test_the_launch_passes_the_plan_and_the_rows_strides(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(sm, "softmax_kernel", recorder)
    gpu(monkeypatch, sms=132)
    planned = sm.plan.__wrapped__  # for device 0, whatever the tensor's
    monkeypatch.setattr(sm, "plan", lambda rows, cols, device, size: planned(rows, cols, 0, size))
    x = randn(4096, 600)[:, :500]  # a row stride of 600
    out = torch.empty(4096, 500, device=sm.DEVICE)
    sm.launch(x, out)
    ((grid, args),) = recorder.launches
    assert grid == (2048,) and args.pop("out_ptr") is out and args.pop("in_ptr") is x
    assert args == dict(
        n_rows=4096,
        n_cols=500,
        in_row_stride=600,
        in_col_stride=1,
        BLOCK_M=2,
        BLOCK_N=512,
        num_warps=4,  # 8 float32 elements a thread
    )


# The launch of what a model passes, as Triton's tutorial 02 launches: the kernel compiled
# once (warmup), then compiled[grid](all its arguments in order). The interpreter compiles
# nothing: a fake compiles, and launches the interpreted kernel.


class Tutorial(Recorder):
    """softmax_kernel on a GPU: kernel[grid](...), the general path, is recorded in
    launches; warmup(...) compiles, recorded in warmups, a Compiled, whose launches
    compiled[grid](*args) are recorded in compiled_launches. Each runs the interpreted
    kernel."""

    def __init__(self):
        super().__init__(INTERPRETED)
        self.warmups, self.compiled_launches = [], []

    def warmup(self, *args, grid, num_warps):
        self.warmups.append((args, grid, num_warps))
        return Compiled(self, args)


class Compiled:
    """Stands in for a CompiledKernel: compiled[grid](*args) records itself, grid and args
    in its owner's compiled_launches, then runs the interpreted kernel."""

    def __init__(self, owner, warmed):
        self.owner, self.warmed = owner, warmed

    def __getitem__(self, grid):
        def run(*args):
            assert len(grid) == 3 and len(args) == len(ARG_NAMES)  # as the tutorial passes
            self.owner.compiled_launches.append((self, grid, args))
            INTERPRETED[grid[:1]](*args)

        return run


@pytest.fixture
def on_gpu(monkeypatch):
    """softmax() as on GPU -1 (a CPU tensor's get_device()), the current one, of 132 SMs:
    its kernel a Tutorial, no kernel compiled yet."""
    tutorial = Tutorial()
    monkeypatch.setattr(sm, "INTERPRET", False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: -1)
    monkeypatch.setattr(sm, "softmax_kernel", tutorial)
    monkeypatch.setattr(sm, "_compiled", {})
    monkeypatch.setattr(sm, "launching", lambda x: sm._interpreting)
    gpu(monkeypatch, sms=132)
    return tutorial


def test_a_contiguous_input_launches_compiled_once_as_the_tutorial_does(on_gpu):
    x = randn(64, 500)
    for _ in range(3):
        check(x)
    ((args, grid, warps),) = on_gpu.warmups  # compiled once, for x's shape and dtype
    assert args[0].dtype == args[1].dtype == torch.float32
    assert args[2:] == (64, 500, 500, 1, 1, 512) and grid == (64,) and warps == 2
    assert on_gpu.launches == [] and len(on_gpu.compiled_launches) == 3
    for compiled, grid, args in on_gpu.compiled_launches:
        assert grid == (64, 1, 1) and args[1] is x and args[2:] == compiled.warmed[2:]


@pytest.mark.parametrize(
    "make",
    [
        lambda: randn(64, 600)[:, :500],  # strides: a row stride of 600
        lambda: randn(1, 64 * 500 + 1)[0, 1:].view(64, 500),  # 4 bytes past 16-byte alignment
        lambda: torch.nn.Parameter(randn(64, 500), requires_grad=False),  # a subclass
        lambda: torch._neg_view(randn(64, 500)),  # stores the values negated
        lambda: randn(64, 0),  # nothing to launch
    ],
    ids=["strided", "misaligned", "subclass", "negated", "empty"],
)
def test_what_the_kernel_was_not_compiled_for_takes_the_general_path(on_gpu, make):
    x = make()
    check(x)
    assert on_gpu.warmups == [] and on_gpu.compiled_launches == []
    assert len(on_gpu.launches) == (1 if x.numel() else 0)


def test_another_gpu_takes_the_general_path(on_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # x is not on it
    check(randn(64, 500))
    assert on_gpu.warmups == [] and len(on_gpu.launches) == 1


def test_each_dtype_and_shape_gets_a_kernel_compiled_for_it(on_gpu):
    half, brain = randn(64, 500, torch.float16), randn(64, 500, torch.bfloat16)
    for x in (half, brain, randn(32, 500, torch.float16), half):
        check(x)
    made = [(args[0].dtype, args[2]) for args, _, _ in on_gpu.warmups]
    assert made == [(torch.float16, 64), (torch.bfloat16, 64), (torch.float16, 32)]
    launched = [
        (c.warmed[0].dtype, args[1].dtype, args[2]) for c, _, args in on_gpu.compiled_launches
    ]
    assert all(made == given for made, given, _ in launched)  # each with its own kernel
    assert [rows for _, _, rows in launched] == [64, 64, 32, 64]


@pytest.mark.parametrize("version", ["3.2.0", "3.10.0", "4.0.0+git1234"])
def test_a_triton_whose_compiled_launch_may_differ_takes_the_general_path(
    on_gpu, monkeypatch, version
):
    # Before 3.3 a compiled kernel's launch took no constexprs, and one after 3.9 is
    # unknown: such a kernel is not launched compiled, nor compiled again.
    monkeypatch.setattr(sm.triton, "__version__", version)
    x = randn(64, 500)
    check(x)
    check(x)
    assert len(on_gpu.warmups) == 1 and on_gpu.compiled_launches == []
    assert len(on_gpu.launches) == 2


@pytest.mark.parametrize("version", ["3.3.0", "3.6.0", "3.9.1+gitabcdef"])
def test_a_triton_whose_compiled_launch_is_known_launches_it(on_gpu, monkeypatch, version):
    monkeypatch.setattr(sm.triton, "__version__", version)
    check(randn(64, 500))
    assert len(on_gpu.compiled_launches) == 1 and on_gpu.launches == []


def test_refused_inputs_are_refused_as_before(on_gpu):
    with pytest.raises(ValueError, match="got .*float64"):
        sm.softmax(torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="longer than one program holds"):
        sm.softmax(torch.zeros(1, sm.MAX_FUSED_COLS + 1))
    assert on_gpu.warmups == [] and on_gpu.launches == []


def test_the_interpreter_takes_the_general_path(monkeypatch):
    monkeypatch.setattr(sm, "softmax_kernel", Tutorial())
    check(randn(64, 500))
    assert sm.softmax_kernel.warmups == [] and len(sm.softmax_kernel.launches) == 1


def test_a_compiled_launch_calls_proton_s_hook_with_the_launch_metadata(monkeypatch):
    # Proton's launch hook (make profile HOOK=triton) is Triton's launch_enter_hook, which
    # this Triton's CompiledKernel launch passes to its launcher with the launch_metadata
    # of the arguments named in order: a compiled launch is recorded as kernel[grid]'s is.
    from triton import knobs  # after softmax: it picks the interpreter before Triton loads
    from triton.compiler.compiler import ASTSource, CompiledKernel

    fn = SimpleNamespace(__name__="softmax_kernel", arg_names=ARG_NAMES)
    fn.launch_metadata = sm.launch_metadata
    recorded = []

    def launcher(gx, gy, gz, stream, function, packed, metadata, enter, exit_, *args):
        enter(metadata)  # what the C launcher does before it launches

    kernel = object.__new__(CompiledKernel)
    kernel.__dict__.update(
        module=object(),
        _module_pid=None,
        function=None,
        name="softmax_kernel",
        metadata=SimpleNamespace(name="softmax_kernel"),
        packed_metadata=None,
        src=ASTSource(fn, dict.fromkeys(ARG_NAMES, "i32")),
        run=launcher,  # where run is an attribute (Triton 3.6)
        _run=launcher,  # where run is a property (3.9)
    )
    hook = lambda metadata: recorded.append(metadata.get())  # noqa: E731 - as Proton's
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
    x = randn(4, 64)
    kernel[(4, 1, 1)](torch.empty_like(x), x, 4, 64, 64, 1, 1, 64, stream=0)
    ((metadata,),) = [recorded]
    assert metadata["name"] == "softmax_kernel [4x64 float32]"
    assert metadata["bytes"] == 2 * 4 * 64 * 4


def test_launch_metadata_names_the_shape_and_the_bytes_moved():
    args = {"in_ptr": randn(3, 5, torch.bfloat16), "n_rows": 3, "n_cols": 5}
    meta = sm.launch_metadata((3,), SimpleNamespace(name="softmax_kernel"), args)
    assert meta == {"name": "softmax_kernel [3x5 bfloat16]", "bytes": 2 * 3 * 5 * 2}


# The command line, as a user runs it.


def test_cli_prints_the_four_lines():
    p = run(sys.executable, "softmax.py", "--rows", 64, "--cols", 1000, "--iters", 3)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("softmax: device=")
    assert lines[1] == "softmax: rows=64 cols=1000 iters=3"
    assert lines[2].startswith("softmax: max_abs_err=")
    assert float(lines[2].split("=")[1]) <= 1e-6
    assert lines[3] == "softmax: PASS"
    assert p.stderr == ""


def test_softmax_py_copied_alone_checks_its_rows_and_names_the_file_for_longer(tmp_path):
    shutil.copy(ROOT / "softmax.py", tmp_path)
    env = {"PYTHONPATH": ""}
    p = run(sys.executable, "softmax.py", "--rows", 8, "--cols", 16384, cwd=tmp_path, env=env)
    assert p.returncode == 0 and p.stdout.endswith("softmax: PASS\n"), p.stderr
    p = run(sys.executable, "softmax.py", "--cols", 20000, cwd=tmp_path, env=env)
    assert p.returncode == 2 and p.stdout == ""
    assert (
        p.stderr
        == "softmax: error: rows of more than 16384 columns: python long_rows.py --cols 20000\n"
    )


def test_importing_softmax_loads_no_inductor():
    code = "import sys, softmax; print('torch._inductor' in sys.modules)"
    p = run(sys.executable, "-c", code)
    assert p.returncode == 0 and p.stdout == "False\n", p.stderr


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
        (["--rows", "0"], "argument --rows: must be in [1, 2147483648), got 0"),
        (["--cols", "-3"], "argument --cols: must be in [1, 2147483648), got -3"),
        (["--iters", "1.5"], "argument --iters: invalid int value: '1.5'"),
        (["--rows", "many"], "argument --rows: invalid int value: 'many'"),
        (["--rows", "9" * 99], "argument --rows: must be in [1, 2147483648), got 999999"),
        (["--rows", "9" * 5000], "argument --rows: invalid int value: '999999"),
        (["--seed", str(2**63)], "argument --seed: must be in [0, 9223372036854775808)"),
        (["--seed", "-1"], "argument --seed: must be in [0, 9223372036854775808), got -1"),
        (["--cols"], "argument --cols: expected one argument"),
        (["--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--rows", "2147483647", "--cols", "16384"], "needs about"),
    ],
)
def test_cli_refuses_bad_arguments(capsys, args, message):
    status, out, err = main(capsys, *args)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("softmax: error: ")
    assert message in err and len(err) < 200


@pytest.mark.parametrize("wrong", [torch.zeros_like, lambda y: torch.full_like(y, float("nan"))])
def test_cli_fails_on_a_wrong_result(capsys, wrong):
    status = sm.main(["--rows", "8", "--cols", "16"], run=lambda x: wrong(sm.softmax(x)))
    out, err = capsys.readouterr()
    assert status == 1 and "softmax: PASS" not in out
    assert err == "softmax: FAIL result differs from torch.softmax\n"


def test_cli_marks_its_lines_with_the_rank_under_a_launcher(monkeypatch, capsys):
    for name, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    status, out, _ = main(capsys, "--rows", 8, "--cols", 16)
    assert status == 0 and len(out.splitlines()) == 4
    assert all(line.startswith("softmax[rank 3]: ") for line in out.splitlines())
    monkeypatch.setenv("WORLD_SIZE", "1")  # a launcher of one process: as when alone
    assert main(capsys, "--rows", 8, "--cols", 16)[1].endswith("\nsoftmax: PASS\n")
    monkeypatch.setenv("LOCAL_RANK", "one")
    status, out, err = main(capsys)
    assert status == 2 and out == "" and err.count("\n") == 1 and "LOCAL_RANK" in err


# On the GPU, at full size.


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_cli_passes_at_the_default_shape(dtype):
    p = run(sys.executable, "softmax.py", "--dtype", dtype)
    assert p.returncode == 0, p.stderr
    assert p.stdout.endswith("softmax: PASS\n")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4096, 256), (4096, 16384), (65536, 2048), (3, 5, 1000)])
def test_gpu_matches_torch_at_full_size(shape, dtype):
    check(torch.randn(shape, device="cuda").to(dtype))


@pytest.mark.gpu
def test_gpu_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="softmax expects .* on cuda, got .* on cpu"):
        sm.softmax(torch.randn(4, 4))


@pytest.mark.gpu
def test_gpu_scopes_leave_no_trace_without_instrumentation():
    # With instrumentation off, Proton's scopes compile to nothing: no clock read.
    x, out = randn(64, 1024), torch.empty(64, 1024, device="cuda")
    args = dict(out_ptr=out, in_ptr=x, n_rows=64, n_cols=1024, in_row_stride=1024)
    blocks = dict(in_col_stride=1, BLOCK_M=1, BLOCK_N=1024)
    compiled = sm.softmax_kernel.warmup(**args, **blocks, grid=(64,), num_warps=4)
    ptx = compiled.asm["ptx"]
    assert "%clock" not in ptx and "globaltimer" not in ptx


# `make profile` and `make intra` of softmax.py, end to end on the GPU.


def recipe(tmp_path, **proton):
    data = yaml.safe_load((ROOT / "recipe.yaml").read_text())
    data["collect"]["proton"].update(proton)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ours(summary, kernel="softmax_kernel"):
    """The call sites that launched kernel."""
    sites = summary["proton_callsites"]
    return [s for s in sites if any(k["name"].startswith(kernel) for k in s["kernels"])]


def check_capture(p, run_folder, hook):
    assert p.returncode == 0, p.stdout + p.stderr
    assert "softmax: PASS" in p.stdout
    assert (run_folder / "proton.hatchet").is_file()
    summary = json.loads((run_folder / "summary.json").read_text())
    top = summary["proton_kernels"][0]
    assert top["name"].startswith("softmax_kernel")
    assert top["launches"] == 20 + 1
    assert ("gbyte_per_s" in top) == hook
    if hook:  # named by softmax.py's launch_metadata, with the bytes it moves
        assert top["name"] == "softmax_kernel [4096x1024 float32]"
        assert 0.05 < top["pct_of_peak_bw"] < 2
    sites = ours(summary)
    assert sorted(k["launches"] for s in sites for k in s["kernels"]) == [1, 20]
    assert all(s["callsite"].endswith(" softmax") for s in sites)  # softmax()'s launch line
    torch_site = [
        s
        for s in summary["proton_callsites"]
        if any("softmax_warp_forward" in k["name"] for k in s["kernels"])
    ]
    assert len(sites) == 2 and len(torch_site) == 1 and torch_site[0] not in sites


@pytest.mark.gpu
def test_gpu_make_profile(tmp_path):
    p = run("make", "-s", "profile", f"OUT={tmp_path}")
    check_capture(p, tmp_path / "profile" / "latest", hook=False)


@pytest.mark.gpu
def test_gpu_make_profile_with_the_triton_hook(tmp_path):
    p = run("make", "-s", "profile", f"OUT={tmp_path}", "HOOK=triton")
    check_capture(p, tmp_path / "profile" / "latest", hook=True)


@pytest.mark.gpu
def test_gpu_make_profile_of_two_ranks(tmp_path):
    p = run("make", "-s", "profile", f"OUT={tmp_path}", "NPROC=2", "ITERS=3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASS") == 2 and "softmax[rank 1]: PASS" in p.stdout
    summary = json.loads((tmp_path / "profile" / "latest" / "summary.json").read_text())
    assert [r["rank"] for r in summary["proton_ranks"]] == [0, 1]


@pytest.mark.gpu
def test_gpu_make_intra(tmp_path):
    p = run("make", "-s", "intra", f"OUT={tmp_path}", "ITERS=2")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((tmp_path / "intra" / "latest" / "summary.json").read_text())
    scopes = {s["scope"]: s for s in summary["proton_scopes"]}
    assert set(scopes) == {"load", "max", "exp_sum", "store"}
    assert sum(s["share"] for s in scopes.values()) == pytest.approx(1.0)
