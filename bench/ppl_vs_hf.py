#!/usr/bin/env python3
"""Perplexity of the first chunks of a text with transformers, on the token ids attn gives, by
llama.cpp's method (as attn_llm_perplexity): chunks of CTX tokens, each run alone with its first
token replaced by bos, the second half scored (logits of positions CTX/2 .. CTX-2 predicting
the next token).  The reference for `attn perplexity` and `llama-perplexity`, whose running
estimates after the same number of chunks it is compared with.

    python3 bench/ppl_vs_hf.py ATTN MODEL.gguf TEXT [--ctx 512] [--chunks 10]

Needs torch, transformers and gguf (a venv: docs/llm.md); the GGUF file is dequantized to
float32 by transformers."""
import argparse
import math
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("attn")
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=10)
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM
    need = a.ctx * a.chunks
    with open(a.text, "rb") as f:
        raw = f.read()
    take = min(len(raw), 12 * need)  # bytes enough for the chunks; the cut is far from them
    text = raw[:take].decode("utf-8", errors="ignore")
    out = subprocess.run([a.attn, "tokenize", "--model", a.model, "--text", text],
                         capture_output=True, check=True, text=True).stdout
    ids = [int(x) for x in out.split()]
    if len(ids) < need + 64:
        sys.exit("the text gives too few tokens for %d chunks" % a.chunks)
    bos = ids[0]
    torch.set_num_threads(os.cpu_count() or 1)
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.model)),
                                             gguf_file=os.path.basename(a.model),
                                             torch_dtype=torch.float32)
    m.eval()
    nll, cnt = 0.0, 0
    for k in range(a.chunks):
        part = ids[k * a.ctx:(k + 1) * a.ctx]
        tok = torch.tensor([[bos] + part[1:]])
        with torch.no_grad():
            lg = m(tok).logits[0].double()
        lp = torch.log_softmax(lg, dim=-1)
        for j in range(a.ctx // 2, a.ctx - 1):
            nll -= float(lp[j, part[j + 1]])
            cnt += 1
        print("[%d]%.4f" % (k + 1, math.exp(nll / cnt)), flush=True)
    print("transformers: PPL after %d chunks of %d = %.4f (%d tokens scored)"
          % (a.chunks, a.ctx, math.exp(nll / cnt), cnt))


if __name__ == "__main__":
    main()
