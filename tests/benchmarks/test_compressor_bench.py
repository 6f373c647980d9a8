"""The compressor benchmark's bookkeeping: rotation, bytes moved, the summary rows and the GPU's speed goals
(exact values from made-up timings), and a run on the CPU at a small size."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks import compressor_bench as bench


def test_copies_span_the_rotation() -> None:
    assert bench.copies_for(2 ** 20, 256) == 64  # 4 MiB inputs over 256 MiB
    assert bench.copies_for(2 ** 24, 256) == 4
    assert bench.copies_for(2 ** 28, 256) == 1
    assert bench.copies_for(2 ** 12, 256) == 256  # at most MAX_COPIES
    assert bench.copies_for(2 ** 18, 3) == 3
    assert bench.copies_for(2 ** 20, 0) == 1


def test_runs_rotate_across_passes_so_each_takes_the_copy_used_longest_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "timed", lambda fn, device: (fn(), 1.0)[1])
    seen: list[int] = []
    rotation = bench.Rotation(4)
    times = bench.runs(seen.append, rotation, repeats=6, device=torch.device("cpu"))
    assert seen == [0, 1, 2, 3, 0, 1, 2] and times == [1.0] * 6
    bench.runs(seen.append, rotation, repeats=3, device=torch.device("cpu"))  # the next pass goes on from there
    assert seen[7:] == [3, 0, 1, 2]
    one: list[int] = []
    bench.runs(one.append, bench.Rotation(1), repeats=2, device=torch.device("cpu"))
    assert one == [0, 0, 0]


def test_moved_bytes() -> None:
    assert bench.moved_bytes("encode", 10, 7) == 47
    assert bench.moved_bytes("decode", 10, 7) == 47
    assert bench.moved_bytes("decode_add", 10, 7) == 87  # the output is read and written
    assert bench.moved_bytes("decode", 10, 7, "topk") == 47  # a sparse decode writes every entry
    assert bench.moved_bytes("decode_add", 10, 7, "topk") is None  # its add only the entries sent


def _result(name: str, params: dict, impl: str, n: int, seconds: tuple[float, float, float], payload: int) -> dict:
    return {"compressor": name, "params": params, "impl": impl, "label": bench.label(name, params), "n": n,
            "payload_nbytes": payload, **{f"{op}_s": s for op, s in zip(bench.OPS, seconds)}}


N = 2 ** 24


def test_summary_rows_take_the_fastest_implementation_and_the_reference() -> None:
    results = [_result("qsgd", {"bits": 4}, "reference", N, (1.0, 2.0, 4.0), N),
               _result("qsgd", {"bits": 4}, "cuda", N, (0.5, 0.25, 0.125), N),
               _result("fp16", {}, "reference", N, (1.0, 1.0, 1.0), 2 * N)]
    rows = bench.summary_rows(results, [{"n": N, "copy_gbps": 100.0}])
    by = {(r["compressor"], r["op"]): r for r in rows}
    assert len(rows) == 6
    assert by["qsgd", "encode"] == {"compressor": "qsgd", "params": {"bits": 4}, "impl": "cuda", "n": N,
                                    "op": "encode", "seconds": 0.5, "gbps": 5 * N / 0.5 / 1e9, "copy_gbps": 100.0,
                                    "reference_gbps": 5 * N / 1.0 / 1e9}
    assert by["qsgd", "decode_add"]["gbps"] == 9 * N / 0.125 / 1e9
    assert by["qsgd", "decode_add"]["reference_gbps"] == 9 * N / 4.0 / 1e9
    # a configuration measured only by the reference has no reference to compare with
    assert by["fp16", "decode"]["impl"] == "reference" and by["fp16", "decode"]["reference_gbps"] is None


def test_summary_rows_leave_out_failed_measurements_and_sparse_adds() -> None:
    results = [_result("topk", {}, "reference", N, (1.0, 2.0, 4.0), 800),
               _result("topk", {}, "cuda", N, (0.5, 0.25, 0.125), 800),
               {"compressor": "qsgd", "params": {}, "impl": "cuda", "label": "qsgd", "n": N, "error": "OutOfMemoryError"}]
    rows = bench.summary_rows(results, [{"n": N, "copy_gbps": 100.0}])
    by = {(r["compressor"], r["op"]): r for r in rows}
    assert sorted(by) == [("topk", "decode"), ("topk", "decode_add"), ("topk", "encode")]
    assert by["topk", "decode"]["gbps"] == (4 * N + 800) / 0.25 / 1e9
    assert by["topk", "decode_add"]["gbps"] is None and by["topk", "decode_add"]["reference_gbps"] is None


def _row(name: str, op: str, gbps: float, reference: float | None, seconds: float = 1.0, n: int = N,
         copy: float | None = 1000.0, impl: str = "cuda", params: dict | None = None) -> dict:
    return {"compressor": name, "params": params or {}, "impl": impl, "n": n, "op": op, "seconds": seconds,
            "gbps": gbps, "copy_gbps": copy, "reference_gbps": reference}


def test_dense_goal_needs_both_operations_at_80_percent_of_the_copy_and_5x_the_reference() -> None:
    met = [_row("qsgd", "encode", 800.0, 160.0), _row("qsgd", "decode", 900.0, 100.0)]
    slow = [_row("onebit", "encode", 799.0, 100.0), _row("onebit", "decode", 900.0, 100.0)]
    close_to_reference = [_row("natural", "encode", 900.0, 181.0), _row("natural", "decode", 900.0, 100.0)]
    lines = {g["compressor"]: g for g in bench.goals(met + slow + close_to_reference)}
    assert lines["qsgd"]["met"] is True
    assert lines["qsgd"]["encode_of_copy"] == 0.8 and lines["qsgd"]["encode_x_reference"] == 5.0
    assert lines["onebit"]["met"] is False and lines["onebit"]["encode_of_copy"] == 0.799
    assert lines["natural"]["met"] is False and lines["natural"]["encode_x_reference"] == 900.0 / 181.0


def test_dense_goal_is_unknown_without_the_reference_or_the_copy() -> None:
    no_reference = [_row("maxmin", "encode", 900.0, None), _row("maxmin", "decode", 900.0, 100.0)]
    no_copy = [_row("terngrad", "encode", 900.0, 100.0, copy=None), _row("terngrad", "decode", 900.0, 100.0, copy=None)]
    lines = {g["compressor"]: g for g in bench.goals(no_reference + no_copy)}
    assert lines["maxmin"]["met"] is None and lines["maxmin"]["encode_x_reference"] is None
    assert lines["terngrad"]["met"] is None and lines["terngrad"]["goal"] is None


def test_selecting_goal_is_three_reads_of_the_input_at_the_copy_rate() -> None:
    read_s = 4 * N / 1000e9  # one read of the input at a copy of 1000 GB/s (read + written)
    rows = [_row("topk", "encode", 1.0, None, seconds=3 * read_s), _row("topk", "decode", 1.0, None),
            _row("adaptive", "encode", 1.0, None, seconds=3.5 * read_s), _row("adaptive", "decode", 1.0, None)]
    lines = {g["compressor"]: g for g in bench.goals(rows)}
    assert lines["topk"]["met"] is True and lines["topk"]["encode_reads"] == pytest.approx(3.0, rel=1e-12)
    assert lines["adaptive"]["met"] is False and lines["adaptive"]["encode_reads"] == pytest.approx(3.5, rel=1e-12)


def test_goals_cover_only_the_cuda_kernels_at_the_goal_sizes_and_the_named_methods() -> None:
    rows = [_row("qsgd", "encode", 900.0, 100.0, n=2 ** 22), _row("qsgd", "decode", 900.0, 100.0, n=2 ** 22),
            _row("qsgd", "encode", 900.0, 100.0, impl="numba"), _row("qsgd", "decode", 900.0, 100.0, impl="numba"),
            _row("randomk", "encode", 900.0, 100.0), _row("randomk", "decode", 900.0, 100.0),
            _row("fp16", "encode", 900.0, None), _row("fp16", "decode", 900.0, None)]
    assert bench.goals(rows) == []


def test_each_variant_is_its_own_goal() -> None:
    rows = [_row("mx", op, 900.0, 100.0, params=params) for params in ({}, {"element": "e2m1"})
            for op in ("encode", "decode")]
    assert sorted(g["label"] for g in bench.goals(rows)) == ["mx", "mx element=e2m1"]


def test_a_cpu_run_writes_every_row_and_the_copy(tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert bench.main(["--sizes", "10,12", "--repeats", "2", "--compressors", "qsgd,fp16", "--impls",
                       "reference,numba", "--rotate-mib", "0", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["command"] == ("python -m benchmarks.compressor_bench --sizes 10,12 --repeats 2 --compressors "
                                 f"qsgd,fp16 --impls reference,numba --rotate-mib 0 --json {out}")
    assert [c["n"] for c in record["copy"]] == [1024, 4096]
    # qsgd at three widths with both implementations, fp16 with the reference: 7 per size
    assert len(record["results"]) == 14 and record["not_measured"] == 0
    assert {(r["compressor"], r["impl"], r["op"]) for r in record["rows"]} == \
        {(c, i, op) for c, i in (("qsgd", "numba"), ("fp16", "reference")) for op in bench.OPS}
    assert len(record["rows"]) == 2 * 4 * 3 and record["goals"] == []
    assert not list(tmp_path.glob("*.tmp*"))


def test_the_budget_stops_new_measurements_and_says_how_many_were_not_made(tmp_path, monkeypatch, clock) -> None:
    measure = bench.bench_one

    def late(*args, **kwargs) -> dict:  # the first measurement ends past the budget
        clock[0] = 10.0
        return measure(*args, **kwargs)

    monkeypatch.setattr(bench, "bench_one", late)
    out = tmp_path / "bench.json"
    assert bench.main(["--sizes", "10,12", "--repeats", "1", "--compressors", "fp16,bf16", "--budget-s", "5",
                       "--rotate-mib", "0",
                       "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [r["compressor"] for r in record["results"]] == ["fp16"]
    assert record["not_measured"] == 3 and [c["n"] for c in record["copy"]] == [1024]


@pytest.mark.parametrize("argv, message", [
    (["--rotate-mib", "-1"], "--rotate-mib: MiB in [0, 65536]"),
    (["--budget-s", "0"], "--budget-s: a number of seconds > 0"),
    (["--budget-s", "nan"], "--budget-s: a number of seconds > 0"),
    (["--impls", "cudaa"], "--impls: a comma separated subset"),
    (["--compressors", "qsgd,nope"], "--compressors: a comma separated subset of"),
    (["--compressors", ","], "--compressors: a comma separated subset of"),
])
def test_bad_arguments_exit_2_naming_the_option(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_measurement_that_raises_is_recorded_and_the_next_goes_on(tmp_path, monkeypatch, capsys) -> None:
    measure = bench.bench_one

    def out_of_memory(name: str, *args, **kwargs) -> dict:
        if name == "fp16":
            raise RuntimeError("CUDA out of memory. Tried to allocate 4.00 GiB\nmore")
        return measure(name, *args, **kwargs)

    monkeypatch.setattr(bench, "bench_one", out_of_memory)
    out = tmp_path / "bench.json"
    assert bench.main(["--sizes", "10", "--repeats", "1", "--compressors", "fp16,bf16", "--rotate-mib", "0",
                       "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["compressor"], r.get("error")) for r in record["results"]] == [
        ("fp16", "RuntimeError: CUDA out of memory. Tried to allocate 4.00 GiB"), ("bf16", None)]
    assert {r["compressor"] for r in record["rows"]} == {"bf16"} and record["not_measured"] == 0
    assert "fp16             reference  2^10 RuntimeError: CUDA out of memory" in capsys.readouterr().out
