"""Shared fixtures; and extra modules imported before any test module is collected.

``LOWPREC_TEST_IMPORTS`` names modules (comma-separated) to import first: a codec module
registers its codec on import, so the contract tests (tests/compressors/test_contract.py),
parametrized over the registry when collected, run it too, with no edit to any test file::

    PYTHONPATH=/path/to/folder LOWPREC_TEST_IMPORTS=my_codec python -m pytest tests/compressors/test_contract.py
"""
from __future__ import annotations

import gc
import importlib
import os

import pytest

IMPORTS_VAR = "LOWPREC_TEST_IMPORTS"

# Collecting imports torch, Numba, pandas: half a million objects that live until the end. Without
# this, each full garbage collection (dozens while collecting and testing, five as pytest exits)
# scanned them all: about 10 s of a 65 s run of the fast tests. Collection makes no cycles worth
# collecting; afterwards the collector runs as usual, over the objects the tests make.
gc.disable()


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()
    gc.enable()


for _module in filter(None, (m.strip() for m in os.environ.get(IMPORTS_VAR, "").split(","))):
    importlib.import_module(_module)


@pytest.fixture(params=["reference", "numba"])
def impl(request):
    """Each implementation of a codec: the torch reference, and Numba's kernels where Numba is installed."""
    if request.param == "numba":
        pytest.importorskip("numba")
    return request.param
