"""The Reducer in one process (compressors/comm/reducer.py): invalid configurations name the valid
choices, a state of another configuration is refused, a step accumulates until ``end_step``.
Over several ranks: test_collectives.py.
"""
from __future__ import annotations

import pytest
import torch

import compressors as C
from compressors import ddp


def test_invalid_reducers_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid") as err:
        C.Reducer("nosuch")
    assert "qsgd" in str(err.value) and "powersgd" in str(err.value)
    with pytest.raises(ValueError, match="valid") as err:
        C.Reducer("qsgd", "allreduce")
    assert "sra" in str(err.value) and "allgather" in str(err.value)
    with pytest.raises(ValueError, match="valid") as err:
        C.Reducer("fp32", "ring")
    assert "allreduce" in str(err.value)
    with pytest.raises(ValueError, match=r"powersgd runs only as a DDP communication hook.*ddp\.comm_hook"):
        C.Reducer("powersgd")
    with pytest.raises(ValueError, match="valid"):
        C.Reducer("qsgd", bits=9)
    with pytest.raises(ValueError, match="valid"):
        C.Reducer("fp32", min_compress_numel=-1)
    with pytest.raises(ValueError, match=r"2 tensors but 1 keys"):
        C.Reducer("fp32").reduce([torch.zeros(4), torch.zeros(4)], [0])


def test_state_of_another_configuration_is_refused():
    state = C.Reducer("onebit", "sra").state_dict()
    with pytest.raises(ValueError, match="onebit/sra cannot be loaded into onebit/allgather"):
        C.Reducer("onebit", "allgather").load_state_dict(state)
    with pytest.raises(ValueError, match="powersgd/powersgd cannot be loaded into fp16/allreduce"):
        ddp.comm_hook("fp16").load_state_dict(ddp.comm_hook("powersgd").state_dict())


def test_reduce_accumulates_a_step_until_end_step():
    reducer = C.Reducer("fp32", min_compress_numel=0)  # one process: no group, the mean is the input
    a, b = torch.arange(6.0).view(2, 3), torch.ones(5)
    first = reducer.reduce([a], [0])
    second = reducer.reduce([b], [1])
    assert (first.numel, second.numel) == (6, 5) and reducer.history == [] and reducer.step == 0
    assert reducer.current.numel == 11
    done = reducer.end_step()
    assert done.numel == 11 and reducer.history == [done] and reducer.step == 1 and reducer.current.numel == 0
    stats = reducer.average([a, b])
    assert stats.numel == 11 and len(reducer.history) == 2 and reducer.step == 2
    assert torch.equal(a, torch.arange(6.0).view(2, 3)) and torch.equal(b, torch.ones(5))
    assert all(s.bytes_sent == 0.0 for s in reducer.history)
