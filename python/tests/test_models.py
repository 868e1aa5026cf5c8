"""SentenceEncoder and LLM on the committed tiny models (tests/fixtures)."""
import os

import numpy as np
import pytest

import attn

from conftest import FIXTURES, read_safetensors


def _bert_expected(path):
    cases = []
    text = ids = None
    with open(path) as f:
        for line in f:
            tag, _, rest = line.rstrip("\n").partition(" ")
            if tag == "T":
                text = bytes.fromhex(rest).decode("utf-8")
            elif tag == "I":
                v = [int(x) for x in rest.split()]
                ids = v[1:1 + v[0]]
            elif tag == "E":
                cases.append((text, ids, np.array([float(x) for x in rest.split()])))
    return cases


def test_sentence_encoder_matches_the_reference():
    enc = attn.SentenceEncoder(os.path.join(FIXTURES, "bert_tiny"))
    cases = _bert_expected(os.path.join(FIXTURES, "bert_tiny_expected.txt"))
    assert len(cases) > 5
    texts = [t for t, _, _ in cases]
    for t, ids, _ in cases:
        assert enc.tokenize(t) == ids
    for bs in (32, 3):
        emb = enc.encode(texts, batch_size=bs)
        assert emb.shape == (len(texts), enc.dim) and emb.dtype == np.float32
        want = np.stack([e for _, _, e in cases])
        assert np.max(np.abs(emb - want)) <= 1e-5
    one = enc.encode(texts[0], normalize_embeddings=True)
    assert one.shape == (enc.dim,)
    assert abs(np.linalg.norm(one) - 1) < 1e-5


def test_sentence_encoder_dtypes_and_order():
    enc = attn.SentenceEncoder(os.path.join(FIXTURES, "bert_tiny"))
    cases = _bert_expected(os.path.join(FIXTURES, "bert_tiny_expected.txt"))
    texts = [t for t, _, _ in cases]
    want = np.stack([e for _, _, e in cases])
    # the rows follow the order of the sentences whatever the batching (sorted inside)
    for bs in (1, 2, 5, 1000):
        assert np.max(np.abs(enc.encode(texts[::-1], batch_size=bs) - want[::-1])) <= 1e-5
    assert enc.encode([]).shape == (0, enc.dim)
    # a text's embedding depends on its batch only through float rounding (encode hands the
    # library large calls, which batch 32 texts at a time by token count; a batch's padded
    # length changes the order of a few sums): 600 texts in calls of 1 .. all
    many = [t + " " + "x" * (i % 7) for i, t in enumerate(texts * 12)]
    ref = enc.encode(many, batch_size=1)
    for bs in (3, 32, 40, 5000):
        assert np.max(np.abs(enc.encode(many, batch_size=bs) - ref)) <= 1e-6 * np.abs(ref).max()
    # f16 / bf16 matrix products (attn_bert_set_dtype): close to float32, on a second copy
    for dt, tol in (("f16", 5e-3), ("bf16", 2e-2)):
        got = enc.encode(texts, dtype=dt)
        assert got.dtype == np.float32 and np.max(np.abs(got - want)) <= tol * max(
            1.0, np.abs(want).max())
    assert np.max(np.abs(enc.encode(texts) - want)) <= 1e-5  # the f32 model is unchanged
    assert enc.dtype == "f32"
    bf = attn.SentenceEncoder(os.path.join(FIXTURES, "bert_tiny"), dtype="bfloat16")
    assert bf.dtype == "bf16"
    assert np.max(np.abs(bf.encode(texts) - want)) <= 2e-2 * max(1.0, np.abs(want).max())
    with pytest.raises(ValueError, match="dtype"):
        enc.encode(texts, dtype="int8")


def test_missing_model_folder():
    with pytest.raises(FileNotFoundError):
        attn.SentenceEncoder("/nonexistent/folder")
    with pytest.raises(attn.AttnError):
        attn.SentenceEncoder(FIXTURES)  # not a model folder


def test_llm_greedy_matches_transformers():
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    exp, _ = read_safetensors(os.path.join(FIXTURES, "llama_tiny_gguf_expected.safetensors"))
    prompt = [int(x) for x in exp["greedy_prompt"]]
    want = [int(x) for x in exp["greedy"]]
    got = list(llm.generate_ids(prompt, max_tokens=len(want), temperature=0,
                                stop_at_end=False))
    assert got == want


def test_llm_activations():
    # the quantized matrix-vector products on rounded activations: int16 within ~2^-16 of
    # each block's largest (the logits close to the float ones), int8 much further
    path = os.path.join(FIXTURES, "llama_tiny.gguf")
    ids = [1, 17, 42, 99, 7]
    ref = attn.LLM(path, activations="float32").logits(ids)
    scale = float(np.max(np.abs(ref)))
    for acts, lo, hi in (("float32", 0.0, 0.0), ("int16", 0.0, 1e-3), ("int8", 1e-4, 0.3)):
        got = attn.LLM(path, activations=acts).logits(ids)
        err = float(np.max(np.abs(got - ref))) / scale
        assert np.all(np.isfinite(got)) and lo <= err <= hi, (acts, err)
    # the default is int16 where the CPU has its kernels and float elsewhere: int16's bits
    # either way (int16 falls back to float where it has no kernels)
    np.testing.assert_array_equal(attn.LLM(path).logits(ids),
                                  attn.LLM(path, activations="int16").logits(ids))
    with pytest.raises(ValueError):
        attn.LLM(path, activations="int4")


def test_llm_penalties_against_numpy():
    """presence_penalty / frequency_penalty: greedy tokens equal the argmax of a numpy
    computation of OpenAI's formula on the model's logits (count over the generated ids only),
    compared while the reference's best two differ by more than 1e-3; and they change the
    answer."""
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    prompt = llm.tokenize("hello hello", add_bos=False)
    pres, freq, n = 0.8, 1.5, 16
    got = list(llm.generate_ids(prompt, max_tokens=n, temperature=0, presence_penalty=pres,
                                frequency_penalty=freq, stop_at_end=False))
    plain = list(llm.generate_ids(prompt, max_tokens=n, temperature=0, stop_at_end=False))
    assert got != plain
    gen, compared = [], 0
    for i in range(n):
        lg = llm.logits(prompt + gen)[-1].astype(np.float64)
        counts = np.bincount(np.array(gen, dtype=np.int64), minlength=lg.size) if gen else \
            np.zeros(lg.size, dtype=np.int64)
        lg = lg - (counts * freq + (counts > 0) * pres)
        top = np.sort(lg)[-2:]
        if top[1] - top[0] <= 1e-3:
            break
        assert got[i] == int(np.argmax(lg)), i
        gen.append(got[i])
        compared += 1
    assert compared >= 8


def test_llm_no_mmap(tmp_path):
    """The default reads the file: the same tokens as mapped, and the file may then be
    truncated."""
    import shutil
    copy = tmp_path / "m.gguf"
    shutil.copy(os.path.join(FIXTURES, "llama_tiny.gguf"), copy)
    exp, _ = read_safetensors(os.path.join(FIXTURES, "llama_tiny_gguf_expected.safetensors"))
    prompt = [int(x) for x in exp["greedy_prompt"]]
    want = [int(x) for x in exp["greedy"]]
    mapped = attn.LLM(copy, mmap=True)
    assert list(mapped.generate_ids(prompt, max_tokens=len(want), temperature=0,
                                    stop_at_end=False)) == want
    del mapped
    llm = attn.LLM(copy)
    with open(copy, "r+b") as f:
        f.truncate(100)
    got = list(llm.generate_ids(prompt, max_tokens=len(want), temperature=0,
                                stop_at_end=False))
    assert got == want
    with pytest.raises(TypeError):
        attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"), mmap="no")


def test_llm_text_side():
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    text = "Hello, wörld!"
    ids = llm.tokenize(text, add_bos=False)
    assert llm.detokenize(ids) == text
    pieces = list(llm.generate(text, max_tokens=12, temperature=0.8, top_k=20, top_p=0.9,
                               seed=3))
    again = list(llm.generate(text, max_tokens=12, temperature=0.8, top_k=20, top_p=0.9,
                              seed=3))
    assert pieces == again and all(isinstance(p, str) for p in pieces)
    gen_ids = list(llm.generate_ids(llm.tokenize(text), max_tokens=12, temperature=0.8,
                                    top_k=20, top_p=0.9, seed=3))
    assert "".join(pieces) == llm.detokenize(gen_ids, skip_special=True)
    with pytest.raises(ValueError):
        llm.generate_ids([], max_tokens=3).__next__()


@pytest.mark.parametrize("path", ["llama_tiny.gguf", "llama_tiny"])
def test_llm_chat(path):
    llm = attn.LLM(os.path.join(FIXTURES, path))
    msgs = [{"role": "user", "content": "Hi"}]
    if llm.chat_template is None:
        with pytest.raises(ValueError):
            llm.chat(msgs)
        return
    text = llm.format_chat(msgs)
    assert "Hi" in text
    reply = llm.chat(msgs, max_tokens=5, temperature=0)
    assert isinstance(reply, str)
    assert "".join(llm.chat(msgs, max_tokens=5, temperature=0, stream=True)) == reply


def test_llm_chat_template_tools_thinking():
    """Qwen3's template set on the tiny model: enable_thinking, tools and a tool call as
    transformers writes them (its tojson is json.dumps)."""
    import json
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    with open(os.path.join(FIXTURES, "chat", "templates", "qwen3.jinja"), encoding="utf-8") as f:
        qwen3 = f.read()
    with pytest.raises(attn.AttnError):
        llm.set_chat_template("{{ not a template }}")
    hi = [{"role": "user", "content": "hi"}]
    plain = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    llm.set_chat_template("qwen3")  # the format by name: the published template's text
    assert llm.chat_template == "{# attn chat format: qwen3 #}"
    assert llm.format_chat(hi, enable_thinking=False) == plain + "<think>\n\n</think>\n\n"
    with pytest.raises(TypeError):
        llm.set_chat_template(None)
    llm.set_chat_template(qwen3)
    assert llm.chat_template == qwen3
    assert llm.format_chat(hi) == plain
    assert llm.format_chat(hi, enable_thinking=True) == plain
    assert llm.format_chat(hi, enable_thinking=False) == plain + "<think>\n\n</think>\n\n"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"x": 0.5, "n": 1}}}
    call = [{"type": "function", "function": {"name": "f", "arguments": {"x": 1e16}}}]
    text = llm.format_chat(hi + [{"role": "assistant", "content": "", "tool_calls": call},
                                 {"role": "tool", "content": "7"}], tools=[tool])
    assert "<tools>\n" + json.dumps(tool) + "\n</tools>" in text
    assert '<tool_call>\n{"name": "f", "arguments": {"x": 1e+16}}\n</tool_call>' in text
    assert text.endswith("<tool_response>\n7\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n")


def test_llm_integer_arguments_are_checked():
    """Token ids beyond int32 are refused, not wrapped (2**32 + 104 was read as 104); counts
    and seeds must be integers in range (review round 3, F10)."""
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    assert llm.detokenize([104, 105]) == "hi"
    for bad in ([2**32 + 104, 105], [104, 2**40 + 105], [-1], [llm.vocab_size]):
        with pytest.raises(ValueError, match="not a token id"):
            llm.detokenize(bad)
        with pytest.raises(ValueError, match="not a token id"):
            list(llm.generate_ids(bad, max_tokens=1))
    for bad in ([104.0], ["h"], [True], [None]):
        with pytest.raises(TypeError):
            llm.detokenize(bad)
    with pytest.raises(TypeError):
        llm.detokenize("hi")
    with pytest.raises(ValueError, match="max_tokens"):
        list(llm.generate("hi", max_tokens=-1))
    with pytest.raises(ValueError, match="seed"):
        list(llm.generate("hi", max_tokens=2, seed=-1))
    with pytest.raises(TypeError, match="seed"):
        list(llm.generate("hi", max_tokens=2, seed=1.5))
    with pytest.raises(ValueError, match="top_k"):
        list(llm.generate("hi", max_tokens=2, top_k=-3))
    assert list(llm.generate_ids([104, 105], max_tokens=0)) == []
    # numpy integers are integers
    ids = list(llm.generate_ids(np.array([104, 105], dtype=np.int64), max_tokens=3,
                                temperature=0, seed=np.uint64(7)))
    assert ids == list(llm.generate_ids([104, 105], max_tokens=3, temperature=0, seed=7))
    for bad in (2.5, "2", None, True):
        with pytest.raises(TypeError):
            attn.set_num_threads(bad)
    with pytest.raises(ValueError):
        attn.set_num_threads(-1)
    attn.set_num_threads(np.int32(0))
    path = os.path.join(FIXTURES, "llama_tiny.gguf")
    for bad in (0, -1):
        with pytest.raises(ValueError, match="context_length"):
            attn.LLM(path, context_length=bad)
    with pytest.raises(TypeError, match="context_length"):
        attn.LLM(path, context_length=1.5)
    assert len(list(attn.LLM(path, context_length=4).generate_ids([104, 105], max_tokens=8,
                                                                   temperature=0))) == 2


def test_llm_vocab_only(tmp_path):
    """vocab_only: the tokenizer of any architecture (here the tiny llama renamed "gemma",
    which attn cannot run) gives the full model's ids; generating raises."""
    path = os.path.join(FIXTURES, "llama_tiny.gguf")
    data = open(path, "rb").read()
    i = data.index(b"general.architecture") + len("general.architecture") + 4 + 8
    assert data[i:i + 5] == b"llama"
    other = tmp_path / "other.gguf"
    other.write_bytes(data[:i] + b"gemma" + data[i + 5:])
    with pytest.raises(attn.AttnError, match="gemma"):
        attn.LLM(other)
    full, voc = attn.LLM(path), attn.LLM(other, vocab_only=True)
    text = "Hello, wörld! <|im_end|>"
    assert voc.tokenize(text) == full.tokenize(text)
    assert voc.detokenize(full.tokenize(text)) == text
    assert (voc.bos, voc.eos, voc.add_bos) == (full.bos, full.eos, full.add_bos)
    with pytest.raises(attn.AttnError, match="VOCAB_ONLY"):
        list(voc.generate("hi", max_tokens=2))
    with pytest.raises(TypeError):
        attn.LLM(path, vocab_only=1)


def test_llm_config_layout_matches_the_library():
    """attn_llm_get_info writes sizeof(attn_llm_config): the ctypes mirror must be as large
    (bytes after it are a canary), and the fields land where the names say."""
    import ctypes
    from attn import _lib
    llm = attn.LLM(os.path.join(FIXTURES, "llama_tiny.gguf"))
    n = ctypes.sizeof(_lib.LlmConfig)
    buf = (ctypes.c_ubyte * (n + 64))(*([0xA5] * (n + 64)))
    _lib.attn_llm_get_info(llm._ptr, ctypes.cast(buf, ctypes.POINTER(_lib.LlmConfig)))
    assert bytes(buf[n:]) == b"\xa5" * 64, "the library's attn_llm_config is larger than _lib's"
    cfg = _lib.LlmConfig.from_buffer(buf)
    assert cfg.vocab_size == llm.vocab_size and cfg.num_layers >= 1
    assert (cfg.qk_norm, cfg.sandwich_norm, cfg.mlp_act, cfg.sliding_window) == (0, 0, 0, 0)
    assert cfg.embed_scale == 0.0 and cfg.rope_theta_local == 0.0


@pytest.mark.parametrize("path", ["llama_tiny.gguf", "families/gemma3"])
def test_llm_perplexity(path):
    # llama.cpp's method, checked against logits() scored here in float64
    llm = attn.LLM(os.path.join(FIXTURES, path))
    V = llm.config["vocab_size"]
    ids = [(5 + 7 * i) % V for i in range(50)]
    r = llm.perplexity(ids, ctx=16)
    nll, n = 0.0, 0
    for k in range(3):
        part = list(ids[16 * k:16 * (k + 1)])
        if llm.add_bos and llm.bos >= 0:
            part[0] = llm.bos
        lg = llm.logits(part).astype(np.float64)
        for j in range(8, 15):
            row = lg[j]
            mx = row.max()
            nll += mx + np.log(np.exp(row - mx).sum()) - row[ids[16 * k + j + 1]]
            n += 1
    assert r["chunks"] == 3 and r["tokens"] == n
    assert abs(r["nll"] - nll) <= 1e-9 * nll and abs(r["ppl"] - np.exp(nll / n)) <= 1e-9 * r["ppl"]
    assert llm.perplexity(ids, ctx=16, chunks=1)["chunks"] == 1
    with pytest.raises(attn.AttnValueError):
        llm.perplexity(ids[:10], ctx=16)  # fewer than one chunk
    with pytest.raises(ValueError):
        llm.perplexity(ids, ctx=2)


@pytest.mark.parametrize("path", ["llama_tiny.gguf", "families/gemma3"])
def test_llm_logits_and_batch(path):
    llm = attn.LLM(os.path.join(FIXTURES, path))
    V = llm.config["vocab_size"]
    prompts = [[5, 9, 13, 2, 7], [40, 41], [3, 30, 33, 36, 39, 42, 45, 48, 51]]
    lg = llm.logits(prompts[0])
    assert lg.shape == (5, V) and lg.dtype == np.float32 and np.isfinite(lg).all()
    both = llm.logits([prompts[0], [1, 2, 3, 4, 5]])
    assert both.shape == (2, 5, V)
    assert np.array_equal(both[0], lg)  # a sequence's logits do not depend on the batch
    first = list(llm.generate_ids(prompts[0], max_tokens=1, temperature=0, stop_at_end=False))
    assert first == [int(np.argmax(lg[-1]))]
    got = llm.generate_batch(prompts, max_tokens=6, stop_at_end=False)
    for p, g in zip(prompts, got):
        alone = list(llm.generate_ids(p, max_tokens=6, temperature=0, stop_at_end=False))
        assert g == alone
    with pytest.raises(ValueError):
        llm.logits([])
    with pytest.raises(ValueError):
        llm.generate_batch([[1], []])
    with pytest.raises(ValueError):
        llm.logits([V])
