"""What the machine did during a trial (orchestrator/study/env_info.py): the steal and idle shares of
all CPU time, read from /proc/stat, and the cores other processes used.
"""
from __future__ import annotations

import math
import time

import pytest

from orchestrator.study.env_info import CpuTicks, cpu_ticks, idle_share, steal_share


def test_steal_and_idle_shares_of_all_cpu_time(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice: guest is inside user already
    stat.write_text("cpu  669 829 321 128 4 0 5 60 7 0\ncpu0 300 400 100 64 2 0 2 30 3 0\n")
    ticks = cpu_ticks(str(stat))
    assert ticks[:3] == (60, 128 + 4, 669 + 829 + 321 + 128 + 4 + 0 + 5 + 60)
    assert 0.0 < ticks.own_s <= time.process_time()  # this process's CPU time, read with them
    start, end = CpuTicks(60, 132, 2016), CpuTicks(90, 182, 2216)
    assert steal_share(start, end) == pytest.approx(30 / 200)
    assert idle_share(start, end) == pytest.approx(50 / 200)
    for share in (steal_share, idle_share):
        assert math.isnan(share(None, end))  # no /proc/stat
    for text in ("intr 1 2 3\n", "cpu  1 2 3\n", "cpu  1 2 3 x 5 6 7 8\n"):
        stat.write_text(text)
        assert cpu_ticks(str(stat)) is None
    assert cpu_ticks(str(tmp_path / "missing")) is None


def test_the_shares_are_defined_whatever_the_interval():
    # steps shorter than one clock tick see no tick pass: nothing was counted stolen or idle
    start = CpuTicks(60, 132, 2016)
    for share in (steal_share, idle_share):
        assert share(start, start) == 0.0
        assert share(start, CpuTicks(60, 131, 2015)) == 0.0  # iowait ran backwards, and the total with it
    # iowait running backwards under a tickless kernel cannot take a share out of [0, 1]
    assert idle_share(start, CpuTicks(60, 130, 2026)) == 0.0
    assert idle_share(start, CpuTicks(60, 152, 2026)) == 1.0
    assert steal_share(start, CpuTicks(65, 132, 2026)) == 0.5


def test_the_cores_others_used_are_the_busy_time_less_ours_over_the_time_passed(monkeypatch):
    from orchestrator.study import env_info

    monkeypatch.setattr(env_info.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(env_info, "_TICKS_PER_S", 100)
    # 2 s on 2 cores = 400 ticks: 100 idle, 20 stolen, so 280 busy ticks = 2.8 s; ours 1.2 s: others 1.6 s in 2 s
    start, end = CpuTicks(0, 0, 1000, own_s=5.0), CpuTicks(20, 100, 1400, own_s=6.2)
    assert env_info.others_cores(start, end, 1.2) == pytest.approx(0.8)
    assert env_info.others_cores(start, end, 9.0) == 0.0  # never below nothing
    assert math.isnan(env_info.others_cores(start, start, 0.0)) and math.isnan(env_info.others_cores(None, end, 0.0))
    assert env_info.machine_id() == env_info.machine_id()
