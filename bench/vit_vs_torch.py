#!/usr/bin/env python3
"""attn train vit against a PyTorch twin on Fashion-MNIST, in the same run.

  vit_vs_torch.py ATTN [--data DIR] [--limit N] [--test-limit N] [--epochs 1] [--threads 2]
                       [--dtype bf16|f32] [--torch-init] [--json]
                       [--patch 4] [--layers 4] [--dim 96] [--heads 4] [--ffn 192]
                       [--batch 128] [--lr 2e-3] [--warmup 300] [--weight-decay 0.05]
                       [--dropout 0] [--clip 1] [--label-smoothing 0] [--no-augment] [--seed 1]

The model options and their defaults are those of `attn train vit` (cli/vit_cmd.c); --epochs
defaults to 1 here (attn's default is 10), --threads to 2 (attn's: every core).

1. attn: runs `ATTN train vit` with these options, -o into a temporary folder and --json, and
   reads its summary (training images/s = images / training time of the epochs, the test
   pass's images/s, test accuracy and loss), its per-step losses (log.step_loss in
   state.safetensors) and its progress lines on stderr (the cumulative images/s printed after
   step 1 and about once a second: from them, the speed over steps 2..last).
2. torch: the same ViT -- patch embedding as a Linear on patch vectors ordered [c][dy][dx]
   (run as F.conv2d with weight embed.proj.weight.view(E, 1, p, p)), a [CLS] token, learned
   positions [1, N+1, E], dropout on the embedded tokens, nn.TransformerEncoderLayer(E, heads,
   ffn, dropout, activation="gelu", layer_norm_eps=1e-6, batch_first=True, norm_first=True)
   x layers, a final nn.LayerNorm(E, eps=1e-6), a Linear head on the [CLS] row; the parameter
   names are attn's (those of its model.safetensors), so attn's checkpoint loads with
   load_state_dict(strict=True).  Initialisation: attn's initial weights (attn train vit
   --save-init), loaded with load_state_dict, so both runs start from the same weights;
   --torch-init draws torch's own instead (the same distributions: nn.Linear's and
   nn.MultiheadAttention's defaults, N(0, 0.02) for cls_token and pos_embed).
3. torch trains it with what attn uses: torch.optim.AdamW (betas 0.9, 0.999, eps 1e-8, attn's
   weight decay on every parameter), attn_lr_warmup_cosine's schedule (linear warmup over
   --warmup steps, cosine to 0 at the last step; evaluated in float as attn does),
   clip_grad_norm_ to --clip, cross-entropy with --label-smoothing, the same batch size
   (a short last batch included), the same images (the first --limit of the training set),
   normalised as attn ((v / 255 - 0.2860) / 0.3530 in float, through the same 256-entry table).
   The data order and the augmentation are IDENTICAL to attn's: attn_images_shuffle(seed, epoch) and
   attn_images_batch's padded crop (--pad) + flip (stream = epoch) are reimplemented from src/io/images.c's
   definitions (splitmix64 as a counter-based generator), checked at start-up against the
   values in tests/test_imgdata.c.  Under --dtype bf16 the forward runs under
   torch.autocast("cpu", dtype=torch.bfloat16) (the loss in float); attn's bf16 is mixed
   precision too: bf16 operands of the linear layers' products, float sums and weights.
4. Speeds, measured the same way on both sides where attn allows it:
   - training images/s over the whole run ("run"): images / time of the step loops (attn's
     train_images_per_s; torch: the same, the step loop timed per epoch; the per-epoch
     shuffle and augmentation draws are outside it on both sides, the batch assembly inside);
   - training images/s over steps 2..last ("steps 2+", step 1 being the warm-up): attn's from
     its first and last progress lines (images / (images / cumulative images/s)); torch's from
     its per-step times;
   - torch only: the median over the steps after 3 warm-up steps of batch / step time (attn
     does not time single steps);
   - inference images/s on the test set: attn's test pass runs in batches of 256
     (--eval-batch; batch assembly, forward, loss and argmax, in its --dtype); torch does the
     same at batch 256 (compared) and at batch 500 (torch only).
   The ratio attn/torch > 1 means attn is faster.
5. The first training losses of each side (from the same initial weights: close at first,
   then drifting apart with rounding), the test accuracy of both (same init and data order:
   the issue asks for them within 0.5 points), and the parity check: attn's trained model.safetensors loaded into the torch model and evaluated on
   the same test images in attn's dtype must give attn's test accuracy to within 0.1 points
   (PASS/FAIL; exit status 1 on FAIL); also reported: the test loss of both, the accuracy in
   float, and the largest difference of the class probabilities of the first 3 test images
   between `ATTN classify --top 10 --json` (float) and torch in float.

--json prints one object instead of the table.  Needs torch and numpy.
"""
import argparse
import gzip
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

# ---- src/io/images.c's generator, in Python ---------------------------------------------------
M64 = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _sm(x):
    return _mix((x + GOLD) & M64)


def _key(seed, tag, a):
    return _sm(_sm(_sm(seed) ^ tag) ^ a)


def _draws(k, c):
    """mix(k + (c + 1) * G) for a uint64 array c (wrapping as in C)."""
    with np.errstate(over="ignore"):
        z = np.uint64(k) + (c + np.uint64(1)) * np.uint64(GOLD)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _below(r, m):
    """floor(r * m / 2^64) for uint64 arrays r and m < 2^32."""
    m = np.asarray(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        lo = ((r & np.uint64(0xFFFFFFFF)) * m) >> np.uint64(32)
        return ((r >> np.uint64(32)) * m + lo) >> np.uint64(32)


def img_shuffle(seed, epoch, n):
    k = _key(seed, 1, epoch)
    i = np.arange(n, dtype=np.uint64)
    js = _below(_draws(k, i), i + np.uint64(1)).astype(np.int64).tolist()
    p = list(range(n))
    for a in range(n - 1, 0, -1):
        b = js[a]
        p[a], p[b] = p[b], p[a]
    return np.array(p, dtype=np.int64)


def img_aug_params(seed, stream, n, pad, flip):
    """(dy, dx, flip) of images 0..n-1 in attn_images_batch's stream `stream` (pad 0: no crop)."""
    k = _key(seed, 2, stream)
    ix = np.arange(n, dtype=np.uint64) * np.uint64(3)
    dy = _below(_draws(k, ix), 2 * pad + 1).astype(np.int64)
    dx = _below(_draws(k, ix + np.uint64(1)), 2 * pad + 1).astype(np.int64)
    fl = (_draws(k, ix + np.uint64(2)) >> np.uint64(63)).astype(bool) if flip else \
        np.zeros(n, dtype=bool)
    return dy, dx, fl


def check_generator():
    """The Python values tests/test_imgdata.c checks attn against."""
    assert img_shuffle(1, 0, 10).tolist() == [0, 6, 3, 2, 7, 1, 8, 9, 5, 4]
    assert img_shuffle(1, 1, 10).tolist() == [9, 2, 5, 4, 7, 0, 6, 3, 1, 8]
    assert img_shuffle(42, 7, 12).tolist() == [2, 0, 10, 6, 3, 4, 7, 5, 9, 8, 11, 1]
    dy, dx, fl = img_aug_params(5, 3, 6, 2, True)
    got = [[int(a), int(b), int(c)] for a, b, c in zip(dy, dx, fl)]
    assert got == [[0, 1, 0], [3, 0, 1], [1, 0, 1], [1, 1, 1], [1, 2, 0], [2, 3, 1]], got


# ---- data -----------------------------------------------------------------------------------
def read_idx(path):
    for p in (path + ".gz", path):
        if os.path.exists(p):
            with open(p, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            nd = raw[3]
            dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)
    raise SystemExit(f"vit_vs_torch: {path}(.gz) not found")


def load_set(data, train, limit):
    pre = "train" if train else "t10k"
    x = read_idx(os.path.join(data, f"{pre}-images-idx3-ubyte"))
    y = read_idx(os.path.join(data, f"{pre}-labels-idx1-ubyte"))
    if limit > 0:
        x, y = x[:limit], y[:limit]
    return np.ascontiguousarray(x), y.astype(np.int64)


MEAN, STD = np.float32(0.2860), np.float32(0.3530)
LUT = (np.arange(256, dtype=np.float32) / np.float32(255.0) - MEAN) / STD  # attn_images_batch's table


# ---- attn's checkpoint ----------------------------------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attn_vs_torch import read_safetensors  # noqa: E402  (the one reader of attn's files)


# ---- the twin -------------------------------------------------------------------------------
def make_model(a, image=28, classes=10):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class ViTEmbed(nn.Module):  # attn's embed.*: cls_token, proj, pos_embed
        def __init__(self, patch_dim, E, N):
            super().__init__()
            self.cls_token = nn.Parameter(torch.zeros(1, 1, E))
            self.proj = nn.Linear(patch_dim, E)
            self.pos_embed = nn.Parameter(torch.zeros(1, N + 1, E))
            nn.init.normal_(self.cls_token, std=0.02)
            nn.init.normal_(self.pos_embed, std=0.02)

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            E, p = a.dim, a.patch
            G = image // p
            self.p = p
            self.embed = ViTEmbed(p * p, E, G * G)
            self.drop = nn.Dropout(a.dropout)  # attn: dropout on the embedded tokens
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(E, a.heads, a.ffn, dropout=a.dropout,
                                           activation="gelu", layer_norm_eps=1e-6,
                                           batch_first=True, norm_first=True)
                for _ in range(a.layers))
            self.norm = nn.LayerNorm(E, eps=1e-6)
            self.head = nn.Linear(E, classes)

        def forward(self, images):
            E = self.embed.proj.out_features
            w = self.embed.proj.weight.view(E, 1, self.p, self.p)  # [c][dy][dx]
            z = F.conv2d(images, w, self.embed.proj.bias, stride=self.p).flatten(2)
            cls = self.embed.cls_token.expand(images.shape[0], -1, -1)
            x = self.drop(torch.cat([cls, z.transpose(1, 2)], 1) + self.embed.pos_embed)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x[:, 0]))  # the norm is per row: the [CLS] row only

    return ViT()


def lr_at(step, warmup, total, lr_max):
    """attn_lr_warmup_cosine(step, warmup, total, lr_max, 0), in float as attn computes it."""
    f = np.float32
    lm = f(lr_max)
    if warmup > 0 and step < warmup:
        return float(lm * f(step + 1) / f(warmup))
    if step >= total or total <= warmup:
        return 0.0
    t = (step - warmup) / (total - warmup)
    return float(lm * f(0.5 * (1.0 + math.cos(math.pi * t))))


def evaluate(model, x_u8, y, batch, bf16, want_logits=False):
    """Mean loss, accuracy, images/s (batch assembly, forward, loss, argmax) on a set."""
    import torch
    import torch.nn.functional as F
    model.eval()
    n, R = len(x_u8), x_u8.shape[1]
    loss_sum, right, logits = 0.0, 0, []
    t0 = time.perf_counter()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for i in range(0, n, batch):
            xb = torch.from_numpy(LUT[x_u8[i:i + batch]].reshape(-1, 1, R, R))
            yb = torch.from_numpy(y[i:i + batch])
            lg = model(xb).float()
            loss_sum += F.cross_entropy(lg, yb, reduction="sum").item()
            right += (lg.argmax(1) == yb).sum().item()
            if want_logits:
                logits.append(lg)
    dt = time.perf_counter() - t0
    out = {"loss": loss_sum / n, "accuracy": right / n, "images_per_s": n / dt}
    if want_logits:
        out["logits"] = torch.cat(logits)
    return out


def torch_train(a, xtr, ytr, xte, yte, init):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    bf16 = a.dtype == "bf16"
    model = make_model(a)
    if not a.torch_init:  # attn's initial weights
        P, _ = read_safetensors(init)
        model.load_state_dict(P, strict=True)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay)
    n, R = len(xtr), xtr.shape[1]
    B = min(a.batch, n)
    spe = (n + B - 1) // B
    total = spe * a.epochs
    pad = 0 if a.no_augment else a.pad
    padded = np.pad(xtr, ((0, 0), (pad, pad), (pad, pad)))
    ar = np.arange(R)
    losses, step_s, step_n, train_time = [], [], [], 0.0
    for e in range(a.epochs):
        perm = img_shuffle(a.seed, e, n)  # outside the timed loop, as in attn
        dy, dx, fl = img_aug_params(a.seed, e, n, pad, not a.no_augment)
        model.train()
        t_ep = time.perf_counter()
        for s in range(spe):
            t0 = time.perf_counter()
            g = e * spe + s
            idx = perm[s * B:(s + 1) * B]
            rows = dy[idx][:, None] + ar[None, :]
            cols = np.where(fl[idx][:, None], R - 1 - ar[None, :], ar[None, :]) + dx[idx][:, None]
            xb = torch.from_numpy(
                LUT[padded[idx[:, None, None], rows[:, :, None], cols[:, None, :]]]
                .reshape(-1, 1, R, R))
            yb = torch.from_numpy(ytr[idx])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), yb, label_smoothing=a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(params, a.clip)
            for grp in opt.param_groups:
                grp["lr"] = lr_at(g, a.warmup, total, a.lr)
            opt.step()
            losses.append(loss.item())
            step_s.append(time.perf_counter() - t0)
            step_n.append(len(idx))
        train_time += time.perf_counter() - t_ep
    ev500 = evaluate(model, xte, yte, 500, bf16)
    ev256 = evaluate(model, xte, yte, 256, bf16)
    warm = 3 if len(step_s) > 4 else 1 if len(step_s) > 1 else 0
    return {
        "losses": losses,
        "train_images_per_s": n * a.epochs / train_time,
        "train_images_per_s_steps2": (sum(step_n[1:]) / sum(step_s[1:])
                                      if len(step_s) > 1 else None),
        "train_images_per_s_median_step": statistics.median(
            b / t for b, t in zip(step_n[warm:], step_s[warm:])),
        "eval_images_per_s": ev256["images_per_s"],
        "eval_images_per_s_b500": ev500["images_per_s"],
        "test_accuracy": ev500["accuracy"],
        "test_loss": ev500["loss"],
        "parameters": sum(p.numel() for p in params),
    }


# ---- attn -----------------------------------------------------------------------------------
MODEL_OPTS = ["patch", "layers", "dim", "heads", "ffn", "batch", "lr", "warmup",
              "weight_decay", "dropout", "clip", "label_smoothing", "seed", "pad"]
PROGRESS = re.compile(r"epoch (\d+)/\d+\s+step (\d+)/\d+\s+loss \S+\s+lr \S+\s+(\d+) img/s")


def attn_train(a, out):
    cmd = [a.attn, "train", "vit", "--data", a.data, "-o", out, "--epochs", str(a.epochs),
           "--limit", str(a.limit), "--test-limit", str(a.test_limit), "--dtype", a.dtype,
           "--eval-batch", "256", "--save-init", os.path.join(out, "init.safetensors"),
           "--threads", str(a.threads), "--json"]
    for k in MODEL_OPTS:
        cmd += ["--" + k.replace("_", "-"), repr(getattr(a, k))]
    if a.no_augment:
        cmd.append("--no-augment")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"vit_vs_torch: {' '.join(cmd)} failed ({r.returncode})")
    res = json.loads(r.stdout)
    res["command"] = cmd
    n = res["train_images"]
    B = min(a.batch, n)
    # the cumulative speed of the progress lines: training time so far = images / speed
    pts = []
    for e, s, ips in PROGRESS.findall(r.stderr):
        imgs = (int(e) - 1) * n + min(int(s) * B, n)
        pts.append((imgs, imgs / max(int(ips), 1)))
    res["train_images_per_s_steps2"] = ((pts[-1][0] - pts[0][0]) / (pts[-1][1] - pts[0][1])
                                        if len(pts) > 1 and pts[-1][1] > pts[0][1] else None)
    st, _ = read_safetensors(os.path.join(out, "state.safetensors"))
    res["losses"] = st["log.step_loss"].tolist()
    return res


def attn_classify_probs(a, out, index):
    r = subprocess.run([a.attn, "classify", "--model", out, "--data", a.data, "--index",
                        str(index), "--top", "10", "--json", "--threads", str(a.threads)],
                       capture_output=True, text=True, check=True)
    p = [0.0] * 10
    for t in json.loads(r.stdout)["top"]:
        p[t["class"]] = t["p"]
    return p


def parity(a, out, xte, yte, attn_res):
    """attn's trained weights in the torch model, on the same test images."""
    import torch
    model = make_model(a)
    P, _ = read_safetensors(os.path.join(out, "model.safetensors"))
    model.load_state_dict(P, strict=True)
    same = evaluate(model, xte, yte, 500, a.dtype == "bf16")
    f32 = evaluate(model, xte, yte, 500, False, want_logits=True)
    k = min(3, len(xte))
    pa = torch.tensor([attn_classify_probs(a, out, i) for i in range(k)])
    pt = torch.softmax(f32["logits"][:k], 1)
    acc_diff = abs(same["accuracy"] - attn_res["test_accuracy"])
    return {
        "torch_test_accuracy": same["accuracy"], "torch_test_loss": same["loss"],
        "torch_test_accuracy_f32": f32["accuracy"],
        "attn_test_accuracy": attn_res["test_accuracy"],
        "attn_test_loss": attn_res["log"][-1]["test_loss"],
        "accuracy_diff_points": 100 * acc_diff,
        "classify_images": k, "classify_max_prob_diff": float((pa - pt).abs().max()),
        "pass": bool(100 * acc_diff <= 0.1 + 1e-9),
    }


# ---- main -----------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1],
                                 description="attn train vit against a PyTorch twin")
    ap.add_argument("attn")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--torch-init", action="store_true",
                    help="torch draws its own initial weights instead of attn's")
    # attn train vit's defaults
    for k, v in [("patch", 7), ("layers", 4), ("dim", 96), ("heads", 4), ("ffn", 192),
                 ("batch", 128), ("lr", 2e-3), ("warmup", 200), ("weight-decay", 0.05),
                 ("dropout", 0.0), ("clip", 1.0), ("label-smoothing", 0.0), ("seed", 1),
                 ("pad", 1)]:
        ap.add_argument("--" + k, type=type(v), default=v)
    ap.add_argument("--no-augment", action="store_true")
    a = ap.parse_args()
    check_generator()

    xtr, ytr = load_set(a.data, True, a.limit)
    xte, yte = load_set(a.data, False, a.test_limit)
    with tempfile.TemporaryDirectory() as out:
        ar = attn_train(a, out)
        tr = torch_train(a, xtr, ytr, xte, yte, os.path.join(out, "init.safetensors"))
        pr = parity(a, out, xte, yte, ar)

    def ratio(x, y):
        return x / y if x and y else None
    rows = [  # name, attn, torch
        ("train images/s, run", ar["train_images_per_s"], tr["train_images_per_s"]),
        ("train images/s, steps 2+", ar["train_images_per_s_steps2"],
         tr["train_images_per_s_steps2"]),
        ("train images/s, median step", None, tr["train_images_per_s_median_step"]),
        ("test images/s, batch 256", ar["eval_images_per_s"], tr["eval_images_per_s"]),
        ("test images/s, batch 500", None, tr["eval_images_per_s_b500"]),
        ("test accuracy %", 100 * ar["test_accuracy"], 100 * tr["test_accuracy"]),
        ("test loss", ar["log"][-1]["test_loss"], tr["test_loss"]),
    ]
    nl = 5
    if a.json:
        print(json.dumps({
            "config": {k: v for k, v in vars(a).items()},
            "train_images": ar["train_images"], "test_images": ar["test_images"],
            "parameters": {"attn": ar["parameters"], "torch": tr["parameters"]},
            "torch_version": __import__("torch").__version__,
            "attn": {k: ar[k] for k in ("train_images_per_s", "train_images_per_s_steps2",
                                        "eval_images_per_s", "test_accuracy", "losses",
                                        "elapsed_s")},
            "torch": {k: v for k, v in tr.items() if k != "parameters"},
            "ratio_attn_over_torch": {
                "train_images_per_s": ratio(ar["train_images_per_s"], tr["train_images_per_s"]),
                "train_images_per_s_steps2": ratio(ar["train_images_per_s_steps2"],
                                                   tr["train_images_per_s_steps2"]),
                "eval_images_per_s": ratio(ar["eval_images_per_s"], tr["eval_images_per_s"])},
            "parity": pr}))
        return 0 if pr["pass"] else 1
    import torch
    print(f"ViT: patch {a.patch}, {a.layers} layers, dim {a.dim}, {a.heads} heads, ffn "
          f"{a.ffn}; {ar['parameters']} parameters (torch {tr['parameters']}); "
          f"{ar['train_images']} training images x {a.epochs} epoch(s), batch {a.batch}, "
          f"{ar['test_images']} test images; {a.dtype}, {a.threads} threads; torch "
          f"{torch.__version__}")
    print(f"{'':28} {'attn':>10} {'torch':>10} {'attn/torch':>10}")
    for name, x, y in rows:
        fx = f"{x:10.1f}" if x is not None else f"{'-':>10}"
        fy = f"{y:10.1f}" if y is not None else f"{'-':>10}"
        if name.startswith("test loss"):
            fx, fy = f"{x:10.4f}", f"{y:10.4f}"
        r = ratio(x, y) if "images/s" in name else None
        print(f"{name:28} {fx} {fy} {(f'{r:9.2f}x' if r else ''):>10}")
    print(f"first {nl} training losses: attn {', '.join(f'{v:.4f}' for v in ar['losses'][:nl])}")
    print(f"{'':29}torch {', '.join(f'{v:.4f}' for v in tr['losses'][:nl])}")
    print(f"parity: attn's trained model in torch ({a.dtype}): test accuracy "
          f"{100 * pr['torch_test_accuracy']:.2f}% (attn {100 * pr['attn_test_accuracy']:.2f}%, "
          f"difference {pr['accuracy_diff_points']:.2f} points), test loss "
          f"{pr['torch_test_loss']:.4f} (attn {pr['attn_test_loss']:.4f}); in f32 "
          f"{100 * pr['torch_test_accuracy_f32']:.2f}%; class probabilities of test images "
          f"0..{pr['classify_images'] - 1} vs attn classify: max difference "
          f"{pr['classify_max_prob_diff']:.1e}")
    print(f"parity {'PASS' if pr['pass'] else 'FAIL'} (accuracy within 0.1 points)")
    return 0 if pr["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
