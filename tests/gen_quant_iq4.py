#!/usr/bin/env python3
"""Fixtures of IQ4_NL and IQ4_XS for tests/test_quant.c: GGML blocks and what the gguf
package's numpy code makes of them (gguf.quants.IQ4_NL / IQ4_XS dequantize_blocks).

    python3 tests/gen_quant_iq4.py [--out tests/fixtures/quant]

Writes OUT/iq4.safetensors (gen_quant.py's deterministic serializer, fixed seed):

  dq.<TYPE>.in   U8   random blocks: random bytes (every nibble, every 6-bit IQ4_XS scale),
                      then the f16 d of each block overwritten with a finite half (half of them
                      random finite bits, subnormals and +-65504 included; half realistic
                      scales N(0, 1) x 10^U(-4, 1)), as gen_quant.py does for the other types
  dq.<TYPE>.out  F32  gguf.quants.dequantize(in, TYPE)
  nl_real.in / .out   IQ4_NL blocks of a real weight distribution: gguf has no IQ4 quantizer,
                      so this generator picks, per block of 32 normal floats, d = max|x| / 127
                      and the nearest table level per element (its own choice, only to get
                      realistic index statistics), then records gguf's dequantization of them

and OUT/iq4.gguf (gguf.GGUFWriter): tensors "nl" (IQ4_NL, 2 rows of 32) and "xs" (IQ4_XS, one
row of 256), the first blocks of the dq.* inputs, for attn info (tests/cli_tests.cmake).

The package has no IQ4 quantizer (quantize_blocks raises NotImplementedError), so there are no
qz.* entries: attn has none either.  The C test compares every float exactly (memcmp).
"""
import argparse
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, IQ4_NL

from gen_quant import finite_halves, st_serialize

N_ELEMS = 4096  # per type: 128 blocks of 32, 16 of 256


def dq_case(g, t):
    be, bb = GGML_QUANT_SIZES[t]
    nb = N_ELEMS // be
    raw = g.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    raw[:, 0:2] = finite_halves(g, nb).view(np.uint8).reshape(nb, 2)
    data = raw.reshape(-1)
    out = np.asarray(dequantize(data, t), dtype=np.float32).reshape(-1)
    assert out.size == N_ELEMS
    return data, out


def nl_real(g, nb=64):
    kv = np.array(IQ4_NL.kvalues, dtype=np.float32)
    x = (g.standard_normal((nb, 32)) * 0.02).astype(np.float32)
    d = (np.abs(x).max(axis=1) / 127.0).astype(np.float16)
    idx = np.abs(x[:, :, None] / d.astype(np.float32)[:, None, None] - kv).argmin(axis=2)
    idx = idx.astype(np.uint8)
    qs = idx[:, :16] | (idx[:, 16:] << 4)
    data = np.concatenate([d.view(np.uint8).reshape(nb, 2), qs], axis=1).reshape(-1)
    out = np.asarray(dequantize(data, T.IQ4_NL), dtype=np.float32).reshape(-1)
    return data, out


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "fixtures", "quant"))
    args = ap.parse_args()
    g = np.random.default_rng(20261126)
    tensors = {}
    for t in (T.IQ4_NL, T.IQ4_XS):
        data, out = dq_case(g, t)
        tensors[f"dq.{t.name}.in"] = data
        tensors[f"dq.{t.name}.out"] = out
    data, out = nl_real(g)
    tensors["nl_real.in"], tensors["nl_real.out"] = data, out
    meta = {"generator": "tests/gen_quant_iq4.py", "gguf": "0.19.0", "numpy": np.__version__}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "iq4.safetensors")
    with open(path, "wb") as f:
        f.write(st_serialize(tensors, meta))
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")
    gpath = os.path.join(args.out, "iq4.gguf")
    w = gguf.GGUFWriter(gpath, "iq4_fixture")
    w.add_tensor("nl", tensors["dq.IQ4_NL.in"][:36].reshape(2, 18), raw_dtype=T.IQ4_NL)
    w.add_tensor("xs", tensors["dq.IQ4_XS.in"][:136].reshape(1, 136), raw_dtype=T.IQ4_XS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {gpath}: {os.path.getsize(gpath)} bytes")


if __name__ == "__main__":
    main()
