#!/usr/bin/env python3
"""Writes fixtures/families/NAME_grads.safetensors: PyTorch autograd's gradients of the tiny
family models (fixtures/families/NAME, made by gen_families.py) for test_llama_grads.  The
model in float32 (transformers' *ForCausalLM from the folder), ids [2, 7] and a cotangent c of
the logits [2, 7, V], both drawn here with numpy's seed 5: the loss sum(c * logits); every
parameter's gradient under its state_dict name (Gemma's norm weights: d/dw of 1 + w, the same
as attn's d/d(1 + w)), plus "ids" (int32) and "c".

    python3 gen_family_grads.py fixtures/families"""
import sys

import numpy as np
import torch
import transformers as tf
from safetensors.torch import save_file

root = sys.argv[1]
for name in ["mistral", "qwen2", "qwen3", "gemma3"]:
    m = tf.AutoModelForCausalLM.from_pretrained(f"{root}/{name}", dtype=torch.float32)
    m.config.use_cache = False
    rng = np.random.default_rng(5)
    V = m.config.vocab_size
    ids = rng.integers(0, V, size=(2, 7)).astype(np.int32)
    c = rng.uniform(-1, 1, size=(2, 7, V)).astype(np.float32)
    logits = m(torch.tensor(ids, dtype=torch.long)).logits
    (logits * torch.tensor(c)).sum().backward()
    out = {"ids": torch.tensor(ids), "c": torch.tensor(c)}
    for n, p in m.named_parameters():
        out[n] = p.grad.detach().clone().contiguous()
    save_file(out, f"{root}/{name}_grads.safetensors")
    print(name, len(out) - 2, "gradients")
