#!/usr/bin/env python3
"""The scaling model of docs/scaling.md: its tables, from measured inputs.

  scaling_model.py [--link NAME=mpi-link.json ...] [--gamma-link NAME]
                   [--step gpt-step.json | --gflops R] [--attn-gflops FWD,BWD]
                   [--dp-link mpi-link.json]
  scaling_model.py --only-check --check NP=ring.json ... --check-single FWD.json,BWD.json
                   --check-control NP=FWD.json,BWD.json ... --check-link mpi-link.json

bench/scaling_measure.sh runs the measurements and calls this script as docs/scaling.md needs.

Prints Markdown: the measured links (alpha-beta fits of `attn bench --op mpi-link --json`),
the compute/communication ratios of data-parallel training (GPT-2 small at T = 1024,
SmolLM2-135M) and of ring attention (per block, forward and backward, at the two models'
head shapes), the projected efficiency at 2 .. 64 nodes on 10/25/100 Gb/s Ethernet and
InfiniBand HDR, and, with --check, ring attention's measured efficiency at 2 and 4 ranks
on this machine against the model's prediction for the loopback link.  Every number in the
tables of docs/scaling.md comes from this script and the JSON files named in its commands,
so re-running those commands refreshes the document.

The model (docs/scaling.md states it in full): a message of n bytes over a link costs
alpha + n / bw; a ring all-reduce of S bytes over N nodes in k buckets costs
k 2(N-1) alpha + 2(N-1)/N S / bw; a data-parallel step computes F / R (R the node's
measured GFLOP/s) and all-reduces every gradient; ring attention's step computes one block
while the next key/value block travels.
"""
import argparse
import json
import math

# ---- the models ------------------------------------------------------------------------

GPT2 = dict(name="GPT-2 small", layers=12, E=768, H=12, Hkv=12, D=64, F=3072, V=50257,
            mlp_mats=2, T=1024, pos=1024, tied=True, qkv_bias=True)
SMOL = dict(name="SmolLM2-135M", layers=30, E=576, H=9, Hkv=3, D=64, F=1536, V=49152,
            mlp_mats=3, T=2048, pos=0, tied=True, qkv_bias=False)


def params(m):
    """Parameter count (weights and biases; embeddings; the tied head counted once)."""
    E, D, H, Hkv, F = m["E"], m["D"], m["H"], m["Hkv"], m["F"]
    attn = E * H * D + 2 * E * Hkv * D + H * D * E
    mlp = m["mlp_mats"] * E * F
    if m["name"].startswith("GPT"):  # biases and two layer norms per layer
        attn += 3 * H * D + E
        mlp += F + E
        norms = 4 * E
    else:  # two RMSNorm weights per layer
        norms = 2 * E
    per_layer = attn + mlp + norms
    emb = m["V"] * E + m["pos"] * E
    final = 2 * E if m["name"].startswith("GPT") else E
    return m["layers"] * per_layer + emb + final


def matmul_params(m):
    """The parameters that take part in a product per token (the head included)."""
    E, D, H, Hkv, F = m["E"], m["D"], m["H"], m["Hkv"], m["F"]
    return m["layers"] * (E * H * D + 2 * E * Hkv * D + H * D * E + m["mlp_mats"] * E * F) + \
        m["V"] * E


def step_flops(m, tokens, T):
    """A training step over `tokens` tokens in sequences of T: 3 x the forward (the
    backward is twice the forward), causal attention counted for the half it computes, as
    attn bench --op gpt-step counts."""
    fwd_per_token = 2 * matmul_params(m) + m["layers"] * 2 * T * m["H"] * m["D"]
    return 3.0 * fwd_per_token * tokens


# ---- links -------------------------------------------------------------------------------

# name, line rate Gb/s, alpha (s): MPI-level small-message latency assumed for each
LINKS = [("10 GbE", 10, 30e-6), ("25 GbE", 25, 20e-6), ("100 GbE", 100, 10e-6),
         ("IB HDR", 200, 2e-6)]
BW_EFF = 0.9  # bandwidth reached: 90% of the line rate
BUCKET = 25 * 2 ** 20  # all-reduce buckets of 25 MiB (PyTorch DDP's default)


def link_bw(gbit):
    return BW_EFF * gbit * 1e9 / 8


GAMMA = [0.0]  # seconds per byte of the reduction's sums (set from a measured all-reduce)


def allreduce_s(S, N, alpha, bw, bucket=BUCKET, gamma=None):
    """Ring all-reduce: 2(N-1) steps of S/N bytes (reduce-scatter, all-gather) per bucket,
    and (N-1)/N S bytes summed on every node."""
    if N < 2:
        return 0.0
    g = GAMMA[0] if gamma is None else gamma
    k = max(1, math.ceil(S / bucket))
    return k * 2 * (N - 1) * alpha + 2.0 * (N - 1) / N * S / bw + (N - 1) / N * S * g


def dp_eff(t_comp, S, N, alpha, bw, overlap, gamma=None):
    """Data-parallel efficiency at N nodes: t_comp / step time.  overlap=False: the
    all-reduce after the backward; True: buckets all-reduced while the backward (2/3 of
    the compute) runs, only the last bucket's all-reduce after it."""
    t_ar = allreduce_s(S, N, alpha, bw, gamma=gamma)
    if not overlap:
        return t_comp / (t_comp + t_ar)
    t_fwd, t_bwd = t_comp / 3, 2 * t_comp / 3
    last = allreduce_s(min(S, BUCKET), N, alpha, bw, gamma=gamma)
    return t_comp / (t_fwd + max(t_bwd, t_ar - last) + last)


def ring_block(m, Lr, causal=True, B=1):
    """Per ring step and rank: (forward FLOPs, forward bytes, backward FLOPs, backward bytes).
    Causal zigzag: every step is a 2c x c block (Lr = 2c), half of Lr x Lr."""
    H, Hkv, D = m["H"], m["Hkv"], m["D"]
    f = 4.0 * B * H * Lr * Lr * D * (0.5 if causal else 1.0)
    kv = 2.0 * B * Hkv * Lr * D * 4  # K and V in float
    return f, kv, 2.5 * f, 2 * kv  # backward: dK/dV accumulators travel too


def ring_time(N, t_c, t_x, overlap):
    """N steps of compute t_c and N-1 transfers of t_x (forward), overlapped or not."""
    if N < 2:
        return t_c
    if overlap:
        return N * t_c + (N - 1) * max(0.0, t_x - t_c)
    return N * t_c + (N - 1) * t_x


def ring_eff(m, L, N, alpha, bw, R_f, R_b, overlap):
    Lr = L / N
    f, kv, fb, kvb = ring_block(m, Lr)
    tf = ring_time(N, f / R_f, alpha + kv / bw, overlap)
    tb = ring_time(N, fb / R_b, alpha + kvb / bw, overlap)
    ideal = N * (f / R_f + fb / R_b)
    return ideal / (tf + tb)


# ---- measured inputs ---------------------------------------------------------------------

def load(path):
    with open(path) as f:
        return json.load(f)


def load_lines(path):
    """Every JSON object of a file with one per line (N processes' outputs)."""
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def fit(link, test):
    f = link["fit"][test]
    return f["alpha_us"] * 1e-6, f["gbps"] * 1e9


def measured_time(link, test, n):
    """Piecewise-linear interpolation of the median time of `test` at n bytes."""
    pts = sorted((r["bytes"], r["median_us"] * 1e-6) for r in link["results"]
                 if r["test"] == test)
    if n <= pts[0][0]:
        return pts[0][1]
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if n <= b1:
            return t0 + (t1 - t0) * (n - b0) / (b1 - b0)
    a, bw = fit(link, test)
    return a + n / bw


def fmt_bytes(n):
    for u, s in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if n >= u:
            return "%.3g %s" % (n / u, s)
    return "%d B" % n


def pct(x):
    return "%.0f%%" % (100 * x) if x < 0.995 else ">99%"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--link", action="append", default=[], help="NAME=mpi-link.json")
    ap.add_argument("--step", help="attn bench --op gpt-step --json output")
    ap.add_argument("--gflops", type=float, default=228.0,
                    help="a node's training GFLOP/s (README: GPT-2 small step, f32, 2 threads)")
    ap.add_argument("--attn-gflops", default="223,256",
                    help="a node's attention forward,backward GFLOP/s (README, 2 threads)")
    ap.add_argument("--check", action="append", default=[], help="NP=ring-sdpa.json")
    ap.add_argument("--check-single", help="sdpa.json,sdpa-backward.json (1 thread)")
    ap.add_argument("--check-link", help="mpi-link.json for the check's transfers")
    ap.add_argument("--check-control", action="append", default=[],
                    help="NP=fwd.json,bwd.json: the single-process op run by NP processes at "
                         "once (mpirun -np NP attn bench --op sdpa ...), one JSON line each")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--only-check", action="store_true", help="print the check's table only")
    ap.add_argument("--dp-link", help="mpi-link.json (2 ranks) for the data-parallel prediction")
    ap.add_argument("--dp-link-name", default="shared memory")
    ap.add_argument("--gamma-link", default="",
                    help="the --link NAME whose largest all-reduce gives the reduction cost")
    a = ap.parse_args()
    R = a.gflops * 1e9
    if a.step:
        s = load(a.step)
        R = s["gflops"] * 1e9
    R_f, R_b = (float(x) * 1e9 for x in a.attn_gflops.split(","))
    out = []
    p = out.append

    # measured links
    if a.link and not a.only_check:
        p("### Measured links (medians; alpha-beta fit from the smallest and largest message)\n")
        p("| link | ranks | test | alpha (us) | bandwidth (GB/s) | 4 B | 64 KiB | 1 MiB | 16 MiB | 256 MiB |")
        p("|---|---|---|---|---|---|---|---|---|---|")
        for spec in a.link:
            name, path = spec.split("=", 1)
            L = load(path)
            for test in ("pingpong", "exchange", "allreduce"):
                if test not in L["fit"]:
                    continue
                al, bw = fit(L, test)
                cells = []
                for n in (4, 65536, 2 ** 20, 2 ** 24, 2 ** 28):
                    r = [x for x in L["results"] if x["test"] == test and x["bytes"] == n]
                    if not r:
                        cells.append("")
                        continue
                    r = r[0]
                    cells.append("%.1f us" % r["median_us"] if n < 2 ** 20 else
                                 "%.2f GB/s" % r["gbps"])
                p("| %s | %d | %s | %.2f | %.2f | %s |" % (name, L["ranks"], test, al * 1e6,
                                                          bw * 1e-9, " | ".join(cells)))
        p("")
        # the all-reduce model against the measured all-reduce (loopback)
        p("All-reduce measured against the ring model `2(N-1) alpha + 2(N-1)/N S / bw` with "
          "the exchange test's alpha and bandwidth as the link:\n")
        p("| link | ranks | bytes | measured | model | measured / model |")
        p("|---|---|---|---|---|---|")
        for spec in a.link:
            name, path = spec.split("=", 1)
            L = load(path)
            if "exchange" not in L["fit"] or "allreduce" not in L["fit"]:
                continue
            al, bw = fit(L, "exchange")
            N = L["ranks"]
            for n in (4, 2 ** 16, 2 ** 20, 2 ** 24, 2 ** 28):
                r = [x for x in L["results"] if x["test"] == "allreduce" and x["bytes"] == n]
                if not r:
                    continue
                t = r[0]["median_us"] * 1e-6
                mdl = allreduce_s(n, N, al, bw, bucket=2 ** 62, gamma=0.0)
                p("| %s | %d | %s | %.1f us | %.1f us | %.2f |" % (name, N, fmt_bytes(n), t * 1e6,
                                                                  mdl * 1e6, t / mdl))
        p("")
        # gamma: what the largest all-reduce took beyond the model's transfers, per summed byte
        for spec in a.link:
            name, path = spec.split("=", 1)
            L = load(path)
            if name != a.gamma_link or "allreduce" not in L["fit"] or GAMMA[0] > 0:
                continue  # the first link of that name
            al, bw = fit(L, "exchange")
            N = L["ranks"]
            big = max(x["bytes"] for x in L["results"] if x["test"] == "allreduce")
            t = measured_time(L, "allreduce", big)
            extra = t - allreduce_s(big, N, al, bw, bucket=2 ** 62, gamma=0.0)
            GAMMA[0] = max(0.0, extra / ((N - 1) / N * big))
            p("The sums are the rest: at %s (%s, %d ranks) the all-reduce took %.1f ms beyond "
              "the transfers, gamma = %.3f ns per summed byte (%.2f GB/s of reduction); the "
              "projections below add `(N-1)/N S gamma` with this gamma.\n" % (
                  fmt_bytes(big), name, N, extra * 1e3, GAMMA[0] * 1e9,
                  1e-9 / GAMMA[0] if GAMMA[0] > 0 else float("inf")))

    if a.only_check:
        a.link = []
    # data parallel
    if a.only_check:
        pass
    else:
        model_tables(a, R, R_f, R_b, p)
    # the data-parallel check to come: the prediction for 2 ranks on this machine
    if a.dp_link and not a.only_check:
        dp_check(a, R, p)
    check(a, p)
    print("\n".join(out))


def model_tables(a, R, R_f, R_b, p):
    p("### Data-parallel training: compute against the gradient all-reduce\n")
    p("A node computes at R = %.0f GFLOP/s (%s). Gradients all-reduced in float32, in "
      "buckets of 25 MiB.\n" % (R * 1e-9, "measured: attn bench --op gpt-step" if a.step else
                                "README's GPT-2-small step, float32, 2 threads"))
    p("| model | parameters | gradient bytes S | tokens per node per step | step FLOPs | "
      "compute (s) | FLOP per gradient byte | all-reduce at 64 nodes, 10 GbE (s) |")
    p("|---|---|---|---|---|---|---|---|")
    cases = [(GPT2, 1, 1024), (GPT2, 8, 1024), (SMOL, 1, 2048), (SMOL, 4, 256)]
    for m, b, T in cases:
        P = params(m)
        S = 4 * P
        F = step_flops(m, b * T, T)
        ar = allreduce_s(S, 64, LINKS[0][2], link_bw(LINKS[0][1]))
        p("| %s | %.1fM | %.0f MB | %d x %d | %.2f TFLOP | %.2f | %.0f | %.2f |" % (
            m["name"], P / 1e6, S / 1e6, b, T, F / 1e12, F / R, F / S, ar))
    p("")
    for overlap in (False, True):
        for m, b, T in ((GPT2, 1, 1024), (SMOL, 4, 256)):
            P = params(m)
            S = 4 * P
            F = step_flops(m, b * T, T)
            p("Projected data-parallel efficiency, %s, %d x %d tokens per node per step, %s "
              "(in brackets: without the sums' cost, gamma = 0):\n"
              % (m["name"], b, T, "all-reduce overlapped with the backward" if overlap else
                 "no overlap (all-reduce after the backward)"))
            p("| nodes | " + " | ".join(n for n, _, _ in LINKS) + " |")
            p("|---|" + "---|" * len(LINKS))
            for N in (2, 4, 8, 16, 32, 64):
                p("| %d | " % N + " | ".join(
                    "%s (%s)" % (pct(dp_eff(F / R, S, N, al, link_bw(g), overlap)),
                                 pct(dp_eff(F / R, S, N, al, link_bw(g), overlap, gamma=0.0)))
                    for _, g, al in LINKS) + " |")
            p("")

    # ring attention
    p("### Ring attention: one block's compute against its transfer\n")
    p("Per rank and ring step, causal zigzag (every step a 2c x c block, Lr = 2c rows per "
      "rank), B = 1, one layer, float32 K/V; attention at %.0f (forward) and %.0f (backward) "
      "GFLOP/s per node.\n" % (R_f * 1e-9, R_b * 1e-9))
    p("| model (H / Hkv x D) | Lr | forward FLOPs | K+V bytes | FLOP/byte | backward FLOPs | "
      "K+V+dK+dV bytes | FLOP/byte |")
    p("|---|---|---|---|---|---|---|---|")
    for m in (GPT2, SMOL):
        for Lr in (512, 2048, 8192):
            f, kv, fb, kvb = ring_block(m, Lr)
            p("| %s (%d/%d x %d) | %d | %.3g G | %s | %.0f | %.3g G | %s | %.0f |" % (
                m["name"], m["H"], m["Hkv"], m["D"], Lr, f * 1e-9, fmt_bytes(kv), f / kv,
                fb * 1e-9, fmt_bytes(kvb), fb / kvb))
    p("")
    p("The smallest Lr (rows per rank) at which a block's compute hides its transfer "
      "(forward; the backward needs 0.8x of it):\n")
    p("| model | " + " | ".join(n for n, _, _ in LINKS) + " |")
    p("|---|" + "---|" * len(LINKS))
    for m in (GPT2, SMOL):
        cells = []
        for _, g, al in LINKS:
            bw = link_bw(g)
            Lr = 16
            while True:
                f, kv, _, _ = ring_block(m, Lr)
                if f / R_f >= al + kv / bw:
                    break
                Lr += 16
            cells.append("%d" % Lr)
        p("| %s | " % m["name"] + " | ".join(cells) + " |")
    p("")
    for m in (GPT2, SMOL):
        for L in (8192, 131072):
            p("Projected ring-attention efficiency (forward + backward), %s heads, L = %d, "
              "transfers overlapped with compute (no overlap in brackets):\n" % (m["name"], L))
            p("| nodes | Lr | " + " | ".join(n for n, _, _ in LINKS) + " |")
            p("|---|---|" + "---|" * len(LINKS))
            for N in (2, 4, 8, 16, 32, 64):
                cells = []
                for _, g, al in LINKS:
                    e1 = ring_eff(m, L, N, al, link_bw(g), R_f, R_b, True)
                    e0 = ring_eff(m, L, N, al, link_bw(g), R_f, R_b, False)
                    cells.append("%s (%s)" % (pct(e1), pct(e0)))
                p("| %d | %d | " % (N, L // N) + " | ".join(cells) + " |")
            p("")



def dp_check(a, R, p):
    if True:
        L = load(a.dp_link)
        al, algbw = fit(L, "allreduce")
        p("### Data-parallel on this machine: the prediction a measured step will be checked "
          "against\n")
        p("2 ranks x 1 thread over %s (the measured all-reduce, extrapolated linearly past its "
          "largest message: alpha %.1f us, %.2f GB/s algorithm bandwidth); each rank computes at "
          "R/2 = %.0f GFLOP/s.\n" % (a.dp_link_name, al * 1e6, algbw * 1e-9, R * 0.5e-9))
        p("| model | tokens per rank per step | compute per rank (s) | all-reduce of S (s) | "
          "predicted efficiency, no overlap | with overlap |")
        p("|---|---|---|---|---|---|")
        for m, b, T in ((GPT2, 1, 1024), (SMOL, 4, 256)):
            S = 4 * params(m)
            F = step_flops(m, b * T, T)
            tc = F / (R / 2)
            tar = measured_time(L, "allreduce", S)
            e0 = tc / (tc + tar)
            e1 = tc / (tc / 3 + max(2 * tc / 3, tar))
            p("| %s | %d x %d | %.2f | %.3f | %s | %s |" % (m["name"], b, T, tc, tar, pct(e0),
                                                            pct(e1)))
        p("")



def check(a, p):
    if a.check and a.check_single and a.check_link:
        sf, sb = (load(x) for x in a.check_single.split(","))
        link = load(a.check_link)
        T1f, T1b = sf["results"][0]["median_ms"] * 1e-3, sb["results"][0]["median_ms"] * 1e-3
        ctl = {}
        for spec in a.check_control:
            np_, files = spec.split("=", 1)
            ctl[int(np_)] = [max(r["results"][0]["median_ms"] * 1e-3 for r in load_lines(f))
                             for f in files.split(",")]
        p("B=%d H=%d Hkv=%d L=%d D=%d%s, every rank on 1 thread. Single process, 1 thread: "
          "forward %.0f ms, backward %.0f ms.\n" % (sf["batch"], sf["heads"], sf["kv_heads"],
                                                    sf["len"], sf["dim"],
                                                    " causal" if sf["causal"] else "", T1f * 1e3,
                                                    T1b * 1e3))
        p("| ranks | pass | N copies of the single process at once, slowest (ms) | compute per "
          "rank = that / N (ms) | transfers (ms) | model: compute + transfers (ms) | measured "
          "ring (ms) | measured / model | efficiency measured (model) |")
        p("|---|---|---|---|---|---|---|---|---|")
        for spec in a.check:
            np_, path = spec.split("=", 1)
            N = int(np_)
            rj = load(path)
            Lr = rj["len"] // N
            kv = 2 * rj["batch"] * rj["kv_heads"] * Lr * rj["dim"] * 4
            tx = measured_time(link, "exchange", kv)
            for i, (name, T1, meas, nx) in enumerate((
                    ("forward", T1f, rj["forward_ms"] * 1e-3, N - 1),
                    ("backward", T1b, rj["backward_ms"] * 1e-3, 2 * N - 1))):
                # a rank computes 1/N of the work at the speed N concurrent processes get here
                conc = ctl[N][i] if N in ctl else T1 * max(1.0, N / a.cores)
                tc = conc / N
                model = tc + nx * tx
                p("| %d | %s | %.0f | %.0f | %d x %.2f | %.0f | %.0f | %.2f | %.0f%% (%.0f%%) |" % (
                    N, name, conc * 1e3, tc * 1e3, nx, tx * 1e3, model * 1e3, meas * 1e3,
                    meas / model, 100 * tc / meas, 100 * tc / model))
        p("")


if __name__ == "__main__":
    main()
