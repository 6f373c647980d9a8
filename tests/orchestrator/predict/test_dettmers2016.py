"""Dettmers 2016's speedup model (orchestrator/predict/dettmers2016.py) gives his published figures from his parameters."""
from __future__ import annotations

import pytest

from orchestrator.predict import dettmers2016 as d


def test_the_penalties_follow_his_arithmetic():
    # 5.1.2, 8-bit: (0.5 - 0.3) + (0.5 - 0.15) + 5 x 0.4; 32-bit: the printed terms sum to 7.01 (he wrote 6.81)
    assert d.fc_penalty_ms(8) == pytest.approx(2.55)
    assert d.fc_penalty_ms(32) == pytest.approx(0.8 + 0.95 + 0.1 + 0.2 + 0.46 + 4.5)
    # Table 6's last columns: hidden under the 1.3 ms multiplication, else 31 x the excess
    assert d.cluster_sync_ms(512, 8) == 1.13
    assert d.cluster_sync_ms(512, 32) == pytest.approx(31 * (7.15 - 1.3))


def test_every_published_speedup_is_reproduced():
    rows = d.rows()
    assert len(rows) == 2 + 2 * 6 * 2
    for row in rows:
        # the paper prints two or three digits and rounds its intermediate sums
        assert row.reproduced == pytest.approx(row.paper, rel=0.005, abs=0.06), row


def test_the_headline_23x_against_50x_on_96_gpus():
    nervana = [r for r in d.rows() if r.gpus == 96 and r.kernels == "NervanaGPU"]
    best = {bits: max((r for r in nervana if r.bits == bits), key=lambda r: r.reproduced) for bits in (32, 8)}
    assert (best[32].sub_batch, round(best[32].reproduced, 1)) == (512, 23.0)
    assert (best[8].sub_batch, round(best[8].reproduced, 1)) == (2048, 50.6)
