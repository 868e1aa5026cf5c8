#!/usr/bin/env python3
"""Writes fixtures/families/qwen2_sharded/: the tiny Qwen2 model of fixtures/families/qwen2
saved again by transformers' save_pretrained with a small max_shard_size, so that its weights
are a sharded checkpoint (model-0000i-of-0000n.safetensors and model.safetensors.index.json)
as large models ship.  The weights are the same float16 values, so test_llm_families expects
the same logits (qwen2_ref.txt) and the bits of the unsharded folder.  Needs torch,
transformers and safetensors:

    python3 gen_sharded.py fixtures/families
"""
import json
import os
import shutil
import sys

import torch
import transformers as tf


def main():
    root = sys.argv[1]
    src, dst = os.path.join(root, "qwen2"), os.path.join(root, "qwen2_sharded")
    m = tf.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float16)
    shutil.rmtree(dst, ignore_errors=True)
    m.save_pretrained(dst, max_shard_size="12KB", safe_serialization=True)
    for f in os.listdir(dst):  # keep the weights, the index and config.json only
        if f not in ("config.json", "model.safetensors.index.json") and not f.startswith("model-"):
            os.remove(os.path.join(dst, f))
    with open(os.path.join(dst, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    print("%s: %d shards" % (dst, len(shards)))
    assert len(shards) >= 3


if __name__ == "__main__":
    main()
