#!/usr/bin/env python3
"""PyTorch's F.scaled_dot_product_attention on the CPU (fp32, 2 threads by default) on the
shapes of bench_flash (B=1, H=12, D=64, L=S in {1024, 4096}, causal and not, forward and
backward), and the ratio attn / torch (> 1: attn is faster) when C numbers are available.

  bench_torch.py [--c-bench build/bench/bench_flash] [--c-results FILE] [--threads 2]
                 [--runs 5] [--long]

--c-bench runs the C benchmark first in the same run (same threads), --c-results reads a saved
bench_flash output; the RESULT lines are matched by (direction, L, causal).  FLOPs as in
bench_flash: forward 4 B H L S D (halved when causal), backward 2.5x that.
"""
import argparse
import statistics
import subprocess
import sys
import time


def parse_c(text):
    res = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 8 and f[0] == "RESULT" and f[1] == "flash":
            res[(f[2], int(f[3]), int(f[4]))] = (float(f[6]), float(f[7]))
    return res


def torch_times(L, causal, runs, threads):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, H, D = 1, 12, 64
    q, k, v = (torch.rand(B, H, L, D) * 2 - 1 for _ in range(3))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    dout = torch.rand(B, H, L, D) * 2 - 1
    out = {}
    with torch.no_grad():
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            ts.append(time.perf_counter() - t0)
    out["fwd"] = statistics.median(ts) * 1e3
    o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    o.backward(dout, retain_graph=True)
    ts = []
    for _ in range(runs):
        q.grad = k.grad = v.grad = None
        t0 = time.perf_counter()
        o.backward(dout, retain_graph=True)
        ts.append(time.perf_counter() - t0)
    out["bwd"] = statistics.median(ts) * 1e3
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c-bench")
    ap.add_argument("--c-results")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--long", action="store_true")
    args = ap.parse_args()
    c = {}
    if args.c_bench:
        cmd = [args.c_bench, "--threads", str(args.threads), "--runs", str(args.runs)]
        if args.long:
            cmd.append("--long")
        text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        sys.stdout.write(text)
        c = parse_c(text)
    elif args.c_results:
        with open(args.c_results) as fh:
            c = parse_c(fh.read())
    lens = [1024, 4096] + ([16384] if args.long else [])
    print(f"\n{'dir':4} {'L=S':>6} {'mask':6} {'torch ms':>10} {'GFLOP/s':>8} "
          f"{'attn ms':>10} {'GFLOP/s':>8} {'attn/torch':>10}")
    for L in lens:
        for causal in (0, 1):
            t = torch_times(L, causal, args.runs if L < 16384 else min(args.runs, 3), args.threads)
            for d in ("fwd", "bwd"):
                fl = 4.0 * 12 * L * L * 64 * (0.5 if causal else 1.0) * (2.5 if d == "bwd" else 1)
                tg = fl / (t[d] * 1e-3) * 1e-9
                line = f"{d:4} {L:6d} {'causal' if causal else 'full':6} {t[d]:10.2f} {tg:8.1f}"
                cm = c.get((d, L, causal))
                if cm:
                    line += f" {cm[0]:10.2f} {cm[1]:8.1f} {t[d] / cm[0]:10.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
