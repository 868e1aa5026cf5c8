#!/usr/bin/env python3
"""Writes tests/fixtures/byte_level_tokenizer.json: a byte-level BPE tokenizer.json of the 256
bytes (id = byte value, GPT-2's byte-to-unicode characters, no merges), the tokenizer of
tests/fixtures/llama_tiny.gguf as a HF file, so that a copy of tests/fixtures/llama_tiny with it
is a HF folder `attn train lm` and `attn generate` run (tests/test_llm_cli.sh)."""
import json
import os

bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
      list(range(ord("®"), ord("ÿ") + 1)))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
char = {b: chr(c) for b, c in zip(bs, cs)}
tok = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
              "byte_fallback": False, "ignore_merges": False,
              "vocab": {char[b]: b for b in range(256)}, "merges": []},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                   "byte_level_tokenizer.json")
with open(out, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
