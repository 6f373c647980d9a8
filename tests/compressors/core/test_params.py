"""Parameter types (compressors/core/params.py): rates read as tc writes them, and their valid range.
"""
from __future__ import annotations

import pytest

from compressors.core.params import RATE, Param, rate_bps


@pytest.mark.parametrize("text, bps", [("100mbit", 1e8), ("1gbit", 1e9), ("2.5gbit", 2.5e9), ("8kbit", 8e3),
                                       ("1Gbit", 1e9), ("500000bit", 5e5)])
def test_rates_are_read_as_tc_writes_them(text, bps):
    assert rate_bps(text) == bps


@pytest.mark.parametrize("text", ["fast", "100", "-1mbit", "nanmbit", "1 gbit", "1tbit", "1e9bit", "", None, 1e9])
def test_a_rate_that_is_not_one_raises(text):
    with pytest.raises(ValueError, match="is not a rate like 100mbit"):
        rate_bps(text)


@pytest.mark.parametrize("value", ["1kbit", "200gbit", "fast", 100, float("nan")])
def test_rates_outside_the_range_or_not_rates_are_invalid_settings(value):
    param = Param("bandwidth", None, RATE)
    assert param.problem(value) == "must be a rate from 8kbit to 100gbit, like 100mbit or 2.5gbit"
    assert param.check("x", "1GBIT") == "1gbit"
