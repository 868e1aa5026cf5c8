"""PyTorch integration: attn's attention as a torch.autograd.Function, and patch() to route
torch.nn.functional.scaled_dot_product_attention's CPU calls to it.

    import attn.torch
    out = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()          # attn's fused backward (attn_sdpa_backward_saved)

    attn.torch.patch()            # F.scaled_dot_product_attention -> attn on CPU
    ...                           # nn.MultiheadAttention, nn.TransformerEncoderLayer, ...
    attn.torch.unpatch()

The forward saves its output and log-sum-exp, and the backward starts from them (FlashAttention's
way: no second forward pass).  bfloat16 inputs: the forward runs attn's bf16 kernels; the
backward runs in float32 on the inputs converted (attn has no bf16 backward), recomputing the
forward (attn_sdpa_backward), and returns bfloat16 gradients.  A float attn_mask that requires
grad gets its gradient (summed over broadcast dimensions, as attn_sdpa_backward gives it).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from . import _lib
from ._arrays import as4d, is_torch, merge_leading, pad_leading, raw
from ._sdpa import Causal, Plan, Window

__all__ = ["scaled_dot_product_attention", "patch", "unpatch", "is_patched"]

_original = None
routed_calls = 0  # calls patch() sent to attn (for tests and curiosity)


def _grad_view(t: torch.Tensor, what: str):
    r = as4d(t, what)
    return r, r.tensor()


class _SDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, window, alibi,
                softcap, seed):
        plan = Plan(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, window, alibi,
                    softcap, seed)
        out, lse = plan.run(None, True)
        ctx.args = (dropout_p, is_causal, scale, enable_gqa, window, alibi, softcap,
                    plan.opt.seed)
        ctx.bf16 = plan.bf16
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.mark_non_differentiable(lse)
        res = out.to(q.dtype) if plan.bf16 else out
        return res, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, mask, out, lse = ctx.saved_tensors
        dropout_p, is_causal, scale, enable_gqa, window, alibi, softcap, seed = ctx.args
        bf16 = ctx.bf16
        if bf16:
            q, k, v = q.float(), k.float(), v.float()
        plan = Plan(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa, window, alibi,
                    softcap, seed)
        dout = dout.float()
        need = ctx.needs_input_grad
        grads = []
        views = []
        for i, x in enumerate((q, k, v)):
            if need[i]:
                g = torch.empty(x.shape, dtype=torch.float32)
                grads.append(g)
                views.append(_grad_view(g, "gradient")[1])
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
        if bf16:
            st = _lib.attn_sdpa_backward(c, plan.q.tensor(), plan.k.tensor(), plan.v.tensor(),
                                         plan.mask, plan.opt.c, rd.tensor(), views[0], views[1],
                                         views[2], dmask_view)
        else:
            ro = plan.out_view(out)
            rl = raw(lse, "lse")
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
        return (grads[0], grads[1], grads[2], dmask) + (None,) * 8


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: Causal = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False, *,
                                 window: Window = None, alibi_slopes: Any = None,
                                 softcap: float = 0.0, return_lse: bool = False,
                                 seed: Optional[int] = None):
    """``torch.nn.functional.scaled_dot_product_attention`` computed by attn, differentiable
    (q, k, v, and a float attn_mask).  Arguments and extensions as :func:`attn.sdpa`."""
    out, lse = _SDPA.apply(query, key, value, attn_mask, dropout_p, is_causal, scale,
                           enable_gqa, window, alibi_slopes, softcap, seed)
    return (out, lse) if return_lse else out


def _routable(query, key, value, attn_mask, is_causal) -> bool:
    ts = (query, key, value)
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.layout == torch.strided
               and not getattr(t, "is_nested", False) for t in ts):
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
