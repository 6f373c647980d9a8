"""Helpers shared by the test files: inputs, the papers' arithmetic (k of the sparse methods),
payload bytes as the wire format documents them, the kernels' comparisons, sweep files.

Independent of the code under test, except where a helper says it reads the registry.
Nothing here snapshots the registry at import: a codec registered later (tests/conftest.py
imports the modules named in ``LOWPREC_TEST_IMPORTS``) is seen by every helper.
"""
from __future__ import annotations

import functools
import json
import math
import os
import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import compressors as C

ROOT = Path(__file__).resolve().parent.parent  # the checkout

# The methods of the first released payload format (wire ids 1 to 9).
FIRST_METHODS = ("fp32", "fp16", "bf16", "dynamic8", "linear8", "qsgd", "onebit", "adaptive", "topk")
# Its sparse methods: (index, value) bodies, the k = ceil(pi * n) largest entries.
SPARSE = ("adaptive", "topk")


# ---------------------------------------------------------------- inputs and arithmetic


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed))


def roundtrip(c: C.Compressor, x: torch.Tensor, **kw) -> torch.Tensor:
    return c.decode(c.encode(x, **kw))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def ring(nbytes: int, world: int) -> float:
    """Ring all_reduce: 2 (N-1) / N * B."""
    return 2.0 * (world - 1) / world * nbytes if world > 1 else 0.0


def k_sent(pi: float, n: int) -> int:
    """The entries a sparse method sends: ceil(pi * n) with pi taken as the decimal the user wrote
    (so 0.1 * 1000 is 100), at least 1 when n > 0, at most n."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(Fraction(repr(pi)) * n)))


def rows_cols(shape: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D view (shape[0], numel // shape[0]); 0-D/1-D: one row."""
    n = math.prod(shape)
    if n == 0:
        return 0, 0
    if len(shape) < 2:
        return 1, n
    return shape[0], n // shape[0]


def groups_of(shape: tuple[int, ...], grouping: str = "row") -> tuple[int, int]:
    """(number of groups, entries per group): the papers' columns are the columns of the 2-D
    view (per input unit), ``row`` its rows; 0-D/1-D tensors are one group either way."""
    rows, cols = rows_cols(shape)
    return (cols, rows) if grouping == "column" and len(shape) >= 2 else (rows, cols)


def as_groups(x: torch.Tensor, grouping: str = "row") -> torch.Tensor:
    """x as a (groups, length) matrix whose rows are the groups."""
    rows, cols = rows_cols(tuple(x.shape))
    m = x.reshape(rows, cols)
    return m.t() if grouping == "column" and x.dim() >= 2 else m


def top_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest |x| (NaN largest), ties broken by lowest index."""
    mag = np.where(np.isnan(x), np.inf, np.abs(x))
    order = np.lexsort((np.arange(x.size), -mag))  # by -mag, then index
    return np.sort(order[:k])


def dettmers_table() -> list[float]:
    """Dettmers' 126 dynamic-tree magnitudes, from the rule: decade k (10^-k) holds 2^(6-k)
    entries; the fraction range [0.1, 1] is split at 0.45, each half cut into equal bins,
    each entry its bin's midpoint."""
    out = []
    for k in range(6):
        per_half = 2 ** (6 - k) // 2
        for lo, hi in ((0.1, 0.45), (0.45, 1.0)):
            w = (hi - lo) / per_half
            out += [(lo + w * (i + 0.5)) / 10**k for i in range(per_half)]
    return sorted(out)


def columns(x: torch.Tensor) -> torch.Tensor:
    """The columns of the 2-D view (shape[0], numel // shape[0]), as rows."""
    return x.reshape(x.shape[0], -1).t()


# ---------------------------------------------------------------- the registry's codecs (read when called)


def configs(names=None) -> list[tuple[str, dict]]:
    """Every registered codec (or those of ``names``) with each parameter set of its ``examples``."""
    return [(name, dict(p)) for name, cls in C.COMPRESSORS.items() if names is None or name in names
            for p in cls.examples]


def cfg_id(cfg) -> str:
    name, p = cfg
    return name + "".join(f"-{k}{v}" for k, v in p.items())


def holds_fp32_range(name: str) -> bool:
    """False for a cast to a type narrower than float32's range (fp16: values beyond 65504 become inf)."""
    dtype = C.COMPRESSORS[name].cast_dtype
    return dtype is None or torch.finfo(dtype).max >= torch.finfo(torch.float32).max / 2


# ---------------------------------------------------------------- payload bytes (compressors/core/wire.py's layout)


FIXED = struct.Struct("<4sBBBBIIIfQQ")  # the documented header layout, 40 bytes
HEADER_FIELDS = ["magic", "version", "codec", "dtype", "ndim", "p0", "p1", "p2", "p3", "numel", "body", "shape"]


def sample(shape=(3, 4), seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed))


def valid(name: str, p: dict | None = None, shape=(3, 4)) -> tuple[C.Compressor, torch.Tensor]:
    """A codec and a payload it made of a small input."""
    c = C.get(name, **(p or {}))
    return c, c.encode(sample(shape), step=1)


def raw(payload: torch.Tensor) -> bytearray:
    return bytearray(payload.numpy().tobytes())


def tensor(b: bytes | bytearray) -> torch.Tensor:
    return torch.tensor(list(b), dtype=torch.uint8)


def unpack_header(b: bytes | bytearray) -> list:
    fields = list(FIXED.unpack(bytes(b[:40])))
    ndim = fields[4]
    return fields + [list(struct.unpack(f"<{ndim}Q", bytes(b[40:40 + 8 * ndim])))]


def repack(b: bytes | bytearray, **changes) -> bytearray:
    """``b`` with header fields replaced (names as in wire.py's docstring)."""
    fields = dict(zip(HEADER_FIELDS, unpack_header(b)))
    old_len = 40 + 8 * fields["ndim"]
    if "shape" in changes and "ndim" not in changes:
        changes["ndim"] = len(changes["shape"])
    fields.update(changes)
    head = FIXED.pack(*(fields[k] for k in HEADER_FIELDS[:-1]))
    head += struct.pack(f"<{len(fields['shape'])}Q", *fields["shape"])
    return bytearray(head) + b[old_len:]


def rejects(c: C.Compressor, payload, match: str | None = None) -> None:
    with pytest.raises(C.PayloadError, match=match):
        c.decode(payload)


def decodes_or_rejects(c: C.Compressor, payload: torch.Tensor):
    """The contract for arbitrary bytes: a tensor or PayloadError, nothing else."""
    try:
        out = c.decode(payload)
    except C.PayloadError:
        return None
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    return out


def dense(name: str) -> bool:
    """A method without indices in its body: every body of the right length decodes (reads the registry)."""
    return not C.COMPRESSORS[name].sparse


def must_decode(name: str, b: bytes) -> bool:
    """Every body of the right length is a valid payload of a dense method, except linear8
    bodies holding code 255, which its encoder never emits (the last n bytes are its codes)."""
    if not dense(name):
        return False
    if name == "linear8":
        n = math.prod(unpack_header(b)[11])
        return n == 0 or 255 not in bytes(b[len(b) - n:])
    return True


# ---------------------------------------------------------------- implementations compared (Numba, CUDA)


@functools.cache
def kernel_inputs() -> dict[str, torch.Tensor]:
    """Inputs of many shapes and values (0, 1, odd sizes, 2**k +- 1, non-contiguous, +-0, denormals,
    huge values, ties, NaN and Inf) on which implementations must agree; the same ones every call."""
    g = torch.Generator().manual_seed(11)
    cases = {f"n{n}": torch.randn(n, generator=g) for n in (0, 1, 2, 7, 8, 9, 15, 17, 1023, 1025, 4099)}
    cases.update({
        "3x5": torch.randn(3, 5, generator=g),
        "8x16": torch.randn(8, 16, generator=g) * 1e-3,
        "33x31": torch.randn(33, 31, generator=g),
        "2x3x4x5": torch.randn(2, 3, 4, 5, generator=g),
        "0x4": torch.randn(0, 4, generator=g),
        "4x1": torch.randn(4, 1, generator=g),
        "transposed": torch.randn(17, 40, generator=g).t(),
        "strided": torch.randn(300, generator=g)[::3],
        "zeros": torch.zeros(64),
        "signed_zeros": torch.tensor([0.0, -0.0] * 40),
        "denormals": torch.randn(100, generator=g) * 1e-40,
        "huge": torch.randn(100, generator=g) * 3e38,
        "ties": torch.tensor([1.0, -1.0, 0.5, -0.5] * 30),
        "ones_and_tiny": torch.cat([torch.ones(5), torch.full((60,), 1e-7), -torch.ones(3)]),
        "inf": torch.tensor([1.0, float("inf"), -2.0, 3.0] * 10),
        "neg_inf": torch.tensor([1.0, -float("inf"), -2.0, 3.0] * 10),
        "nan": torch.tensor([1.0, float("nan"), -2.0, 3.0] * 10),
        "nan_inf": torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5, -0.0] * 9),
    })
    return cases


def canonical(values: np.ndarray) -> np.ndarray:
    """uint32 words with every NaN pattern replaced by one."""
    words = values.view(np.uint32).copy()
    nan = (words & 0x7F800000) == 0x7F800000
    nan &= (words & 0x007FFFFF) != 0
    words[nan] = 0x7FC00000
    return words


def same_payload(a: torch.Tensor, b: torch.Tensor, body_start: int) -> None:
    """Byte-identical, but for the bits of NaNs in the body's aligned float32 words."""
    assert a.numel() == b.numel()
    x, y = a.numpy(), b.numpy()
    assert bytes(x[:body_start]) == bytes(y[:body_start])
    end = body_start + (x.size - body_start) // 4 * 4
    wx, wy = x[body_start:end].view(np.uint32), y[body_start:end].view(np.uint32)
    nan = lambda w: ((w & 0x7F800000) == 0x7F800000) & ((w & 0x007FFFFF) != 0)  # noqa: E731
    both = nan(wx) & nan(wy)
    differ = np.flatnonzero((wx != wy) & ~both)
    assert differ.size == 0, f"words differ at body offsets {(differ[:8] * 4).tolist()}"
    assert bytes(x[end:]) == bytes(y[end:])


# ---------------------------------------------------------------- sweep files and results folders


def numba_cache_dir() -> str:
    """The folder of the Numba kernels' disk cache this test process uses (compressors/kernels:
    NUMBA_CACHE_DIR, else ``$XDG_CACHE_HOME/lowprec/numba``, else ``~/.cache/lowprec/numba``), for the
    processes a test starts with a HOME of its own: without it each of their Ray workers compiled
    the kernels anew in that empty HOME, most of a minute on 2 cores."""
    return os.environ.get("NUMBA_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lowprec" / "numba")


def write(tmp_path: Path, text: str | bytes, name: str = "sweep.yaml") -> Path:
    """``text`` (or raw bytes) written to ``tmp_path / name``."""
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# A sweep file's top: the workload a setting at line 8 or a ``sweep:`` key at line 8 follows.
SWEEP_HEADER = """\
name: t
workload:
  model: mlp
  width: 8
  depth: 1
  epochs: 1
  target_accuracy: 0.9
"""

# A tiny sweep: the baseline trials of a small MLP; its workload is on line 2.
TINY_SWEEP = """\
name: t
workload: {model: mlp, width: 8, depth: 1, epochs: 2, target_accuracy: 0.9}
"""


def finished_sweep(tmp_path: Path, text: str = TINY_SWEEP):
    """A sweep whose every trial already has a record, so run_sweep never needs Ray."""
    from orchestrator.study.records import make_record, write_record
    from orchestrator.study.sweep_file import load_sweep

    sweep = load_sweep(write(tmp_path, text))
    results = tmp_path / "results" / sweep.name
    for trial in sweep.trials:
        write_record(results, make_record(trial, "ok", None, []))
    return sweep, results


# ---------------------------------------------------------------- trial records as the training loop reports them


def epochs(epoch_s: float, step_s: float, accuracies: list[float], target: float) -> list[dict]:
    """The per-epoch metrics the training loop reports, for these accuracies."""
    rows, reached, steps = [], None, None
    for epoch, accuracy in enumerate(accuracies, 1):
        if reached is None and accuracy >= target:
            reached, steps = epoch * epoch_s, epoch * round(epoch_s / step_s)
        rows.append({
            "epoch": epoch, "train_time_s": epoch * epoch_s, "test_accuracy": accuracy, "test_loss": 0.3,
            "train_loss": 0.3, "step_time_s": step_s, "samples_per_s": 64 / step_s,
            "compute_s": step_s * 3 / 4, "exposed_comm_s": step_s / 4,
            "encode_s": step_s / 8, "comm_s": step_s / 2, "decode_s": step_s / 8,
            "bytes_sent": 1000.0, "compression_ratio": 4.0, "time_to_target_s": reached,
            "steps_to_target": steps, "status": "running" if epoch < len(accuracies) else "ok",
        })
    return rows


def record(compressor: str, seed: int, history: list[dict], workers: int = 1, lr: float = 0.1,
           params: dict | None = None, algorithm: str | None = "allreduce", status: str = "ok") -> dict:
    """A trial record written here (no sweep file): the settings a results table groups by."""
    from orchestrator.study.records import make_record

    settings = {"compressor": compressor, "compressor_params": params or {}, "algorithm": algorithm,
                "num_workers": workers, "seed": seed, "lr": lr, "target_accuracy": 0.9}
    name = f"{compressor}-lr{lr}-w{workers}-s{seed}"
    return make_record({"name": name, "trial_id": name, **settings}, status, None, history)


# ---------------------------------------------------------------- command lines in a fresh interpreter


def run_mains(module: str, cases: dict[str, list[str]], timeout: float = 300) -> dict[str, dict]:
    """``python -m module *argv`` for each case, all in one new interpreter (one start-up, one import
    of torch), one case after the other: per case its exit status, stdout and stderr (an uncaught
    exception's traceback included); under "modules" every module imported by the end."""
    done = subprocess.run([sys.executable, "-m", "tests.mains", module, json.dumps(cases)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
