"""The GPU check's dry run on the CPU: the steps a machine without a GPU can run, and the defaults it says."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def test_help_names_the_default_steps_with_and_without_a_gpu() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True).stdout
    assert "default: compile,tests,world,ranks,training,sanitizer (world,ranks,training with --cpu)" in " ".join(
        out.split())


@pytest.mark.slow
def test_a_dry_run_of_the_bench_records_it_and_summarises_this_runs_table(tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text('{"stale": true}')  # an earlier run's file is not summarised
    # Two compressors (a dense one and a sparse one), not the bench's every one: the bench itself is
    # tests/benchmarks/test_compressor_bench.py's; here, what the check runs and records of it.
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--cpu", "--steps", "bench", "--budget-s", "200",
                           "--bench-compressors", "qsgd,topk"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / "check.json").read_text())
    assert [(s["step"], s["ok"]) for s in record["steps"]] == [("facts", True), ("bench", True)]
    assert record["command"].endswith("--steps bench --budget-s 200 --bench-compressors qsgd,topk --cpu")
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert [c["n"] for c in bench["copy"]] == [2 ** 20] and bench["not_measured"] == 0 and bench["goals"] == []
    assert {r["compressor"] for r in bench["rows"]} == {"qsgd", "topk"}
    assert {r["op"] for r in bench["rows"]} == {"encode", "decode", "decode_add"}
    assert "bench: copy 2^20 " in done.stdout and "goals met 0 of 0" in done.stdout
