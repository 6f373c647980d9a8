"""The predictor (orchestrator/predict/) and `lowprec predict`/`advise` on a results folder written
here (records and trials.csv as `lowprec run` writes them): DDP's buckets, the one-worker trials as
inputs, emulated clusters' links and shared cores, device scales, latencies and the busy machine's floor;
steps to the target and accuracy (or test loss) from the trials, the cache of what is measured here, advise's
exclusions, the predictions' file names.
Clusters of multi-worker hosts: the hierarchical algorithm's traffic and plan, its rows, the CLI's refusals.
What shared hosts cost (orchestrator/predict/sharing.py) is tested here too, as the predictor takes it.
The model's formulas: test_perfmodel.py."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import compressors
from orchestrator import cli
from orchestrator.predict import advice, emulated, files, measure, options, perfmodel, predictor, sharing
from orchestrator.predict.buckets import buckets_of
from orchestrator.predict.emulated import TrialInputs, trial_predictions
from orchestrator.predict.outcomes import ACCURACY, judged_by
from orchestrator.predict.plan import DeviceScale, Plan, plan, predict_step
from orchestrator.predict import profile as profile_module
from orchestrator.predict.profile import Profile
from orchestrator.predict.traffic import bucket_traffic, comm_s
from orchestrator.predict.trials import (Configuration, config_name, configurations, hierarchical, input_for,
                                         read_trials, step_key)
from orchestrator.study.records import read_records


def test_ddp_buckets_reverse_order_with_a_small_first_bucket():
    # by default the first bucket closes once it holds >= 1 MiB (262144 floats): after 100k + 200k elements
    shapes = [(10,), (300_000,), (200_000,), (100_000,)]
    assert buckets_of(shapes, None) == [[3, 2], [1, 0]]
    # a cap given is the first bucket's too, as DDP has it
    assert buckets_of(shapes, 25) == [[3, 2, 1, 0]]
    assert buckets_of(shapes, 1) == [[3, 2], [1], [0]]


def test_latency_text():
    assert options.latency_s("5us") == pytest.approx(5e-6)
    assert options.latency_s("0.2ms") == pytest.approx(2e-4)
    with pytest.raises(ValueError, match="unit s, ms, us or ns"):
        options.latency_s("5 parsecs")


SETTINGS = {"compressor": "fp32", "compressor_params": {}, "algorithm": "allreduce", "num_workers": 1, "seed": 0,
            "bandwidth": None, "use_gpu": False, "dataset": "synthetic", "data_dir": None, "model": "mlp",
            "batch_size": 8, "min_compress_numel": 1024, "overlap": True, "bucket_cap_mb": None,
            "width": 64, "depth": 1, "input_shape": [32], "num_classes": 4, "num_samples": 64, "test_samples": 16}
# the mlp's parameters: (64, 32), (64,), (4, 64), (4,)
PROFILE = Profile(fwd_s=0.001, bwd_s=0.002, opt_s=0.001,
                  params=(((64, 32), 0.002), ((64,), 0.002), ((4, 64), 0.001), ((4,), 0.001)))


def write_folder(tmp_path, trials, links=None, statuses=None):
    (tmp_path / "trials").mkdir()
    rows = []
    for i, (settings, metrics) in enumerate(trials):
        tid = f"t{i}"
        (tmp_path / "trials" / f"{tid}.json").write_text(json.dumps(
            {"trial_id": tid, "name": tid, "settings": {**SETTINGS, **settings},
             "status": (statuses or {}).get(i, "ok"), "reason": None, "history": [], "finished_at": f"{i:06d}",
             "link": (links or {}).get(i)}))
        rows.append({"trial_id": tid, **metrics})
    pd.DataFrame(rows).to_csv(tmp_path / "trials.csv", index=False)
    return tmp_path


ONE = {"compute_s": 0.008, "encode_s": 0.0, "decode_s": 0.0, "exposed_comm_s": 0.0, "time_to_target_s": math.nan,
       "step_time_s": 0.01, "steps_to_target": math.nan, "accuracy_delta": 0.0}


def test_predict_fp32_and_qsgd_from_their_one_worker_trials(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = write_folder(tmp_path, [
        ({}, ONE),
        ({"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"},
         {**ONE, "encode_s": 0.002, "decode_s": 0.001}),
        ({"num_workers": 2}, {**ONE, "steps_to_target": 100.0}),
        ({"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra", "num_workers": 2},
         {**ONE, "steps_to_target": 125.0}),
        ({"compressor": "powersgd", "algorithm": "powersgd"}, ONE),
    ])
    table, notes = predictor.predict(folder, 8e6, 2, 0.0, prof=PROFILE)  # 1 MB/s
    assert notes == ["not predicted: powersgd algorithm=powersgd: it runs only as PyTorch's DDP hook, whose "
                     "traffic the model does not know",
                     f"measured this machine's reduction throughput and cached it in {folder / 'predict_cache'}: "
                     "later calls reuse it (delete the folder to measure again)"]
    fp32 = table[table["compressor"] == "fp32"].iloc[0]
    # one bucket of every parameter (2372 floats = 9488 B), ready when the first layer's gradient is
    # (0.002 s, times 0.008 / 0.004), ring over 2 workers: 9488 B / 1 MB/s plus the reduction
    comm = fp32["comm_s"]
    assert comm == pytest.approx(9488 / 1e6 + 4744 / 1e9, rel=1e-12)
    assert fp32["predicted_step_time_s"] == pytest.approx(0.002 + max(0.004, 0.004 + comm) + 0.002, rel=1e-9)
    assert fp32["speedup_vs_fp32"] == 1.0
    qsgd = table[table["compressor"] == "qsgd"].iloc[0]
    assert qsgd["steps_ratio_vs_fp32"] == pytest.approx(100 / 125)
    assert qsgd["tta_speedup_vs_fp32"] == pytest.approx(qsgd["speedup_vs_fp32"] * 0.8)
    assert qsgd["encode_s"] == pytest.approx(0.002 * 0.75)  # sra: n + n/p of 2n
    assert qsgd["comm_s"] < comm  # fewer bytes on the same link


def test_predict_cli_refuses_bad_input(tmp_path, capsys):
    folder = write_folder(tmp_path, [({}, ONE)])
    assert cli.main(["predict", str(folder), "--bandwidth", "10gibbit", "--num_workers", "4"]) == 2
    assert "bandwidth" in capsys.readouterr().err
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "0"]) == 2
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4", "--latency", "x"]) == 2
    for scale in ("0", "nan", "-1"):
        assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4",
                         "--compute_scale", scale]) == 2
        assert "--compute_scale must be a number in (0, inf)" in capsys.readouterr().err
    assert cli.main(["predict", str(tmp_path / "none"), "--bandwidth", "1gbit", "--num_workers", "4"]) == 2


@pytest.mark.slow  # measures this machine: its reduction bandwidth and the codecs' times
def test_predict_and_advise_cli_measure_and_write_predictions(tmp_path, capsys):
    folder = write_folder(tmp_path, [({}, ONE)])
    assert cli.main(["advise", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 0
    assert "none pays: the folder has no configuration but fp32" in capsys.readouterr().out
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 0
    saved = pd.read_csv(folder / "predictions" / "1gbit_4w_5us_overlap-true_x1.csv")
    assert list(saved.columns) == predictor.COLUMNS and len(saved) == 1


def test_predict_without_overlap_and_on_slower_devices(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = write_folder(tmp_path, [({}, ONE)])
    comm = 9488 / 1e6 + 4744 / 1e9
    table, _ = predictor.predict(folder, 8e6, 2, 0.0, overlap=False, compute_scale=2.0, prof=PROFILE)
    fp32 = table.iloc[0]
    # serial: fwd + bwd + comm + opt, the compute (0.008 s measured) twice as long
    assert fp32["predicted_step_time_s"] == pytest.approx(0.016 + comm, rel=1e-9)
    assert (bool(fp32["overlap"]), fp32["compute_scale"], fp32["compute_s"]) == (False, 2.0, pytest.approx(0.016))


def test_a_folder_of_several_workloads_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = write_folder(tmp_path, [({}, ONE), ({"batch_size": 16}, ONE)])
    with pytest.raises(ValueError, match="2 different workloads"):
        predictor.predict(folder, 8e6, 2, 0.0, prof=PROFILE)


def test_emulated_hosts_share_the_cores():
    # 4 hosts on 2 cores: a thread each; 4 busy threads on 2 cores take twice as long, 2 do not
    assert [emulated.emulated_compute_scale(p, 4, 2) for p in (1, 2, 4)] == [1.0, 1.0, 2.0]
    # 4 hosts on 16 cores: 4 threads each
    assert [emulated.emulated_compute_scale(p, 4, 16) for p in (2, 4)] == [1.0, 1.0]
    assert emulated.emulated_compute_scale(3, 3, 2) == 1.5


def test_trials_on_an_emulated_cluster_are_predicted_from_their_one_worker_trials(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    link = {"hosts": 4, "bandwidth": "8mbit", "calibrated_bps": 8e6, "calibrated_latency_s": 1e-3}
    trials = read_trials(write_folder(tmp_path, [
        ({}, ONE),
        ({"num_workers": 4, "overlap": False}, ONE),  # on the link
        ({"num_workers": 2}, ONE),  # on no emulated link: not predicted
        ({"num_workers": 2, "batch_size": 16}, ONE),  # no one-worker trial of this workload
    ], links={1: link, 3: link}))
    predicted = trial_predictions(trials, TrialInputs(trials, cpu_count=2))
    assert list(predicted) == ["t1"]
    # serial; compute 0.008 s x 2 (4 busy hosts, one thread each, on 2 cores); ring over 4 workers:
    # 6 messages of 1 ms, 1.5 x 9488 B at 1 MB/s, 0.75 x 9488 B reduced at 1 GB/s
    comm = 6e-3 + 1.5 * 9488 / 1e6 + 0.75 * 9488 / 1e9
    assert predicted["t1"]["predicted_step_time_s"] == pytest.approx(0.016 + comm, rel=1e-9)
    assert predicted["t1"]["comm_s"] == pytest.approx(comm, rel=1e-12)
    # the inputs may come from another folder: this one's one-worker trials are then ignored
    (tmp_path / "inputs").mkdir()
    others = read_trials(write_folder(tmp_path / "inputs", [({}, {**ONE, "compute_s": 0.004})]))
    again = trial_predictions(trials, TrialInputs(others, cpu_count=2))["t1"]
    assert again["predicted_step_time_s"] == pytest.approx(0.008 + comm, rel=1e-9)


def test_measured_device_scales_replace_the_guess_phase_by_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    link = {"hosts": 4, "bandwidth": "8mbit", "calibrated_bps": 8e6, "calibrated_latency_s": 0.0}
    qsgd = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
    trials = read_trials(write_folder(tmp_path, [
        ({}, ONE),
        ({**qsgd}, {**ONE, "encode_s": 0.002, "decode_s": 0.001}),
        ({**qsgd, "num_workers": 2, "overlap": False}, ONE),
        ({**qsgd, "num_workers": 4, "overlap": False}, ONE),  # no scale measured for 4 workers: left out
    ], links={2: link, 3: link}))
    key = step_key(trials[1][0]["settings"])
    scales = {(key, 2): DeviceScale(compute=1.5, encode=2.0, decode=3.0)}
    predicted = trial_predictions(trials, TrialInputs(trials, scales=scales))
    assert list(predicted) == ["t2"]
    step = predicted["t2"]
    # fp32's one-worker compute x 1.5; the encodes x 2 (then sra's n + n/p of 2n), the decodes x 3
    assert step["compute_s"] == pytest.approx(0.008 * 1.5, rel=1e-12)
    assert step["encode_s"] == pytest.approx(0.002 * 2.0 * 0.75, rel=1e-12)
    assert step["decode_s"] == pytest.approx(0.001 * 3.0, rel=1e-12)
    assert step["predicted_step_time_s"] == pytest.approx(0.012 + 0.003 + 0.003 + step["comm_s"], rel=1e-9)
    guessed = trial_predictions(trials, TrialInputs(trials, cpu_count=2))["t2"]  # 2 hosts of one thread on 2 cores: 1x
    assert (guessed["compute_s"], guessed["decode_s"]) == (pytest.approx(0.008), pytest.approx(0.001))


def test_an_allreduce_hooks_device_work_is_its_one_worker_exposed_time(tmp_path, monkeypatch):
    # fp16's cast runs inside the collective: its one-worker trial shows it as exposed time only
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = write_folder(tmp_path, [({}, ONE), ({"compressor": "fp16"}, {**ONE, "exposed_comm_s": 0.002})])
    table, _ = predictor.predict(folder, 8e6, 2, 0.0, overlap=False, prof=PROFILE)
    fp16 = table[table["compressor"] == "fp16"].iloc[0]
    assert (fp16["encode_s"], fp16["decode_s"]) == (0.001, 0.001)
    assert fp16["predicted_step_time_s"] == pytest.approx(0.008 + 0.002 + 4744 / 1e6 + 2372 / 1e9, rel=1e-9)


def test_contention_factors_become_device_scales():
    alone = {"step_time_s": 0.04, "compute_s": 0.02, "encode_s": 0.01, "decode_s": 0.005, "exposed_comm_s": 0.0}
    busy = {"step_time_s": 0.1, "compute_s": 0.03, "encode_s": 0.02, "decode_s": 0.02, "exposed_comm_s": 0.0}
    factors = sharing.factors({1: alone, 2: busy})
    assert factors[2]["compute_s"] == pytest.approx(1.5) and factors[2]["decode_s"] == pytest.approx(4.0)
    assert math.isnan(factors[2]["exposed_comm_s"])  # nothing alone: no factor
    fp16 = {**factors[2], "exposed_comm_s": 3.0}
    qsgd, half, plain = (Configuration(name, {**SETTINGS, **settings}, 0.0, 0.0, 0.0, 0.0) for name, settings in [
        ("qsgd", {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}),
        ("fp16", {"compressor": "fp16"}), ("fp32", {})])
    scales = sharing.measured_scales({"configurations": [
        {"configuration": "qsgd", "key": list(qsgd.key), "factors": {"2": factors[2]}},
        {"configuration": "fp16", "key": list(half.key), "factors": {"2": fp16}},
        {"configuration": "other", "key": ["w", "other"], "factors": {"2": fp16}}]}, [qsgd, half])
    assert set(scales) == {(qsgd.key, 2), (half.key, 2)}  # only the configurations asked for
    assert scales[qsgd.key, 2] == DeviceScale(compute=1.5, encode=2.0, decode=4.0)
    # an allreduce hook's encode and decode are its one-worker exposed time: they take its factor
    assert scales[half.key, 2] == DeviceScale(compute=1.5, encode=3.0, decode=3.0)
    # plain DDP has no exposed time alone (NaN factor): its encode and decode, zero anyway, stay 1x
    fp32 = sharing.measured_scales({"configurations": [
        {"configuration": "fp32", "key": list(plain.key), "factors": {"2": factors[2]}}]}, [plain])
    assert fp32[plain.key, 2] == DeviceScale(compute=1.5, encode=1.0, decode=1.0)
    # one world of k ranks: an allreduce hook's exposed time holds its collective, so its codec takes the
    # compute factor; an sra's encode factor is over the (1 + 1/k) / 2 of its work plan() already takes
    world = sharing.measured_scales({"world": True, "configurations": [
        {"configuration": "qsgd", "key": list(qsgd.key), "factors": {"2": factors[2], "4": factors[2]}},
        {"configuration": "fp16", "key": list(half.key), "factors": {"2": fp16}}]}, [qsgd, half])
    assert world[qsgd.key, 2] == DeviceScale(compute=1.5, encode=pytest.approx(2.0 / 0.75), decode=4.0)
    assert world[qsgd.key, 4].encode == pytest.approx(2.0 / 0.625)
    assert world[half.key, 2] == DeviceScale(compute=1.5, encode=1.5, decode=1.5)


def test_repeated_one_worker_trials_give_each_phase_its_median(tmp_path):
    qsgd = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
    folder = write_folder(tmp_path, [
        (qsgd, {**ONE, "compute_s": 0.008, "encode_s": 0.004, "decode_s": 0.001}),
        ({**qsgd, "seed": 1}, {**ONE, "compute_s": 0.010, "encode_s": 0.002, "decode_s": 0.003}),
        ({**qsgd, "seed": 2}, {**ONE, "compute_s": 0.020, "encode_s": 0.003, "decode_s": 0.002}),
        ({**qsgd, "num_workers": 2}, {**ONE, "compute_s": 0.5}),  # not an input
    ])
    (config,), notes = configurations(read_trials(folder))
    assert notes == []
    assert (config.compute_s, config.encode_s, config.decode_s) == (0.010, 0.003, 0.002)


def test_a_step_counts_the_messages_that_pay_a_latency():
    # sra over two buckets: the small tensors' all_reduce (2(p - 1) messages in turn), an all_to_all and an
    # all_gather (p - 1 each) in the first; the second has no small tensors, so no all_reduce runs for it
    buckets = [(0.001, 0.0, 0.0, [("ring", 40), ("all_to_all", 1000), ("all_gather", 1000)]),
               (0.002, 0.0, 0.0, [("ring", 0), ("all_to_all", 2000), ("all_gather", 2000)])]
    step = Plan(0.001, 0.002, 0.001, buckets, 0.0, 0.0, overlap=False)
    idle = predict_step(step, perfmodel.Cluster.flat(4, perfmodel.Link(1e6)), 1e9)
    busy = predict_step(step, perfmodel.Cluster.flat(4, perfmodel.Link(1e6, latency=1e-3)), 1e9)
    assert idle["messages"] == busy["messages"] == 6 + 3 + 3 + 3 + 3
    assert busy["comm_s"] == pytest.approx(idle["comm_s"] + 18e-3, rel=1e-12)
    assert busy["predicted_step_time_s"] == pytest.approx(idle["predicted_step_time_s"] + 18e-3, rel=1e-12)
    assert predict_step(step, perfmodel.Cluster.flat(1, perfmodel.Link(1e6, latency=1e-3)),
                                  1e9)["messages"] == 0


def test_sharing_measured_in_trials_gives_device_scales_and_a_latency_under_load(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    qsgd = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
    (tmp_path / "inputs").mkdir()
    inputs = read_trials(write_folder(tmp_path / "inputs", [
        ({}, ONE), (qsgd, {**ONE, "encode_s": 0.002, "decode_s": 0.001})]))
    link = {"hosts": 4, "bandwidth": "2gbit", "calibrated_bps": 8e6, "calibrated_latency_s": 1e-4}
    shared = {"compute_s": 0.012, "encode_s": 0.003, "decode_s": 0.003, "exposed_comm_s": 0.05,
              "time_to_target_s": math.nan}

    def sharing_run(folder, qsgd_comm, plain_step, compute=0.012, idle=0.25):
        folder.mkdir()
        return read_trials(write_folder(folder, [
            # plain DDP: its communication is not timed, its step is
            ({"num_workers": 2, "overlap": False}, {**shared, "comm_s": math.nan, "step_time_s": plain_step}),
            ({**qsgd, "num_workers": 2, "overlap": False},
             {**shared, "compute_s": compute, "comm_s": qsgd_comm, "step_time_s": 0.1, "cpu_idle_share": idle}),
            ({**qsgd, "num_workers": 2, "overlap": True},  # overlapped: phases mixed, only its busy time used
             {**shared, "compute_s": 0.04, "comm_s": 9.0, "step_time_s": 9.0, "cpu_idle_share": 0.5})],
            links={0: link, 1: link, 2: link}))

    # the link model's time for the trials' bytes at a latency, and the messages the qsgd trial sends in turn
    probe = sharing_run(tmp_path / "probe", 0.0, 0.0)
    keys = [step_key(r["settings"]) for r, _ in probe]
    scale = {(keys[0], 2): DeviceScale.uniform(1.5),
             (keys[1], 2): DeviceScale(compute=1.5, encode=2.0, decode=3.0)}

    def model(alpha):
        return trial_predictions(probe, TrialInputs(inputs, scales=scale, latency={(key, 2): alpha for key in keys}))

    assert model(0.0)["t1"]["messages"] == 4  # 2 workers: the small tensors' all_reduce 2, all_to_all 1, all_gather 1
    trials = sharing_run(tmp_path / "measured", model(0.0)["t1"]["comm_s"] + 4 * 2e-3,
                     model(1e-3)["t0"]["predicted_step_time_s"])
    measured = sharing.sharing_inputs(trials, inputs)
    scales, latency, busy = measured.scales, measured.latency, measured.busy
    # compute 0.012 / 0.008; encode 0.003 / 0.002 over sra's (1 + 1/2) / 2 of the one-worker work; decode 3x;
    # plain DDP's device work is its compute: its (zero) codec takes the same factor
    assert scales == {(keys[1], 2): DeviceScale(1.5, pytest.approx(2.0), pytest.approx(3.0)),
                      (keys[0], 2): DeviceScale.uniform(1.5)}
    # the hook: its communication beyond the bytes' time over its messages, not the calibration's 0.1 ms;
    # plain DDP: the latency at which the model gives its measured step
    assert latency == {(keys[1], 2): pytest.approx(2e-3, rel=1e-9), (keys[0], 2): pytest.approx(1e-3, rel=1e-6)}
    # the machine was busy 3/4 of the qsgd trial's 0.1 s step; plain DDP's trial did not record its idle share
    # and the overlapped trial's machine half its 9 s step
    assert busy == {(keys[1], 2, False): pytest.approx(0.075, rel=1e-12), (keys[1], 2, True): 4.5}
    again = trial_predictions(trials, TrialInputs(inputs, scales=scales, latency=latency))
    assert again["t1"]["comm_s"] == pytest.approx(model(0.0)["t1"]["comm_s"] + 4 * 2e-3, rel=1e-9)
    assert again["t0"]["predicted_step_time_s"] == pytest.approx(model(1e-3)["t0"]["predicted_step_time_s"], rel=1e-6)
    # quicker than the link model at no latency: no negative latency
    none = sharing.sharing_inputs(sharing_run(tmp_path / "quick", model(0.0)["t1"]["comm_s"] / 2, 1e-3), inputs).latency
    assert none == {(keys[1], 2): 0.0, (keys[0], 2): 0.0}
    # repeated sharing trials: each figure is their median
    # (the runs' trials have the same ids, as repeated runs of one sweep have, and links of their own)
    runs = []
    for i, (compute, idle, bps) in enumerate([(0.012, 0.5, 8e6), (0.03, 0.1, 4e6), (0.016, 0.25, 2e6)]):
        linked = {**link, "calibrated_bps": bps}
        (tmp_path / f"probe{i}").mkdir()
        probe = read_trials(write_folder(tmp_path / f"probe{i}", [
            ({"num_workers": 2, "overlap": False}, {**shared, "comm_s": math.nan, "step_time_s": 1.0}),
            ({**qsgd, "num_workers": 2, "overlap": False}, {**shared, "comm_s": 1.0, "step_time_s": 1.0})],
            links={0: linked, 1: linked}))
        bare = trial_predictions(probe, TrialInputs(inputs, scales=scale, latency={(key, 2): 0.0 for key in keys}))
        busy_link = TrialInputs(inputs, scales=scale, latency={(key, 2): 1e-3 for key in keys})
        plain_step = trial_predictions(probe, busy_link)["t0"]["predicted_step_time_s"]
        # each run's hook measured its own link's time for the bytes plus 4 messages of 2 ms
        (tmp_path / f"run{i}").mkdir()
        runs += read_trials(write_folder(tmp_path / f"run{i}", [
            ({"num_workers": 2, "overlap": False}, {**shared, "comm_s": math.nan, "step_time_s": plain_step}),
            ({**qsgd, "num_workers": 2, "overlap": False},
             {**shared, "compute_s": compute, "comm_s": bare["t1"]["comm_s"] + 4 * 2e-3, "step_time_s": 0.1,
              "cpu_idle_share": idle})], links={0: linked, 1: linked}))
    measured = sharing.sharing_inputs(runs, inputs)
    scales, latency, busy = measured.scales, measured.latency, measured.busy
    assert scales[keys[1], 2].compute == pytest.approx(0.016 / 0.008, rel=1e-12)  # the median, not the mean
    assert busy == {(keys[1], 2, False): pytest.approx(0.075, rel=1e-12)}
    assert latency == {(keys[1], 2): pytest.approx(2e-3, rel=1e-9), (keys[0], 2): pytest.approx(1e-3, rel=1e-6)}


def test_no_timeline_beats_the_busy_machine(tmp_path, monkeypatch):
    # hosts sharing a machine's cores: a step takes at least the machine's busy time (with its overlap)
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    link = {"hosts": 4, "bandwidth": "8mbit", "calibrated_bps": 8e6, "calibrated_latency_s": 0.0}
    trials = read_trials(write_folder(tmp_path, [
        ({}, ONE), ({"num_workers": 2, "overlap": True}, ONE), ({"num_workers": 2, "overlap": False}, ONE)],
        links={1: link, 2: link}))
    key = step_key(trials[0][0]["settings"])
    scales = {(key, 2): DeviceScale.uniform(1.0)}
    free = trial_predictions(trials, TrialInputs(trials, scales=scales))
    slowest = max(free["t1"]["predicted_step_time_s"], free["t2"]["predicted_step_time_s"])
    floored = trial_predictions(trials, TrialInputs(trials, scales=scales, busy={(key, 2, True): 1.5 * slowest}))
    assert floored["t1"] == {**free["t1"], "predicted_step_time_s": 1.5 * slowest}  # only the step time changes
    assert floored["t2"] == free["t2"]  # its floor is that of the trials without overlap: none given
    assert trial_predictions(trials, TrialInputs(trials, scales=scales, busy={(key, 2, False): 2 * slowest}))["t2"] == \
        {**free["t2"], "predicted_step_time_s": 2 * slowest}
    # below the timeline, or for other workers, it changes nothing
    below = {(key, 2, True): slowest / 2, (key, 4, True): 1.0, (key, 2, False): slowest / 2}
    assert trial_predictions(trials, TrialInputs(trials, scales=scales, busy=below)) == free


QSGD = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
ADAPTIVE = {"compressor": "adaptive", "compressor_params": {"pi": 0.05}, "algorithm": "sra"}
ONEBIT = {"compressor": "onebit", "compressor_params": {}, "algorithm": "sra"}


def study(tmp_path, outcomes, columns=None, statuses=None):
    """A folder of one-worker trials (the step times) and two-worker trials: ``outcomes`` pairs each
    configuration's settings with the trials.csv rows of its two-worker trials (a seed each)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    trials = []
    for settings, rows in outcomes:
        trials.append((settings, ONE))
        trials += [({**settings, "num_workers": 2, "seed": seed}, {**ONE, **row}) for seed, row in enumerate(rows)]
    folder = write_folder(tmp_path, trials, statuses=statuses)
    if columns is not None:  # a trials.csv from before a column existed
        table = pd.read_csv(folder / "trials.csv")
        table.drop(columns=[c for c in table.columns if c not in columns]).to_csv(folder / "trials.csv", index=False)
    return folder


def test_two_identical_calls_give_identical_predictions_the_second_from_the_cache(tmp_path, monkeypatch, capsys):
    # the first call measures the model's profile and this machine's reduction (here stand-ins: the real
    # measurements are test_predict_and_advise_cli_measure_and_write_predictions'); the second may not
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    argv = ["advise", str(folder), "--bandwidth", "100mbit", "--num_workers", "8"]
    assert cli.main(argv) == 0
    first = capsys.readouterr().out.splitlines()
    saved = folder / "predictions" / "100mbit_8w_5us_overlap-true_x1.csv"
    first_csv = saved.read_bytes()
    made = [line for line in first if line.startswith("measured the model's step profile and this machine's "
                                                      "reduction throughput and cached them in ")]
    assert made == [f"measured the model's step profile and this machine's reduction throughput and cached them "
                    f"in {folder / 'predict_cache'}: later calls reuse them (delete the folder to measure again)"]
    table, _ = predictor.predict(folder, 1e8, 8, 5e-6)

    def measure_again(*args, **kwargs):
        raise AssertionError("measured again: the cache was not used")

    monkeypatch.setattr(measure, "profile", measure_again)
    monkeypatch.setattr(measure, "reduction_rate", measure_again)
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines() == [line for line in first if line not in made]
    assert saved.read_bytes() == first_csv
    again, notes = predictor.predict(folder, 1e8, 8, 5e-6)
    assert not any("cache" in note for note in notes)
    pd.testing.assert_frame_equal(again, table, check_exact=True)
    qsgd = again[again["compressor"] == "qsgd"].iloc[0]
    assert qsgd["break_even_bps"] == table[table["compressor"] == "qsgd"].iloc[0]["break_even_bps"]
    # a damaged cache file is measured again and replaced
    (folder / "predict_cache" / "reduce.json").write_text("{")
    monkeypatch.setattr(measure, "reduction_rate", lambda: 2e9)
    _, notes = predictor.predict(folder, 1e8, 8, 5e-6)
    assert notes == [f"measured this machine's reduction throughput and cached it in {folder / 'predict_cache'}: "
                     "later calls reuse it (delete the folder to measure again)"]
    assert json.loads((folder / "predict_cache" / "reduce.json").read_text()) == {"reduce_bps": 2e9}


def test_a_folder_that_cannot_hold_the_cache_is_measured_and_said_so(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}])])
    (folder / "predict_cache").write_text("")  # a file where the folder would be: no folder can be made
    table, notes = predictor.predict(folder, 1e8, 2, 0.0)
    assert len(notes) == 1 and notes[0].startswith(
        f"could not cache the model's step profile and this machine's reduction throughput in "
        f"{folder / 'predict_cache'} (")
    assert notes[0].endswith("): each call measures them again, and their noise moves the predictions")
    assert table.iloc[0]["speedup_vs_fp32"] == 1.0


def test_the_steps_ratio_comes_from_the_trials_steps_to_target(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    # every configuration crossed the target at step 50 (qsgd: the mean of its seeds), however long its
    # steps took: the time to accuracy over the step time (75 and 61 steps) is not the count
    folder = study(tmp_path, [
        ({}, [{"steps_to_target": 50.0, "time_to_target_s": 0.5, "step_time_s": 0.01}]),
        ({"compressor": "fp16"}, [{"steps_to_target": 50.0, "time_to_target_s": 0.76, "step_time_s": 0.01}]),
        (QSGD, [{"steps_to_target": 40.0, "time_to_target_s": 0.61, "step_time_s": 0.01},
                {"steps_to_target": 60.0, "time_to_target_s": 0.61, "step_time_s": 0.01}]),
    ])
    table, notes = predictor.predict(folder, 8e6, 2, 0.0)
    assert list(table["steps_ratio_vs_fp32"]) == [1.0, 1.0, 1.0]
    assert list(table["tta_speedup_vs_fp32"]) == list(table["speedup_vs_fp32"])
    assert list(table["reached_target"]) == [True, True, True]
    assert not any("steps to target" in note for note in notes)
    # fewer steps than fp32: a ratio above 1
    folder = study(tmp_path / "fewer", [({}, [{"steps_to_target": 60.0}]), (QSGD, [{"steps_to_target": 40.0}])])
    qsgd = predictor.predict(folder, 8e6, 2, 0.0)[0].iloc[1]
    assert qsgd["steps_ratio_vs_fp32"] == 1.5
    assert qsgd["tta_speedup_vs_fp32"] == pytest.approx(1.5 * qsgd["speedup_vs_fp32"], rel=1e-15)


def test_unknown_steps_to_target_count_as_one_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    per_step = "tta_speedup_vs_fp32 is the per-step speedup"
    # a folder from before steps_to_target: reaching the target is a finite time to accuracy
    reached, missed = {"time_to_target_s": 0.5}, {"time_to_target_s": math.nan}
    old = study(tmp_path / "old", [({}, [reached]), (QSGD, [reached]), (ONEBIT, [missed])],
                columns=[c for c in [*ONE, "trial_id"] if c != "steps_to_target"])
    table, notes = predictor.predict(old, 8e6, 2, 0.0)
    assert table["steps_ratio_vs_fp32"].isna().all()
    assert list(table["tta_speedup_vs_fp32"]) == list(table["speedup_vs_fp32"])
    assert list(table["reached_target"]) == [True, True, False]
    assert f"steps to target unknown: trials.csv has no steps_to_target column (written before it existed): " \
           f"{per_step}" in notes
    qsgd = table.iloc[1]
    assert advice.advice(table, 0.5).splitlines()[0].startswith(
        f"{qsgd['configuration']}: {qsgd['speedup_vs_fp32']:.2f}x fp32 per step; steps to target unknown; ")
    # fp32 did not reach the target: no configuration's ratio is known
    folder = study(tmp_path / "fp32", [({}, [{}]), (QSGD, [{"steps_to_target": 50.0}])])
    table, notes = predictor.predict(folder, 8e6, 2, 0.0)
    assert table["steps_ratio_vs_fp32"].isna().all() and list(table["reached_target"]) == [False, True]
    assert f"steps to target unknown: fp32 did not reach the target with 2 workers: {per_step}" in notes
    # one configuration missed it with a seed, another collapsed (unstable) with the most workers although its
    # one-worker trial finished ok and its row says it crossed: neither reached it
    folder = study(tmp_path / "some", [({}, [{"steps_to_target": 50.0}]),
                                       (QSGD, [{"steps_to_target": 50.0}, {}]),
                                       (ONEBIT, [{"steps_to_target": 50.0}])], statuses={6: "unstable"})
    table, notes = predictor.predict(folder, 8e6, 2, 0.0)
    assert list(table["reached_target"]) == [True, False, False]
    assert list(table["steps_ratio_vs_fp32"].isna()) == [False, True, True]
    assert list(table["tta_speedup_vs_fp32"]) == list(table["speedup_vs_fp32"])
    qsgd, onebit = table["configuration"].iloc[1:]
    assert notes[:2] == [f"{onebit}: its trials with 2 workers did not all finish ok (unstable): taken as not "
                         "reaching the target",
                         f"steps to target unknown for {qsgd}, {onebit} (did not reach the target): their {per_step}"]


def test_advise_leaves_out_what_lost_accuracy_or_missed_the_target(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [
        ({}, [{"steps_to_target": 50.0, "accuracy_delta": 0.0}]),
        (QSGD, [{"steps_to_target": 50.0, "accuracy_delta": -0.001}]),
        (ADAPTIVE, [{"steps_to_target": 50.0, "accuracy_delta": -0.027}]),
        (ONEBIT, [{"accuracy_delta": -0.3}]),
    ])
    table, _ = predictor.predict(folder, 1e6, 2, 0.0)
    _, qsgd, adaptive, onebit = table["configuration"]
    assert list(table["accuracy_delta_points"]) == [0.0, -0.1, -2.7, -30.0]
    # the fewer bytes the faster: onebit (which missed the target), then adaptive (which lost 2.7 points), then qsgd
    assert list(table["tta_speedup_vs_fp32"].sort_values().index) == [0, 1, 2, 3]
    argv = ["advise", str(folder), "--bandwidth", "1mbit", "--num_workers", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-4].startswith(f"{qsgd}: ") and "accuracy -0.10 points vs fp32, target reached" in out[-4]
    assert out[-3:-1] == [f"excluded {adaptive}: lost 2.7 points (max 0.5)",
                          f"excluded {onebit}: did not reach the target"]
    assert out[-1] == f"saved {folder / 'predictions' / '1mbit_2w_5us_overlap-true_x1.csv'}"
    # the table printed shows the accuracy change and whether the target was reached
    assert out[1].split()[-3:] == ["accuracy_delta_points", "reached_target", "break_even_bps"]
    assert cli.main([*argv, "--max_accuracy_loss", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith(f"{adaptive}: ") and "accuracy -2.70 points vs fp32" in out[-3]
    assert out[-2] == f"excluded {onebit}: did not reach the target"
    # the limit is inclusive
    assert advice.advice(table, 2.7).splitlines()[0].startswith(f"{adaptive}: ")
    assert advice.advice(table, 0.0).splitlines()[1] == f"excluded {qsgd}: lost 0.1 points (max 0)"
    for bad in ("nan", "-1", "inf"):
        assert cli.main([*argv, "--max_accuracy_loss", bad]) == 2
        err = capsys.readouterr().err
        assert err == f"error: --max_accuracy_loss must be a number of points in [0, inf), got {float(bad)}\n"
    # a study judged by accuracy names the column as it always did, and takes no limit in nats
    assert predictor.columns(ACCURACY) == predictor.COLUMNS
    assert cli.main([*argv, "--max_loss_increase", "0.05"]) == 2
    assert capsys.readouterr().err == (f"error: --max_loss_increase does not fit {folder}, a study judged by its "
                                       "accuracy (a test_accuracy target): give --max_accuracy_loss POINTS "
                                       "(default 0.5)\n")


def loss_study(tmp_path, outcomes, metric="test_loss"):
    """``study``, every trial's target on ``metric`` (a language model's: test_loss or test_perplexity)."""
    target = {"target": {"metric": metric, "value": 3.0}}
    return study(tmp_path, [({**target, **settings}, rows) for settings, rows in outcomes])


def test_advise_judges_a_loss_study_by_its_test_loss_in_nats(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    # onebit reached the target loss but ended 1.78 nats above fp32's test loss while its next-token accuracy
    # rose 0.05 points: advise once recommended it by that accuracy
    folder = loss_study(tmp_path, [
        ({}, [{"steps_to_target": 50.0, "accuracy_delta": 0.0, "loss_delta": 0.0}]),
        (QSGD, [{"steps_to_target": 50.0, "accuracy_delta": -0.01, "loss_delta": 0.03}]),
        (ADAPTIVE, [{"steps_to_target": 50.0, "accuracy_delta": 0.0, "loss_delta": 0.06}]),
        (ONEBIT, [{"steps_to_target": 50.0, "accuracy_delta": 0.0005, "loss_delta": 1.78}]),
    ])
    table, notes = predictor.predict(folder, 1e6, 2, 0.0)
    judged = judged_by(read_records(folder))
    assert (judged.delta, judged.unit) == ("loss_delta", "nats")
    assert list(table.columns) == predictor.columns(judged)
    assert "accuracy_delta_points" not in table.columns
    assert list(table["loss_delta_nats"]) == [0.0, 0.03, 0.06, 1.78]  # positive: worse
    _, qsgd, adaptive, onebit = table["configuration"]
    assert list(table["tta_speedup_vs_fp32"].sort_values().index) == [0, 1, 2, 3]  # onebit the fastest
    argv = ["advise", str(folder), "--bandwidth", "1mbit", "--num_workers", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-3:] == ["loss_delta_nats", "reached_target", "break_even_bps"]
    assert out[-4].startswith(f"{qsgd}: ") and "; test loss +0.030 nats vs fp32, target reached; " in out[-4]
    assert out[-3:-1] == [f"excluded {adaptive}: test loss 0.06 nats above fp32's (max 0.05)",
                          f"excluded {onebit}: test loss 1.78 nats above fp32's (max 0.05)"]
    saved = pd.read_csv(folder / "predictions" / "1mbit_2w_5us_overlap-true_x1.csv")
    assert list(saved.columns) == predictor.columns(judged)
    # the limit, in nats, is inclusive
    assert cli.main([*argv, "--max_loss_increase", "0.06"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith(f"{adaptive}: ") and "; test loss +0.060 nats vs fp32, target reached; " in out[-3]
    assert out[-2] == f"excluded {onebit}: test loss 1.78 nats above fp32's (max 0.06)"
    assert advice.advice(table, 0.0, judged).splitlines() == [
        "none recommended: no configuration reached the target within 0 nats of fp32's test loss",
        f"excluded {qsgd}: test loss 0.03 nats above fp32's (max 0)",
        f"excluded {adaptive}: test loss 0.06 nats above fp32's (max 0)",
        f"excluded {onebit}: test loss 1.78 nats above fp32's (max 0)"]
    assert advice.advice(table, 2.0, judged).splitlines()[0].startswith(f"{onebit}: ")
    # a loss that fell is no loss: fp32 ended worse than the compressor
    assert advice.exclusion(pd.Series({"reached_target": True, "loss_delta_nats": -0.5}), 0.0, judged) is None
    # the predict command shows the loss column too
    assert cli.main(["predict", *argv[1:]]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-3:] == ["loss_delta_nats", "reached_target",
                                                                    "break_even_bps"]


def test_a_perplexity_study_is_judged_by_its_test_loss_too(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = loss_study(tmp_path, [({}, [{"steps_to_target": 50.0, "loss_delta": 0.0}]),
                                   (QSGD, [{"steps_to_target": 50.0, "loss_delta": 0.0125},
                                           {"steps_to_target": 50.0, "loss_delta": 0.0375}])],
                        metric="test_perplexity")
    table, _ = predictor.predict(folder, 1e6, 2, 0.0)
    assert list(table["loss_delta_nats"]) == [0.0, 0.025]  # the mean over the seeds
    judged = judged_by(read_records(folder))
    assert advice.advice(table, 0.05, judged).splitlines()[0].startswith(f"{table['configuration'][1]}: ")


def test_advise_refuses_the_limit_of_another_metric_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = loss_study(tmp_path, [({}, [{"steps_to_target": 50.0, "loss_delta": 0.0}])])
    argv = ["advise", str(folder), "--bandwidth", "1mbit", "--num_workers", "2"]
    refusal = (f"error: --max_accuracy_loss does not fit {folder}, a study judged by its test loss (a test_loss "
               "target): give --max_loss_increase NATS (default 0.05)\n")
    for flags in (["--max_accuracy_loss", "0"], ["--max_accuracy_loss", "0", "--max_loss_increase", "0.1"]):
        assert cli.main([*argv, *flags]) == 2
        assert capsys.readouterr() == ("", refusal)
    for bad in ("nan", "-1", "inf"):
        assert cli.main([*argv, "--max_loss_increase", bad]) == 2
        assert capsys.readouterr() == ("", f"error: --max_loss_increase must be a number of nats in [0, inf), "
                                           f"got {float(bad)}\n")
    assert not (folder / "predictions").exists()  # refused before any work


def test_break_even_bandwidths_print_as_rates_and_stay_numbers_in_the_file(tmp_path, monkeypatch, capsys):
    assert [advice.rate_text(bps) for bps in (3.5e7, 4.234e8, 9.544e9, 999.9e9, 2e12)] == \
        ["35 Mbit/s", "423 Mbit/s", "9.54 Gbit/s", "1 Tbit/s", "2 Tbit/s"]
    # faster at any bandwidth, at none, and fp32 against itself
    assert [advice.rate_text(bps) for bps in (math.inf, 0.0, math.nan)] == ["any", "never", "n/a"]
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    assert cli.main(["advise", str(folder), "--bandwidth", "1mbit", "--num_workers", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    saved = pd.read_csv(folder / "predictions" / "1mbit_2w_5us_overlap-true_x1.csv")
    fp32, qsgd = saved["break_even_bps"]
    assert math.isnan(fp32) and 1e6 < qsgd < 1e12
    assert out[2].endswith(" n/a") and out[3].endswith(f" {advice.rate_text(qsgd)}")
    assert out[-2].endswith(f"; it pays below {advice.rate_text(qsgd)}")


def test_predictions_are_saved_under_a_name_of_their_arguments(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 0
    first = folder / "predictions" / "1gbit_4w_5us_overlap-true_x1.csv"
    assert capsys.readouterr().out.splitlines()[-1] == f"saved {first}"
    saved = first.read_bytes()
    assert cli.main(["advise", str(folder), "--bandwidth", "100MBIT", "--num_workers", "8", "--latency", "0.2ms",
                     "--overlap", "false", "--compute_scale", "2.5"]) == 0
    second = folder / "predictions" / "100mbit_8w_0.2ms_overlap-false_x2.5.csv"
    assert capsys.readouterr().out.splitlines()[-1] == f"saved {second}"
    assert first.read_bytes() == saved
    table = pd.read_csv(second)
    assert list(table.columns) == predictor.COLUMNS
    first_row = table.iloc[0]
    assert (first_row["num_workers"], first_row["latency_s"], bool(first_row["overlap"])) == (8, 2e-4, False)
    assert sorted(p.name for p in (folder / "predictions").iterdir()) == [second.name, first.name]  # no temp files
    values = {opt.param.name: opt.param.default for opt in options.OPTIONS}
    assert files.predictions_path(folder, {**values, "bandwidth": "1gbit", "num_workers": 4,
                                           "compute_scale": 1.0000001}).name == \
        "1gbit_4w_5us_overlap-true_x1.0000001.csv"
    assert files.predictions_path(folder, {**values, "bandwidth": "1gbit", "num_workers": 4,
                                           "overlap_slowdown": 0.189}).name == "1gbit_4w_5us_overlap-true_x1_slow0.189.csv"
    # a folder where nothing can be written: refused before any work, in one line
    (folder / "predictions").rename(folder / "kept")
    (folder / "predictions").write_text("")
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 2
    assert capsys.readouterr().err.startswith(f"error: the predictions cannot be saved in {first}: ")


def test_a_record_without_its_row_in_trials_csv_asks_for_an_export(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}])])
    table = pd.read_csv(folder / "trials.csv")
    table[table["trial_id"] != "t1"].to_csv(folder / "trials.csv", index=False)  # t1 finished after the export
    assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 1
    assert capsys.readouterr().err == (f"error: {folder}: trials.csv has no row for 1 trial record(s) (t1, ...; a "
                                       f"running sweep rebuilds its tables at most every 30 s): rebuild it with "
                                       f"`lowprec export {folder}`\n")


def test_a_trials_csv_that_disagrees_with_the_records_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    path = folder / "trials.csv"
    good = pd.read_csv(path)
    rebuild = f"rebuild it with `lowprec export {folder}`"
    argv = ["advise", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]
    cases = [
        (good.drop(columns="compute_s").to_csv(index=False), f"{path} has no column compute_s: {rebuild}"),
        (pd.concat([good, good.iloc[[2]]]).to_csv(index=False),
         f"{path} has more than one row for trial t2: {rebuild}"),
        # exported while t1 was failed; then it ran again, and its record is ok
        (good.assign(status=["ok", "failed", "ok", "ok"]).to_csv(index=False),
         f"{path} is older than the trial records (trial t1 is failed there, ok in its record): {rebuild}"),
        ("", f"{path} cannot be read as a table (No columns to parse from file): {rebuild}"),
    ]
    for text, message in cases:
        path.write_text(text)
        assert cli.main(argv) == 1
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", f"error: {message}\n")
    # trial ids of digits only stay strings: every record finds its row
    good.assign(trial_id=good["trial_id"].str.replace("t", "0")).to_csv(path, index=False)
    for record in (folder / "trials").glob("*.json"):
        data = json.loads(record.read_text())
        data["trial_id"] = data["trial_id"].replace("t", "0")
        record.unlink()
        (folder / "trials" / f"{data['trial_id']}.json").write_text(json.dumps(data))
    assert len(predictor.predict(folder, 1e9, 4, 0.0)[0]) == 2


def test_configurations_whose_times_are_not_numbers_or_zero_are_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}]),
                              (ONEBIT, [{"steps_to_target": 50.0}]), (ADAPTIVE, [{"steps_to_target": 50.0}])])
    table = pd.read_csv(folder / "trials.csv").astype({"compute_s": object, "encode_s": object})
    table.loc[2, "compute_s"] = 0.0  # qsgd's one-worker trial
    table.loc[4, "encode_s"] = "nan"  # onebit's
    table.loc[6, "encode_s"] = "n/a"  # adaptive's
    table.to_csv(folder / "trials.csv", index=False)
    predicted, notes = predictor.predict(folder, 1e9, 4, 0.0)
    assert list(predicted["compressor"]) == ["fp32"]
    assert predicted[["predicted_step_time_s", "speedup_vs_fp32", "speedup_bound"]].notna().all(axis=None)
    qsgd, onebit, adaptive = (config_name({**SETTINGS, **s}) for s in (QSGD, ONEBIT, ADAPTIVE))
    assert notes[:3] == [f"not predicted: {qsgd}: its one-worker compute_s in trials.csv is 0, not a number > 0",
                         f"not predicted: {onebit}: its one-worker encode_s in trials.csv is nan, not a number >= 0",
                         f"not predicted: {adaptive}: its one-worker encode_s in trials.csv is nan, not a number >= 0"]
    # fp32's: nothing can be predicted; the message says why
    table.loc[0, "compute_s"] = "inf"
    table.to_csv(folder / "trials.csv", index=False)
    assert cli.main(["advise", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]) == 1
    assert capsys.readouterr().err == (
        f"error: {folder}: no finished one-worker fp32 trial (plain DDP) that can be used (fp32 algorithm=allreduce: "
        "its one-worker compute_s in trials.csv is inf, not a number > 0): the baseline and the compute time come "
        "from it\n")


def test_cached_inputs_that_no_machine_measures_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}])])
    first = predictor.predict(folder, 1e8, 2, 0.0)[0]
    cache = folder / "predict_cache"
    (cache / "reduce.json").write_text(json.dumps({"reduce_bps": 0.0}))
    (profile_path,) = cache.glob("profile-*.json")
    cached = json.loads(profile_path.read_text())
    cached["profile"].update(fwd_s=0.0, bwd_s=0.0, opt_s=0.0)
    profile_path.write_text(json.dumps(cached))
    again, notes = predictor.predict(folder, 1e8, 2, 0.0)
    assert notes == [f"measured the model's step profile and this machine's reduction throughput and cached them "
                     f"in {cache}: later calls reuse them (delete the folder to measure again)"]
    pd.testing.assert_frame_equal(again, first)


def test_num_workers_beyond_any_cluster_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    for workers in ("0", "65537", str(10**12), str(10**29)):
        assert cli.main(["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", workers]) == 2
        assert capsys.readouterr().err == f"error: --num_workers must be in [1, 65536], got {workers}\n"
    assert cli.main(["advise", str(folder), "--bandwidth", "1gbit", "--num_workers", "65536"]) == 0
    table = pd.read_csv(folder / "predictions" / "1gbit_65536w_5us_overlap-true_x1.csv")
    assert table[["predicted_step_time_s", "speedup_vs_fp32"]].notna().all(axis=None)


def test_predictions_that_cannot_be_saved_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    import errno
    import tempfile

    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}])])

    def work(*args, **kwargs):
        raise AssertionError("predicted, though the predictions cannot be saved")

    monkeypatch.setattr(predictor, "predict", work)
    argv = ["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]
    saved = folder / "predictions" / "1gbit_4w_5us_overlap-true_x1.csv"
    (folder / "predictions").write_text("")  # a file where the folder goes
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"error: the predictions cannot be saved in {saved}: {saved.parent} is not "
                                      "a folder\n")
    (folder / "predictions").unlink()
    saved.mkdir(parents=True)  # a folder where the file goes
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"error: the predictions cannot be saved in {saved}: Is a directory\n"
    saved.rmdir()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"error: the predictions cannot be saved in {saved}: Read-only file system\n")
    monkeypatch.undo()
    # a file given as the results folder
    assert cli.main(["predict", str(folder / "trials.csv"), "--bandwidth", "1gbit", "--num_workers", "4"]) == 2
    assert capsys.readouterr().err == (f"error: {folder / 'trials.csv'} is not a folder (a results folder of "
                                       "`lowprec run`)\n")


# 2 hosts x 2 workers: 100 Mbit/s (12.5 MB/s) and 1 ms per message between hosts, 2400 Gbit/s (300 GB/s) inside one
TWO_BY_TWO = perfmodel.Cluster(2, 2, perfmodel.Link(12.5e6, 1e-3), perfmodel.Link(3e11))


def test_hierarchical_traffic_of_a_1mb_bucket():
    sra = Configuration("qsgd", {**SETTINGS, **QSGD}, 0.008, 0.002, 0.001, 0.0)
    tiered = hierarchical(sra)
    # the reducer's defaults inside and among the hosts: fp32 and sra
    assert (tiered.settings["algorithm"], tiered.settings["intra"], tiered.settings["inter"]) == \
        ("hierarchical", None, None)
    assert tiered.label == "qsgd bits=4 algorithm=hierarchical" and tiered.key != sra.key
    codec = compressors.get("qsgd", bits=4)
    assert codec.payload_nbytes((125, 500)) == 31798  # qsgd's 4 bits of 62500 entries, its norms and header
    # a 1 MB tensor (500 x 500 fp32) and a small one (10 entries: the fused fp32 ring, 40 B). Hierarchical: the
    # host's reduce-scatter of 1 MB and all_gather of 500 kB halves (rows 0-249, 250-499); across the hosts, each
    # local rank's sra of its half: 125 rows to each host, one chunk sent, one gathered
    shapes = [(10,), (500, 500)]
    assert bucket_traffic(tiered, shapes, 4, 2) == [
        ("ring", 40), ("intra_reduce_scatter", 1e6), ("inter_all_to_all", 31798), ("inter_all_gather", 31798),
        ("intra_all_gather", 5e5)]
    # among the hosts by all_gather: each local rank's half, encoded whole (2 x 31798 B), gathered from the other
    # host; at fp16 inside, half the intra bytes
    gathered = hierarchical(sra, "fp16", "allgather")
    assert gathered.label == "qsgd bits=4 algorithm=hierarchical intra=fp16 inter=allgather"
    assert bucket_traffic(gathered, shapes, 4, 2) == [
        ("ring", 40), ("intra_reduce_scatter", 5e5), ("inter_all_gather", codec.payload_nbytes((250, 500))),
        ("intra_all_gather", 2.5e5)]
    # flat sra: 4 chunks of 125 rows, 3 sent, 1 gathered from each rank
    assert bucket_traffic(sra, shapes, 4) == [("ring", 40), ("all_to_all", 3 * 31798),
                                                        ("all_gather", 31798)]
    ring = 6e-3 + 1.5 * 40 / 12.5e6 + 0.75 * 40 / 1e9  # the small tensors' ring crosses hosts
    hier = comm_s(bucket_traffic(tiered, shapes, 4, 2), TWO_BY_TWO, 1e9)
    assert hier == pytest.approx(ring + 0.5e6 / 3e11 + 0.5e6 / 1e9 + 2 * (1e-3 + 31798 / 12.5e6) + 5e5 / 3e11,
                                 rel=1e-12)
    # flat: what goes to the other host (2/3 of the all_to_all, 2 of the 3 gathered chunks) sets the pace
    flat = comm_s(bucket_traffic(sra, shapes, 4), TWO_BY_TWO, 1e9)
    assert flat == pytest.approx(ring + 2 * (2e-3 + 2 * 31798 / 12.5e6), rel=1e-12)
    # a one-row tensor goes whole to one local rank (by its key), then whole to one host: that rank is the
    # busiest, and sends the other host an empty chunk (its header: 48 B) in its all_to_all
    whole, empty = codec.payload_nbytes((2000,)), codec.payload_nbytes((0,))
    assert empty == 48
    assert bucket_traffic(tiered, [(2000,)], 4, 2) == [
        ("ring", 0), ("intra_reduce_scatter", 8000), ("inter_all_to_all", empty), ("inter_all_gather", whole),
        ("intra_all_gather", 4000)]


def test_one_worker_per_host_makes_hierarchical_the_flat_sra_bit_for_bit():
    sra = Configuration("qsgd", {**SETTINGS, **QSGD, "min_compress_numel": 100}, 0.008, 0.002, 0.001, 0.0)
    link = perfmodel.Link(1e6 / 3, 1.7e-5)
    for p in (1, 2, 3, 4):
        for overlap in (True, False):
            flat = plan(sra, PROFILE, 0.008, p, overlap)
            tiered = plan(hierarchical(sra), PROFILE, 0.008, p, overlap, workers_per_host=1)
            # the intra link carries nothing: any will do
            cluster = perfmodel.Cluster(p, 1, link, perfmodel.Link(7.0, 3.0))
            assert predict_step(tiered, cluster, 1.1e9) == \
                predict_step(flat, perfmodel.Cluster.flat(p, link), 1.1e9)


def test_predict_on_hosts_of_several_workers_adds_the_hierarchical_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]),
                              ({"compressor": "fp16"}, [{"steps_to_target": 50.0}]),
                              (QSGD, [{"steps_to_target": 40.0, "accuracy_delta": -0.002}])])
    table = pd.read_csv(folder / "trials.csv")
    table.loc[table["trial_id"] == "t4", ["encode_s", "decode_s"]] = [0.002, 0.001]  # qsgd's one-worker trial
    table.to_csv(folder / "trials.csv", index=False)
    one, _ = predictor.predict(folder, 8e6, 4, 1e-3)
    assert list(one["configuration"]) == ["fp32", "fp16", "qsgd"]
    # one worker per host is the one-link model, whatever the intra link
    pd.testing.assert_frame_equal(predictor.predict(folder, 8e6, 4, 1e-3, workers_per_host=1,
                                                    intra_bandwidth_bps=8.0)[0].drop(columns="intra_bandwidth_bps"),
                                  one.drop(columns="intra_bandwidth_bps"), check_exact=True)
    table, notes = predictor.predict(folder, 8e6, 4, 1e-3, workers_per_host=2, intra_bandwidth_bps=2.4e12)
    assert list(table["configuration"]) == ["fp32", "fp16", "qsgd", "qsgd hierarchical"]
    assert list(table["algorithm"]) == ["allreduce", "allreduce", "sra", "hierarchical"]
    assert set(table["workers_per_host"]) == {2} and set(table["intra_bandwidth_bps"]) == {2.4e12}
    assert notes[0] == ("hierarchical: no such trial was run; each row is its sra configuration's codec on 1/2 of "
                        "each bucket, with the steps to target and accuracy of its flat sra trials")
    fp32, _, qsgd, tiered = (table.iloc[i] for i in range(4))
    # fp32's ring (2372 floats) crosses hosts at 1 MB/s: 6 messages of 1 ms, 1.5 x 9488 B, 0.75 x 9488 B summed
    assert fp32["comm_s"] == pytest.approx(6e-3 + 1.5 * 9488 / 1e6 + 0.75 * 9488 / 1e9, rel=1e-12)
    # the codec on half the elements, its sra among 2 hosts: encode (1 + 1/2) / 2 / 2, decode / 2
    assert (tiered["encode_s"], tiered["decode_s"]) == (pytest.approx(0.002 * 0.375), pytest.approx(0.0005))
    assert qsgd["encode_s"] == pytest.approx(0.002 * 0.625)  # flat sra over 4
    # the outcome is the flat sra trials': 50 / 40 steps, -0.2 points
    assert (tiered["steps_ratio_vs_fp32"], tiered["accuracy_delta_points"], tiered["reached_target"]) == \
        (1.25, -0.2, True)
    assert tiered["tta_speedup_vs_fp32"] == pytest.approx(1.25 * tiered["speedup_vs_fp32"], rel=1e-15)
    assert tiered["comm_s"] < qsgd["comm_s"]  # half the bytes cross hosts
    assert advice.advice(table, 0.5).splitlines()[0].startswith("qsgd hierarchical: ")
    with pytest.raises(ValueError, match=r"^workers_per_host must be in \[1, 4\] and divide num_workers \(4\), "
                                         r"got 3$"):
        predictor.predict(folder, 8e6, 4, 1e-3, workers_per_host=3)


def test_a_hierarchical_trial_is_no_input(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    folder = write_folder(tmp_path, [({}, ONE), ({**QSGD, "algorithm": "hierarchical"}, ONE)])
    table, notes = predictor.predict(folder, 8e6, 4, 0.0, prof=PROFILE, workers_per_host=2)
    assert list(table["configuration"]) == ["fp32"]
    assert notes[0] == ("not predicted: qsgd bits=4 algorithm=hierarchical: a hierarchical trial is no input (one "
                        "worker is one host: nothing is compressed); with --workers_per_host, each sra configuration "
                        "is predicted hierarchical")


def test_predict_cli_on_hosts_of_several_workers_and_its_refusals(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    folder = study(tmp_path, [({}, [{"steps_to_target": 50.0}]), (QSGD, [{"steps_to_target": 50.0}])])
    argv = ["predict", str(folder), "--bandwidth", "1gbit", "--num_workers", "4"]
    for workers in ("0", "3", "8", "-2"):
        assert cli.main([*argv, "--workers_per_host", workers]) == 2
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", f"error: --workers_per_host must be in [1, 4] and divide num_workers (4), "
                                          f"got {workers}\n")
    for rate in ("0gbit", "10gibbit", "200000gbit", "4kbit", "nan"):
        assert cli.main([*argv, "--workers_per_host", "2", "--intra_bandwidth", rate]) == 2
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", f"error: --intra_bandwidth must be a rate from 8kbit to 100000gbit, like "
                                          f"2400gbit, got {rate!r}\n")
    assert not (folder / "predictions").exists()
    assert cli.main(["advise", *argv[1:], "--workers_per_host", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("4 workers (2 hosts x 2, 2400gbit inside one), 1gbit links, 5us latency, overlap true, "
                      "compute x1 (orchestrator.predict.perfmodel)")
    assert [line.split()[0] for line in out[2:5]] == ["fp32", "qsgd", "qsgd"] and out[4].split()[1] == "hierarchical"
    assert out[-1] == f"saved {folder / 'predictions' / '1gbit_2x2w_2400gbit-intra_5us_overlap-true_x1.csv'}"
    assert cli.main([*argv, "--workers_per_host", "2", "--intra_bandwidth", "900GBit"]) == 0
    saved = folder / "predictions" / "1gbit_2x2w_900gbit-intra_5us_overlap-true_x1.csv"
    assert capsys.readouterr().out.splitlines()[-1] == f"saved {saved}"
    table = pd.read_csv(saved)
    assert list(table.columns) == predictor.COLUMNS
    assert list(table["intra_bandwidth_bps"]) == [9e11] * 3 and list(table["workers_per_host"]) == [2] * 3
    # one worker per host: the file of old, whatever --intra_bandwidth says
    assert cli.main([*argv, "--intra_bandwidth", "900gbit"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        f"saved {folder / 'predictions' / '1gbit_4w_5us_overlap-true_x1.csv'}"


def test_a_hosts_shared_link_lets_one_workers_wait_overlap_the_others_bytes():
    step = Plan(0.0, 0.0, 0.0, [(0.0, 0.0, 0.0, [("all_to_all", 3000)])], 0.0, 0.0, overlap=False)
    shared = perfmodel.Cluster(2, 2, perfmodel.Link(1e6, 1e-4), perfmodel.Link(1e9), shared_link=True)
    # idle: 2/3 of the 3000 B to the other host at half the host's 1 MB/s, 2 messages in turn of 0.1 ms
    idle = predict_step(step, shared, 1e9)
    assert (idle["comm_s"], idle["messages"]) == (pytest.approx(2e-4 + 2000 / 5e5, rel=1e-12), 2)
    # each message waits 5 ms for its peer under load: longer than the bytes on the shared link, the waits set it
    assert predict_step(step, shared, 1e9, 5e-3)["comm_s"] == pytest.approx(0.01, rel=1e-12)
    # waits of 1 ms hide behind the bytes on the shared link
    assert predict_step(step, shared, 1e9, 1e-3)["comm_s"] == pytest.approx(4.2e-3, rel=1e-12)
    # a link of each worker's own: the latency under load is the link's, in place of the idle one, below it too
    own = perfmodel.Cluster.flat(4, perfmodel.Link(1e6, 1e-4))
    assert predict_step(step, own, 1e9, 1e-5)["comm_s"] == pytest.approx(3e-5 + 3000 / 1e6, rel=1e-12)


def test_a_hierarchical_trial_on_emulated_hosts_is_predicted_from_its_codecs_sra_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    qsgd = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
    hier = {**qsgd, "algorithm": "hierarchical", "num_workers": 4, "overlap": False}
    link = {"hosts": 2, "workers_per_host": 2, "bandwidth": "8mbit", "calibrated_bps": 8e6,
            "calibrated_latency_s": 1e-3, "unshaped_bps": 8e9}
    trials = read_trials(write_folder(tmp_path, [
        ({}, ONE),
        (qsgd, {**ONE, "encode_s": 0.002, "decode_s": 0.001}),
        (hier, ONE),
        ({**hier, "inter": "allgather"}, ONE),  # its hosts exchange by all_gather
        ({**hier, "num_workers": 3}, ONE),  # does not fill its hosts evenly: not the algorithm modelled
    ], links={2: link, 3: link, 4: link}))
    configs = {c.key: c for c in configurations(trials)[0]}
    made = input_for(configs, trials[2][0]["settings"])
    assert made.key == step_key(trials[2][0]["settings"])
    assert (made.encode_s, made.decode_s) == (0.002, 0.001)
    gathered = input_for(configs, trials[3][0]["settings"])
    assert gathered.key == step_key(trials[3][0]["settings"]) != made.key
    predicted = trial_predictions(trials, TrialInputs(trials, cpu_count=2))
    assert list(predicted) == ["t2", "t3"]
    # by all_gather, a rank encodes its half once and decodes both hosts' halves, where the one-worker sra
    # encoded and decoded the whole gradient twice
    assert predicted["t3"]["encode_s"] == pytest.approx(0.002 * 2 / 4, rel=1e-12)
    assert predicted["t3"]["decode_s"] == pytest.approx(0.001 * 2 * 2 / 4, rel=1e-12)
    step = predicted["t2"]
    # 4 workers of one thread on 2 cores: 2x; a rank encodes a 2-host sra's (1 + 1/2) / 2 of its half of the
    # gradient and decodes its half
    assert step["compute_s"] == pytest.approx(0.016, rel=1e-12)
    assert step["encode_s"] == pytest.approx(0.002 * 2 * 0.75 / 2, rel=1e-12)
    assert step["decode_s"] == pytest.approx(0.001 * 2 / 2, rel=1e-12)
    cluster = perfmodel.Cluster(2, 2, perfmodel.Link(1e6, 1e-3), perfmodel.Link(1e9), shared_link=True)
    planned = plan(made, PROFILE, 0.008, 4, False, DeviceScale.uniform(2.0), 2)
    assert step == predict_step(planned, cluster, 1e9)


def test_a_hierarchical_sharing_trials_device_scale_is_over_what_the_plan_takes():
    factors = {"compute_s": 1.5, "encode_s": 0.75, "decode_s": 1.0}
    # 4 workers, 2 per host: the plan takes (1 + 1/2) / 2 / 2 of the one-worker encode and 1/2 of its decode
    assert sharing.device_scale("hierarchical", 4, factors, world=True, workers_per_host=2) == \
        DeviceScale(1.5, pytest.approx(2.0), 2.0)
    # by all_gather among the hosts, a quarter of the one-worker sra's encode (its half, once) and half its decode
    assert sharing.device_scale("hierarchical", 4, factors, world=True, workers_per_host=2, inter="allgather") == \
        DeviceScale(1.5, pytest.approx(3.0), 2.0)


def test_an_emulated_sweeps_predictor_inputs_are_its_predictions_inputs(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    qsgd = {"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"}
    link = {"hosts": 4, "bandwidth": "8mbit", "calibrated_bps": 8e6, "calibrated_latency_s": 1e-3}
    (tmp_path / "grid").mkdir()
    grid = read_trials(write_folder(tmp_path / "grid", [
        ({}, ONE), ({**qsgd, "num_workers": 4, "overlap": False}, ONE)], links={1: link}))
    # no one-worker qsgd trial in the grid: nothing to predict it from
    assert sharing.emulated_predictions(grid, [], cpu_count=2) == {}
    (tmp_path / "predictor_inputs").mkdir()
    alone = read_trials(write_folder(tmp_path / "predictor_inputs", [
        ({**qsgd, "overlap": False}, {**ONE, "encode_s": 0.002, "decode_s": 0.001})]))
    predicted = sharing.emulated_predictions(grid, alone, cpu_count=2)
    assert list(predicted) == ["t1"]
    # no sharing trials among them: the sharing is guessed from threads per core, as without predictor inputs
    assert predicted == trial_predictions(grid, TrialInputs([*grid, *alone], cpu_count=2))
    assert predicted["t1"]["encode_s"] == pytest.approx(0.002 * 2 * (1 + 1 / 4) / 2, rel=1e-12)


def test_a_study_of_a_users_compressor_is_predicted_after_its_imports_load(tmp_path, monkeypatch):
    from pathlib import Path

    from compressors.core import registry
    from workloads import references

    before = dict(registry.COMPRESSORS), dict(registry._BY_WIRE_ID), dict(references._FILES)
    module = tmp_path / "my_compressor.py"
    module.write_text((Path(__file__).parent.parent / "data" / "my_compressor.py").read_text())
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    try:
        name = "truncate16"
        (tmp_path / "results").mkdir()
        folder = write_folder(tmp_path / "results", [
            ({"imports": [str(module)]}, ONE),
            ({"imports": [str(module)], "compressor": name, "algorithm": "sra"}, {**ONE, "encode_s": 0.001}),
        ])
        assert name not in registry.COMPRESSORS  # only the study's imports register it
        table, _ = predictor.predict(folder, 8e6, 2, 0.0, prof=PROFILE)
        assert name in set(table["compressor"])
    finally:
        for now, then in zip((registry.COMPRESSORS, registry._BY_WIRE_ID, references._FILES), before):
            now.clear()
            now.update(then)


def test_predicts_bandwidth_must_be_a_rate_and_is_not_offered_null(tmp_path, capsys):
    folder = write_folder(tmp_path, [({}, ONE)])
    assert cli.main(["predict", str(folder), "--bandwidth", "fast", "--num_workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --bandwidth must be a rate from 8kbit to 100gbit, like 100mbit or 2.5gbit, got 'fast'\n"


@pytest.mark.parametrize("span, recommended", [((0.95, 1.05), True), ((0.25, 4.0), False)])
def test_advise_leaves_out_a_speedup_whose_interval_includes_1(tmp_path, monkeypatch, span, recommended):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    lo, hi = span
    one = {**ONE, "overhead_vs_fp32": 1.0, "overhead_vs_fp32_lo": lo, "overhead_vs_fp32_hi": hi}
    two = {**ONE, "steps_to_target": 50.0, "accuracy_delta": 0.0}
    folder = write_folder(tmp_path, [({}, {**one, "overhead_vs_fp32_lo": math.nan, "overhead_vs_fp32_hi": math.nan}),
                                     ({"num_workers": 2}, two), (QSGD, one), ({**QSGD, "num_workers": 2}, two)])
    table, _ = predictor.predict(folder, 1e6, 2, 0.0)
    fp32, qsgd = table.to_dict("records")
    assert (fp32["tta_speedup_lo"], fp32["tta_speedup_hi"]) == (1.0, 1.0)
    speedup = qsgd["tta_speedup_vs_fp32"]
    assert speedup > 1.2 and (qsgd["tta_speedup_lo"], qsgd["tta_speedup_hi"]) == (speedup / hi, speedup / lo)
    lines = advice.advice(table, 0.5).splitlines()
    if recommended:
        assert lines[0].startswith(f"{qsgd['configuration']}: ")
    else:
        assert lines == [
            "none recommended: no configuration reached the target within 0.5 points of fp32's accuracy",
            f"excluded {qsgd['configuration']}: not measurable here: its predicted speedup's 95% interval "
            f"[{speedup / hi:.2f}, {speedup / lo:.2f}] includes 1 (its one-worker step is not known well enough "
            "against fp32's on this machine: more steps, a quieter machine or a second seed narrow it)"]


def test_a_folder_of_gpu_trials_is_predicted_with_a_note_where_no_gpu_profiles_it(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "reduction_rate", lambda: 1e9)
    gpu = {"use_gpu": True}
    folder = write_folder(tmp_path, [
        (gpu, ONE),
        ({**gpu, "compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"},
         {**ONE, "encode_s": 0.002, "decode_s": 0.001}),
    ])
    monkeypatch.setattr(measure, "profile", lambda settings: PROFILE)
    monkeypatch.setattr(profile_module.torch.cuda, "is_available", lambda: False)
    table, notes = predictor.predict(folder, 8e6, 2, 0.0)
    assert list(table["compressor"]) == ["fp32", "qsgd"] and not any("not predicted" in n for n in notes)
    assert notes[-1].startswith("the trials ran on a GPU and this machine has none: the model's profile")
    assert "GPU trials: compute taken 18.9% slower while communication overlaps it, Lee et al. 2025's" in notes[-3]
    assert list(table["overlap_slowdown"]) == [0.189, 0.189]
    # the cached profile, read on the next call, was this CPU's still: said again
    again, again_notes = predictor.predict(folder, 8e6, 2, 0.0)
    assert again_notes[-1].startswith("the trials ran on a GPU and this machine has none")
    assert again.equals(table)
    # the GPU trials' times as a CPU trial's would be: the same predictions where nothing overlaps (the one
    # bucket is ready as backward ends), and none slowed on the CPU
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    write_folder(cpu, [({}, ONE), ({"compressor": "qsgd", "compressor_params": {"bits": 4}, "algorithm": "sra"},
                                   {**ONE, "encode_s": 0.002, "decode_s": 0.001})])
    same, cpu_notes = predictor.predict(cpu, 8e6, 2, 0.0)
    assert list(same["predicted_step_time_s"]) == list(table["predicted_step_time_s"])
    assert list(same["overlap_slowdown"]) == [0.0, 0.0] and not any("GPU" in n for n in cpu_notes)


class TickClock(profile_module.Clock):
    """A clock of whole ticks, one a mark: a profile's exact values from the order of its marks."""

    def __init__(self) -> None:
        self.now = 0

    def mark(self):
        self.now += 1
        return self.now


def test_a_profile_is_timed_by_its_devices_clock():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    batch = (torch.randn(5, 3), torch.randint(0, 2, (5,)))
    prof = profile_module.profile_model(model, batch, repeats=3, clock=TickClock())
    # per step: start, after forward; the 4 gradients' hooks in backward's order (the last layer's bias first);
    # after backward, after the optimizer: 1 tick of forward, 5 of backward, 1 of the optimizer
    assert (prof.fwd_s, prof.bwd_s, prof.opt_s) == (1, 5, 1)
    assert [ready for _, ready in prof.params] == [4, 3, 2, 1]
    assert [shape for shape, _ in prof.params] == [(4, 3), (4,), (2, 4), (2,)]
