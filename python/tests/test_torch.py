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
@pytest.mark.parametrize("path", ["eager", "custom_op"])
def test_forward_and_gradients_match_torch(case, path, monkeypatch):
    if path == "custom_op":
        if not attn.torch.custom_op_registered:
            pytest.skip("torch has no torch.library.custom_op (< 2.4)")
        # eager calls through the dispatcher too (as under torch.compile)
        monkeypatch.setattr(attn.torch, "use_custom_op_in_eager", True)
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


# --------------------------------------------------------------------------------------------
# the custom op (torch >= 2.4) and the autograd.Function fallback
# --------------------------------------------------------------------------------------------
needs_custom_op = pytest.mark.skipif(not attn.torch.custom_op_registered,
                                     reason="torch has no torch.library.custom_op (< 2.4)")


@needs_custom_op
def test_registered_as_custom_op():
    assert hasattr(torch.ops.attn, "sdpa") and hasattr(torch.ops.attn, "sdpa_backward")
    q, k, v = _qkv(1, 2, 2, 4, 4, 8, 8)
    out, lse = torch.ops.attn.sdpa(q, k, v, None, 0.0, 1, None, False, None, None, 0.0, 0)
    _tclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert lse.shape == (1, 2, 4) and lse.dtype == torch.float32
    assert out.requires_grad and not lse.requires_grad
    out.sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None


def _opcheck_cases():
    g = torch.Generator().manual_seed(3)

    def r(*shape, grad=True, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)

    return {
        "plain": (r(2, 3, 5, 8), r(2, 3, 7, 8), r(2, 3, 7, 4), None, 0.0, 0, None, False, None,
                  None, 0.0, 0),
        "float_mask_gqa": (r(1, 4, 6, 8), r(1, 2, 6, 8), r(1, 2, 6, 8), r(6, 6), 0.0, 0, 0.5,
                           True, None, None, 0.0, 0),
        "bool_mask_causal_br": (r(2, 2, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 4),
                                torch.rand(2, 1, 3, 5, generator=g) > 0.2, 0.0, 2, None,
                                False, None, None, 0.0, 0),
        "dropout_window_alibi_softcap": (r(1, 2, 6, 8), r(1, 2, 6, 8), r(1, 2, 6, 8), None,
                                         0.25, 0, None, False, [2, -1],
                                         torch.tensor([0.5, 0.125]), 30.0, -123456789),
        "bfloat16": (r(1, 2, 8, 8, dtype=torch.bfloat16), r(1, 2, 8, 8, dtype=torch.bfloat16),
                     r(1, 2, 8, 8, dtype=torch.bfloat16), None, 0.0, 1, None, False, None, None,
                     0.0, 0),
        "3d": (r(2, 5, 8), r(2, 5, 8), r(2, 5, 8), None, 0.0, 1, None, False, None, None, 0.0,
               0),
    }


@needs_custom_op
@pytest.mark.skipif(not hasattr(torch.library, "opcheck"), reason="no torch.library.opcheck")
@pytest.mark.parametrize("name", list(_opcheck_cases()))
def test_opcheck(name):
    args = _opcheck_cases()[name]
    res = torch.library.opcheck(torch.ops.attn.sdpa.default, args)
    assert all(v == "SUCCESS" for v in res.values()), res


@needs_custom_op
def test_opcheck_backward_op():
    q, k, v = _qkv(1, 2, 2, 4, 6, 8, 8, grad=False)
    m = torch.randn(4, 6)
    out, lse = torch.ops.attn.sdpa(q, k, v, m, 0.0, 0, None, False, None, None, 0.0, 0)
    dout = torch.randn(out.shape)
    for need in ([True, True, True, True], [True, False, False, False]):
        args = (dout, q, k, v, m, out, lse, 0.0, 0, None, False, None, None, 0.0, 0, need)
        res = torch.library.opcheck(torch.ops.attn.sdpa_backward.default, args,
                                    test_utils=("test_schema", "test_faketensor"))
        assert all(x == "SUCCESS" for x in res.values()), res
        g = torch.ops.attn.sdpa_backward(*args)
        assert [t.numel() > 0 for t in g] == need


@needs_custom_op
def test_meta_and_fake_shapes():
    # the fake implementation gives shapes and dtypes without running attn
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 4, 5, 8)
        k = torch.empty(2, 2, 7, 8)
        v = torch.empty(2, 2, 7, 3, dtype=torch.float32)
        out, lse = torch.ops.attn.sdpa(q, k, v, None, 0.0, 0, None, True, None, None, 0.0, 0)
        assert out.shape == (2, 4, 5, 3) and lse.shape == (2, 4, 5)
        # the public function sees the mode and calls the op (not attn on fake memory)
        y = attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        assert y.shape == (2, 4, 5, 3)
    # make_fx traces the op as one node
    from torch.fx.experimental.proxy_tensor import make_fx
    qq, kk, vv = _qkv(1, 2, 2, 4, 4, 8, 8, grad=False)
    gm = make_fx(lambda a, b, c: attn.torch.scaled_dot_product_attention(a, b, c))(qq, kk, vv)
    assert "attn.sdpa" in str(gm.graph)
    # the op itself on meta tensors gives meta results; the public function refuses them
    qm = torch.empty(1, 2, 3, 4, device="meta")
    out, lse = torch.ops.attn.sdpa(qm, qm, qm, None, 0.0, 0, None, False, None, None, 0.0, 0)
    assert out.device.type == "meta" and out.shape == (1, 2, 3, 4)
    with pytest.raises(ValueError, match="query is on meta"):
        attn.torch.scaled_dot_product_attention(qm, qm, qm)


@needs_custom_op
def test_torch_compile_traces_the_op():
    # aot_eager: dynamo + AOTAutograd without a C++ compiler; fullgraph: no graph break
    q, k, v = _qkv(1, 4, 2, 6, 6, 8, 8)
    m = torch.randn(6, 6, requires_grad=True)

    def f(q, k, v, m):
        return attn.torch.scaled_dot_product_attention(q, k, v, m, enable_gqa=True,
                                                       scale=0.3) * 2

    torch._dynamo.reset()
    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    w = torch.randn(1, 4, 6, 8)
    (cf(q, k, v, m) * w).sum().backward()
    got = [t.grad.clone() for t in (q, k, v, m)]
    for t in (q, k, v, m):
        t.grad = None
    ref = F.scaled_dot_product_attention(q, k, v, m, enable_gqa=True, scale=0.3) * 2
    (ref * w).sum().backward()
    _tclose(cf(q, k, v, m), ref)
    for a, t in zip(got, (q, k, v, m)):
        _tclose(a, t.grad)


@pytest.mark.parametrize("case", [
    dict(mask=None, causal=True, gqa=False),
    dict(mask="float", causal=False, gqa=True),
])
def test_autograd_function_fallback_matches_torch(case):
    # the path of torch < 2.4, run here on any torch
    q, k, v = _qkv(1, 4, 2 if case["gqa"] else 4, 5, 5, 8, 8)
    m = torch.randn(5, 5, requires_grad=True) if case["mask"] else None
    out = attn.torch._function_sdpa(q, k, v, m, is_causal=case["causal"],
                                    enable_gqa=case["gqa"])
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    ts = [q, k, v] + ([m] if m is not None else [])
    got = [t.grad.clone() for t in ts]
    for t in ts:
        t.grad = None
    ref = F.scaled_dot_product_attention(q, k, v, m, is_causal=case["causal"],
                                         enable_gqa=case["gqa"])
    (ref * w).sum().backward()
    _tclose(out, ref)
    for a, t in zip(got, ts):
        _tclose(a, t.grad)


def test_lse_is_not_differentiable_and_no_grad_fast_path():
    q, k, v = _qkv(1, 2, 2, 4, 4, 8, 8)
    out, lse = attn.torch.scaled_dot_product_attention(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad
    with torch.no_grad():
        o2 = attn.torch.scaled_dot_product_attention(q, k, v)
    assert not o2.requires_grad and torch.equal(o2, out.detach())


# --------------------------------------------------------------------------------------------
# bad input with tensors
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["sdpa", "torch"])
@pytest.mark.parametrize("which", ["query", "key", "value", "attn_mask"])
def test_non_cpu_tensors_name_the_argument(fn, which):
    f = attn.sdpa if fn == "sdpa" else attn.torch.scaled_dot_product_attention
    devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        args = dict(query=torch.randn(1, 2, 3, 4), key=torch.randn(1, 2, 3, 4),
                    value=torch.randn(1, 2, 3, 4), attn_mask=torch.ones(3, 3, dtype=torch.bool))
        args[which] = args[which].to(dev)
        with pytest.raises(ValueError, match=f"attn: {which} is on {dev}"):
            f(**args)


@pytest.mark.parametrize("fn", ["sdpa", "torch"])
def test_tensor_dtypes_masks_and_out(fn):
    f = attn.sdpa if fn == "sdpa" else attn.torch.scaled_dot_product_attention
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match="attn: query has dtype torch.float64"):
        f(q.double(), q, q)
    with pytest.raises(TypeError, match="attn: value has dtype torch.bfloat16"):
        f(q, q, q.bfloat16())
    with pytest.raises(TypeError, match="attn_mask has dtype torch.int32"):
        f(q, q, q, torch.ones(3, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="attn_mask"):
        f(q, q, q, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError):
        f(q, q.numpy(), q)
    if fn == "sdpa":
        with pytest.raises(TypeError, match="out must be of the same library"):
            attn.sdpa(q, q, q, out=np.zeros((1, 2, 3, 4), np.float32))
        with pytest.raises(ValueError, match="out has overlapping memory"):
            attn.sdpa(q, q, q, out=torch.zeros(4).expand(1, 2, 3, 4))
        with pytest.raises(RuntimeError, match="out requires grad"):
            attn.sdpa(q, q, q, out=torch.zeros(1, 2, 3, 4, requires_grad=True))


def test_sparse_and_nested_tensors_are_refused():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match="query must be a dense"):
        attn.sdpa(q.to_sparse(), q, q)
    with pytest.raises(TypeError, match="query must be a dense"):
        attn.torch.scaled_dot_product_attention(q.to_sparse(), q, q)


def test_no_leak_over_torch_forward_backward():
    import gc
    import os
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("no /proc")

    def rss():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    q, k, v = _qkv(1, 2, 2, 8, 8, 16, 16)
    m = torch.randn(8, 8, requires_grad=True)

    def step():
        out = attn.torch.scaled_dot_product_attention(q, k, v, m, dropout_p=0.1)
        out.sum().backward()
        with torch.no_grad():
            attn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)

    for _ in range(300):
        step()
    gc.collect()
    before = rss()
    for _ in range(3000):
        step()
    gc.collect()
    grown = rss() - before
    assert grown < 2 << 20, f"RSS grew by {grown / 2**20:.2f} MiB over 3000 steps"
