"""A results folder's tables, summary.md and figures, written from the trial records."""
