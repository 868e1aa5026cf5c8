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
mha-backward, encoder-layer, encoder-layer-backward.  Needs `pip install torch`.
"""
import json
import statistics
import subprocess
import sys
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


def torch_ms(cfg, repeat):
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
                return median_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kw), repeat)
        o = F.scaled_dot_product_attention(q, k, v, **kw)
        g = torch.rand_like(o)

        def back():
            q.grad = k.grad = v.grad = None
            o.backward(g, retain_graph=True)
        return median_ms(back, repeat)
    E = H * D
    bwd = op.endswith("-backward")
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
            return m(x, src_mask=mask, is_causal=causal)
    if not bwd:
        with torch.no_grad():
            return median_ms(fwd, repeat)
    y = fwd()
    g = torch.rand_like(y)

    def back():
        x.grad = None
        m.zero_grad(set_to_none=True)
        y.backward(g, retain_graph=True)
    return median_ms(back, repeat)


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
    attn, rest = sys.argv[1], sys.argv[2:]
    threads, repeat = opt(rest, "--threads", 2), opt(rest, "--repeat", 5)
    configs = [c + ["--threads", str(threads), "--repeat", str(repeat)] for c in SUITE] \
        if "--suite" in rest else [rest]
    print(f"{'configuration':58} {'attn ms':>9} {'torch ms':>9} {'speed-up':>8}  attn figure")
    for args in configs:
        cfg = attn_run(attn, args)
        first = cfg["results"][0]
        ms = first["median_ms"]
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
