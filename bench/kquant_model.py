#!/usr/bin/env python3
"""A random Llama made of K-quants, to time generation against llama.cpp on what Llama, Qwen
and Mistral files are as Q4_K_M (SmolLM2 and Gemma 3 are too narrow for K-quants: llama.cpp's
quantizer gives them Q5_0 and Q8_0).

    kquant_model.py OUT_F16.gguf --tokenizer SmolLM2.gguf [--width 1024] [--layers 8]
    llama-quantize OUT_F16.gguf OUT_Q4_K_M.gguf Q4_K_M
    llm_vs_llamacpp.py ATTN LLAMA_BENCH --model OUT_Q4_K_M.gguf [--act int8]

Writes an F16 GGUF (gguf-py, e.g. llama.cpp's gguf-py folder on PYTHONPATH) of a Llama of the
given width (a multiple of 256), heads of 64 (width / 64 query heads, a quarter as many key /
value heads), FFN 2.75 x width rounded to 256, a tied head, normal weights (std 0.02-0.03),
and the tokenizer of --tokenizer (its `tokenizer.*` fields copied).  Its outputs mean nothing;
its speed is that of a real model of the same shapes and types.  docs/kernels.md has figures.
"""
import argparse

import numpy as np
import gguf


def copy_tokenizer(src, w):
    for f in src.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                w.add_array(f.name, [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data])
            else:
                w.add_array(f.name, [f.parts[i][0].item() for i in f.data])
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(f.name, bytes(f.parts[f.data[0]]).decode())
        elif t == gguf.GGUFValueType.BOOL:
            w.add_bool(f.name, bool(f.parts[f.data[0]][0]))
        elif t == gguf.GGUFValueType.UINT32:
            w.add_uint32(f.name, int(f.parts[f.data[0]][0]))
        elif t == gguf.GGUFValueType.INT32:
            w.add_int32(f.name, int(f.parts[f.data[0]][0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="a GGUF file whose tokenizer to copy")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    a = ap.parse_args()
    E, L = a.width, a.layers
    if E % 256:
        ap.error("--width must be a multiple of 256 (K-quant superblocks)")
    H = E // 64
    KV = max(1, H // 4)
    F = (int(2.75 * E) + 255) // 256 * 256
    src = gguf.GGUFReader(a.tokenizer)
    V = len(src.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_block_count(L)
    w.add_context_length(8192)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    copy_tokenizer(src, w)
    rng = np.random.default_rng(0)

    def t(name, shape, scale):
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16))

    t("token_embd.weight", (V, E), 0.02)
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(L):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, np.float32))
        t(p + "attn_q.weight", (E, E), 0.03)
        t(p + "attn_k.weight", (KV * 64, E), 0.03)
        t(p + "attn_v.weight", (KV * 64, E), 0.03)
        t(p + "attn_output.weight", (E, E), 0.03)
        t(p + "ffn_gate.weight", (F, E), 0.03)
        t(p + "ffn_up.weight", (F, E), 0.03)
        t(p + "ffn_down.weight", (E, F), 0.02)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
