#!/usr/bin/env python3
"""Writes fixtures/families/: one tiny random model per LLM family attn loads (Llama 3 with its
"llama3" RoPE scaling, Mistral with a sliding window, Qwen2 with q/k/v biases, Qwen3 with
QK-norm, Gemma 3), each as a Hugging Face folder (config.json + model.safetensors, float16) and
as the GGUF file llama.cpp's own converter makes of that folder, with the logits transformers
computes from the same weights.  Needs torch, transformers, safetensors, gguf and a llama.cpp
source tree (for convert_hf_to_gguf.py):

    python3 gen_families.py LLAMA_CPP_DIR fixtures/families

The tiny models have no tokenizer (test_llm_families feeds token ids); their weights are drawn
with std 0.2 (norm weights around 1, biases too) and rounded to float16 so that both files hold
them exactly (norm weights to multiples of 2^-10: Gemma's 1 + w is exact in float16 too).  NAME_ref.txt: "I n ids" (20 token ids), "M max|logit|", then "L p V values" for
every position.  Mistral's GGUF file has no window (llama.cpp's converter drops it, and
llama.cpp runs Mistral with full attention): its reference is mistral_gguf_ref.txt, made with
sliding_window None."""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers as tf

V, T = 96, 20


def configs():
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
    return {
        "llama3": tf.LlamaConfig(**common, num_hidden_layers=2, tie_word_embeddings=False,
                                 rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0,
                                                  "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 64}),
        "mistral": tf.MistralConfig(**dict(common, num_key_value_heads=1), num_hidden_layers=2,
                                    sliding_window=6, tie_word_embeddings=False,
                                    rope_parameters={"rope_type": "default",
                                                     "rope_theta": 100000.0}),
        "qwen2": tf.Qwen2Config(**common, num_hidden_layers=2, tie_word_embeddings=True,
                                use_sliding_window=False,
                                rope_parameters={"rope_type": "default",
                                                 "rope_theta": 1000000.0}),
        "qwen3": tf.Qwen3Config(**common, num_hidden_layers=2, head_dim=16,
                                tie_word_embeddings=True, attention_bias=False,
                                rope_parameters={"rope_type": "default",
                                                 "rope_theta": 1000000.0}),
        "gemma3": tf.Gemma3TextConfig(**dict(common, num_attention_heads=2,
                                             num_key_value_heads=1, rms_norm_eps=1e-6),
                                      num_hidden_layers=6, head_dim=16,
                                      query_pre_attn_scalar=16, sliding_window=4,
                                      final_logit_softcapping=None,
                                      attn_logit_softcapping=None),
    }


MODELS = {"llama3": tf.LlamaForCausalLM, "mistral": tf.MistralForCausalLM,
          "qwen2": tf.Qwen2ForCausalLM, "qwen3": tf.Qwen3ForCausalLM,
          "gemma3": tf.Gemma3ForCausalLM}


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                base = 0.0 if isinstance(model, tf.Gemma3ForCausalLM) else 1.0
                v = base + 0.2 * torch.randn(p.shape, generator=gen)
                # Gemma's norms are stored as w, used as 1 + w; llama.cpp's converter adds the 1
                # in the file's type (float16 here): multiples of 2^-10 keep both exact
                v = torch.round(v * 1024) / 1024
            else:
                v = 0.2 * torch.randn(p.shape, generator=gen)
            p.copy_(v.half().float())


def write_ref(path, model, ids):
    with torch.no_grad():
        lg = model(torch.tensor([ids])).logits[0].float().numpy()
    with open(path, "w") as out:
        out.write("I %d %s\n" % (len(ids), " ".join(map(str, ids))))
        out.write("M %.9g\n" % float(np.abs(lg).max()))
        for p in range(lg.shape[0]):
            out.write("L %d %d %s\n" % (p, lg.shape[1], " ".join("%.9g" % v for v in lg[p])))


def convert(llama_cpp, folder, out):
    """llama.cpp's converter, with its vocabulary readers made no-ops (the tiny models have
    none)."""
    code = (
        "import sys; sys.path.insert(0, %r); sys.path.insert(0, %r)\n"
        "import conversion.base as b\n"
        "for n in [n for n in dir(b.TextModel) if n.startswith('_set_vocab')]:\n"
        "    setattr(b.TextModel, n, lambda self, *a, **k: None)\n"
        "import runpy; sys.argv = ['convert_hf_to_gguf.py', %r, '--outtype', 'f16', "
        "'--outfile', %r]\n"
        "runpy.run_path(%r, run_name='__main__')\n"
        % (llama_cpp, os.path.join(llama_cpp, "gguf-py"), folder, out,
           os.path.join(llama_cpp, "convert_hf_to_gguf.py")))
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)


def main():
    llama_cpp, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    gen = torch.Generator().manual_seed(20261125)
    ids = torch.randint(0, V, (T,), generator=gen).tolist()
    for name, cfg in configs().items():
        model = MODELS[name](cfg).float().eval()
        randomize(model, gen)
        folder = os.path.join(outdir, name)
        shutil.rmtree(folder, ignore_errors=True)
        copy.deepcopy(model).to(torch.float16).save_pretrained(folder)  # (rounds inv_freq too)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(folder, extra)):
                os.remove(os.path.join(folder, extra))
        write_ref(os.path.join(outdir, name + "_ref.txt"), model, ids)
        with tempfile.TemporaryDirectory() as tmp:
            if name == "gemma3":  # the converter sizes the embedding from a tokenizer's vocab
                with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
                    json.dump({"model": {"vocab": {str(i): i for i in range(V)}},
                               "added_tokens": []}, f)
            for fn in os.listdir(folder):
                shutil.copy(os.path.join(folder, fn), tmp)
            convert(llama_cpp, tmp, os.path.join(outdir, name + ".gguf"))
        if name == "mistral":
            cfg2 = tf.MistralConfig(**{**cfg.to_dict(), "sliding_window": None})
            m2 = tf.MistralForCausalLM(cfg2).float().eval()
            m2.load_state_dict(model.state_dict())
            write_ref(os.path.join(outdir, "mistral_gguf_ref.txt"), m2, ids)


if __name__ == "__main__":
    main()
