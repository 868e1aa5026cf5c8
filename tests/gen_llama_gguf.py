#!/usr/bin/env python3
"""A tiny llama GGUF for tests/test_llama_gguf.c, written with the gguf package from
tests/fixtures/llama_tiny_untied (the random LlamaForCausalLM of gen_llama.py) the way
llama.cpp's converter writes llama models: q_proj / k_proj rows permuted within each head for
GGML's rope, quantized blocks (Q8_0, Q4_1, Q4_0, Q5_1, Q5_0), an F16 and F32 matrices, a
byte-level tokenizer of the 256 bytes (tokenizer.ggml.model gpt2, no merges) and a ChatML
template.  Expected values from transformers reading that GGUF file
(AutoModelForCausalLM.from_pretrained(dir, gguf_file=...), which dequantizes it): logits of
three id sequences and a greedy continuation.

  /work/venv/bin/python tests/gen_llama_gguf.py      (needs torch, transformers, gguf)
"""
import json
import os
import shutil
import tempfile

import gguf
import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "fixtures", "llama_tiny_untied")
OUT = os.path.join(HERE, "fixtures", "llama_tiny.gguf")
EXPECTED = os.path.join(HERE, "fixtures", "llama_tiny_gguf_expected.safetensors")
Q = gguf.GGMLQuantizationType
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def permute(w, n_head):  # llama.cpp's converter: rows of each head reordered for GGML's rope
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def main():
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    sd = load_file(os.path.join(SRC, "model.safetensors"))
    sd = {k: v.astype(np.float32) for k, v in sd.items()}
    H, Hkv, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(OUT, "llama")
    w.add_name("llama_tiny")
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg.get("rope_theta") or cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    b2u = bytes_to_unicode()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list([b2u[b] for b in range(256)])
    w.add_token_types([1] * 256)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def add(name, arr, qtype):
        if qtype == Q.F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif qtype == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)

    add("token_embd.weight", sd["model.embed_tokens.weight"], Q.Q8_0)
    add("output_norm.weight", sd["model.norm.weight"], Q.F32)
    add("output.weight", sd["lm_head.weight"], Q.Q4_1)
    kinds = {"q": Q.Q4_1, "k": Q.Q8_0, "v": Q.Q5_1, "o": Q.Q4_0, "gate": Q.Q5_0, "up": Q.F16,
             "down": Q.F32}
    for i in range(L):
        p = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], Q.F32)
        add(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], H), kinds["q"])
        add(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], Hkv),
            kinds["k"])
        add(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"], kinds["v"])
        add(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"], kinds["o"])
        add(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], Q.F32)
        add(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], kinds["gate"])
        add(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"], kinds["up"])
        add(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"], kinds["down"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", OUT, os.path.getsize(OUT), "bytes")

    from transformers import AutoModelForCausalLM
    tmp = tempfile.mkdtemp()
    shutil.copy(OUT, os.path.join(tmp, "m.gguf"))
    model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="m.gguf",
                                                 torch_dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(7)
    seqs = [torch.randint(0, 256, (1, n), generator=g) for n in (1, 7, 33)]
    out = {}
    with torch.no_grad():
        for k, ids in enumerate(seqs):
            out[f"ids_{k}"] = ids[0].to(torch.int32).contiguous()
            out[f"logits_{k}"] = model(ids).logits[0].float().contiguous()
        gen = model.generate(seqs[1], max_new_tokens=20, do_sample=False)
        out["greedy_prompt"] = seqs[1][0].to(torch.int32).contiguous()
        out["greedy"] = gen[0, seqs[1].shape[1]:].to(torch.int32).contiguous()
    save_file(out, EXPECTED)
    shutil.rmtree(tmp)
    print("wrote", EXPECTED)


if __name__ == "__main__":
    main()


def smollm2(path):
    """Expectations for the real SmolLM2-135M-Instruct Q4_1 file (tests/test_llama_gguf.c when
    ATTN_SMOLLM2_GGUF is set): for three prompts, transformers' ids (its tokenizer from the
    GGUF: prompts without digits, where it agrees with the smollm pre-tokenizer), the 32 logits
    of the last position largest in transformers' run with their ids, max|logit| there, and the
    greedy continuation of 32 tokens (stopped at <|im_end|>)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    prompts = ["The capital of France is",
               "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
               "<|im_start|>assistant\n",
               "def fibonacci(n):"]
    tmp = tempfile.mkdtemp()
    os.symlink(os.path.abspath(path), os.path.join(tmp, "m.gguf"))
    model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="m.gguf",
                                                 dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(tmp, gguf_file="m.gguf")
    out = {}
    with torch.no_grad():
        for k, p in enumerate(prompts):
            ids = torch.tensor([tok(p, add_special_tokens=False)["input_ids"]])
            lg = model(ids).logits[0, -1].float()
            top = torch.topk(lg, 32)
            g = model.generate(ids, max_new_tokens=32, do_sample=False, eos_token_id=2,
                               pad_token_id=0)[0, ids.shape[1]:]
            gen = []
            for t in g.tolist():
                if t == 2:
                    break
                gen.append(t)
            out[f"ids_{k}"] = ids[0].to(torch.int32).contiguous()
            out[f"top_ids_{k}"] = top.indices.to(torch.int32).contiguous()
            out[f"top_logits_{k}"] = top.values.contiguous()
            out[f"max_abs_{k}"] = lg.abs().max().reshape(1)
            out[f"greedy_{k}"] = torch.tensor(gen, dtype=torch.int32)
    dst = os.path.join(HERE, "fixtures", "smollm2_expected.safetensors")
    save_file(out, dst)
    shutil.rmtree(tmp)
    print("wrote", dst)


if __name__ == "__main__" and os.environ.get("ATTN_SMOLLM2_GGUF"):
    smollm2(os.environ["ATTN_SMOLLM2_GGUF"])
