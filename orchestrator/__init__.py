"""Sweeps of data-parallel training with low-precision communication, on Ray.

config (sweep files -> trials), sweep (Ray Tune + Ray Train), records (the
per-trial results), export and plots (tables and figures), progress, gauges,
env_info, cli. Only sweep and gauges use Ray, and import it inside functions,
so everything else works where Ray is not installed.
"""
