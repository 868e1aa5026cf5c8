#!/usr/bin/env python3
"""Generate the reference fixtures for `attn eval` (format: docs/eval-format.md).

    python3 tests/gen_fixtures.py [--out DIR]

For every case writes DIR/<op>_<k>.safetensors (inputs + __metadata__ exactly as `attn eval`
reads them) and DIR/<op>_<k>.expected.safetensors (expected outputs, __metadata__ {"op", "tol"}),
then DIR/MANIFEST.txt.  Everything is float32 on the CPU with fixed seeds; files are written by
a small serializer of our own (sorted header, no randomness), so re-running gives identical
bytes.  References come from PyTorch itself (modules in eval() mode, with autograd on so the
"fast path" kernels are not used); where PyTorch gives NaN for a query row whose keys are all
masked, the reference is a hand-written mirror of the PyTorch code that makes that row's
attention output (and weights) exactly 0 before any output projection.  The hand-written
mirrors are checked against the real modules on every row PyTorch computes.

Backward cases <op>_bwd_<k> (metadata backward = "true", an input "grad.out") expect "out" and
the gradients "grad.<name>" of every floating-point input and parameter, from torch.autograd in
float32 (tolerance 1e-4).  They and the cross_entropy cases are generated after all the other
cases with generators of their own, so the earlier files do not change.
"""
import argparse
import json
import math
import os
import struct
import warnings
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
# nn.Transformer builds its encoder with enable_nested_tensor=True; that only matters for the
# no-grad fast path, which we never take (autograd is on).
warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
torch.manual_seed(0)
NEG_INF = float("-inf")

# ------------------------------------------------------------------------------------------
# safetensors writer (deterministic) and case bookkeeping
# ------------------------------------------------------------------------------------------
_DT = {torch.float32: ("F32", 4), torch.int64: ("I64", 8), torch.bool: ("BOOL", 1)}


def st_serialize(tensors, metadata):
    items = sorted(tensors.items(), key=lambda kv: (-_DT[kv[1].dtype][1], kv[0]))
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, off = [], 0
    for name, t in items:
        a = t.detach().contiguous().numpy()
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        b = a.tobytes()
        header[name] = {"dtype": _DT[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def meta_str(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return v
    raise TypeError(f"attribute of type {type(v)}")


def close(got, ref, tol, what):
    """tests/testutil.c tu_close: max|got-ref| <= tol * max(1, max|ref|); equal infinities ok."""
    got, ref = got.detach().double(), ref.detach().double()
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert not torch.isnan(got).any() and not torch.isnan(ref).any(), f"{what}: NaN"
    same_inf = torch.isinf(ref) & (got == ref)
    assert (torch.isinf(ref) == same_inf).all(), f"{what}: infinities differ"
    d = torch.where(same_inf, torch.zeros_like(ref), (got - ref).abs())
    fin = ref[torch.isfinite(ref)]
    m = max(1.0, fin.abs().max().item() if fin.numel() else 0.0)
    err = d.max().item() if d.numel() else 0.0
    assert err <= tol * m, f"{what}: self-check error {err:.3g} > {tol * m:.3g}"


class Writer:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.count = {}
        self.cases = []

    def emit(self, op, inputs, attrs, outputs, tol=None, tag=""):
        if tol is None:
            tol = "1e-4" if op in STACK_OPS else "1e-5"
        key = op + tag
        k = self.count.get(key, 0)
        self.count[key] = k + 1
        name = f"{op}{tag}_{k}"
        for n, t in list(inputs.items()) + list(outputs.items()):
            assert t.dtype in _DT, (name, n, t.dtype)
            assert t.dim() <= 4, (name, n, t.shape)
        for n, t in inputs.items():
            if t.dtype == torch.float32 and "mask" not in n:
                assert torch.isfinite(t).all(), f"{name}: input {n} not finite"
            if t.dtype == torch.float32 and "mask" in n:
                assert not torch.isnan(t).any() and not (t == float("inf")).any(), (name, n)
        for n, t in outputs.items():
            assert t.dtype == torch.float32, (name, n)
            assert not torch.isnan(t).any(), f"{name}: expected output {n} has NaN"
            assert torch.isfinite(t).all() or not n.startswith("grad."), (name, n)
        meta = {"op": op}
        for a, v in attrs.items():
            meta[a] = meta_str(v)
        self._write(name + ".safetensors", inputs, meta)
        self._write(name + ".expected.safetensors", outputs, {"op": op, "tol": tol})
        self.cases.append(name)

    def emit_bwd(self, op, inputs, attrs, outputs, tag="_bwd", tol="1e-4"):
        """A backward case <op><tag>_<k>: metadata backward = "true", inputs with grad.out,
        expected "out" and grad.* (tolerance 1e-4 unless given)."""
        assert "grad.out" in inputs and "out" in outputs
        assert inputs["grad.out"].shape == outputs["out"].shape, op
        for n, t in inputs.items():
            # every floating-point input has a gradient; masks only sdpa's float attn_mask;
            # sdpa's alibi_slopes none
            if t.dtype == torch.float32 and not n.startswith("grad."):  # cotangents: none
                want = ("mask" not in n and n != "alibi_slopes") or (op == "sdpa" and
                                                                     n == "attn_mask")
                assert ("grad." + n in outputs) == want, (op, n)
        attrs = dict(attrs)
        attrs["backward"] = True
        self.emit(op, inputs, attrs, outputs, tol=tol, tag=tag)

    def _write(self, fname, tensors, meta):
        data = st_serialize({n: t.detach().contiguous() for n, t in tensors.items()}, meta)
        path = os.path.join(self.out_dir, fname)
        with open(path, "wb") as f:
            f.write(data)
        # The file must read back with the reference safetensors implementation.
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:
            assert f.metadata() == meta, fname
            assert sorted(f.keys()) == sorted(tensors), fname
            for n in f.keys():
                assert torch.equal(f.get_tensor(n), tensors[n].detach().cpu()), (fname, n)


STACK_OPS = {"transformer_encoder_layer", "transformer_decoder_layer", "transformer_encoder",
             "transformer_decoder", "transformer", "gpt", "vit"}

# ------------------------------------------------------------------------------------------
# random helpers
# ------------------------------------------------------------------------------------------


def gen_for(op):
    return torch.Generator().manual_seed(zlib.crc32(op.encode()))


def rn(g, *shape, s=1.0):
    return torch.randn(*shape, generator=g) * s


def ur(g, *shape):
    return torch.rand(*shape, generator=g)


def randomize(module, g, s=0.3):
    """Every parameter random (biases too); layer-norm weights around 1."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + rn(g, *p.shape, s=s))
            else:
                p.copy_(rn(g, *p.shape, s=s))
    return module


def params(module, prefix=""):
    return {prefix + n: p.detach().clone() for n, p in module.state_dict().items()}


def sub(P, prefix):
    return {n[len(prefix):]: t for n, t in P.items() if n.startswith(prefix)}


def block_mask(g, shape, p=0.35):
    """bool, True = blocked; key 0 never blocked (so no fully masked rows)."""
    m = ur(g, *shape) < p
    m[..., 0] = False
    return m


def float_mask(g, shape, p=0.3):
    """additive float mask: random finite values and some -inf; key 0 always finite."""
    blk = block_mask(g, shape, p)
    return torch.where(blk, torch.full(shape, NEG_INF), rn(g, *shape, s=0.5))


def padding_mask(lengths, S):
    """bool [B, S], True = padding (ignored)."""
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]


def additive(m):
    if m is None:
        return None
    if m.dtype == torch.bool:
        return torch.zeros(m.shape).masked_fill(m, NEG_INF)
    return m


def causal_block(L, S):
    """bool [L, S], True = blocked (top-left causal: query i sees keys j <= i)."""
    return torch.ones(L, S, dtype=torch.bool).triu(1)


def causal_float(L, S):
    return torch.zeros(L, S).masked_fill(causal_block(L, S), NEG_INF)


def safe_softmax(scores):
    """softmax over the last axis; a row whose scores are all -inf gives weights 0."""
    dead = torch.isneginf(scores).all(-1, keepdim=True)
    w = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1)
    return w.masked_fill(dead, 0.0), dead


# ------------------------------------------------------------------------------------------
# sdpa
# ------------------------------------------------------------------------------------------


def sdpa_case(W, g, B, H, Hkv, L, S, D, Dv, mask=None, is_causal=False, scale=None,
              align=None, need_weights=False, return_lse=False, explicit=None):
    q, k, v = rn(g, B, H, L, D), rn(g, B, Hkv, S, D), rn(g, B, Hkv, S, Dv)
    gqa = H != Hkv
    # the causal part as a KEEP mask (True = may attend)
    causal_keep = None
    if is_causal:
        off = (S - L) if align == "bottom_right" else 0
        causal_keep = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + off
    # hand reference
    scale_v = scale if scale is not None else 1.0 / math.sqrt(D)
    kk = k.repeat_interleave(H // Hkv, dim=1)
    vv = v.repeat_interleave(H // Hkv, dim=1)
    scores = (q @ kk.transpose(-2, -1)) * scale_v
    add = torch.zeros(L, S)
    if mask is not None:
        add = add + (torch.zeros(mask.shape).masked_fill(~mask, NEG_INF)
                     if mask.dtype == torch.bool else mask)
    if causal_keep is not None:
        add = add + torch.zeros(L, S).masked_fill(~causal_keep, NEG_INF)
    scores = scores + add
    w, dead = safe_softmax(scores)
    out_hand = w @ vv
    lse = torch.logsumexp(scores, dim=-1)
    # PyTorch reference (its math/CPU kernels give 0 for a fully masked row in this version)
    kw = dict(scale=scale, enable_gqa=gqa)
    if is_causal and mask is None and align != "bottom_right":
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    elif is_causal:
        if mask is None:
            comb = causal_keep
        elif mask.dtype == torch.bool:
            comb = mask & causal_keep
        else:
            comb = mask + torch.zeros(L, S).masked_fill(~causal_keep, NEG_INF)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=comb, **kw)
    else:
        # PyTorch refuses a 1-D mask; [S] means [1, S] under broadcasting
        tm = mask.view(1, -1) if mask is not None and mask.dim() == 1 else mask
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=tm, **kw)
    close(out_hand, out, 1e-5, "sdpa hand vs torch")
    assert (out.masked_select(dead) == 0).all()
    inputs = {"query": q, "key": k, "value": v}
    if mask is not None:
        inputs["attn_mask"] = mask
    attrs = {}
    if is_causal:
        attrs["is_causal"] = True
    if scale is not None:
        attrs["scale"] = scale
    if gqa:
        attrs["enable_gqa"] = True
    if align is not None:
        attrs["causal_alignment"] = align
    if need_weights:
        attrs["need_weights"] = True
    if return_lse:
        attrs["return_lse"] = True
    if explicit:
        attrs.update(explicit)
    outputs = {"out": out}
    if need_weights:
        outputs["attn_weights"] = w
    if return_lse:
        outputs["lse"] = lse
    W.emit("sdpa", inputs, attrs, outputs)


def gen_sdpa(W):
    g = gen_for("sdpa")
    # 0: L != S, D != Dv, no mask, weights + lse
    sdpa_case(W, g, 2, 3, 3, 5, 7, 4, 6, need_weights=True, return_lse=True)
    # 1: is_causal L == S
    sdpa_case(W, g, 1, 2, 2, 7, 7, 8, 8, is_causal=True, need_weights=True, return_lse=True)
    # 2: is_causal L < S (top-left, PyTorch's convention)
    sdpa_case(W, g, 2, 2, 2, 3, 5, 5, 3, is_causal=True)
    # 3: bool [L, S] with a fully masked row (row 1), weights + lse
    m = ur(g, 5, 7) < 0.6
    m[1] = False
    m[3] = True
    sdpa_case(W, g, 2, 2, 2, 5, 7, 4, 4, mask=m, need_weights=True, return_lse=True)
    # 4: float [1, 1, L, S] with -inf entries and a -inf row; explicit scale
    m = torch.where(ur(g, 1, 1, 3, 5) < 0.3, torch.tensor(NEG_INF), rn(g, 1, 1, 3, 5))
    m[0, 0, 2] = NEG_INF
    sdpa_case(W, g, 2, 3, 3, 3, 5, 7, 5, mask=m, scale=0.3, need_weights=True,
              return_lse=True)
    # 5: bool [B, 1, 1, S] key padding; batch 2 fully padded -> all its rows are 0
    m = ~padding_mask([7, 4, 0], 7)[:, None, None, :]
    sdpa_case(W, g, 3, 2, 2, 5, 7, 4, 4, mask=m, need_weights=True, return_lse=True)
    # 6: GQA H=6, Hkv=2 with float [B, H, L, S]
    m = float_mask(g, (2, 6, 5, 7))
    sdpa_case(W, g, 2, 6, 2, 5, 7, 4, 3, mask=m, need_weights=True, return_lse=True)
    # 7: MQA H=4, Hkv=1, is_causal, L = S = 13
    sdpa_case(W, g, 1, 4, 1, 13, 13, 8, 8, is_causal=True, return_lse=True)
    # 8: is_causal combined with a bool mask [L, S] (attn extension; PyTorch refuses both)
    m = ur(g, 5, 5) < 0.7
    m[:, 0] = True
    sdpa_case(W, g, 2, 2, 2, 5, 5, 4, 4, mask=m, is_causal=True, need_weights=True,
              return_lse=True)
    # 9: is_causal combined with a float mask [B, 1, L, S]
    m = rn(g, 2, 1, 5, 7)
    sdpa_case(W, g, 2, 3, 3, 5, 7, 3, 3, mask=m, is_causal=True, need_weights=True)
    # 10: bottom_right causal, L < S
    sdpa_case(W, g, 2, 2, 2, 3, 7, 4, 5, is_causal=True, align="bottom_right",
              need_weights=True, return_lse=True)
    # 11: bottom_right causal, L > S: the first L - S rows see no key -> 0, lse -inf
    sdpa_case(W, g, 1, 2, 2, 7, 3, 4, 4, is_causal=True, align="bottom_right",
              need_weights=True, return_lse=True)
    # 12: bottom_right + bool key padding [B, 1, 1, S], GQA
    m = ~padding_mask([5, 2], 5)[:, None, None, :]
    sdpa_case(W, g, 2, 4, 2, 3, 5, 4, 4, mask=m, is_causal=True, align="bottom_right",
              need_weights=True, return_lse=True)
    # 13: float 3-D mask [H, L, S]
    sdpa_case(W, g, 2, 3, 3, 5, 3, 4, 4, mask=float_mask(g, (3, 5, 3)), need_weights=True)
    # 14: bool 1-D mask [S]
    m = torch.tensor([True, False, True, True, False, True, False])
    sdpa_case(W, g, 1, 1, 1, 3, 7, 5, 5, mask=m, need_weights=True, return_lse=True)
    # 15: tiny, every attribute written out at its default
    sdpa_case(W, g, 1, 1, 1, 1, 1, 1, 1, explicit={
        "is_causal": False, "enable_gqa": False, "dropout_p": 0.0,
        "causal_alignment": "top_left", "need_weights": False, "return_lse": False})
    # 16: top_left causal written explicitly, L > S
    sdpa_case(W, g, 1, 2, 2, 7, 3, 4, 4, is_causal=True, align="top_left",
              need_weights=True, return_lse=True)


# ------------------------------------------------------------------------------------------
# nn.MultiheadAttention: hand-written mirror of F.multi_head_attention_forward
# ------------------------------------------------------------------------------------------


def mha_ref(query, key, value, P, E, H, key_padding_mask=None, attn_mask=None,
            is_causal=False, need_weights=True, average_attn_weights=True):
    B, L, _ = query.shape
    S = key.shape[1]
    hd = E // H
    if "in_proj_weight" in P:
        Wq, Wk, Wv = P["in_proj_weight"].chunk(3)
    else:
        Wq, Wk, Wv = P["q_proj_weight"], P["k_proj_weight"], P["v_proj_weight"]
    bq = bk = bv = None
    if "in_proj_bias" in P:
        bq, bk, bv = P["in_proj_bias"].chunk(3)
    q, k, v = F.linear(query, Wq, bq), F.linear(key, Wk, bk), F.linear(value, Wv, bv)
    m = torch.zeros(B, H, L, S)
    if attn_mask is not None:
        am = additive(attn_mask)
        m = m + (am if am.dim() == 2 else am.view(B, H, L, S))
    elif is_causal:
        m = m + causal_float(L, S)
    if key_padding_mask is not None:
        m = m + additive(key_padding_mask).view(B, 1, 1, S)
    if "bias_k" in P:
        k = torch.cat([k, P["bias_k"].expand(B, 1, E)], 1)
        v = torch.cat([v, P["bias_v"].expand(B, 1, E)], 1)
        m = F.pad(m, (0, 1))
    q = q.view(B, L, H, hd).transpose(1, 2)
    k = k.view(B, -1, H, hd).transpose(1, 2)
    v = v.view(B, -1, H, hd).transpose(1, 2)
    if P.get("__add_zero_attn__", False):
        k = torch.cat([k, torch.zeros(B, H, 1, hd)], 2)
        v = torch.cat([v, torch.zeros(B, H, 1, hd)], 2)
        m = F.pad(m, (0, 1))
    scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1) + m
    w, dead = safe_softmax(scores)
    o = (w @ v).transpose(1, 2).reshape(B, L, E)  # rows with every key masked are 0 here
    out = F.linear(o, P["out_proj.weight"], P.get("out_proj.bias"))
    if not need_weights:
        return out, None, dead
    return out, (w.mean(1) if average_attn_weights else w), dead


def build_mha(g, E, H, bias=True, add_bias_kv=False, add_zero_attn=False, kdim=None,
              vdim=None):
    mha = nn.MultiheadAttention(E, H, dropout=0.0, bias=bias, add_bias_kv=add_bias_kv,
                                add_zero_attn=add_zero_attn, kdim=kdim, vdim=vdim,
                                batch_first=True)
    return randomize(mha, g).eval()


def check_module_mha(mha, P, q, k, v, kpm, am, ic, nw, avg, ref_out, ref_w, dead):
    """Real module (autograd on -> no fast path) vs the hand mirror, on rows PyTorch defines."""
    o, w = mha(q, k, v, key_padding_mask=kpm, need_weights=nw, attn_mask=am,
               average_attn_weights=avg, is_causal=ic)
    o = o.detach()
    rowdead = dead.any(1).squeeze(-1)  # [B, L]: some head has a fully masked row
    if not rowdead.any():
        close(ref_out, o, 1e-5, "mha hand vs module out")
        if nw:
            close(ref_w, w.detach(), 1e-5, "mha hand vs module weights")
    else:
        keep = ~rowdead
        close(ref_out[keep], o[keep], 1e-5, "mha hand vs module out (live rows)")
        if nw:
            wk = w.detach()
            close(ref_w[keep] if avg else ref_w.transpose(1, 2)[keep],
                  wk[keep] if avg else wk.transpose(1, 2)[keep], 1e-5, "mha weights live")
        if not nw:
            # PyTorch's SDPA path zeroes the row before out_proj, exactly like attn
            close(ref_out, o, 1e-5, "mha hand vs module (need_weights=False)")


def mha_case(W, g, B, L, S, E, H, kdim=None, vdim=None, bias=True, add_bias_kv=False,
             add_zero_attn=False, kpm=None, am=None, is_causal=False, need_weights=None,
             average=None, self_attn=False, explicit=None):
    mha = build_mha(g, E, H, bias, add_bias_kv, add_zero_attn, kdim, vdim)
    P = params(mha)
    if add_zero_attn:
        P["__add_zero_attn__"] = True
    query = rn(g, B, L, E)
    if self_attn:
        key = value = query
    else:
        key, value = rn(g, B, S, kdim or E), rn(g, B, S, vdim or E)
    nw = True if need_weights is None else need_weights
    avg = True if average is None else average
    out, w, dead = mha_ref(query, key, value, P, E, H, kpm, am, is_causal, nw, avg)
    check_module_mha(mha, P, query, key, value, kpm, am, is_causal, nw, avg, out, w, dead)
    P.pop("__add_zero_attn__", None)
    inputs = {"query": query, "key": key.clone(), "value": value.clone(), **P}
    if kpm is not None:
        inputs["key_padding_mask"] = kpm
    if am is not None:
        inputs["attn_mask"] = am
    attrs = {"embed_dim": E, "num_heads": H}
    if kdim is not None:
        attrs["kdim"] = kdim
    if vdim is not None:
        attrs["vdim"] = vdim
    if not bias:
        attrs["bias"] = False
    if add_bias_kv:
        attrs["add_bias_kv"] = True
    if add_zero_attn:
        attrs["add_zero_attn"] = True
    if is_causal:
        attrs["is_causal"] = True
    if need_weights is not None:
        attrs["need_weights"] = need_weights
    if average is not None:
        attrs["average_attn_weights"] = average
    if explicit:
        attrs.update(explicit)
    outputs = {"out": out}
    if nw:
        outputs["attn_weights"] = w
    W.emit("multihead_attention", inputs, attrs, outputs)


def gen_mha(W):
    g = gen_for("multihead_attention")
    # 0: self-attention, defaults (need_weights true, averaged)
    mha_case(W, g, 2, 5, 5, 12, 3, self_attn=True)
    # 1: cross-attention L != S, bool key_padding_mask + bool attn_mask [L, S], per-head weights
    mha_case(W, g, 2, 3, 7, 8, 2, kpm=padding_mask([7, 5], 7), am=block_mask(g, (3, 7)),
             average=False)
    # 2: float attn_mask [B*H, L, S] + float key_padding_mask, need_weights false
    kpm = torch.zeros(3, 5).masked_fill(padding_mask([5, 3, 1], 5), NEG_INF) + rn(g, 3, 5, s=0.2)
    mha_case(W, g, 3, 7, 5, 8, 4, kpm=kpm, am=float_mask(g, (12, 7, 5)), need_weights=False)
    # 3: kdim/vdim != embed_dim, bias false
    mha_case(W, g, 2, 5, 3, 6, 2, kdim=5, vdim=7, bias=False, explicit={"dropout": 0.0})
    # 4: add_bias_kv + add_zero_attn with masks, per-head weights
    mha_case(W, g, 2, 3, 5, 8, 2, add_bias_kv=True, add_zero_attn=True,
             kpm=padding_mask([5, 2], 5), am=block_mask(g, (3, 5)), average=False)
    # 5: is_causal with the causal attn_mask (PyTorch: a hint that needs the mask)
    mha_case(W, g, 2, 5, 5, 8, 2, am=causal_block(5, 5), is_causal=True, self_attn=True)
    # 6: fully masked query rows: batch 1 fully padded, row 2 of attn_mask blocks all keys
    am = block_mask(g, (5, 5))
    am[2] = True
    mha_case(W, g, 2, 5, 5, 8, 2, kpm=padding_mask([5, 0], 5), am=am, self_attn=True)
    # 7: fully masked rows with float masks, need_weights false, per-head average false
    am = float_mask(g, (3, 7))
    am[0] = NEG_INF
    mha_case(W, g, 2, 3, 7, 12, 3, am=am, need_weights=False, kdim=12, vdim=12)
    # 8: fully masked rows with per-head weights, 3-D bool mask, kdim != E
    am = block_mask(g, (2 * 2, 3, 5))
    am[1, 1] = True  # batch 0, head 1, row 1
    am[3] = True  # batch 1, head 1: every row
    mha_case(W, g, 2, 3, 5, 6, 2, kdim=3, vdim=3, am=am, average=False)
    # 9: add_bias_kv only: a fully padded batch still sees the bias_k column
    mha_case(W, g, 2, 3, 5, 8, 1, add_bias_kv=True, kpm=padding_mask([5, 0], 5))
    # 10: add_zero_attn only with a fully blocked row: the zero key keeps it alive
    am = block_mask(g, (5, 5))
    am[4] = True
    mha_case(W, g, 1, 5, 5, 4, 2, add_zero_attn=True, am=am, self_attn=True, average=False)
    # 11: L = S = 1, single head, everything written explicitly
    mha_case(W, g, 1, 1, 1, 5, 1, explicit={
        "dropout": 0.0, "bias": True, "add_bias_kv": False, "add_zero_attn": False,
        "kdim": 5, "vdim": 5, "need_weights": True, "average_attn_weights": True,
        "is_causal": False})


# ------------------------------------------------------------------------------------------
# Transformer layers and stacks: reference = the real module; cross-checked by a hand mirror
# ------------------------------------------------------------------------------------------


def act_fn(name):
    return F.relu if name == "relu" else F.gelu


def ln(x, P, pre, eps):
    return F.layer_norm(x, x.shape[-1:], P[pre + "weight"], P.get(pre + "bias"), eps)


def ff(x, P, act):
    h = act_fn(act)(F.linear(x, P["linear1.weight"], P.get("linear1.bias")))
    return F.linear(h, P["linear2.weight"], P.get("linear2.bias"))


def enc_layer_ref(x, P, c, mask=None, kpm=None, is_causal=False):
    H, eps = c["nhead"], c["layer_norm_eps"]
    E = x.shape[-1]

    def sa(y):
        return mha_ref(y, y, y, sub(P, "self_attn."), E, H, kpm, mask, is_causal, False)[0]

    if c["norm_first"]:
        x = x + sa(ln(x, P, "norm1.", eps))
        x = x + ff(ln(x, P, "norm2.", eps), P, c["activation"])
    else:
        x = ln(x + sa(x), P, "norm1.", eps)
        x = ln(x + ff(x, P, c["activation"]), P, "norm2.", eps)
    return x


def dec_layer_ref(x, mem, P, c, tgt_mask=None, memory_mask=None, tkpm=None, mkpm=None,
                  tgt_is_causal=False):
    H, eps = c["nhead"], c["layer_norm_eps"]
    E = x.shape[-1]

    def sa(y):
        return mha_ref(y, y, y, sub(P, "self_attn."), E, H, tkpm, tgt_mask, tgt_is_causal,
                       False)[0]

    def ca(y):
        return mha_ref(y, mem, mem, sub(P, "multihead_attn."), E, H, mkpm, memory_mask,
                       False, False)[0]

    if c["norm_first"]:
        x = x + sa(ln(x, P, "norm1.", eps))
        x = x + ca(ln(x, P, "norm2.", eps))
        x = x + ff(ln(x, P, "norm3.", eps), P, c["activation"])
    else:
        x = ln(x + sa(x), P, "norm1.", eps)
        x = ln(x + ca(x), P, "norm2.", eps)
        x = ln(x + ff(x, P, c["activation"]), P, "norm3.", eps)
    return x


LAYER_DEFAULTS = {"dim_feedforward": 2048, "dropout": 0.1, "activation": "relu",
                  "layer_norm_eps": 1e-5, "norm_first": False, "bias": True}


def layer_cfg(**kw):
    c = dict(LAYER_DEFAULTS)
    c.update(kw)
    return c


def layer_kwargs(c):
    return dict(dim_feedforward=c["dim_feedforward"], dropout=c["dropout"],
                activation=c["activation"], layer_norm_eps=c["layer_norm_eps"],
                batch_first=True, norm_first=c["norm_first"], bias=c["bias"])


def layer_attrs(c, keys):
    return {k: c[k] for k in keys if k in c}


ENC_ATTRS = ["d_model", "nhead", "dim_feedforward", "dropout", "activation", "layer_norm_eps",
             "norm_first", "bias"]


def enc_layer_case(W, g, B, L, c, mask=None, kpm=None, is_causal=False, omit=()):
    layer = randomize(nn.TransformerEncoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c)),
                      g).eval()
    P = params(layer)
    src = rn(g, B, L, c["d_model"])
    out = layer(src, src_mask=mask, src_key_padding_mask=kpm, is_causal=is_causal).detach()
    close(enc_layer_ref(src, P, c, mask, kpm, is_causal), out, 1e-5, "enc layer hand")
    inputs = {"src": src, **P}
    if mask is not None:
        inputs["src_mask"] = mask
    if kpm is not None:
        inputs["src_key_padding_mask"] = kpm
    attrs = layer_attrs(c, [k for k in ENC_ATTRS if k not in omit])
    if is_causal:
        attrs["is_causal"] = True
    W.emit("transformer_encoder_layer", inputs, attrs, {"out": out})


def gen_enc_layer(W):
    g = gen_for("transformer_encoder_layer")
    enc_layer_case(W, g, 2, 5, layer_cfg(d_model=12, nhead=3, dim_feedforward=20, dropout=0.0))
    enc_layer_case(W, g, 2, 7, layer_cfg(d_model=8, nhead=2, dim_feedforward=13,
                                         activation="gelu", norm_first=True),
                   mask=block_mask(g, (7, 7)), kpm=padding_mask([7, 4], 7))
    kpm = torch.zeros(3, 5).masked_fill(padding_mask([5, 2, 4], 5), NEG_INF)
    enc_layer_case(W, g, 3, 5, layer_cfg(d_model=8, nhead=4, dim_feedforward=16, bias=False),
                   mask=float_mask(g, (12, 5, 5)), kpm=kpm)
    enc_layer_case(W, g, 2, 5, layer_cfg(d_model=10, nhead=2, dim_feedforward=7,
                                         norm_first=True, layer_norm_eps=1e-6),
                   mask=causal_float(5, 5), is_causal=True)
    # defaults: dim_feedforward 2048, relu, post-norm (attributes omitted)
    enc_layer_case(W, g, 1, 3, layer_cfg(d_model=4, nhead=1),
                   omit=("dim_feedforward", "dropout", "activation", "layer_norm_eps",
                         "norm_first", "bias"))


DEC_ATTRS = ENC_ATTRS


def dec_layer_case(W, g, B, T, S, c, tgt_mask=None, memory_mask=None, tkpm=None, mkpm=None,
                   tgt_is_causal=False, memory_is_causal=False):
    layer = randomize(nn.TransformerDecoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c)),
                      g).eval()
    P = params(layer)
    tgt, mem = rn(g, B, T, c["d_model"]), rn(g, B, S, c["d_model"])
    out = layer(tgt, mem, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm,
                tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal).detach()
    close(dec_layer_ref(tgt, mem, P, c, tgt_mask, memory_mask, tkpm, mkpm, tgt_is_causal), out,
          1e-5, "dec layer hand")
    inputs = {"tgt": tgt, "memory": mem, **P}
    for n, t in (("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                 ("tgt_key_padding_mask", tkpm), ("memory_key_padding_mask", mkpm)):
        if t is not None:
            inputs[n] = t
    attrs = layer_attrs(c, DEC_ATTRS)
    if tgt_is_causal:
        attrs["tgt_is_causal"] = True
    if memory_is_causal:
        attrs["memory_is_causal"] = True
    W.emit("transformer_decoder_layer", inputs, attrs, {"out": out})


def gen_dec_layer(W):
    g = gen_for("transformer_decoder_layer")
    dec_layer_case(W, g, 2, 5, 7, layer_cfg(d_model=12, nhead=3, dim_feedforward=20))
    dec_layer_case(W, g, 2, 5, 3, layer_cfg(d_model=8, nhead=2, dim_feedforward=13,
                                            activation="gelu", norm_first=True),
                   tgt_mask=causal_block(5, 5), tgt_is_causal=True,
                   mkpm=padding_mask([3, 1], 3))
    tk = torch.zeros(2, 7).masked_fill(padding_mask([7, 5], 7), NEG_INF)
    dec_layer_case(W, g, 2, 7, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=9, bias=False),
                   tgt_mask=float_mask(g, (4, 7, 7)), memory_mask=float_mask(g, (7, 5)),
                   tkpm=tk)
    dec_layer_case(W, g, 3, 3, 5, layer_cfg(d_model=6, nhead=3, dim_feedforward=11,
                                            norm_first=True, dropout=0.0),
                   memory_mask=causal_block(3, 5), memory_is_causal=True,
                   tkpm=padding_mask([3, 2, 1], 3), tgt_mask=block_mask(g, (3, 3)))
    dec_layer_case(W, g, 1, 1, 1, layer_cfg(d_model=4, nhead=2, dim_feedforward=5,
                                            activation="gelu"))


def stack_norm(c, final_norm):
    return nn.LayerNorm(c["d_model"], eps=c["layer_norm_eps"], bias=c["bias"]) \
        if final_norm else None


def enc_stack_case(W, g, B, L, c, num_layers, final_norm, mask=None, kpm=None,
                   is_causal=False):
    layer = nn.TransformerEncoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c))
    stack = nn.TransformerEncoder(layer, num_layers, norm=stack_norm(c, final_norm),
                                  enable_nested_tensor=False)
    randomize(stack, g).eval()
    P = params(stack)
    src = rn(g, B, L, c["d_model"])
    out = stack(src, mask=mask, src_key_padding_mask=kpm, is_causal=is_causal).detach()
    x = src
    for i in range(num_layers):
        x = enc_layer_ref(x, sub(P, f"layers.{i}."), c, mask, kpm, is_causal)
    if final_norm:
        x = ln(x, P, "norm.", c["layer_norm_eps"])
    close(x, out, 1e-5, "encoder stack hand")
    inputs = {"src": src, **P}
    if mask is not None:
        inputs["mask"] = mask
    if kpm is not None:
        inputs["src_key_padding_mask"] = kpm
    attrs = layer_attrs(c, ENC_ATTRS)
    attrs["num_layers"] = num_layers
    if is_causal:
        attrs["is_causal"] = True
    W.emit("transformer_encoder", inputs, attrs, {"out": out})


def gen_enc_stack(W):
    g = gen_for("transformer_encoder")
    enc_stack_case(W, g, 2, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=16), 2, True)
    enc_stack_case(W, g, 2, 7, layer_cfg(d_model=12, nhead=3, dim_feedforward=10,
                                         norm_first=True), 3, False,
                   mask=block_mask(g, (7, 7)), kpm=padding_mask([7, 3], 7))
    enc_stack_case(W, g, 3, 5, layer_cfg(d_model=8, nhead=4, dim_feedforward=12,
                                         activation="gelu", bias=False), 2, True,
                   mask=causal_float(5, 5), is_causal=True)
    kpm = torch.zeros(2, 3).masked_fill(padding_mask([3, 1], 3), NEG_INF)
    enc_stack_case(W, g, 2, 3, layer_cfg(d_model=6, nhead=2, dim_feedforward=7,
                                         norm_first=True, activation="gelu"), 1, True,
                   mask=float_mask(g, (4, 3, 3)), kpm=kpm)


def dec_stack_case(W, g, B, T, S, c, num_layers, final_norm, tgt_mask=None, memory_mask=None,
                   tkpm=None, mkpm=None, tgt_is_causal=False):
    layer = nn.TransformerDecoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c))
    stack = nn.TransformerDecoder(layer, num_layers, norm=stack_norm(c, final_norm))
    randomize(stack, g).eval()
    P = params(stack)
    tgt, mem = rn(g, B, T, c["d_model"]), rn(g, B, S, c["d_model"])
    out = stack(tgt, mem, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm,
                tgt_is_causal=tgt_is_causal).detach()
    x = tgt
    for i in range(num_layers):
        x = dec_layer_ref(x, mem, sub(P, f"layers.{i}."), c, tgt_mask, memory_mask, tkpm, mkpm,
                          tgt_is_causal)
    if final_norm:
        x = ln(x, P, "norm.", c["layer_norm_eps"])
    close(x, out, 1e-5, "decoder stack hand")
    inputs = {"tgt": tgt, "memory": mem, **P}
    for n, t in (("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                 ("tgt_key_padding_mask", tkpm), ("memory_key_padding_mask", mkpm)):
        if t is not None:
            inputs[n] = t
    attrs = layer_attrs(c, DEC_ATTRS)
    attrs["num_layers"] = num_layers
    if tgt_is_causal:
        attrs["tgt_is_causal"] = True
    W.emit("transformer_decoder", inputs, attrs, {"out": out})


def gen_dec_stack(W):
    g = gen_for("transformer_decoder")
    dec_stack_case(W, g, 2, 5, 7, layer_cfg(d_model=8, nhead=2, dim_feedforward=16), 2, True)
    dec_stack_case(W, g, 2, 5, 3, layer_cfg(d_model=12, nhead=3, dim_feedforward=10), 2, False,
                   tgt_mask=causal_block(5, 5), tgt_is_causal=True,
                   mkpm=padding_mask([3, 2], 3))
    tk = torch.zeros(1, 7).masked_fill(padding_mask([6], 7), NEG_INF)
    dec_stack_case(W, g, 1, 7, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=13,
                                            norm_first=True, activation="gelu", bias=False),
                   3, True, tgt_mask=causal_float(7, 7) + rn(g, 7, 7, s=0.3),
                   memory_mask=float_mask(g, (7, 5)), tkpm=tk)


def transformer_case(W, g, B, S, T, c, ne, nd, src_mask=None, tgt_mask=None,
                     memory_mask=None, skpm=None, tkpm=None, mkpm=None):
    model = nn.Transformer(d_model=c["d_model"], nhead=c["nhead"], num_encoder_layers=ne,
                           num_decoder_layers=nd, **layer_kwargs(c))
    randomize(model, g).eval()
    P = params(model)
    src, tgt = rn(g, B, S, c["d_model"]), rn(g, B, T, c["d_model"])
    out = model(src, tgt, src_mask=src_mask, tgt_mask=tgt_mask, memory_mask=memory_mask,
                src_key_padding_mask=skpm, tgt_key_padding_mask=tkpm,
                memory_key_padding_mask=mkpm).detach()
    mem = src
    for i in range(ne):
        mem = enc_layer_ref(mem, sub(P, f"encoder.layers.{i}."), c, src_mask, skpm)
    mem = ln(mem, P, "encoder.norm.", c["layer_norm_eps"])
    x = tgt
    for i in range(nd):
        x = dec_layer_ref(x, mem, sub(P, f"decoder.layers.{i}."), c, tgt_mask, memory_mask,
                          tkpm, mkpm)
    x = ln(x, P, "decoder.norm.", c["layer_norm_eps"])
    close(x, out, 1e-5, "transformer hand")
    inputs = {"src": src, "tgt": tgt, **P}
    for n, t in (("src_mask", src_mask), ("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                 ("src_key_padding_mask", skpm), ("tgt_key_padding_mask", tkpm),
                 ("memory_key_padding_mask", mkpm)):
        if t is not None:
            inputs[n] = t
    attrs = {"d_model": c["d_model"], "nhead": c["nhead"], "num_encoder_layers": ne,
             "num_decoder_layers": nd}
    attrs.update(layer_attrs(c, ENC_ATTRS[2:]))
    W.emit("transformer", inputs, attrs, {"out": out})


def gen_transformer(W):
    g = gen_for("transformer")
    transformer_case(W, g, 2, 5, 3, layer_cfg(d_model=8, nhead=2, dim_feedforward=12), 1, 1)
    sk = padding_mask([7, 4], 7)
    transformer_case(W, g, 2, 7, 5, layer_cfg(d_model=12, nhead=3, dim_feedforward=10,
                                              norm_first=True, activation="gelu"), 2, 2,
                     tgt_mask=causal_block(5, 5), skpm=sk, tkpm=padding_mask([5, 3], 5),
                     mkpm=sk)
    transformer_case(W, g, 1, 5, 7, layer_cfg(d_model=8, nhead=4, dim_feedforward=9,
                                              bias=False, layer_norm_eps=1e-6), 1, 2,
                     src_mask=float_mask(g, (5, 5)), tgt_mask=causal_float(7, 7),
                     memory_mask=float_mask(g, (7, 5)))


# ------------------------------------------------------------------------------------------
# GPT (decoder-only LM built from nn.TransformerEncoder with a causal mask)
# ------------------------------------------------------------------------------------------


class GPT(nn.Module):
    def __init__(self, c, vocab_size, block_size, num_layers):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, c["d_model"])
        self.pos_emb = nn.Embedding(block_size, c["d_model"])
        layer = nn.TransformerEncoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c))
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False).layers
        self.norm = nn.LayerNorm(c["d_model"], eps=c["layer_norm_eps"], bias=c["bias"])
        self.lm_head = nn.Linear(c["d_model"], vocab_size, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.lm_head(self.norm(x))


def gpt_case(W, g, B, T, c, V, block, nl, omit_norm_first=False):
    model = randomize(GPT(c, V, block, nl), g).eval()
    P = params(model)
    idx = torch.randint(0, V, (B, T), generator=g)
    out = model(idx).detach()
    x = P["tok_emb.weight"][idx] + P["pos_emb.weight"][:T]
    for i in range(nl):
        x = enc_layer_ref(x, sub(P, f"layers.{i}."), c, causal_float(T, T), None, True)
    x = F.linear(ln(x, P, "norm.", c["layer_norm_eps"]), P["lm_head.weight"])
    close(x, out, 1e-5, "gpt hand")
    attrs = {"vocab_size": V, "block_size": block, "num_layers": nl}
    attrs.update(layer_attrs(c, ENC_ATTRS))
    if omit_norm_first:
        del attrs["norm_first"]
    W.emit("gpt", {"idx": idx, **P}, attrs, {"out": out})


def gen_gpt(W):
    g = gen_for("gpt")
    gpt_case(W, g, 2, 5, layer_cfg(d_model=16, nhead=4, dim_feedforward=32, norm_first=True,
                                   dropout=0.0), 11, 8, 2, omit_norm_first=True)
    gpt_case(W, g, 1, 7, layer_cfg(d_model=12, nhead=3, dim_feedforward=20,
                                   activation="gelu", bias=False, norm_first=False), 13, 7, 2)
    gpt_case(W, g, 1, 1, layer_cfg(d_model=8, nhead=2, dim_feedforward=16, norm_first=True),
             5, 4, 1)


# ------------------------------------------------------------------------------------------
# Seed 000 / 001 classes (rasbt, LLMs-from-scratch ch. 3), batched with transpose(-2, -1)
# where the seed writes keys.T (identical for 2-D inputs)
# ------------------------------------------------------------------------------------------
SEED_INPUTS = torch.tensor(
    [[0.43, 0.15, 0.89],  # Your     (x^1)
     [0.55, 0.87, 0.66],  # journey  (x^2)
     [0.57, 0.85, 0.64],  # starts   (x^3)
     [0.22, 0.58, 0.33],  # with     (x^4)
     [0.77, 0.25, 0.10],  # one      (x^5)
     [0.05, 0.80, 0.55]])  # step     (x^6)
HELLO_SHINY_SUN = torch.tensor([[0.34, 0.22, 0.54], [0.53, 0.34, 0.98], [0.29, 0.54, 0.93]])


class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values


class SeedMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length),
                                                diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads,
                                       self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads,
                                      self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


def gen_simple(W):
    g = gen_for("simple_self_attention")

    def case(x, normalize=None):
        scores = x @ x.transpose(-2, -1)
        if normalize == "sum":
            w = scores / scores.sum(dim=-1, keepdim=True)
        else:
            w = torch.softmax(scores, dim=-1)
        out = w @ x
        attrs = {} if normalize is None else {"normalize": normalize}
        W.emit("simple_self_attention", {"inputs": x}, attrs,
               {"out": out, "attn_scores": scores, "attn_weights": w})
        return scores, w, out

    s, w, o = case(SEED_INPUTS.clone())
    # seed 001's printed numbers (query "journey")
    assert torch.allclose(s[1], torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),
                          atol=1e-4)
    assert torch.allclose(w[1], torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),
                          atol=1e-4)
    assert torch.allclose(o[1], torch.tensor([0.4419, 0.6515, 0.5683]), atol=1e-4)
    s, w, o = case(SEED_INPUTS.clone(), "sum")
    assert torch.allclose(w[1], torch.tensor([0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656]),
                          atol=1e-4)
    s, w, o = case(HELLO_SHINY_SUN.clone(), "softmax")
    assert torch.allclose(w[1], torch.tensor([0.2291, 0.4063, 0.3646]), atol=1e-4)
    assert torch.allclose(o[1], torch.tensor([0.3990, 0.3854, 0.8610]), atol=1e-4)
    case(rn(g, 2, 5, 4, s=0.7), "softmax")
    case(0.1 + ur(g, 3, 7, 5), "sum")


def gen_seed_v1_v2(W):
    g = gen_for("self_attention_v1")
    torch.manual_seed(123)
    m = SelfAttention_v1(3, 2)
    P = params(m)
    W.emit("self_attention_v1", {"x": SEED_INPUTS.clone(), **P}, {"d_in": 3, "d_out": 2},
           {"out": m(SEED_INPUTS).detach()})
    for shape, d_in, d_out in (((2, 5, 7), 7, 4), ((13, 3), 3, 5)):
        m = randomize(SelfAttention_v1(d_in, d_out), g)
        P = params(m)
        x = rn(g, *shape)
        q, k, v = x @ P["W_query"], x @ P["W_key"], x @ P["W_value"]
        ref = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_out), -1) @ v
        out = m(x).detach()
        close(ref, out, 1e-5, "v1 hand")
        W.emit("self_attention_v1", {"x": x, **P}, {"d_in": d_in, "d_out": d_out}, {"out": out})

    g = gen_for("self_attention_v2")
    torch.manual_seed(789)
    m = SelfAttention_v2(3, 2)
    P = params(m)
    W.emit("self_attention_v2", {"x": SEED_INPUTS.clone(), **P}, {"d_in": 3, "d_out": 2},
           {"out": m(SEED_INPUTS).detach()})
    for shape, d_in, d_out, qb in (((2, 5, 7), 7, 4, True), ((7, 3), 3, 5, False),
                                   ((3, 1, 4), 4, 3, True)):
        m = randomize(SelfAttention_v2(d_in, d_out, qb), g)
        P = params(m)
        x = rn(g, *shape)
        W.emit("self_attention_v2", {"x": x, **P},
               {"d_in": d_in, "d_out": d_out, "qkv_bias": qb}, {"out": m(x).detach()})


def gen_seed_causal_mha(W):
    batch = torch.stack((SEED_INPUTS, SEED_INPUTS), dim=0)
    g = gen_for("causal_attention")
    torch.manual_seed(123)
    ca = CausalAttention(3, 2, 6, 0.0).eval()
    W.emit("causal_attention", {"x": batch.clone(), **params(ca)},
           {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.0},
           {"out": ca(batch).detach()})
    for B, T, d_in, d_out, ctx, qb, keep_mask, drop in ((2, 5, 4, 6, 7, True, False, 0.0),
                                                        (3, 7, 5, 3, 7, False, True, 0.5),
                                                        (1, 1, 3, 4, 5, True, True, 0.1)):
        ca = randomize(CausalAttention(d_in, d_out, ctx, drop, qb), g).eval()
        P = params(ca)
        x = rn(g, B, T, d_in)
        out = ca(x).detach()
        q = F.linear(x, P["W_query.weight"], P.get("W_query.bias"))
        k = F.linear(x, P["W_key.weight"], P.get("W_key.bias"))
        v = F.linear(x, P["W_value.weight"], P.get("W_value.bias"))
        s = (q @ k.transpose(1, 2)) / math.sqrt(d_out) + causal_float(T, T)
        close(torch.softmax(s, -1) @ v, out, 1e-5, "causal hand")
        if not keep_mask:
            del P["mask"]
        W.emit("causal_attention", {"x": x, **P},
               {"d_in": d_in, "d_out": d_out, "context_length": ctx, "dropout": drop,
                "qkv_bias": qb}, {"out": out})

    g = gen_for("seed_multihead_attention")
    torch.manual_seed(123)
    mha = SeedMultiHeadAttention(3, 2, 6, 0.0, num_heads=2).eval()
    W.emit("seed_multihead_attention", {"x": batch.clone(), **params(mha)},
           {"d_in": 3, "d_out": 2, "context_length": 6, "dropout": 0.0, "num_heads": 2},
           {"out": mha(batch).detach()})
    for B, T, d_in, d_out, ctx, H, qb, keep_mask in ((2, 5, 5, 12, 7, 3, True, False),
                                                     (1, 7, 3, 8, 7, 4, False, True),
                                                     (3, 3, 6, 6, 13, 1, True, True)):
        mha = randomize(SeedMultiHeadAttention(d_in, d_out, ctx, 0.1, H, qb), g).eval()
        P = params(mha)
        x = rn(g, B, T, d_in)
        out = mha(x).detach()
        # hand cross-check
        q = F.linear(x, P["W_query.weight"], P.get("W_query.bias"))
        k = F.linear(x, P["W_key.weight"], P.get("W_key.bias"))
        v = F.linear(x, P["W_value.weight"], P.get("W_value.bias"))
        hd = d_out // H
        sp = lambda t: t.view(B, T, H, hd).transpose(1, 2)
        s = sp(q) @ sp(k).transpose(-2, -1) / math.sqrt(hd) + causal_float(T, T)
        o = (torch.softmax(s, -1) @ sp(v)).transpose(1, 2).reshape(B, T, d_out)
        close(F.linear(o, P["out_proj.weight"], P["out_proj.bias"]), out, 1e-5, "seed mha hand")
        if not keep_mask:
            del P["mask"]
        W.emit("seed_multihead_attention", {"x": x, **P},
               {"d_in": d_in, "d_out": d_out, "context_length": ctx, "dropout": 0.1,
                "num_heads": H, "qkv_bias": qb}, {"out": out})


# ------------------------------------------------------------------------------------------
# seed 002 general attention, Bahdanau additive attention
# ------------------------------------------------------------------------------------------


def gen_general(W):
    g = gen_for("general_attention")
    for B, L, S, Dq, Dx, Dv, bias, selfa, mask in (
            (2, 3, 5, 4, 6, 7, False, False, None),
            (2, 5, 7, 6, 3, 4, True, False, "blh"),
            (2, 5, 5, 4, 6, 4, True, True, "causal"),
            (1, 7, 7, 3, 5, 2, False, True, None)):
        Wk, Wv = nn.Linear(Dx, Dq, bias=bias), nn.Linear(Dx, Dv, bias=bias)
        Wq = nn.Linear(Dx, Dq, bias=bias) if selfa else None
        P = {}
        for nm, lin in (("W_key", Wk), ("W_value", Wv), ("W_query", Wq)):
            if lin is not None:
                randomize(lin, g)
                P.update(params(lin, nm + "."))
        x = rn(g, B, S, Dx)
        q = F.linear(x, P["W_query.weight"], P.get("W_query.bias")) if selfa else rn(g, B, L, Dq)
        k = F.linear(x, P["W_key.weight"], P.get("W_key.bias"))
        v = F.linear(x, P["W_value.weight"], P.get("W_value.bias"))
        am = None
        if mask == "blh":
            am = ur(g, B, L, S) < 0.6
            am[:, :, 0] = True
            am[1, 2] = False  # fully masked row -> zeros
        elif mask == "causal":
            am = ~causal_block(L, S)
        s = q @ k.transpose(-2, -1) / math.sqrt(Dq)
        if am is not None:
            s = s.masked_fill(~am, NEG_INF)
        w, _ = safe_softmax(s)
        out = w @ v
        # PyTorch SDPA (bool mask, True = attend) gives 0 for fully masked rows too
        close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=am), 1e-5, "general")
        inputs = {"inputs": x, **P}
        if not selfa:
            inputs["query"] = q
        if am is not None:
            inputs["attn_mask"] = am
        attrs = {"query_dim": Dq, "input_dim": Dx, "value_dim": Dv}
        if bias or selfa:
            attrs["bias"] = bias
        if selfa:
            attrs["self_attention"] = True
        W.emit("general_attention", inputs, attrs, {"out": out, "attn_weights": w})


def gen_additive(W):
    g = gen_for("additive_attention")
    for B, L, S, Dq, Dk, Dv, A, mask in ((2, 3, 5, 4, 6, 7, 8, None),
                                         (3, 1, 7, 5, 5, 3, 6, "valid"),
                                         (2, 5, 3, 3, 4, 4, 5, "ls"),
                                         (2, 3, 5, 6, 2, 5, 7, "bls")):
        Wq, Wk, wv = (randomize(nn.Linear(Dq, A, bias=False), g),
                      randomize(nn.Linear(Dk, A, bias=False), g),
                      randomize(nn.Linear(A, 1, bias=False), g))
        q, k, v = rn(g, B, L, Dq), rn(g, B, S, Dk), rn(g, B, S, Dv)
        am = None
        if mask == "valid":
            am = ~padding_mask([7, 2, 4], S)[:, None, :]  # [B, 1, S]
        elif mask == "ls":
            am = ur(g, L, S) < 0.6
            am[:, 0] = True
            am[2] = False  # fully masked row -> zeros
        elif mask == "bls":
            am = ur(g, B, L, S) < 0.6
            am[..., 1] = True
        feat = torch.tanh(Wq(q)[:, :, None, :] + Wk(k)[:, None, :, :])
        s = wv(feat).squeeze(-1).detach()
        if am is not None:
            s = s.masked_fill(~am, NEG_INF)
        w, _ = safe_softmax(s)
        out = w @ v
        inputs = {"queries": q, "keys": k, "values": v, **params(Wq, "W_q."),
                  **params(Wk, "W_k."), **params(wv, "w_v.")}
        if am is not None:
            inputs["attn_mask"] = am
        W.emit("additive_attention", inputs, {"query_size": Dq, "key_size": Dk,
                                              "num_hiddens": A},
               {"out": out, "attn_weights": w})


# ------------------------------------------------------------------------------------------
# positional encodings
# ------------------------------------------------------------------------------------------


def sinusoid(n, d, base=10000.0):
    pos = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(d)
    ang = pos / np.power(float(base), (j - j % 2).astype(np.float64) / d)[None, :]
    pe = np.where(j % 2 == 0, np.sin(ang), np.cos(ang))
    return torch.from_numpy(pe.astype(np.float32))


def gen_positional(W):
    g = gen_for("positional_encoding")
    # 0: add, defaults for mode/base
    x = rn(g, 2, 5, 16)
    W.emit("positional_encoding", {"x": x}, {"d_model": 16, "max_len": 50},
           {"out": x + sinusoid(5, 16)})
    # 1: concat, odd d_model
    x = rn(g, 2, 7, 6)
    W.emit("positional_encoding", {"x": x}, {"d_model": 5, "max_len": 7, "mode": "concat"},
           {"out": torch.cat([x, sinusoid(7, 5).expand(2, 7, 5)], -1)})
    # 2: table only, odd d_model
    W.emit("positional_encoding", {}, {"d_model": 7, "max_len": 20, "length": 13},
           {"out": sinusoid(13, 7)})
    # 3: add, odd d_model, base 100, every attribute written
    x = rn(g, 3, 13, 9)
    W.emit("positional_encoding", {"x": x}, {"d_model": 9, "max_len": 13, "mode": "add",
                                            "base": 100.0},
           {"out": x + sinusoid(13, 9, 100.0)})
    # 4: long table (positions up to 199) to exercise large angles
    W.emit("positional_encoding", {}, {"d_model": 12, "max_len": 200, "length": 200,
                                       "base": 10000.0}, {"out": sinusoid(200, 12)})
    g = gen_for("learned_positional_encoding")
    for B, L, E, M in ((2, 5, 8, 7), (1, 13, 3, 13), (3, 1, 5, 4)):
        x, w = rn(g, B, L, E), rn(g, M, E, s=0.3)
        W.emit("learned_positional_encoding", {"x": x, "weight": w}, {}, {"out": x + w[:L]})


# ------------------------------------------------------------------------------------------
# small ops
# ------------------------------------------------------------------------------------------


def gen_small(W):
    g = gen_for("linear")
    for shape, IN, OUT, bias in (((2, 5, 7), 7, 4, True), ((3, 2, 3, 5), 5, 13, False),
                                 ((6,), 6, 3, True), ((7, 1), 1, 5, True)):
        x, w = rn(g, *shape), rn(g, OUT, IN, s=0.3)
        b = rn(g, OUT, s=0.3) if bias else None
        inputs = {"input": x, "weight": w}
        if bias:
            inputs["bias"] = b
        W.emit("linear", inputs, {}, {"out": F.linear(x, w, b)})
    g = gen_for("layer_norm")
    for shape, wb, eps in (((2, 5, 8), "wb", None), ((3, 7), "w", 1e-3),
                           ((2, 3, 2, 13), "", 1e-5), ((4, 1), "wb", 1e-6)):
        x = rn(g, *shape, s=2.0) + 0.5
        E = shape[-1]
        w = 1.0 + rn(g, E, s=0.3) if "w" in wb else None
        b = rn(g, E, s=0.3) if "b" in wb else None
        inputs = {"input": x}
        if w is not None:
            inputs["weight"] = w
        if b is not None:
            inputs["bias"] = b
        attrs = {} if eps is None else {"eps": eps}
        W.emit("layer_norm", inputs, attrs,
               {"out": F.layer_norm(x, (E,), w, b, 1e-5 if eps is None else eps)})
    g = gen_for("relu")
    for shape in ((2, 5, 7), (13,)):
        x = rn(g, *shape)
        W.emit("relu", {"input": x}, {}, {"out": F.relu(x)})
    g = gen_for("tanh")
    for shape in ((3, 7), (2, 1, 3, 5)):
        x = rn(g, *shape, s=2.0)
        W.emit("tanh", {"input": x}, {}, {"out": torch.tanh(x)})
    g = gen_for("gelu")
    for shape, appr in (((2, 5, 7), None), ((13,), "tanh"), ((3, 3, 5), "none")):
        x = rn(g, *shape, s=3.0)
        W.emit("gelu", {"input": x}, {} if appr is None else {"approximate": appr},
               {"out": F.gelu(x, approximate=appr or "none")})
    g = gen_for("softmax")
    for shape, s, dim in (((2, 5, 7), 1.0, None), ((13,), 30.0, -1), ((2, 3, 1, 5), 5.0, -1)):
        x = rn(g, *shape, s=s)
        W.emit("softmax", {"input": x}, {} if dim is None else {"dim": dim},
               {"out": torch.softmax(x, -1)})
    g = gen_for("embedding")
    for shape, V, E in (((5,), 7, 4), ((2, 7), 13, 5), ((2, 3, 1), 3, 8)):
        ids = torch.randint(0, V, shape, generator=g)
        w = rn(g, V, E)
        W.emit("embedding", {"input": ids, "weight": w}, {}, {"out": F.embedding(ids, w)})
    g = gen_for("feed_forward")
    for shape, d, f, act in (((2, 5, 8), 8, 16, "relu"), ((7, 6), 6, 13, "gelu"),
                             ((2, 1, 3, 4), 4, 7, None)):
        l1, l2 = randomize(nn.Linear(d, f), g), randomize(nn.Linear(f, d), g)
        x = rn(g, *shape)
        out = l2(act_fn(act or "relu")(l1(x))).detach()
        attrs = {"d_model": d, "d_ff": f, "dropout": 0.1}
        if act is not None:
            attrs["activation"] = act
        W.emit("feed_forward", {"x": x, **params(l1, "w_1."), **params(l2, "w_2.")}, attrs,
               {"out": out})


# ------------------------------------------------------------------------------------------
# seed 003: ViT-style MHSA over [CLS; proj(patches)] + pos_embed
# ------------------------------------------------------------------------------------------


def gen_vit(W):
    g = gen_for("vit_self_attention")
    for B, N, P_, E, H, Nmax in ((2, 4, 12, 8, 2, 4), (1, 7, 5, 12, 3, 9), (3, 1, 3, 6, 1, 2)):
        proj = randomize(nn.Linear(P_, E), g)
        attn = build_mha(g, E, H)
        cls = rn(g, 1, 1, E, s=0.3)
        pos = rn(g, 1, Nmax + 1, E, s=0.3)
        patches = rn(g, B, N, P_)
        z = torch.cat([cls.expand(B, 1, E), proj(patches)], 1) + pos[:, :N + 1]
        out, w = attn(z, z, z)
        out, w = out.detach(), w.detach()
        Pa = params(attn)
        ref_o, ref_w, _ = mha_ref(z.detach(), z.detach(), z.detach(), Pa, E, H)
        close(ref_o, out, 1e-5, "vit hand")
        close(ref_w, w, 1e-5, "vit hand w")
        inputs = {"patches": patches, "cls_token": cls, "pos_embed": pos,
                  **params(proj, "proj."), **params(attn, "attn.")}
        W.emit("vit_self_attention", inputs, {"patch_dim": P_, "embed_dim": E, "num_heads": H,
                                              "max_patches": Nmax},
               {"out": out, "attn_weights": w})


# ------------------------------------------------------------------------------------------
# cross_entropy (forward)
# ------------------------------------------------------------------------------------------


def ce_inputs(g, N, C, ignore=0, ignore_index=-100):
    x = rn(g, N, C, s=2.0)
    t = torch.randint(0, C, (N,), generator=g)
    if ignore:
        t[torch.randperm(N, generator=g)[:ignore]] = ignore_index
    return x, t


def ce_attrs(ignore_index, ls):
    attrs = {}
    if ignore_index != -100:
        attrs["ignore_index"] = ignore_index
    if ls:
        attrs["label_smoothing"] = ls
    return attrs


def gen_cross_entropy(W):
    g = gen_for("cross_entropy")
    for N, C, ignore, ii, ls in ((5, 7, 0, -100, 0.0), (7, 4, 2, -100, 0.0),
                                 (6, 5, 2, 3, 0.1), (1, 13, 0, -100, 0.25)):
        x, t = ce_inputs(g, N, C, ignore, ii)
        out = F.cross_entropy(x, t, ignore_index=ii, label_smoothing=ls)
        assert out.dim() == 0
        W.emit("cross_entropy", {"input": x, "target": t}, ce_attrs(ii, ls), {"out": out})


# ------------------------------------------------------------------------------------------
# Backward cases (<op>_bwd_<k>): references from torch.autograd in float32.  The input file
# holds the forward case plus "grad.out" (a random cotangent of "out") and metadata
# backward = "true"; the expected file holds "out" and "grad.<name>" for every floating-point
# input (masks: only sdpa's float attn_mask) and every parameter.  No case has a query row
# whose keys are all masked (PyTorch's backward is NaN there) and no dropout.
# ------------------------------------------------------------------------------------------


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def grad_or_zero(t):
    return t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t)


def emit_backward(W, g, op, inputs, attrs, out, leaves, modules=(), tag="_bwd", tol="1e-4"):
    """Backpropagates a random cotangent of `out`; writes the case.  `leaves`: the input
    tensors (by file name) whose gradients are expected; `modules`: (module, prefix) pairs
    whose parameters' gradients are expected."""
    gout = torch.randn(tuple(out.shape), generator=g)  # also 0-d (cross_entropy)
    out.backward(gout)
    outputs = {"out": out.detach().clone()}
    for n, t in leaves.items():
        outputs["grad." + n] = grad_or_zero(t)
    for m, pre in modules:
        for n, p in m.named_parameters():
            outputs["grad." + pre + n] = grad_or_zero(p)
    ins = {n: t.detach().clone() for n, t in inputs.items()}
    ins["grad.out"] = gout
    W.emit_bwd(op, ins, attrs, outputs, tag=tag, tol=tol)
    return outputs


def input_grads(fn, leaves, gout):
    """Gradients of <fn(), gout> with respect to leaves (a list), as a list."""
    return torch.autograd.grad(fn(), leaves, gout)


def sdpa_bwd_case(W, g, B, H, Hkv, L, S, D, Dv, mask=None, is_causal=False, scale=None,
                  align=None, three=False):
    if three:
        q, k, v = leaf(rn(g, B, L, D)), leaf(rn(g, B, S, D)), leaf(rn(g, B, S, Dv))
    else:
        q, k, v = leaf(rn(g, B, H, L, D)), leaf(rn(g, B, Hkv, S, D)), leaf(rn(g, B, Hkv, S, Dv))
    gqa = H != Hkv
    m = None
    if mask is not None:
        m = leaf(mask) if mask.dtype == torch.float32 else mask
    keep = None
    if is_causal:
        off = (S - L) if align == "bottom_right" else 0
        keep = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + off

    def additive_mask():
        add = torch.zeros(L, S)
        if m is not None:
            mm = m.view(1, -1) if m.dim() == 1 else m
            add = add + (torch.zeros(mm.shape).masked_fill(~mm, NEG_INF)
                         if mm.dtype == torch.bool else mm)
        if keep is not None:
            add = add + torch.zeros(L, S).masked_fill(~keep, NEG_INF)
        return add

    add = additive_mask()
    assert not torch.isneginf(add).all(-1).any(), "a fully masked row in a backward case"
    kw = dict(scale=scale, enable_gqa=gqa)

    def torch_out():
        if m is None and not is_causal:
            return F.scaled_dot_product_attention(q, k, v, **kw)
        if m is None and align != "bottom_right":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
        if keep is None and m.dtype == torch.bool:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m.view(1, -1)
                                                  if m.dim() == 1 else m, **kw)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask(), **kw)

    def hand_out():
        kk, vv = k, v
        if gqa:
            kk, vv = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        sc = scale if scale is not None else 1.0 / math.sqrt(D)
        s = (q @ kk.transpose(-2, -1)) * sc + additive_mask()
        return torch.softmax(s, -1) @ vv

    out = torch_out()
    gtest = torch.randn(out.shape)
    wrt = [q, k, v] + ([m] if m is not None and m.dtype == torch.float32 else [])
    for a, b, n in zip(input_grads(torch_out, wrt, gtest), input_grads(hand_out, wrt, gtest),
                       ("query", "key", "value", "attn_mask")):
        close(b, a, 1e-5, f"sdpa backward hand vs torch: {n}")
    inputs = {"query": q, "key": k, "value": v}
    leaves = {"query": q, "key": k, "value": v}
    if m is not None:
        inputs["attn_mask"] = m
        if m.dtype == torch.float32:
            leaves["attn_mask"] = m
    attrs = {}
    if is_causal:
        attrs["is_causal"] = True
    if scale is not None:
        attrs["scale"] = scale
    if gqa:
        attrs["enable_gqa"] = True
    if align is not None:
        attrs["causal_alignment"] = align
    emit_backward(W, g, "sdpa", inputs, attrs, out, leaves)


def gen_sdpa_bwd(W):
    g = gen_for("sdpa_bwd")
    # 0: no mask, L != S, D != Dv
    sdpa_bwd_case(W, g, 2, 3, 3, 5, 7, 4, 6)
    # 1: is_causal, L == S
    sdpa_bwd_case(W, g, 1, 2, 2, 6, 6, 8, 8, is_causal=True)
    # 2: bool key padding [B, 1, 1, S] (no batch fully padded), explicit scale
    sdpa_bwd_case(W, g, 3, 2, 2, 4, 6, 4, 4, mask=~padding_mask([6, 3, 1], 6)[:, None, None, :],
                  scale=0.4)
    # 3: float mask broadcast from [1, 1, L, S] with -inf entries: grad.attn_mask is summed
    #    over batch and heads
    sdpa_bwd_case(W, g, 2, 3, 3, 5, 7, 4, 5, mask=float_mask(g, (1, 1, 5, 7)))
    # 4: GQA H=6, Hkv=2 with a float [H, L, S] mask (summed over the batch)
    sdpa_bwd_case(W, g, 2, 6, 2, 4, 5, 4, 3, mask=float_mask(g, (6, 4, 5)))
    # 5: 3-D inputs [B, L, D] with a float [B, L, S] mask
    sdpa_bwd_case(W, g, 2, 1, 1, 5, 6, 3, 4, mask=float_mask(g, (2, 5, 6)), three=True)
    # 6: bottom_right causal with a float 1-D mask [S], L < S
    sdpa_bwd_case(W, g, 2, 2, 2, 3, 6, 4, 4, mask=rn(g, 6, s=0.5), is_causal=True,
                  align="bottom_right")
    # 7: MQA with a bool [L, S] mask, is_causal (both apply)
    m = ur(g, 5, 5) < 0.7
    m[:, 0] = True
    sdpa_bwd_case(W, g, 1, 4, 1, 5, 5, 8, 8, mask=m, is_causal=True)


def mha_bwd_case(W, g, B, L, S, E, H, kdim=None, vdim=None, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kpm=None, am=None, is_causal=False, need_weights=None,
                 average=None, unbatched=False):
    mha = build_mha(g, E, H, bias, add_bias_kv, add_zero_attn, kdim, vdim)
    P = params(mha)
    lead = () if unbatched else (B,)
    query = leaf(rn(g, *lead, L, E))
    key, value = leaf(rn(g, *lead, S, kdim or E)), leaf(rn(g, *lead, S, vdim or E))
    nw = True if need_weights is None else need_weights
    avg = True if average is None else average
    out, _ = mha(query, key, value, key_padding_mask=kpm, need_weights=nw, attn_mask=am,
                 average_attn_weights=avg, is_causal=is_causal)
    if not unbatched:
        # the hand mirror's input gradients agree with the module's
        P2 = dict(P)
        if add_zero_attn:
            P2["__add_zero_attn__"] = True
        gtest = torch.randn(out.shape)
        fm = lambda: mha(query, key, value, key_padding_mask=kpm, need_weights=nw, attn_mask=am,
                         average_attn_weights=avg, is_causal=is_causal)[0]
        fh = lambda: mha_ref(query, key, value, P2, E, H, kpm, am, is_causal, nw, avg)[0]
        for a, b in zip(input_grads(fm, [query, key, value], gtest),
                        input_grads(fh, [query, key, value], gtest)):
            close(b, a, 1e-5, "mha backward hand vs module")
    inputs = {"query": query, "key": key, "value": value, **P}
    if kpm is not None:
        inputs["key_padding_mask"] = kpm
    if am is not None:
        inputs["attn_mask"] = am
    attrs = {"embed_dim": E, "num_heads": H}
    for n, v, d in (("kdim", kdim, None), ("vdim", vdim, None), ("bias", bias, True),
                    ("add_bias_kv", add_bias_kv, False), ("add_zero_attn", add_zero_attn, False),
                    ("is_causal", is_causal, False), ("need_weights", need_weights, None),
                    ("average_attn_weights", average, None)):
        if v != d:
            attrs[n] = v
    emit_backward(W, g, "multihead_attention", inputs, attrs, out,
                  {"query": query, "key": key, "value": value}, [(mha, "")])


def gen_mha_bwd(W):
    g = gen_for("multihead_attention_bwd")
    # 0: defaults, L == S (query, key, value separate tensors)
    mha_bwd_case(W, g, 2, 5, 5, 12, 3)
    # 1: bool key_padding_mask + bool attn_mask [L, S], per-head weights
    mha_bwd_case(W, g, 2, 3, 6, 8, 2, kpm=padding_mask([6, 4], 6), am=block_mask(g, (3, 6)),
                 average=False)
    # 2: float attn_mask [B*H, L, S] + float key_padding_mask, need_weights false
    kpm = torch.zeros(2, 5).masked_fill(padding_mask([5, 3], 5), NEG_INF) + rn(g, 2, 5, s=0.2)
    mha_bwd_case(W, g, 2, 4, 5, 8, 4, kpm=kpm, am=float_mask(g, (8, 4, 5)), need_weights=False)
    # 3: kdim/vdim != embed_dim, bias false
    mha_bwd_case(W, g, 2, 5, 3, 6, 2, kdim=5, vdim=7, bias=False)
    # 4: add_bias_kv + add_zero_attn with a padding and a bool mask
    mha_bwd_case(W, g, 2, 3, 5, 8, 2, add_bias_kv=True, add_zero_attn=True,
                 kpm=padding_mask([5, 2], 5), am=block_mask(g, (3, 5)))
    # 5: is_causal with its causal mask
    mha_bwd_case(W, g, 2, 5, 5, 8, 2, am=causal_block(5, 5), is_causal=True)
    # 6: unbatched [L, E], add_bias_kv only, need_weights false
    mha_bwd_case(W, g, 1, 4, 3, 6, 3, add_bias_kv=True, need_weights=False, unbatched=True)


def enc_layer_bwd_case(W, g, B, L, c, mask=None, kpm=None, is_causal=False):
    layer = randomize(nn.TransformerEncoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c)),
                      g).eval()
    P = params(layer)
    src = leaf(rn(g, B, L, c["d_model"]))
    out = layer(src, src_mask=mask, src_key_padding_mask=kpm, is_causal=is_causal)
    inputs = {"src": src, **P}
    if mask is not None:
        inputs["src_mask"] = mask
    if kpm is not None:
        inputs["src_key_padding_mask"] = kpm
    attrs = layer_attrs(c, ENC_ATTRS)
    if is_causal:
        attrs["is_causal"] = True
    emit_backward(W, g, "transformer_encoder_layer", inputs, attrs, out, {"src": src},
                  [(layer, "")])


def gen_enc_layer_bwd(W):
    g = gen_for("transformer_encoder_layer_bwd")
    enc_layer_bwd_case(W, g, 2, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=12),
                       mask=block_mask(g, (5, 5)), kpm=padding_mask([5, 3], 5))
    kpm = torch.zeros(2, 4).masked_fill(padding_mask([4, 2], 4), NEG_INF)
    enc_layer_bwd_case(W, g, 2, 4, layer_cfg(d_model=8, nhead=4, dim_feedforward=10,
                                             activation="gelu", norm_first=True),
                       mask=float_mask(g, (8, 4, 4)), kpm=kpm)
    enc_layer_bwd_case(W, g, 2, 5, layer_cfg(d_model=6, nhead=2, dim_feedforward=7, bias=False),
                       mask=causal_float(5, 5), is_causal=True)


def dec_layer_bwd_case(W, g, B, T, S, c, tgt_mask=None, memory_mask=None, tkpm=None, mkpm=None,
                       tgt_is_causal=False):
    layer = randomize(nn.TransformerDecoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c)),
                      g).eval()
    P = params(layer)
    tgt, mem = leaf(rn(g, B, T, c["d_model"])), leaf(rn(g, B, S, c["d_model"]))
    out = layer(tgt, mem, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tkpm, memory_key_padding_mask=mkpm,
                tgt_is_causal=tgt_is_causal)
    inputs = {"tgt": tgt, "memory": mem, **P}
    for n, t in (("tgt_mask", tgt_mask), ("memory_mask", memory_mask),
                 ("tgt_key_padding_mask", tkpm), ("memory_key_padding_mask", mkpm)):
        if t is not None:
            inputs[n] = t
    attrs = layer_attrs(c, DEC_ATTRS)
    if tgt_is_causal:
        attrs["tgt_is_causal"] = True
    emit_backward(W, g, "transformer_decoder_layer", inputs, attrs, out,
                  {"tgt": tgt, "memory": mem}, [(layer, "")])


def gen_dec_layer_bwd(W):
    g = gen_for("transformer_decoder_layer_bwd")
    dec_layer_bwd_case(W, g, 2, 4, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=12))
    dec_layer_bwd_case(W, g, 2, 5, 3, layer_cfg(d_model=8, nhead=2, dim_feedforward=9,
                                                activation="gelu", norm_first=True),
                       tgt_mask=causal_block(5, 5), tgt_is_causal=True,
                       mkpm=padding_mask([3, 1], 3))
    tk = torch.zeros(2, 4).masked_fill(padding_mask([4, 3], 4), NEG_INF)
    dec_layer_bwd_case(W, g, 2, 4, 5, layer_cfg(d_model=6, nhead=3, dim_feedforward=7,
                                                bias=False),
                       tgt_mask=float_mask(g, (6, 4, 4)), memory_mask=float_mask(g, (4, 5)),
                       tkpm=tk)


def gen_stacks_bwd(W):
    g = gen_for("transformer_encoder_bwd")
    for B, L, c, nl, fn, mask, kpm, ic in (
            (2, 4, layer_cfg(d_model=8, nhead=2, dim_feedforward=10), 2, True, None,
             padding_mask([4, 2], 4), False),
            (2, 5, layer_cfg(d_model=6, nhead=3, dim_feedforward=8, norm_first=True,
                             activation="gelu"), 2, False, causal_float(5, 5), None, True)):
        layer = nn.TransformerEncoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c))
        stack = nn.TransformerEncoder(layer, nl, norm=stack_norm(c, fn),
                                      enable_nested_tensor=False)
        randomize(stack, g).eval()
        P = params(stack)
        src = leaf(rn(g, B, L, c["d_model"]))
        out = stack(src, mask=mask, src_key_padding_mask=kpm, is_causal=ic)
        inputs = {"src": src, **P}
        if mask is not None:
            inputs["mask"] = mask
        if kpm is not None:
            inputs["src_key_padding_mask"] = kpm
        attrs = layer_attrs(c, ENC_ATTRS)
        attrs["num_layers"] = nl
        if ic:
            attrs["is_causal"] = True
        emit_backward(W, g, "transformer_encoder", inputs, attrs, out, {"src": src},
                      [(stack, "")])

    g = gen_for("transformer_decoder_bwd")
    for B, T, S, c, nl, fn, tm, mm, tk, mk, tic in (
            (2, 4, 5, layer_cfg(d_model=8, nhead=2, dim_feedforward=10), 2, True,
             causal_block(4, 4), None, None, padding_mask([5, 3], 5), True),
            (1, 5, 3, layer_cfg(d_model=6, nhead=2, dim_feedforward=7, norm_first=True,
                                activation="gelu", bias=False), 2, False,
             causal_float(5, 5) + rn(g, 5, 5, s=0.3), float_mask(g, (5, 3)), None, None,
             False)):
        layer = nn.TransformerDecoderLayer(c["d_model"], c["nhead"], **layer_kwargs(c))
        stack = nn.TransformerDecoder(layer, nl, norm=stack_norm(c, fn))
        randomize(stack, g).eval()
        P = params(stack)
        tgt, mem = leaf(rn(g, B, T, c["d_model"])), leaf(rn(g, B, S, c["d_model"]))
        out = stack(tgt, mem, tgt_mask=tm, memory_mask=mm, tgt_key_padding_mask=tk,
                    memory_key_padding_mask=mk, tgt_is_causal=tic)
        inputs = {"tgt": tgt, "memory": mem, **P}
        for n, t in (("tgt_mask", tm), ("memory_mask", mm), ("tgt_key_padding_mask", tk),
                     ("memory_key_padding_mask", mk)):
            if t is not None:
                inputs[n] = t
        attrs = layer_attrs(c, DEC_ATTRS)
        attrs["num_layers"] = nl
        if tic:
            attrs["tgt_is_causal"] = True
        emit_backward(W, g, "transformer_decoder", inputs, attrs, out,
                      {"tgt": tgt, "memory": mem}, [(stack, "")])

    g = gen_for("transformer_bwd")
    for B, S, T, c, ne, nd, masks in (
            (2, 5, 4, layer_cfg(d_model=8, nhead=2, dim_feedforward=10), 1, 1,
             {"tgt_mask": causal_block(4, 4), "src_key_padding_mask": padding_mask([5, 3], 5),
              "memory_key_padding_mask": padding_mask([5, 3], 5)}),
            (1, 4, 5, layer_cfg(d_model=6, nhead=3, dim_feedforward=7, norm_first=True,
                                activation="gelu", bias=False), 1, 2,
             {"src_mask": float_mask(g, (4, 4)), "tgt_mask": causal_float(5, 5),
              "memory_mask": float_mask(g, (5, 4))})):
        model = nn.Transformer(d_model=c["d_model"], nhead=c["nhead"], num_encoder_layers=ne,
                               num_decoder_layers=nd, **layer_kwargs(c))
        randomize(model, g).eval()
        P = params(model)
        src, tgt = leaf(rn(g, B, S, c["d_model"])), leaf(rn(g, B, T, c["d_model"]))
        out = model(src, tgt, src_mask=masks.get("src_mask"), tgt_mask=masks.get("tgt_mask"),
                    memory_mask=masks.get("memory_mask"),
                    src_key_padding_mask=masks.get("src_key_padding_mask"),
                    tgt_key_padding_mask=masks.get("tgt_key_padding_mask"),
                    memory_key_padding_mask=masks.get("memory_key_padding_mask"))
        attrs = {"d_model": c["d_model"], "nhead": c["nhead"], "num_encoder_layers": ne,
                 "num_decoder_layers": nd}
        attrs.update(layer_attrs(c, ENC_ATTRS[2:]))
        emit_backward(W, g, "transformer", {"src": src, "tgt": tgt, **P, **masks}, attrs, out,
                      {"src": src, "tgt": tgt}, [(model, "")])

    g = gen_for("gpt_bwd")
    for B, T, c, V, block, nl in (
            (2, 4, layer_cfg(d_model=8, nhead=2, dim_feedforward=12, norm_first=True), 9, 6, 2),
            (1, 5, layer_cfg(d_model=6, nhead=3, dim_feedforward=8, activation="gelu",
                             bias=False), 7, 5, 1)):
        model = randomize(GPT(c, V, block, nl), g).eval()
        P = params(model)
        idx = torch.randint(0, V, (B, T), generator=g)
        idx[0, -1] = idx[0, 0]  # a repeated token: its embedding gradient is a sum
        out = model(idx)
        attrs = {"vocab_size": V, "block_size": block, "num_layers": nl}
        attrs.update(layer_attrs(c, ENC_ATTRS))
        emit_backward(W, g, "gpt", {"idx": idx, **P}, attrs, out, {}, [(model, "")])


def gen_seeds_bwd(W):
    g = gen_for("simple_self_attention_bwd")
    for shape, norm, s in (((6, 3), None, 0.7), ((2, 5, 4), "softmax", 0.7),
                           ((2, 4, 3), "sum", None)):
        x = leaf(rn(g, *shape, s=s) if s else 0.2 + ur(g, *shape))
        sc = x @ x.transpose(-2, -1)
        w = sc / sc.sum(-1, keepdim=True) if norm == "sum" else torch.softmax(sc, -1)
        out = w @ x
        emit_backward(W, g, "simple_self_attention", {"inputs": x},
                      {} if norm is None else {"normalize": norm}, out, {"inputs": x})

    g = gen_for("self_attention_v1_bwd")
    for shape, d_in, d_out in (((6, 3), 3, 2), ((2, 5, 4), 4, 3)):
        m = randomize(SelfAttention_v1(d_in, d_out), g)
        x = leaf(rn(g, *shape))
        emit_backward(W, g, "self_attention_v1", {"x": x, **params(m)},
                      {"d_in": d_in, "d_out": d_out}, m(x), {"x": x}, [(m, "")])
    g = gen_for("self_attention_v2_bwd")
    for shape, d_in, d_out, qb in (((2, 5, 4), 4, 3, True), ((6, 3), 3, 4, False)):
        m = randomize(SelfAttention_v2(d_in, d_out, qb), g)
        x = leaf(rn(g, *shape))
        emit_backward(W, g, "self_attention_v2", {"x": x, **params(m)},
                      {"d_in": d_in, "d_out": d_out, "qkv_bias": qb}, m(x), {"x": x},
                      [(m, "")])
    g = gen_for("causal_attention_bwd")
    for B, T, d_in, d_out, ctx, qb, keep_mask in ((2, 5, 4, 3, 6, True, True),
                                                  (1, 4, 3, 4, 4, False, False)):
        m = randomize(CausalAttention(d_in, d_out, ctx, 0.0, qb), g).eval()
        P = params(m)
        if not keep_mask:
            del P["mask"]
        x = leaf(rn(g, B, T, d_in))
        emit_backward(W, g, "causal_attention", {"x": x, **P},
                      {"d_in": d_in, "d_out": d_out, "context_length": ctx, "qkv_bias": qb},
                      m(x), {"x": x}, [(m, "")])
    g = gen_for("seed_multihead_attention_bwd")
    for B, T, d_in, d_out, ctx, H, qb, keep_mask in ((2, 4, 5, 6, 5, 2, True, False),
                                                     (1, 5, 3, 8, 5, 4, False, True)):
        m = randomize(SeedMultiHeadAttention(d_in, d_out, ctx, 0.0, H, qb), g).eval()
        P = params(m)
        if not keep_mask:
            del P["mask"]
        x = leaf(rn(g, B, T, d_in))
        emit_backward(W, g, "seed_multihead_attention", {"x": x, **P},
                      {"d_in": d_in, "d_out": d_out, "context_length": ctx, "num_heads": H,
                       "qkv_bias": qb}, m(x), {"x": x}, [(m, "")])


class GeneralAttention(nn.Module):
    """seed 002's layer: keys and values (and with self_attention the queries) projected."""

    def __init__(self, Dq, Dx, Dv, bias, self_attention):
        super().__init__()
        self.W_key = nn.Linear(Dx, Dq, bias=bias)
        self.W_value = nn.Linear(Dx, Dv, bias=bias)
        self.W_query = nn.Linear(Dx, Dq, bias=bias) if self_attention else None

    def forward(self, query, inputs, attn_mask=None):
        q = self.W_query(inputs) if self.W_query is not None else query
        return F.scaled_dot_product_attention(q, self.W_key(inputs), self.W_value(inputs),
                                              attn_mask=attn_mask)


class AdditiveAttention(nn.Module):
    def __init__(self, Dq, Dk, A):
        super().__init__()
        self.W_q = nn.Linear(Dq, A, bias=False)
        self.W_k = nn.Linear(Dk, A, bias=False)
        self.w_v = nn.Linear(A, 1, bias=False)

    def forward(self, q, k, v, attn_mask=None):
        feat = torch.tanh(self.W_q(q)[:, :, None, :] + self.W_k(k)[:, None, :, :])
        s = self.w_v(feat).squeeze(-1)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, NEG_INF)
        return torch.softmax(s, -1) @ v


def gen_general_additive_bwd(W):
    g = gen_for("general_attention_bwd")
    for B, L, S, Dq, Dx, Dv, bias, selfa, mask in ((2, 3, 5, 4, 6, 5, False, False, None),
                                                   (2, 4, 5, 3, 4, 4, True, False, "bls"),
                                                   (2, 4, 4, 4, 5, 3, True, True, "causal")):
        m = randomize(GeneralAttention(Dq, Dx, Dv, bias, selfa), g)
        x = leaf(rn(g, B, S, Dx))
        q = None if selfa else leaf(rn(g, B, L, Dq))
        am = None
        if mask == "bls":
            am = ur(g, B, L, S) < 0.6
            am[:, :, 0] = True
        elif mask == "causal":
            am = ~causal_block(L, S)
        out = m(q, x, am)
        inputs = {"inputs": x, **params(m)}
        leaves = {"inputs": x}
        if q is not None:
            inputs["query"] = q
            leaves["query"] = q
        if am is not None:
            inputs["attn_mask"] = am
        attrs = {"query_dim": Dq, "input_dim": Dx, "value_dim": Dv, "bias": bias}
        if selfa:
            attrs["self_attention"] = True
        emit_backward(W, g, "general_attention", inputs, attrs, out, leaves, [(m, "")])

    g = gen_for("additive_attention_bwd")
    for B, L, S, Dq, Dk, Dv, A, mask in ((2, 3, 5, 4, 6, 5, 7, None),
                                         (3, 2, 6, 5, 3, 3, 4, "valid"),
                                         (2, 4, 3, 3, 4, 4, 5, "ls")):
        m = randomize(AdditiveAttention(Dq, Dk, A), g)
        q, k, v = leaf(rn(g, B, L, Dq)), leaf(rn(g, B, S, Dk)), leaf(rn(g, B, S, Dv))
        am = None
        if mask == "valid":
            am = ~padding_mask([6, 2, 4], S)[:, None, :]
        elif mask == "ls":
            am = ur(g, L, S) < 0.6
            am[:, 0] = True
        out = m(q, k, v, am)
        inputs = {"queries": q, "keys": k, "values": v, **params(m)}
        if am is not None:
            inputs["attn_mask"] = am
        emit_backward(W, g, "additive_attention", inputs,
                      {"query_size": Dq, "key_size": Dk, "num_hiddens": A}, out,
                      {"queries": q, "keys": k, "values": v}, [(m, "")])


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d, f, act):
        super().__init__()
        self.w_1, self.w_2, self.act = nn.Linear(d, f), nn.Linear(f, d), act_fn(act)

    def forward(self, x):
        return self.w_2(self.act(self.w_1(x)))


def gen_small_bwd(W):
    g = gen_for("positional_encoding_bwd")
    x = leaf(rn(g, 2, 5, 8))
    emit_backward(W, g, "positional_encoding", {"x": x}, {"d_model": 8, "max_len": 10},
                  x + sinusoid(5, 8), {"x": x})
    x = leaf(rn(g, 2, 4, 3))
    emit_backward(W, g, "positional_encoding", {"x": x},
                  {"d_model": 5, "max_len": 6, "mode": "concat"},
                  torch.cat([x, sinusoid(4, 5).expand(2, 4, 5)], -1), {"x": x})
    # the table alone depends on no tensor: grad.out is read, no gradient results
    emit_backward(W, g, "positional_encoding", {}, {"d_model": 6, "max_len": 9, "length": 7},
                  sinusoid(7, 6).requires_grad_(True), {})
    g = gen_for("learned_positional_encoding_bwd")
    for B, L, E, M in ((2, 4, 6, 7), (3, 5, 3, 5)):
        x, w = leaf(rn(g, B, L, E)), leaf(rn(g, M, E, s=0.3))
        emit_backward(W, g, "learned_positional_encoding", {"x": x, "weight": w}, {}, x + w[:L],
                      {"x": x, "weight": w})

    g = gen_for("linear_bwd")
    for shape, IN, OUT, bias in (((2, 4, 5), 5, 3, True), ((3, 2, 2, 4), 4, 6, False),
                                 ((7,), 7, 2, True)):
        x, w = leaf(rn(g, *shape)), leaf(rn(g, OUT, IN, s=0.3))
        b = leaf(rn(g, OUT, s=0.3)) if bias else None
        ins = {"input": x, "weight": w, **({"bias": b} if bias else {})}
        emit_backward(W, g, "linear", ins, {}, F.linear(x, w, b), ins)
    g = gen_for("layer_norm_bwd")
    for shape, wb, eps in (((2, 4, 6), "wb", None), ((3, 5), "w", 1e-3), ((2, 2, 3, 7), "", None)):
        x = leaf(rn(g, *shape, s=2.0) + 0.5)
        E = shape[-1]
        w = leaf(1.0 + rn(g, E, s=0.3)) if "w" in wb else None
        b = leaf(rn(g, E, s=0.3)) if "b" in wb else None
        ins = {"input": x}
        if w is not None:
            ins["weight"] = w
        if b is not None:
            ins["bias"] = b
        out = F.layer_norm(x, (E,), w, b, 1e-5 if eps is None else eps)
        emit_backward(W, g, "layer_norm", ins, {} if eps is None else {"eps": eps}, out, ins)
    g = gen_for("relu_bwd")
    for shape in ((2, 4, 5), (11,)):
        x = leaf(rn(g, *shape))
        emit_backward(W, g, "relu", {"input": x}, {}, F.relu(x), {"input": x})
    g = gen_for("gelu_bwd")
    for shape, appr in (((2, 4, 5), None), ((11,), "tanh"), ((3, 6), "none")):
        x = leaf(rn(g, *shape, s=3.0))
        emit_backward(W, g, "gelu", {"input": x}, {} if appr is None else {"approximate": appr},
                      F.gelu(x, approximate=appr or "none"), {"input": x})
    g = gen_for("tanh_bwd")
    for shape in ((3, 6), (2, 1, 3, 4)):
        x = leaf(rn(g, *shape, s=2.0))
        emit_backward(W, g, "tanh", {"input": x}, {}, torch.tanh(x), {"input": x})
    g = gen_for("softmax_bwd")
    for shape, s in (((2, 4, 6), 1.0), ((9,), 5.0)):
        x = leaf(rn(g, *shape, s=s))
        emit_backward(W, g, "softmax", {"input": x}, {}, torch.softmax(x, -1), {"input": x})
    g = gen_for("embedding_bwd")
    for shape, V, E in (((6,), 5, 4), ((2, 5), 7, 3)):
        ids = torch.randint(0, V, shape, generator=g)
        ids.view(-1)[-1] = ids.view(-1)[0]  # a repeated id: its rows are summed
        w = leaf(rn(g, V, E))
        emit_backward(W, g, "embedding", {"input": ids, "weight": w}, {}, F.embedding(ids, w),
                      {"weight": w})
    g = gen_for("feed_forward_bwd")
    for shape, d, f, act in (((2, 4, 6), 6, 10, "relu"), ((5, 4), 4, 7, "gelu")):
        m = randomize(PositionwiseFeedForward(d, f, act), g)
        x = leaf(rn(g, *shape))
        emit_backward(W, g, "feed_forward", {"x": x, **params(m)},
                      {"d_model": d, "d_ff": f, "activation": act}, m(x), {"x": x}, [(m, "")])
    g = gen_for("cross_entropy_bwd")
    for N, C, ignore, ii, ls in ((5, 6, 0, -100, 0.0), (6, 4, 2, 2, 0.0), (7, 5, 2, -100, 0.2)):
        x, t = ce_inputs(g, N, C, ignore, ii)
        x = leaf(x)
        emit_backward(W, g, "cross_entropy", {"input": x, "target": t}, ce_attrs(ii, ls),
                      F.cross_entropy(x, t, ignore_index=ii, label_smoothing=ls), {"input": x})


class ViTSelfAttention(nn.Module):
    def __init__(self, P_, E, H, Nmax):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, E))
        self.proj = nn.Linear(P_, E)
        self.pos_embed = nn.Parameter(torch.zeros(1, Nmax + 1, E))
        self.attn = nn.MultiheadAttention(E, H, batch_first=True)

    def forward(self, patches):
        B, N, _ = patches.shape
        z = torch.cat([self.cls_token.expand(B, -1, -1), self.proj(patches)], 1) \
            + self.pos_embed[:, :N + 1]
        return self.attn(z, z, z)[0]


def gen_vit_bwd(W):
    g = gen_for("vit_self_attention_bwd")
    for B, N, P_, E, H, Nmax in ((2, 3, 6, 8, 2, 4), (1, 4, 5, 6, 3, 4)):
        m = randomize(ViTSelfAttention(P_, E, H, Nmax), g).eval()
        patches = leaf(rn(g, B, N, P_))
        emit_backward(W, g, "vit_self_attention", {"patches": patches, **params(m)},
                      {"patch_dim": P_, "embed_dim": E, "num_heads": H, "max_patches": Nmax},
                      m(patches), {"patches": patches}, [(m, "")])


# ------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------
# sdpa: sliding window, ALiBi, logit soft-capping (attn extensions)
# ------------------------------------------------------------------------------------------


def alibi_geometric(H):
    """ALiBi's slopes 2^(-8 (h+1) / H)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])


def sdpa_feat_case(W, g, B, H, Hkv, L, S, D, Dv, window=None, slopes=None, softcap=None,
                   mask=None, is_causal=False, align=None, scale=None, three=False,
                   need_weights=False, return_lse=False, backward=False):
    """score = cap(scale q.k) - slope[h] |i + S - L - j| + mask, -inf outside the causal mask
    and the window (i + S - L - wl <= j <= i + S - L + wr, a negative side unlimited).  The
    reference is written out in torch; without a cap it is checked against
    F.scaled_dot_product_attention given window and ALiBi as an additive float mask."""
    if three:
        q, k, v = rn(g, B, L, D), rn(g, B, S, D), rn(g, B, S, Dv)
    else:
        q, k, v = rn(g, B, H, L, D), rn(g, B, Hkv, S, D), rn(g, B, Hkv, S, Dv)
    if backward:
        q, k, v = leaf(q), leaf(k), leaf(v)
    m = leaf(mask) if backward and mask is not None and mask.dtype == torch.float32 else mask
    gqa = H != Hkv
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    c = i + S - L                                   # the row's centre key
    keep = torch.ones(L, S, dtype=torch.bool)
    if window is not None:
        wl, wr = window
        if wl >= 0:
            keep &= j >= c - wl
        if wr >= 0:
            keep &= j <= c + wr
    if is_causal:
        keep &= j <= i + ((S - L) if align == "bottom_right" else 0)
    bias = torch.zeros((1, L, S) if three else (H, L, S))
    if slopes is not None:
        bias = -slopes.view(-1, 1, 1) * (c - j).abs().float()
    sc = scale if scale is not None else 1.0 / math.sqrt(D)

    def additive():
        add = bias + torch.zeros(L, S).masked_fill(~keep, NEG_INF)
        if m is not None:
            mm = m.view(1, -1) if m.dim() == 1 else m
            add = add + (torch.zeros(mm.shape).masked_fill(~mm, NEG_INF)
                         if mm.dtype == torch.bool else mm)
        return add

    def hand():
        kk, vv = k, v
        if gqa:
            kk, vv = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        s = (q @ kk.transpose(-2, -1)) * sc
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        s = s + additive()
        w, dead = safe_softmax(s)
        return w @ vv, w, torch.logsumexp(s, -1), dead

    out, w, lse, dead = hand()
    if not softcap:
        tout = F.scaled_dot_product_attention(q, k, v, attn_mask=additive(), scale=scale,
                                              enable_gqa=gqa)
        tout = tout.masked_fill(dead, 0.0)  # rows without a key: the attn convention
        close(out, tout, 1e-5, "sdpa features hand vs torch")
    inputs = {"query": q, "key": k, "value": v}
    if m is not None:
        inputs["attn_mask"] = m
    if slopes is not None:
        inputs["alibi_slopes"] = slopes
    attrs = {}
    if window is not None:
        attrs["window_left"], attrs["window_right"] = window
    if softcap:
        attrs["softcap"] = softcap
    if is_causal:
        attrs["is_causal"] = True
    if align is not None:
        attrs["causal_alignment"] = align
    if scale is not None:
        attrs["scale"] = scale
    if gqa:
        attrs["enable_gqa"] = True
    if backward:
        assert not dead.any(), "a fully masked row in a backward case"
        leaves = {"query": q, "key": k, "value": v}
        if m is not None and m.dtype == torch.float32:
            leaves["attn_mask"] = m
        ins = {n: t.detach() for n, t in inputs.items()}
        emit_backward(W, g, "sdpa", ins, attrs, out, leaves, tag="_feat_bwd")
        return
    if need_weights:
        attrs["need_weights"] = True
    if return_lse:
        attrs["return_lse"] = True
    outputs = {"out": out}
    if need_weights:
        outputs["attn_weights"] = w
    if return_lse:
        outputs["lse"] = lse
    W.emit("sdpa", inputs, attrs, outputs, tag="_feat")


def gen_sdpa_features(W):
    g = gen_for("sdpa_features")
    # 0: a symmetric-ish window (2 left, 1 right), L == S
    sdpa_feat_case(W, g, 2, 2, 2, 7, 7, 4, 4, window=(2, 1), need_weights=True, return_lse=True)
    # 1: a causal sliding window of 4 keys, bottom-right, L < S (a KV cache)
    sdpa_feat_case(W, g, 1, 2, 2, 3, 9, 4, 5, window=(3, -1), is_causal=True,
                   align="bottom_right", need_weights=True, return_lse=True)
    # 2: ALiBi (geometric slopes), L != S, GQA
    sdpa_feat_case(W, g, 2, 4, 2, 5, 7, 4, 4, slopes=alibi_geometric(4), need_weights=True,
                   return_lse=True)
    # 3: soft cap with an explicit scale
    sdpa_feat_case(W, g, 1, 2, 2, 6, 6, 8, 8, softcap=2.0, scale=0.9, need_weights=True,
                   return_lse=True)
    # 4: everything: window, ALiBi, soft cap, float mask, causal bottom-right, GQA
    sdpa_feat_case(W, g, 2, 4, 2, 5, 8, 4, 3, window=(4, 0), slopes=alibi_geometric(4),
                   softcap=3.0, mask=float_mask(g, (2, 1, 5, 8)), is_causal=True,
                   align="bottom_right", need_weights=True, return_lse=True)
    # 5: 3-D inputs (one head): one slope, a window, a bool mask
    m = ur(g, 6, 6) < 0.8
    m[:, :] |= torch.eye(6, dtype=torch.bool)
    sdpa_feat_case(W, g, 2, 1, 1, 6, 6, 4, 4, window=(1, 2), slopes=torch.tensor([0.3]),
                   mask=m, three=True, need_weights=True, return_lse=True)
    # 6: L > S: the first rows see no key under the window -> zeros, lse -inf
    sdpa_feat_case(W, g, 1, 2, 2, 7, 3, 4, 4, window=(1, 0), softcap=4.0, need_weights=True,
                   return_lse=True)
    # backward (grad.query, key, value, attn_mask; the slopes have no gradient)
    # 0: window and ALiBi
    sdpa_feat_case(W, g, 2, 2, 2, 5, 7, 4, 3, window=(2, 1), slopes=alibi_geometric(2),
                   backward=True)
    # 1: soft cap, bottom-right causal, float mask
    sdpa_feat_case(W, g, 1, 2, 2, 4, 6, 4, 4, softcap=1.5, mask=float_mask(g, (1, 2, 4, 6)),
                   is_causal=True, align="bottom_right", backward=True)
    # 2: everything, GQA
    sdpa_feat_case(W, g, 2, 4, 2, 5, 7, 4, 4, window=(3, 0), slopes=alibi_geometric(4),
                   softcap=2.5, is_causal=True, align="bottom_right", backward=True)


# ------------------------------------------------------------------------------------------
# ViT classifier (op vit): patch embedding, [CLS], learned positions, pre-norm encoder
# layers, final norm, linear head on the [CLS] vector
# ------------------------------------------------------------------------------------------


class ViTEmbed(nn.Module):
    def __init__(self, patch_dim, E, N):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, E))
        self.proj = nn.Linear(patch_dim, E)
        self.pos_embed = nn.Parameter(torch.zeros(1, N + 1, E))


class ViT(nn.Module):
    def __init__(self, c, image_size, channels, patch, num_classes, num_layers):
        super().__init__()
        E, G = c["d_model"], image_size // patch
        self.C, self.p = channels, patch
        self.embed = ViTEmbed(channels * patch * patch, E, G * G)
        layer = nn.TransformerEncoderLayer(E, c["nhead"], **layer_kwargs(c))
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False).layers
        self.norm = nn.LayerNorm(E, eps=c["layer_norm_eps"], bias=c["bias"])
        self.head = nn.Linear(E, num_classes)

    def tokens(self, images):
        """[CLS; patches] + positions: the patch projection as a Conv2d (kernel = stride = p)
        whose weight is proj.weight.view(E, C, p, p)."""
        E = self.embed.proj.out_features
        w = self.embed.proj.weight.view(E, self.C, self.p, self.p)
        z = F.conv2d(images, w, self.embed.proj.bias, stride=self.p).flatten(2).transpose(1, 2)
        cls = self.embed.cls_token.expand(images.shape[0], -1, -1)
        return torch.cat([cls, z], 1) + self.embed.pos_embed

    def forward(self, images):
        x = self.tokens(images)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])

    def cls_attention(self, images):
        """[num_layers, B, H, N+1]: each layer's attention probabilities of the [CLS] query."""
        x, ws = self.tokens(images), []
        for layer in self.layers:
            n = layer.norm1(x) if layer.norm_first else x
            ws.append(layer.self_attn(n, n, n, need_weights=True,
                                      average_attn_weights=False)[1][:, :, 0, :])
            x = layer(x)
        return torch.stack(ws)


def vit_patchify(images, p):
    """[B, N, C*p*p]: patch py*G + px, vector [c][dy][dx] (the order attn documents)."""
    B, C, H, _ = images.shape
    G = H // p
    return images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(
        B, G * G, C * p * p)


def gen_vit_model(W):
    g = gen_for("vit")
    cases = ((3, 8, 1, 4, 10, 2, layer_cfg(d_model=16, nhead=2, dim_feedforward=32,
                                           activation="gelu", norm_first=True, dropout=0.0)),
             (2, 6, 3, 2, 5, 2, layer_cfg(d_model=12, nhead=3, dim_feedforward=24,
                                          activation="gelu", norm_first=True, dropout=0.0,
                                          layer_norm_eps=1e-6)))
    for bwd in (False, True):
        for B, S, C, p, K, nl, c in cases:
            model = randomize(ViT(c, S, C, p, K, nl), g).eval()
            P = params(model)
            images = rn(g, B, C, S, S)
            # the hand mirror: unfold patchify, the encoder layers' mirror
            x = torch.cat([P["embed.cls_token"].expand(B, -1, -1),
                           F.linear(vit_patchify(images, p), P["embed.proj.weight"],
                                    P["embed.proj.bias"])], 1) + P["embed.pos_embed"]
            for i in range(nl):
                x = enc_layer_ref(x, sub(P, f"layers.{i}."), c)
            x = F.linear(ln(x, P, "norm.", c["layer_norm_eps"])[:, 0], P["head.weight"],
                         P["head.bias"])
            attrs = {"image_size": S, "channels": C, "patch": p, "num_classes": K,
                     "num_layers": nl}
            attrs.update(layer_attrs(c, ENC_ATTRS))
            if not bwd:
                out = model(images).detach()
                close(x, out, 1e-5, "vit hand")
                w = model.cls_attention(images).detach()
                close(w.sum(-1), torch.ones(w.shape[:-1]), 1e-5, "vit cls_attn rows")
                W.emit("vit", {"images": images, **P}, attrs, {"out": out, "cls_attn": w})
                continue
            images = leaf(images)
            emit_backward(W, g, "vit", {"images": images, **P}, attrs, model(images),
                          {"images": images}, [(model, "")])


def gen_llama_cases(W):
    """rms_norm, rotary_embedding, llama_mlp, llama_attention, llama_decoder_layer: written by
    tests/gen_llama.py (needs transformers), which also runs them alone (--ops)."""
    from gen_llama import gen_llama_ops
    gen_llama_ops(W)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(args.out, f))
    W = Writer(args.out)
    for fn in (gen_sdpa, gen_mha, gen_enc_layer, gen_dec_layer, gen_enc_stack, gen_dec_stack,
               gen_transformer, gen_gpt, gen_simple, gen_seed_v1_v2, gen_seed_causal_mha,
               gen_general, gen_additive, gen_positional, gen_small, gen_vit,
               # added later: after every earlier case, so those stay byte-identical
               gen_cross_entropy, gen_sdpa_bwd, gen_mha_bwd, gen_enc_layer_bwd,
               gen_dec_layer_bwd, gen_stacks_bwd, gen_seeds_bwd, gen_general_additive_bwd,
               gen_small_bwd, gen_vit_bwd,
               # sliding window, ALiBi, soft cap: sdpa_feat_<k>, sdpa_feat_bwd_<k>
               gen_sdpa_features,
               # the ViT classifier: vit_<k>, vit_bwd_<k>
               gen_vit_model,
               # the Llama architecture's pieces against transformers (tests/gen_llama.py)
               gen_llama_cases):
        fn(W)
    with open(os.path.join(args.out, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(W.cases) + "\n")
    total = sum(os.path.getsize(os.path.join(args.out, c + s)) for c in W.cases
                for s in (".safetensors", ".expected.safetensors"))
    for op in W.count:
        print(f"{op:32s} {W.count[op]:3d} cases")
    print(f"{len(W.cases)} cases, {total} bytes, torch {torch.__version__}")
    assert total < 3_000_000, "fixtures too large"


if __name__ == "__main__":
    main()
