"""Sweeps of data-parallel training with low-precision communication, on Ray.

By subsystem, as the CLI (``cli``, ``lowprec``) names them:

- ``study``: the settings schema, the sweep file, one trial's training loop,
  the results columns, and running the trials on Ray Tune;
- ``results``: a results folder's tables, summary.md and plots;
- ``cluster``: the emulated cluster (network namespaces, shaped links);
- ``predict``: the performance model behind ``lowprec predict`` / ``advise``.

Only the runner (``study.runner``) and ``study.gauges`` use Ray, and import it
inside functions, so everything else works where Ray is not installed.
"""
