"""Whole models: SentenceEncoder (attn_bert_*) and LLM (attn_llm_*, attn_bpe_*,
attn_chat_format).  Each object holds its loaded model (read-only, shared by every Python
thread, each calling with its own context); an LLM generation holds its own session."""
from __future__ import annotations

import ctypes
import json
import operator
import os
import threading
from ctypes import byref, c_char_p, c_int32, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _lib

PathLike = Union[str, "os.PathLike[str]"]


def _path(p: PathLike) -> bytes:
    p = os.fspath(p)
    if not os.path.exists(p):
        raise FileNotFoundError(f"attn: {p} does not exist")
    return os.fsencode(p)


def _int(name: str, v: object, lo: int, hi: int) -> int:
    """v as an int in [lo, hi]: an integer (Python or numpy; bool and float refused), else
    TypeError; outside the range, ValueError."""
    if isinstance(v, bool):
        raise TypeError(f"attn: {name} must be an integer, not a bool")
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError(f"attn: {name} must be an integer, not {type(v).__name__}") from None
    if not lo <= i <= hi:
        raise ValueError(f"attn: {name} = {i} is outside [{lo}, {hi}]")
    return i


def _token_ids(name: str, ids: Sequence[int], vocab: int) -> List[int]:
    """ids as a list of ints in [0, vocab): each checked here (a C int32 would wrap a larger
    Python int silently)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"attn: {name} must be a sequence of token ids, not {type(ids).__name__}")
    out = []
    for i, t in enumerate(ids):
        if isinstance(t, bool):
            raise TypeError(f"attn: {name}[{i}] must be an integer, not a bool")
        try:
            v = operator.index(t)
        except TypeError:
            raise TypeError(f"attn: {name}[{i}] must be an integer token id, not "
                            f"{type(t).__name__}") from None
        if not 0 <= v < vocab:
            raise ValueError(f"attn: {name}[{i}] = {v} is not a token id of this model "
                             f"(0 to {vocab - 1})")
        out.append(v)
    return out


_BERT_DTYPES = {"f32": _lib.ATTN_F32, "f16": _lib.ATTN_F16, "bf16": _lib.ATTN_BF16}
_BERT_ALIASES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _bert_dtype(dtype: str) -> str:
    d = _BERT_ALIASES.get(dtype, dtype)
    if d not in _BERT_DTYPES:
        raise ValueError(f"attn: dtype must be 'f32', 'f16' or 'bf16', not {dtype!r}")
    return d


class SentenceEncoder:
    """Sentence embeddings of a sentence-transformers / Hugging Face BERT folder
    (config.json, model.safetensors, vocab.txt, optional modules.json and pooling config),
    as ``sentence_transformers.SentenceTransformer(folder).encode``."""

    def __init__(self, folder: PathLike, dtype: str = "f32"):
        path = _path(folder)
        self._path = path
        self._dtype = _bert_dtype(dtype)
        self._ptr = self._load(self._dtype)
        self._free = _lib.attn_bert_free
        self._others: Dict[str, c_void_p] = {}  # the model in other dtypes (encode's dtype=)
        self._lock = threading.Lock()
        info = _lib.BertInfo()
        _lib.attn_bert_get_info(self._ptr, byref(info))
        self.info: Dict[str, object] = {name: getattr(info, name) for name, _ in info._fields_}
        self.dim = int(info.hidden_size)
        self.max_seq_length = int(info.max_seq_length)

    def _load(self, dtype: str) -> c_void_p:
        c = _lib.ctx()
        ptr = c_void_p()
        _lib.check(_lib.attn_bert_load(c, self._path, byref(ptr)), c)
        if dtype != "f32":
            st = _lib.attn_bert_set_dtype(c, ptr, _BERT_DTYPES[dtype])
            if st != 0:
                msg = _lib.attn_ctx_errmsg(c)
                _lib.attn_bert_free(ptr)
                raise _lib.error(st, msg.decode("utf-8", "replace") if msg else None)
        return ptr

    def _model(self, dtype: Optional[str]) -> c_void_p:
        """The model computing in dtype: the constructor's, or a copy loaded on first use
        (models are read-only once shared, so another dtype is another copy)."""
        if dtype is None:
            return self._ptr
        dtype = _bert_dtype(dtype)
        if dtype == self._dtype:
            return self._ptr
        with self._lock:
            if dtype not in self._others:
                self._others[dtype] = self._load(dtype)
            return self._others[dtype]

    @property
    def dtype(self) -> str:
        return self._dtype

    def __del__(self):
        if getattr(self, "_ptr", None):
            self._free(self._ptr)
            self._ptr = None
        for p in getattr(self, "_others", {}).values():
            self._free(p)
        if getattr(self, "_others", None):
            self._others.clear()

    def tokenize(self, text: str) -> List[int]:
        """Token ids of one text with [CLS] and [SEP], truncated to max_seq_length."""
        c = _lib.ctx()
        n = c_int64()
        cap = self.max_seq_length
        ids = (c_int32 * cap)()
        _lib.check(_lib.attn_bert_tokenize(c, self._ptr, text.encode("utf-8"), ids, cap,
                                           byref(n)), c)
        return list(ids[:min(n.value, cap)])

    def encode(self, sentences: Union[str, Sequence[str]], batch_size: int = 32,
               normalize_embeddings: bool = False, dtype: Optional[str] = None) -> np.ndarray:
        """Embeddings ``[n, dim]`` float32 (``[dim]`` for one string), as
        sentence-transformers' ``encode``; the rows come back in the order of ``sentences``.
        The library sorts the texts of a call by their number of tokens and runs them 32 at a
        time, a batch's tokens packed back to back (no padding computed); a text's embedding
        has the same bits whatever the other texts.  The texts, sorted by length, go to it in
        calls of ``max(batch_size, 1024)`` (of ``batch_size`` when it is below 32, which then
        also bounds the library's batches): fewer calls (1.07-1.25x the sentences per second
        when the library still padded its batches, which then held texts of nearly equal
        lengths).
        dtype: "f32" (default: the constructor's), "f16" or "bf16" for the encoder's matrix
        products (attn_bert_set_dtype: faster or smaller, less accurate)."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"attn: sentences[{i}] is a {type(t).__name__}, not a str")
        if batch_size < 1:
            raise ValueError("attn: batch_size must be >= 1")
        model = self._model(dtype)
        n = len(texts)
        out = np.empty((n, self.dim), dtype=np.float32)
        data = [t.encode("utf-8") for t in texts]
        order = sorted(range(n), key=lambda i: -len(data[i]))
        per_call = batch_size if batch_size < 32 else max(batch_size, 1024)
        buf = np.empty((min(per_call, n), self.dim), dtype=np.float32)
        c = _lib.ctx()
        for i in range(0, n, per_call):
            idx = order[i:i + per_call]
            arr = (c_char_p * len(idx))(*[data[j] for j in idx])
            _lib.check(_lib.attn_bert_embed(c, model, arr, len(idx), buf.ctypes.data), c)
            out[idx] = buf[:len(idx)]
        if normalize_embeddings:
            norm = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.maximum(norm, 1e-12)
        return out[0] if single else out


class LLM:
    """A Llama-architecture language model: a GGUF file (quantized matrices read in place) or
    a Hugging Face folder, with its tokenizer and chat template.

    ``generate`` yields text pieces as they are decoded; ``chat`` formats a conversation with
    the model's template (ChatML, Qwen, Gemma, Llama 3, Mistral) and generates the reply."""

    def __init__(self, path: PathLike, *, dequantize: bool = False,
                 context_length: Optional[int] = None, kv_cache: str = "float32",
                 mmap: bool = False, vocab_only: bool = False, activations: str = "auto"):
        """A GGUF file is read into memory (huge pages on Linux: generation streams the
        matrices faster), and may then change; mmap=True maps it instead (faster to load, pages
        shared between processes, but a mapped file truncated while in use kills the process
        with SIGBUS, as with every memory-mapped reader).  vocab_only=True reads the tokenizer,
        chat template and special ids alone, of any architecture (tokenize, detokenize,
        format_chat work; generating raises).  activations: the precision of the activations
        in the quantized matrix-vector products (decoding): "auto" (the default: "int16"
        where the CPU has its kernels, x86 with AVX2, else "float32"), "float32" (exact: the
        dequantized weights' product to float rounding), "int16" (rounded to 2^-16 of each
        block of 32; 1.1-1.3x faster decoding on x86, logits within ~1e-3 of the exact ones)
        or "int8" (llama.cpp's precision; attn.h ATTN_QACT_*)."""
        if not isinstance(mmap, bool):
            raise TypeError(f"attn.LLM: mmap must be True or False, not {mmap!r}")
        if not isinstance(vocab_only, bool):
            raise TypeError(f"attn.LLM: vocab_only must be True or False, not {vocab_only!r}")
        if context_length is not None:
            context_length = _int("context_length", context_length, 1, 2**31 - 1)
        if kv_cache not in ("float32", "bfloat16"):
            raise ValueError("attn: kv_cache is 'float32' or 'bfloat16'")
        acts = {"auto": 0, "float32": 1, "int8": 2, "int16": 3}  # ATTN_QACT_*
        if activations not in acts:
            raise ValueError("attn: activations is 'auto', 'float32', 'int16' or 'int8'")
        p = _path(path)
        c = _lib.ctx()
        ptr = c_void_p()
        # ATTN_LLM_LOAD_F32, _VOCAB_ONLY, _MMAP
        flags = (1 if dequantize else 0) | (4 if vocab_only else 0) | (8 if mmap else 0)
        _lib.check(_lib.attn_llm_load(c, p, flags, byref(ptr)), c)
        self._ptr = ptr
        self._free = _lib.attn_llm_free
        if activations != "auto":
            _lib.check(_lib.attn_llm_set_activations(ptr, acts[activations]), c)
        self._bpe = _lib.attn_llm_tokenizer(ptr)
        sp = _lib.LlmSpecial()
        _lib.attn_llm_get_special(ptr, byref(sp))
        self.bos, self.eos, self.eot, self.add_bos = sp.bos, sp.eos, sp.eot, bool(sp.add_bos)
        tmpl = _lib.attn_llm_chat_template(ptr)
        self.chat_template: Optional[str] = tmpl.decode("utf-8", "replace") if tmpl else None
        self.vocab_size = int(_lib.attn_bpe_vocab_size(self._bpe)) if self._bpe else 0
        cfg = _lib.LlmConfig()
        _lib.attn_llm_get_info(ptr, byref(cfg))
        self.config: Dict[str, object] = {n: getattr(cfg, n) for n, _ in cfg._fields_}
        self._context_length = context_length
        self._cache_dtype = _lib.ATTN_F32 if kv_cache == "float32" else _lib.ATTN_BF16

    def __del__(self):
        if getattr(self, "_ptr", None):
            self._free(self._ptr)
            self._ptr = None

    def _need_tokenizer(self):
        if not self._bpe:
            raise ValueError("attn: this model has no tokenizer")

    def tokenize(self, text: str, *, add_bos: Optional[bool] = None,
                 parse_special: bool = True) -> List[int]:
        """Token ids of text (BOS first when the model asks for it, or add_bos=True).
        parse_special: control tokens written in the text ("<|im_end|>") become their ids."""
        self._need_tokenizer()
        data = text.encode("utf-8")
        c = _lib.ctx()
        n = c_int64()
        flags = 1 if parse_special else 0
        _lib.check(_lib.attn_bpe_encode(c, self._bpe, data, len(data), flags, None, 0,
                                        byref(n)), c)
        ids = (c_int32 * max(n.value, 1))()
        _lib.check(_lib.attn_bpe_encode(c, self._bpe, data, len(data), flags, ids, n.value,
                                        byref(n)), c)
        out = list(ids[:n.value])
        if (self.add_bos if add_bos is None else add_bos) and self.bos >= 0:
            out.insert(0, self.bos)
        return out

    def detokenize(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        """The text of ids (invalid UTF-8 shown as U+FFFD)."""
        self._need_tokenizer()
        ids = _token_ids("ids", ids, self.vocab_size)
        arr = (c_int32 * max(len(ids), 1))(*ids)
        c = _lib.ctx()
        n = c_size_t()
        flags = 2 if skip_special else 0
        _lib.check(_lib.attn_bpe_decode(c, self._bpe, arr, len(ids), flags, None, 0, byref(n)),
                   c)
        buf = ctypes.create_string_buffer(n.value + 1)
        _lib.check(_lib.attn_bpe_decode(c, self._bpe, arr, len(ids), flags, buf, n.value + 1,
                                        byref(n)), c)
        return buf.raw[:n.value].decode("utf-8", "replace")

    def generate_ids(self, prompt_ids: Sequence[int], max_tokens: int = 128,
                     temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                     seed: int = 0, *, min_p: float = 0.0, repetition_penalty: float = 1.0,
                     presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                     stop_at_end: bool = True) -> Iterator[int]:
        """The generated ids one by one (temperature 0: greedy).  Sampling follows Hugging
        Face's logits processors (attn_llm_sample); the same seed gives the same tokens.
        presence_penalty and frequency_penalty are OpenAI's: each logit minus
        frequency_penalty times the count of its token among the ids generated so far (the
        prompt not counted), minus presence_penalty when that count is not 0.
        Stops after max_tokens, at an end token (eos / end of turn) unless stop_at_end is
        False, or when the context is full."""
        prompt = _token_ids("prompt_ids", prompt_ids, self._vocab_logits())
        if not prompt:
            raise ValueError("attn: the prompt has no tokens")
        max_tokens = _int("max_tokens", max_tokens, 0, 2**31 - 1)
        top_k = _int("top_k", top_k, 0, 2**31 - 1)
        seed = _int("seed", seed, 0, 2**64 - 1)
        info_cap = self._capacity(len(prompt) + max_tokens)
        sampler = _lib.attn_llm_sampler_defaults()
        sampler.temperature = float(temperature)
        sampler.top_k = top_k
        sampler.top_p = float(top_p)
        sampler.min_p = float(min_p)
        sampler.repetition_penalty = float(repetition_penalty)
        sampler.presence_penalty = float(presence_penalty)
        sampler.frequency_penalty = float(frequency_penalty)
        sampler.seed = seed
        c = _lib.ctx()
        sess = c_void_p()
        _lib.check(_lib.attn_llm_session_create(c, self._ptr, info_cap, self._cache_dtype,
                                                byref(sess)), c)
        try:
            V = self._vocab_logits()
            logits = np.empty(V, dtype=np.float32)
            history = list(prompt)
            ids = (c_int32 * len(prompt))(*prompt)
            c = _lib.ctx()
            _lib.check(_lib.attn_llm_session_prefill(c, sess, ids, len(prompt),
                                                     logits.ctypes.data), c)
            step = c_uint64(0)
            out = c_int32()
            for i in range(max_tokens):
                c = _lib.ctx()  # the thread resuming the generator may differ
                hist = (c_int32 * len(history))(*history)
                _lib.check(_lib.attn_llm_sample_ex(c, byref(sampler), logits.ctypes.data, V,
                                                   hist, len(history), len(prompt),
                                                   byref(step), byref(out)), c)
                tok = out.value
                if stop_at_end and _lib.attn_llm_is_end(self._ptr, tok):
                    return
                yield tok
                history.append(tok)
                if i + 1 == max_tokens or len(history) >= info_cap:
                    return
                _lib.check(_lib.attn_llm_session_decode(c, sess, tok, logits.ctypes.data), c)
        finally:
            _lib.attn_llm_session_free(sess)

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 **kwargs) -> Iterator[str]:
        """Text pieces of the continuation of prompt (a string, tokenized with BOS when the
        model asks for it, or token ids), as they are decoded: only whole UTF-8 characters
        come out.  Options as generate_ids."""
        self._need_tokenizer()
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        state = _lib.BpeStream()
        cap = 64
        buf = ctypes.create_string_buffer(cap)
        n = c_size_t()
        for tok in self.generate_ids(ids, max_tokens, temperature, top_k, top_p, seed,
                                     **kwargs):
            c = _lib.ctx()
            # skip special tokens (2); the tokens continue the prompt (4): no space dropped
            st = _lib.attn_bpe_decode_stream(c, self._bpe, byref(state), tok, 6, buf, cap,
                                             byref(n))
            if st == 1 and n.value >= cap:  # too small: grow and retry
                cap = n.value + 1
                buf = ctypes.create_string_buffer(cap)
                st = _lib.attn_bpe_decode_stream(c, self._bpe, byref(state), tok, 6, buf, cap,
                                                 byref(n))
            _lib.check(st, c)
            if n.value:
                yield buf.raw[:n.value].decode("utf-8", "replace")
        c = _lib.ctx()
        _lib.check(_lib.attn_bpe_decode_stream_end(c, byref(state), buf, cap, byref(n)), c)
        if n.value:
            yield buf.raw[:n.value].decode("utf-8", "replace")

    def set_chat_template(self, template: str) -> None:
        """Uses template instead of the model's own: a chat template's Jinja text, which must
        be one attn recognises (attn_llm_set_chat_template), else AttnError and the model keeps
        its own; or a format's name, for a model file without a template: "gemma2", "gemma3",
        "llama3", "llama3.2", "mistral-v3", "mistral-nemo", "mistral-v7", "qwen3"
        (attn_chat_template_named: formatted as the published template)."""
        if not isinstance(template, str):
            raise TypeError(f"attn.LLM.set_chat_template: a str, not {type(template).__name__}")
        named = _lib.attn_chat_template_named(template.encode("utf-8"))
        text = named if named else template.encode("utf-8")
        c = _lib.ctx()
        _lib.check(_lib.attn_llm_set_chat_template(c, self._ptr, text), c)
        self.chat_template = text.decode("utf-8")

    def format_chat(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool = True,
                    *, tools: Optional[Sequence[Dict[str, Any]]] = None,
                    enable_thinking: Optional[bool] = None) -> str:
        """The conversation as the model's chat template writes it (transformers'
        apply_chat_template(..., tokenize=False, tools=..., enable_thinking=...)): ChatML,
        Qwen2.5/3, Gemma, Llama 3 and Mistral templates (attn_llm_chat_apply).  A message may
        carry "tool_calls" (a list, as transformers takes it), "tool_call_id" and
        "reasoning_content"; tools: the tool definitions (a list of dicts)."""
        if not self.chat_template:
            raise ValueError("attn: the model has no chat template")

        def enc(v: Any) -> Optional[bytes]:
            if v is None:
                return None
            return (v if isinstance(v, str) else json.dumps(v)).encode("utf-8")

        keep = [tuple(enc(m.get(k)) for k in ("role", "content", "reasoning_content",
                                              "tool_calls", "tool_call_id"))
                for m in messages]
        arr = (_lib.ChatMessage * max(len(keep), 1))()
        for i, fields in enumerate(keep):
            arr[i].role, arr[i].content, arr[i].reasoning_content = fields[:3]
            arr[i].tool_calls, arr[i].tool_call_id = fields[3:]
        opt = _lib.ChatOptions()
        opt.add_generation_prompt = int(add_generation_prompt)
        opt.thinking = 0 if enable_thinking is None else 1 if enable_thinking else 2
        tools_text = None if tools is None else json.dumps(list(tools)).encode("utf-8")
        opt.tools = tools_text
        c = _lib.ctx()
        n = c_size_t()
        _lib.check(_lib.attn_llm_chat_apply(c, self._ptr, arr, len(keep), byref(opt), None, 0,
                                            byref(n)), c)
        buf = ctypes.create_string_buffer(n.value + 1)
        _lib.check(_lib.attn_llm_chat_apply(c, self._ptr, arr, len(keep), byref(opt), buf,
                                            n.value + 1, byref(n)), c)
        return buf.raw[:n.value].decode("utf-8")

    def chat(self, messages: Sequence[Dict[str, Any]], max_tokens: int = 256, *,
             stream: bool = False, tools: Optional[Sequence[Dict[str, Any]]] = None,
             enable_thinking: Optional[bool] = None, **kwargs) -> Union[str, Iterator[str]]:
        """The assistant's reply to messages ([{"role": ..., "content": ...}, ...]): the whole
        text, or its pieces with stream=True.  tools and enable_thinking as format_chat;
        the other options as generate."""
        text = self.format_chat(messages, add_generation_prompt=True, tools=tools,
                                enable_thinking=enable_thinking)
        # the template writes its own bos, as transformers tokenizes it (no bos added)
        pieces = self.generate(self.tokenize(text, add_bos=False), max_tokens, **kwargs)
        return pieces if stream else "".join(pieces)

    def logits(self, ids) -> np.ndarray:
        """The next-token logits of every position (attn_llm_forward, no cache): ids [T] gives
        [T, V], ids [B, T] (equal lengths) gives [B, T, V]; float32, the same numbers as
        transformers' model(ids).logits on the same weights."""
        a = np.asarray(ids)
        if a.ndim not in (1, 2) or a.size == 0:
            raise ValueError("attn: ids must be a non-empty [T] or [B, T] sequence of token ids")
        rows = a.reshape(1, -1) if a.ndim == 1 else a
        V = self._vocab_logits()
        flat = _token_ids("ids", rows.reshape(-1).tolist(), V)
        B, T = rows.shape
        out = np.empty((B, T, V), dtype=np.float32)
        arr = (c_int32 * len(flat))(*flat)
        c = _lib.ctx()
        _lib.check(_lib.attn_llm_forward(c, self._ptr, arr, B, T, out.ctypes.data), c)
        return out[0] if a.ndim == 1 else out

    def perplexity(self, text: Union[str, Sequence[int]], ctx: int = 512,
                   chunks: int = 0) -> Dict[str, float]:
        """Perplexity of a text (or its token ids, BOS first where the model adds one) with
        llama.cpp's method, as `attn perplexity` (attn_llm_perplexity): chunks of ctx tokens,
        each run alone, the second half of each scored; chunks > 0: the first ones only.
        Returns {"ppl", "err", "nll", "tokens", "chunks"}."""
        ids = self.tokenize(text) if isinstance(text, str) else list(text)
        flat = _token_ids("ids", ids, self._vocab_logits())
        ctx = _int("ctx", ctx, 3, 2**31 - 1)
        chunks = _int("chunks", chunks, 0, 2**62)
        r = _lib.LlmPpl()
        c = _lib.ctx()
        _lib.check(_lib.attn_llm_perplexity(c, self._ptr, (c_int32 * max(len(flat), 1))(*flat),
                                            len(flat), ctx, chunks, None, None, byref(r)), c)
        return {"ppl": r.ppl, "err": r.err, "nll": r.nll, "tokens": r.count,
                "chunks": r.chunks}

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_tokens: int = 128, *,
                       stop_at_end: bool = True) -> List[List[int]]:
        """Greedy continuations of several prompts (token ids) decoded together: one batched
        step per token for every unfinished sequence (attn_llm_session_decode_batch: each
        weight read once for the batch), each continuation the same as generate_ids(prompt,
        temperature=0) alone.  A sequence stops after max_tokens, at an end token (unless
        stop_at_end is False) or when its context is full."""
        V = self._vocab_logits()
        ps = [_token_ids("prompts[%d]" % i, p, V) for i, p in enumerate(prompts)]
        if not ps or any(not p for p in ps):
            raise ValueError("attn: generate_batch needs prompts, each with tokens")
        max_tokens = _int("max_tokens", max_tokens, 0, 2**31 - 1)
        caps = [self._capacity(len(p) + max_tokens) for p in ps]
        sess = [c_void_p() for _ in ps]
        outs: List[List[int]] = [[] for _ in ps]
        logits = np.empty((len(ps), V), dtype=np.float32)
        try:
            c = _lib.ctx()
            for i, p in enumerate(ps):
                _lib.check(_lib.attn_llm_session_create(c, self._ptr, caps[i], self._cache_dtype,
                                                        byref(sess[i])), c)
            # every prompt in one attn_llm_session_prefill_batch (the weights read once)
            flat = [t for p in ps for t in p]
            _lib.check(_lib.attn_llm_session_prefill_batch(
                c, (c_void_p * len(ps))(*[s.value for s in sess]), (c_int32 * len(flat))(*flat),
                (c_int64 * len(ps))(*[len(p) for p in ps]), len(ps), logits.ctypes.data), c)
            live = list(range(len(ps)))
            row = {i: i for i in live}  # the logits row of each live sequence
            while live and max_tokens:
                nxt, keep = [], []
                for i in live:
                    tok = int(np.argmax(logits[row[i]]))
                    if stop_at_end and _lib.attn_llm_is_end(self._ptr, tok):
                        continue
                    outs[i].append(tok)
                    if len(outs[i]) < max_tokens and len(ps[i]) + len(outs[i]) < caps[i]:
                        keep.append(i)
                        nxt.append(tok)
                live = keep
                if not live:
                    break
                arr = (c_void_p * len(live))(*[sess[i].value for i in live])
                toks = (c_int32 * len(live))(*nxt)
                _lib.check(_lib.attn_llm_session_decode_batch(c, arr, toks, len(live),
                                                              logits.ctypes.data), c)
                row = {i: k for k, i in enumerate(live)}
        finally:
            for s in sess:
                if s:
                    _lib.attn_llm_session_free(s)
        return outs

    # --- sizes ------------------------------------------------------------------------------
    def _vocab_logits(self) -> int:
        return int(self.config["vocab_size"])

    def _capacity(self, want: int) -> int:
        cap = want if self._context_length is None else min(want, self._context_length)
        return max(1, min(cap, int(self.config["max_position_embeddings"])))
