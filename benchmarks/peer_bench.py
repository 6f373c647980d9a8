"""Our codecs beside a peer's: GRACE's PyTorch compressors (sands-lab/grace), in one process, on the CPU.

    python -m benchmarks.peer_bench --grace PATH [--shape 4096,1024] [--repeats 7] [--threads 1]
                                    [--pi 0.01] [--methods fp16,qsgd,...] [--out PATH]

GRACE is not part of this repository and is not copied into it: ``--grace`` names a local checkout
(``git clone https://github.com/sands-lab/grace``), whose ``grace_dl/torch/compressor/<method>.py``
modules are imported from there at run time. Their base package ``grace_dl.torch`` holds only the
abstract ``Compressor``, ``Memory`` and ``Communicator`` classes (no Horovod), so the checkout is put
first on ``sys.path`` for the imports and taken off again after; the ``grace_dl`` modules are dropped
from ``sys.modules`` on both sides, so that no other copy is picked up or left behind. Without
``--grace``, or with a folder that holds no ``grace_dl/torch/compressor``, it exits 2 saying how to get it.

For each method in ``METHODS`` (``--methods`` picks some), one float32 Gaussian tensor of ``--shape``
(seeded) is encoded and decoded by ours and by the peer, each operation in its own pass: one warm-up,
then ``--repeats`` timed runs, the median reported, under ``torch.set_num_threads(--threads)`` (our Numba
kernels use one thread), timed with ``time.perf_counter`` (``benchmarks.compressor_bench``'s helpers).
Ours is ``compressors.get(codec, impl="numba")`` where the codec has Numba kernels (else the reference),
``c.encode(x, out=payload)`` and ``c.decode(payload, out=y)`` into buffers made once; the peer's is
``compress(x, name)`` and ``decompress(tensors, ctx)`` as GRACE's communicators call them, which make
new tensors on every call (its interface has no output buffers). The peer's error feedback and
momentum (its ``Memory`` classes) and ours (``ErrorFeedback``) are not part of either timing.

Speeds are GB/s of float32 input (``4 n`` bytes a second, 1e9 bytes), with the same input's
``y.copy_(x)`` beside them for the machine's scale. ``x`` is ours over the peer's (> 1: ours faster).
Bytes sent: ours is the payload, its header included (40 + 8 per dimension: codec, shape, parameters;
the JSON has it apart); the peer's is the sum of the tensors ``compress`` returns, what GRACE's
communicators send (the ctx stays on the sender). ``rel. error`` is ``||decode(encode(x)) - x|| / ||x||``
of the first call, in float64: it shows that the two sides of a row do comparable work. GRACE's random
draws come from torch's global generator, seeded before each method (and restored after, since its
randomk reseeds it).

MAPPING: which of our parameters stand for each GRACE compressor, and how the two differ (bits
packing, index widths, how a choice or a norm is made), is each row's ``mapping`` in ``METHODS``;
it is printed under the table and saved in the JSON. In short: GRACE sends one byte an entry where
ours packs bits (signs, 1-bit, TernGrad), int64 indices where ours sends int32 (top-k, DGC), and
computes its norms in float32 where ours sums in float64 in a fixed order. A peer that cannot run
here (GRACE's natural needs CuPy and a CUDA tensor) is recorded with the reason, and its row keeps
our figures. Saved as JSON (``--out``, written to a temporary file and renamed) with the machine's
description.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import compressors
from compressors.core import wire
from compressors.core.base import numba_installed

from . import compressor_bench as bench
from . import record as record_

GRACE_URL = "https://github.com/sands-lab/grace"
# Where GRACE keeps its PyTorch compressors, relative to the checkout.
GRACE_COMPRESSORS = Path("grace_dl/torch/compressor")
# The tensor name GRACE's compress takes (its randomk seeds its choice with it).
TENSOR_NAME = "peer_bench"
# The input's seed, and the one torch's global generator gets before each peer method: another, since the
# same seed gives the same stream, and the peer's uniform draws would follow the Gaussian input's (a biased
# TernGrad).
SEED, PEER_SEED = 0, 1
# GRACE's efsignsgd takes a learning rate that only its aggregate and its memory use; its helper's default.
GRACE_EF_LR = 0.1
# A bucket longer than any tensor: the whole tensor shares one norm (QSGD) or one scale (TernGrad).
WHOLE = 2 ** 31 - 1
DEFAULT_OUT = "benchmarks/results/peers/peers.json"


@dataclasses.dataclass(frozen=True)
class Method:
    """One row: our codec and parameters, and the peer it is compared with."""
    key: str  # what --methods names
    label: str
    codec: str
    params: dict[str, Any]
    peer: str  # as the table shows it
    # GRACE's module (in GRACE_COMPRESSORS), class and its arguments; None: torch's own cast.
    module: str | None
    cls: str | None
    args: tuple[Any, ...]
    mapping: str
    flat: bool = False  # ours encodes the 1-D view of the input


# MAPPING: ours -> GRACE's, parameter for parameter, and what still differs.
def methods(pi: float) -> list[Method]:
    """The rows, in order, with ``pi`` as the sparse methods' share of entries sent (GRACE's compress_ratio)."""
    return [
        Method("fp16", "fp16", "fp16", {}, "grace FP16Compressor", "fp16", "FP16Compressor", (),
               "Both cast to IEEE half (round to nearest even) and back: 2 bytes an entry. GRACE keeps the dtype "
               "in its ctx; ours sends it in the header."),
        Method("fp16-torch", "fp16", "fp16", {}, "torch x.to(float16)", None, None, (),
               "The bare cast, x.to(torch.float16) and .to(torch.float32): what our reference encode does, "
               "without the header and the payload's checks."),
        Method("qsgd", "qsgd 8b l2 whole", "qsgd", {"bits": 8, "bucket": WHOLE, "norm": "l2"},
               "grace QSGDCompressor(127)", "qsgd", "QSGDCompressor", (127,),
               "bits 8 = 127 levels a side = GRACE's quantum_num 127; bucket 2**31-1 = the whole tensor; norm l2 "
               "= GRACE's tensor.norm(). Both round stochastically to level floor(r) or floor(r)+1 with r = "
               "|x|/norm*127, one byte an entry plus one float32 norm. Ours: sign-magnitude code, draws from a "
               "counter hash (reproducible), the norm summed in float64 in a fixed order; GRACE: two's-complement "
               "int8 (float16, 2 bytes an entry, from quantum_num 128 on), torch.rand draws, a float32 norm."),
        Method("onebit", "onebit", "onebit", {}, "grace OneBitCompressor", "onebit", "OneBitCompressor", (),
               "Ours as it trains: grouping column, a positive and a negative mean per column of the (out, in) "
               "view (CNTK's), bits packed (n/8 bytes + 8 a column). GRACE: one pair of means for the whole "
               "tensor, one uint8 an entry (n + 8 bytes). Both split at x < 0; a NaN goes to ours' negative "
               "side, GRACE's positive one."),
        Method("onebit-1d", "onebit 1-D", "onebit", {}, "grace OneBitCompressor", "onebit", "OneBitCompressor", (),
               "Ours on the 1-D view of the input: one group, GRACE's semantics (one pair of means). Still "
               "bits packed (n/8 + 8 bytes) against GRACE's uint8 an entry, and float64 sums against float32.",
               flat=True),
        Method("topk", f"topk pi={pi:g}", "topk", {"pi": pi}, f"grace TopKCompressor({pi:g})", "topk",
               "TopKCompressor", (pi,),
               "pi = GRACE's compress_ratio. Ours: k = ceil(pi n), the exact k largest magnitudes with ties by "
               "index, ascending int32 indices (8 bytes an entry sent); GRACE: k = max(1, int(n ratio)) "
               "(floor), torch.topk unsorted, int64 indices (12 bytes an entry sent)."),
        Method("randomk", f"randomk pi={pi:g}", "randomk", {"pi": pi}, f"grace RandomKCompressor({pi:g})",
               "randomk", "RandomKCompressor", (pi,),
               "pi = GRACE's compress_ratio; neither sends indices, both send the values unscaled. Ours: the first "
               "k = ceil(pi n) of a keyed permutation (a Feistel network on the counter hash), the 32-bit key in the "
               "body (4 + 4k bytes), and the decoder draws the k indices again; GRACE: torch.manual_seed(hash of name and step) (its global generator), "
               "randperm(n)[:k] with k = int(n ratio), 4k bytes, and its decompress takes the indices from the "
               "sender's ctx (every rank drew the same), so its decode draws nothing."),
        Method("signsgd", "signsgd", "signsgd", {}, "grace SignSGDCompressor", "signsgd", "SignSGDCompressor", (),
               "Both: bit 1 for x >= 0, decoded to +1 / -1 (the majority vote is the aggregation, not timed). "
               "Ours packs 1 bit an entry with a float32 scale (n/8 + 4 bytes; 0 for an all-zero tensor, NaN and "
               "Inf carried); GRACE sends one uint8 an entry (n bytes)."),
        Method("efsignsgd", "efsignsgd", "efsignsgd", {}, f"grace EFSignSGDCompressor(lr={GRACE_EF_LR:g})",
               "efsignsgd", "EFSignSGDCompressor", (GRACE_EF_LR,),
               "Both: mean |x| times the signs (bit 1 for x >= 0). Ours packs the bits (n/8 + 4 bytes), the mean "
               "summed in float64; GRACE one uint8 an entry and a float32 mean (n + 4). GRACE's lr scales only its "
               "memory and aggregate; the error feedback of either is not timed."),
        Method("terngrad-clip", "terngrad clip=2.5", "terngrad", {"clip": 2.5}, "grace TernGradCompressor",
               "terngrad", "TernGradCompressor", (),
               "clip 2.5 = GRACE's fixed clamp to 2.5 sigma; bucket (default) = the whole tensor: scale max |clamped "
               "x|, each entry scale * sign * Bernoulli(|x| / scale). Ours: 2-bit codes packed (n/4 + 4 bytes), "
               "sigma in float64 in a fixed order, counter-hash draws; GRACE: int8 an entry and a float32 scale "
               "(n + 4 bytes), sigma in float32, torch draws, two .item() reads."),
        Method("terngrad", "terngrad", "terngrad", {}, "grace TernGradCompressor", "terngrad", "TernGradCompressor",
               (), "Ours' default, no clamp (unbiased) against GRACE's, which always clamps to 2.5 sigma; otherwise "
                   "as terngrad-clip."),
        Method("natural", "natural", "natural", {}, "grace NaturalCompressor", "natural", "NaturalCompressor", (),
               "Both round each entry to a neighbouring power of two, unbiased. Ours: the 8-bit exponent and a "
               "packed sign bit (n + n/8 bytes), every float32 exponent kept; GRACE: one byte an entry (sign and a "
               "7-bit exponent offset by 18: magnitudes clamped to [2**-108, 2**18], smaller ones sent as 0). "
               "GRACE's goes through CuPy (cupy.fromDlpack): it needs CuPy and a CUDA tensor."),
        Method("dgc", f"dgc pi={pi:g}", "dgc", {"pi": pi}, f"grace DgcCompressor({pi:g})", "dgc", "DgcCompressor",
               (pi,),
               "pi = GRACE's compress_ratio; the momentum correction lives in each side's memory (not timed). "
               "Ours' payload is top-k's (exactly ceil(pi n) entries, 8 bytes each); GRACE takes a threshold from "
               "a 1% random sample, moves it up to 10 times until 0.7..1.3 x n ratio entries pass, and sends "
               "those: a count that varies, int64 indices (12 bytes an entry sent; bytes of the first call)."),
    ]


KEYS = tuple(m.key for m in methods(0.01))
GENERAL = ("Ours writes into buffers made once and checks the payload at decode; GRACE's calls make new tensors "
           "every time. Neither side's error feedback or momentum is timed.")


def grace_problem(path: str | None) -> str | None:
    """Why ``path`` cannot serve as the GRACE checkout (one line), or None."""
    get = f"git clone {GRACE_URL} and pass its folder as --grace PATH"
    if not path:
        return f"peer_bench: --grace PATH is needed, a local checkout of GRACE: {get}"
    if not (Path(path) / GRACE_COMPRESSORS).is_dir() or not (Path(path) / "grace_dl/torch/__init__.py").is_file():
        return f"peer_bench: {path} holds no {GRACE_COMPRESSORS} (a checkout of GRACE): {get}"
    return None


def _drop_grace_modules() -> None:
    for name in [n for n in sys.modules if n == "grace_dl" or n.startswith("grace_dl.")]:
        del sys.modules[name]


@contextlib.contextmanager
def grace_on_path(path: Path) -> Iterator[None]:
    """GRACE's ``grace_dl`` importable from ``path`` (first on sys.path) inside the block, and no copy of it
    imported before or left after: a second checkout (a test's stand-in) gets its own modules."""
    _drop_grace_modules()
    sys.path.insert(0, str(path))
    try:
        yield
    finally:
        sys.path.remove(str(path))
        _drop_grace_modules()


def grace_compressor(path: Path, method: Method) -> Any:
    """An instance of ``method``'s GRACE compressor, imported from the checkout (inside ``grace_on_path``);
    raises where its module is missing or does not import (an ImportError names the package it needs)."""
    if not (path / GRACE_COMPRESSORS / f"{method.module}.py").is_file():
        raise FileNotFoundError(f"not in this checkout: {GRACE_COMPRESSORS / (method.module + '.py')}")
    module = importlib.import_module(f"grace_dl.torch.compressor.{method.module}")
    # A grace_dl installed elsewhere would shadow the checkout: compare the file's folder.
    if Path(module.__file__).resolve().parent != (path / GRACE_COMPRESSORS).resolve():
        raise ImportError(f"grace_dl.torch.compressor.{method.module} came from {module.__file__}, not {path}")
    return getattr(module, method.cls)(*method.args)


@dataclasses.dataclass
class Side:
    """One side of a row: encode the input to a payload, decode a payload, and its size in bytes."""
    encode: Callable[[], Any]
    decode: Callable[[Any], torch.Tensor]
    nbytes: Callable[[Any], int]


def ours(method: Method, x: torch.Tensor, y: torch.Tensor) -> tuple[Side, str, int]:
    """Our side (into buffers made here), its implementation and its payload's header bytes."""
    impl = "numba" if compressors.has_numba(method.codec) and numba_installed() else "reference"
    c = compressors.get(method.codec, impl=impl, **method.params)
    source = x.view(-1) if method.flat else x
    payload = torch.empty(c.payload_nbytes(source.shape), dtype=torch.uint8)
    c.warm_up()  # the kernels compiled or loaded before the warm-up run, which then only warms the caches
    side = Side(encode=lambda: c.encode(source, step=1, out=payload),
                decode=lambda p: c.decode(p, out=y), nbytes=lambda p: int(p.numel()))
    return side, impl, wire.header_nbytes(source.dim())


def peer(compressor: Any, x: torch.Tensor) -> Side:
    """A GRACE compressor's side: compress to (tensors, ctx), decompress both; the tensors are what it sends."""
    return Side(encode=lambda: compressor.compress(x, TENSOR_NAME), decode=lambda p: compressor.decompress(*p),
                nbytes=lambda p: sum(t.numel() * t.element_size() for t in p[0]))


def torch_cast(x: torch.Tensor) -> Side:
    """torch's own cast to half and back, the plainest fp16 peer."""
    return Side(encode=lambda: x.to(torch.float16), decode=lambda h: h.to(torch.float32),
                nbytes=lambda h: h.numel() * h.element_size())


def rel_error(decoded: torch.Tensor, x: torch.Tensor) -> float:
    """||decoded - x|| / ||x|| in float64."""
    diff = decoded.reshape(-1).double() - x.reshape(-1).double()
    return float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(x.double()))


def measure(side: Side, x: torch.Tensor, repeats: int) -> dict[str, Any]:
    """Bytes and error of one call, then encode and decode each in its own pass (warm-up + ``repeats``)."""
    payload = side.encode()
    nbytes = side.nbytes(payload)
    error = rel_error(side.decode(payload), x)
    device, one = x.device, bench.Rotation(1)
    enc = bench.runs(lambda i: side.encode(), one, repeats, device)
    payload = side.encode()  # ours' buffer holds it already; the peer's decode takes this call's tensors
    dec = bench.runs(lambda i: side.decode(payload), one, repeats, device)
    n = x.numel()
    out: dict[str, Any] = {"nbytes": nbytes, "rel_error": error}
    for op, times in (("encode", enc), ("decode", dec)):
        seconds = statistics.median(times)
        out.update({f"{op}_s": seconds, f"{op}_gbps": 4 * n / seconds / 1e9, f"{op}_runs_s": times})
    return out


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}"


def run_method(method: Method, grace: Path, x: torch.Tensor, y: torch.Tensor, repeats: int,
               cache: dict[tuple[str, str, bool], dict[str, Any]]) -> dict[str, Any]:
    """One row: ours (measured once per configuration: ``cache``) and the peer's, each side's failure recorded
    as its error (the other side still measured)."""
    row: dict[str, Any] = {"method": method.key, "label": method.label, "codec": method.codec,
                           "params": method.params, "flat": method.flat, "peer": method.peer,
                           "peer_source": str(GRACE_COMPRESSORS / f"{method.module}.py") if method.module else "torch",
                           "mapping": method.mapping}
    key = (method.codec, repr(sorted(method.params.items())), method.flat)
    if key not in cache:
        try:
            side, impl, header = ours(method, x, y)
            cache[key] = {"impl": impl, "header_nbytes": header, **measure(side, x, repeats)}
        except (RuntimeError, ValueError, MemoryError) as error:
            cache[key] = {"error": first_line(error)}
    row.update({f"ours_{k}": v for k, v in cache[key].items()})
    # GRACE's random draws (qsgd, terngrad, dgc) from a seeded global generator, and its randomk's reseeding
    # undone after.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(PEER_SEED)
        try:
            side = torch_cast(x) if method.module is None else peer(grace_compressor(grace, method), x)
            row.update({f"peer_{k}": v for k, v in measure(side, x, repeats).items()})
        except Exception as error:  # noqa: BLE001  (the peer's code, whatever it raises, is recorded)
            row["peer_error"] = first_line(error)
    for op in ("encode", "decode"):
        both = f"ours_{op}_s" in row and f"peer_{op}_s" in row
        row[f"{op}_ratio"] = row[f"peer_{op}_s"] / row[f"ours_{op}_s"] if both else None
    return row


def copy_reference(x: torch.Tensor, y: torch.Tensor, repeats: int) -> dict[str, Any]:
    """``y.copy_(x)``: the median, GB/s read plus written (as compressor_bench) and GB/s of input."""
    copy = bench.copy_run([x], [y], repeats)
    return {**copy, "copy_input_gbps": 4 * x.numel() / copy["copy_s"] / 1e9}


def format_table(rows: list[dict[str, Any]], copy: dict[str, Any], repeats: int, threads: int) -> str:
    lw = max([10, *(len(r["label"]) for r in rows)])
    pw = max([4, *(len(r["peer"]) for r in rows)])
    head = (f"{'method':<{lw}} {'peer':<{pw}} {'enc ours':>9} {'enc peer':>9} {'x':>6} {'dec ours':>9} "
            f"{'dec peer':>9} {'x':>6} {'bytes ours':>11} {'bytes peer':>11} {'err ours':>9} {'err peer':>9}")
    lines = [head, "-" * len(head)]

    def num(row: dict[str, Any], key: str, width: int, fmt: str) -> str:
        value = row.get(key)
        return f"{value:>{width}{fmt}}" if value is not None else f"{'-':>{width}}"

    for r in rows:
        lines.append(f"{r['label']:<{lw}} {r['peer']:<{pw}} {num(r, 'ours_encode_gbps', 9, '.3f')} "
                     f"{num(r, 'peer_encode_gbps', 9, '.3f')} {num(r, 'encode_ratio', 6, '.2f')} "
                     f"{num(r, 'ours_decode_gbps', 9, '.3f')} {num(r, 'peer_decode_gbps', 9, '.3f')} "
                     f"{num(r, 'decode_ratio', 6, '.2f')} {num(r, 'ours_nbytes', 11, 'd')} "
                     f"{num(r, 'peer_nbytes', 11, 'd')} {num(r, 'ours_rel_error', 9, '.4f')} "
                     f"{num(r, 'peer_rel_error', 9, '.4f')}")
    lines.append(f"GB/s of float32 input (4n bytes / s), median of {repeats} run(s), {threads} thread(s); x: ours over "
                 f"the peer's (> 1: ours faster). The copy y.copy_(x): {copy['copy_input_gbps']:.3f} GB/s of input "
                 f"({copy['copy_gbps']:.3f} read + written). Ours' bytes include its header.")
    failed = [r for r in rows if "peer_error" in r or "ours_error" in r]
    if failed:
        lines.append("not run:")
        for r in failed:
            if "ours_error" in r:
                lines.append(f"  {r['label']} (ours): {r['ours_error']}")
            if "peer_error" in r:
                lines.append(f"  {r['label']} ({r['peer']}): {r['peer_error']}")
    lines.append(f"MAPPING (ours -> peer). {GENERAL}")
    seen: set[str] = set()
    for r in rows:
        if r["method"] not in seen:
            seen.add(r["method"])
            lines.append(f"  {r['label']} -> {r['peer']}: {r['mapping']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.peer_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--grace", default=None, metavar="PATH",
                    help=f"a local checkout of GRACE ({GRACE_URL}); its compressors are imported from there")
    ap.add_argument("--shape", default="4096,1024", help="the input's shape, comma separated")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per operation (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--pi", type=float, default=0.01,
                    help="share of entries the sparse methods send (topk, randomk, dgc; GRACE's compress_ratio)")
    ap.add_argument("--methods", default=None, help=f"comma separated subset of {','.join(KEYS)}")
    ap.add_argument("--out", default=DEFAULT_OUT, metavar="PATH", help="where the JSON goes")
    ap.set_defaults(device="cpu")  # what record.header reads: this benchmark runs on the CPU
    args = ap.parse_args(argv)
    problem = grace_problem(args.grace)
    if problem:  # one line, no usage: the fix is to fetch GRACE
        ap.exit(2, problem + "\n")
    try:
        args.shape = [int(s) for s in record_.names(args.shape)]
    except ValueError:
        ap.error(f"--shape: comma separated integers expected, got {args.shape!r}")
    if not args.shape or any(s < 1 for s in args.shape) or torch.Size(args.shape).numel() > 2 ** 30:
        ap.error("--shape: sizes >= 1, at most 2**30 entries in all")
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be >= 1")
    if not 0 < args.pi <= 1:
        ap.error(f"--pi: a share in (0, 1] expected, got {args.pi}")
    args.methods = record_.subset(ap, "--methods", args.methods or ",".join(KEYS), KEYS)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    grace = Path(args.grace).resolve()
    torch.set_num_threads(args.threads)
    info = bench.machine_info(torch.device("cpu"), args.threads)
    print(f"# {info['cpu_model']} | torch {info['torch']} | threads {info['torch_num_threads']} | "
          f"GRACE from {grace} | {info['date']}", flush=True)
    x = torch.randn(args.shape, generator=torch.Generator().manual_seed(SEED))
    y = torch.zeros_like(x)  # touched: no run pays the first write's page faults
    copy = copy_reference(x, torch.zeros_like(x), args.repeats)
    chosen = [m for m in methods(args.pi) if m.key in args.methods]
    rows: list[dict[str, Any]] = []
    cache: dict[tuple[str, str, bool], dict[str, Any]] = {}
    with grace_on_path(grace):
        for method in chosen:
            print(f"  {method.label} vs {method.peer} ...", file=sys.stderr, flush=True)
            rows.append(run_method(method, grace, x, y, args.repeats, cache))
    record = record_.header("benchmarks.peer_bench", argv, args, info)
    record.update({"peer": {"name": "GRACE", "url": GRACE_URL, "path": str(grace)}, "shape": list(x.shape),
                   "n": x.numel(), "copy": copy, "general": GENERAL, "rows": rows})
    record_.save(record, args.out)
    print(format_table(rows, copy, args.repeats, args.threads), flush=True)
    print(f"# saved {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
