"""PyTorch integration: attn's attention as a torch.autograd.Function, and patch() to route
torch.nn.functional.scaled_dot_product_attention's CPU calls to it.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()          # attn's fused backward (attn_sdpa_backward_saved)

    attn.torch.patch()            # F.scaled_dot_product_attention -> attn on CPU
    ...                           # nn.MultiheadAttention, nn.TransformerEncoderLayer, ...
    attn.torch.unpatch()

Where torch has ``torch.library.custom_op`` (2.4 and later) the function is the custom op
``torch.ops.attn.sdpa`` (a fake implementation for meta / fake tensors, so torch.compile and
torch.export trace it as one node; autograd through ``register_autograd``, whose backward is
the custom op ``torch.ops.attn.sdpa_backward``).  Older torch gets the same computation as a
``torch.autograd.Function``.

The forward saves its output and log-sum-exp, and the backward starts from them (FlashAttention's
way: no second forward pass).  bfloat16 inputs: the forward runs attn's bf16 kernels; the
backward runs in float32 on the inputs converted (attn has no bf16 backward), recomputing the
forward (attn_sdpa_backward), and returns bfloat16 gradients.  A float attn_mask that requires
grad gets its gradient (summed over broadcast dimensions, as attn_sdpa_backward gives it).
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from . import _fast, _lib
from ._arrays import as4d, merge_leading, pad_leading, raw
from ._sdpa import Causal, Plan, Window, _causal_code, _random_seed, window_pair

__all__ = ["scaled_dot_product_attention", "patch", "unpatch", "is_patched",
           "custom_op_registered"]

_original = None
routed_calls = 0  # calls patch() sent to attn (for tests and curiosity)

_CAUSAL = {0: False, 1: "top_left", 2: "bottom_right"}
_U64 = 2**64 - 1


# --------------------------------------------------------------------------------------------
# the computation (shared by the custom op and the autograd.Function fallback)
# --------------------------------------------------------------------------------------------


def _forward(q, k, v, mask, dropout_p, causal, scale, enable_gqa, window, alibi, softcap,
             seed, want_plan=False):
    """(out of q's dtype, lse float32) on CPU tensors (and the Plan with want_plan)."""
    plan = Plan(q, k, v, mask, dropout_p, _CAUSAL[causal], scale, enable_gqa, window, alibi,
                softcap, seed)
    out, lse = plan.run(None, True)
    out = out.to(q.dtype) if plan.bf16 else out
    return (out, lse, plan) if want_plan else (out, lse)


def _backward(dout, q, k, v, mask, out, lse, dropout_p, causal, scale, enable_gqa, window,
              alibi, softcap, seed, need, plan=None):
    """(dq, dk, dv, dmask), each None where need[i] is false (dmask also for bool masks).
    plan: the forward's (float32 inputs), whose views are reused."""
    if dout.numel() == 0:  # an empty result: every gradient is zero
        float_mask = mask is not None and mask.dtype.is_floating_point
        return tuple(torch.zeros_like(x) if x is not None and want else None
                     for x, want in zip((q, k, v, mask if float_mask else None), need))
    bf16 = q.dtype == torch.bfloat16
    if bf16:
        q, k, v = q.float(), k.float(), v.float()
    if plan is None or bf16:
        plan = Plan(q, k, v, mask, dropout_p, _CAUSAL[causal], scale, enable_gqa, window,
                    alibi, softcap, seed)
    dout = dout.float()
    grads: List[Optional[torch.Tensor]] = []
    views = []
    for i, x in enumerate((q, k, v)):
        if need[i]:
            g = torch.empty(x.shape, dtype=torch.float32)
            grads.append(g)
            views.append(as4d(g, "gradient").tensor())
        else:
            grads.append(None)
            views.append(None)
    dmask = None
    dmask_view = None
    if mask is not None and need[3] and mask.dtype.is_floating_point:
        if q.ndim > 4 or mask.ndim > 4:
            raise NotImplementedError("attn: the attn_mask gradient is computed for inputs "
                                      "of at most 4 dimensions")
        dmask = torch.empty(mask.shape, dtype=torch.float32)
        dmask_view = raw(dmask, "mask gradient").tensor()
    rd = as4d(dout, "grad_output")
    c = _lib.ctx()
    if bf16 or out.dtype != torch.float32:
        st = _lib.attn_sdpa_backward(c, plan.q.tensor(), plan.k.tensor(), plan.v.tensor(),
                                     plan.mask, plan.opt.c, rd.tensor(), views[0], views[1],
                                     views[2], dmask_view)
    else:
        ro = plan.out_view(out.detach())
        rl = raw(lse.detach(), "lse")
        merge_leading(rl, 2)
        pad_leading(rl, 3)
        st = _lib.attn_sdpa_backward_saved(c, plan.q.tensor(), plan.k.tensor(),
                                           plan.v.tensor(), plan.mask, plan.opt.c,
                                           ro.tensor(), rl.tensor(), rd.tensor(), views[0],
                                           views[1], views[2], dmask_view)
    _lib.check(st, c)
    if bf16:
        grads = [g.to(torch.bfloat16) if g is not None else None for g in grads]
    if dmask is not None and mask.dtype != torch.float32:
        dmask = dmask.to(mask.dtype)
    return grads[0], grads[1], grads[2], dmask


# --------------------------------------------------------------------------------------------
# torch >= 2.4: the custom ops attn::sdpa and attn::sdpa_backward
# --------------------------------------------------------------------------------------------
# eager calls on plain tensors skip the dispatcher (see _plain_eager); True sends them through
# the custom op as well (tests; ATTN_TORCH_EAGER_OP=1)
use_custom_op_in_eager = os.environ.get("ATTN_TORCH_EAGER_OP", "0") == "1"
custom_op_registered = (hasattr(torch.library, "custom_op") and
                        hasattr(torch.library, "register_autograd") and
                        os.environ.get("ATTN_TORCH_CUSTOM_OP", "1") != "0")

if custom_op_registered:
    @torch.library.custom_op("attn::sdpa", mutates_args=(), device_types="cpu")
    def _sdpa_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: Optional[torch.Tensor], dropout_p: float, causal: int,
                 scale: Optional[float], enable_gqa: bool, window: Optional[List[int]],
                 alibi_slopes: Optional[torch.Tensor], softcap: float,
                 seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """attn_sdpa: (out [..., H, L, Dv] of query's dtype, lse [..., H, L] float32).
        causal: 0 none, 1 top-left, 2 bottom-right; window: [left, right] (-1 unlimited) or
        None; seed: the Philox key as a signed 64-bit number."""
        return _forward(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa,
                        window, alibi_slopes, softcap, seed)

    @_sdpa_op.register_fake
    def _sdpa_fake(query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa, window,
                   alibi_slopes, softcap, seed):
        out = query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))
        lse = query.new_empty(tuple(query.shape[:-1]), dtype=torch.float32)
        return out, lse

    @torch.library.custom_op("attn::sdpa_backward", mutates_args=(), device_types="cpu")
    def _sdpa_backward_op(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attn_mask: Optional[torch.Tensor],
                          out: torch.Tensor, lse: torch.Tensor, dropout_p: float, causal: int,
                          scale: Optional[float], enable_gqa: bool,
                          window: Optional[List[int]], alibi_slopes: Optional[torch.Tensor],
                          softcap: float, seed: int, need: List[bool]) -> List[torch.Tensor]:
        """attn_sdpa_backward(_saved): [dq, dk, dv, dmask]; a gradient not asked for (need)
        is an empty tensor."""
        g = _backward(grad_out, query, key, value, attn_mask, out, lse, dropout_p, causal,
                      scale, enable_gqa, window, alibi_slopes, softcap, seed, need)
        return [x if x is not None else query.new_empty((0,)) for x in g]

    def _backward_shapes(query, key, value, attn_mask, need):
        float_mask = attn_mask is not None and attn_mask.dtype.is_floating_point
        return [(query, need[0]), (key, need[1]), (value, need[2]),
                (attn_mask if float_mask else query, need[3] and float_mask)]

    @_sdpa_backward_op.register_fake
    def _sdpa_backward_fake(grad_out, query, key, value, attn_mask, out, lse, dropout_p,
                            causal, scale, enable_gqa, window, alibi_slopes, softcap, seed,
                            need):
        return [like.new_empty(like.shape) if want else query.new_empty((0,))
                for like, want in _backward_shapes(query, key, value, attn_mask, need)]

    def _setup_context(ctx, inputs, output):
        (query, key, value, attn_mask, dropout_p, causal, scale, enable_gqa, window,
         alibi_slopes, softcap, seed) = inputs
        out, lse = output
        ctx.args = (dropout_p, causal, scale, enable_gqa, window, softcap, seed)
        ctx.save_for_backward(query, key, value, attn_mask, out, lse, alibi_slopes)
        ctx.mark_non_differentiable(lse)

    def _autograd_backward(ctx, grad_out, _grad_lse):
        query, key, value, attn_mask, out, lse, alibi_slopes = ctx.saved_tensors
        dropout_p, causal, scale, enable_gqa, window, softcap, seed = ctx.args
        n = ctx.needs_input_grad
        need = [bool(n[0]), bool(n[1]), bool(n[2]), bool(n[3])]
        g = _sdpa_backward_op(grad_out, query, key, value, attn_mask, out, lse, dropout_p,
                              causal, scale, enable_gqa, window, alibi_slopes, softcap, seed,
                              need)
        float_mask = attn_mask is not None and attn_mask.dtype.is_floating_point
        grads = [g[i] if need[i] else None for i in range(3)]
        grads.append(g[3] if need[3] and float_mask else None)
        return tuple(grads) + (None,) * 8

    _sdpa_op.register_autograd(_autograd_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------------------------
# older torch: a torch.autograd.Function
# --------------------------------------------------------------------------------------------


class _SDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p, causal, scale, enable_gqa, window, alibi,
                softcap, seed):
        out, lse, plan = _forward(q, k, v, mask, dropout_p, causal, scale, enable_gqa, window,
                                  alibi, softcap, seed, True)
        ctx.args = (dropout_p, causal, scale, enable_gqa, window, alibi, softcap, seed)
        ctx.plan = plan  # its views of q, k, v and the mask (saved below too)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, mask, out, lse = ctx.saved_tensors
        dropout_p, causal, scale, enable_gqa, window, alibi, softcap, seed = ctx.args
        plan, ctx.plan = ctx.plan, None
        g = _backward(dout, q, k, v, mask, out, lse, dropout_p, causal, scale, enable_gqa,
                      window, alibi, softcap, seed, ctx.needs_input_grad[:4], plan)
        return g + (None,) * 8


# --------------------------------------------------------------------------------------------
# the fast path (issue 13): eager calls on plain float32 CPU tensors
# --------------------------------------------------------------------------------------------
# The same computation as _SDPA with less Python around it (see _fast.py): the structs are
# packed into a buffer instead of built as ctypes objects, the Function takes five arguments
# and returns out alone (the lse stays on ctx: it is not an output, so there is no cycle), the
# backward packs the saved tensors again (so it reads them where they are now) and allocates
# the gradients with empty_like.  Saved with save_for_backward as before: an in-place change
# of q, k, v, the mask or out before the backward is still reported by autograd.


class _FastSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, state):
        packed, keep, opt_addr, enable_gqa, args = state
        out, lse, _ = _fast.t_forward(q, k, v, mask, enable_gqa, opt_addr, True, packed)
        ctx.state = (keep, opt_addr, enable_gqa, args)
        ctx.lse = lse
        ctx.save_for_backward(q, k, v, mask, out)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, mask, out = ctx.saved_tensors
        keep, opt_addr, enable_gqa, args = ctx.state
        need = ctx.needs_input_grad
        g = _fast.t_backward(dout, q, k, v, mask, out, ctx.lse, enable_gqa, opt_addr, need)
        if g is None:  # dout of another kind: the general backward (from the same options)
            dropout_p, causal, scale, softcap, seed = args
            g = _backward(dout, q, k, v, mask, out, ctx.lse, dropout_p, causal, scale,
                          enable_gqa, None, None, softcap, seed,
                          (need[0], need[1], need[2], False))
        return g[0], g[1], g[2], None, None


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
try:
    _dispatch_depth = torch._C._len_torch_dispatch_stack
    _wrapped = torch._C._functorch.is_functorch_wrapped_tensor
except AttributeError:
    _dispatch_depth = _wrapped = None
_grad_enabled = torch.is_grad_enabled
_PACK_OK = _fast._pack is not None
_FAST = (_PACK_OK and custom_op_registered and _is_compiling is not None and
         _dispatch_depth is not None)
if _FAST:
    _fast.torch_init()


def _fast_options(query, dropout_p, is_causal, scale, softcap, seed):
    """A function making the _fast.Options of these arguments (the dropout seed drawn as the
    general path draws it), or None where the general path must check or convert them."""
    if is_causal is False or is_causal is None:
        causal = _lib.CAUSAL_NONE
    elif is_causal is True:
        causal = _lib.CAUSAL_TOP_LEFT
    elif is_causal.__class__ is str and is_causal in _fast._CAUSAL_CODES:
        causal = _fast._CAUSAL_CODES[is_causal]
    else:
        return None
    num = (float, int)
    if (dropout_p.__class__ not in num or not 0.0 <= dropout_p < 1.0 or
            softcap.__class__ not in num or (scale is not None and scale.__class__ not in num)
            or (seed is not None and seed.__class__ is not int)):
        return None

    def make():
        s = seed
        if s is None:
            s = _random_seed(query) if dropout_p > 0.0 else 0
        return _fast.Options(causal, None if scale is None else float(scale),
                             float(dropout_p), _signed64(s), float(softcap))
    return make


def _fast_sdpa(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, softcap, seed):
    """scaled_dot_product_attention without window, ALiBi or lse on plain float32 CPU tensors,
    eagerly (as _plain_eager); None for the general path."""
    plain = _fast.t_plain
    if (not (plain(q) and plain(k) and plain(v)) or _dispatch_depth() or _wrapped(q) or
            _wrapped(k) or _wrapped(v)):
        return None
    if mask is not None and (type(mask) is not torch.Tensor or _wrapped(mask)):
        return None
    grad = _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or
                                (mask is not None and mask.requires_grad))
    if grad and mask is not None and mask.requires_grad:
        return None  # the mask's gradient: the general path
    opt = _fast.simple_options(dropout_p, is_causal, scale, None, None, softcap)
    if opt is False:
        opt = _fast_options(q, dropout_p, is_causal, scale, softcap, seed)
        if opt is None:
            return None
    if not grad:
        r = _fast.t_forward(q, k, v, mask, enable_gqa, opt, False)
        return None if r is None else r[0]
    buf = bytearray(_lib.SCRATCH_BYTES)  # this call's own: the Function's forward reads it
    r = _fast.t_inputs(buf, q, k, v, mask, enable_gqa)
    if r is None:
        return None
    keep, opt_addr = _fast.opt_address(opt)  # the call is certain from here (a seed drawn)
    if keep is not None:
        args = keep.args
    else:
        args = (0.0, _lib.CAUSAL_NONE if opt_addr is None else _lib.CAUSAL_TOP_LEFT, None,
                0.0, 0)
    return _FastSDPA.apply(q, k, v, mask, ((buf, r), keep, opt_addr, enable_gqa, args))


# --------------------------------------------------------------------------------------------
# the public function
# --------------------------------------------------------------------------------------------


def _check_tensor(x: Any, what: str, optional: bool = False) -> None:
    if x is None and optional:
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"attn: {what} must be a torch tensor, not {type(x).__name__}")
    if not x.is_cpu:
        raise ValueError(f"attn: {what} is on {x.device}; attn runs on the CPU (use .cpu())")
    if x.layout is not torch.strided or getattr(x, "is_nested", False):
        raise TypeError(f"attn: {what} must be a dense (strided) tensor, not {x.layout}"
                        + (" (nested)" if getattr(x, "is_nested", False) else ""))


def _window_arg(window: Window) -> Optional[List[int]]:
    if window is None:
        return None
    return list(window_pair(window))


def _signed64(x: int) -> int:
    x = int(x) & _U64
    return x - 2**64 if x >= 2**63 else x


def _compiling() -> bool:
    c = getattr(torch, "compiler", None)
    f = getattr(c, "is_compiling", None) if c is not None else None
    return bool(f()) if f is not None else False


def _plain_eager(tensors) -> bool:
    """True when the call runs eagerly on plain CPU tensors: not under torch.compile /
    export, no torch-dispatch mode (make_fx, FakeTensorMode), no tensor subclass or functorch
    wrapper.  Then the autograd.Function runs (the same computation, without the
    dispatcher's cost); otherwise the custom op, which tracing sees as one node."""
    if _compiling():
        return False
    try:
        if torch._C._len_torch_dispatch_stack() > 0:
            return False
        wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    except AttributeError:
        return False
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or wrapped(t)):
            return False
    return True


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: Causal = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False, *,
                                 window: Window = None, alibi_slopes: Any = None,
                                 softcap: float = 0.0, return_lse: bool = False,
                                 seed: Optional[int] = None):
    """``torch.nn.functional.scaled_dot_product_attention`` computed by attn, differentiable
    (q, k, v, and a float attn_mask).  Arguments and extensions as :func:`attn.sdpa`.

    With torch >= 2.4 this calls the custom op ``torch.ops.attn.sdpa`` (traceable by
    torch.compile; its backward is ``torch.ops.attn.sdpa_backward``).  CPU tensors only:
    CUDA and meta tensors raise ValueError naming the argument."""
    if (_FAST and _fast.ENABLED and not _is_compiling() and not return_lse and
            window is None and alibi_slopes is None and not use_custom_op_in_eager):
        r = _fast_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                       softcap, seed)
        if r is not None:
            return r
    _check_tensor(query, "query")
    _check_tensor(key, "key")
    _check_tensor(value, "value")
    _check_tensor(attn_mask, "attn_mask", optional=True)
    causal = _causal_code(is_causal)
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        alibi_slopes = torch.as_tensor(np.asarray(alibi_slopes, dtype=np.float32))
    if alibi_slopes is not None:
        _check_tensor(alibi_slopes, "alibi_slopes")
        alibi_slopes = alibi_slopes.detach().float()
    dropout_p = float(dropout_p)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attn: dropout_p {dropout_p} is outside [0, 1)")
    if seed is None:
        seed = _random_seed(query) if dropout_p > 0.0 else 0
    seed = _signed64(seed)
    win = _window_arg(window)
    scale = None if scale is None else float(scale)
    softcap = float(softcap)
    enable_gqa = bool(enable_gqa)
    tensors = (query, key, value, attn_mask)
    if custom_op_registered and not use_custom_op_in_eager and _plain_eager(tensors):
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                           for t in tensors):
            out, lse = _SDPA.apply(query, key, value, attn_mask, dropout_p, causal, scale,
                                   enable_gqa, win, alibi_slopes, softcap, seed)
        else:  # nothing to differentiate: the lse only when asked for
            plan = Plan(query, key, value, attn_mask, dropout_p, _CAUSAL[causal], scale,
                        enable_gqa, win, alibi_slopes, softcap, seed)
            out, lse = plan.run(None, return_lse)
            if plan.bf16:
                out = out.to(query.dtype)
    elif custom_op_registered:
        out, lse = _sdpa_op(query, key, value, attn_mask, dropout_p, causal, scale,
                            enable_gqa, win, alibi_slopes, softcap, seed)
    else:
        out, lse = _SDPA.apply(query, key, value, attn_mask, dropout_p, causal, scale,
                               enable_gqa, win, alibi_slopes, softcap, seed)
    return (out, lse) if return_lse else out


def _function_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None, enable_gqa=False, *, window=None, alibi_slopes=None,
                   softcap=0.0, seed=0):
    """The autograd.Function path (older torch), callable on any torch for the tests."""
    out, _ = _SDPA.apply(query, key, value, attn_mask, float(dropout_p),
                         _causal_code(is_causal), scale, bool(enable_gqa), _window_arg(window),
                         alibi_slopes, float(softcap), _signed64(seed))
    return out


def _cpu_dense(t) -> bool:
    return (isinstance(t, torch.Tensor) and t.is_cpu and t.layout is torch.strided and
            not getattr(t, "is_nested", False))


def _routable(query, key, value, attn_mask, is_causal) -> bool:
    if not (_cpu_dense(query) and _cpu_dense(key) and _cpu_dense(value)):
        return False
    dt = query.dtype
    if dt not in (torch.float32, torch.bfloat16) or key.dtype != dt or value.dtype != dt:
        return False
    if attn_mask is not None:
        if is_causal:  # PyTorch refuses the pair: let it say so
            return False
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.device.type != "cpu":
            return False
        if attn_mask.dtype != torch.bool and attn_mask.dtype != dt:
            return False
        if attn_mask.requires_grad and (query.ndim > 4 or attn_mask.ndim > 4):
            return False
    return query.ndim >= 2


def _routed(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
            enable_gqa=False, **kwargs):
    global routed_calls
    if not kwargs and _routable(query, key, value, attn_mask, is_causal):
        routed_calls += 1
        return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                            bool(is_causal), scale, enable_gqa)
    kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if enable_gqa:
        kw["enable_gqa"] = enable_gqa
    kw.update(kwargs)
    return _original(query, key, value, **kw)


def patch() -> None:
    """Routes CPU calls of ``torch.nn.functional.scaled_dot_product_attention`` (float32 or
    bfloat16 tensors; bool masks or masks of the inputs' dtype) to attn, with attn's backward.
    Other calls (CUDA tensors, other dtypes, nested tensors, attn_mask together with
    is_causal) go to PyTorch's own.  Modules that call it (nn.MultiheadAttention with
    need_weights=False, nn.TransformerEncoderLayer, ...) follow.  Idempotent."""
    global _original
    if _original is not None:
        return
    _original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _routed


def unpatch() -> None:
    """Restores PyTorch's own scaled_dot_product_attention."""
    global _original
    if _original is None:
        return
    F.scaled_dot_product_attention = _original
    _original = None


def is_patched() -> bool:
    return _original is not None
