"""No-GPU tests of the package itself: import without the library, discovery, signature, version,
custom-op registration, fake tensors and torch.compile tracing, and the CLI run from Python."""

import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tsattn
from tsattn import _cli, _library, _ops

from support import FP8, LIBRARY_MISSING, REPO, needs_library

CONTRACT = REPO / "docs" / "contract.md"


def _contract_signature_text() -> str:
    """The fenced python block under docs/contract.md's "## Python signature" heading."""
    text = CONTRACT.read_text()
    m = re.search(r"^## Python signature\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"{CONTRACT}: no ```python block under '## Python signature'"
    return m.group(1).strip()


def _signature_from_text(text: str) -> inspect.Signature:
    text = re.sub(r"#[^\n]*", "", text)
    namespace = {"torch": torch}
    exec(f"def {text}:\n    pass\n", namespace)  # noqa: S102 - the contract's own text
    return inspect.signature(namespace["batch_prefill"])


def _env_for_subprocess(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(tsattn.__file__).parent.parent), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_import_works_without_the_library(tmp_path):
    bogus = tmp_path / "nowhere" / "libtsattn.so"
    code = (
        "import tsattn, torch\n"
        "print(tsattn.__version__)\n"
        "try:\n"
        "    tsattn.batch_prefill(torch.zeros(1, 1, 1, 128), torch.zeros(1, 1, 1, 128), torch.zeros(1, 1, 1, 128))\n"
        "except RuntimeError as e:\n"
        "    print('RuntimeError:', e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=_env_for_subprocess(TSATTN_LIBRARY=str(bogus)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "0.1.0"
    assert "RuntimeError:" in r.stdout and str(bogus) in r.stdout and "TSATTN_LIBRARY" in r.stdout


@needs_library
def test_import_and_precompile_do_not_import_torch(tmp_path):
    """The CLI and tsattn.precompile run on build machines without torch; batch_prefill brings it."""
    code = (
        "import sys, tsattn\n"
        "assert 'torch' not in sys.modules, 'import tsattn imported torch'\n"
        "tsattn.precompile('llama3', archs='sm_90a', out_dir=sys.argv[1])\n"
        "assert 'torch' not in sys.modules, 'precompile imported torch'\n"
        "assert callable(tsattn.batch_prefill) and 'torch' in sys.modules\n"
        "assert 'batch_prefill' in dir(tsattn)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "aot")],
        env=_env_for_subprocess(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr


def test_import_does_not_import_the_distributed_package():
    """tsattn.distributed is imported by its users, explicitly: neither ``import tsattn`` nor the
    first call of batch_prefill brings it (or, for import tsattn alone, torch.distributed)."""
    code = (
        "import sys, tsattn\n"
        "assert 'torch.distributed' not in sys.modules and 'tsattn.distributed' not in sys.modules\n"
        "assert callable(tsattn.batch_prefill) and callable(tsattn.merge_state)\n"
        "assert 'tsattn.distributed' not in sys.modules\n"
        "assert not hasattr(tsattn, 'distributed')\n"
        "import tsattn.distributed as cp\n"
        "assert callable(cp.ring_prefill) and tsattn.distributed is cp\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=_env_for_subprocess(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr


def test_missing_library_error_names_every_place(monkeypatch):
    monkeypatch.delenv("TSATTN_LIBRARY", raising=False)
    monkeypatch.setattr(_library, "_loaded", None)  # restored afterwards
    places = [
        ("next to the package", "/opt/pkg/tsattn/lib/libtsattn.so*"),
        ("repository build tree", "/opt/checkout/build/libtsattn.so"),
        ('ctypes.util.find_library("tsattn")', None),
    ]
    monkeypatch.setattr(_library, "search_locations", lambda: iter(places))
    with pytest.raises(RuntimeError) as info:
        tsattn.library_version()
    text = str(info.value)
    for needle in (
        "$TSATTN_LIBRARY (not set)",
        "/opt/pkg/tsattn/lib/libtsattn.so*",
        "/opt/checkout/build/libtsattn.so",
        "find_library",
    ):
        assert needle in text, text
    with pytest.raises(RuntimeError, match="libtsattn.so was not found"):
        tsattn.cache_info()


def test_unloadable_file_is_reported(monkeypatch, tmp_path):
    fake = tmp_path / "libtsattn.so"
    fake.write_bytes(b"not an ELF file")
    monkeypatch.setenv("TSATTN_LIBRARY", str(fake))
    monkeypatch.setattr(_library, "_loaded", None)
    with pytest.raises(RuntimeError, match=re.escape(str(fake))):
        tsattn.library_version()


def test_search_order():
    places = list(_library.search_locations())
    descriptions = [d for d, _ in places]
    first = {d: descriptions.index(d) for d in reversed(descriptions)}
    assert first["next to the package"] < first["repository build tree"] < first['ctypes.util.find_library("tsattn")']
    if os.environ.get("TSATTN_TEST_INSTALLED") != "1":
        assert dict(places)["repository build tree"] == str(REPO / "build" / "libtsattn.so")


def test_signature_matches_contract():
    contract = _signature_from_text(_contract_signature_text())
    actual = inspect.signature(tsattn.batch_prefill)
    simple = [(p.name, p.kind, p.default) for p in contract.parameters.values()]
    assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == simple
    assert [p.name for p in actual.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD] == ["q", "k", "v"]
    assert all(p.kind is p.KEYWORD_ONLY for p in list(actual.parameters.values())[3:])


def test_version_and_exports():
    assert tsattn.__version__ == "0.1.0"
    root = _library.repo_root()
    if root is not None:  # the checkout's three version numbers agree: wheel, CMake, package
        assert re.search(r'^version = "0\.1\.0"$', (root / "pyproject.toml").read_text(), re.M)
        assert re.search(r"^project\(tsattn VERSION 0\.1\.0 ", (root / "CMakeLists.txt").read_text(), re.M)
    for name in (
        "batch_prefill",
        "merge_state",
        "merge_states",
        "cache_info",
        "precompile",
        "library_version",
        "library_path",
        "last_kernel_name",
    ):
        assert callable(getattr(tsattn, name))


@needs_library
def test_library_version_matches_package():
    assert tsattn.library_version() == tsattn.__version__
    assert _library.library().tsattn_abi_version() == _library.ABI_VERSION


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")
def test_custom_ops_registered():
    schema = str(torch.ops.tsattn.batch_prefill.default._schema)
    assert schema.startswith(
        "tsattn::batch_prefill(Tensor q, Tensor k, Tensor v, Tensor? qo_indptr, Tensor? kv_indptr,"
    )
    assert "float? sm_scale" in schema and schema.endswith("-> Tensor")
    out_schema = str(torch.ops.tsattn.batch_prefill_out.default._schema)
    assert "Tensor(a12!) out" in out_schema and out_schema.endswith("-> ()")


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")
def test_fake_tensors_give_shape_and_resolved_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 5, 4, 128, dtype=torch.float16)
        k = torch.empty(2, 7, 2, 128, dtype=torch.float16)
        o = tsattn.batch_prefill(q, k, k)
        assert o.shape == q.shape and o.dtype == torch.float16
        o = tsattn.batch_prefill(q, k, k, out_dtype=torch.bfloat16, mask_type="causal", window_left=3)
        assert o.shape == q.shape and o.dtype == torch.bfloat16
        if FP8 is not None:
            o = tsattn.batch_prefill(q.to(FP8), k.to(FP8), k.to(FP8), out_dtype=torch.float16)
            assert o.dtype == torch.float16
        qp = torch.empty(9, 4, 256, dtype=torch.bfloat16)
        kp = torch.empty(11, 1, 256, dtype=torch.bfloat16)
        ind = torch.empty(3, dtype=torch.int32)
        o = tsattn.batch_prefill(qp, kp, kp, qo_indptr=ind, kv_indptr=ind)
        assert o.shape == qp.shape and o.dtype == torch.bfloat16
        out = torch.empty(2, 5, 4, 128, dtype=torch.bfloat16)
        assert tsattn.batch_prefill(q, k, k, out=out) is out


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")
def test_compile_fullgraph_traces_one_op_node():
    """Traced on CPU: fullgraph=True fails on any graph break. Running the graph then reaches the
    library, which rejects CPU tensors (or is missing): that error proves the real op ran."""
    torch._dynamo.reset()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def block(x, w, out):
        qkv = (x @ w).view(1, 4, 4, 128)
        q, k, v = qkv[:, :, :2], qkv[:, :, 2:3], qkv[:, :, 3:]
        o = tsattn.batch_prefill(q, k, v, mask_type="causal", window_left=2, sm_scale=0.1, out_dtype=torch.bfloat16)
        tsattn.batch_prefill(q, k, v, out=out)
        return o.float().sum() + out.float().sum()

    compiled = torch.compile(block, backend=capture, fullgraph=True)
    x = torch.randn(4, 16, dtype=torch.float16)
    w = torch.randn(16, 512, dtype=torch.float16)
    out = torch.empty(1, 4, 2, 128, dtype=torch.float16)
    expected = RuntimeError if LIBRARY_MISSING else ValueError
    with pytest.raises(expected):
        compiled(x, w, out)
    assert len(graphs) == 1
    code = graphs[0].code
    assert code.count("torch.ops.tsattn.batch_prefill.default(") == 1, code
    assert code.count("torch.ops.tsattn.batch_prefill_out.default(") == 1, code
    assert "'causal', 2, None, None, 0.1, 1.0, 2)" in code, code


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")
def test_compile_aot_eager_uses_fake_impl():
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda q: tsattn.batch_prefill(q, q, q, mask_type="causal") * 2, backend="aot_eager", fullgraph=True
    )
    expected = RuntimeError if LIBRARY_MISSING else ValueError
    with pytest.raises(expected, match="libtsattn" if LIBRARY_MISSING else "q must be a CUDA tensor"):
        compiled(torch.zeros(1, 3, 2, 128, dtype=torch.float16))


@pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")
def test_only_plain_eager_calls_skip_the_dispatcher():
    """Plain tensors in eager mode go straight to the library; tensor subclasses, torch function and
    dispatch modes and autograd keep the custom op (tracing under torch.compile: the tests above)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    q = torch.randn(1, 4, 2, 128, dtype=torch.float16)
    assert not _ops.dispatcher_needed((q, q, q, None, None))
    leaf = q.clone().requires_grad_()
    assert _ops.dispatcher_needed((q, leaf, q))
    with torch.no_grad():
        assert not _ops.dispatcher_needed((q, leaf, q))
    with FakeTensorMode():
        fake = torch.empty(1, 4, 2, 128, dtype=torch.float16)
        assert _ops.dispatcher_needed((q,))
    assert _ops.dispatcher_needed((q, fake))
    with Passthrough():
        assert _ops.dispatcher_needed((q,))
    with TorchFunctionMode():
        assert _ops.dispatcher_needed((q,))
    assert not _ops.dispatcher_needed((q,))


def test_cli_runs_from_python():
    """`python -m tsattn` runs the CLI binary (here the checkout's build tree) with its subcommands."""
    try:
        _cli.cli_path()
    except RuntimeError as e:
        pytest.skip(f"skipped: no tsattn executable ({e})")
    r = subprocess.run(
        [sys.executable, "-m", "tsattn", "precompile", "--manifest", "llama3", "--arch", "sm_90a", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(tsattn.__file__).parent.parent)),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [
        "prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed",
        "prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed.lse",
        "prefill.sm80.sm_90a.d128.bf16_bf16.causal.packed",
        "prefill.sm80.sm_90a.d128.bf16_bf16.causal.packed.lse",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed.lse",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.lse",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.paged",
        "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.packed.paged.lse",
        "merge.sm_90a.bf16",
        "gather_pages.sm_90a",
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "tsattn", "precompile", "--manifest", "nosuch", "--arch", "sm_90a"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(tsattn.__file__).parent.parent)),
    )
    assert bad.returncode == 2 and "no built-in manifest has this name" in bad.stderr


def test_missing_cli_names_every_place(monkeypatch, tmp_path):
    monkeypatch.setattr(_library, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(_cli, "__file__", str(tmp_path / "pkg" / "_cli.py"))
    with pytest.raises(RuntimeError) as info:
        _cli.cli_path()
    text = str(info.value)
    assert str(tmp_path / "pkg" / "bin" / "tsattn") in text and str(tmp_path / "build" / "tsattn") in text


def test_modules_parse_as_python39():
    """No syntax newer than requires-python (3.9): match statements, X | Y annotations at runtime, ..."""
    for path in Path(tsattn.__file__).parent.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
