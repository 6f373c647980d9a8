"""Trial records (orchestrator/study/records.py).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.study.records import make_record


def test_records_reject_unknown_status(tmp_path):
    from orchestrator.study.sweep_file import load_sweep

    (trial,) = load_sweep(_single(tmp_path)).trials
    with pytest.raises(ValueError, match="status"):
        make_record(trial, "running", None, [])


def _single(tmp_path: Path) -> Path:
    path = tmp_path / "one.yaml"
    path.write_text(textwrap.dedent("""\
        name: one
        workload: {target_accuracy: 0.5}
        baselines: false
        """))
    return path
