"""Which gangs a sweep's pool starts (orchestrator/study/gang.py), with gangs that start no process."""
from __future__ import annotations


def test_a_sweep_over_1_and_2_workers_starts_one_gang_of_2_else_the_largest_that_fits(monkeypatch):
    from orchestrator.study import gang as module

    started = []

    class FakeGang:
        def __init__(self, num_workers, resources, timeout_s, make_room=lambda: False):
            if num_workers > fits:
                raise module.PlacementTimeout(f"not placed within {timeout_s:g} s")
            started.append(num_workers)
            self.size, self.resources, self.actors = num_workers, resources, []

        def ready(self):
            return self

    monkeypatch.setattr(module, "Gang", FakeGang)
    monkeypatch.setattr(module.ray, "get", lambda refs: refs)
    for fits, expected in ((8, [4]), (3, [2]), (1, [1])):
        started.clear()
        pool = module.Pool()
        pool.prepare([1, 2, 4, 2], {"CPU": 0.5}, [])
        assert started == expected and [shape[0] for shape in pool.idle] == expected
        for count in range(1, expected[0] + 1):  # every count up to its size is served by the gang prepared
            taken = pool.take(count, {"CPU": 0.5}, timeout_s=1)
            assert taken.size == expected[0] and started == expected
            pool.give_back(taken)
