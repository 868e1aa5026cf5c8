#!/usr/bin/env python3
"""Writes the GGUF fixtures of tests/test_gguf.c with the `gguf` package (llama.cpp's Python
writer, pip install gguf), and for each an expected listing read back with gguf.GGUFReader:

    fixtures/gguf/NAME.gguf      the file (a few KB)
    fixtures/gguf/NAME.txt       what the reader sees, one record a line (below)

Run from tests/: python3 gen_gguf.py.  The files are committed; the tests never need Python.

Listing lines (strings as 'x' + hex of their UTF-8 bytes, so that any byte survives):
    version V / alignment A / data_offset D / kv_count N / tensor_count N
    kv KEY TYPE N VALUE                        a scalar (N = 1; STRING: N = its byte length)
    kv KEY ARRAY ELEMTYPE N V1 V2 ...          an array
    tensor NAME TYPE N_DIMS NE0 .. | SHAPE0 .. | OFFSET NBYTES FNV1A64
Integers in decimal, floats as Python's repr of the double (nan, inf), BOOL 0/1.  NE is the
file's order (ne[0] contiguous, as GGUFReader gives it); SHAPE is the numpy shape the tensor
was written from (row-major), known to this script only; OFFSET is from the start of the data
section; FNV1A64 the 64-bit FNV-1a hash of the tensor's bytes, in hex.
"""
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gguf")
RNG = np.random.default_rng(20251123)


def hexs(b):
    return "x" + bytes(b).hex()


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in bytes(b):
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def fmt_scalar(t, v):
    if t == V.STRING:
        return hexs(v)
    if t in (V.FLOAT32, V.FLOAT64):
        return repr(float(v))
    if t == V.BOOL:
        return "1" if v else "0"
    return str(int(v))


def quant(rows_shape, qtype):
    """Random raw blocks for a quantized tensor of numpy shape rows_shape (last = elements)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    *lead, n = rows_shape
    assert n % block == 0
    nbytes = n // block * size
    raw = RNG.integers(0, 256, size=(*lead, nbytes), dtype=np.uint8)
    return raw


class Fixture:
    def __init__(self, name, version=3, alignment=None, endian=gguf.GGUFEndian.LITTLE):
        self.name, self.version = name, version
        self.path = os.path.join(OUT, name + ".gguf")
        self.w = gguf.GGUFWriter(self.path, arch="test", endianess=endian)
        if alignment is not None:
            self.w.add_custom_alignment(alignment)
        self.shapes = {}

    def tensor(self, name, arr, qtype=None, shape=None):
        """arr: numpy data (float) or raw uint8 blocks with qtype; shape: the logical numpy
        shape of a quantized tensor."""
        if qtype is None:
            self.w.add_tensor(name, arr)
            self.shapes[name] = list(arr.shape)
        else:
            self.w.add_tensor(name, arr, raw_dtype=qtype)
            self.shapes[name] = list(shape)

    def write(self):
        # the writer has no version option: it writes its module's GGUF_VERSION
        saved = gguf.gguf_writer.GGUF_VERSION
        gguf.gguf_writer.GGUF_VERSION = self.version
        try:
            self.w.write_header_to_file()
            self.w.write_kv_data_to_file()
            self.w.write_tensors_to_file()
            self.w.close()
        finally:
            gguf.gguf_writer.GGUF_VERSION = saved

    def listing(self):
        r = gguf.GGUFReader(self.path)
        lines = []
        version = r.fields["GGUF.version"].contents()
        assert version == self.version, (version, self.version)
        lines.append("version %d" % version)
        lines.append("alignment %d" % r.alignment)
        lines.append("data_offset %d" % r.data_offset)
        kvs = [f for k, f in r.fields.items() if not k.startswith("GGUF.")]
        lines.append("kv_count %d" % len(kvs))
        lines.append("tensor_count %d" % len(r.tensors))
        for f in kvs:
            t = f.types[0]
            key = hexs(f.name.encode("utf-8"))
            if t == V.ARRAY:
                et = f.types[-1]
                if et == V.STRING:
                    vals = [hexs(f.parts[i].tobytes()) for i in f.data]
                else:
                    vals = [fmt_scalar(et, f.parts[i][0]) for i in f.data]
                lines.append("kv %s ARRAY %s %d %s" % (key, et.name, len(vals), " ".join(vals)))
            elif t == V.STRING:
                b = f.parts[-1].tobytes()
                lines.append("kv %s STRING %d %s" % (key, len(b), hexs(b)))
            else:
                lines.append("kv %s %s 1 %s" % (key, t.name, fmt_scalar(t, f.parts[-1][0])))
        with open(self.path, "rb") as fh:
            image = fh.read()
        for t in r.tensors:
            ne = [int(d) for d in t.shape]
            raw = image[t.data_offset:t.data_offset + t.n_bytes]
            assert len(raw) == t.n_bytes
            lines.append("tensor %s %s %d %s | %s | %d %d %s" % (
                hexs(t.name.encode("utf-8")), t.tensor_type.name, len(ne),
                " ".join(map(str, ne)), " ".join(map(str, self.shapes[t.name])),
                t.data_offset - r.data_offset, t.n_bytes, fnv1a64(raw)))
        with open(os.path.join(OUT, self.name + ".txt"), "w") as fh:
            fh.write("\n".join(lines) + "\n")


def every_value(w):
    """Every scalar type, with its extremes, and arrays of every element type."""
    w.add_uint8("t.uint8", 255)
    w.add_int8("t.int8", -128)
    w.add_uint16("t.uint16", 65535)
    w.add_int16("t.int16", -32768)
    w.add_uint32("t.uint32", 4294967295)
    w.add_int32("t.int32", -2147483648)
    w.add_uint64("t.uint64", 18446744073709551615)  # above INT64_MAX: get_int refuses it
    w.add_uint64("t.uint64_small", 1234567890123)
    w.add_int64("t.int64", -9223372036854775808)
    w.add_float32("t.float32", 0.1)
    w.add_float64("t.float64", -2.5e-300)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.string", "caf\u00e9 \U0001F600 \"quoted\"\nline")
    w.add_key_value("t.empty_string", "", V.STRING)  # add_string skips empty strings
    w.add_key_value("t.nul_string", "a\0b", V.STRING)  # values may hold NUL bytes
    w.add_key_value("t.arr.uint8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.arr.int8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("t.arr.uint16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("t.arr.int16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("t.arr.uint32", [7, 4294967295], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("t.arr.int32", [-5, 0, 5, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("t.arr.uint64", [1, 18446744073709551615], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.arr.int64", [-9223372036854775808, 9223372036854775807], V.ARRAY,
                    sub_type=V.INT64)
    w.add_key_value("t.arr.float32", [1.5, -0.0, float("inf"), 1e-45, 3.4028234663852886e38],
                    V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("t.arr.float64", [float("nan"), -1e308, 5e-324], V.ARRAY,
                    sub_type=V.FLOAT64)
    w.add_key_value("t.arr.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("t.arr.string", ["a", "", "\u00fc\u00f1\u00ee", "a b\tc"], V.ARRAY,
                    sub_type=V.STRING)


def main():
    os.makedirs(OUT, exist_ok=True)

    # version 3, default alignment (32): every value type, tensors of several types and ranks
    f = Fixture("all_types_v3")
    every_value(f.w)
    f.w.add_uint32("general.quantization_version", 2)
    f.tensor("f32.matrix", RNG.standard_normal((3, 4)).astype(np.float32))
    f.tensor("f16.vector", RNG.standard_normal(8).astype(np.float16))
    f.tensor("bf16.matrix", quant((2, 4), Q.BF16), Q.BF16, (2, 4))
    f.tensor("q8_0.weight", quant((3, 64), Q.Q8_0), Q.Q8_0, (3, 64))
    f.tensor("q4_1.weight", quant((2, 32), Q.Q4_1), Q.Q4_1, (2, 32))
    f.tensor("q4_0.w3d", quant((2, 2, 32), Q.Q4_0), Q.Q4_0, (2, 2, 32))
    f.tensor("q4_k.weight", quant((1, 256), Q.Q4_K), Q.Q4_K, (1, 256))
    f.tensor("q6_k.w4d", quant((1, 2, 1, 256), Q.Q6_K), Q.Q6_K, (1, 2, 1, 256))
    f.tensor("q5_0.weight", quant((1, 32), Q.Q5_0), Q.Q5_0, (1, 32))
    f.tensor("empty", np.zeros((0, 4), dtype=np.float32))
    f.write()
    f.listing()

    # version 2 (same layout as 3 for little-endian files), alignment 1: unaligned tensors
    f = Fixture("v2_align1", version=2, alignment=1)
    f.w.add_string("general.name", "v2")
    f.w.add_key_value("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", " world"], V.ARRAY,
                      sub_type=V.STRING)
    f.tensor("q8_0", quant((1, 32), Q.Q8_0), Q.Q8_0, (1, 32))
    f.tensor("f32", RNG.standard_normal(3).astype(np.float32))
    f.tensor("f16", RNG.standard_normal((5, 1)).astype(np.float16))
    f.write()
    f.listing()

    # a wider alignment
    f = Fixture("align64", alignment=64)
    f.w.add_float32("t.eps", 1e-5)
    f.tensor("a", RNG.standard_normal(5).astype(np.float32))
    f.tensor("b", quant((2, 32), Q.Q4_1), Q.Q4_1, (2, 32))
    f.write()
    f.listing()

    # metadata only: no tensors, so no data section
    f = Fixture("metadata_only")
    f.w.add_uint32("t.answer", 42)
    f.w.add_key_value("t.list", [3, 1, 2], V.ARRAY, sub_type=V.INT32)
    f.write()
    f.listing()

    # big-endian (refused by attn; no listing)
    f = Fixture("big_endian", endian=gguf.GGUFEndian.BIG)
    f.w.add_uint32("t.answer", 42)
    f.tensor("f32", np.arange(4, dtype=np.float32))
    f.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
