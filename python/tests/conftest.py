"""Shared helpers of the Python tests: the committed fixtures (tests/fixtures), a small
safetensors reader, a naive numpy attention reference, the tolerance check of the C tests."""
import json
import math
import os
import struct

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")

_DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
       "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, d in header.items():
        a, b = d["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=_DT[d["dtype"]]).reshape(d["shape"]).copy()
    return out, meta


def close(got, ref, tol=1e-5):
    """The C tests' rule (tu_close): max|got - ref| <= tol * max(1, max|ref|); -inf must
    match exactly."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    inf = np.isinf(ref)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], ref[inf])
    fin = ~inf
    if not fin.any():
        return
    err = np.max(np.abs(got[fin] - ref[fin]))
    bound = tol * max(1.0, float(np.max(np.abs(ref[fin]))))
    assert err <= bound, f"max error {err:.3g} > {bound:.3g}"


def naive_sdpa(q, k, v, mask=None, causal=None, scale=None, window=None, alibi=None,
               softcap=0.0):
    """float64 reference of attn_sdpa on [..., H, L, D] arrays: (out, lse)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    H, Hkv = (q.shape[-3], k.shape[-3]) if q.ndim >= 3 else (1, 1)
    if H != Hkv:
        k = np.repeat(k, H // Hkv, axis=-3)
        v = np.repeat(v, H // Hkv, axis=-3)
    L, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    s = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(D) if scale is None else scale)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    if alibi is not None:
        s = s - np.asarray(alibi, np.float64)[:, None, None] * np.abs(i + S - L - j)
    add = np.zeros((L, S))
    if causal == "top_left":
        add[j > i] = -np.inf
    elif causal == "bottom_right":
        add[j > i + S - L] = -np.inf
    if window is not None:
        left, right = window
        if left >= 0:
            add[j < i + S - L - left] = -np.inf
        if right >= 0:
            add[j > i + S - L + right] = -np.inf
    s = s + add
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            s = np.where(mask, s, -np.inf)
        else:
            s = s + mask
    m = np.max(s, axis=-1, keepdims=True)
    dead = np.isinf(m)
    m = np.where(dead, 0.0, m)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    w = np.where(dead, 0.0, e / np.where(z == 0, 1, z))
    lse = np.where(dead[..., 0], -np.inf, (np.log(np.where(z == 0, 1, z)) + m)[..., 0])
    return w @ v, lse


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
