"""A study: the settings schema, the sweep file, one trial's training loop, and running the trials
on Ray Tune with their workers, records, placement and progress."""
