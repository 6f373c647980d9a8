"""The probe of a real cluster's links (orchestrator/cluster/probe.py): its bus bandwidths as nccl-tests defines
them, its measure on a group of two processes here, its file read back by predict --link, the verb's refusals."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from orchestrator import cli
from orchestrator.cluster import probe
from orchestrator.predict import link as links
from orchestrator.predict import measure, predictor
from tests.orchestrator.predict.test_predictor import ONE, PROFILE, write_folder


def test_bus_bandwidths_follow_nccl_tests():
    # all_reduce of 8 MB in 1 s over 4 ranks: 8 MB/s, x 2 * 3 / 4; all_gather of 2 MB a rank: 8 MB/s, x 3 / 4
    assert probe.bus_bandwidth("all_reduce", 8_000_000, 1.0, 4) == (8e6, 12e6)
    assert probe.bus_bandwidth("all_gather", 2_000_000, 1.0, 4) == (8e6, 6e6)


def _rank(rank, world, path, out):
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        found = probe.measure((4096, 65536), 2, probe.torch.device("cpu"))
    finally:
        dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(found))


@pytest.mark.slow  # two spawned processes: seconds of start-up
def test_a_group_of_two_processes_measures_both_collectives(tmp_path):
    out = tmp_path / "found.json"
    mp.start_processes(_rank, args=(2, tmp_path / "store", out), nprocs=2, start_method="spawn", join=True)
    found = json.loads(out.read_text())
    assert found["world_size"] == 2 and [r["bytes"] for r in found["all_reduce"]] == [4096, 65536]
    for op in ("all_reduce", "all_gather"):
        for r in found[op]:
            assert r["time_s"] > 0
            assert (r["algbw_Bps"], r["busbw_Bps"]) == probe.bus_bandwidth(op, r["bytes"], r["time_s"], 2)
    assert found["bandwidth_bps"] == 8 * found["all_reduce"][1]["busbw_Bps"]
    assert 0 < found["latency_s"] < math.inf


def test_predict_with_a_probes_file_is_predict_with_its_link(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = tmp_path / "results"
    folder.mkdir()
    write_folder(folder, [({}, ONE), ({"compressor": "qsgd", "algorithm": "sra"}, {**ONE, "encode_s": 0.002})])
    link = tmp_path / "link.json"
    link.write_text(json.dumps({"bandwidth_bps": 9.6e9, "latency_s": 3.4e-6, "backend": "gloo"}))
    assert links.read_link(link) == links.Link(9.6e9, 3.4e-6)
    assert cli.main(["predict", str(folder), "--num_workers", "4", "--link", str(link)]) == 0
    by_link = folder / "predictions" / "9600000kbit_4w_3400ns_overlap-true_x1.csv"
    assert capsys.readouterr().out.splitlines()[-1] == f"saved {by_link}"
    saved = by_link.read_text()
    # the file's numbers as flags (its name says them): the same predictions
    assert cli.main(["predict", str(folder), "--num_workers", "4", "--bandwidth", "9600000kbit", "--latency",
                     "3400ns"]) == 0
    assert by_link.read_text() == saved and len(list((folder / "predictions").iterdir())) == 1
    table = predictor.predict(folder, 9.6e9, 4, 3.4e-6, prof=PROFILE)[0]
    assert list(pd.read_csv(by_link)["predicted_step_time_s"]) == pytest.approx(
        list(table["predicted_step_time_s"]), rel=1e-12)


@pytest.mark.parametrize("args, message", [
    (["--link", "{link}", "--bandwidth", "1gbit"], "--bandwidth and --link both give the link: give one"),
    ([], "--bandwidth RATE or --link FILE is needed"),
    (["--link", "{bad}"], "is not a probe's file of lowprec cluster probe"),
    (["--link", "{negative}"], "its bandwidth_bps must be above 0"),
    (["--link", "{link}", "--latency", "5us"], "--latency and --link both give the link: give one"),
    (["--link", "{fast}"], "its bandwidth_bps 4e+11 is outside the rates the model takes, 8kbit to 100gbit"),
])
def test_predict_refuses_a_link_given_twice_none_or_unreadable(tmp_path, capsys, args, message):
    files = {"link": tmp_path / "l.json", "bad": tmp_path / "b.json", "negative": tmp_path / "n.json",
             "fast": tmp_path / "f.json"}
    files["fast"].write_text(json.dumps({"bandwidth_bps": 4e11, "latency_s": 0.0}))
    files["link"].write_text(json.dumps({"bandwidth_bps": 1e9, "latency_s": 0.0}))
    files["bad"].write_text("{")
    files["negative"].write_text(json.dumps({"bandwidth_bps": -1, "latency_s": 0.0}))
    args = [a.format(**files) for a in args]
    assert cli.main(["predict", str(tmp_path), "--num_workers", "4", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.parametrize("args, message", [
    (["--sizes_mib", "1,x"], "--sizes_mib must be sizes in (0, 4096] MiB"),
    (["--sizes_mib", "0"], "--sizes_mib must be sizes in (0, 4096] MiB"),
    (["--repeats", "0"], "--repeats must be in [1, 1000], got 0"),
    (["--nodes", "1"], "--nodes must be at least 2, got 1"),
])
def test_the_probe_verb_refuses_bad_input_before_joining_a_cluster(capsys, args, message):
    assert cli.main(["cluster", "probe", "--address", "nowhere:1", "--out", "p.json", *args]) == 2
    assert message in capsys.readouterr().err
