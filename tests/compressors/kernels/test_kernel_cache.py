"""The kernels' compiled code is cached by their sources, not by the folder they sit in
(compressors/kernels/cache.py): a second copy of the same kernels loads what the first compiled; a
copy whose sources differ compiles again."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # three interpreters, one Numba compile

# Runs transpose once in the copy of the kernels at sys.argv[1]; prints its cache hits and misses. Numba is
# imported first, as other code may do, before the package sets NUMBA_CACHE_DIR.
_PROBE = """
import json, sys
import numba
import numpy as np
sys.path.insert(0, sys.argv[1])
from kernels import common
x = np.arange(6, dtype=np.float32)
out = np.empty(6, np.float32)
common.transpose(x, 2, 3, out)
assert out.tolist() == [0, 3, 1, 4, 2, 5]
stats = common.transpose.stats
print(json.dumps([sum(stats.cache_hits.values()), sum(stats.cache_misses.values())]))
"""


def _probe(folder, home) -> list[int]:
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    done = subprocess.run([sys.executable, "-c", _PROBE, str(folder)], capture_output=True, text=True, timeout=300,
                          env={**env, "XDG_CACHE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_copy_of_the_same_kernels_loads_what_the_first_compiled(tmp_path):
    for copy in ("a", "b", "c"):
        shutil.copytree(ROOT / "compressors" / "kernels", tmp_path / copy / "kernels",
                        ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "c" / "kernels" / "natural.py", "a") as edited:  # another kernel's source changed
        edited.write("\n# edited\n")
    home = tmp_path / "home"
    assert _probe(tmp_path / "a", home) == [0, 1]  # compiled, and saved
    assert _probe(tmp_path / "b", home) == [1, 0]  # loaded, though in another folder
    assert _probe(tmp_path / "c", home) == [0, 1]  # compiled again: the sources differ
    assert [p.name for p in (home / "lowprec" / "numba").iterdir()] == ["kernels"]
    assert not list((tmp_path / "a" / "kernels").glob("__pycache__/*.nbi"))  # nothing in the source folder
