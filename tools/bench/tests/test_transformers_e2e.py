"""The transformers end-to-end benchmark's harness on the CPU: tiny widths, every model kind, the
table and the JSON (tsattn itself falls back on CPU tensors, which the counts show)."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="skipped: transformers is not installed")
pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

import transformers_e2e  # noqa: E402


def test_harness_runs_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "e2e.json"
    args = ["--device", "cpu", "--tiny", "--seq", "24", "--layers", "2", "--reps", "1", "--warmup", "0"]
    assert transformers_e2e.main(args + ["--batch", "2", "--padded", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {r["model"] for r in result["rows"]} == set(transformers_e2e.MODELS)
    for row in result["rows"]:
        assert row["tsattn_calls"] == {"fallback.device": 2}  # CPU tensors
        assert row["relative_difference"] < 1e-2 and row["sdpa_ms"] > 0
    assert "transformers" in result["metadata"]
    assert capsys.readouterr().out.startswith(transformers_e2e.HEADER)


def test_gemma3_runs_a_full_layer_among_few():
    cfg = transformers_e2e.make_config("gemma3-12b", 4)
    assert cfg.layer_types == ["sliding_attention"] * 3 + ["full_attention"]
    assert transformers_e2e.make_config("gemma3-12b", 6).layer_types[5] == "full_attention"
