"""Parameter types (compressors/core/params.py): rates read as tc writes them, and their valid range; floats
finite, and written as YAML 1.2 writes them.
"""
from __future__ import annotations

import math

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


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", 10**400])
def test_a_float_param_refuses_what_is_not_a_finite_number(value):
    param = Param("lr", 0.05, float, low=0, low_open=True)
    assert param.problem(value) == "must be a finite float in (0, inf)"
    with pytest.raises(ValueError) as err:
        param.check("workload", value)
    assert str(err.value).endswith("is invalid; valid: a finite float in (0, inf)")
    assert Param("pi", 0.01, float, low=0.0, high=1.0).problem(value) == "must be a float in [0.0, 1.0]"


@pytest.mark.parametrize("text, number", [("1e-3", 1e-3), ("5E2", 500.0), ("+2e+1", 20.0), (".5", 0.5), ("3", 3.0)])
def test_readers_of_yaml_take_a_numbers_text_for_a_float(text, number):
    # PyYAML (YAML 1.1) reads 1e-3, with no dot, as a string; YAML 1.2 reads it as the float
    param = Param("lr", 0.05, float, low=0, low_open=True)
    assert param.read(text) == number and isinstance(param.read(text), float)
    assert param.problem(text) == "must be a finite float in (0, inf)"  # the Python API stays strict
    for other in ("0x10", "1e", "e3", "1_000", " 1e-3", "1e-3 ", "inf", None, 1):
        assert param.read(other) is other
    assert Param("name", None, str).read("1e-3") == "1e-3"
