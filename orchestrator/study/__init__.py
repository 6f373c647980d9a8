"""A study: the settings schema, the sweep file, one trial's training loop, and running the trials
on Ray Tune + Ray Train with their records, placement and progress."""
