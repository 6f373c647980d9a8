"""Benchmarks of the compressors and the compressed collectives (not part of the installed packages).

Run from the repository root (each question, its command and current figures: BENCHMARKS.md)::

    python -m benchmarks.compressor_bench --sizes 20,22,24 --repeats 5 --json benchmarks/results/compressors/cpu.json
    python -m benchmarks.allreduce_bench --num_workers 2 --json benchmarks/results/allreduce/w2.json

The multi-process benchmarks start their ranks with the tests' ``tests.distributed.run_ranks``
(run them from the checkout).
"""
