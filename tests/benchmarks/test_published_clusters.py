"""benchmarks/published_clusters.py on a published point of a model small enough to profile here: each row's
prediction and its error against the published step, the medians, the JSON."""
from __future__ import annotations

import json

import pytest

from benchmarks import published_clusters
from orchestrator.predict import from_step, measure
from tests.orchestrator.predict.test_predictor import PROFILE

HEADER = ("id,source,where,figure,framework,backend,model,model_options,input_shape,num_classes,batch_size,gpu,gpus,"
          "gpus_per_node,inter_gbit,latency,intra_gbit,one_gpu_step_s,published_step_s\n")


def test_published_points_are_predicted_with_their_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(from_step, "profile_here", lambda model: PROFILE)  # the mlp's, fixed: exact predictions
    csv = tmp_path / "clusters.csv"
    csv.write_text(HEADER + 'a,src,here,exact,f,NCCL,mlp,"{width: 64, depth: 1}",32,4,8,gpu,4,2,0.001,5us,100,0.01,0.1\n'
                            'b,src,here,exact,f,NCCL,mlp,"{width: 64, depth: 1}",32,4,8,gpu,2,2,1,5us,100,0.01,0.01\n')
    out = tmp_path / "p.json"
    assert published_clusters.main(["--clusters", str(csv), "--profile_batch", "2", "--slowdowns", "0,0.5",
                                    "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    a, b = saved["rows"]
    for row in (a, b):
        for s in ("0", "0.5"):
            assert row[f"error_slow{s}"] == pytest.approx((row[f"predicted_s_slow{s}"] - row["published_step_s"])
                                                          / row["published_step_s"], rel=1e-12)
    # 2 hosts of 2 over 1 Mbit/s cost more than one host's 100 Gbit/s; a slowdown never shortens a step
    assert a["predicted_s_slow0"] > b["predicted_s_slow0"] >= 0.01 * (1 - 1e-12)
    assert a["predicted_s_slow0.5"] >= a["predicted_s_slow0"]
    assert saved["summary"]["median_abs_error_slow0"] == pytest.approx(
        (abs(a["error_slow0"]) + abs(b["error_slow0"])) / 2)
