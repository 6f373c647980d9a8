"""What predict and advise print of a table of predictions: the table itself, and advise's recommendation
with the configurations it left out and why.

advise recommends, by the speedup in time to accuracy, the configuration that pays most among those that
reached the target, ended at most a limit worse than fp32 in what the study is judged by (points of
accuracy, nats of test loss), and whose predicted speedup is measurable (its 95% interval excludes 1).
"""
from __future__ import annotations

import math

import pandas as pd

from ..study.intervals import measurable
from ..study.quality import Quality
from .outcomes import ACCURACY, delta_column, worse_is_higher

# The columns predict prints, the change against fp32 of what the study is judged by among them.
_SHOWN = ("configuration", "predicted_step_time_s", "comm_s", "speedup_vs_fp32", "speedup_vs_16bit",
          "tta_speedup_vs_fp32", None, "reached_target", "break_even_bps")


def rate_text(bps: float) -> str:
    """A bandwidth in bits/s as people write it: 423 Mbit/s, 9.52 Gbit/s. As a break-even bandwidth: inf is
    ``any`` (faster than fp32 at any bandwidth), 0 is ``never``, NaN (fp32 against itself) is ``n/a``."""
    if math.isnan(bps):
        return "n/a"
    if math.isinf(bps):
        return "any"
    if bps == 0:
        return "never"
    rounded = float(f"{bps:.3g}")  # the unit of what is shown: 999.9 Mbit/s shows as 1 Gbit/s
    for scale, unit in ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if rounded >= scale:
            return f"{rounded / scale:.3g} {unit}"
    return f"{rounded:.3g} bit/s"


def table_text(table: pd.DataFrame, judged: Quality) -> str:
    """predict's table as it prints it: a few columns (those it has: a prediction from a step time knows no
    outcome), numbers to 4 digits, break-even bandwidths as rates."""
    wanted = [delta_column(judged) if column is None else column for column in _SHOWN]
    shown = table[[column for column in wanted if column in table.columns]]
    shown = shown.assign(break_even_bps=shown["break_even_bps"].map(rate_text))
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _points(value: float, decimals: int = 2) -> str:
    """Percentage points (or nats, to ``decimals``) as a person writes them: 2.7, 0.25, 3."""
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".")


# Decimals of a change against fp32 in advise's lines: points to 2 (0.25), nats to 3 (0.051 of a limit of 0.05).
_DECIMALS = {"points": 2, "nats": 3}


def exclusion(row: pd.Series, max_loss: float, judged: Quality = ACCURACY) -> str | None:
    """Why advise does not recommend a configuration (a row of ``predict``'s table for a study ``judged`` so), or
    None: it ended more than ``max_loss`` (in the unit of what the study is judged by) worse than fp32."""
    if not row["reached_target"]:
        return "did not reach the target"
    lo, hi = float(row.get("tta_speedup_lo", math.nan)), float(row.get("tta_speedup_hi", math.nan))
    if math.isfinite(lo) and math.isfinite(hi) and not measurable(lo, hi):
        return (f"not measurable here: its predicted speedup's 95% interval [{lo:.2f}, {hi:.2f}] includes 1 (its "
                "one-worker step is not known well enough against fp32's on this machine: more steps, a quieter "
                "machine or a second seed narrow it)")
    delta = float(row[delta_column(judged)])
    if math.isnan(delta):
        return f"{judged.name} change vs fp32 unknown (no finished fp32 trial with as many workers)"
    worse = delta if worse_is_higher(judged) else -delta
    if worse > max_loss:
        amount = _points(worse, _DECIMALS[judged.unit])
        if worse_is_higher(judged):
            return f"{judged.name} {amount} {judged.unit} above fp32's (max {max_loss:g})"
        return f"lost {amount} {judged.unit} (max {max_loss:g})"
    return None


def advice(table: pd.DataFrame, max_loss: float, judged: Quality = ACCURACY) -> str:
    """The configuration that pays most on that cluster in time to accuracy, among those that reached the target
    and ended at most ``max_loss`` worse than fp32 in what the study is ``judged`` by (points of accuracy, nats
    of test loss), and why; or that none pays; then, a line each, the configurations left out and why."""
    others = table[table["compressor"] != "fp32"]
    why = {index: exclusion(row, max_loss, judged) for index, row in others.iterrows()}
    ranked = others.loc[[i for i in others.index if why[i] is None]].sort_values("tta_speedup_vs_fp32",
                                                                                 ascending=False)
    bound = float(table["speedup_bound"].iloc[0])
    within = f"reached the target within {max_loss:g} {judged.unit} of fp32's {judged.name}"
    if others.empty:
        lines = ["none pays: the folder has no configuration but fp32"]
    elif ranked.empty:
        lines = [f"none recommended: no configuration {within}"]
    elif float(ranked["tta_speedup_vs_fp32"].iloc[0]) <= 1.0:
        lines = [f"none pays: no configuration that {within} beats fp32 on this cluster (the bound for any "
                 f"compressor is {bound:.2f}x: fp32's exposed communication is small)"]
    else:
        lines = [_recommendation(ranked.iloc[0], judged, bound)]
    return "\n".join(lines + [f"excluded {others.loc[i, 'configuration']}: {text}"
                              for i, text in why.items() if text is not None])


def _recommendation(best: pd.Series, judged: Quality, bound: float) -> str:
    """advise's line for the configuration it recommends (a row of predict's table)."""
    ratio = float(best["steps_ratio_vs_fp32"])
    speed = (f"{best['tta_speedup_vs_fp32']:.2f}x fp32 in time to accuracy (per step "
             f"{best['speedup_vs_fp32']:.2f}x, fp32's steps to target / its own {ratio:.2f})"
             if math.isfinite(ratio) else f"{best['speedup_vs_fp32']:.2f}x fp32 per step; steps to target unknown")
    even = rate_text(float(best["break_even_bps"]))
    pays = {"any": "at any bandwidth", "never": "by its steps to the target alone (per step it is slower at any "
            "bandwidth)"}.get(even, f"below {even}")
    change = f"{float(best[delta_column(judged)]):+.{_DECIMALS[judged.unit]}f}"
    return (f"{best['configuration']}: {speed}; {judged.name} {change} {judged.unit} vs fp32, target reached; the "
            f"bound for any compressor is {bound:.2f}x; it pays {pays}")
