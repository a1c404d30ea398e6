"""softmax_op.py: softmax() for a model, the PyTorch op and its backward, and
torch.compile of a caller.

On CPU the op runs eagerly through Triton's interpreter (forward and backward kernels
alike); torch.library.opcheck and torch.compile cannot run there, as both trace the op with
fake tensors, whose storage the interpreter cannot reach: those tests are marked gpu.
"""

import ast
import builtins
import json
import sys

import pytest
import torch

import few_rows
import long_rows as lr
import softmax as sm
import softmax_op
from conftest import ROOT, run
from softmax_op import softmax
from test_softmax import DTYPES, check, ours


@pytest.fixture
def tiled(monkeypatch):
    """Rows longer than 8 columns are long rows, cut into tiles of 32 bytes (8 float32 or
    16 half columns), which the interpreter runs through the lagged kernel."""
    monkeypatch.setattr(sm, "MAX_FUSED_COLS", 8)
    monkeypatch.setattr(lr, "TILE_BYTES", 32)
    lr.plan.cache_clear()
    yield
    lr.plan.cache_clear()


def grads(x, dy):
    """dx of softmax(x) for dy, and torch.softmax's computed in float32."""
    x = x.detach().requires_grad_()
    y = softmax(x)
    assert y.grad_fn is not None and "triton_softmax" in y.grad_fn.name()
    (dx,) = torch.autograd.grad(y, x, dy)
    xf = x.detach().float().requires_grad_()
    (ref,) = torch.autograd.grad(torch.softmax(xf, -1), xf, dy.float())
    return dx, ref


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(7,), (5, 100), (2, 3, 50), (3, 1, 2, 17)], ids=str)
@pytest.mark.parametrize("use_tiles", [False, True], ids=["fused", "tiled"])
def test_gradients_match_torch(request, shape, dtype, use_tiles):
    # Tiled: forward in long_rows' kernels, backward in torch's own softmax backward.
    if use_tiles:
        request.getfixturevalue("tiled")
    x = torch.randn(shape, device=sm.DEVICE).to(dtype)
    dx, ref = grads(x, torch.randn_like(x))
    assert dx.dtype == dtype and dx.shape == x.shape
    torch.testing.assert_close(dx.float(), ref, atol=2 * sm.TOLERANCE[dtype], rtol=0)


def test_a_strided_gradient():
    # loss.sum()'s gradient is one value expanded (stride 0); a transposed x's too.
    x = torch.randn(40, 6, device=sm.DEVICE).t()
    dx, ref = grads(x, torch.ones(1, 1, device=sm.DEVICE).expand(6, 40))
    torch.testing.assert_close(dx, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("shape", [(7,), (5, 100), (2, 3, 50)], ids=str)
@pytest.mark.parametrize("use_tiles", [False, True], ids=["fused", "tiled"])
def test_one_function_takes_rows_of_any_length(request, shape, use_tiles):
    if use_tiles:
        request.getfixturevalue("tiled")
    check(torch.randn(shape, device=sm.DEVICE), softmax)


def test_only_what_autograd_needs_goes_through_the_op():
    x = torch.randn(4, 30, device=sm.DEVICE)
    assert softmax(x).grad_fn is None  # no grad needed: softmax.py's launch
    w = x.clone().requires_grad_()
    with torch.no_grad():
        assert softmax(w).grad_fn is None
    y = softmax(w * 2)  # inside a graph of autograd: the op, with its backward
    assert y.grad_fn is not None
    y[:, 0].sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0


def test_inputs_that_require_grad_train():
    # A layer before softmax learns to put the weight on column 0.
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 16).to(sm.DEVICE)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    x = torch.randn(32, 8, device=sm.DEVICE)
    losses = []
    for _ in range(20):
        loss = -softmax(layer(x))[:, 0].log().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 2


def test_the_op_refuses_what_softmax_refuses():
    x = torch.zeros(2, 3, dtype=torch.float64, device=sm.DEVICE, requires_grad=True)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        softmax(x)
    with pytest.raises(ValueError, match="expects a dense torch.Tensor"):
        softmax([[1.0]])


def test_the_command_line_refuses_what_does_not_fit_in_one_line():
    p = run(sys.executable, "softmax_op.py", "--rows", 1048575, "--cols", 1048575)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1
    assert p.stderr.startswith("softmax_op: error: 1048575 x 1048575 float32 needs about")


def test_the_command_line_checks_the_gradient_and_fails_on_a_wrong_one(monkeypatch, capsys):
    assert softmax_op.main(["--rows", "3", "--cols", "40"]) == 0
    assert capsys.readouterr().out.endswith("softmax_op: PASS\n")
    monkeypatch.setattr(softmax_op, "softmax", lambda x: torch.softmax(x, -1) * 1.01)
    assert softmax_op.main(["--rows", "3", "--cols", "40"]) == 1
    assert "FAIL gradient differs" in capsys.readouterr().err


def test_the_op_is_registered_with_its_backward():
    x = torch.randn(3, 20, device=sm.DEVICE)
    y = torch.ops.triton_softmax.softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-6, rtol=0)
    dx = torch.ops.triton_softmax.softmax_backward(y, torch.ones_like(y))
    assert dx.abs().max() < 1e-6  # the gradient of a sum of probabilities: 0


def copied_kernels() -> None:
    """In a process of its own (see `copies`): the source torch.compile writes for each
    kernel of softmax.py, long_rows.py, few_rows.py and softmax_op.py, the functions it calls
    included, printed as JSON."""
    import triton
    from torch._inductor.codegen.wrapper import (
        user_defined_triton_kernel_transitive_closure_source_code as copy,
    )

    found = {}
    for module in (sm, lr, few_rows, softmax_op):
        for name, value in vars(module).items():
            if isinstance(value, triton.JITFunction) and value.fn.__module__ == module.__name__:
                found[name] = copy(value)
    print(json.dumps(found))


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    """copied_kernels() run where Triton compiles: softmax.py picks the interpreter where
    torch sees no GPU, and Inductor copies only compiled kernels, so that process lets
    torch see one (nothing launches)."""
    code = (
        "import sys, torch; torch.cuda.is_available = lambda: True; "
        f"sys.path[:0] = [{str(ROOT / 'tests')!r}]; "
        "import test_softmax_op; test_softmax_op.copied_kernels()"
    )
    p = run(sys.executable, "-c", code, env={"TRITON_INTERPRET": "0"})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def unbound(source: str) -> set[str]:
    """The names source reads that neither it nor the header of Inductor's copy (triton,
    tl) defines."""
    tree = ast.parse(source)
    defined = {"triton", "tl", *dir(builtins)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            defined |= {node.name, *(a.arg for a in node.args.args + node.args.kwonlyargs)}
        elif isinstance(node, ast.alias):
            defined.add(node.asname or node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    } - defined


def test_torch_compile_s_copy_of_each_kernel_names_only_what_it_defines(copies):
    """torch.compile compiles its own copy of a kernel launched through wrap_triton: a
    name the copy lacks (a module such as triton.profiler.language) stops compilation."""
    assert {"softmax_kernel", "softmax_backward_kernel", "scope"} <= copies.keys()
    assert {"softmax_partials_kernel", "softmax_merge_kernel"} <= copies.keys()
    missing = {name: unbound(source) for name, source in copies.items()}
    assert {name: names for name, names in missing.items() if names} == {}


# On the GPU: the op's registration checked by PyTorch, and torch.compile of a caller.


class Model(torch.nn.Module):
    def __init__(self, cols, normalise):
        super().__init__()
        self.proj = torch.nn.Linear(64, cols)
        self.normalise = normalise

    def forward(self, x):
        return self.normalise(self.proj(x)) * 2


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 100), (2, 3, 1024), (3, 40000)], ids=str)
def test_gpu_opcheck(shape, dtype):
    x = torch.randn(shape, device="cuda").to(dtype).requires_grad_()
    torch.library.opcheck(softmax_op.softmax_op, (x,))
    y = softmax_op.softmax_op(x.detach())
    torch.library.opcheck(softmax_op.softmax_backward, (y, torch.randn_like(y)))


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1000, 40000], ids=["fused", "long rows"])
def test_gpu_compiled_forward_and_backward_match_eager(cols):
    torch.manual_seed(0)
    eager = Model(cols, softmax).cuda()
    model = Model(cols, softmax).cuda()
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(8, 3, 64, device="cuda")
    y, y_eager = compiled(x), eager(x)
    torch.testing.assert_close(y, y_eager, atol=1e-5, rtol=0)
    y.square().sum().backward()
    y_eager.square().sum().backward()
    for ours_, theirs in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(ours_.grad, theirs.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_gpu_compiled_graph_holds_the_kernel_without_a_break():
    x = torch.randn(4, 100, device="cuda")
    explained = torch._dynamo.explain(lambda t: softmax(t) * 2)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.gpu
def test_gpu_profile_of_a_compiled_caller_names_softmax_kernel(tmp_path):
    script = ["SCRIPT=tests/softmax_compiled.py", "ARGS=--iters 5"]
    p = run("make", "-s", "profile", f"OUT={tmp_path}", *script)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "softmax_compiled: PASS" in p.stdout
    summary = json.loads((tmp_path / "profile" / "latest" / "summary.json").read_text())
    sites = ours(summary)
    assert sites and any("softmax_compiled.py" in s["callsite"] for s in sites)
