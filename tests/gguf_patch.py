#!/usr/bin/env python3
"""Overwrites bytes inside one tensor of a GGUF file (standard library only), for tests that
need a damaged weight:

    gguf_patch.py FILE TENSOR BYTE_OFFSET HEXBYTES

writes HEXBYTES (e.g. 007e: an f16 NaN, little-endian) at BYTE_OFFSET from the start of
TENSOR's data.  GGUF v2/v3, little-endian."""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar types


def main():
    path, name, off, hexbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    data = bytearray(open(path, "rb").read())
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(data[pos:pos + n])
        pos += n
        return s

    def skip(t):
        nonlocal pos
        if t == 8:
            string()
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n):
                skip(et)
        else:
            pos += SIZES[t]

    assert data[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    take("I")
    nt, nkv = take("Q"), take("Q")
    align = 32
    for _ in range(nkv):
        key = string()
        t = take("I")
        if key == b"general.alignment" and t == 4:
            align = take("I")
        else:
            skip(t)
    found = None
    for _ in range(nt):
        tname = string()
        nd = take("I")
        for _ in range(nd):
            take("Q")
        take("I")
        toff = take("Q")
        if tname == name.encode():
            found = toff
    assert found is not None, "no tensor " + name
    start = (pos + align - 1) // align * align
    at = start + found + off
    patch = bytes.fromhex(hexbytes)
    data[at:at + len(patch)] = patch
    open(path, "wb").write(data)


if __name__ == "__main__":
    main()
