#!/usr/bin/env python3
"""Reference files for tests/test_training.c: training trajectories and checkpoints shared
between attn and PyTorch.

    python3 tests/gen_training.py [--out DIR] [--attn-test BUILD/tests/test_training]

Writes DIR (default tests/fixtures/training/):

* trajectory.safetensors -- a small attn_seq2seq translator (E=32, 4 heads, 2+2 layers,
  feed-forward 64, vocabularies 20, pad 0, BOS 1, EOS 2, max_len 16) as the PyTorch module
  Seq2Seq below: its initial weights under their state_dict names, K=5 batches
  (batch.<k>.src, batch.<k>.tgt_in, batch.<k>.tgt_out, I64), the model config and the
  optimiser settings in __metadata__, and what PyTorch gives after K steps of
      logits = model(src, tgt_in); loss = cross_entropy(logits [B*T, V], tgt_out [B*T],
                 ignore_index=0, label_smoothing=0.1); zero_grad; backward;
      clip_grad_norm_(1.0); lr from attn_lr_warmup_cosine; AdamW.step()
  expected.losses [K], expected.grad_norms [K] (before clipping) and the final weights
  expected.<name>.  Also adamw.*: AdamW alone on a [6, 5] weight and a [6] bias with given
  gradients, learning rates and weight decay 0.1 (see adamw_reference).
* seq2seq_pt.safetensors -- another config (post-norm, GELU, 2+1 layers, vocabularies 17/23):
  a PyTorch-initialised model whose 1-D parameters (biases, layer-norm weights) are then
  perturbed by N(0, 0.1^2) so that every entry of the layout matters, a batch (batch.src,
  batch.tgt) and PyTorch's logits on it (expected.logits): the PyTorch -> attn direction.

and checks the attn -> PyTorch direction: DIR/seq2seq_attn.safetensors is written BY attn
(`test_training --write-attn-checkpoint PATH`: attn_module_init, a few AdamW steps in attn,
attn_module_save, attn's logits on a batch).  This script loads it into Seq2Seq with
load_state_dict(strict=True) (after leaving out batch.* and expected.*) and asserts that
PyTorch's logits equal attn's within 1e-4 * max(1, max|ref|).  With --attn-test BIN the
script first runs BIN to (re)write that file; without it the committed file is checked.

Everything is float32 on the CPU with one thread, fixed seeds and
torch.use_deterministic_algorithms(True).  The optimiser is torch.optim.AdamW(foreach=False)
(the single-tensor loop, whose arithmetic attn_adamw_step follows) and clip_grad_norm_ is
called with foreach=False too.  The learning rate of step k is set through
param_group["lr"] from lr_warmup_cosine() below, which evaluates attn_lr_warmup_cosine's
float32 arithmetic exactly.  The script runs the trajectory twice and asserts bit-identical
losses and weights, and reports how far a float64 run of the same trajectory lies from the
float32 one (the size of rounding effects, for judging the tolerance).  Files are written by
a small deterministic safetensors serializer (sorted header) and read back with
safetensors.safe_open; re-running gives identical bytes.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
warnings.filterwarnings("ignore", message="enable_nested_tensor is True")

PAD, BOS, EOS = 0, 1, 2
TOL = 1e-4

# ------------------------------------------------------------------------------------------
# deterministic safetensors writer
# ------------------------------------------------------------------------------------------
_DT = {torch.float32: ("F32", 4), torch.int64: ("I64", 8)}


def st_serialize(tensors, metadata):
    items = sorted(tensors.items(), key=lambda kv: (-_DT[kv[1].dtype][1], kv[0]))
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, off = [], 0
    for name, t in items:
        a = t.detach().contiguous().numpy()
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DT[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write_st(path, tensors, meta):
    tensors = {n: t.detach().contiguous() for n, t in tensors.items()}
    meta = {k: str(v) for k, v in meta.items()}
    with open(path, "wb") as f:
        f.write(st_serialize(tensors, meta))
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == meta, path
        assert sorted(f.keys()) == sorted(tensors), path
        for n in f.keys():
            assert torch.equal(f.get_tensor(n), tensors[n]), (path, n)
    return os.path.getsize(path)


def read_st(path):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        return {n: f.get_tensor(n) for n in f.keys()}, dict(f.metadata() or {})


def max_err(got, ref):
    """(max|got-ref|, max(1, max|ref|)) as tests/testutil.c tu_max_err / tu_close."""
    got, ref = got.detach().double(), ref.detach().double()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert torch.isfinite(got).all() and torch.isfinite(ref).all()
    return (got - ref).abs().max().item(), max(1.0, ref.abs().max().item())


# ------------------------------------------------------------------------------------------
# the PyTorch module equivalent to attn_seq2seq (include/attn.h)
# ------------------------------------------------------------------------------------------
def sinusoid(n, d, base=10000.0):
    """pe[pos, 2i] = sin(pos / base^(2i/d)), pe[pos, 2i+1] = cos(...), float64 then float32."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(d)
    ang = pos / np.power(float(base), (j - j % 2).astype(np.float64) / d)[None, :]
    return torch.from_numpy(np.where(j % 2 == 0, np.sin(ang), np.cos(ang)).astype(np.float32))


class Seq2Seq(nn.Module):
    """s = dropout(src_emb(src) * sqrt(E) + pe[:S]); t = dropout(tgt_emb(tgt) * sqrt(E) + pe[:T]);
    logits = generator(transformer(s, t, tgt_mask = causal, src_key_padding_mask = src == pad,
    tgt_key_padding_mask = tgt == pad, memory_key_padding_mask = src == pad)).
    Embeddings start N(0, 1/E) as attn_module_init draws them; everything else is PyTorch's
    own initialisation (nn.Transformer's xavier_uniform_, nn.Linear's default)."""

    def __init__(self, c):
        super().__init__()
        E = c["d_model"]
        self.E, self.pad_id = E, c["pad_id"]
        self.src_emb = nn.Embedding(c["src_vocab"], E)
        self.tgt_emb = nn.Embedding(c["tgt_vocab"], E)
        self.transformer = nn.Transformer(
            d_model=E, nhead=c["nhead"], num_encoder_layers=c["num_encoder_layers"],
            num_decoder_layers=c["num_decoder_layers"], dim_feedforward=c["dim_feedforward"],
            dropout=c["dropout"], activation=c["activation"], layer_norm_eps=c["layer_norm_eps"],
            batch_first=True, norm_first=bool(c["norm_first"]))
        self.generator = nn.Linear(E, c["tgt_vocab"])
        self.dropout = nn.Dropout(c["dropout"])
        self.register_buffer("pe", sinusoid(c["max_len"], E), persistent=False)
        with torch.no_grad():
            nn.init.normal_(self.src_emb.weight, 0.0, 1.0 / math.sqrt(E))
            nn.init.normal_(self.tgt_emb.weight, 0.0, 1.0 / math.sqrt(E))

    def forward(self, src, tgt):
        S, T = src.shape[1], tgt.shape[1]
        scale = math.sqrt(self.E)
        s = self.dropout(self.src_emb(src) * scale + self.pe[:S])
        t = self.dropout(self.tgt_emb(tgt) * scale + self.pe[:T])
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = blocked
        spad, tpad = src == self.pad_id, tgt == self.pad_id
        out = self.transformer(s, t, tgt_mask=causal, src_key_padding_mask=spad,
                               tgt_key_padding_mask=tpad, memory_key_padding_mask=spad)
        return self.generator(out)


CONFIG_KEYS = ("d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
               "dropout", "activation", "layer_norm_eps", "norm_first", "src_vocab", "tgt_vocab",
               "max_len", "pad_id")


def config_from_meta(meta):
    c = {}
    for k in CONFIG_KEYS:
        v = meta[k]
        c[k] = v if k == "activation" else (float(v) if k in ("dropout", "layer_norm_eps")
                                             else int(v))
    return c


def config_meta(c):
    return {k: (repr(c[k]) if isinstance(c[k], float) else str(c[k])) for k in CONFIG_KEYS}


# ------------------------------------------------------------------------------------------
# batches, schedule, trajectory
# ------------------------------------------------------------------------------------------
def make_batch(g, B, S, T, Vs, Vt):
    """src: 1..S tokens in [3, Vs) then pad; tgt_in = [BOS, y, pad...], tgt_out = [y, EOS, pad...]
    with y of 1..T-1 tokens in [3, Vt).  No row is fully padded; row 0 has full lengths."""
    src = torch.full((B, S), PAD, dtype=torch.int64)
    tin = torch.full((B, T), PAD, dtype=torch.int64)
    tout = torch.full((B, T), PAD, dtype=torch.int64)
    for b in range(B):
        ns = S if b == 0 else int(torch.randint(1, S + 1, (1,), generator=g))
        nt = T - 1 if b == 0 else int(torch.randint(1, T, (1,), generator=g))
        src[b, :ns] = torch.randint(3, Vs, (ns,), generator=g)
        y = torch.randint(3, Vt, (nt,), generator=g)
        tin[b, 0] = BOS
        tin[b, 1:nt + 1] = y
        tout[b, :nt] = y
        tout[b, nt] = EOS
    return src, tin, tout


def lr_warmup_cosine(step, warmup, total, lr_max, lr_min):
    """attn_lr_warmup_cosine (src/train/optim.c) with its float32 arithmetic."""
    f = np.float32
    step = max(step, 0)
    if warmup > 0 and step < warmup:
        return float(f(lr_max) * f(step + 1) / f(warmup))
    if step >= total or total <= warmup:
        return float(f(lr_min))
    t = (step - warmup) / (total - warmup)
    c = f(0.5 * (1.0 + math.cos(3.141592653589793 * t)))
    return float(f(lr_min) + (f(lr_max) - f(lr_min)) * c)


# KEY_BIAS_NOTE.  The gradient of the key block of every in_proj_bias (rows E..2E-1) is zero
# mathematically (adding q.b_k to every score of a query leaves its softmax unchanged), so
# what PyTorch and attn compute there is rounding noise (~1e-9), and AdamW turns noise into
# steps of up to ~lr (m/sqrt(v) ~ +-1 while |g| >> eps).  Those rows are therefore not
# comparable at 1e-4 (float32 and float64 PyTorch already differ by ~1e-4 there); the C test
# checks them against a bound of 2 * sum(lr) and checks that attn's gradient there is noise.
TRAJ_CFG = dict(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                dim_feedforward=64, dropout=0.0, activation="relu", layer_norm_eps=1e-5,
                norm_first=1, src_vocab=20, tgt_vocab=20, max_len=16, pad_id=PAD)
OPT = dict(steps=5, batch=4, src_len=10, tgt_len=9, lr_max=1e-3, lr_min=1e-5, warmup=2,
           total=5, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, clip=1.0,
           label_smoothing=0.1, ignore_index=PAD)


def run_trajectory(init, batches, dtype=torch.float32):
    model = Seq2Seq(TRAJ_CFG).to(dtype)
    model.load_state_dict({n: t.to(dtype) for n, t in init.items()}, strict=True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=OPT["lr_max"],
                            betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"],
                            weight_decay=OPT["weight_decay"], foreach=False)
    V = TRAJ_CFG["tgt_vocab"]
    losses, norms = [], []
    for k, (src, tin, tout) in enumerate(batches):
        lr = lr_warmup_cosine(k, OPT["warmup"], OPT["total"], OPT["lr_max"], OPT["lr_min"])
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(src, tin)
        loss = F.cross_entropy(logits.reshape(-1, V), tout.reshape(-1),
                               ignore_index=OPT["ignore_index"],
                               label_smoothing=OPT["label_smoothing"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["clip"], foreach=False)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    final = {n: t.detach().clone() for n, t in model.state_dict().items()}
    return losses, norms, final


ADAMW_WD = 0.1


def adamw_reference():
    """AdamW on its own, where its arithmetic is not hidden under the trajectory's tolerance
    (weight decay 0.01 at lr 1e-3 moves a weight by ~1e-5 per step): a weight [6, 5] and a
    bias [6] with given gradients (step 1's ~1e-8, so that eps matters), learning rates
    adamw.lrs (float32 values) and weight decay 0.1."""
    g = torch.Generator().manual_seed(99)
    w0, b0 = torch.randn(6, 5, generator=g), torch.randn(6, generator=g)
    lrs = torch.tensor([0.05, 0.1, 0.02, 0.07], dtype=torch.float32)
    W, Bp = nn.Parameter(w0.clone()), nn.Parameter(b0.clone())
    opt = torch.optim.AdamW([W, Bp], lr=0.05, betas=(OPT["beta1"], OPT["beta2"]),
                            eps=OPT["eps"], weight_decay=ADAMW_WD, foreach=False)
    t = {"adamw.weight": w0, "adamw.bias": b0, "adamw.lrs": lrs}
    for k, sc in enumerate((1e-8, 1.0, 0.01, 3.0)):
        gw, gb = torch.randn(6, 5, generator=g) * sc, torch.randn(6, generator=g) * sc
        t[f"adamw.grad.{k}.weight"], t[f"adamw.grad.{k}.bias"] = gw, gb
        opt.param_groups[0]["lr"] = lrs[k].item()
        W.grad, Bp.grad = gw.clone(), gb.clone()
        opt.step()
    t["adamw.expected.weight"], t["adamw.expected.bias"] = W.detach().clone(), Bp.detach().clone()
    return t


def gen_trajectory(out):
    torch.manual_seed(1234)
    model = Seq2Seq(TRAJ_CFG)
    init = {n: t.detach().clone() for n, t in model.state_dict().items()}
    g = torch.Generator().manual_seed(4321)
    batches = [make_batch(g, OPT["batch"], OPT["src_len"], OPT["tgt_len"],
                          TRAJ_CFG["src_vocab"], TRAJ_CFG["tgt_vocab"]) for _ in range(OPT["steps"])]
    losses, norms, final = run_trajectory(init, batches)
    # determinism: a second run from the same state gives the same bits
    losses2, norms2, final2 = run_trajectory(init, batches)
    assert losses == losses2 and norms == norms2, "trajectory not deterministic"
    assert all(torch.equal(final[n], final2[n]) for n in final), "weights not deterministic"
    # rounding scale: the same trajectory in float64
    l64, n64, f64 = run_trajectory(init, batches, torch.float64)
    dl = max(abs(a - b) / abs(b) for a, b in zip(losses, l64))
    E = TRAJ_CFG["d_model"]
    dw = dk = 0.0
    for n in final:
        a, b = final[n], f64[n]
        if n.endswith("in_proj_bias"):  # the key block apart (see KEY_BIAS_NOTE)
            e, s = max_err(a[E:2 * E], b[E:2 * E])
            dk = max(dk, e)
            a, b = torch.cat([a[:E], a[2 * E:]]), torch.cat([b[:E], b[2 * E:]])
        e, s = max_err(a, b)
        dw = max(dw, e / s)
    print(f"trajectory: losses {['%.6f' % x for x in losses]}")
    print(f"            grad norms {['%.4f' % x for x in norms]} (clip {OPT['clip']})")
    print(f"            float32 vs float64: losses rel {dl:.2e}, weights (scaled) {dw:.2e}, "
          f"key biases (abs) {dk:.2e}")
    assert dl < 1e-5 and dw < 1e-5, "the trajectory is badly conditioned"
    assert all(x > OPT["clip"] for x in norms[:2]), "clipping is not exercised"
    moved = max(max_err(final[n], init[n])[0] for n in final)
    assert moved > 1e-3, "the weights hardly moved"

    tensors = dict(init)
    for k, (src, tin, tout) in enumerate(batches):
        tensors[f"batch.{k}.src"], tensors[f"batch.{k}.tgt_in"] = src, tin
        tensors[f"batch.{k}.tgt_out"] = tout
    tensors["expected.losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors["expected.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, t in final.items():
        tensors["expected." + n] = t
    tensors.update(adamw_reference())
    meta = config_meta(TRAJ_CFG)
    meta.update({k: (repr(v) if isinstance(v, float) else str(v)) for k, v in OPT.items()})
    meta["adamw_weight_decay"] = repr(ADAMW_WD)
    meta.update({"bos_id": str(BOS), "eos_id": str(EOS), "optimizer": "torch.optim.AdamW",
                 "generator": "tests/gen_training.py"})
    return write_st(os.path.join(out, "trajectory.safetensors"), tensors, meta)


PT_CFG = dict(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=1,
              dim_feedforward=64, dropout=0.0, activation="gelu", layer_norm_eps=1e-5,
              norm_first=0, src_vocab=17, tgt_vocab=23, max_len=16, pad_id=PAD)


def gen_pt_checkpoint(out):
    torch.manual_seed(777)
    model = Seq2Seq(PT_CFG)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.1)
    model.eval()
    g = torch.Generator().manual_seed(778)
    src, tin, _ = make_batch(g, 3, 12, 7, PT_CFG["src_vocab"], PT_CFG["tgt_vocab"])
    logits = model(src, tin).detach()
    assert torch.isfinite(logits).all()
    tensors = {n: t.detach().clone() for n, t in model.state_dict().items()}
    assert "pe" not in tensors
    tensors.update({"batch.src": src, "batch.tgt": tin, "expected.logits": logits})
    meta = config_meta(PT_CFG)
    meta.update({"generator": "tests/gen_training.py", "tol": repr(TOL)})
    return write_st(os.path.join(out, "seq2seq_pt.safetensors"), tensors, meta)


def check_attn_checkpoint(path):
    """attn -> PyTorch: a checkpoint written by attn loads into Seq2Seq and gives attn's logits."""
    tensors, meta = read_st(path)
    c = config_from_meta(meta)
    model = Seq2Seq(c)
    state = {n: t for n, t in tensors.items()
             if not n.startswith("batch.") and not n.startswith("expected.")}
    model.load_state_dict(state, strict=True)
    model.eval()
    logits = model(tensors["batch.src"], tensors["batch.tgt"]).detach()
    err, scale = max_err(logits, tensors["expected.logits"])
    print(f"attn -> PyTorch: {os.path.basename(path)} ({meta.get('written_by', '?')}): "
          f"{len(state)} tensors, logits {tuple(logits.shape)}, max abs err {err:.3g} "
          f"(scale {scale:.3g})")
    assert err <= TOL * scale, f"attn -> PyTorch logits differ: {err:.3g} > {TOL * scale:.3g}"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(here, "fixtures", "training"))
    ap.add_argument("--attn-test", help="test_training binary: rewrite seq2seq_attn first")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    total = gen_trajectory(args.out)
    total += gen_pt_checkpoint(args.out)
    attn_path = os.path.join(args.out, "seq2seq_attn.safetensors")
    if args.attn_test:
        subprocess.run([args.attn_test, "--write-attn-checkpoint", os.path.abspath(attn_path)],
                       check=True)
    if not os.path.exists(attn_path):
        raise SystemExit(f"{attn_path} is missing: run "
                         "`test_training --write-attn-checkpoint PATH` or pass --attn-test BIN")
    check_attn_checkpoint(attn_path)
    total += os.path.getsize(attn_path)
    print(f"{args.out}: {total} bytes, torch {torch.__version__}")
    assert total < 1_000_000, "training fixtures too large"


if __name__ == "__main__":
    main()
