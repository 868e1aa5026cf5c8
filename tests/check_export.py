#!/usr/bin/env python3
"""Checks `attn export` against transformers (tests/test_llm_cli.sh, case export_transformers):

    python3 check_export.py LIBATTN SOURCE.gguf EXPORTED_F32.gguf EXPORTED_Q8_0.gguf HF_DIR \
        ROUND_TRIP.gguf

transformers (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...), which dequantizes the
GGUF and undoes llama.cpp's q/k permutation) on the exported F32 GGUF must give the logits of
attn on it (the library's attn_llm_forward through ctypes) and of transformers on the source
GGUF; the Q8_0 export close to them; the HF folder (transformers' from_pretrained(dir)) the
same logits as the source (attn: to rounding, its RoPE then runs HF's rotate_half instead of
the interleaved pairs); ROUND_TRIP.gguf (HF_DIR exported back to GGUF: q/k permuted again) the
source's logits bit for bit.  The gguf package reads every export with the source's
tokenizer.* keys and the expected tensor types.  Prints the max |difference| of each and exits
1 past the bounds."""
import ctypes
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

lib_path, src, f32, q8, hf_dir, rt = sys.argv[1:7]
lib = ctypes.CDLL(lib_path)
lib.attn_ctx_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.attn_llm_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint,
                              ctypes.POINTER(ctypes.c_void_p)]
lib.attn_llm_forward.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
lib.attn_llm_free.argtypes = [ctypes.c_void_p]
ctx = ctypes.c_void_p()
assert lib.attn_ctx_create(None, ctypes.byref(ctx)) == 0

ids = np.array([[1, 104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33, 10, 200, 7]],
               dtype=np.int32)


def attn_logits(path, flags=0):
    m = ctypes.c_void_p()
    assert lib.attn_llm_load(ctx, path.encode(), flags, ctypes.byref(m)) == 0, path
    cfg_v = 256
    out = np.zeros((1, ids.shape[1], cfg_v), dtype=np.float32)
    assert lib.attn_llm_forward(ctx, m, ids.ctypes.data, 1, ids.shape[1], out.ctypes.data) == 0
    lib.attn_llm_free(m)
    return out[0]


def hf_gguf_logits(path):
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, os.path.join(d, "m.gguf"))
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file="m.gguf",
                                                     dtype=torch.float32)
        with torch.no_grad():
            return model(torch.tensor(ids, dtype=torch.long)).logits[0].numpy()


def hf_dir_logits(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits[0].numpy()


ref = hf_gguf_logits(src)
scale = float(np.abs(ref).max())
checks = [
    ("transformers(F32 export) vs transformers(source)", hf_gguf_logits(f32), ref, 1e-5),
    ("attn(F32 export) vs transformers(F32 export)", attn_logits(f32), hf_gguf_logits(f32), 1e-4),
    ("attn(F32 export) vs attn(source)", attn_logits(f32), attn_logits(src, 1), 0.0),
    ("transformers(Q8_0 export) vs transformers(source)", hf_gguf_logits(q8), ref, 0.05),
    ("attn(Q8_0 export) vs transformers(Q8_0 export)", attn_logits(q8, 1), hf_gguf_logits(q8),
     1e-4),
    ("transformers(HF folder) vs transformers(source)", hf_dir_logits(hf_dir), ref, 1e-5),
    ("attn(HF folder) vs attn(source)", attn_logits(hf_dir), attn_logits(src, 1), 1e-5),
    ("transformers(HF folder -> GGUF) vs transformers(source)", hf_gguf_logits(rt), ref, 0.0),
    ("attn(HF folder -> GGUF) vs attn(source)", attn_logits(rt), attn_logits(src, 1), 0.0),
]
bad = 0
# the gguf package reads the files: the source's tokenizer keys and llama keys, the types
import gguf  # noqa: E402

src_r = gguf.GGUFReader(src)
for path, qtype in ((f32, "F32"), (q8, "Q8_0"), (rt, "F32")):
    r = gguf.GGUFReader(path)
    for k, f in src_r.fields.items():
        if k.startswith("tokenizer.") or k in ("llama.block_count", "llama.embedding_length",
                                               "llama.attention.head_count_kv"):
            if k not in r.fields or r.fields[k].contents() != f.contents():
                print(f"gguf package: {path}: {k} differs from the source's FAIL")
                bad += 1
    types = {t.name: t.tensor_type.name for t in r.tensors}
    if types.get("blk.0.attn_q.weight") != qtype or types.get("output_norm.weight") != "F32" or \
            len(types) != len(src_r.tensors):
        print(f"gguf package: {path}: tensors {len(types)}, types {types} FAIL")
        bad += 1
    else:
        print(f"gguf package: {path}: {len(types)} tensors, matrices {qtype}, keys ok")
for name, a, b, tol in checks:
    err = float(np.abs(a - b).max()) / max(1.0, scale)
    ok = err <= tol
    bad += not ok
    print(f"{name}: max |diff| / max(1, max|logit|) = {err:.3g} (bound {tol:g}) "
          f"{'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
