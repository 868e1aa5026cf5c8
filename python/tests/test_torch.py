"""attn with PyTorch: forward and gradients against torch's own SDPA, patch() on a
TransformerEncoderLayer training step.  Skipped (loudly, by .ci/run) without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import attn  # noqa: E402
import attn.torch  # noqa: E402
from attn import _arrays  # noqa: E402

from conftest import close  # noqa: E402


def _qkv(B, H, Hkv, L, S, D, Dv, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, D, generator=g)
    k = torch.randn(B, Hkv, S, D, generator=g)
    v = torch.randn(B, Hkv, S, Dv, generator=g)
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _tclose(a, b, tol=1e-5):
    close(a.detach().float().numpy(), b.detach().float().numpy(), tol)


def test_tensor_views_are_zero_copy():
    base = torch.randn(2, 5, 3, 4)
    q = base.transpose(1, 2)
    r = _arrays.raw(q)
    assert r.ptr == base.data_ptr() and r.stride == [60, 4, 12, 1]
    s = base[:, 1:]
    assert _arrays.raw(s).ptr == base.data_ptr() + 12 * 4
    out = torch.zeros(2, 5, 3, 4).transpose(1, 2)
    res = attn.sdpa(q, q, q, out=out)
    assert res is out
    _tclose(out, F.scaled_dot_product_attention(q, q, q))


@pytest.mark.parametrize("case", [
    dict(B=2, H=3, Hkv=3, L=5, S=7, D=4, Dv=6),
    dict(B=1, H=4, Hkv=2, L=6, S=6, D=8, Dv=8, is_causal=True),
    dict(B=2, H=2, Hkv=2, L=4, S=9, D=4, Dv=3, mask="bool"),
    dict(B=2, H=2, Hkv=1, L=5, S=5, D=4, Dv=4, mask="float", scale=0.4),
])
def test_forward_and_gradients_match_torch(case):
    case = dict(case)
    mask_kind = case.pop("mask", None)
    is_causal = case.pop("is_causal", False)
    scale = case.pop("scale", None)
    q, k, v = _qkv(**case)
    B, H, L, S = case["B"], case["H"], case["L"], case["S"]
    g = torch.Generator().manual_seed(1)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(B, 1, L, S, generator=g) > 0.3
        mask[..., 0] = True
    elif mask_kind == "float":
        mask = torch.randn(L, S, generator=g).requires_grad_(True)
    gqa = case["H"] != case["Hkv"]
    out = attn.torch.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal,
                                                  scale=scale, enable_gqa=gqa)
    w = torch.randn(out.shape, generator=g)
    (out * w).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)] + ([mask.grad.clone()] if mask_kind == "float"
                                                  else [])
    for t in (q, k, v):
        t.grad = None
    if mask_kind == "float":
        mask.grad = None
    ref = F.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale,
                                         enable_gqa=gqa)
    (ref * w).sum().backward()
    theirs = [t.grad for t in (q, k, v)] + ([mask.grad] if mask_kind == "float" else [])
    _tclose(out, ref)
    for a, b in zip(ours, theirs):
        _tclose(a, b)


def test_sdpa_with_grad_tensors_is_differentiable():
    q, k, v = _qkv(1, 2, 2, 3, 3, 4, 4)
    out = attn.sdpa(q, k, v)
    assert out.requires_grad
    out.sum().backward()
    assert q.grad is not None


def test_bfloat16():
    q, k, v = _qkv(1, 2, 2, 16, 16, 8, 8)
    qb, kb, vb = (t.detach().bfloat16().requires_grad_(True) for t in (q, k, v))
    out = attn.torch.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
    assert out.dtype == torch.bfloat16
    ref = F.scaled_dot_product_attention(qb.float(), kb.float(), vb.float(), is_causal=True)
    # attn.h: within 2^-8 max|v| of the float32 result, plus the final rounding to bf16
    assert (out.float() - ref).abs().max().item() <= 2 ** -7 * vb.float().abs().max().item()
    out.float().sum().backward()
    assert qb.grad.dtype == torch.bfloat16 and torch.isfinite(qb.grad.float()).all()
    # numpy-free path too: attn.sdpa on bf16 tensors returns bf16
    assert attn.sdpa(qb.detach(), kb.detach(), vb.detach()).dtype == torch.bfloat16


def test_dropout_backward_uses_the_same_stream():
    q, k, v = _qkv(1, 2, 2, 6, 6, 4, 4)
    out = attn.torch.scaled_dot_product_attention(q, k, v, dropout_p=0.3, seed=5)
    again = attn.sdpa(q.detach(), k.detach(), v.detach(), dropout_p=0.3, seed=5)
    assert torch.equal(out.detach(), again)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    # finite differences of one element of v against the seeded forward
    eps = 1e-2
    vp = v.detach().clone()
    vp[0, 1, 2, 3] += eps
    vm = v.detach().clone()
    vm[0, 1, 2, 3] -= eps
    fp = (attn.sdpa(q.detach(), k.detach(), vp, dropout_p=0.3, seed=5) * w).sum()
    fm = (attn.sdpa(q.detach(), k.detach(), vm, dropout_p=0.3, seed=5) * w).sum()
    assert abs((fp - fm).item() / (2 * eps) - v.grad[0, 1, 2, 3].item()) < 1e-3


def _train_step(layer, x, pad):
    layer.zero_grad()
    y = layer(x, src_key_padding_mask=pad)
    loss = (y ** 2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}


def test_patch_transformer_encoder_layer_training_step():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                             batch_first=True)
    layer.train()
    x = torch.randn(3, 7, 16)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    loss_ref, grads_ref = _train_step(layer, x, pad)
    before = attn.torch.routed_calls
    attn.torch.patch()
    try:
        assert attn.torch.is_patched()
        loss, grads = _train_step(layer, x, pad)
        assert attn.torch.routed_calls > before
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        opt.step()
        # CUDA-less, other dtypes go to torch's own
        xd = x.double()
        F.scaled_dot_product_attention(xd[:, None], xd[:, None], xd[:, None])
    finally:
        attn.torch.unpatch()
    assert not attn.torch.is_patched()
    _tclose(loss, loss_ref)
    for n in grads_ref:
        _tclose(grads[n], grads_ref[n])
