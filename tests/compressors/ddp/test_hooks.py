"""The DDP communication hooks in one process (compressors/ddp/hooks.py): invalid hooks name the valid
choices (the Reducer's checks, for PowerSGD too), ``comm_hook`` picks the state for the method and passes
its options on, every state resumes from its own checkpoint, plain DDP is counted without a hook, a
``HookSwitch`` starts with any state. Training through them: test_training.py, test_overlap.py.
"""
from __future__ import annotations

import math

import pytest

import compressors as C
from compressors import ddp
from compressors.comm.topology import Topology


def test_invalid_hooks_name_the_valid_choices():
    with pytest.raises(ValueError, match=r"algorithm 'sra' is invalid for 'powersgd'; valid: \['powersgd'\]"):
        ddp.comm_hook("powersgd", "sra")
    with pytest.raises(ValueError, match=r"matrix_rank=0 is invalid"):
        ddp.comm_hook("powersgd", matrix_rank=0)
    with pytest.raises(ValueError, match="unknown parameter 'bits'"):
        ddp.comm_hook("powersgd", bits=4)
    with pytest.raises(ValueError, match="unknown compressor 'nosuch'.*powersgd"):
        ddp.comm_hook("nosuch")
    with pytest.raises(ValueError, match=r"valid: \['allgather', 'sra', 'hierarchical'\]"):
        ddp.comm_hook("qsgd", "allreduce")


def test_comm_hook_picks_the_state_for_the_method():
    cases = {("fp32", None): (ddp.AllreduceHookState, "allreduce"), ("fp16", None): (ddp.CastHookState, "allreduce"),
             ("bf16", None): (ddp.CastHookState, "allreduce"), ("fp16", "sra"): (ddp.ReducerHookState, "sra"),
             ("qsgd", None): (ddp.ReducerHookState, "sra"), ("onebit", "allgather"): (ddp.ReducerHookState, "allgather"),
             ("powersgd", None): (ddp.PowerSGDHookState, "powersgd")}
    for (name, algo), (kind, expected) in cases.items():
        state = ddp.comm_hook(name, algo)
        assert type(state) is kind and state.compressor == name and state.algorithm == expected
        assert state.history == [] and state.step == 0
        assert state.params == C.check_params(name)
    state = ddp.comm_hook("powersgd", matrix_rank=3, seed=7)
    assert (state.powersgd.matrix_approximation_rank, state.powersgd.start_powerSGD_iter) == (3, 2)
    state = ddp.comm_hook("powersgd", start_iter=1000, min_compression_rate=1.5, use_error_feedback=False,
                          warm_start=False, orthogonalization_epsilon=1e-8)
    ps = state.powersgd
    assert (ps.start_powerSGD_iter, ps.min_compression_rate, ps.use_error_feedback, ps.warm_start,
            ps.orthogonalization_epsilon) == (1000, 1.5, False, False, 1e-8)
    assert ddp.comm_hook("powersgd", start_iter=1, use_error_feedback=False, warm_start=False).powersgd.iter == 0
    with pytest.raises(ValueError, match=r"powersgd: start_iter=1 must be >= 2 with use_error_feedback or warm_start"):
        ddp.comm_hook("powersgd", start_iter=1)
    state = ddp.comm_hook("qsgd", bits=2, min_compress_numel=0, error_feedback=True)
    assert state.reducer.params["bits"] == 2 and state.reducer.min_compress_numel == 0 and state.reducer.ef is not None


def test_hook_switch_starts_with_any_state_and_checks_later_ones():
    warm, main = ddp.comm_hook("fp32"), ddp.comm_hook("qsgd")
    switch = ddp.HookSwitch(warm)
    switch.active = main  # not registered yet: nothing to check against
    assert switch.active is main


@pytest.mark.parametrize("given, message", [
    ({"impl": "numba"}, "has no Numba kernels: use impl 'reference' or 'auto'"),
    ({"impl": "bogus"}, "impl must be one of auto, reference, numba, cuda, got 'bogus'"),
    ({"intra": "fp8"}, r"intra must be one of \['fp32', 'fp16', 'bf16'\]"),
    ({"min_compress_numel": -1}, r"min_compress_numel=-1 is invalid"),
    ({"momentum": 0.9}, r"momentum is for a method that keeps it in its memory \(dgc\), not '.*': give it to the"),
    ({"topology": Topology.flat(2)}, "the topology names 2 ranks; the group has 1"),
])
def test_powersgd_and_the_reducer_refuse_the_same_options_alike(given, message):
    with pytest.raises(ValueError, match=f"powersgd.*{message}|{message}"):
        ddp.comm_hook("powersgd", **given)
    codec = "fp16" if "impl" in given else "qsgd"  # a codec without kernels for the impl case
    with pytest.raises(ValueError, match=message):
        C.Reducer(codec, **given)


# PowerSGD's own state needs a process group to load: test_training.py resumes it.
@pytest.mark.parametrize("name", ["fp32", "fp16", "qsgd"])
def test_every_state_resumes_from_its_own_checkpoint(name):
    saved = ddp.comm_hook(name)
    state = saved.state_dict()
    assert (state["compressor"], state["algorithm"], state["step"]) == (name, saved.algorithm, 0)
    state["step"] = 7
    fresh = ddp.comm_hook(name)
    fresh.load_state_dict(state)
    assert fresh.step == 7 and fresh.state_dict() == state
    other = "bf16" if name != "bf16" else "fp16"
    with pytest.raises(ValueError, match=f"{name}/{saved.algorithm} cannot be loaded into {other}/"):
        ddp.comm_hook(other).load_state_dict(state)


def test_plain_ddp_stats_count_every_gradient_once_per_step():
    plain = ddp.PlainDDPStats(1000)
    plain.end_step()
    plain.end_step()
    assert len(plain.history) == 2
    assert all(s.numel == 1000 and s.bytes_sent == s.bytes_inter == 0.0 and math.isnan(s.comm_s)
               for s in plain.history)  # one process: nothing is sent
    with pytest.raises(ValueError, match="the topology names 2 ranks; the group has 1"):
        ddp.PlainDDPStats(1000, topology=Topology.flat(2))
