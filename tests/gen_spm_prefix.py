#!/usr/bin/env python3
"""Writes fixtures/bpe/spm_prefix.txt: SentencePiece BPE with add_space_prefix (Llama 2's and
Mistral's GGUF files: tokenizer.ggml.add_space_prefix true), the reference of test_bpe's
add_space_prefix case.  The tokenizer is the one transformers converts from such a file
(transformers.integrations.gguf: LlamaTokenizer, whose decoder ends with Strip(' ', 1, 0): one
space at the start of the decoded text is dropped), built from the tokenizer keys directly, so
no model file is needed:

    python3 gen_spm_prefix.py > fixtures/bpe/spm_prefix.txt

Lines: "V type hex(piece)" per id (GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte),
then per text "T hex(text)" and "I n ids" (encode without BOS, special tokens parsed), then id
sequences "R n ids" with "D hex(decode)" and "S hex(decode skipping special tokens)".

Texts here do not start with a space: for those, this conversion's Metaspace(prepend_scheme=
"first") adds no second U+2581 where SentencePiece, llama.cpp and attn do (docs/bpe.md).
Needs transformers and tokenizers (pip install transformers).
"""
from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

PIECES = ["\u2581", "a", "b", "c", "d", "e", "h", "l", "o", "r", "w", "\u2581\u2581", "\u2581h",
          "he", "ll", "hell", "hello", "\u2581hello", "\u2581w", "or", "\u2581wor", "\u2581world",
          "ab", "\u2581ab", "\u2581a", "\u2581b", "ba", "!", "\u2581!"]


def main():
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)] + PIECES
    types = [2, 3, 3] + [6] * 256 + [1] * len(PIECES)
    d = {"tokenizer_type": "llama", "tokens": tokens,
         "scores": [-float(i) for i in range(len(tokens))],  # the score order is the id order
         "token_type": types, "add_prefix_space": True, "unk_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2}
    tk, _ = convert_gguf_tokenizer("llama", d)
    assert "Strip" in tk.to_str(), "the decoder has no Strip"
    out = []
    for t, ty in zip(tokens, types):
        out.append("V %d %s" % (ty, t.encode().hex()))
    texts = ["hello world", "hello", "ab ba", "abc", "hello  world", "hello world ",
             "\u00e9", "x", "\thello", "\nab", "<s>hello", "hello</s>ab", "ab<s> ab", "!",
             "hello!  ab ! world"]
    seqs = []
    for t in texts:
        ids = tk.encode(t, add_special_tokens=False).ids
        out.append("T %s" % t.encode().hex())
        out.append("I %d %s" % (len(ids), " ".join(map(str, ids))))
        seqs.append(ids)
    sp, sp2, hello, bos, byte20 = (tokens.index("\u2581"), tokens.index("\u2581\u2581"),
                                   tokens.index("\u2581hello"), 1, 3 + 0x20)
    world = tokens.index("\u2581world")
    seqs += [[sp], [sp, hello], [sp2, hello], [bos, hello], [bos, sp, hello], [0, hello],
             [byte20, hello], [byte20, byte20, hello], [hello, world], [world], [2, world, bos],
             [bos], [3 + 0xC3, 3 + 0xA9, hello], [3 + 0xC3, hello]]
    for ids in seqs:
        out.append("R %d %s" % (len(ids), " ".join(map(str, ids))))
        out.append("D %s" % tk.decode(ids, skip_special_tokens=False).encode().hex())
        out.append("S %s" % tk.decode(ids, skip_special_tokens=True).encode().hex())
    print("\n".join(out))


if __name__ == "__main__":
    main()
