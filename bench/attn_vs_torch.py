#!/usr/bin/env python3
"""attn bench against PyTorch on the same shapes, in the same run.

  attn_vs_torch.py ATTN [attn bench options ...]    one configuration
  attn_vs_torch.py ATTN --suite [--threads N] [--repeat N]
                                                    issue 4's targets (B=1, H=12, D=64,
                                                    L=S=4096; causal; backward; bf16;
                                                    decode L=1, S=32768, H=32)

For each configuration it runs `ATTN bench ... --json --no-ref`, then the same op in PyTorch
(torch.nn.functional.scaled_dot_product_attention, nn.MultiheadAttention or
nn.TransformerEncoderLayer with batch_first=True, the same threads, dtype and shapes; one
warm-up, then the median of --repeat runs) and prints both times and attn's speed-up
(torch ms / attn ms; > 1: attn is faster).  Supported ops: sdpa, sdpa-backward, decode, mha,
mha-backward, encoder-layer, encoder-layer-backward, gpt-step.  The module -backward ops are
a training step's forward and backward on both sides (parameter gradients included).

--rounds R (not gpt-step): R rounds, each running attn then PyTorch (PyTorch's model built
once); prints every round and then the medians over rounds of both times and of the ratio:
on a machine whose speed drifts, one pair of medians can land on different sides of a drift.
Each round's attn run measures the FMA peak in its own process first; the median ratio of the
rounds whose probe came within 10% of the best probe (the machine at full speed) follows,
and the median share of the peak over the rounds.

gpt-step: attn writes its initial weights and its batch (--save-init); the PyTorch twin (the
same GPT built from nn.TransformerEncoderLayer, norm_first, GELU, causal, LM head tied to the
token embedding, loaded from that file; torch.optim.AdamW with attn's settings) runs the same steps, and the script checks that
its losses over the first 3 steps match attn's to 1e-4 relative before it compares times
(median ms/step, tokens/s) and peak RSS (each framework in its own process).  With
`--dtype bf16` (attn's mixed precision: matmul operands rounded to bf16, f32 accumulation and
master weights) the twin runs twice, in float32 and under torch.autocast(bfloat16) (PyTorch's
mixed precision: oneDNN bf16 matmuls), the losses are compared to 2e-3 relative (bf16 operands
round differently), and the speed-up is given against both.  Needs `pip install torch`.
"""
import contextlib
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def opt(args, name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


def attn_run(attn, args):
    r = subprocess.run([attn, "bench"] + args + ["--json", "--no-ref"], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def timed(fn, repeat, rounds):
    if rounds is None:
        return median_ms(fn, repeat)
    out = []
    for turn in rounds:
        turn()
        out.append(median_ms(fn, repeat))
    return out


def torch_ms(cfg, repeat, rounds=None):
    """The median ms of cfg's op in PyTorch; with rounds (a list of callables), the op is built
    once and timed after each callable runs (attn's turn): a list of medians."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(0)
    op, B, H, Hkv = cfg["op"], cfg["batch"], cfg["heads"], cfg["kv_heads"]
    L, S, D = cfg["len"], cfg["kv_len"], cfg["dim"]
    dt = torch.bfloat16 if cfg.get("dtype") == "bf16" else torch.float32
    causal = cfg["causal"] is True  # attn bench's --causal is top-left, like is_causal
    if op in ("sdpa", "sdpa-backward", "decode"):
        bwd = op == "sdpa-backward"
        q = (torch.rand(B, H, L, D) * 2 - 1).to(dt).requires_grad_(bwd)
        k = (torch.rand(B, Hkv, S, D) * 2 - 1).to(dt).requires_grad_(bwd)
        v = (torch.rand(B, Hkv, S, D) * 2 - 1).to(dt).requires_grad_(bwd)
        # decode: one query against the cache sees every key (bottom-right causal, L = 1)
        kw = {"is_causal": causal and op != "decode"}
        if Hkv != H:
            kw["enable_gqa"] = True
        if not bwd:
            with torch.no_grad():
                return timed(lambda: F.scaled_dot_product_attention(q, k, v, **kw), repeat,
                             rounds)
        o = F.scaled_dot_product_attention(q, k, v, **kw)
        g = torch.rand_like(o)

        def back():
            q.grad = k.grad = v.grad = None
            o.backward(g, retain_graph=True)
        return timed(back, repeat, rounds)
    E = H * D
    bwd = op.endswith("-backward")
    # attn's --dtype bf16 on the encoder layer is mixed precision: the twin under autocast
    ac = (torch.autocast("cpu", dtype=torch.bfloat16) if cfg.get("dtype") == "bf16"
          else contextlib.nullcontext())
    x = (torch.rand(B, L, E) * 2 - 1).requires_grad_(bwd)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(L) if causal else None
    if op.startswith("mha"):
        m = torch.nn.MultiheadAttention(E, H, batch_first=True)
        mem = torch.rand(B, S, E) * 2 - 1

        def fwd():
            return m(x, mem, mem, attn_mask=mask, need_weights=False)[0]
    else:
        m = torch.nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, batch_first=True)
        m.eval() if not bwd else m.train()

        def fwd():
            with ac:
                return m(x, src_mask=mask, is_causal=causal)
    if not bwd:
        with torch.no_grad():
            return timed(fwd, repeat, rounds)
    y = fwd()
    g = torch.rand_like(y)

    def step():  # a training step: forward and backward, parameter gradients too
        x.grad = None
        m.zero_grad(set_to_none=True)
        fwd().backward(g)
    return timed(step, repeat, rounds)


def read_safetensors(path):
    """name -> torch tensor, and the metadata (F32 and I64: what attn writes: bench
    --save-init, checkpoints; bench/vit_vs_torch.py reads with it too)."""
    import torch
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    body = raw[8 + n:]
    dt = {"F32": torch.float32, "I64": torch.int64, "I32": torch.int32}
    out = {}
    for name, t in head.items():
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=dt[t["dtype"]]).reshape(
            t["shape"])
    return out, meta


def torch_gpt_step(path, threads, repeat, autocast=False):
    """The PyTorch twin of attn bench --op gpt-step, from attn's initial weights and batch:
    the losses of the warm-up and timed steps, the median ms/step, the peak RSS.  autocast:
    forward and loss under torch.autocast("cpu", torch.bfloat16)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    P, meta = read_safetensors(path)
    ids, tgt = P.pop("data.ids"), P.pop("data.targets")
    V, E = P["tok_emb.weight"].shape
    nl = 1 + max(int(k.split(".")[1]) for k in P if k.startswith("layers."))
    H = int(meta["heads"])

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(V, E)
            self.pos_emb = nn.Embedding(P["pos_emb.weight"].shape[0], E)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
                for _ in range(nl))
            self.norm = nn.LayerNorm(E)
            self.lm_head = nn.Linear(E, V, bias=False)
            self.lm_head.weight = self.tok_emb.weight  # tied, as attn's (and GPT-2's)

        def forward(self, idx):
            x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
            mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
            for layer in self.layers:
                x = layer(x, src_mask=mask, is_causal=True)
            return self.lm_head(self.norm(x))

    model = GPT()
    P["lm_head.weight"] = P["tok_emb.weight"]  # the tied head: one tensor under both names
    model.load_state_dict(P, strict=True)
    opt = torch.optim.AdamW(model.parameters(), lr=float(meta["adamw.lr"]),
                            weight_decay=float(meta["adamw.weight_decay"]))
    losses, times = [], []
    for i in range(repeat + 1):  # step 0 is the warm-up, as in attn bench
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with (torch.autocast("cpu", dtype=torch.bfloat16) if autocast
              else contextlib.nullcontext()):
            loss = F.cross_entropy(model(ids).reshape(-1, V).float(), tgt.reshape(-1))
        loss.backward()
        opt.step()
        if i > 0:
            times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    return {"losses": losses, "median_ms": statistics.median(times),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def gpt_step(attn, args):
    """attn bench --op gpt-step and its PyTorch twin; returns the exit status."""
    threads, repeat = opt(args, "--threads", 2), opt(args, "--repeat", 5)
    if repeat < 2:
        print("gpt-step: --repeat must be at least 2 (3 losses are compared)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "init.safetensors")
        cfg = attn_run(attn, args + ["--save-init", path])
        mixed = cfg.get("matmul", "f32") == "bf16"
        twins = []
        for mode in (["f32", "bf16"] if mixed else ["f32"]):
            r = subprocess.run([sys.executable, __file__, "--torch-gpt-step", path, str(threads),
                                str(repeat), mode], capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                return 1
            twins.append((mode, json.loads(r.stdout)))
    tw = twins[-1][1]  # the like-for-like twin: autocast bf16 when attn runs mixed precision
    tol = 2e-3 if mixed else 1e-4
    a, t = cfg["losses"][:3], tw["losses"][:3]
    rel = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, t))
    print(f"gpt-step: {cfg['layers']} layers, E={cfg['d_model']} (H={cfg['heads']}), "
          f"T={cfg['len']}, B={cfg['batch']}, vocab {cfg['vocab']}, {cfg['params']} "
          f"parameters, {threads} threads, matmuls {'bf16 (mixed precision)' if mixed else 'f32'}")
    print(f"losses of the first 3 steps: attn {', '.join(f'{x:.6f}' for x in a)}; "
          f"torch {', '.join(f'{x:.6f}' for x in t)}; max relative difference {rel:.2e}")
    if not rel <= tol:
        print(f"gpt-step: the twin does not compute the same steps (losses differ by more than "
              f"{tol:g} relative); not timed", file=sys.stderr)
        return 1
    N = cfg["batch"] * cfg["len"]
    am = cfg["median_ms"]
    print(f"{'':12} {'ms/step':>10} {'tokens/s':>10} {'GFLOP/s':>9} {'peak RSS MiB':>13}")
    print(f"{'attn':12} {am:10.1f} {N / am * 1e3:10.0f} {cfg['gflops']:9.1f} "
          f"{cfg['peak_rss_mib']:13.0f}")
    for mode, w in twins:
        tm = w["median_ms"]
        name = "torch" if mode == "f32" else "torch bf16"
        print(f"{name:12} {tm:10.1f} {N / tm * 1e3:10.0f} "
              f"{cfg['gflop_per_step'] / tm * 1e3:9.1f} {w['peak_rss_mib']:13.0f}")
    for mode, w in twins:
        tm = w["median_ms"]
        name = "torch" if mode == "f32" else "torch autocast bf16"
        print(f"speed-up vs {name} (torch ms / attn ms): {tm / am:.2f}x; peak RSS attn / "
              f"torch: {cfg['peak_rss_mib'] / w['peak_rss_mib']:.2f}")
    print(f"FMA peak {cfg['fma_peak_gflops']:.0f} GFLOP/s ({cfg['fma_isa']})", flush=True)
    return 0


SUITE = [
    ["--op", "sdpa", "--len", "4096"],
    ["--op", "sdpa", "--len", "4096", "--causal"],
    ["--op", "sdpa-backward", "--len", "4096"],
    ["--op", "sdpa", "--len", "4096", "--dtype", "bf16"],
    ["--op", "decode"],
    ["--op", "decode", "--kv-heads", "8"],
]


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    if sys.argv[1] == "--torch-gpt-step":  # the twin, in its own process (its own peak RSS)
        print(json.dumps(torch_gpt_step(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                        len(sys.argv) > 5 and sys.argv[5] == "bf16")))
        return 0
    attn, rest = sys.argv[1], sys.argv[2:]
    if opt(rest, "--op", "") == "gpt-step":
        return gpt_step(attn, rest)
    threads, repeat = opt(rest, "--threads", 2), opt(rest, "--repeat", 5)
    configs = [c + ["--threads", str(threads), "--repeat", str(repeat)] for c in SUITE] \
        if "--suite" in rest else [rest]
    print(f"{'configuration':58} {'attn ms':>9} {'torch ms':>9} {'speed-up':>8}  attn figure")
    nrounds = opt(rest, "--rounds", 0)
    for args in configs:
        if "--rounds" in args:
            i = args.index("--rounds")
            args = args[:i] + args[i + 2:]
        cfg = attn_run(attn, args)
        first = cfg["results"][0]
        ms = first["median_ms"]
        if nrounds > 0:
            runs = []  # each round's attn bench record (its time, and its own FMA probe)
            turns = [lambda: runs.append(attn_run(attn, args)) for _ in range(nrounds)]
            torch_list = torch_ms(cfg, opt(args, "--repeat", 5), turns)
            attn_ms = [r["results"][0]["median_ms"] for r in runs]
            probes = [r["fma_peak_gflops"] for r in runs]
            for r, (a, t) in enumerate(zip(attn_ms, torch_list)):
                print(f"  round {r + 1}: attn {a:.2f} ms, torch {t:.2f} ms, {t / a:.2f}x "
                      f"(FMA probe {probes[r]:.0f} GFLOP/s)", flush=True)
            ms, tm = statistics.median(attn_ms), statistics.median(torch_list)
            ratios = [t / a for a, t in zip(attn_ms, torch_list)]
            ratio = statistics.median(ratios)
            print(f"  medians over {nrounds} rounds: attn {ms:.2f} ms, torch {tm:.2f} ms; "
                  f"median ratio {ratio:.2f}x", flush=True)
            if cfg["op"] != "decode":
                print("  median share of the FMA peak over rounds: "
                      f"{statistics.median(r['results'][0]['pct_peak'] for r in runs):.0f}% "
                      "(each run against the probe of its own process)", flush=True)
            # A shared machine's speed drifts for minutes at a time (other guests on the same
            # cores): the rounds whose FMA probe came within 10% of the best one ran on a
            # machine at full speed
            quiet = [q for q, p in zip(ratios, probes) if p >= 0.9 * max(probes)]
            print(f"  rounds at full speed (FMA probe within 10% of its best): {len(quiet)} of "
                  f"{nrounds}, median ratio {statistics.median(quiet):.2f}x", flush=True)
        else:
            tm = torch_ms(cfg, opt(args, "--repeat", 5))
        if cfg["op"] == "decode":
            fig = f"{first['kv_gbs']:.1f} GB/s, {first['pct_bandwidth']:.0f}% of bandwidth"
        else:
            fig = f"{first['gflops']:.0f} GFLOP/s, {first['pct_peak']:.0f}% of FMA peak"
        name = (f"{cfg['op']} {cfg.get('dtype', 'f32')} B={cfg['batch']} H={cfg['heads']} "
                f"Hkv={cfg['kv_heads']} L={cfg['len']} S={cfg['kv_len']} D={cfg['dim']}"
                + (" causal" if cfg["causal"] is True else ""))
        print(f"{name:58} {ms:9.2f} {tm:9.2f} {tm / ms:7.2f}x  {fig}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
