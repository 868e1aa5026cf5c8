"""The per-call fast path (attn/_fast.py, issue 13): the same results, bit for bit, as the
general path (forced with attn._fast.ENABLED = False), zero copy, the same errors, a nested
call while the thread's scratch block is busy, the GIL released, autograd's in-place check."""
import ctypes
import struct

import numpy as np
import pytest

import attn
from attn import _fast, _lib


def _f(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def _both(monkeypatch, f):
    """f() on the fast path, then on the general path."""
    assert _fast.ENABLED
    a = f()
    monkeypatch.setattr(_fast, "ENABLED", False)
    b = f()
    monkeypatch.setattr(_fast, "ENABLED", True)
    return a, b


def _equal(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.array_equal(a, b, equal_nan=True)


CASES = [
    dict(q=(2, 3, 5, 4), k=(2, 3, 7, 4), v=(2, 3, 7, 6)),
    dict(q=(3, 5, 4), k=(3, 5, 4), v=(3, 5, 4), is_causal=True, return_lse=True),
    dict(q=(5, 8), k=(9, 8), v=(9, 3), is_causal="bottom_right", scale=0.3),
    dict(q=(1, 4, 6, 8), k=(1, 2, 6, 8), v=(1, 2, 6, 8), enable_gqa=True, mask="bool2"),
    dict(q=(2, 2, 4, 4), k=(2, 2, 5, 4), v=(2, 2, 5, 4), mask="float4", return_lse=True),
    dict(q=(2, 2, 4, 4), k=(2, 2, 5, 4), v=(2, 2, 5, 4), mask="u8_1"),
    dict(q=(1, 2, 6, 4), k=(1, 2, 6, 4), v=(1, 2, 6, 4), window=(2, 0), softcap=5.0),
    dict(q=(1, 2, 6, 4), k=(1, 2, 6, 4), v=(1, 2, 6, 4), alibi=True, dropout_p=0.25, seed=7),
    dict(q=(2, 3, 5, 4), k=(2, 3, 7, 4), v=(2, 3, 7, 6), transposed=True),
    dict(q=(2, 3, 5, 4), k=(2, 3, 7, 4), v=(2, 3, 7, 6), readonly=True),
]


def _args(rng, case):
    c = dict(case)
    q, k, v = _f(rng, *c.pop("q")), _f(rng, *c.pop("k")), _f(rng, *c.pop("v"))
    if c.pop("transposed", False):  # strided views, read in place
        q, k, v = (np.ascontiguousarray(np.swapaxes(x, 1, 2)).swapaxes(1, 2) for x in (q, k, v))
    if c.pop("readonly", False):
        for x in (q, k, v):
            x.flags.writeable = False
    L, S, H = q.shape[-2], k.shape[-2], q.shape[-3] if q.ndim > 2 else 1
    m = c.pop("mask", None)
    if m == "bool2":
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True
    elif m == "float4":
        m = _f(rng, q.shape[0], 1, L, S)
    elif m == "u8_1":
        m = (rng.random(S) > 0.2).astype(np.uint8)
        m[0] = 1
    if c.pop("alibi", False):
        c["alibi_slopes"] = np.linspace(0.1, 0.5, H).astype(np.float32)
    return (q, k, v), dict(c, attn_mask=m)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_numpy_same_bits_as_the_general_path(rng, case, monkeypatch):
    (q, k, v), kw = _args(rng, CASES[case])
    a, b = _both(monkeypatch, lambda: attn.sdpa(q, k, v, **kw))
    _equal(a, b)


def test_numpy_out_same_bits(rng, monkeypatch):
    q = _f(rng, 2, 3, 5, 4)
    outs = [np.zeros((2, 5, 3, 4), np.float32).transpose(0, 2, 1, 3) for _ in range(2)]
    it = iter(outs)
    a, b = _both(monkeypatch, lambda: attn.sdpa(q, q, q, out=next(it)))
    assert a is outs[0] and b is outs[1]
    _equal(a, b)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_torch_same_bits_as_the_general_path(rng, case, monkeypatch):
    torch = pytest.importorskip("torch")
    import attn.torch as at
    (q, k, v), kw = _args(rng, CASES[case])
    q, k, v = (torch.from_numpy(np.array(x)) for x in (q, k, v))
    if kw["attn_mask"] is not None:
        kw["attn_mask"] = torch.from_numpy(kw["attn_mask"])
    if kw.get("alibi_slopes") is not None:
        kw["alibi_slopes"] = torch.from_numpy(kw["alibi_slopes"])
    _equal(*_both(monkeypatch, lambda: attn.sdpa(q, k, v, **kw)))
    with torch.no_grad():
        a, b = _both(monkeypatch, lambda: at.scaled_dot_product_attention(q, k, v, **kw))
    _equal(a, b)
    # forward and backward under autograd
    w = None

    def fwd_bwd():
        nonlocal w
        ts = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = at.scaled_dot_product_attention(*ts, **kw)
        out = out[0] if isinstance(out, tuple) else out
        if w is None:
            w = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
        (out * w).sum().backward()
        return tuple(x.detach() for x in [out] + [t.grad for t in ts])
    _equal(*_both(monkeypatch, fwd_bwd))


def test_torch_fast_path_is_taken_and_returns_plain_tensors():
    torch = pytest.importorskip("torch")
    import attn.torch as at
    if not at._FAST:
        pytest.skip("no fast path on this torch")
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    out = at.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert type(out.grad_fn).__name__ == "_FastSDPABackward"
    assert out.dtype == torch.float32 and out.is_contiguous() and out.shape == (1, 2, 4, 8)
    out.sum().backward()
    assert q.grad.shape == q.shape and q.grad.is_contiguous()


def test_dropout_seed_drawn_once_from_torch(monkeypatch):
    # seed=None: the fast path draws the dropout seed from torch's generator as the general
    # path does (once), so torch.manual_seed reproduces either
    torch = pytest.importorskip("torch")
    import attn.torch as at
    q = torch.randn(1, 2, 6, 4, requires_grad=True)

    def run():
        torch.manual_seed(3)
        out = at.scaled_dot_product_attention(q, q, q, dropout_p=0.3)
        return out.detach(), torch.rand(3)  # and the generator's state after it
    _equal(*_both(monkeypatch, run))


def test_inplace_change_before_backward_is_reported():
    torch = pytest.importorskip("torch")
    import attn.torch as at
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    k = torch.randn(1, 2, 4, 8)
    out = at.scaled_dot_product_attention(q, k, k)
    k.add_(1.0)  # saved for the backward, then changed
    with pytest.raises(RuntimeError, match="inplace"):
        out.sum().backward()


def test_numpy_views_are_packed_zero_copy(rng):
    base = _f(rng, 2, 5, 3, 4)
    q = base.transpose(0, 2, 1, 3)  # [2, 3, 5, 4], strides in elements (60, 4, 12, 1)
    buf = bytearray(_fast.TS)
    assert _fast.np_pack(buf, 0, q, _lib.ATTN_F32, 2, True) == q.shape
    ptr, dtype, ndim, *rest = struct.unpack(_fast._PACK.format, bytes(buf))
    assert ptr == base.ctypes.data and dtype == _lib.ATTN_F32 and ndim == 4
    assert tuple(rest[:4]) == (2, 3, 5, 4) and tuple(rest[4:]) == (60, 4, 12, 1)
    # read-only and 3-D: the pointer from x.ctypes, size-1 batch prepended with stride 0
    r = base[0]
    r.flags.writeable = False
    assert _fast.np_pack(buf, 0, r, _lib.ATTN_F32, 2, True) == (1, 5, 3, 4)
    ptr, _, _, *rest = struct.unpack(_fast._PACK.format, bytes(buf))
    assert ptr == base.ctypes.data and tuple(rest[4:]) == (0, 12, 4, 1)
    # what attn could not read as it is goes to the general path
    assert _fast.np_pack(buf, 0, base[:, ::-1], _lib.ATTN_F32, 2, True) is None
    assert _fast.np_pack(buf, 0, base[:, :0], _lib.ATTN_F32, 2, True) is None


def test_errors_are_the_general_paths(rng, monkeypatch):
    q = _f(rng, 1, 2, 3, 4)
    bad_d = _f(rng, 1, 2, 3, 5)

    def err(f):
        with pytest.raises(Exception) as e:
            f()
        return type(e.value), str(e.value)
    for f in (lambda: attn.sdpa(q, bad_d, q),                       # the library's E_SHAPE
              lambda: attn.sdpa(q, q, q, softcap=-1.0),             # the library's E_INVALID
              lambda: attn.sdpa(q, _f(rng, 1, 1, 3, 4), q),         # enable_gqa (Python)
              lambda: attn.sdpa(q, q, q, attn_mask=np.ones((2, 2), bool)),  # E_BROADCAST
              lambda: attn.sdpa(q, q, q, out=np.zeros((1, 2, 3, 4), np.float64))):
        a, b = _both(monkeypatch, lambda: err(f))
        assert a == b
    t, msg = err(lambda: attn.sdpa(q, bad_d, q))
    assert issubclass(t, ValueError) and "key" in msg


def test_nested_call_while_the_scratch_is_busy(rng):
    # a signal handler or a finalizer calling attn in the middle of a call: its own block
    q = _f(rng, 1, 2, 5, 4)
    ref = attn.sdpa(q, q, q, is_causal=True)
    c = _lib.context()
    c.busy = True
    try:
        assert np.array_equal(attn.sdpa(q, q, q, is_causal=True), ref)
    finally:
        c.busy = False
    try:
        import torch
        import attn.torch as at
    except ImportError:
        return
    t = torch.from_numpy(q).requires_grad_(True)
    out = at.scaled_dot_product_attention(t, t, t, is_causal=True)
    c.busy = True
    try:
        out.sum().backward()
        assert np.array_equal(at.scaled_dot_product_attention(
            t.detach(), t.detach(), t.detach(), is_causal=True).numpy(), ref)
    finally:
        c.busy = False
    g = t.grad.clone()
    t.grad = None
    at.scaled_dot_product_attention(t, t, t, is_causal=True).sum().backward()
    assert torch.equal(g, t.grad)


def test_fast_prototypes_release_the_gil():
    # CDLL functions (not PyDLL): ctypes drops the GIL for the call
    for f in (_lib.sdpa_addr, _lib.sdpa_backward_saved_addr):
        assert not f._flags_ & ctypes._FUNCFLAG_PYTHONAPI
        assert all(t is ctypes.c_void_p for t in f.argtypes)
    # and the general prototypes keep their own argtypes
    assert _lib.attn_sdpa.argtypes[1] is ctypes.POINTER(_lib.Tensor)
