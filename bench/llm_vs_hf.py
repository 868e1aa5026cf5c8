#!/usr/bin/env python3
"""attn's llama path against transformers on the same GGUF file (issue 12's exactness check).

  llm_vs_hf.py ATTN MODEL.gguf [--tokens 64] [--threads 2] [--act f32|auto|int16|int8] [--json]

transformers reads the file with AutoModelForCausalLM.from_pretrained(dir, gguf_file=...), which
dequantizes every tensor to float32 (and un-permutes q/k), and runs it in float32.  For each of
20 prompts, attn tokenizes the prompt (`ATTN generate --logits`: its ids and the logits of every
prompt position, one forward pass) and generates greedily (`--temperature 0 --ids`); the same
ids go into transformers (model(ids).logits, and generate(do_sample=False)), so the comparison
is of the model, not of the two tokenizers (reported apart: whether transformers' own tokenizer
gives the same ids; transformers' GGUF loader does not know the "smollm" pre-tokenizer and skips
its digit split).  attn runs twice: --f32 (weights dequantized at load) and on the quantized
blocks read by the kernels, with --act (default f32: the exact product; attn's own default,
auto, rounds the decoding's activations to int16 on x86).  Reported: max |logit error| / max |logit| per prompt
and over all, and whether the greedy continuations are identical (up to the first end token).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attn_vs_torch import read_safetensors  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three laws of thermodynamics are",
    "<|im_start|>user\nWhat is 12 times 7?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong",
    "Photosynthesis is the process by which",
    "import numpy as np\n\nx = np.arange(10)\n",
    "The quick brown fox",
    "Les voitures électriques sont",
    "Q: What is the boiling point of water?\nA:",
    "1, 1, 2, 3, 5, 8, 13,",
    "The GNU General Public License is",
    "A recipe for pancakes:\n1.",
    "SELECT name FROM users WHERE",
    "Machine learning models can overfit when",
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "Emoji test: 🙂🚀 and accents: naïve café",
    "The mitochondria is",
]


def attn_run(a, prompt, f32, tmp, model=None):
    out = os.path.join(tmp, "lg.safetensors")
    cmd = [a.attn, "generate", "--model", model or a.model, "--prompt", prompt, "--tokens",
           str(a.tokens), "--temperature", "0", "--ids", "--logits", out, "-q", "--threads",
           str(a.threads), "--act", a.act] + (["--f32"] if f32 else [])
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    t, _ = read_safetensors(out)
    gen = [int(x) for x in r.stdout.split()]
    return t["ids"].tolist(), t["logits"], gen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("attn")
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--act", default="f32", choices=("f32", "auto", "int16", "int8"),
                    help="attn's activations in the quantized matrix-vector products")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--hf-folder", action="store_true",
                    help="also save transformers' model as a Hugging Face folder (config.json, "
                         "model.safetensors, tokenizer.json) and run attn on that folder")
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(a.threads)
    d = tempfile.mkdtemp()
    try:
        os.symlink(os.path.abspath(a.model), os.path.join(d, "m.gguf"))
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file="m.gguf",
                                                     dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(d, gguf_file="m.gguf")
        eos = {model.config.eos_token_id} if model.config.eos_token_id is not None else set()
        eos |= {2}  # <|im_end|>: attn stops there too (the ChatML end of turn)
        modes = [("f32", True, None), ("quantized", False, None)]
        if a.hf_folder:  # the real model as a HF folder: attn's safetensors/config.json path
            folder = os.path.join(d, "hf")
            # (save_pretrained refuses a model loaded from GGUF: write the three files here)
            from safetensors.torch import save_file
            os.makedirs(folder)
            tied = model.config.tie_word_embeddings
            save_file({k: v.contiguous() for k, v in model.state_dict().items()
                       if not (tied and k == "lm_head.weight")},
                      os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
            cfg = model.config.to_dict()
            cfg.pop("quantization_config", None)
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(cfg, f, indent=1)
            tok.save_pretrained(folder)
            modes.append(("hf_folder", False, folder))
        rows = []
        worst = {m[0]: 0.0 for m in modes}
        same_all = {m[0]: True for m in modes}
        for i, p in enumerate(PROMPTS):
            res = {"prompt": p}
            for mode, f32, path in modes:
                ids, lg, gen = attn_run(a, p, f32, d, path)
                x = torch.tensor([ids])
                with torch.no_grad():
                    ref = model(x).logits[0].float()
                    g = model.generate(x, max_new_tokens=a.tokens, do_sample=False,
                                       eos_token_id=list(eos), pad_token_id=0)[0, len(ids):]
                ref_gen = []
                for t in g.tolist():
                    if t in eos:
                        break
                    ref_gen.append(t)
                err = float((lg - ref).abs().max() / ref.abs().max())
                res[mode] = {"rel_err": err, "same_greedy": gen == ref_gen,
                             "n_prompt": len(ids), "n_gen": len(gen)}
                if not gen == ref_gen:
                    k = next((j for j in range(min(len(gen), len(ref_gen)))
                              if gen[j] != ref_gen[j]), min(len(gen), len(ref_gen)))
                    res[mode]["first_diff"] = k
                worst[mode] = max(worst[mode], err)
                same_all[mode] &= gen == ref_gen
            res["hf_tokenizer_same_ids"] = tok(p, add_special_tokens=False)["input_ids"] == ids
            rows.append(res)
            if not a.json:
                print(f"{i:2d} n={res['f32']['n_prompt']:3d}  f32 err {res['f32']['rel_err']:.2e}"
                      f" greedy {'same' if res['f32']['same_greedy'] else 'DIFF'}  quantized err "
                      f"{res['quantized']['rel_err']:.2e} greedy "
                      f"{'same' if res['quantized']['same_greedy'] else 'DIFF'}"
                      + (f"  folder err {res['hf_folder']['rel_err']:.2e} greedy "
                         f"{'same' if res['hf_folder']['same_greedy'] else 'DIFF'}"
                         if a.hf_folder else "") + f"  hf tokenizer "
                      f"{'same' if res['hf_tokenizer_same_ids'] else 'differs'}  {p[:40]!r}",
                      flush=True)
        summary = {"prompts": len(PROMPTS), "tokens": a.tokens, "max_rel_err": worst,
                   "greedy_identical": same_all, "torch": torch.__version__,
                   "bound": 1e-3}
        if a.json:
            print(json.dumps({"summary": summary, "rows": rows}))
        else:
            print(json.dumps(summary))
        ok = all(v <= 1e-3 for v in worst.values()) and all(same_all.values())
        return 0 if ok else 1
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    sys.exit(main())
