"""Sweeps of data-parallel training with low-precision communication, on Ray.

By subsystem, as the CLI (``cli``, ``lowprec``) names them:

- ``study``: the settings schema, the sweep file, one trial's training loop,
  the results columns, and running the trials on Ray Tune;
- ``results``: a results folder's tables, summary.md and plots;
- ``cluster``: the emulated cluster (network namespaces, shaped links);
- ``predict``: the performance model behind ``lowprec predict`` / ``advise``.

Only the modules that run trials on Ray use it (``study.ray_session``, ``study.recorder``,
``study.trial``, ``study.gang``, ``study.gauges``), and they are imported inside the functions that
need them, so everything else works where Ray is not installed.
"""
