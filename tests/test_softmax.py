"""softmax.py: softmax() against torch.softmax, its launch cache, the command line, and
`make profile` / `make intra` of it end to end.

On a CPU machine every kernel runs in Triton's interpreter; the tests marked gpu run
the same checks on a real GPU at full size. The long-row kernels: test_long_rows.py.
"""

import contextlib
import json
import threading
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import ROOT, run

import long_rows
import softmax as sm
import softmax_op

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def check(x):
    """softmax(x) matches torch.softmax within the CLI's tolerance and leaves x alone."""
    before = x.clone()
    y = sm.softmax(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    ref = torch.softmax(x.float(), dim=-1)
    torch.testing.assert_close(y.float(), ref, atol=sm.TOLERANCE[x.dtype], rtol=0, equal_nan=True)
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)  # x untouched
    return y


def randn(rows, cols, dtype=torch.float32, scale=1.0):
    return (torch.randn(rows, cols, device=sm.DEVICE) * scale).to(dtype)


SHAPES = [(1, 1), (9, 1), (5, 3), (3, 1000), (3, 1023), (3, 1025), (2, 4097), (300, 64)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torch(shape, dtype):
    check(randn(*shape, dtype))


def test_short_rows_share_a_program():
    block_m, block_n, _ = sm.launch_config(4096, 256, 132, 32)
    assert block_m > 1 and block_n == 256
    assert sm.launch_config(4096, 1024, 132, 32)[0] == 1
    assert sm.launch_config(256, 262144, 132, 32) is None  # too long for one program


def test_the_interpreter_gets_few_large_programs(monkeypatch):
    # Each program is interpreted in Python: 256 rows of 1024 run as 4 programs, not 256.
    fake = FakeJit(sm.softmax_kernel)
    monkeypatch.setattr(sm, "softmax_kernel", fake)
    monkeypatch.setattr(sm, "_launches", {})
    check(randn(256, 1024))
    assert fake.jit_launches == [(4, 1, 1)]


def test_empty_and_bad_inputs():
    assert sm.softmax(randn(0, 5)).shape == (0, 5)
    for rows, cols in [(2**31 - 2**16 + 1, 5), (3, 2**31)]:  # views of one element
        with pytest.raises(ValueError, match="too large for 32-bit indices"):
            sm.softmax(torch.zeros(1, 1, device=sm.DEVICE).expand(rows, cols))
    with pytest.raises(ValueError, match="1-D or more .* got a 0-D"):
        sm.softmax(torch.zeros((), device=sm.DEVICE))
    with pytest.raises(ValueError, match="float32, float16 or bfloat16 .* got .*float64"):
        sm.softmax(torch.zeros(2, 2, device=sm.DEVICE, dtype=torch.float64))
    for other in ([[1.0]], torch.zeros(2, 2).to_sparse()):  # no strides to key on
        with pytest.raises(ValueError, match="expects a dense torch.Tensor"):
            sm.softmax(other)


@pytest.mark.parametrize("shape", [(7,), (2, 3, 50), (2, 1, 3, 17), (4, 0, 5), (3, 0)], ids=str)
@pytest.mark.parametrize("use_tiles", [False, True], ids=["fused", "tiled"])
def test_any_rank_over_the_last_dimension(request, shape, use_tiles):
    if use_tiles:
        request.getfixturevalue("tiled")
    check(torch.randn(shape, device=sm.DEVICE))


@pytest.mark.parametrize(
    "make, copied",
    [
        (lambda: torch.randn(4, 6, 50)[:, ::2], False),  # leading dimensions of one row stride
        (lambda: torch.randn(50, 3, 4).permute(1, 2, 0), False),  # columns 12 apart
        (lambda: torch.randn(4, 6, 50).transpose(0, 1), True),  # no one row stride
    ],
    ids=["sliced", "permuted", "transposed"],
)
def test_rows_are_a_view_where_the_strides_allow(make, copied):
    # The kernels read a view of x's rows; only where none exists do they read a copy.
    x = make().to(sm.DEVICE)
    assert softmax_op.compile_launch(x)[4] == copied
    check(x)


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


def test_concurrent_calls_all_get_their_own_result():
    # Threads calling softmax() at once: the interpreter patches triton.language while a
    # kernel runs, so interpreted launches take a lock; on a GPU each is a launch.
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


# The launch path of a GPU, on CPU: fakes stand in for Triton's compiled kernels, and
# launch the real kernels in the interpreter with the arguments given.


def interpretable(kernel, args):
    """args with SCOPES and ALIGNED off: the interpreter runs neither Proton's scope
    calls nor inline assembly."""
    off = {"SCOPES", "ALIGNED"}
    return tuple(
        False if name in off else a for name, a in zip(kernel.arg_names, args, strict=True)
    )


class FakeCompiled:
    """What kernel.warmup() returns: compiled[grid](*args) launches it."""

    def __init__(self, kernel, num_warps, options, dry):
        self.kernel, self.num_warps, self.options, self.launches = kernel, num_warps, options, []
        self.dry = dry

    def __getitem__(self, grid):
        def runner(*args):
            self.launches.append(grid)
            if not self.dry:
                self.kernel[grid](*interpretable(self.kernel, args), num_warps=self.num_warps)

        return runner


class FakeJit:
    """A @triton.jit kernel: warmup() 'compiles' (each call counted), kernel[grid](...)
    launches it the slow way (each launch's grid and options kept)."""

    def __init__(self, kernel):
        self.kernel, self.compiled, self.pre_run_hooks = kernel, [], []
        self.jit_launches, self.jit_options = [], []
        self.arg_names, self.dry = kernel.arg_names, False  # dry: launches only counted

    def warmup(self, *args, grid, num_warps, **options):
        self.compiled.append(FakeCompiled(self.kernel, num_warps, options, self.dry))
        return self.compiled[-1]

    def __getitem__(self, grid):
        def run(*args, num_warps, **options):
            self.jit_launches.append(grid)
            self.jit_options.append(options)
            if not self.dry:
                self.kernel[grid](*interpretable(self.kernel, args), num_warps=num_warps)

        return run


KERNELS = {
    "softmax_kernel": sm,
    "softmax_long_rows_kernel": long_rows,
    "softmax_long_rows_lagged_kernel": long_rows,
}


@pytest.fixture
def gpu_path(monkeypatch):
    """softmax() as it runs on a GPU of one SM (CPU tensors stand in), kernels faked."""
    fakes = {}
    for name, module in KERNELS.items():
        fakes[name] = FakeJit(getattr(module, name))
        monkeypatch.setattr(module, name, fakes[name])
    monkeypatch.setattr(sm, "INTERPRET", False)
    monkeypatch.setattr(sm, "_launches", {})
    monkeypatch.setattr(sm, "_one_gpu", sm._one_gpu)  # softmax() sets it: restored afterwards
    monkeypatch.setattr(sm.torch.cuda, "current_device", lambda: -1)  # a CPU tensor's index
    gpu(monkeypatch, sms=1)
    return fakes


def gpu(monkeypatch, sms):
    props = SimpleNamespace(multi_processor_count=sms, warp_size=32)
    monkeypatch.setattr(sm.torch.cuda, "get_device_properties", lambda device: props)


@pytest.fixture
def tiled(monkeypatch):
    """Rows longer than 8 columns cut into tiles of 32 bytes (8 float32 or 16 half
    columns): in the interpreter, the kernel that writes each tile lag tickets after
    reducing it."""
    monkeypatch.setattr(sm, "MAX_FUSED_COLS", 8)
    monkeypatch.setattr(long_rows, "TILE_BYTES", 32)
    monkeypatch.setattr(sm, "_launches", {})  # launches bound to the real limits' kernels


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
    assert compiled.launches == [(-(-5 // sm.launch_config(5, 100, 1, 32)[0]), 1, 1)] * 4
    assert fakes["softmax_kernel"].jit_launches == []


@pytest.mark.parametrize("hooked", [False, True], ids=["compiled", "kernel[grid]"])
@pytest.mark.parametrize("amd", [False, True], ids=["nvidia", "amd"])
def test_held_half_tiles_reach_the_compiler_with_fewer_registers(
    gpu_path, monkeypatch, hooked, amd
):
    # long_rows' maxnreg reaches warmup() or kernel[grid] (NVIDIA only: test_long_rows).
    monkeypatch.setattr(long_rows, "AMD", long_rows.tl.constexpr(amd))
    gpu(monkeypatch, sms=132)
    fake = gpu_path["softmax_long_rows_kernel"]
    fake.dry = True  # two tiles, each held: the interpreter would wait for ever
    if hooked:
        fake.pre_run_hooks.append(print)
    sm.softmax(randn(1, 16384 + 16, torch.float16))
    options = fake.jit_options[0] if hooked else fake.compiled[0].options
    assert options == ({} if amd else {"maxnreg": long_rows.HALF_TILE_REGS})


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
    check(randn(5, 100))
    assert len(fake.jit_launches) == 2 and fake.compiled == [] and sm._launches == {}


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
    monkeypatch.setattr(sm, "HIP", hip)
    check(randn(5, 100))
    check(big_storage())
    assert compiles(gpu_path) == {"softmax_kernel": 2 if hip else 1}


def test_a_tensor_off_the_current_device_is_launched_on_its_own(gpu_path, monkeypatch):
    # Triton compiles for and launches on the current device, torch allocates on the
    # tensor's: a tensor elsewhere is compiled for and launched under its own device.
    current, entered = [-1], []  # a CPU tensor's index is -1

    @contextlib.contextmanager
    def device(where):
        entered.append(where)
        before, current[0] = current[0], -1
        yield
        current[0] = before

    monkeypatch.setattr(sm.torch.cuda, "device", device)
    monkeypatch.setattr(sm.torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(sm.torch.cuda, "device_count", lambda: 2)  # a machine of several GPUs
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    x = randn(5, 100)
    for current[0] in (-1, 3, 3, -1):
        check(x)
    assert entered == [x.device] * 2  # at 3, each call under x's device
    assert compiles(gpu_path) == {"softmax_kernel": 1}


def test_long_rows_beyond_the_gpu_are_written_lag_tickets_later(gpu_path, tiled):
    # Seven tiles a row on a GPU of one SM: a program waits only for lower tickets, all
    # taken by programs already running, so even one program at a time finishes.
    fakes = gpu_path
    for _ in range(2):
        check(randn(3, 50))
    assert compiles(fakes) == {"softmax_long_rows_lagged_kernel": 1}
    lag = 7 + long_rows.LAG_PER_SM
    assert (
        fakes["softmax_long_rows_lagged_kernel"].compiled[0].launches == [(3 * 7 + lag, 1, 1)] * 2
    )


def test_a_tensor_elsewhere_is_refused(gpu_path, monkeypatch):
    x = randn(5, 100)
    monkeypatch.setattr(sm, "DEVICE", "cuda")  # a GPU machine, given a CPU tensor
    with pytest.raises(ValueError, match="softmax expects .* on cuda, got .* on cpu"):
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
def test_gpu_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="softmax expects .* on cuda, got .* on cpu"):
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


def check_capture(p, out, hook):
    assert p.returncode == 0, p.stdout + p.stderr
    assert "softmax: PASS" in p.stdout
    assert (out / "proton.hatchet").is_file()
    summary = json.loads((out / "summary.json").read_text())
    top = summary["proton_kernels"][0]
    assert top["name"].startswith("softmax_kernel")
    assert top["launches"] == 20 + 1
    assert ("gbyte_per_s" in top) == hook
    if hook:  # named by softmax.py's launch_metadata, with the bytes it moves
        assert top["name"] == "softmax_kernel [4096x1024 float32]"
        assert top["gbyte_per_s"] > 100
    sites = ours(summary)
    assert sorted(k["launches"] for s in sites for k in s["kernels"]) == [1, 20]
    # The launch site is a line of softmax(), not a launcher's.
    assert all(s["callsite"].endswith(" softmax") for s in sites)
    torch_site = [
        s for s in summary["proton_callsites"]
        if any("softmax_warp_forward" in k["name"] for k in s["kernels"])
    ]  # fmt: skip
    assert len(sites) == 2 and len(torch_site) == 1 and torch_site[0] not in sites


@pytest.mark.gpu
def test_gpu_make_profile(tmp_path):
    p = run("make", "-s", "profile", f"OUT={tmp_path}")
    check_capture(p, tmp_path / "profile", hook=False)


@pytest.mark.gpu
def test_gpu_make_profile_with_the_triton_hook(tmp_path):
    r = recipe(tmp_path, hook="triton")
    p = run("make", "-s", "profile", f"OUT={tmp_path}", f"RECIPE={r}")
    check_capture(p, tmp_path / "profile", hook=True)


@pytest.mark.gpu
def test_gpu_make_profile_of_two_ranks(tmp_path):
    p = run("make", "-s", "profile", f"OUT={tmp_path}", "NPROC=2", "ITERS=3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PASS") == 2 and "softmax[rank 1]: PASS" in p.stdout
    summary = json.loads((tmp_path / "profile" / "summary.json").read_text())
    assert [r["rank"] for r in summary["proton_ranks"]] == [0, 1]
    assert [r["files"] for r in summary["proton_ranks"]] == [
        [str(tmp_path / "profile" / f"proton.rank{r}.hatchet")] for r in (0, 1)
    ]


@pytest.mark.gpu
def test_gpu_make_intra(tmp_path):
    p = run("make", "-s", "intra", f"OUT={tmp_path}", "ITERS=2")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((tmp_path / "intra" / "summary.json").read_text())
    scopes = {s["scope"]: s for s in summary["proton_scopes"]}
    assert set(scopes) == {"load", "max", "exp_sum", "store"}
    assert sum(s["share"] for s in scopes.values()) == pytest.approx(1.0)
