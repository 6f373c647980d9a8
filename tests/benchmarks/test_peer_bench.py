"""The peer benchmark: how it refuses to run without GRACE, and a run against a stand-in GRACE written here (its
modules' loading, failures recorded, bytes and errors of each side, the JSON). Values and structure only, never
a time."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from benchmarks import peer_bench
from compressors.core.base import numba_installed

HEADER_2D = 40 + 2 * 8  # our payload's header for a 2-D tensor (40 + 8 a dimension)


@pytest.mark.parametrize("argv, says", [
    ([], "--grace PATH is needed"),
    (["--grace", "{tmp}"], "holds no grace_dl/torch/compressor"),
])
def test_without_grace_it_exits_2_with_one_line_saying_how_to_get_it(argv: list[str], says: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        peer_bench.main([a.format(tmp=tmp_path) for a in argv] + ["--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and says in err and "git clone https://github.com/sands-lab/grace" in err
    assert "Traceback" not in err and "usage" not in err


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def stand_in(root: Path) -> Path:
    """A GRACE-shaped folder: the base class, an fp16 and a top-k compressor that work, a natural that needs
    a package nobody has, a signsgd that raises, and no qsgd."""
    _write(root, "grace_dl/__init__.py", "")
    _write(root, "grace_dl/torch/__init__.py", """
        class Compressor:
            def __init__(self, average=True, tensors_size_are_same=True):
                self.average = average
        """)
    _write(root, "grace_dl/torch/compressor/fp16.py", """
        import torch
        from grace_dl.torch import Compressor

        class FP16Compressor(Compressor):
            def compress(self, tensor, name):
                return [tensor.to(torch.float16)], tensor.dtype

            def decompress(self, tensors, dtype):
                return tensors[0].to(dtype)
        """)
    _write(root, "grace_dl/torch/compressor/topk.py", """
        import torch
        from grace_dl.torch import Compressor

        class TopKCompressor(Compressor):
            def __init__(self, compress_ratio):
                super().__init__()
                self.ratio = compress_ratio

            def compress(self, tensor, name):
                flat = tensor.reshape(-1)
                indices = flat.abs().topk(int(flat.numel() * self.ratio)).indices
                return (flat[indices], indices), tensor.shape

            def decompress(self, tensors, shape):
                values, indices = tensors
                out = torch.zeros(shape.numel())
                out[indices] = values
                return out.view(shape)
        """)
    _write(root, "grace_dl/torch/compressor/natural.py", "import cupy_absent_from_this_test\n")
    _write(root, "grace_dl/torch/compressor/signsgd.py", """
        from grace_dl.torch import Compressor

        class SignSGDCompressor(Compressor):
            def compress(self, tensor, name):
                raise RuntimeError("stand-in failure\\nsecond line")
        """)
    return root


def test_a_run_against_a_stand_in_records_each_side_and_what_did_not_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grace = stand_in(tmp_path / "grace")
    out = tmp_path / "results" / "peers.json"
    keys = ["fp16", "fp16-torch", "topk", "natural", "signsgd", "qsgd"]  # the rows come in METHODS' order
    n, k = 16 * 64, 64
    rng = torch.get_rng_state()
    assert peer_bench.main(["--grace", str(grace), "--shape", "16,64", "--repeats", "2", "--pi", "0.0625",
                            "--methods", ",".join(keys), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert not list(out.parent.glob("*.tmp*"))
    assert record["shape"] == [16, 64] and record["n"] == n and record["peer"]["path"] == str(grace.resolve())
    rows = {r["method"]: r for r in record["rows"]}
    assert [r["method"] for r in record["rows"]] == ["fp16", "fp16-torch", "qsgd", "topk", "signsgd", "natural"]

    fp16 = rows["fp16"]
    assert fp16["ours_impl"] == "reference" and fp16["ours_header_nbytes"] == HEADER_2D
    assert fp16["ours_nbytes"] == HEADER_2D + 2 * n and fp16["peer_nbytes"] == 2 * n
    # the same cast on both sides: the same values back
    assert 0 < fp16["ours_rel_error"] == fp16["peer_rel_error"] < 1e-3
    for op in ("encode", "decode"):
        assert len(fp16[f"ours_{op}_runs_s"]) == len(fp16[f"peer_{op}_runs_s"]) == 2
        assert fp16[f"{op}_ratio"] == fp16[f"peer_{op}_s"] / fp16[f"ours_{op}_s"]
        assert fp16[f"ours_{op}_gbps"] == 4 * n / fp16[f"ours_{op}_s"] / 1e9
    # ours measured once for both fp16 rows; the second's peer is torch's cast
    torch_row = rows["fp16-torch"]
    assert all(torch_row[key] == value for key, value in fp16.items() if key.startswith("ours_"))
    assert torch_row["peer_source"] == "torch" and torch_row["peer_nbytes"] == 2 * n
    assert torch_row["peer_rel_error"] == fp16["peer_rel_error"]

    topk = rows["topk"]
    assert topk["ours_impl"] == ("numba" if numba_installed() else "reference")
    assert topk["ours_nbytes"] == HEADER_2D + 8 * k and topk["peer_nbytes"] == 12 * k  # int32 / int64 indices
    # the same k largest entries kept: the same decoded tensor
    assert topk["ours_rel_error"] == topk["peer_rel_error"]
    assert 0 < topk["ours_rel_error"] < 1

    assert rows["natural"]["peer_error"].startswith("ModuleNotFoundError: No module named 'cupy_absent_from_this_test'")
    assert rows["signsgd"]["peer_error"] == "RuntimeError: stand-in failure"
    assert rows["qsgd"]["peer_error"] == "FileNotFoundError: not in this checkout: grace_dl/torch/compressor/qsgd.py"
    for key in ("natural", "signsgd", "qsgd"):  # ours still measured, nothing to compare with
        row = rows[key]
        assert row["ours_encode_s"] > 0 and row["encode_ratio"] is None and row["decode_ratio"] is None
        assert "peer_nbytes" not in row and row["mapping"]

    printed = capsys.readouterr().out
    table = printed.splitlines()
    for row in record["rows"]:
        assert any(line.startswith(f"{row['label']} ") and row["peer"] in line for line in table)
    assert "  natural (grace NaturalCompressor): ModuleNotFoundError" in printed
    assert "  qsgd 8b l2 whole -> grace QSGDCompressor(127): bits 8 = 127 levels" in printed
    # the stand-in's modules are gone, its folder is off the path, and torch's generator as it was (the peer's is
    # seeded apart from the input's, and GRACE's randomk reseeds it)
    assert not [m for m in sys.modules if m.split(".")[0] == "grace_dl"] and str(grace.resolve()) not in sys.path
    assert torch.equal(torch.get_rng_state(), rng) and peer_bench.PEER_SEED != peer_bench.SEED

