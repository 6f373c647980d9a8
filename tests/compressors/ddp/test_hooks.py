"""The DDP communication hooks in one process (compressors/ddp/hooks.py): invalid hooks name the valid
choices, ``comm_hook`` picks the state for the method and passes its options on, a ``HookSwitch``
starts with any state. Training through them: test_training.py, test_overlap.py.
"""
from __future__ import annotations

import pytest

import compressors as C
from compressors import ddp


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
