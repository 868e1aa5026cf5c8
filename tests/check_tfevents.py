#!/usr/bin/env python3
"""Reads TensorBoard event files with the standard library alone, checks their framing, both
CRC-32Cs of every record and the protobuf fields, and compares their scalars with the run's
JSON-lines log.  usage: check_tfevents.py TB_DIR LOG.jsonl UNIT
(Written from TensorFlow's public record and Event definitions; tensorboard's own reader was
used once to confirm, see docs/training.md.)"""
import glob, json, math, struct, sys


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def fields(b):
    """(number, wire type, value) of a message's fields"""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        out.append((num, wt, v))
    if i != len(b):
        raise ValueError("a field runs past its message")
    return out


def records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        assert i + 12 <= len(data), "a torn record header"
        n, hc = struct.unpack_from("<QI", data, i)
        assert masked(crc32c(data[i:i + 8])) == hc, "length CRC"
        body = data[i + 12:i + 12 + n]
        assert len(body) == n and i + 16 + n <= len(data), "a torn record"
        (dc,) = struct.unpack_from("<I", data, i + 12 + n)
        assert masked(crc32c(body)) == dc, "data CRC"
        yield body
        i += 16 + n


def main():
    tb, log, unit = sys.argv[1], sys.argv[2], sys.argv[3]
    assert crc32c(b"123456789") == 0xE3069283, "crc32c check value"
    files = sorted(glob.glob(tb + "/events.out.tfevents.*"))
    assert len(files) == 1, files
    events = []
    for k, body in enumerate(records(files[0])):
        f = fields(body)
        d = {num: v for num, _, v in f}
        wall = struct.unpack("<d", d[1])[0]
        assert 1.7e9 < wall < 4e9, wall
        if k == 0:
            assert d[3] == b"brain.Event:2" and d.get(2, 0) == 0, d
            continue
        scal = {}
        for num, wt, v in fields(d[5]):
            assert num == 1 and wt == 2
            val = {n: x for n, _, x in fields(v)}
            scal[val[1].decode()] = struct.unpack("<f", val[2])[0]
        events.append((d[2], scal))
    lines = [json.loads(x) for x in open(log)]
    assert len(events) == len(lines) > 0, (len(events), len(lines))
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    names = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm",
             "items_per_s": "train/%s_per_s" % unit, "eval_accuracy": "eval/accuracy",
             "eval_bpc": "eval/bpc", "eval_loss": "eval/loss", "eval_ppl": "eval/ppl"}
    evals = 0
    for (step, scal), line in zip(events, lines):
        assert step == line["step"], (step, line["step"])
        want = {names[k]: v for k, v in line.items() if k in names}
        assert set(want) == set(scal), (step, sorted(want), sorted(scal))
        for tag, v in want.items():
            assert math.isfinite(scal[tag]) and abs(scal[tag] - f32(v)) <= 1e-6 * max(1, abs(v)), \
                (step, tag, scal[tag], v)
        evals += any(t.startswith("eval/") for t in scal)
    assert evals > 0, "no evaluation in the events"
    print("%d events, %d with evaluations, equal to the log's values" % (len(events), evals))


if __name__ == "__main__":
    main()
