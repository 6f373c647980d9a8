"""Choosing an implementation (compressors/core/base.py): ``impl`` checked against the codec's kernels,
Numba by default on the CPU, CUDA only where CuPy and a CUDA tensor are; ``decode(add=True)`` needs ``out``;
meta tensors are refused.
"""
from __future__ import annotations

import pytest
import torch

import compressors
from compressors import COMPRESSORS

pytest.importorskip("numba")

KERNELS = [name for name, cls in COMPRESSORS.items() if cls.has_numba]


def test_impl_is_checked():
    with pytest.raises(ValueError, match="impl must be one of auto, reference, numba, cuda"):
        compressors.get("qsgd", impl="fast")
    with pytest.raises(ValueError, match="fp16 has no Numba kernels"):
        compressors.get("fp16", impl="numba")
    assert compressors.get("fp16").uses_numba("cpu") is False
    for name in KERNELS:
        assert compressors.get(name).uses_numba("cpu") is True  # auto: Numba on the CPU
        assert compressors.get(name, impl="reference").uses_numba("cpu") is False


def test_decode_add_needs_out():
    codec = compressors.get(KERNELS[0]) if KERNELS else compressors.get("fp16")
    with pytest.raises(ValueError, match="adds into out"):
        codec.decode(codec.encode(torch.ones(4)), add=True)


def test_the_cuda_impl_is_checked_where_it_cannot_run():
    """Without CuPy, impl 'cuda' names the extras; with it, on a CPU tensor it names the device; auto
    never takes the CUDA kernels for CPU tensors."""
    from compressors.core.base import cupy_installed

    if not cupy_installed():
        with pytest.raises(ValueError, match=r"impl 'cuda' needs CuPy \(pip install 'lowprec\[cuda12\]'"):
            compressors.get("qsgd", impl="cuda")
    with pytest.raises(ValueError, match="fp16 has no CUDA kernels"):
        compressors.get("fp16", impl="cuda")
    assert compressors.get("qsgd").uses_cuda("cpu") is False
    assert compressors.get("qsgd", impl="reference").uses_cuda("cuda") is False


@pytest.mark.parametrize("impl", ["auto", "reference"])
def test_meta_tensors_are_refused_with_a_clear_message(impl):
    for name in COMPRESSORS:
        codec = compressors.get(name, impl=impl)
        payload = codec.encode(torch.ones(8))
        for call in (lambda: codec.encode(torch.ones(8, device="meta")), lambda: codec.decode(payload.to("meta"))):
            with pytest.raises(ValueError) as err:
                call()
            assert str(err.value) == (f"{name}: meta tensors have no data to encode or decode; "
                                      "give a tensor on a real device")


def test_an_encode_whose_body_disagrees_with_its_size_formula_is_blamed_at_encode():
    codec = compressors.get("signsgd", impl="reference")

    class Short(type(codec)):  # no name of its own: registers nothing
        def _encode_body(self, flat, shape, **kw):
            return super()._encode_body(flat, shape, **kw)[1:]  # the bits without the scale

    with pytest.raises(ValueError, match=r"^signsgd: encode made a body of 1 bytes for a tensor of shape \[8\], "
                                         r"where its _body_nbytes says 5: _encode_body and _body_nbytes disagree$"):
        Short(impl="reference").encode(torch.ones(8))
