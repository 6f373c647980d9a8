"""The user's own model file and compressor module, from a folder outside the checkout, in a 2-worker trial on
a local Ray, started from a third working directory (about 40 s on 2 cores)."""
from __future__ import annotations

import hashlib
import json
import subprocess

import pandas as pd
import pytest

from tests.orchestrator.study.test_runner_on_ray import TIMEOUT_S, cli, ray_env
from tests.orchestrator.study.test_user_workloads import COMPRESSOR_FILE, MODEL_FILE

pytestmark = pytest.mark.slow

SWEEP = """\
name: mine
imports: [my_compressor.py]
workload: {model: my_models.py:tiny_mlp, model_options: {hidden: 8}, dataset: synthetic, input_shape: [1, 4, 4],
           num_samples: 64, test_samples: 32, batch_size: 16, epochs: 1, min_compress_numel: 0,
           target: {metric: test_loss, value: 5.0}}
cluster: {cpus_per_worker: 0.49}
baselines: false
sweep: {num_workers: 2, compressor: [truncate16]}
"""


def test_a_users_model_and_compressor_run_in_a_two_worker_ray_trial(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "my_models.py").write_text(MODEL_FILE)
    (user / "my_compressor.py").write_text(COMPRESSOR_FILE)
    (user / "study.yaml").write_text(SWEEP)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    results = tmp_path / "results"
    run = subprocess.run(cli("run", str(user / "study.yaml"), "--results", str(results)), cwd=elsewhere,
                         env=ray_env(tmp_path / "home"), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (record_path,) = (results / "trials").glob("*.json")
    record = json.loads(record_path.read_text())
    assert record["status"] == "ok", record.get("traceback") or record["reason"]
    assert len(record["worker_node_ips"]) == 2
    assert record["model_summary"]["parameters"] == 16 * 8 + 8 + 8 * 10 + 10
    assert record["settings"]["model"] == f"{user / 'my_models.py'}:tiny_mlp"
    digests = {source["reference"]: source["sha256"] for source in record["sources"]}
    assert digests == {f"{user / 'my_models.py'}:tiny_mlp": hashlib.sha256(MODEL_FILE.encode()).hexdigest(),
                       str(user / "my_compressor.py"): hashlib.sha256(COMPRESSOR_FILE.encode()).hexdigest()}
    (row,) = pd.read_csv(results / "trials.csv").to_dict("records")
    assert row["parameters"] == 226 and row["compressor"] == "truncate16"
    # Two ranks, each sending the upper halves of its gradient's bits: the compressed collectives ran.
    assert row["bytes_sent"] > 0 and row["time_to_target_s"] > 0
