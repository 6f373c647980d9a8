"""Shared fixtures; and extra modules imported before any test module is collected.

``LOWPREC_TEST_IMPORTS`` names modules (comma-separated) to import first: a codec module
registers its codec on import, so the contract tests (tests/compressors/test_contract.py),
parametrized over the registry when collected, run it too, with no edit to any test file::

    PYTHONPATH=/path/to/folder LOWPREC_TEST_IMPORTS=my_codec python -m pytest tests/compressors/test_contract.py
"""
from __future__ import annotations

import importlib
import os

import pytest

IMPORTS_VAR = "LOWPREC_TEST_IMPORTS"

for _module in filter(None, (m.strip() for m in os.environ.get(IMPORTS_VAR, "").split(","))):
    importlib.import_module(_module)


# With pytest-xdist (``-n``), each module's tests run on one worker (a module's spawned worlds and fixtures are
# made once), and the modules that start a Ray cluster or an emulated one run one after another on one worker:
# two at once would contend for Ray's ports and the machine's namespaces.
CLUSTER_MODULES = frozenset({
    "tests/orchestrator/cluster/test_emulation.py",
    "tests/orchestrator/study/test_gang.py",
    "tests/orchestrator/study/test_ray_start.py",
    "tests/orchestrator/study/test_runner_on_ray.py",
    "tests/orchestrator/study/test_user_workloads_on_ray.py",
    "tests/orchestrator/test_job_submit.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group("clusters" if module in CLUSTER_MODULES else module))


@pytest.fixture(params=["reference", "numba"])
def impl(request):
    """Each implementation of a codec: the torch reference, and Numba's kernels where Numba is installed."""
    if request.param == "numba":
        pytest.importorskip("numba")
    return request.param
