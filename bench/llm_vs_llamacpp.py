#!/usr/bin/env python3
"""attn bench --op llm against llama.cpp's llama-bench on the same GGUF file, in one run.

    llm_vs_llamacpp.py ATTN LLAMA_BENCH --model FILE.gguf [--threads 2] [--rounds 3]
                       [--prompt-len 512] [--gen 128] [--act auto|f32|int8|int16] [--json]

ATTN is the attn program, LLAMA_BENCH llama.cpp's llama-bench (build it from the llama.cpp
that llama-cpp-python vendors, with native flags: docs/llm.md says how).  Each round runs, in
turn: attn (prompt of --prompt-len tokens, then --gen generated tokens after it), llama-bench
for the prompt (pp), and llama-bench for generation after a prompt of the same length
(tg @ depth) with flash attention on and off (llama.cpp's better one counts).  Medians over the
rounds; ratios attn / llama.cpp; peak RSS of each process (getrusage of the child: llama-bench
sized for prompt + gen tokens in one context, as attn's session is).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_rss(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    out = p.stdout.read().decode()
    err = p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("%s failed:\n%s" % (" ".join(cmd), err[-2000:]))
    return out, ru.ru_maxrss / 1024.0


def llama_tps(out):
    rows = json.loads(out)
    return [r["avg_ts"] for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("attn")
    ap.add_argument("llama_bench")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--act", default="auto", choices=("auto", "f32", "int8", "int16"),
                    help="attn's activations in the matrix-vector products (attn bench --act)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    P, G, T = a.prompt_len, a.gen, a.threads
    res = {k: [] for k in ("attn_pp", "attn_tg", "attn_rss", "attn_frac", "attn_wfrac",
                           "llama_pp", "llama_tg", "llama_tg_fa", "llama_tg_nofa", "llama_rss")}
    attn_json = None
    for r in range(a.rounds):
        out, rss = run_rss([a.attn, "bench", "--op", "llm", "--model", a.model, "--threads",
                            str(T), "--prompt-len", str(P), "--gen", str(G), "--repeat", "3",
                            "--act", a.act, "--json"])
        attn_json = json.loads(out)
        res["attn_pp"].append(attn_json["prompt_tokens_per_s"])
        res["attn_tg"].append(attn_json["gen_tokens_per_s"])
        res["attn_rss"].append(attn_json["peak_rss_mib"])
        res["attn_frac"].append(attn_json["bandwidth_fraction"])
        res["attn_wfrac"].append(attn_json["weight_bandwidth_fraction"])
        lb = [a.llama_bench, "-m", a.model, "-t", str(T), "-r", "3", "-o", "json"]
        out, _ = run_rss(lb + ["-p", str(P), "-n", "0", "-fa", "on,off"])
        res["llama_pp"].append(max(llama_tps(out)))
        out, _ = run_rss(lb + ["-p", "0", "-n", str(G), "-d", str(P), "-fa", "on,off"])
        fa_on, fa_off = llama_tps(out)
        res["llama_tg_fa"].append(fa_on)
        res["llama_tg_nofa"].append(fa_off)
        res["llama_tg"].append(max(fa_on, fa_off))
        # peak RSS with a context of prompt + gen tokens (one pg test, one repetition)
        _, lrss = run_rss([a.llama_bench, "-m", a.model, "-t", str(T), "-r", "1", "-o", "json",
                           "-p", "0", "-n", "0", "-pg", "%d,%d" % (P, G), "--no-warmup"])
        res["llama_rss"].append(lrss)
    med = {k: statistics.median(v) for k, v in res.items()}
    med["prompt_ratio"] = med["attn_pp"] / med["llama_pp"]
    med["gen_ratio"] = med["attn_tg"] / med["llama_tg"]
    med["rss_ratio"] = med["attn_rss"] / med["llama_rss"]
    med["rounds"] = {k: v for k, v in res.items()}
    med["attn_last"] = attn_json
    if a.json:
        print(json.dumps(med))
        return
    print("%s, %d threads, prompt %d, generation %d after it; attn --act %s; medians of %d "
          "rounds" % (os.path.basename(a.model), T, P, G, a.act, a.rounds))
    print("                      attn        llama.cpp     ratio")
    print("prompt tokens/s   %9.1f     %9.1f      %5.2fx" % (med["attn_pp"], med["llama_pp"],
                                                              med["prompt_ratio"]))
    print("gen tokens/s      %9.1f     %9.1f      %5.2fx   (llama.cpp fa on %.1f, off %.1f)" %
          (med["attn_tg"], med["llama_tg"], med["gen_ratio"], med["llama_tg_fa"],
           med["llama_tg_nofa"]))
    print("peak RSS MiB      %9.1f     %9.1f      %5.2f" % (med["attn_rss"], med["llama_rss"],
                                                             med["rss_ratio"]))
    print("attn reads %.0f%% of the measured read bandwidth per generated token (weights + KV "
          "cache; weights alone %.0f%%)" % (100 * med["attn_frac"], 100 * med["attn_wfrac"]))


if __name__ == "__main__":
    main()
