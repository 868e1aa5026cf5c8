"""attn.sdpa / attn.sdpa_varlen (numpy only): the committed PyTorch fixtures and a naive
float64 reference."""
import os

import numpy as np
import pytest

import attn

from conftest import FIXTURES, close, naive_sdpa, read_safetensors


def _cases(prefix, n):
    return [f"{prefix}_{i}" for i in range(n)
            if os.path.exists(os.path.join(FIXTURES, f"{prefix}_{i}.safetensors"))]


def _flag(meta, key):
    return meta.get(key, "false") == "true"


@pytest.mark.parametrize("case", _cases("sdpa", 17) + _cases("sdpa_feat", 5))
def test_fixture(case):
    inp, meta = read_safetensors(os.path.join(FIXTURES, case + ".safetensors"))
    exp, emeta = read_safetensors(os.path.join(FIXTURES, case + ".expected.safetensors"))
    causal = False
    if _flag(meta, "is_causal"):
        causal = meta.get("causal_alignment", "top_left")
    window = None
    if "window_left" in meta or "window_right" in meta:
        window = (int(meta.get("window_left", -1)), int(meta.get("window_right", -1)))
    out, lse = attn.sdpa(inp["query"], inp["key"], inp["value"], inp.get("attn_mask"),
                         dropout_p=float(meta.get("dropout_p", 0.0)), is_causal=causal,
                         scale=float(meta["scale"]) if "scale" in meta else None,
                         enable_gqa=_flag(meta, "enable_gqa"), window=window,
                         alibi_slopes=inp.get("alibi_slopes"),
                         softcap=float(meta.get("softcap", 0.0)), return_lse=True)
    tol = float(emeta.get("tol", "1e-5"))
    close(out, exp["out"], tol)
    if "lse" in exp:
        close(lse, exp["lse"], tol)


def test_fixture_reader_finds_the_cases():
    assert len(_cases("sdpa", 17)) == 17 and len(_cases("sdpa_feat", 5)) == 5


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("L,S", [(5, 7), (7, 3), (6, 6)])
def test_against_naive(rng, causal, L, S):
    q = rng.standard_normal((2, 4, L, 8), dtype=np.float32)
    k = rng.standard_normal((2, 2, S, 8), dtype=np.float32)
    v = rng.standard_normal((2, 2, S, 5), dtype=np.float32)
    out, lse = attn.sdpa(q, k, v, is_causal=causal, enable_gqa=True, return_lse=True)
    ref, rlse = naive_sdpa(q, k, v, causal={True: "top_left"}.get(causal, causal or None))
    close(out, ref)
    close(lse, rlse)
    assert out.dtype == np.float32 and out.shape == (2, 4, L, 5)


def test_masks_and_scale(rng):
    q = rng.standard_normal((2, 3, 5, 4), dtype=np.float32)
    k = rng.standard_normal((2, 3, 6, 4), dtype=np.float32)
    v = rng.standard_normal((2, 3, 6, 4), dtype=np.float32)
    keep = rng.random((2, 1, 5, 6)) > 0.3
    keep[0, 0, 2] = False  # a row with every key masked: zeros, lse -inf
    out, lse = attn.sdpa(q, k, v, attn_mask=keep, scale=0.3, return_lse=True)
    ref, rlse = naive_sdpa(q, k, v, mask=keep, scale=0.3)
    close(out, ref)
    close(lse, rlse)
    assert np.all(out[0, :, 2] == 0) and np.all(np.isneginf(lse[0, :, 2]))
    add = rng.standard_normal((5, 6)).astype(np.float32)
    add[1, 3] = -np.inf
    close(attn.sdpa(q, k, v, attn_mask=add), naive_sdpa(q, k, v, mask=add)[0])
    # uint8 masks are "keep" masks too; 1-D masks broadcast over the rows
    m1 = np.array([1, 0, 1, 1, 0, 1], dtype=np.uint8)
    close(attn.sdpa(q, k, v, attn_mask=m1), naive_sdpa(q, k, v, mask=m1.astype(bool))[0])


def test_gqa_needs_the_flag(rng):
    q = rng.standard_normal((1, 4, 3, 4), dtype=np.float32)
    k = rng.standard_normal((1, 2, 3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="enable_gqa"):
        attn.sdpa(q, k, k)


def test_shapes_2d_3d_and_5d(rng):
    q = rng.standard_normal((2, 3, 2, 5, 4), dtype=np.float32)  # [N1, N2, H, L, D]
    k = rng.standard_normal((2, 3, 2, 6, 4), dtype=np.float32)
    m = rng.random((3, 1, 5, 6)) > 0.2                          # broadcasts over N1 and H
    out, lse = attn.sdpa(q, k, k, attn_mask=m, return_lse=True)
    ref, rlse = naive_sdpa(q, k, k, mask=m)
    assert out.shape == (2, 3, 2, 5, 4) and lse.shape == (2, 3, 2, 5)
    close(out, ref)
    close(lse, rlse)
    # a 5-D batch that does not merge (a permuted view) is still right
    qp = np.ascontiguousarray(q.transpose(1, 0, 2, 3, 4)).transpose(1, 0, 2, 3, 4)
    close(attn.sdpa(qp, k, k, attn_mask=m), ref)
    close(attn.sdpa(q[0, 0, 0], k[0, 0, 0], k[0, 0, 0]), naive_sdpa(q[0, 0, 0], k[0, 0, 0],
                                                                   k[0, 0, 0])[0])
    close(attn.sdpa(q[0, 0], k[0, 0], k[0, 0], is_causal=True),
          naive_sdpa(q[0, 0], k[0, 0], k[0, 0], causal="top_left")[0])


def test_extensions(rng):
    q = rng.standard_normal((1, 2, 6, 4), dtype=np.float32)
    k = rng.standard_normal((1, 2, 9, 4), dtype=np.float32)
    slopes = np.array([0.5, 0.25], dtype=np.float32)
    out, lse = attn.sdpa(q, k, k, window=(3, 1), alibi_slopes=slopes, softcap=2.0,
                         return_lse=True)
    ref, rlse = naive_sdpa(q, k, k, window=(3, 1), alibi=slopes, softcap=2.0)
    close(out, ref)
    close(lse, rlse)
    close(attn.sdpa(q, k, k, window=2), naive_sdpa(q, k, k, window=(2, 2))[0])
    close(attn.sdpa(q, k, k, window=(None, 0)), naive_sdpa(q, k, k, window=(-1, 0))[0])
    with pytest.raises(ValueError):
        attn.sdpa(q, k, k, alibi_slopes=np.ones(3, np.float32))


def test_dropout_is_seeded(rng):
    q = rng.standard_normal((1, 2, 8, 4), dtype=np.float32)
    a = attn.sdpa(q, q, q, dropout_p=0.5, seed=7)
    b = attn.sdpa(q, q, q, dropout_p=0.5, seed=7)
    c = attn.sdpa(q, q, q, dropout_p=0.5, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.allclose(a, attn.sdpa(q, q, q))
    with pytest.raises(ValueError):
        attn.sdpa(q, q, q, dropout_p=1.0)


def test_varlen_matches_per_sequence(rng):
    lq, lk = [3, 0, 5], [4, 2, 6]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    q = rng.standard_normal((cq[-1], 4, 8), dtype=np.float32)
    k = rng.standard_normal((ck[-1], 2, 8), dtype=np.float32)
    v = rng.standard_normal((ck[-1], 2, 3), dtype=np.float32)
    out, lse = attn.sdpa_varlen(q, k, v, cq, ck, is_causal="bottom_right", return_lse=True)
    assert out.shape == (8, 4, 3) and lse.shape == (4, 8)
    for b in range(3):
        if lq[b] == 0:
            continue
        qs = q[cq[b]:cq[b + 1]].transpose(1, 0, 2)
        ks = k[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        vs = v[ck[b]:ck[b + 1]].transpose(1, 0, 2)
        ref, rlse = naive_sdpa(qs, ks, vs, causal="bottom_right")
        close(out[cq[b]:cq[b + 1]].transpose(1, 0, 2), ref)
        close(lse[:, cq[b]:cq[b + 1]], rlse)
    with pytest.raises(TypeError):
        attn.sdpa_varlen(q, k, v, cq.astype(np.float32), ck)
