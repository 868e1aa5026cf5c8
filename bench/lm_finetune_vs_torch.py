#!/usr/bin/env python3
"""Fine-tuning speed of `attn train lm` against PyTorch + transformers, in the same run.

  lm_finetune_vs_torch.py [--attn build/attn] [--model /work/models/smollm2-hf]
                          [--text /work/ppl_corpus.txt] [--len 256] [--batch 2]
                          [--steps 10] [--skip 2] [--threads N] [--rounds 1] [--json]

Both sides fine-tune the same model (a Hugging Face llama folder: attn reads it directly,
PyTorch through transformers' LlamaForCausalLM, float32) on the same token windows with the
same settings:

* data: the text tokenized with the folder's tokenizer.json (the `tokenizers` package here,
  attn's own BPE there); the script checks that the ids are the same by hashing them as attn
  does (FNV-1a 64 of the int32 ids, which `attn train lm` stores in its checkpoint as
  train.text_ids_fnv1a64); the last --held-out fraction held out; window i of step s starts
  at splitmix64(seed ^ splitmix64(s B + i)) mod (n_train - T), as in cli/lm_cmd.c;
* loss: cross-entropy of logits row t against token t + 1;
* optimiser: AdamW (betas 0.9, 0.999, eps 1e-8, weight decay --weight-decay), the gradient
  norm clipped to --clip, learning rate warmup (--warmup steps) + cosine to lr/10, the
  schedule of attn_lr_warmup_cosine over --skip + --steps + 1 steps;
* threads: `attn train lm --threads N` and torch.set_num_threads(N).

attn runs --skip + --steps + 1 steps (the last one also evaluates and writes the checkpoint
and the model, so it is not timed); the time of steps --skip + 1 .. --skip + --steps is taken
from the arrival of its `step N loss X` lines (printed and flushed after each step).
PyTorch runs --skip + --steps steps and times the last --steps of them (forward, loss,
backward, clipping, AdamW step).  tokens/s = steps x batch x len / seconds.  With --rounds R
the two alternate R times and the medians are printed.

The losses of the first steps are printed side by side.  Both start from the same weights
on the same windows, so step 1's losses agree to float rounding (about 1e-5 relative);
later steps drift a little, as the two frameworks' float sums differ and AdamW's first
updates (about lr x sign(gradient)) magnify tiny differences in small gradients.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

MASK = (1 << 64) - 1


def mix64(z):
    """splitmix64's finaliser, as cli/lm_cmd.c's mix64."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def fnv1a_ids(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack("<%di" % len(ids), *ids):
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def lr_at(step, warmup, total, lr_max, lr_min):
    """attn_lr_warmup_cosine (src/train/optim.c)."""
    import math
    step = max(step, 0)
    if warmup > 0 and step < warmup:
        return lr_max * (step + 1) / warmup
    if step >= total or total <= warmup:
        return lr_min
    t = (step - warmup) / (total - warmup)
    return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + math.cos(math.pi * t))


def tokenize(model_dir, text):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    return tok.encode(text, add_special_tokens=True).ids


def st_metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def run_attn(a, total_steps):
    """attn train lm; returns (tokens/s, losses, stderr text, checkpoint metadata)."""
    with tempfile.TemporaryDirectory(prefix="lmft-") as out:
        cmd = [a.attn, "train", "lm", "--init", a.model, "--text", a.text, "-o", out,
               "--steps", str(total_steps), "--batch", str(a.batch), "--len", str(a.len),
               "--lr", repr(a.lr), "--warmup", str(a.warmup), "--weight-decay",
               repr(a.weight_decay), "--clip", repr(a.clip), "--held-out", repr(a.held_out),
               "--seed", str(a.seed), "--threads", str(a.threads), "--eval-every", "0",
               "--eval-windows", "1", "--save-every", "0"]
        err = open(os.path.join(out, "stderr.txt"), "w+")
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
        arrive, losses = {}, {}
        for line in p.stdout:
            t = time.perf_counter()
            w = line.split()
            if len(w) == 4 and w[0] == "step" and w[2] == "loss":
                arrive[int(w[1])] = t
                losses[int(w[1])] = float(w[3])
        rc = p.wait()
        err.seek(0)
        errtext = err.read()
        err.close()
        if rc != 0:
            sys.exit("attn train lm failed (%d): %s\n%s" % (rc, " ".join(cmd), errtext))
        meta = st_metadata(os.path.join(out, "state.safetensors"))
    s0, s1 = a.skip, a.skip + a.steps
    secs = arrive[s1] - arrive[s0]
    return a.steps * a.batch * a.len / secs, [losses[i + 1] for i in range(total_steps)], \
        errtext, meta


def run_torch(a, ids, total_steps):
    """The PyTorch twin; returns (tokens/s, losses)."""
    import torch
    import torch.nn.functional as F
    from transformers import LlamaForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay)
    n = len(ids)
    nval = int(n * a.held_out)
    ntrain = n - nval
    span = ntrain - a.len
    tok = torch.tensor(ids, dtype=torch.long)
    B, T = a.batch, a.len
    lr_min = a.lr / 10
    losses, times = [], []
    for step in range(a.skip + a.steps):
        t0 = time.perf_counter()
        starts = [mix64(a.seed ^ mix64(step * B + i)) % span for i in range(B)]
        x = torch.stack([tok[s:s + T] for s in starts])
        y = torch.stack([tok[s + 1:s + T + 1] for s in starts])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.warmup, total_steps, a.lr, lr_min)
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    secs = sum(times[a.skip:])
    del model, opt
    return a.steps * B * T / secs, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attn", default="build/attn")
    ap.add_argument("--model", default="/work/models/smollm2-hf",
                    help="a HF llama folder (config.json, model.safetensors, tokenizer.json)")
    ap.add_argument("--text", default="/work/ppl_corpus.txt")
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--skip", type=int, default=2, help="untimed warm-up steps before them")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=10, help="learning-rate warmup steps")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--held-out", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--show-losses", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    total = a.skip + a.steps + 1

    with open(a.text, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    ids = tokenize(a.model, text)

    ta, tt, la, lt, meta, errtext = [], [], None, None, None, ""
    for _ in range(a.rounds):
        r, la, errtext, meta = run_attn(a, total)
        ta.append(r)
        r, lt = run_torch(a, ids, total)
        tt.append(r)
    same_ids = meta.get("train.text_ids_fnv1a64") == "%016x" % fnv1a_ids(ids)
    k = min(a.show_losses, a.skip + a.steps)
    rel = [abs(la[i] - lt[i]) / abs(lt[i]) for i in range(k)]
    res = {
        "model": a.model, "text": a.text, "tokens": len(ids), "same_token_ids": same_ids,
        "batch": a.batch, "len": a.len, "threads": a.threads, "timed_steps": a.steps,
        "skipped_steps": a.skip, "rounds": a.rounds,
        "attn_tokens_per_s": statistics.median(ta), "torch_tokens_per_s": statistics.median(tt),
        "attn_tokens_per_s_all": ta, "torch_tokens_per_s_all": tt,
        "losses_attn": la[:k], "losses_torch": lt[:k], "loss_rel_diff": rel,
    }
    res["ratio"] = res["attn_tokens_per_s"] / res["torch_tokens_per_s"]
    res["ratio_per_round"] = [x / y for x, y in zip(ta, tt)]
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print("fine-tuning %s on %s (%d tokens), batch %d x %d tokens, %d threads, "
              "%d timed steps after %d, %d round(s)" % (a.model, a.text, len(ids), a.batch,
                                                       a.len, a.threads, a.steps, a.skip,
                                                       a.rounds))
        print("token ids: %s" % ("the same as attn's (FNV-1a of the ids)" if same_ids else
                                 "DIFFERENT from attn's: the losses are not comparable"))
        print("\n  %-8s %12s %12s %10s" % ("step", "attn loss", "torch loss", "rel diff"))
        for i in range(k):
            print("  %-8d %12.6f %12.6f %10.2e" % (i + 1, la[i], lt[i], rel[i]))
        print("\n  %-8s %12s" % ("", "tokens/s"))
        print("  %-8s %12.1f   %s" % ("attn", res["attn_tokens_per_s"],
                                      " ".join("%.1f" % x for x in ta)))
        print("  %-8s %12.1f   %s" % ("torch", res["torch_tokens_per_s"],
                                      " ".join("%.1f" % x for x in tt)))
        print("\nattn / PyTorch speed: %.2fx (medians; per round: %s)" % (
            res["ratio"], " ".join("%.2fx" % r for r in res["ratio_per_round"])))
    if not same_ids:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
