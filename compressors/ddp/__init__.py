"""PyTorch DDP communication hooks over ``compressors.comm``: a hook is a small function over a
``GradBucket`` with explicit state (``hooks``); ``step_clock`` times what of a step is exposed
communication."""
from .hooks import (AllreduceHookState, CastHookState, HookState, HookSwitch, POWERSGD, PlainDDPStats,
                    PowerSGDHookState, ReducerHookState, allreduce_hook, bucket_views, cast_hook, comm_hook,
                    powersgd_hook, reducer_hook, switch_hook)
from .step_clock import StepClock

__all__ = ["AllreduceHookState", "CastHookState", "HookState", "HookSwitch", "POWERSGD", "PlainDDPStats",
           "PowerSGDHookState", "ReducerHookState", "StepClock", "allreduce_hook", "bucket_views", "cast_hook",
           "comm_hook", "powersgd_hook", "reducer_hook", "switch_hook"]
