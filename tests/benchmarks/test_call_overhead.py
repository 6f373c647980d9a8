"""benchmarks/call_overhead.py runs, prints its table and saves one row per method (values, never times)."""
from __future__ import annotations

import json

from benchmarks import call_overhead


def test_a_tiny_run_saves_a_row_per_method(tmp_path, capsys):
    out = tmp_path / "overhead.json"
    assert call_overhead.main(["--tensors", "3", "--numel", "16", "--repeats", "1", "--methods", "qsgd,fp16",
                               "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["method"], r["impl"]) for r in record["rows"]] == [("qsgd", "numba"), ("fp16", "reference")]
    assert all(r["many_s"] > 0 and r["one_s"] > 0 for r in record["rows"])
    assert record["command"].startswith("python -m benchmarks.call_overhead --tensors 3")
    assert "3 tensors of 16 float32 against one of 48" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.tmp*"))
