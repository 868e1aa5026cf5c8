#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors into corpus/ (standard library only).

Run from tests/fuzz: python3 make_corpus.py.  The files are committed; the library and its tests
never need Python."""
import json
import os
import struct


def write(path, tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes), laid out back to back."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


os.makedirs("corpus", exist_ok=True)
write("corpus/empty.safetensors", [])
write("corpus/basic.safetensors",
      [("weight", "F32", [2, 2], struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)),
       ("bias", "F16", [2], struct.pack("<2H", 0x3C00, 0x0001))],
      {"format": "pt"})
write("corpus/alltypes.safetensors",
      [("f64", "F64", [1], struct.pack("<d", 1e300)),
       ("i64", "I64", [1], struct.pack("<q", -5)),
       ("i32", "I32", [1], struct.pack("<i", 7)),
       ("bf16", "BF16", [1, 1], struct.pack("<H", 0x4049)),
       ("i8", "I8", [2], struct.pack("<2b", -128, 3)),
       ("u8", "U8", [1], b"\xff"),
       ("b", "BOOL", [1], b"\x01"),
       ("empty", "F32", [0, 3], b""),
       ("scalar\u00e9\U0001F600\n\"", "U8", [], b"\x07")],
      {"k\t": "v\u20ac", "": ""}, pad=False)
