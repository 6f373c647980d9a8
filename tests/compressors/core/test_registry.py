"""The registry (compressors/core/registry.py): names and wire ids, parameters checked with the valid
range named, defaults filled, algorithms per method, and registration refusing clashes and
incomplete declarations.
"""
from __future__ import annotations

import pytest

import compressors as C
from compressors.core import registry
from compressors.core.params import Param
from tests.helpers import FIRST_METHODS

# The methods of wire ids 20 to 26, added after the first payload format.
LATER_METHODS = ("signsgd", "efsignsgd", "scaledsign", "terngrad", "randomk", "maxmin", "natural")


# ---------------------------------------------------------------- names and ids


def test_registry_names():
    shipped = [n for n in C.COMPRESSORS if n in FIRST_METHODS]
    assert shipped == ["fp32", "fp16", "bf16", "dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk"]
    assert [C.COMPRESSORS[n].wire_id for n in shipped] == list(range(1, 10))
    assert sorted(c.wire_id for c in C.COMPRESSORS.values()) == [c.wire_id for c in C.COMPRESSORS.values()]
    assert C.NAMES == tuple(C.COMPRESSORS) + ("powersgd", "onebit_adam")
    assert [n for n in C.CASTS if n in FIRST_METHODS] == ["fp32", "fp16", "bf16"]
    with pytest.raises(ValueError, match=r"powersgd.*compressors\.ddp\.comm_hook"):
        C.get("powersgd")
    for name in ("onebit", "adaptive", "topk"):
        assert C.COMPRESSORS[name].needs_error_feedback
    assert not C.COMPRESSORS["qsgd"].needs_error_feedback
    assert [n for n in FIRST_METHODS if C.COMPRESSORS[n].sparse] == ["adaptive", "topk"]
    assert issubclass(C.PayloadError, ValueError)


def test_registered_with_their_wire_ids_and_feedback():
    ids = {name: C.COMPRESSORS[name].wire_id for name in LATER_METHODS}
    assert ids == {"signsgd": 20, "efsignsgd": 21, "scaledsign": 22, "terngrad": 23, "randomk": 24, "maxmin": 25,
                   "natural": 26}
    feedback = {name for name in LATER_METHODS if C.COMPRESSORS[name].needs_error_feedback}
    assert feedback == {"efsignsgd", "scaledsign", "randomk"}
    assert all(C.has_numba(name) for name in LATER_METHODS)
    assert all(C.default_algorithm(name) == "sra" for name in LATER_METHODS)


def test_algorithms_per_method():
    for name in ("fp32", "fp16", "bf16"):
        assert C.algorithms(name) == ("allreduce", "allgather", "sra", "hierarchical")
        assert C.default_algorithm(name) == "allreduce"
    for name in ("dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk"):
        assert C.algorithms(name) == ("allgather", "sra", "hierarchical") and C.default_algorithm(name) == "sra"
    assert C.algorithms("powersgd") == ("powersgd",) and C.default_algorithm("powersgd") == "powersgd"
    with pytest.raises(ValueError, match="unknown compressor 'nope'"):
        C.algorithms("nope")


def test_the_package_imports_every_module_so_every_compressor_registers():
    import pkgutil
    import sys

    import compressors.codecs

    modules = [sys.modules[f"compressors.codecs.{info.name}"] for info in pkgutil.iter_modules(compressors.codecs.__path__)]
    defined = {obj for module in modules for obj in vars(module).values()
               if isinstance(obj, type) and issubclass(obj, C.Compressor) and "name" in obj.__dict__}
    assert defined == set(C.COMPRESSORS.values())


# ---------------------------------------------------------------- parameters


def test_unknown_compressor():
    with pytest.raises(ValueError, match="unknown compressor 'qsdg'.*qsgd"):
        C.get("qsdg")
    with pytest.raises(ValueError, match="valid"):
        C.check_params("nope")


def test_unknown_parameter_suggests():
    with pytest.raises(ValueError, match="unknown parameter 'bitz'.*did you mean 'bits'"):
        C.get("qsgd", bitz=4)
    with pytest.raises(ValueError, match="did you mean 'block'"):
        C.check_params("dynamic8", blok=4)
    with pytest.raises(ValueError, match="unknown parameter 'pi'"):
        C.get("fp32", pi=0.1)


@pytest.mark.parametrize("name,p,rng_text", [
    ("qsgd", {"bits": 1}, r"\[2, 8\]"), ("qsgd", {"bits": 9}, r"\[2, 8\]"), ("qsgd", {"bits": 4.0}, r"\[2, 8\]"),
    ("qsgd", {"bits": True}, r"\[2, 8\]"),
    ("qsgd", {"bucket": 0}, r"\[1, "), ("qsgd", {"norm": "l1"}, r"\['max', 'l2'\]"),
    ("topk", {"pi": 0.0}, r"\(0\.0, 1\.0\]"), ("adaptive", {"pi": 1.5}, r"\(0\.0, 1\.0\]"),
    ("adaptive", {"pi": -0.1}, r"\(0\.0, 1\.0\]"), ("topk", {"pi": "0.1"}, r"\(0\.0, 1\.0\]"),
    ("dynamic8", {"block": -1}, r"\[0, "), ("linear8", {"block": 2**31}, r"\[0, "),
    ("qsgd", {"seed": -1}, r"\[0, "),
])
def test_out_of_range_parameters_name_the_valid_range(name, p, rng_text):
    key = next(iter(p))
    with pytest.raises(ValueError, match=rf"{key}=.*valid: .*{rng_text}"):
        C.get(name, **p)
    with pytest.raises(ValueError, match=rng_text):
        C.check_params(name, **p)


@pytest.mark.parametrize("name,p,text", [("maxmin", {"bits": 0}, r"\[1, 8\]"), ("maxmin", {"bits": 9}, r"\[1, 8\]"),
                                         ("maxmin", {"bucket": 0}, "bucket"), ("randomk", {"pi": 0.0}, r"\(0.0, 1.0\]"),
                                         ("terngrad", {"clip": -1.0}, "clip"), ("terngrad", {"bits": 2}, "unknown")])
def test_bad_parameters_name_the_valid_range(name, p, text):
    with pytest.raises(ValueError, match=text):
        C.get(name, **p)


def test_check_params_fills_defaults():
    assert C.check_params("qsgd") == {"bits": 4, "bucket": 512, "norm": "max", "seed": 0}
    assert C.check_params("qsgd", bits=2, norm="l2") == {"bits": 2, "bucket": 512, "norm": "l2", "seed": 0}
    assert C.check_params("topk", pi=1) == {"pi": 1.0, "seed": 0}
    assert C.check_params("dynamic8") == {"block": 0, "scope": "chunk", "seed": 0}
    assert C.check_params("fp32") == {"seed": 0}
    powersgd = {"matrix_rank": 1, "start_iter": 2, "min_compression_rate": 2.0, "use_error_feedback": True,
                "warm_start": True, "orthogonalization_epsilon": 0.0, "seed": 0}
    assert C.check_params("powersgd") == powersgd
    assert C.check_params("powersgd", matrix_rank=4) == {**powersgd, "matrix_rank": 4}
    with pytest.raises(ValueError, match="matrix_rank"):
        C.check_params("powersgd", matrix_rank=0)
    with pytest.raises(ValueError, match="did you mean 'matrix_rank'"):
        C.check_params("powersgd", matrix_rnk=2)
    c = C.get("qsgd", bits=3)
    assert c.config == {"bits": 3, "bucket": 512, "norm": "max", "seed": 0} and c.bits == 3


def test_params_of_unknown_name():
    with pytest.raises(ValueError, match="unknown compressor 'qsdg'"):
        C.params_of("qsdg")


# ---------------------------------------------------------------- registration


def _define(name: str, wire_id, **attrs):
    """Define (and so try to register) a compressor class."""
    return type(f"Tmp_{name}", (C.Compressor,), {"name": name, "wire_id": wire_id, "__module__": __name__, **attrs})


def test_registering_a_taken_name_or_wire_id_fails_clearly():
    before = dict(C.COMPRESSORS)
    with pytest.raises(registry.RegistrationError, match="name 'qsgd' is already registered by compressors.codecs.qsgd.QSGD"):
        _define("qsgd", registry.unused_wire_id())
    with pytest.raises(registry.RegistrationError,
                       match=rf"wire_id 6 is already used by 'qsgd'.*the lowest is {registry.unused_wire_id()}"):
        _define("qsgd2", 6)
    with pytest.raises(registry.RegistrationError, match="name 'powersgd' is already registered"):
        _define("powersgd", registry.unused_wire_id())
    for bad in (0, 256, -1, "7", True, None):
        with pytest.raises(registry.RegistrationError, match=r"wire_id must be an int in \[1, 255\]"):
            _define("fresh", bad)
    assert C.COMPRESSORS == before and "fresh" not in C.NAMES


def test_registration_checks_docs_and_examples():
    free = registry.unused_wire_id()
    with pytest.raises(registry.RegistrationError, match="one-line doc"):
        _define("nodoc", free, params=(Param("x", 1, int),))
    with pytest.raises(registry.RegistrationError, match="invalid example.*unknown parameter 'bits'"):
        _define("badexample", free, examples=({"bits": 4},))
    with pytest.raises(registry.RegistrationError, match="invalid example.*x=0 is invalid"):
        _define("badvalue", free, params=(Param("x", 1, int, low=1, doc="a doc"),), examples=({"x": 0},))
    with pytest.raises(registry.RegistrationError, match="at least one parameter set"):
        _define("noexamples", free, examples=())
    with pytest.raises(registry.RegistrationError, match=r"algorithm_choices must name some of \['allgather', "
                                                         r"'sra', 'hierarchical'\], its default 'sra' included"):
        _define("badchoices", free, algorithm_choices=("allgather",))
    with pytest.raises(registry.RegistrationError, match="algorithm_choices must name some of"):
        _define("badchoices", free, algorithm_choices=("sra", "allreduce"))
    assert not {"nodoc", "badexample", "badvalue", "noexamples", "badchoices"} & set(C.COMPRESSORS)
