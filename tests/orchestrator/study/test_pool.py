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
        # every smaller count is served by the gang prepared; a larger one gets a gang of its own
        for count in (1, 2, 4):
            taken = pool.take(count, {"CPU": 0.5}, timeout_s=1) if count <= expected[0] else None
            assert taken is None or taken.size == expected[0]
            if taken is not None:
                pool.give_back(taken)
