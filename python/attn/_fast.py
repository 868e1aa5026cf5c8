"""The per-call fast path of attn.sdpa and attn.torch (issue 13: call overhead).

The general path (``Plan`` in _sdpa.py) builds ctypes ``Structure`` objects for every view,
checks each argument in Python and then calls attn_sdpa: about 20 µs of Python per call, ten
times the C call at L = S = 16.  This module does the same call for the common case, float32
query, key and value of 2 to 4 dimensions (numpy arrays or plain CPU tensors) whose strides
attn reads as they are, with or without a bool / uint8 / float32 mask of 1 to 4 dimensions:

* the attn_tensor and attn_mask structs are packed with ``struct.pack_into`` into a scratch
  block of the thread's context (one per thread, so no lock; a nested call, from a signal
  handler or a finalizer while the block is in use, gets a block of its own) and passed by
  address,
  through prototypes whose arguments are all ``c_void_p`` (_lib.sdpa_addr): no ctypes object
  is made per call.  ctypes releases the GIL during the call as before;
* the data pointer of a writable C-contiguous numpy array comes from the buffer protocol
  (``c_char.from_buffer``, 0.3 µs) rather than ``x.ctypes`` (0.9 µs);
* the options struct is NULL (attn's defaults) or a cached causal one unless an option is set;
* the checks the C library makes anyway (shapes of key and value against query, strides of
  the outputs, finite values, the mask's broadcast) are left to it; its status becomes the same
  exception as on the general path (the library's message names the argument).

Every function here returns None where the call is not of that common kind (another dtype, a
negative or fractional stride, a size of 0, a 5-D batch, an ``out`` that needs checking, ...)
and the caller then takes the general path, which raises the Python errors the tests check.
None is returned before anything with an effect has happened (no seed drawn, no call made),
so the general path starts from the same state.
"""
from __future__ import annotations

import os
import struct
from ctypes import addressof, c_char, sizeof
from typing import Any, Optional

import numpy as np

from . import _lib
from ._arrays import _PACK

TS = sizeof(_lib.Tensor)  # bytes of one attn_tensor in the scratch block
MASK_AT = 9 * TS          # the attn_mask struct's place (slots 0-8: tensors)
_MASK_T = _lib.Mask.t.offset
# off where the struct layout is not the usual one, or with ATTN_PYTHON_FAST=0 (the tests
# compare both paths by setting it False)
_LAYOUT_OK = (_PACK is not None and _PACK.size == TS and
              MASK_AT + sizeof(_lib.Mask) <= _lib.SCRATCH_BYTES)
ENABLED = _LAYOUT_OK and os.environ.get("ATTN_PYTHON_FAST", "1") != "0"
_pack = _PACK.pack_into if _LAYOUT_OK else None
_kind = struct.Struct("@i").pack_into

F32 = _lib.ATTN_F32
NP_F32 = np.dtype(np.float32)
# numpy mask dtype -> (attn dtype, mask kind, log2 itemsize)
_NP_MASK = {np.dtype(np.bool_): (_lib.ATTN_BOOL, _lib.MASK_KEEP, 0),
            np.dtype(np.uint8): (_lib.ATTN_U8, _lib.MASK_KEEP, 0),
            NP_F32: (F32, _lib.MASK_ADD, 2)}
_ONES = [(1,) * (4 - i) for i in range(5)]   # size-1 dimensions to prepend up to 4
_ZEROS = [(0,) * (4 - i) for i in range(5)]  # their strides; the unused tail of shape/stride

# options: NULL is attn_sdpa_defaults(); causal top-left alone is this cached struct
_CAUSAL_OPT = _lib.SdpaOptions.from_buffer_copy(_lib.attn_sdpa_defaults())
_CAUSAL_OPT.causal = _lib.CAUSAL_TOP_LEFT
_CAUSAL_ADDR = addressof(_CAUSAL_OPT)
_CAUSAL_CODES = {"top_left": _lib.CAUSAL_TOP_LEFT, "bottom_right": _lib.CAUSAL_BOTTOM_RIGHT}


def _zero(x: Any) -> bool:
    """x is the int or float 0 (a bool, a numpy scalar or anything else is not: those take the
    general path, which converts and checks them)."""
    return (x.__class__ is float or x.__class__ is int) and x == 0


def simple_options(dropout_p, is_causal, scale, window, alibi_slopes, softcap):
    """The address of the options struct when only is_causal (a bool or None) is set: None
    (NULL, the defaults) or the cached causal struct; False when the options need building."""
    if (scale is None and window is None and alibi_slopes is None and _zero(dropout_p) and
            _zero(softcap)):
        if is_causal is False or is_causal is None:
            return None
        if is_causal is True:
            return _CAUSAL_ADDR
    return False


class Options:
    """An attn_sdpa_options struct from values already checked and converted (attn.torch's
    normalised arguments): causal code, scale (None: the default), dropout_p, seed, softcap.
    args: them, as attn.torch's general path takes them."""
    __slots__ = ("c", "addr", "args")

    def __init__(self, causal: int, scale: Optional[float], dropout_p: float, seed: int,
                 softcap: float):
        self.args = (dropout_p, causal, scale, softcap, seed)
        o = _lib.SdpaOptions.from_buffer_copy(_DEFAULTS)
        o.causal = causal
        if scale is not None:
            o.scale = scale if scale != 0.0 else 1e-30  # attn's 0 is 1/sqrt(D)
        o.dropout_p = dropout_p
        o.seed = seed & 0xFFFFFFFFFFFFFFFF
        o.softcap = softcap
        self.c = o
        self.addr = addressof(o)


_DEFAULTS = _lib.attn_sdpa_defaults()


def _np_ptr(x) -> int:
    """The data pointer: from the buffer protocol where numpy exports the memory writable and
    C-contiguous (0.3 µs), else from x.ctypes (0.9 µs).  The export ends with the c_char,
    at once; x keeps the memory."""
    try:
        return addressof(c_char.from_buffer(x))
    except (TypeError, ValueError, BufferError):  # read-only, not C-contiguous
        return x.ctypes.data


def np_pack(buf, off: int, x, code: int, shift: int, pad: bool):
    """Packs the attn_tensor of numpy array x (attn dtype code, itemsize 1 << shift) at
    buf[off]: its own memory, strides in elements; pad: as 4 dimensions (size-1 ones
    prepended; x must have 2 to 4), else as it is (1 to 4).  Returns the packed shape, or None
    where attn could not read x as it is (a negative or fractional stride, a size 0) or it
    has another number of dimensions."""
    sh = x.shape
    if 0 in sh:
        return None
    n = len(sh)
    if n == 4:
        a, b, c, d = x.strides
        o = a | b | c | d
        if o < 0 or o & ((1 << shift) - 1):  # a negative stride, or not whole elements
            return None
        _pack(buf, off, _np_ptr(x), code, 4, *sh, a >> shift, b >> shift, c >> shift,
              d >> shift)
        return sh
    if n > 4 or n < (2 if pad else 1):
        return None
    st = x.strides
    o = 0
    for s in st:
        o |= s
    if o < 0 or o & ((1 << shift) - 1):
        return None
    st = tuple(s >> shift for s in st)
    if pad:
        sh = _ONES[n] + sh
        st = _ZEROS[n] + st
        _pack(buf, off, _np_ptr(x), code, 4, *sh, *st)
        return sh
    z = _ZEROS[n]
    _pack(buf, off, _np_ptr(x), code, n, *sh, *z, *st, *z)
    return sh


def _fresh(buf, off: int, ptr: int, sh) -> None:
    """Packs a new C-contiguous float32 array [B, H, L, X] (sh, 4-D) at buf[off]."""
    B, H, L, X = sh
    _pack(buf, off, ptr, F32, 4, B, H, L, X, H * L * X, L * X, X, 1)


def _fresh_lse(buf, off: int, ptr: int, B: int, H: int, L: int) -> None:
    _pack(buf, off, ptr, F32, 3, B, H, L, 0, H * L, L, 1, 0)


def scratch():
    """(context, buffer, its address, keep): the calling thread's scratch block, marked busy
    (release() frees it); a nested call (a signal handler or a finalizer running attn while the
    block is in use) gets a block of its own, kept alive by keep."""
    c = _lib.context()
    if c.busy:
        buf = bytearray(_lib.SCRATCH_BYTES)
        keep = c_char.from_buffer(buf)
        return c, buf, addressof(keep), keep
    c.busy = True
    return c, c.scratch, c.scratch_addr, None


def release(c, keep) -> None:
    if keep is None:
        c.busy = False


def _call(c, base, mask_addr, opt_addr, lse_addr) -> None:
    st = _lib.sdpa_addr(c.addr, base, base + TS, base + 2 * TS, mask_addr, opt_addr,
                        base + 3 * TS, None, lse_addr)
    if st:
        _lib.check(st, c.addr)


def np_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, window,
            alibi_slopes, softcap, seed, out, return_lse):
    """attn.sdpa on numpy arrays (query is one), or None for the general path."""
    if type(key) is not np.ndarray or type(value) is not np.ndarray:
        return None
    if query.dtype is not NP_F32 or key.dtype is not NP_F32 or value.dtype is not NP_F32:
        return None
    nd = query.ndim
    if key.ndim != nd or value.ndim != nd:
        return None
    c, buf, base, keep = scratch()
    try:
        qs = np_pack(buf, 0, query, F32, 2, True)
        if qs is None:
            return None
        ks = np_pack(buf, TS, key, F32, 2, True)
        if ks is None:
            return None
        vs = np_pack(buf, 2 * TS, value, F32, 2, True)
        if vs is None:
            return None
        B, H, L, _ = qs
        if ks[0] != B or (ks[1] != H and not enable_gqa):
            return None  # the general path says which
        mask_addr = None
        if attn_mask is not None:
            if type(attn_mask) is not np.ndarray:
                return None
            mk = _NP_MASK.get(attn_mask.dtype)
            if mk is None or np_pack(buf, MASK_AT + _MASK_T, attn_mask, mk[0], mk[2],
                                     False) is None:
                return None
            _kind(buf, MASK_AT, mk[1])
            mask_addr = base + MASK_AT
        oshape = query.shape[:-1] + (vs[3],)
        if out is None:
            res = np.empty(oshape, NP_F32)
            _fresh(buf, 3 * TS, addressof(c_char.from_buffer(res)), (B, H, L, vs[3]))
        else:
            if (type(out) is not np.ndarray or out.dtype is not NP_F32 or
                    out.shape != oshape or not out.flags.writeable or 0 in out.strides or
                    np_pack(buf, 3 * TS, out, F32, 2, True) is None):
                return None  # the general path checks it and says what is wrong
            res = out
        lse = lse_addr = None
        if return_lse:
            lse = np.empty(query.shape[:-1], NP_F32)
            _fresh_lse(buf, 4 * TS, addressof(c_char.from_buffer(lse)), B, H, L)
            lse_addr = base + 4 * TS
        opt_addr = simple_options(dropout_p, is_causal, scale, window, alibi_slopes, softcap)
        opt = None
        if opt_addr is False:  # from here on the call is made (Options may draw a seed)
            from ._sdpa import Options as GeneralOptions
            opt = GeneralOptions(query, H, dropout_p, is_causal, scale, window, alibi_slopes,
                                 softcap, seed)
            opt_addr = addressof(opt.c)
        _call(c, base, mask_addr, opt_addr, lse_addr)
        return (res, lse) if return_lse else res
    finally:
        release(c, keep)


# --------------------------------------------------------------------------------------------
# torch tensors
# --------------------------------------------------------------------------------------------
TENSOR: Any = None  # torch.Tensor once torch_init ran
_T_F32 = _STRIDED = None
_T_MASK: dict = {}


def torch_init() -> bool:
    """Binds the torch names (called once torch is known to be imported)."""
    global TENSOR, _T_F32, _STRIDED
    import torch
    if not hasattr(torch.Tensor, "is_nested"):  # old torch: the general path only
        TENSOR = type("_NoFastPath", (), {})
        return False
    _T_MASK.update({torch.bool: (_lib.ATTN_BOOL, _lib.MASK_KEEP),
                    torch.uint8: (_lib.ATTN_U8, _lib.MASK_KEEP),
                    torch.float32: (F32, _lib.MASK_ADD)})
    _T_F32, _STRIDED = torch.float32, torch.strided
    TENSOR = torch.Tensor
    return True


def t_plain(x) -> bool:
    """x is a plain (not a subclass) dense float32 CPU tensor."""
    return (type(x) is TENSOR and x.dtype is _T_F32 and x.is_cpu and x.layout is _STRIDED
            and not x.is_nested)


def t_pack(buf, off: int, x, code: int, pad: int):
    """Packs the attn_tensor of tensor x at buf[off], as np_pack; pad: 4 or 3 (size-1
    dimensions prepended up to it), or 0 (as it is).  x has 1 to 4 dimensions (at most pad).
    Returns the packed shape, or None (a size 0, another number of dimensions)."""
    sh = x.shape
    n = len(sh)
    if 0 in sh or n == 0 or n > (pad or 4):
        return None
    if n == 4:
        _pack(buf, off, x.data_ptr(), code, 4, *sh, *x.stride())
        return sh
    st = x.stride()
    if pad > n:
        k = 4 - pad + n
        sh = _ONES[k] + tuple(sh)
        st = _ZEROS[k] + st
        n = pad
    z = _ZEROS[n]
    _pack(buf, off, x.data_ptr(), code, n, *sh, *z, *st, *z)
    return sh


def _t_inputs(buf, query, key, value, attn_mask, enable_gqa):
    """Packs q, k, v (slots 0-2) and the mask; returns ((B, H, L, Dv), mask offset or None)
    or None.  The tensors are plain float32 ones (t_plain); the mask is checked here."""
    nd = query.ndim
    if nd < 2 or key.ndim != nd or value.ndim != nd:
        return None
    qs = t_pack(buf, 0, query, F32, 4)
    if qs is None:
        return None
    ks = t_pack(buf, TS, key, F32, 4)
    if ks is None:
        return None
    vs = t_pack(buf, 2 * TS, value, F32, 4)
    if vs is None:
        return None
    B, H, L, _ = qs
    if ks[0] != B or (ks[1] != H and not enable_gqa):
        return None
    moff = None
    if attn_mask is not None:
        mk = _T_MASK.get(attn_mask.dtype)
        if (mk is None or type(attn_mask) is not TENSOR or not attn_mask.is_cpu or
                attn_mask.layout is not _STRIDED or attn_mask.is_nested or
                t_pack(buf, MASK_AT + _MASK_T, attn_mask, mk[0], 0) is None):
            return None
        _kind(buf, MASK_AT, mk[1])
        moff = MASK_AT
    return (B, H, L, vs[3]), moff, (qs, ks, vs)


def t_inputs(buf, query, key, value, attn_mask, enable_gqa):
    """Packs q, k, v (slots 0-2) and the mask of plain float32 tensors (t_plain) into buf:
    (the 4-D output shape (B, H, L, Dv), the mask's offset or None), or None for the general
    path (another number of dimensions, a size 0, batch or head counts the general path must
    explain, a mask of another kind)."""
    return _t_inputs(buf, query, key, value, attn_mask, enable_gqa)


def _new_out(query, osh, want_lse):
    """out [..., H, L, Dv] and lse [..., H, L] (or None) like query (new_empty with sizes as
    arguments: half the cost of a shape tuple or a torch.Size)."""
    nd = query.ndim
    B, H, L, Dv = osh
    if nd == 4:
        return (query.new_empty(B, H, L, Dv),
                query.new_empty(B, H, L) if want_lse else None)
    return (query.new_empty(*osh[4 - nd:]),
            query.new_empty(*osh[4 - nd:3]) if want_lse else None)


def opt_address(opt):
    """opt: None (the defaults), an address, or a function making an object with .addr (called
    once the call is certain: it may draw a dropout seed).  Returns (keep, address)."""
    if opt is None or opt.__class__ is int:
        return None, opt
    o = opt()
    return o, o.addr


def t_forward(query, key, value, attn_mask, enable_gqa, opt, want_lse, packed=None):
    """attn_sdpa on plain float32 CPU tensors (t_plain): (out, lse or None, options kept
    alive), or None for the general path (before opt is made).  packed: (buf, t_inputs's
    result) when the caller packed the inputs already (into its own buffer)."""
    if packed is None:
        c, buf, base, keep = scratch()
    else:
        c = _lib.context()
        buf, r = packed
        keep = c_char.from_buffer(buf)
        base = addressof(keep)
    try:
        if packed is None:
            r = _t_inputs(buf, query, key, value, attn_mask, enable_gqa)
            if r is None:
                return None
        osh, moff, _ = r
        res, lse = _new_out(query, osh, want_lse)
        _fresh(buf, 3 * TS, res.data_ptr(), osh)
        lse_addr = None
        if want_lse:
            _fresh_lse(buf, 4 * TS, lse.data_ptr(), osh[0], osh[1], osh[2])
            lse_addr = base + 4 * TS
        o, opt_addr = opt_address(opt)
        _call(c, base, None if moff is None else base + moff, opt_addr, lse_addr)
        return res, lse, o
    finally:
        if packed is None:
            release(c, keep)


def t_backward(dout, query, key, value, attn_mask, out, lse, enable_gqa, opt_addr, need):
    """attn_sdpa_backward_saved from t_forward's out and lse: [dq, dk, dv], None where need[i]
    is false; or None for the general path.  No mask gradient (the caller asks the general
    path for it)."""
    if type(dout) is not TENSOR or dout.dtype is not _T_F32:
        return None
    c, buf, base, keep = scratch()
    try:
        r = _t_inputs(buf, query, key, value, attn_mask, enable_gqa)
        if r is None:
            return None
        osh, moff, shapes = r
        if (t_pack(buf, 3 * TS, out, F32, 4) is None or t_pack(buf, 4 * TS, lse, F32, 3) is None
                or t_pack(buf, 5 * TS, dout, F32, 4) is None):
            return None
        # the gradients: new contiguous tensors (new_empty with sizes as arguments), packed
        # from the shapes just read
        nd = query.ndim
        grads = [None, None, None]
        addrs = [None, None, None]
        for i in 0, 1, 2:
            if need[i]:
                sh = shapes[i]
                g = (query.new_empty(sh[0], sh[1], sh[2], sh[3]) if nd == 4 else
                     query.new_empty(*sh[4 - nd:]))
                _fresh(buf, (6 + i) * TS, g.data_ptr(), sh)
                grads[i] = g
                addrs[i] = base + (6 + i) * TS
        st = _lib.sdpa_backward_saved_addr(
            c.addr, base, base + TS, base + 2 * TS, None if moff is None else base + moff,
            opt_addr, base + 3 * TS, base + 4 * TS, base + 5 * TS, addrs[0], addrs[1],
            addrs[2], None)
        if st:
            _lib.check(st, c.addr)
        return grads
    finally:
        release(c, keep)
