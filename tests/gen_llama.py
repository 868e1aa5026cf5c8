#!/usr/bin/env python3
"""Reference data for the Llama architecture (tests/test_llama.c and the attn eval fixtures).

    /work/venv/bin/python tests/gen_llama.py            # both parts below
    python3 tests/gen_llama.py --models                 # only the tiny models
    python3 tests/gen_llama.py --ops                    # only the eval cases

1. Two tiny random LlamaForCausalLM folders written by transformers' save_pretrained:
     tests/fixtures/llama_tiny/         vocab 256, hidden 64, 2 layers, 4 heads, 2 kv heads
                                        (head_dim 16), intermediate 128, RMSNorm eps 1e-5,
                                        rope_theta 1e5, tied embeddings, weights in BF16,
                                        config.json as transformers 5 writes it
                                        (rope_parameters)
     tests/fixtures/llama_tiny_untied/  the same sizes, rope_theta 1e4, a separate lm_head,
                                        attention and MLP biases, weights in F16, config.json
                                        in the older layout SmolLM2 ships (rope_theta at the
                                        top, rope_scaling null)
   and for each tests/fixtures/<name>_expected.safetensors: token ids of lengths 1, 7 and 33
   (ids.<T>, I64) with transformers' float32 logits (logits.<T>, [T, 256]), and two prompts
   (prompt.<k>) with the 20 tokens of greedy generate() after each (greedy.<k>) and the
   smallest gap between the best and the second-best logit over those steps (metadata
   margin.<k>: attn must be far more exact than that for the comparison to mean anything).
   Weights are random with scales that give logits of a few units (HF's init of N(0, 0.02)
   gives nearly uniform logits, which would test little), then rounded to the stored dtype;
   the references come from the folder as transformers reads it back, in float32.
   tests/fixtures/llama_sampler_expected.safetensors: hand-made logits through transformers'
   RepetitionPenaltyLogitsProcessor (the greedy choice) and the sampling chain (temperature,
   top-k, top-p, min-p: the probabilities left), see gen_sampler.
2. attn eval cases (docs/eval-format.md) of the ops rms_norm, rotary_embedding, llama_mlp,
   llama_attention and llama_decoder_layer against transformers' LlamaRMSNorm,
   LlamaRotaryEmbedding + apply_rotary_pos_emb, LlamaMLP, LlamaAttention and
   LlamaDecoderLayer (eager attention, causal mask), written with gen_fixtures.py's writer and
   appended to tests/fixtures/MANIFEST.txt (gen_fixtures.py regenerates them too: it calls
   gen_llama_ops last).  Then their backward cases (<op>_bwd_<k>: torch.autograd through the
   same transformers modules, a random cotangent of out, every input's and parameter's
   gradient) and those of llama_for_causal_lm (LlamaForCausalLM, tied and separate heads, with
   labels: HF's shifted cross-entropy loss as out and the gradients of that loss), some with
   the GGUF layout of q/k (rope_interleaved: the file holds the permuted rows, the expected
   gradients are HF's permuted the same way).

transformers 5.x, torch 2.15 (CPU, float32, one thread); deterministic.
"""
import argparse
import json
import os
import shutil
import sys
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
sys.path.insert(0, HERE)

torch.set_num_threads(1)

LLAMA_OPS = ("rms_norm", "rotary_embedding", "llama_mlp", "llama_attention",
             "llama_decoder_layer", "llama_for_causal_lm")


def gen(tag):
    return torch.Generator().manual_seed(zlib.crc32(tag.encode()))


# ------------------------------------------------------------------------------------------
# 1. tiny models
# ------------------------------------------------------------------------------------------
MODELS = [
    ("llama_tiny", dict(tie_word_embeddings=True, rope_theta=1e5), torch.bfloat16, False),
    ("llama_tiny_untied", dict(tie_word_embeddings=False, rope_theta=1e4, attention_bias=True,
                               mlp_bias=True), torch.float16, True),
]


def tiny_config(**kw):
    from transformers import LlamaConfig
    theta = kw.pop("rope_theta")
    return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=128, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": theta},
                       bos_token_id=None, eos_token_id=None, pad_token_id=None, **kw)


def randomize_llama(model, g):
    """Weights with scales that make the logits spread over a few units."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or name == "lm_head.weight":
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                gain = 1.5 if ("q_proj" in name or "k_proj" in name) else 1.0
                p.copy_(gain / p.shape[1] ** 0.5 * torch.randn(p.shape, generator=g))


def old_style_config(path):
    """config.json as SmolLM2's: rope_theta at the top level and rope_scaling null."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    c["rope_theta"] = rp["rope_theta"]
    c["rope_scaling"] = None
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def greedy_with_margin(model, prompt, n):
    """generate(do_sample=False) and the smallest top-1 / top-2 gap of its steps."""
    # an explicit attention mask: with a pad_token_id set, generate() would mask the prompt's
    # tokens of that id
    out = model.generate(prompt[None], attention_mask=torch.ones(1, prompt.numel(),
                                                                 dtype=torch.long),
                         max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         output_scores=True, return_dict_in_generate=True)
    margin = min((s[0].topk(2).values[0] - s[0].topk(2).values[1]).item() for s in out.scores)
    return out.sequences[0, prompt.numel():], margin


def gen_models():
    from transformers import LlamaForCausalLM
    import gen_fixtures as gf
    for name, kw, dtype, old in MODELS:
        g = gen(name)
        torch.manual_seed(0)
        model = LlamaForCausalLM(tiny_config(**kw))
        randomize_llama(model, g)
        folder = os.path.join(FIX, name)
        shutil.rmtree(folder, ignore_errors=True)
        model.to(dtype).save_pretrained(folder, safe_serialization=True)
        for f in os.listdir(folder):
            os.chmod(os.path.join(folder, f), 0o644)
        gc = os.path.join(folder, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        if old:
            old_style_config(os.path.join(folder, "config.json"))
        # the reference: the folder as transformers reads it, in float32
        ref = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        ref.generation_config.eos_token_id = None
        tensors, meta = {}, {"model": name}
        with torch.no_grad():
            for T in (1, 7, 33):
                ids = torch.randint(0, 256, (T,), generator=g)
                logits = ref(ids[None]).logits[0]
                tensors[f"ids.{T}"] = ids
                tensors[f"logits.{T}"] = logits.float().contiguous()
            for k, T in enumerate((5, 33)):
                prompt = torch.randint(0, 256, (T,), generator=g)
                cont, margin = greedy_with_margin(ref, prompt, 20)
                tensors[f"prompt.{k}"] = prompt
                tensors[f"greedy.{k}"] = cont.contiguous()
                meta[f"margin.{k}"] = repr(margin)
                assert margin > 1e-3, (name, k, margin)
        data = gf.st_serialize(tensors, meta)
        with open(os.path.join(FIX, name + "_expected.safetensors"), "wb") as f:
            f.write(data)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        print(f"{name}: {size} bytes of model, expected {len(data)} bytes, margins "
              f"{meta['margin.0']} {meta['margin.1']}")


# ------------------------------------------------------------------------------------------
# 1b. the sampler against transformers' logits processors
# ------------------------------------------------------------------------------------------
SAMPLER_CASES = 24
SAMPLER_V = 16


def gen_sampler():
    """tests/fixtures/llama_sampler_expected.safetensors: per case k, logits [16], a history of
    6 ids and the settings (penalty, temperature, top_k, top_p, min_p) in params.<k>; the
    argmax after RepetitionPenaltyLogitsProcessor (greedy.<k>, I64 [1]) and the probabilities
    after the whole chain of generate(do_sample=True) (probs.<k>: 0 for removed tokens).
    Cases whose filters sit within 1e-3 of an edge are drawn again, so that float rounding
    cannot decide membership."""
    import gen_fixtures as gf
    from transformers.generation.logits_process import (MinPLogitsWarper,
                                                        RepetitionPenaltyLogitsProcessor,
                                                        TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    g = gen("sampler")
    tensors = {}
    k = 0
    while k < SAMPLER_CASES:
        logits = 2.0 * torch.randn(1, SAMPLER_V, generator=g)
        hist = torch.randint(0, SAMPLER_V, (1, 6), generator=g)
        pen = float(torch.empty(1).uniform_(0.5, 2.0, generator=g))
        temp = float(torch.empty(1).uniform_(0.5, 1.5, generator=g))
        top_k = int(torch.randint(0, 12, (1,), generator=g))
        top_p = float(torch.empty(1).uniform_(0.5, 1.0, generator=g)) if k % 3 else 1.0
        min_p = float(torch.empty(1).uniform_(0.0, 0.3, generator=g)) if k % 2 else 0.0
        s = RepetitionPenaltyLogitsProcessor(pen)(hist, logits.clone())
        srt = s.sort(descending=True).values[0]
        if (srt[0] - srt[1]).abs() < 1e-3:
            continue
        greedy = s.argmax(-1)
        s = TemperatureLogitsWarper(temp)(hist, s) if temp != 1.0 else s
        edge = False
        if top_k:
            v = s.sort(descending=True).values[0]
            edge |= top_k < SAMPLER_V and bool((v[top_k - 1] - v[top_k]).abs() < 1e-3)
            s = TopKLogitsWarper(top_k)(hist, s)
        if top_p < 1.0:
            cum = s.sort().values.softmax(-1).cumsum(-1)[0]
            edge |= bool(((cum - (1 - top_p)).abs() < 1e-3).any())
            s = TopPLogitsWarper(top_p)(hist, s)
        if min_p > 0:
            pr = s.softmax(-1)[0]
            edge |= bool(((pr / pr.max() - min_p).abs() < 1e-3).any())
            s = MinPLogitsWarper(min_p)(hist, s)
        if edge:
            continue
        tensors[f"logits.{k}"] = logits[0].contiguous()
        tensors[f"history.{k}"] = hist[0].contiguous()
        tensors[f"params.{k}"] = torch.tensor([pen, temp, float(top_k), top_p, min_p])
        tensors[f"greedy.{k}"] = greedy.contiguous()
        tensors[f"probs.{k}"] = s.softmax(-1)[0].contiguous()
        k += 1
    with open(os.path.join(FIX, "llama_sampler_expected.safetensors"), "wb") as f:
        f.write(gf.st_serialize(tensors, {"cases": str(SAMPLER_CASES)}))


# ------------------------------------------------------------------------------------------
# 2. eval cases
# ------------------------------------------------------------------------------------------
def op_config(**kw):
    from transformers import LlamaConfig
    theta = kw.pop("rope_theta", 1e4)
    c = LlamaConfig(vocab_size=16, num_hidden_layers=1, max_position_embeddings=8192,
                    rope_parameters={"rope_type": "default", "rope_theta": theta},
                    attn_implementation="eager", **kw)
    return c


def llama_attrs(c, mlp=True, attn=True):
    a = {"hidden_size": c.hidden_size, "rms_norm_eps": float(c.rms_norm_eps)}
    if mlp:
        a["intermediate_size"] = c.intermediate_size
        a["mlp_bias"] = bool(c.mlp_bias)
    if attn:
        a["num_attention_heads"] = c.num_attention_heads
        a["num_key_value_heads"] = c.num_key_value_heads
        a["head_dim"] = c.head_dim
        a["rope_theta"] = float(c.rope_parameters["rope_theta"])
        a["attention_bias"] = bool(c.attention_bias)
    return a


def causal_mask(B, T):
    m = torch.full((T, T), float("-inf")).triu(1)
    return m[None, None].expand(B, 1, T, T)


def positions(g, B, T, spread):
    start = torch.randint(0, spread, (B, 1), generator=g)
    return start + torch.arange(T)[None]


def gen_llama_ops(W):
    """The eval cases, written with W (gen_fixtures.Writer)."""
    from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaDecoderLayer,
                                                          LlamaMLP, LlamaRMSNorm,
                                                          LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)
    import gen_fixtures as gf

    g = gen("rms_norm")
    for shape, eps, s in (((2, 5, 32), 1e-5, 1.0), ((7, 48), 1e-6, 100.0),
                          ((2, 3, 4, 16), 1e-5, 0.01)):
        E = shape[-1]
        m = LlamaRMSNorm(E, eps=eps)
        with torch.no_grad():
            m.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
        x = s * torch.randn(*shape, generator=g)
        W.emit("rms_norm", {"hidden_states": x, "weight": m.weight.detach().clone()},
               {"hidden_size": E, "eps": eps}, {"out": m(x).detach()}, tol="1e-6")

    g = gen("rotary_embedding")
    for B, H, Hkv, T, D, theta, spread in ((2, 4, 2, 6, 16, 1e4, 5000), (1, 3, 1, 5, 64, 1e5, 8000),
                                          (1, 2, 1, 5, 128, 5e5, 100)):
        c = op_config(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=Hkv,
                      rope_theta=theta)
        rot = LlamaRotaryEmbedding(c)
        q = torch.randn(B, H, T, D, generator=g)
        k = torch.randn(B, Hkv, T, D, generator=g)
        pos = positions(g, B, T, spread)
        cos, sin = rot(q, pos)
        qe, ke = apply_rotary_pos_emb(q, k, cos, sin)
        W.emit("rotary_embedding", {"q": q, "k": k, "position_ids": pos},
               {"rope_theta": theta}, {"out": qe, "k_embed": ke}, tol="1e-6")

    g = gen("llama_mlp")
    for shape, F, bias in (((2, 5, 32), 48, False), ((6, 32), 80, True)):
        c = op_config(hidden_size=shape[-1], intermediate_size=F, num_attention_heads=4,
                      mlp_bias=bias)
        m = gf.randomize(LlamaMLP(c), g)
        x = torch.randn(*shape, generator=g)
        W.emit("llama_mlp", {"x": x, **gf.params(m)}, llama_attrs(c, attn=False),
               {"out": m(x).detach()}, tol="1e-5")

    g = gen("llama_attention")
    for B, T, E, H, Hkv, D, bias, theta, pos_given in (
            (2, 9, 32, 4, 2, None, False, 1e4, True), (1, 7, 32, 4, 1, 16, True, 1e5, True),
            (1, 66, 32, 2, 2, None, False, 1e4, False)):
        c = op_config(hidden_size=E, intermediate_size=16, num_attention_heads=H,
                      num_key_value_heads=Hkv, head_dim=D, attention_bias=bias,
                      rope_theta=theta)
        m = gf.randomize(LlamaAttention(c, 0), g).eval()
        x = torch.randn(B, T, E, generator=g)
        pos = positions(g, B, T, 1000) if pos_given else torch.arange(T)[None].expand(B, T)
        cs = LlamaRotaryEmbedding(c)(x, pos)
        out = m(x, position_embeddings=cs, attention_mask=causal_mask(B, T))[0]
        inputs = {"hidden_states": x, **gf.params(m)}
        if pos_given:
            inputs["position_ids"] = pos.contiguous()
        W.emit("llama_attention", inputs, llama_attrs(c, mlp=False), {"out": out.detach()},
               tol="1e-5")

    g = gen("llama_decoder_layer")
    for B, T, E, H, Hkv, F, bias, theta in ((2, 8, 32, 4, 2, 48, False, 1e4),
                                            (1, 40, 32, 2, 1, 64, True, 1e5)):
        c = op_config(hidden_size=E, intermediate_size=F, num_attention_heads=H,
                      num_key_value_heads=Hkv, attention_bias=bias, mlp_bias=bias,
                      rms_norm_eps=1e-5, rope_theta=theta)
        m = LlamaDecoderLayer(c, 0).eval()
        gf.randomize(m, g)
        with torch.no_grad():  # gf.randomize gives "norm" weights ~1 by name; these are too
            m.input_layernorm.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
            m.post_attention_layernorm.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
        x = torch.randn(B, T, E, generator=g)
        pos = positions(g, B, T, 500)
        cs = LlamaRotaryEmbedding(c)(x, pos)
        out = m(x, attention_mask=causal_mask(B, T), position_ids=pos, position_embeddings=cs)
        out = out[0] if isinstance(out, tuple) else out
        W.emit("llama_decoder_layer",
               {"hidden_states": x, "position_ids": pos.contiguous(), **gf.params(m)},
               llama_attrs(c), {"out": out.detach()}, tol="1e-5")

    gen_llama_bwd_ops(W)


# ------------------------------------------------------------------------------------------
# 2b. backward cases
# ------------------------------------------------------------------------------------------
# the backward cases' tolerance (max|got - ref| <= tol * max(1, max|ref|) per tensor): the
# gradients agree with autograd's within 1.6e-6 of max(1, max|ref|) (measured, docs/llm.md)
BWD_TOL = "1e-5"


def il_perm(D):
    """perm[r] = the HF index of element r of a head in the interleaved (GGUF) layout: pair
    (2i, 2i + 1) holds (x[i], x[i + D/2])."""
    return torch.tensor([(r % 2) * (D // 2) + r // 2 for r in range(D)])


def il_rows(t, heads, D):
    """Rows of a q_proj / k_proj weight (or bias) as GGUF converters store them: row 2i + j of
    each head is HF's row j*D/2 + i."""
    idx = torch.cat([h * D + il_perm(D) for h in range(heads)])
    return t[idx].contiguous()


def il_params(P, prefix, c):
    """The q_proj / k_proj tensors of P under prefix permuted to the interleaved layout."""
    D = c.head_dim
    out = dict(P)
    for name, heads in (("q_proj", c.num_attention_heads), ("k_proj", c.num_key_value_heads)):
        for kind in ("weight", "bias"):
            key = f"{prefix}{name}.{kind}"
            if key in out:
                out[key] = il_rows(out[key], heads, D)
    return out


def gen_llama_bwd_ops(W):
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import (LlamaAttention, LlamaDecoderLayer,
                                                          LlamaMLP, LlamaRMSNorm,
                                                          LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)
    import gen_fixtures as gf

    g = gen("rms_norm_bwd")
    for shape, eps, s in (((2, 5, 32), 1e-5, 1.0), ((7, 48), 1e-6, 30.0),
                          ((2, 3, 4, 16), 1e-5, 0.01)):
        E = shape[-1]
        m = LlamaRMSNorm(E, eps=eps)
        with torch.no_grad():
            m.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
        x = gf.leaf(s * torch.randn(*shape, generator=g))
        gf.emit_backward(W, g, "rms_norm", {"hidden_states": x, "weight": m.weight},
                         {"hidden_size": E, "eps": eps}, m(x),
                         {"hidden_states": x, "weight": m.weight}, tol=BWD_TOL)

    g = gen("rotary_embedding_bwd")
    for B, H, Hkv, T, D, theta, spread, il in ((2, 4, 2, 6, 16, 1e4, 5000, False),
                                              (1, 3, 1, 5, 64, 1e5, 8000, True)):
        c = op_config(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=Hkv,
                      rope_theta=theta)
        q = gf.leaf(torch.randn(B, H, T, D, generator=g))
        k = gf.leaf(torch.randn(B, Hkv, T, D, generator=g))
        pos = positions(g, B, T, spread)
        p = il_perm(D)
        inv = torch.argsort(p)
        # interleaved: the rows in the GGUF layout, rotated as HF rotates its own layout
        qh, kh = (q[..., inv], k[..., inv]) if il else (q, k)
        cos, sin = LlamaRotaryEmbedding(c)(qh, pos)
        qe, ke = apply_rotary_pos_emb(qh, kh, cos, sin)
        if il:
            qe, ke = qe[..., p], ke[..., p]
        gout = torch.randn(tuple(qe.shape), generator=g)
        gk = torch.randn(tuple(ke.shape), generator=g)
        torch.autograd.backward([qe, ke], [gout, gk])
        W.emit_bwd("rotary_embedding",
                   {"q": q.detach(), "k": k.detach(), "position_ids": pos, "grad.out": gout,
                    "grad.k_embed": gk},
                   {"rope_theta": theta, "rope_interleaved": il},
                   {"out": qe.detach(), "k_embed": ke.detach(), "grad.q": q.grad.clone(),
                    "grad.k": k.grad.clone()}, tol=BWD_TOL)

    g = gen("llama_mlp_bwd")
    for shape, F, bias in (((2, 5, 32), 48, False), ((6, 32), 80, True)):
        c = op_config(hidden_size=shape[-1], intermediate_size=F, num_attention_heads=4,
                      mlp_bias=bias)
        m = gf.randomize(LlamaMLP(c), g)
        x = gf.leaf(torch.randn(*shape, generator=g))
        gf.emit_backward(W, g, "llama_mlp", {"x": x, **gf.params(m)},
                         llama_attrs(c, attn=False), m(x), {"x": x}, [(m, "")], tol=BWD_TOL)

    g = gen("llama_attention_bwd")
    for B, T, E, H, Hkv, D, bias, theta, pos_given, il in (
            (2, 9, 32, 4, 2, None, False, 1e4, True, False),
            (1, 13, 32, 4, 1, 16, True, 1e5, True, False),
            (2, 40, 32, 4, 2, None, True, 1e4, False, True),
            (1, 70, 48, 6, 2, None, False, 1e4, False, False)):
        c = op_config(hidden_size=E, intermediate_size=16, num_attention_heads=H,
                      num_key_value_heads=Hkv, head_dim=D, attention_bias=bias,
                      rope_theta=theta)
        m = gf.randomize(LlamaAttention(c, 0), g).eval()
        x = gf.leaf(torch.randn(B, T, E, generator=g))
        pos = positions(g, B, T, 1000) if pos_given else torch.arange(T)[None].expand(B, T)
        cs = LlamaRotaryEmbedding(c)(x, pos)
        out = m(x, position_embeddings=cs, attention_mask=causal_mask(B, T))[0]
        inputs = {"hidden_states": x, **gf.params(m)}
        if pos_given:
            inputs["position_ids"] = pos.contiguous()
        attrs = llama_attrs(c, mlp=False)
        if not il:
            gf.emit_backward(W, g, "llama_attention", inputs, attrs, out, {"hidden_states": x},
                             [(m, "")], tol=BWD_TOL)
            continue
        # the GGUF layout: q/k rows permuted in the file, their gradients permuted alike
        gout = torch.randn(tuple(out.shape), generator=g)
        out.backward(gout)
        grads = {"grad." + n: p.grad.detach().clone() for n, p in m.named_parameters()}
        attrs["rope_interleaved"] = True
        W.emit_bwd("llama_attention",
                   {**il_params({n: t.detach() for n, t in inputs.items()}, "", c),
                    "grad.out": gout},
                   attrs, {"out": out.detach(), "grad.hidden_states": x.grad.clone(),
                           **il_params(grads, "grad.", c)}, tol=BWD_TOL)

    g = gen("llama_decoder_layer_bwd")
    for B, T, E, H, Hkv, F, bias, theta in ((2, 8, 32, 4, 2, 48, False, 1e4),
                                            (1, 40, 32, 2, 1, 64, True, 1e5)):
        c = op_config(hidden_size=E, intermediate_size=F, num_attention_heads=H,
                      num_key_value_heads=Hkv, attention_bias=bias, mlp_bias=bias,
                      rms_norm_eps=1e-5, rope_theta=theta)
        m = LlamaDecoderLayer(c, 0).eval()
        gf.randomize(m, g)
        with torch.no_grad():
            m.input_layernorm.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
            m.post_attention_layernorm.weight.copy_(1.0 + 0.3 * torch.randn(E, generator=g))
        x = gf.leaf(torch.randn(B, T, E, generator=g))
        pos = positions(g, B, T, 500)
        cs = LlamaRotaryEmbedding(c)(x, pos)
        out = m(x, attention_mask=causal_mask(B, T), position_ids=pos, position_embeddings=cs)
        out = out[0] if isinstance(out, tuple) else out
        gf.emit_backward(W, g, "llama_decoder_layer",
                         {"hidden_states": x, "position_ids": pos.contiguous(), **gf.params(m)},
                         llama_attrs(c), out, {"hidden_states": x}, [(m, "")], tol=BWD_TOL)

    g = gen("llama_for_causal_lm_bwd")
    for B, T, V, E, H, Hkv, F, nl, tied, bias, labels, il in (
            (2, 9, 64, 32, 4, 2, 48, 2, True, False, True, False),
            (1, 24, 80, 32, 4, 1, 64, 2, False, True, True, False),
            (2, 13, 64, 32, 2, 2, 40, 1, False, False, False, False),
            (1, 20, 48, 32, 4, 2, 48, 2, True, False, True, True)):
        from transformers import LlamaConfig
        c = LlamaConfig(vocab_size=V, hidden_size=E, intermediate_size=F,
                        num_hidden_layers=nl, num_attention_heads=H, num_key_value_heads=Hkv,
                        max_position_embeddings=64, rms_norm_eps=1e-5,
                        rope_parameters={"rope_type": "default", "rope_theta": 1e4},
                        tie_word_embeddings=tied, attention_bias=bias, mlp_bias=bias,
                        attn_implementation="eager", bos_token_id=None, eos_token_id=None,
                        pad_token_id=None)
        torch.manual_seed(0)
        model = LlamaForCausalLM(c).eval()
        randomize_llama(model, g)
        ids = torch.randint(0, V, (B, T), generator=g)
        ids[0, -1] = ids[0, 0]  # a repeated token: its embedding gradient is a sum
        attrs = llama_attrs(c)
        attrs.update(vocab_size=V, num_hidden_layers=nl, max_position_embeddings=64,
                     tie_word_embeddings=tied)
        inputs = {"input_ids": ids}
        if labels:
            lab = torch.randint(0, V, (B, T), generator=g)
            lab[0, T // 2] = -100  # an ignored label
            r = model(ids, labels=lab)
            out, extra = r.loss, {"logits": r.logits.detach()}
            inputs["labels"] = lab
        else:
            out, extra = model(ids).logits, {}
        gout = torch.randn(tuple(out.shape), generator=g)
        out.backward(gout)
        P = {n: t.detach().clone() for n, t in model.state_dict().items()}
        if tied:
            P.pop("lm_head.weight", None)
        grads = {"grad." + n: p.grad.detach().clone() for n, p in model.named_parameters()}
        if il:
            attrs["rope_interleaved"] = True
            for i in range(nl):
                P = il_params(P, f"model.layers.{i}.self_attn.", c)
                grads = il_params(grads, f"grad.model.layers.{i}.self_attn.", c)
        W.emit_bwd("llama_for_causal_lm", {**inputs, **P, "grad.out": gout}, attrs,
                   {"out": out.detach().clone(), **extra, **grads}, tol=BWD_TOL)


def is_op_case(name):
    """name is a case of one of LLAMA_OPS: <op>_<k> or <op>_bwd_<k>."""
    for op in LLAMA_OPS:
        for pre in (op + "_", op + "_bwd_"):
            if name.startswith(pre) and name[len(pre):].split(".")[0].isdigit():
                return True
    return False


def write_ops():
    import gen_fixtures as gf
    for f in os.listdir(FIX):
        if f.endswith(".safetensors") and is_op_case(f):
            os.remove(os.path.join(FIX, f))
    W = gf.Writer(FIX)
    gen_llama_ops(W)
    path = os.path.join(FIX, "MANIFEST.txt")
    with open(path) as f:
        cases = [c for c in f.read().split("\n") if c]
    cases = [c for c in cases if not is_op_case(c)]
    with open(path, "w") as f:
        f.write("\n".join(cases + W.cases) + "\n")
    for op in W.count:
        print(f"{op:32s} {W.count[op]:3d} cases")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", action="store_true")
    ap.add_argument("--ops", action="store_true")
    args = ap.parse_args()
    both = not args.models and not args.ops
    if both or args.models:
        gen_models()
        gen_sampler()
    if both or args.ops:
        write_ops()


if __name__ == "__main__":
    main()
