"""Dettmers' dynamic tree (compressors/core/dynamic_tree.py): the table from his rule, and the bin
table's lookup against a binary search.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compressors.core import dynamic_tree
from tests.helpers import dettmers_table


def test_dynamic_tree_table_follows_dettmers_rule():
    ref = dettmers_table()
    assert len(ref) == 126
    decade_counts = [sum(1 for v in ref if 10.0 ** -(k + 1) <= v < 10.0**-k) for k in range(6)]
    assert decade_counts == [64, 32, 16, 8, 4, 2]
    assert ref[-1] == pytest.approx(0.99140625, rel=1e-12) and ref[0] == pytest.approx(2.75e-6, rel=1e-12)
    # the module builds the same magnitudes, and the codec decodes to them (float32)
    assert np.allclose(sorted(dynamic_tree.magnitudes()), ref, rtol=1e-12, atol=0)
    values = dynamic_tree.tables("cpu").value_of_code.double()
    positive = sorted(v for v in values.tolist() if v > 0)
    assert len(positive) == 127  # 126 magnitudes and max
    assert np.allclose(positive, ref + [1.0], rtol=1e-7, atol=0)
    assert sorted(v for v in values.tolist() if v < 0) == sorted(-v for v in positive)
    assert values.tolist().count(0.0) == 2  # +0 and -0


def test_dynamic8_bin_table_gives_the_binary_search_position_bit_for_bit():
    tables = dynamic_tree.tables("cpu")
    bounds = tables.bounds
    below, above = torch.nextafter(bounds, torch.tensor(0.0)), torch.nextafter(bounds, torch.tensor(2.0))
    a = torch.cat([bounds, below, above, torch.rand(100_000) ** 8, torch.tensor([0.0, 1e-45, 1.0])]).clamp(0, 1)
    assert torch.equal(dynamic_tree.position(tables, a).long(), torch.searchsorted(bounds, a, right=True))
