"""attn.sdpa and attn.sdpa_varlen: torch.nn.functional.scaled_dot_product_attention's
arguments onto attn_sdpa / attn_sdpa_varlen (attn.h, "Attention without parameters")."""
from __future__ import annotations

import ctypes
import secrets
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _fast, _lib
from ._arrays import (Raw, as4d, contiguous, dtype_code, empty, is_torch, merge_leading,
                      pad_leading, raw, shape_tuple, to_float32)

Array = Any  # numpy.ndarray or torch.Tensor
Causal = Union[bool, str]
Window = Union[None, int, Tuple[Optional[int], Optional[int]]]


def _causal_code(is_causal: Causal) -> int:
    if is_causal is False or is_causal is None:
        return _lib.CAUSAL_NONE
    if is_causal is True or is_causal == "top_left":
        return _lib.CAUSAL_TOP_LEFT
    if is_causal == "bottom_right":
        return _lib.CAUSAL_BOTTOM_RIGHT
    raise ValueError(f"attn: is_causal must be a bool, 'top_left' or 'bottom_right', not "
                     f"{is_causal!r}")


def _random_seed(like: Any) -> int:
    if is_torch(like):
        import torch
        return int(torch.randint(0, 2**62, (1,)).item())  # follows torch.manual_seed
    return secrets.randbits(64)


_DEFAULTS = _lib.attn_sdpa_defaults()


def window_pair(window: Window) -> Tuple[int, int]:
    """(left, right) of a window argument, -1 for an unlimited side."""
    try:
        if isinstance(window, (int, np.integer)):
            left = right = int(window)
        else:
            left, right = window
            left = -1 if left is None else int(left)
            right = -1 if right is None else int(right)
    except (TypeError, ValueError):
        raise ValueError(f"attn: window must be None, an int or (left, right) of ints or "
                         f"None, not {window!r}") from None
    if left < -1 or right < -1:
        raise ValueError(f"attn: window sides must be >= 0 (or None for unlimited), not "
                         f"{window!r}")
    return left, right


class Options:
    """attn_sdpa_options built from the Python arguments; holds the ALiBi slopes' memory."""

    def __init__(self, like: Any, H: int, dropout_p: float, is_causal: Causal,
                 scale: Optional[float], window: Window, alibi_slopes: Optional[Array],
                 softcap: float, seed: Optional[int]):
        o = _lib.SdpaOptions.from_buffer_copy(_DEFAULTS)
        o.causal = _causal_code(is_causal)
        if scale is None:
            o.scale = 0.0
        else:
            scale = float(scale)
            # attn's 0 means 1/sqrt(D); PyTorch's scale=0 (all scores equal) is a tiny scale
            o.scale = scale if scale != 0.0 else 1e-30
        dropout_p = float(dropout_p)
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"attn: dropout_p {dropout_p} is outside [0, 1)")
        o.dropout_p = dropout_p
        if dropout_p > 0.0:
            self.seed = _random_seed(like) if seed is None else int(seed) & (2**64 - 1)
        else:
            self.seed = 0 if seed is None else int(seed) & (2**64 - 1)
        o.seed = self.seed
        o.offset = 0
        if window is not None:
            o.window = 1
            o.window_left, o.window_right = window_pair(window)
        self.slopes = None
        if alibi_slopes is not None:
            if is_torch(alibi_slopes):
                alibi_slopes = alibi_slopes.detach().cpu().float().numpy()
            s = np.ascontiguousarray(np.asarray(alibi_slopes, dtype=np.float32).reshape(-1))
            if s.shape[0] != H:
                raise ValueError(f"attn: alibi_slopes has {s.shape[0]} values for {H} heads")
            self.slopes = s
            o.alibi_slopes = s.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        o.softcap = float(softcap)
        self.c = o


def _mask_kind(m: Any) -> Tuple[Any, int]:
    code = dtype_code(m)
    if code in (_lib.ATTN_BOOL, _lib.ATTN_U8):
        return m, _lib.MASK_KEEP
    if code == _lib.ATTN_F32:
        return m, _lib.MASK_ADD
    if code in (_lib.ATTN_BF16, _lib.ATTN_F16, _lib.ATTN_F64):
        return to_float32(m), _lib.MASK_ADD
    raise TypeError(f"attn: attn_mask has dtype {m.dtype}; a bool (True = may attend) or a "
                    "float (added to the scores) mask is expected")


def _broadcast(m: Any, shape: Tuple[int, ...]) -> Any:
    try:
        if is_torch(m):
            return m.expand(shape)
        return np.broadcast_to(m, shape)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"attn: attn_mask of shape {shape_tuple(m)} does not broadcast to "
                         f"{shape}") from e


def _strides(x: Any) -> Tuple[int, ...]:
    return tuple(x.stride()) if is_torch(x) else tuple(x.strides)


def _fresh_view(x: Any, ndim: int) -> Raw:
    """The view of a new C-contiguous float32 array as ndim dimensions (leading dimensions
    merged, or size-1 ones prepended)."""
    shape = list(x.shape)
    n = 1
    for d in shape[:len(shape) - ndim + 1]:
        n *= d
    shape = ([n] + shape[len(shape) - ndim + 1:]) if len(shape) >= ndim else \
        [1] * (ndim - len(shape)) + shape
    stride = [0] * ndim
    acc = 1
    for i in range(ndim - 1, -1, -1):
        stride[i] = acc
        acc *= shape[i]
    ptr = x.data_ptr() if is_torch(x) else x.ctypes.data
    return Raw(x, ptr, _lib.ATTN_F32, shape, stride)


class Plan:
    """The views and options of one sdpa call: q, k, v (4-D), the mask, the options, and the
    shapes of the results."""

    def __init__(self, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                 window, alibi_slopes, softcap, seed):
        t = is_torch(query)
        if is_torch(key) != t or is_torch(value) != t:
            raise TypeError("attn: query, key and value must all be numpy arrays or all torch "
                            "tensors")
        self.torch = t
        codes = []
        for x, what in ((query, "query"), (key, "key"), (value, "value")):
            if not t and not isinstance(x, np.ndarray):
                raise TypeError(f"attn: {what} must be a numpy array or a torch tensor, not "
                                f"{type(x).__name__}")
            code = dtype_code(x)
            if code != _lib.ATTN_F32 and code != _lib.ATTN_BF16:
                raise TypeError(f"attn: {what} has dtype {x.dtype}; query, key and value must "
                                "all be float32 or all bfloat16")
            codes.append(code)
        for x, code, what in ((key, codes[1], "key"), (value, codes[2], "value")):
            if code != codes[0]:
                raise TypeError(f"attn: {what} has dtype {x.dtype} and query {query.dtype}; "
                                "query, key and value must all be float32 or all bfloat16")
        self.bf16 = codes[0] == _lib.ATTN_BF16
        self.dtype = query.dtype
        if not (query.ndim == key.ndim == value.ndim):
            raise ValueError(f"attn: query, key and value have {query.ndim}, {key.ndim} and "
                             f"{value.ndim} dimensions; they must have the same number")
        if query.ndim >= 3 and query.shape[:-3] != key.shape[:-3]:
            raise ValueError(f"attn: the batch dimensions of query {shape_tuple(query)} and key "
                             f"{shape_tuple(key)} differ")
        if (query.ndim >= 3 and query.shape[-3] != key.shape[-3] and not enable_gqa):
            raise ValueError(f"attn: query has {query.shape[-3]} heads and key "
                             f"{key.shape[-3]}: pass enable_gqa=True for grouped-query attention")
        self.q = as4d(query, "query")
        self.k = as4d(key, "key")
        self.v = as4d(value, "value")
        self.out_shape = shape_tuple(query)[:-1] + (int(value.shape[-1]),)
        self.lse_shape = shape_tuple(query)[:-1]
        H = self.q.shape[1]
        L, S = int(query.shape[-2]), int(key.shape[-2])
        self.like = query
        self.opt = Options(query, H, dropout_p, is_causal, scale, window, alibi_slopes, softcap,
                           seed)
        self.mask_obj = None
        self.mask = None
        if attn_mask is not None:
            if not (is_torch(attn_mask) or isinstance(attn_mask, np.ndarray)):
                raise TypeError(f"attn: attn_mask must be a numpy array or a torch tensor, "
                                f"not {type(attn_mask).__name__}")
            if is_torch(attn_mask) != t:
                raise TypeError("attn: attn_mask must be of the same library as query")
            m, kind = _mask_kind(attn_mask)
            self.mask_obj = m
            self.mask_kind = kind
            if query.ndim > 4 or m.ndim > 4:
                full = shape_tuple(query)[:-3] + (H, L, S) if query.ndim >= 3 else (L, S)
                r = raw(_broadcast(m, full), "attn_mask")
                if len(r.shape) > 4 and not merge_leading(r, 3):
                    r = raw(contiguous(_broadcast(m, full)), "attn_mask")
                    merge_leading(r, 3)
            else:
                r = raw(m, "attn_mask")
            self.mask_raw = r
            mk = _lib.Mask()
            mk.kind = kind
            mk.t = r.tensor()
            self.mask = mk

    def out_view(self, out: Any) -> Raw:
        if not (is_torch(out) or isinstance(out, np.ndarray)):
            raise TypeError(f"attn: out must be a numpy array or a torch tensor, not "
                            f"{type(out).__name__}")
        if is_torch(out) != self.torch:
            raise TypeError("attn: out must be of the same library as query")
        if shape_tuple(out) != self.out_shape:
            raise ValueError(f"attn: out has shape {shape_tuple(out)}, expected "
                             f"{self.out_shape}")
        if dtype_code(out) != _lib.ATTN_F32:
            raise TypeError(f"attn: out must be float32, not {out.dtype}")
        if not self.torch and not out.flags.writeable:
            raise ValueError("attn: out is read-only (its flags.writeable is False)")
        if self.torch and out.requires_grad:
            import torch
            if torch.is_grad_enabled():
                raise RuntimeError("attn: out requires grad; out= is not differentiable")
        if 0 not in out.shape and any(st == 0 and n > 1
                                      for n, st in zip(out.shape, _strides(out))):
            raise ValueError("attn: out has overlapping memory (a dimension of stride 0); each "
                             "element must have its own place")
        r = raw(out, "out")
        if r.obj is not out:
            raise ValueError("attn: out has strides attn cannot write through (negative, or "
                             "not whole elements)")
        if len(r.shape) > 4 and not merge_leading(r, 3):
            raise ValueError("attn: out's batch dimensions do not merge into one view")
        pad_leading(r, 4)
        return r

    def run(self, out: Any = None, want_lse: bool = False):
        """attn_sdpa: returns (out float32, lse float32 or None)."""
        if out is None:  # a new contiguous array: no checks needed
            out = empty(self.like, self.out_shape)
            ro = _fresh_view(out, 4)
        else:
            ro = self.out_view(out)
        lse = None
        tl = None
        if want_lse:
            lse = empty(self.like, self.lse_shape)
            tl = _fresh_view(lse, 3).tensor()
        if 0 in self.out_shape:  # nothing to compute (PyTorch returns the empty result too)
            return out, lse
        c = _lib.ctx()
        Q, K, V, O = self.q.tensor(), self.k.tensor(), self.v.tensor(), ro.tensor()
        st = _lib.attn_sdpa(c, Q, K, V, self.mask, self.opt.c, O, None, tl)
        _lib.check(st, c)
        return out, lse


def sdpa(query: Array, key: Array, value: Array, attn_mask: Optional[Array] = None,
         dropout_p: float = 0.0, is_causal: Causal = False, scale: Optional[float] = None,
         enable_gqa: bool = False, *, window: Window = None,
         alibi_slopes: Optional[Array] = None, softcap: float = 0.0, return_lse: bool = False,
         seed: Optional[int] = None, out: Optional[Array] = None):
    """Scaled dot-product attention, as ``torch.nn.functional.scaled_dot_product_attention``.

    query ``[..., H, L, D]``, key ``[..., Hkv, S, D]``, value ``[..., Hkv, S, Dv]``: numpy
    arrays or torch CPU tensors, all float32 or all bfloat16, any strides (read in place, not
    copied).  Returns ``[..., H, L, Dv]`` of the inputs' library and dtype (bfloat16 inputs:
    attn computes in float32 and the result is rounded to bfloat16).

    attn_mask: broadcastable to ``[..., H, L, S]``; bool (True = may attend, PyTorch's
    polarity) or float (added to the scores; -inf blocks).  A query row with every key
    masked gives zeros (PyTorch may give NaN).  is_causal: True (PyTorch's top-left
    alignment: query i sees keys j <= i), or "bottom_right" (j <= i + S - L, FlashAttention's,
    for a KV cache); unlike PyTorch it may be combined with attn_mask.  scale: None =
    1/sqrt(D).  enable_gqa: required when H != Hkv (H a multiple of Hkv).  dropout_p: applied
    whenever > 0 (as the functional PyTorch op), from attn's Philox stream keyed by ``seed``
    (None: a random one; drawn from torch's generator for tensors).

    attn extensions: ``window=(left, right)`` sliding window (bottom-right aligned; None for an
    unlimited side; an int for both), ``alibi_slopes`` [H] ALiBi slopes, ``softcap`` logit
    soft-capping (> 0), ``return_lse`` to also return the log-sum-exp ``[..., H, L]``
    (float32), ``out`` a float32 array to write the result into (any strides; returned).

    Errors of the library are raised as :class:`attn.AttnError` subclasses (ValueError,
    TypeError, MemoryError, ...) carrying its message.  For torch tensors that require grad
    (with grad mode on) this runs :func:`attn.torch.scaled_dot_product_attention`, whose
    backward is attn's.
    """
    tq = type(query)
    if tq is np.ndarray:
        if _fast.ENABLED:
            r = _fast.np_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale,
                              enable_gqa, window, alibi_slopes, softcap, seed, out, return_lse)
            if r is not None:
                return r
    elif (_fast.ENABLED and out is None and
          (tq is _fast.TENSOR or (_fast.TENSOR is None and is_torch(query) and
                                  _fast.torch_init()))
          and _fast.t_plain(query) and _fast.t_plain(key) and _fast.t_plain(value)
          and not (query.requires_grad or key.requires_grad or value.requires_grad or
                   (attn_mask is not None and getattr(attn_mask, "requires_grad", False)))):
        opt_addr = _fast.simple_options(dropout_p, is_causal, scale, window, alibi_slopes,
                                        softcap)
        if opt_addr is not False:
            r = _fast.t_forward(query, key, value, attn_mask, enable_gqa, opt_addr, return_lse)
            if r is not None:
                return (r[0], r[1]) if return_lse else r[0]
    if (is_torch(query) and out is None and
            any(getattr(x, "requires_grad", False) for x in (query, key, value, attn_mask))):
        import torch
        if torch.is_grad_enabled():
            from .torch import scaled_dot_product_attention
            return scaled_dot_product_attention(
                query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                window=window, alibi_slopes=alibi_slopes, softcap=softcap,
                return_lse=return_lse, seed=seed)
    plan = Plan(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window,
                alibi_slopes, softcap, seed)
    res, lse = plan.run(out, return_lse)
    if plan.bf16 and out is None:
        res = res.to(query.dtype) if plan.torch else res.astype(query.dtype)
    return (res, lse) if return_lse else res


def _offsets(x: Any, what: str) -> Raw:
    r = raw(x, what)
    if r.dtype not in (_lib.ATTN_I32, _lib.ATTN_I64) or len(r.shape) != 1:
        raise TypeError(f"attn: {what} must be a 1-D int32 or int64 array")
    return r


def sdpa_varlen(query: Array, key: Array, value: Array, cu_seqlens_q: Array,
                cu_seqlens_k: Array, dropout_p: float = 0.0, is_causal: Causal = False,
                scale: Optional[float] = None, *, window: Window = None,
                alibi_slopes: Optional[Array] = None, softcap: float = 0.0,
                return_lse: bool = False, seed: Optional[int] = None):
    """Attention over variable-length sequences packed back to back (FlashAttention's
    varlen): query ``[Tq, H, D]``, key ``[Tk, Hkv, D]``, value ``[Tk, Hkv, Dv]``;
    ``cu_seqlens_q`` / ``cu_seqlens_k`` int32/int64 ``[B + 1]`` (0, then the running totals).
    Sequence b attends only within itself; every option applies per sequence (causal
    alignments on its own lengths).  Returns ``[Tq, H, Dv]`` float32 (and lse ``[H, Tq]`` with
    ``return_lse``).  Grouped-query attention (H a multiple of Hkv) needs no flag."""
    t = is_torch(query)
    for x in (key, value, cu_seqlens_q, cu_seqlens_k):
        if is_torch(x) != t:
            raise TypeError("attn: the arguments must all be numpy arrays or all torch tensors")
    if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise ValueError("attn: sdpa_varlen takes query [Tq, H, D], key [Tk, Hkv, D], value "
                         "[Tk, Hkv, Dv]")
    q, k, v = raw(query, "query"), raw(key, "key"), raw(value, "value")
    cq, ck = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
    Tq, H = int(query.shape[0]), int(query.shape[1])
    opt = Options(query, H, dropout_p, is_causal, scale, window, alibi_slopes, softcap, seed)
    out = empty(query, (Tq, H, int(value.shape[2])))
    lse = empty(query, (H, Tq)) if return_lse else None
    c = _lib.ctx()
    st = _lib.attn_sdpa_varlen(c, q.tensor(), k.tensor(), v.tensor(), cq.tensor(), ck.tensor(),
                               opt.c, raw(out).tensor(),
                               raw(lse).tensor() if lse is not None else None)
    _lib.check(st, c)
    return (out, lse) if return_lse else out
