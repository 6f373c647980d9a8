"""A new codec is one module: written to a folder of its own (not the package's), imported before
collection (``LOWPREC_TEST_IMPORTS``, tests/conftest.py), it is registered and passes every contract
test (test_contract.py), with no other file edited.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

NAME = "throwaway_copy"
CODEC = f'''"""A throwaway lossless codec: the float32 values as they are."""
import torch

from compressors.core import registry, wire
from compressors.core.base import Compressor, numel


class ThrowawayCopy(Compressor):
    """The tensor as float32: ``4 n`` body bytes."""
    name = "{NAME}"
    wire_id = registry.unused_wire_id()

    def _body_nbytes(self, shape):
        return 4 * numel(shape)

    def _encode_body(self, flat, shape, *, step, rank, stream):
        return [flat.to(torch.float32)]

    def _decode_body(self, payload, start, shape):
        return wire.section(payload, start, numel(shape), torch.float32).to(torch.float32)
'''
CONTRACT = Path(__file__).with_name("test_contract.py")


@pytest.mark.slow  # the contract tests again, in a pytest of their own
def test_a_codec_module_from_elsewhere_passes_the_contract_tests(tmp_path):
    (tmp_path / "throwaway_codec.py").write_text(CODEC)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "LOWPREC_TEST_IMPORTS": "throwaway_codec"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", NAME, str(CONTRACT)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    passed = re.findall(r"::(test_\w+)\[(.*)\] PASSED", done.stdout)
    ran = {test for test, ids in passed if re.search(rf"(^|-){NAME}(-|$)", ids)}
    contract_tests = {node.name for node in ast.parse(CONTRACT.read_text()).body
                      if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    assert ran == contract_tests, sorted(contract_tests - ran)
    assert "FAILED" not in done.stdout and " 0 passed" not in done.stdout
