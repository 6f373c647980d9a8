"""The multi-process helper of the tests: the benchmarks' (one helper for both)."""
from benchmarks.ranks import free_port, run_ranks

__all__ = ["free_port", "run_ranks"]
