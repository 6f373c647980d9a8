"""Overlap-on sharing trials against the model with the latency under load hidden behind backward (as it
is) and paid in series (an alternative): python benchmarks/2026-11-22-cpu/predictor/session6/sharing_overlap/check.py
from the checkout, PYTHONPATH=. (session 6, 2026-11-22)."""
from pathlib import Path
from orchestrator import predict
from benchmarks import predictor_validation as pv
S6 = Path("benchmarks/2026-11-22-cpu/predictor/session6")
inputs = [t for f in ("inputs_1", "inputs_2") for t in predict.read_trials(S6 / f)]
scales, latency = pv.sharing_inputs(predict.read_trials(S6 / "sharing"), inputs)
on = predict.read_trials(S6 / "sharing_overlap")
profiles = {}
hidden = predict.trial_predictions(on, inputs, scales=scales, latency=latency, profiles=profiles)
bare = predict.trial_predictions(on, inputs, scales=scales, latency={k: 0.0 for k in latency}, profiles=profiles)
for r, row in on:
    t = r["trial_id"]; s = r["settings"]; key = (predict.step_key(s), s["num_workers"])
    m = float(row["step_time_s"])
    h = hidden[t]["predicted_step_time_s"]
    serial = bare[t]["predicted_step_time_s"] + bare[t]["messages"] * latency[key]
    print(f"{s['num_workers']} {predict.config_name(s)[:22]:22s} measured {m*1e3:6.1f}  hidden {h*1e3:6.1f} ({h/m-1:+.0%})  serial {serial*1e3:6.1f} ({serial/m-1:+.0%})  steal {row['cpu_steal_share']:.2f}")
