"""Sweeps of data-parallel training with low-precision communication, on Ray.

settings (every setting, declared once), config (sweep files -> trials),
labels (how a configuration is written), train_loop (one trial's training),
sweep (Ray Tune + Ray Train), records (the per-trial results), tables, summary,
plots and export (results tables, summary.md, figures, writing them), progress,
gauges, env_info, cli. Only sweep and gauges use Ray, and import it inside functions,
so everything else works where Ray is not installed.
"""
