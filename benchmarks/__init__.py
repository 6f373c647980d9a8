"""Benchmarks of the compressors and the compressed collectives (not part of the installed packages).

Run from the repository root::

    python -m benchmarks.compressor_bench --sizes 20,22,24 --repeats 5 --json benchmarks/out/bench_cpu.json
    python -m benchmarks.allreduce_bench --num_workers 2 --json benchmarks/out/allreduce_w2.json

``ranks.run_ranks`` (spawned processes in one process group) is shared with the tests.
"""
