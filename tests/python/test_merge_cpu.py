"""No-GPU tests of merge_state and merge_states: the signatures against docs/contract.md, the errors
the library raises before it needs a GPU (dtypes, then shapes, then devices), the Python-side type
checks, the custom ops with their fake implementations and torch.compile tracing."""

import inspect
import re

import pytest
import torch

import tsattn
from tsattn import _ops

from support import FP8, LIBRARY_MISSING, REPO, needs_library

CONTRACT = REPO / "docs" / "contract.md"
needs_custom_ops = pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")


def _pair(rows=5, heads=4, d=128, dtype=torch.float16):
    v_a, v_b = torch.zeros(rows, heads, d, dtype=dtype), torch.zeros(rows, heads, d, dtype=dtype)
    return v_a, torch.zeros(rows, heads), v_b, torch.zeros(rows, heads)


def _states(rows=5, n=3, heads=4, d=128, dtype=torch.bfloat16):
    return torch.zeros(rows, n, heads, d, dtype=dtype), torch.zeros(rows, n, heads)


def test_signatures_match_contract():
    text = CONTRACT.read_text()
    m = re.search(r"^## Merging attention states\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"{CONTRACT}: no ```python block under '## Merging attention states'"
    namespace = {"torch": torch, "Optional": __import__("typing").Optional, "Tuple": __import__("typing").Tuple}
    for line in re.sub(r"#[^\n]*", "", m.group(1)).split("\n\n"):
        if line.strip():
            exec(f"def {line.strip()}:\n    pass\n", namespace)  # noqa: S102 - the contract's own text
    for name in ("merge_state", "merge_states"):
        expected = inspect.signature(namespace[name])
        actual = inspect.signature(getattr(tsattn, name))
        assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == [
            (p.name, p.kind, p.default) for p in expected.parameters.values()
        ], name
    assert "merge_state" in tsattn.__all__ and "merge_states" in tsattn.__all__


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(v_a=[1.0]), "v_a must be a torch.Tensor (got builtins.list)"),
        (dict(s_b=None), "s_b must be a torch.Tensor (got builtins.NoneType)"),
        (dict(out=3), "out must be a torch.Tensor or None (got builtins.int)"),
        (dict(s_out="x"), "s_out must be a torch.Tensor or None (got builtins.str)"),
    ],
    ids=["v_a_list", "s_b_none", "out_int", "s_out_str"],
)
def test_python_type_errors(kwargs, needle):
    v_a, s_a, v_b, s_b = _pair()
    args = dict(v_a=v_a, s_a=s_a, v_b=v_b, s_b=s_b)
    outputs = {k: kwargs.pop(k) for k in ("out", "s_out") if k in kwargs}
    args.update(kwargs)
    with pytest.raises(TypeError, match=re.escape(needle)):
        tsattn.merge_state(args["v_a"], args["s_a"], args["v_b"], args["s_b"], **outputs)
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        tsattn.merge_states("v", torch.zeros(1))


def _fp8_pair():
    v_a, s_a, v_b, s_b = _pair()
    return v_a.to(FP8), s_a, v_b.to(FP8), s_b


MERGE_STATE_REJECTIONS = [
    # (id, arguments (v_a, s_a, v_b, s_b, out=, s_out=), exception, substring)
    ("cpu_tensors", lambda: (_pair(), {}), ValueError, "v_a must be a CUDA tensor (got cpu)"),
    (
        "s_a_float16",
        lambda: ((_pair()[0], torch.zeros(5, 4, dtype=torch.float16)) + _pair()[2:], {}),
        TypeError,
        "s_a has dtype float16; it must be float32",
    ),
    (
        "s_b_float64",
        lambda: (_pair()[:3] + (torch.zeros(5, 4, dtype=torch.float64),), {}),
        TypeError,
        "s_b has dtype float64; it must be float32",
    ),
    (
        "v_int8",
        lambda: (_pair(dtype=torch.int8), {}),
        NotImplementedError,
        "v_a has dtype int8; supported: float16, bfloat16, float32",
    ),
    (
        "v_b_other_dtype",
        lambda: ((_pair()[0], _pair()[1], _pair(dtype=torch.bfloat16)[2], _pair()[3]), {}),
        NotImplementedError,
        "v_a and v_b must share one dtype (got v_a=float16, v_b=bfloat16)",
    ),
    (
        "v_b_shape",
        lambda: ((_pair()[0], _pair()[1], torch.zeros(5, 3, 128, dtype=torch.float16), _pair()[3]), {}),
        ValueError,
        "v_b.shape=[5, 3, 128] must equal v_a.shape=[5, 4, 128]",
    ),
    (
        "s_a_shape",
        lambda: ((_pair()[0], torch.zeros(5, 4, 1), _pair()[2], _pair()[3]), {}),
        ValueError,
        "s_a.shape=[5, 4, 1] must be v_a.shape[:-1]=[5, 4]",
    ),
    (
        "v_a_1d",
        lambda: ((torch.zeros(128), torch.zeros(()), torch.zeros(128), torch.zeros(())), {}),
        ValueError,
        "v_a must be [..., H, D], at least 2-D (got shape [128])",
    ),
    (
        "out_dtype",
        lambda: (_pair(), {"out": torch.zeros(5, 4, 128)}),
        ValueError,
        "out has dtype float32; the merged state keeps v_a's dtype, float16",
    ),
    (
        "s_out_shape",
        lambda: (_pair(), {"s_out": torch.zeros(4, 5)}),
        ValueError,
        "s_out.shape=[4, 5] must be v_a.shape[:-1]=[5, 4]",
    ),
]
if FP8 is not None:
    MERGE_STATE_REJECTIONS.append(
        ("v_fp8", lambda: (_fp8_pair(), {}), NotImplementedError, "v_a has dtype float8_e4m3fn")
    )


@needs_library
@pytest.mark.parametrize("case,make,exc,needle", MERGE_STATE_REJECTIONS, ids=[r[0] for r in MERGE_STATE_REJECTIONS])
def test_merge_state_rejections_on_cpu(case, make, exc, needle):
    inputs, outputs = make()
    with pytest.raises(exc) as info:
        tsattn.merge_state(*inputs, **outputs)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    assert needle in str(info.value), str(info.value)


MERGE_STATES_REJECTIONS = [
    ("cpu_tensors", lambda: (_states(), {}), ValueError, "v must be a CUDA tensor (got cpu)"),
    (
        "s_bfloat16",
        lambda: ((_states()[0], torch.zeros(5, 3, 4, dtype=torch.bfloat16)), {}),
        TypeError,
        "s has dtype bfloat16; it must be float32",
    ),
    (
        "v_2d",
        lambda: ((torch.zeros(4, 128, dtype=torch.float16), torch.zeros(4)), {}),
        ValueError,
        "v must be [..., n, H, D], at least 3-D (got shape [4, 128])",
    ),
    (
        "s_shape",
        lambda: ((_states()[0], torch.zeros(5, 4, 3)), {}),
        ValueError,
        "s.shape=[5, 4, 3] must be v.shape[:-1]=[5, 3, 4]",
    ),
    (
        "out_with_states_axis",
        lambda: (_states(), {"out": torch.zeros(5, 3, 4, 128, dtype=torch.bfloat16)}),
        ValueError,
        "out.shape=[5, 3, 4, 128] must be v.shape[:-3] + v.shape[-2:]=[5, 4, 128]",
    ),
]


@needs_library
@pytest.mark.parametrize("case,make,exc,needle", MERGE_STATES_REJECTIONS, ids=[r[0] for r in MERGE_STATES_REJECTIONS])
def test_merge_states_rejections_on_cpu(case, make, exc, needle):
    inputs, outputs = make()
    with pytest.raises(exc) as info:
        tsattn.merge_states(*inputs, **outputs)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    assert needle in str(info.value), str(info.value)


@needs_library
def test_rejected_merge_leaves_out_untouched():
    v_a, s_a, v_b, s_b = _pair()
    out, s_out = torch.full_like(v_a, float("nan")), torch.full_like(s_a, float("nan"))
    with pytest.raises(ValueError):
        tsattn.merge_state(v_a, s_a, v_b, s_b, out=out, s_out=s_out)
    assert torch.isnan(out).all() and torch.isnan(s_out).all()


@needs_custom_ops
def test_merge_custom_ops_registered():
    schema = str(torch.ops.tsattn.merge_state.default._schema)
    assert schema.startswith("tsattn::merge_state(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b)")
    assert schema.endswith("-> (Tensor, Tensor)")
    out_schema = str(torch.ops.tsattn.merge_state_out.default._schema)
    assert "Tensor(a4!) out" in out_schema and "Tensor(a5!) s_out" in out_schema and out_schema.endswith("-> ()")
    assert str(torch.ops.tsattn.merge_states.default._schema).startswith("tsattn::merge_states(Tensor v, Tensor s)")
    assert "Tensor(a3!) s_out" in str(torch.ops.tsattn.merge_states_out.default._schema)


@needs_custom_ops
def test_fake_tensors_give_the_merged_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        v_a = torch.empty(2, 9, 4, 128, dtype=torch.bfloat16)
        s_a = torch.empty(2, 9, 4)
        v, s = tsattn.merge_state(v_a, s_a, v_a, s_a)
        assert v.shape == v_a.shape and v.dtype == torch.bfloat16
        assert s.shape == s_a.shape and s.dtype == torch.float32
        states = torch.empty(7, 3, 8, 256, dtype=torch.float32)
        v, s = tsattn.merge_states(states, torch.empty(7, 3, 8))
        assert v.shape == (7, 8, 256) and v.dtype == torch.float32 and s.shape == (7, 8)
        out = torch.empty(2, 9, 4, 128, dtype=torch.bfloat16)
        v, s = tsattn.merge_state(v_a, s_a, v_a, s_a, out=out)
        assert v is out and s.shape == s_a.shape
        s_out = torch.empty(7, 8)
        v, s = tsattn.merge_states(states, torch.empty(7, 3, 8), s_out=s_out)
        assert s is s_out and v.shape == (7, 8, 256)


@needs_custom_ops
def test_compile_fullgraph_traces_merges_as_op_nodes():
    """Traced on CPU: fullgraph=True fails on any graph break. Running the graph then reaches the
    library, which rejects CPU tensors (or is missing): that error proves the real op ran."""
    torch._dynamo.reset()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def chunked(v_a, s_a, v_b, s_b, out):
        v, s = tsattn.merge_state(v_a * 2, s_a, v_b, s_b)
        tsattn.merge_states(torch.stack([v, v_b], dim=1), torch.stack([s, s_b], dim=1), out=out)
        return v.float().sum() + s.sum() + out.float().sum()

    compiled = torch.compile(chunked, backend=capture, fullgraph=True)
    v_a, s_a, v_b, s_b = _pair()
    expected = RuntimeError if LIBRARY_MISSING else ValueError
    with pytest.raises(expected):
        compiled(v_a, s_a, v_b, s_b, torch.empty_like(v_a))
    assert len(graphs) == 1
    code = graphs[0].code
    assert code.count("torch.ops.tsattn.merge_state.default(") == 1, code
    assert code.count("torch.ops.tsattn.merge_states_out.default(") == 1, code


@needs_custom_ops
def test_compile_aot_eager_uses_the_fake_impls():
    torch._dynamo.reset()
    compiled = torch.compile(lambda v, s: tsattn.merge_states(v, s)[0] * 2, backend="aot_eager", fullgraph=True)
    expected = RuntimeError if LIBRARY_MISSING else ValueError
    with pytest.raises(expected, match="libtsattn" if LIBRARY_MISSING else "v must be a CUDA tensor"):
        compiled(*_states())
