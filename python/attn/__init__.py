"""attn from Python: attention and Transformer layers of the attn C library.

numpy arrays and torch CPU tensors in, the same kind out; the library is loaded with ctypes
(attn/libattn.so inside this package).  See docs/python.md.

    import attn
    out = attn.sdpa(q, k, v, is_causal=True)          # like F.scaled_dot_product_attention
    attn.set_num_threads(4)                           # default: one per core
    import attn.torch; attn.torch.patch()             # route torch's CPU SDPA to attn
    enc = attn.SentenceEncoder("all-MiniLM-L6-v2/")   # sentence-transformers folders
    llm = attn.LLM("model.gguf"); print("".join(llm.generate("Hello", max_tokens=20)))
"""
from ._lib import (AttnError, AttnFileNotFoundError, AttnMemoryError, AttnOSError,
                   AttnOverflowError, AttnRuntimeError, AttnTimeoutError, AttnTypeError,
                   AttnValueError, cpu_count, cpu_info, default_threads, get_num_threads,
                   set_num_threads, version)
from ._sdpa import sdpa, sdpa_varlen
from .models import LLM, SentenceEncoder

__version__ = "0.1.0"

__all__ = ["sdpa", "sdpa_varlen", "set_num_threads", "get_num_threads", "cpu_count",
           "default_threads", "cpu_info",
           "version", "SentenceEncoder", "LLM", "AttnError", "AttnValueError",
           "AttnTypeError", "AttnMemoryError", "AttnOverflowError", "AttnFileNotFoundError",
           "AttnOSError", "AttnRuntimeError", "AttnTimeoutError", "__version__"]
