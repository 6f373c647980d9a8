"""The performance model: predicted step times of configurations on another cluster
(``lowprec predict`` / ``advise``), from profiled compute and a link model."""
