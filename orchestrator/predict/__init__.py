"""The performance model: predicted step times of configurations on another cluster
(``lowprec predict`` / ``advise``), from profiled compute and a link model.

- ``predictor``: the table of a results folder's configurations on a target cluster;
- ``trials``: its inputs, the records and trials.csv checked, each configuration's one-worker times;
- ``outcomes``: what the configurations reached, and how far their steps are known;
- ``measure``: what is timed on this machine (step profile, reduction rate), cached in the folder;
- ``buckets``, ``traffic``, ``plan``, ``perfmodel``: DDP's buckets, their bytes, the step and its costs;
- ``options``, ``files``, ``advice``: the commands' options, the predictions' file, what is printed;
- ``emulated``, ``sharing``: predictions of the trials run on an emulated cluster, and what its hosts
  sharing one machine cost.
"""
