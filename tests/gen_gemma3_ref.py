#!/usr/bin/env python3
"""Writes fixtures/gemma3_ref.txt: transformers' Gemma3ForCausalLM on Gemma 3 270M's Q4_K_M GGUF
file (dequantized to float32 by transformers), the reference of test_llama_gguf's Gemma 3 case.
Needs transformers, gguf, torch and accelerate:

    python3 gen_gemma3_ref.py DIR gemma-3-270m-q4_k_m.gguf > fixtures/gemma3_ref.txt

Per prompt: "P hex(prompt)", "I n ids" (tokenized with BOS), "M max|logit|" over every prompt
position, "G n ids" (24 greedy tokens), then per position p "L p k id value ..." for the 16
largest logits and 8 fixed ids (full rows are 262,144 floats each).  Last, a long prompt past
the 512-token sliding window (the first 700 tokens of the GPL-3): "P -", its ids, 16 greedy
tokens and the last position's logits only."""
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ",
           "日本の首都は", "Translate to French: the cat sleeps on the mat.\n"]
FIXED = [0, 1, 2, 3, 106, 236743, 255999, 262143]


def main():
    d, f = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()
    out = sys.stdout
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            lg = model(ids).logits[0].float().numpy()
            g = model.generate(ids, max_new_tokens=24, do_sample=False)[0].tolist()
        g = g[ids.shape[1]:]
        out.write("P " + p.encode("utf-8").hex() + "\n")
        out.write("I %d %s\n" % (ids.shape[1], " ".join(map(str, ids[0].tolist()))))
        out.write("M %.9g\n" % float(np.abs(lg).max()))
        out.write("G %d %s\n" % (len(g), " ".join(map(str, g))))
        for pos in range(lg.shape[0]):
            top = list(np.argsort(-lg[pos])[:16]) + FIXED
            out.write("L %d %d %s\n" % (pos, len(top), " ".join(
                "%d %.9g" % (i, lg[pos, i]) for i in top)))
    long_case(tok, model, out)


def long_case(tok, model, out):
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    ids = tok(text, return_tensors="pt").input_ids[:, :700]
    with torch.no_grad():
        lg = model(ids).logits[0].float().numpy()
        g = model.generate(ids, max_new_tokens=16, do_sample=False)[0].tolist()[700:]
    write_long(out, ids[0].tolist(), g, lg[-1], float(np.abs(lg).max()))


def write_long(out, ids, g, last, mx):
    out.write("P -\n")
    out.write("I %d %s\n" % (len(ids), " ".join(map(str, ids))))
    out.write("M %.9g\n" % mx)
    top = list(np.argsort(-last)[:16]) + FIXED
    out.write("L %d %d %s\n" % (len(ids) - 1, len(top),
                                " ".join("%d %.9g" % (i, last[i]) for i in top)))
    out.write("G %d %s\n" % (len(g), " ".join(map(str, g))))


if __name__ == "__main__":
    main()
