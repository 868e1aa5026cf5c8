"""The shared library, its C types, the per-thread contexts and the error translation.

Everything here is private; the public names are re-exported by ``attn/__init__.py``.

Contexts: attn's C contract is "one context per thread at a time" (attn.h, Conventions,
Threads).  The package keeps one context per Python thread (``threading.local``), created on
first use with the thread count of :func:`set_num_threads` (default: one per physical core the
process may run on) and freed when the thread ends.  ctypes releases the GIL during every
foreign call, so Python threads really run attn calls in parallel, each on its own context and
worker pool.
"""
from __future__ import annotations

import ctypes
import operator
import os
import sys
import threading
from ctypes import (POINTER, Structure, byref, c_char_p, c_double, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint64, c_void_p)
from typing import Optional

# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def _library_path() -> str:
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.platform == "win32":
        name = "attn.dll"
    elif sys.platform == "darwin":
        name = "libattn.dylib"
    else:
        name = "libattn.so"
    return os.path.join(here, name)


def _load() -> ctypes.CDLL:
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"attn: the shared library {path} is missing; install the package with "
            "`python3 -m pip install .` at the repository root (it builds the library), or set "
            "ATTN_LIBRARY to a built libattn")
    return ctypes.CDLL(path)


lib = _load()

# --------------------------------------------------------------------------------------------
# C types (attn.h)
# --------------------------------------------------------------------------------------------
ATTN_F32, ATTN_F64, ATTN_F16, ATTN_BF16, ATTN_I64, ATTN_I32, ATTN_I8, ATTN_U8, ATTN_BOOL = range(9)
MASK_NONE, MASK_KEEP, MASK_BLOCK, MASK_ADD = range(4)
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = range(3)
MAX_DIMS = 4


class Tensor(Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS), ("stride", c_int64 * MAX_DIMS)]


class Mask(Structure):
    _fields_ = [("kind", c_int), ("t", Tensor)]


class SdpaOptions(Structure):
    _fields_ = [("causal", c_int), ("scale", c_float), ("dropout_p", c_float),
                ("seed", c_uint64), ("offset", c_uint64), ("window", c_int),
                ("window_left", c_int64), ("window_right", c_int64),
                ("alibi_slopes", POINTER(c_float)), ("softcap", c_float)]


class CtxParams(Structure):
    _fields_ = [("threads", c_int), ("alloc", c_void_p), ("free", c_void_p),
                ("alloc_user", c_void_p), ("workspace", c_void_p),
                ("workspace_size", c_size_t), ("flags", c_uint)]


class BertInfo(Structure):
    _fields_ = [("hidden_size", c_int64), ("num_layers", c_int64), ("num_heads", c_int64),
                ("intermediate_size", c_int64), ("vocab_size", c_int64),
                ("max_position_embeddings", c_int64), ("max_seq_length", c_int64),
                ("layer_norm_eps", c_double), ("pooling", c_int), ("normalize", c_int),
                ("do_lower_case", c_int), ("strip_accents", c_int),
                ("tokenize_chinese_chars", c_int)]


class LlmSpecial(Structure):
    _fields_ = [("bos", c_int32), ("eos", c_int32), ("eot", c_int32), ("add_bos", c_int)]


class LlmSampler(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int64), ("top_p", c_float),
                ("min_p", c_float), ("repetition_penalty", c_float), ("seed", c_uint64),
                ("presence_penalty", c_float), ("frequency_penalty", c_float)]


class LlmPpl(Structure):
    _fields_ = [("nll", c_double), ("count", c_int64), ("chunks", c_int64), ("ppl", c_double),
                ("err", c_double)]


class LlmConfig(Structure):
    _fields_ = [("vocab_size", c_int64), ("hidden_size", c_int64),
                ("intermediate_size", c_int64), ("num_layers", c_int64),
                ("num_heads", c_int64), ("num_kv_heads", c_int64), ("head_dim", c_int64),
                ("max_position_embeddings", c_int64), ("rms_norm_eps", c_double),
                ("rope_theta", c_double), ("tie_word_embeddings", c_int),
                ("attention_bias", c_int), ("mlp_bias", c_int),
                # the family settings (attn.h attn_llm_config: same order, same types)
                ("qk_norm", c_int), ("sandwich_norm", c_int), ("mlp_act", c_int),
                ("embed_scale", c_double), ("sliding_window", c_int64),
                ("sliding_period", c_int64), ("rope_theta_local", c_double),
                ("rope_scaling", c_int), ("rope_factor", c_double),
                ("rope_low_freq_factor", c_double), ("rope_high_freq_factor", c_double),
                ("rope_original_context", c_int64)]


class BpeStream(Structure):
    _fields_ = [("pending", ctypes.c_ubyte * 4), ("npending", c_int), ("started", c_int)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p), ("reasoning_content", c_char_p),
                ("tool_calls", c_char_p), ("tool_call_id", c_char_p)]


class ChatOptions(Structure):
    _fields_ = [("add_generation_prompt", c_int), ("thinking", c_int), ("tools", c_char_p),
                ("bos_token", c_char_p), ("eos_token", c_char_p)]


P = c_void_p
PT = POINTER(Tensor)
_S = c_int  # attn_status


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


attn_version = _fn("attn_version", c_char_p)
attn_strerror = _fn("attn_strerror", c_char_p, c_int)
attn_status_name = _fn("attn_status_name", c_char_p, c_int)
attn_ctx_create = _fn("attn_ctx_create", _S, POINTER(CtxParams), POINTER(c_void_p))
attn_ctx_free = _fn("attn_ctx_free", None, P)
attn_ctx_errmsg = _fn("attn_ctx_errmsg", c_char_p, P)
attn_ctx_threads = _fn("attn_ctx_threads", c_int, P)
attn_cpu_count = _fn("attn_cpu_count", c_int)
attn_cpu_default_threads = _fn("attn_cpu_default_threads", c_int)
attn_ctx_describe = _fn("attn_ctx_describe", _S, P, ctypes.c_char_p, ctypes.c_size_t,
                        POINTER(ctypes.c_size_t))
attn_sdpa_defaults = _fn("attn_sdpa_defaults", SdpaOptions)
attn_sdpa = _fn("attn_sdpa", _S, P, PT, PT, PT, POINTER(Mask), POINTER(SdpaOptions), PT, PT, PT)
attn_sdpa_varlen = _fn("attn_sdpa_varlen", _S, P, PT, PT, PT, PT, PT, POINTER(SdpaOptions),
                       PT, PT)
attn_sdpa_backward = _fn("attn_sdpa_backward", _S, P, PT, PT, PT, POINTER(Mask),
                         POINTER(SdpaOptions), PT, PT, PT, PT, PT)
attn_sdpa_backward_saved = _fn("attn_sdpa_backward_saved", _S, P, PT, PT, PT, POINTER(Mask),
                               POINTER(SdpaOptions), PT, PT, PT, PT, PT, PT, PT)
attn_sdpa_varlen_backward = _fn("attn_sdpa_varlen_backward", _S, P, PT, PT, PT, PT, PT,
                                POINTER(SdpaOptions), PT, PT, PT, PT)


def _fn_addr(name, nargs):
    """A second prototype of a library function whose arguments are all addresses (Python ints
    or None): the per-call fast paths pass the addresses of structs they packed themselves,
    which ctypes converts more cheaply than Structure instances.  (lib[name] is a new function
    object, so the prototypes above keep their argtypes.)  ctypes releases the GIL during the
    call, as for every CDLL function."""
    f = lib[name]
    f.restype = c_int
    f.argtypes = [c_void_p] * nargs
    return f


sdpa_addr = _fn_addr("attn_sdpa", 9)
sdpa_backward_saved_addr = _fn_addr("attn_sdpa_backward_saved", 13)
# BERT
attn_bert_load = _fn("attn_bert_load", _S, P, c_char_p, POINTER(c_void_p))
attn_bert_free = _fn("attn_bert_free", None, P)
attn_bert_get_info = _fn("attn_bert_get_info", _S, P, POINTER(BertInfo))
attn_bert_tokenize = _fn("attn_bert_tokenize", _S, P, P, c_char_p, POINTER(c_int32), c_int64,
                         POINTER(c_int64))
attn_bert_embed = _fn("attn_bert_embed", _S, P, P, POINTER(c_char_p), c_int64, P)
attn_bert_set_dtype = _fn("attn_bert_set_dtype", _S, P, P, c_int)
# BPE, LLM, chat
attn_bpe_encode = _fn("attn_bpe_encode", _S, P, P, c_char_p, c_size_t, c_uint, POINTER(c_int32),
                      c_int64, POINTER(c_int64))
attn_bpe_decode = _fn("attn_bpe_decode", _S, P, P, POINTER(c_int32), c_int64, c_uint,
                      c_char_p, c_size_t, POINTER(c_size_t))
attn_bpe_decode_stream = _fn("attn_bpe_decode_stream", _S, P, P, POINTER(BpeStream), c_int32,
                             c_uint, c_char_p, c_size_t, POINTER(c_size_t))
attn_bpe_decode_stream_end = _fn("attn_bpe_decode_stream_end", _S, P, POINTER(BpeStream),
                                 c_char_p, c_size_t, POINTER(c_size_t))
attn_bpe_vocab_size = _fn("attn_bpe_vocab_size", c_int64, P)
attn_llm_load = _fn("attn_llm_load", _S, P, c_char_p, c_uint, POINTER(c_void_p))
attn_llm_free = _fn("attn_llm_free", None, P)
attn_llm_tokenizer = _fn("attn_llm_tokenizer", P, P)
attn_llm_chat_template = _fn("attn_llm_chat_template", c_char_p, P)
attn_llm_get_special = _fn("attn_llm_get_special", _S, P, POINTER(LlmSpecial))
attn_llm_get_info = _fn("attn_llm_get_info", _S, P, POINTER(LlmConfig))
attn_llm_is_end = _fn("attn_llm_is_end", c_int, P, c_int32)
attn_llm_set_activations = _fn("attn_llm_set_activations", _S, P, c_int)
attn_llm_session_create = _fn("attn_llm_session_create", _S, P, P, c_int64, c_int,
                              POINTER(c_void_p))
attn_llm_session_free = _fn("attn_llm_session_free", None, P)
attn_llm_session_prefill = _fn("attn_llm_session_prefill", _S, P, P, POINTER(c_int32), c_int64,
                               P)
attn_llm_session_decode = _fn("attn_llm_session_decode", _S, P, P, c_int32, P)
attn_llm_session_decode_batch = _fn("attn_llm_session_decode_batch", _S, P, POINTER(c_void_p),
                                    POINTER(c_int32), c_int64, P)
attn_llm_perplexity = _fn("attn_llm_perplexity", _S, P, P, POINTER(c_int32), c_int64, c_int64,
                          c_int64, P, P, POINTER(LlmPpl))
attn_llm_session_prefill_batch = _fn("attn_llm_session_prefill_batch", _S, P, POINTER(c_void_p),
                                     POINTER(c_int32), POINTER(c_int64), c_int64, P)
attn_llm_forward = _fn("attn_llm_forward", _S, P, P, POINTER(c_int32), c_int64, c_int64, P)
attn_llm_sampler_defaults = _fn("attn_llm_sampler_defaults", LlmSampler)
attn_llm_sample = _fn("attn_llm_sample", _S, P, POINTER(LlmSampler), P, c_int64,
                      POINTER(c_int32), c_int64, POINTER(c_uint64), POINTER(c_int32))
attn_llm_sample_ex = _fn("attn_llm_sample_ex", _S, P, POINTER(LlmSampler), P, c_int64,
                         POINTER(c_int32), c_int64, c_int64, POINTER(c_uint64),
                         POINTER(c_int32))
attn_chat_format = _fn("attn_chat_format", _S, P, c_char_p, POINTER(ChatMessage), c_int64, c_int,
                       c_char_p, c_size_t, POINTER(c_size_t))
attn_llm_chat_format = _fn("attn_llm_chat_format", _S, P, P, POINTER(ChatMessage), c_int64, c_int,
                           c_char_p, c_size_t, POINTER(c_size_t))
attn_llm_chat_apply = _fn("attn_llm_chat_apply", _S, P, P, POINTER(ChatMessage), c_int64,
                          POINTER(ChatOptions), c_char_p, c_size_t, POINTER(c_size_t))
attn_llm_set_chat_template = _fn("attn_llm_set_chat_template", _S, P, P, c_char_p)
attn_chat_template_named = _fn("attn_chat_template_named", c_char_p, c_char_p)

# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


class AttnError(Exception):
    """Base of every error the library reports.  ``status`` is the attn_status number,
    ``status_name`` its name ("ATTN_E_SHAPE"); the message is attn_ctx_errmsg's."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status
        self.status_name = attn_status_name(status).decode()


class AttnValueError(AttnError, ValueError):
    """ATTN_E_INVALID, E_SHAPE, E_BROADCAST, E_FORMAT, E_NONFINITE, E_UNSUPPORTED."""


class AttnTypeError(AttnError, TypeError):
    """ATTN_E_DTYPE."""


class AttnMemoryError(AttnError, MemoryError):
    """ATTN_E_NOMEM, E_WORKSPACE."""


class AttnOverflowError(AttnError, OverflowError):
    """ATTN_E_OVERFLOW (sizes; a full LLM context)."""


class AttnFileNotFoundError(AttnError, FileNotFoundError):
    """ATTN_E_NOT_FOUND."""


class AttnOSError(AttnError, OSError):
    """ATTN_E_IO."""


class AttnRuntimeError(AttnError, RuntimeError):
    """ATTN_E_INTERNAL."""


class AttnTimeoutError(AttnError, TimeoutError):
    """ATTN_E_TIMEOUT (another MPI process did not answer in time)."""


_ERRORS = {1: AttnValueError, 2: AttnValueError, 3: AttnValueError, 4: AttnTypeError,
           5: AttnMemoryError, 6: AttnOverflowError, 7: AttnValueError, 8: AttnOSError,
           9: AttnValueError, 10: AttnFileNotFoundError, 11: AttnValueError,
           12: AttnMemoryError, 13: AttnRuntimeError, 14: AttnTimeoutError}


def error(status: int, message: Optional[str] = None) -> AttnError:
    if not message:
        message = attn_strerror(status).decode()
    return _ERRORS.get(status, AttnRuntimeError)(message, status)


def check(status: int, ctx) -> None:
    """Raises the exception of a failed call on ctx (with the library's message)."""
    if status != 0:
        msg = attn_ctx_errmsg(ctx)
        raise error(status, msg.decode("utf-8", "replace") if msg else None)


# --------------------------------------------------------------------------------------------
# contexts: one per Python thread
# --------------------------------------------------------------------------------------------
_lock = threading.Lock()
_num_threads = 0          # 0: attn_cpu_default_threads()
_generation = 0           # bumped by set_num_threads: contexts of older generations are remade
_tls = threading.local()


# the fast paths' scratch memory, one block per context (so per thread): attn_tensor and
# attn_mask structs packed with struct.pack_into and passed by address
SCRATCH_BYTES = 1024


class _Context:
    __slots__ = ("ptr", "addr", "generation", "_free", "scratch", "scratch_addr", "_export",
                 "busy")

    def __init__(self, threads: int, generation: int):
        p = CtxParams()
        p.threads = threads
        ptr = c_void_p()
        st = attn_ctx_create(byref(p), byref(ptr))
        if st != 0:
            raise error(st, attn_ctx_errmsg(None).decode("utf-8", "replace"))
        self.ptr = ptr
        self.addr = ptr.value
        self.generation = generation
        self._free = attn_ctx_free
        # a bytearray (fast slicing and pack_into) whose buffer stays exported, so it never
        # moves; busy: the scratch is in use by a call of this thread (a signal handler or a
        # finalizer that calls attn meanwhile gets a block of its own: _fast.scratch)
        self.scratch = bytearray(SCRATCH_BYTES)
        self._export = ctypes.c_char.from_buffer(self.scratch)
        self.scratch_addr = ctypes.addressof(self._export)
        self.busy = False

    def __del__(self):
        if self.ptr:
            self._free(self.ptr)
            self.ptr = None


def ctx() -> c_void_p:
    """The calling thread's context (made on first use)."""
    c = getattr(_tls, "ctx", None)
    if c is None or c.generation != _generation:
        with _lock:
            threads, gen = _num_threads, _generation
        _tls.ctx = None  # free the old one first
        c = _Context(threads, gen)
        _tls.ctx = c
    return c.ptr


def context() -> _Context:
    """The calling thread's _Context (made on first use)."""
    c = getattr(_tls, "ctx", None)
    if c is None or c.generation != _generation:
        ctx()
        c = _tls.ctx
    return c


def set_num_threads(n: int) -> None:
    """Threads each attn call uses (the calling thread among them); 0 = one per physical core
    this process may run on, within its cgroup's CPU quota (the default:
    :func:`default_threads`).  Takes effect on each thread's next call."""
    global _num_threads, _generation
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"attn.set_num_threads: n must be an integer, not {type(n).__name__}")
    n = operator.index(n)
    if not 0 <= n <= 1024:
        raise ValueError(f"attn.set_num_threads: {n} is outside [0, 1024]")
    with _lock:
        _num_threads = n
        _generation += 1


def get_num_threads() -> int:
    """Threads of the calling thread's context."""
    return int(attn_ctx_threads(ctx()))


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask)."""
    return int(attn_cpu_count())


def default_threads() -> int:
    """The threads a call uses by default: one per physical core this process may run on
    (SMT siblings count once), no more than its cgroup's CPU quota (attn_cpu_default_threads)."""
    return int(attn_cpu_default_threads())


def cpu_info() -> str:
    """What attn detected on this CPU and what it chose, as lines of text: the CPU (vendor,
    family, model, name), the instruction-set extensions, the kernels of each kind of product,
    and the matrix-product precision attn picks here (`--dtype auto`) with the reason (the C
    attn_ctx_describe; the same text as `attn info --cpu`)."""
    c = ctx()
    need = ctypes.c_size_t(0)
    st = attn_ctx_describe(c, None, 0, byref(need))
    if st != 0:
        raise error(st, attn_ctx_errmsg(c).decode("utf-8", "replace"))
    buf = ctypes.create_string_buffer(need.value + 1)
    st = attn_ctx_describe(c, buf, len(buf), byref(need))
    if st != 0:
        raise error(st, attn_ctx_errmsg(c).decode("utf-8", "replace"))
    return buf.value.decode("utf-8", "replace")


def version() -> str:
    return attn_version().decode()
