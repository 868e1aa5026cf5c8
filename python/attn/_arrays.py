"""Views of numpy arrays and torch CPU tensors as attn_tensor, without copying.

A view is the array's own memory: data pointer, shape, strides in elements.  Copies are made
only where attn cannot read the memory as it is: negative strides, strides that are not a
whole number of elements, and a batch of more than four dimensions whose leading dimensions
do not merge into one (attn_tensor has at most four).
"""
from __future__ import annotations

import ctypes
import struct
from typing import Any, List, Sequence, Tuple

import numpy as np

from . import _lib

_NP_CODES = {np.dtype(np.float32): _lib.ATTN_F32, np.dtype(np.float64): _lib.ATTN_F64,
             np.dtype(np.float16): _lib.ATTN_F16, np.dtype(np.int64): _lib.ATTN_I64,
             np.dtype(np.int32): _lib.ATTN_I32, np.dtype(np.int8): _lib.ATTN_I8,
             np.dtype(np.uint8): _lib.ATTN_U8, np.dtype(np.bool_): _lib.ATTN_BOOL}
_DUMMY = ctypes.create_string_buffer(64)  # the data of empty arrays (never read)
_DUMMY_PTR = ctypes.addressof(_DUMMY)
_I64x4 = ctypes.c_int64 * 4
# attn_tensor's bytes (data, dtype, ndim, shape[4], stride[4]) where the layout is the usual one
_PACK = struct.Struct("@Pii4q4q")
if _PACK.size != ctypes.sizeof(_lib.Tensor) or ctypes.sizeof(ctypes.c_int) != 4:
    _PACK = None
_ZEROS = [(0,) * (4 - i) for i in range(5)]


_TORCH_TYPES: dict = {}  # type -> is a torch tensor (cached: this runs on every call)


def is_torch(x: Any) -> bool:
    if isinstance(x, np.ndarray) or x is None:
        return False
    t = type(x)
    r = _TORCH_TYPES.get(t)
    if r is None:
        r = t.__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")
        _TORCH_TYPES[t] = r
    return r


_TORCH_CODES: dict = {}


def _torch_codes():
    if not _TORCH_CODES:
        import torch
        _TORCH_CODES.update({
            torch.float32: _lib.ATTN_F32, torch.float64: _lib.ATTN_F64,
            torch.float16: _lib.ATTN_F16, torch.bfloat16: _lib.ATTN_BF16,
            torch.int64: _lib.ATTN_I64, torch.int32: _lib.ATTN_I32, torch.int8: _lib.ATTN_I8,
            torch.uint8: _lib.ATTN_U8, torch.bool: _lib.ATTN_BOOL})
    return _TORCH_CODES


def dtype_code(x: Any) -> int:
    """attn_dtype of an array or tensor, or -1."""
    if isinstance(x, np.ndarray):
        code = _NP_CODES.get(x.dtype)
        if code is not None:
            return code
    elif is_torch(x):
        return _torch_codes().get(x.dtype, -1)
    dt = x.dtype
    if dt.name == "bfloat16" and dt.itemsize == 2:  # ml_dtypes.bfloat16
        return _lib.ATTN_BF16
    if not dt.isnative:
        return -1
    return _NP_CODES.get(dt, -1)


class Raw:
    """Pointer, dtype, shape and strides (in elements) of an array; holds the array."""
    __slots__ = ("obj", "ptr", "dtype", "shape", "stride")

    def __init__(self, obj, ptr: int, dtype: int, shape: List[int], stride: List[int]):
        self.obj, self.ptr, self.dtype, self.shape, self.stride = obj, ptr, dtype, shape, stride

    def tensor(self) -> "_lib.Tensor":
        if len(self.shape) > _lib.MAX_DIMS:
            raise ValueError(f"attn: {len(self.shape)} dimensions (at most 4 here)")
        ptr = self.ptr if 0 not in self.shape else _DUMMY_PTR
        n = len(self.shape)
        if _PACK is not None:  # 4x faster than the Structure's constructor
            pad = _ZEROS[n]
            return _lib.Tensor.from_buffer_copy(_PACK.pack(ptr, self.dtype, n, *self.shape, *pad,
                                                           *self.stride, *pad))
        return _lib.Tensor(ptr, self.dtype, n, _I64x4(*self.shape), _I64x4(*self.stride))


def _strided():
    import torch
    return torch.strided


def raw(x: Any, what: str = "tensor") -> Raw:
    """The view of x as it is in memory (no copy), or a contiguous copy where attn could not
    read it (see the module's docstring)."""
    if is_torch(x):
        if not x.is_cpu:
            raise ValueError(f"attn: {what} is on {x.device}; attn runs on the CPU (use .cpu())")
        code = dtype_code(x)
        if code < 0:
            raise TypeError(f"attn: {what} has dtype {x.dtype}, which attn does not take")
        if (x.layout is not _strided() or getattr(x, "is_nested", False)
                or getattr(x, "is_quantized", False)):
            raise TypeError(f"attn: {what} must be a dense (strided) tensor")
        stride = x.stride()
        for s in stride:
            if s < 0:
                x = x.contiguous()
                stride = x.stride()
                break
        return Raw(x, x.data_ptr(), code, list(x.shape), list(stride))
    if not isinstance(x, np.ndarray):
        raise TypeError(f"attn: {what} must be a numpy array or a torch tensor, not "
                        f"{type(x).__name__}")
    code = dtype_code(x)
    if code < 0:
        raise TypeError(f"attn: {what} has dtype {x.dtype}, which attn does not take")
    item = x.itemsize
    strides = x.strides
    for s in strides:
        if s < 0 or s % item:
            x = np.ascontiguousarray(x)
            strides = x.strides
            break
    # x.ctypes.data, not __array_interface__ (which grows a numpy-internal cache per call)
    return Raw(x, x.ctypes.data, code, list(x.shape), [s // item for s in strides])


def merge_leading(r: Raw, keep: int) -> bool:
    """Merges the dimensions before the last `keep` into one, in place, when the strides
    allow it (no copy).  Returns False when they do not."""
    n = len(r.shape) - keep
    if n <= 1:
        return True
    lead_shape, lead_stride = r.shape[:n], r.stride[:n]
    # drop size-1 dimensions (any stride), then each must step over the next
    dims = [(s, st) for s, st in zip(lead_shape, lead_stride) if s != 1]
    total = 1
    for s, _ in dims:
        total *= s
    if not dims:
        stride = 0
    else:
        for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
            if st0 != st1 * s1:
                return False
        stride = dims[-1][1]
    r.shape[:n] = [total]
    r.stride[:n] = [stride]
    return True


def pad_leading(r: Raw, ndim: int) -> None:
    """Prepends size-1 dimensions up to ndim."""
    while len(r.shape) < ndim:
        r.shape.insert(0, 1)
        r.stride.insert(0, 0)


def contiguous(x: Any) -> Any:
    if is_torch(x):
        return x.contiguous()
    return np.ascontiguousarray(x)


def as4d(x: Any, what: str) -> Raw:
    """[..., H, L, D] -> a 4-D view [B, H, L, D] (size-1 dimensions prepended; leading batch
    dimensions merged, copied only when their strides do not merge)."""
    if x.ndim < 2:
        raise ValueError(f"attn: {what} needs at least 2 dimensions [L, D], has {x.ndim}")
    r = raw(x, what)
    if len(r.shape) > 4 and not merge_leading(r, 3):
        r = raw(contiguous(x), what)
        merge_leading(r, 3)
    pad_leading(r, 4)
    return r


def empty(like: Any, shape: Sequence[int], torch_dtype=None, np_dtype=np.float32):
    """A new float32 array of the library of `like` (numpy or torch)."""
    if is_torch(like):
        import torch
        return torch.empty(tuple(shape), dtype=torch_dtype or torch.float32)
    return np.empty(tuple(shape), dtype=np_dtype)


def to_float32(x: Any) -> Any:
    if is_torch(x):
        import torch
        return x.to(torch.float32)
    return np.asarray(x, dtype=np.float32)


def shape_tuple(x: Any) -> Tuple[int, ...]:
    return tuple(int(s) for s in x.shape)
