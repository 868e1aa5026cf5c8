#!/usr/bin/env python3
"""Writes the fixtures of tests/test_bpe.c (the byte-level BPE tokenizer, src/text/bpe.c) into
tests/fixtures/bpe/, from the Hugging Face tokenizers library:

  corpus.txt          the test texts: a fuzzed mix of scripts, whitespace runs (tabs, \\r\\n,
                      trailing spaces, Unicode spaces), digit runs of many scripts, contractions
                      in both cases, emoji and ZWJ sequences, combining marks, added tokens
                      inside text, control characters and invalid UTF-8; per text its bytes (T)
                      and the str the library sees, bytes.decode('utf-8', 'replace') (C)
  NAME.json           a small tokenizer.json, trained here with BpeTrainer (or built by hand)
  NAME.arrays         the same vocabulary as arrays (what a GGUF file holds): "V type hex" per
                      id, "M hexA hexB" per merge, "P pre" -- for attn_bpe_create
  NAME.expected       per text of corpus.txt: the ids with added tokens parsed (I) and with
                      special ones not parsed (J, the library's encode_special_tokens; "J ="
                      when they are the same); then
                      id sequences (R) with the library's decode (D; S skipping special tokens)
  pretok.expected     per text of corpus.txt, the four pre-tokenizers alone (G gpt2, L
                      llama-bpe, M smollm, Q qwen2): the byte offset where each word ends, in the
                      replaced text (checked through the library's internal
                      attn__bpe_pretokens, so that the words' bounds are tested whatever a
                      vocabulary makes of them)
  pretok_all.expected the same for texts of every code point (4096 a text, each followed by
                      a probe: space, letter, digit, apostrophe, newline, ...): the word count
                      and a hash of the ends per text and pre-tokenizer
  smollm2_expected.txt  the same for the real SmolLM2-135M-Instruct vocabulary, from its GGUF
                      (--gguf PATH, or left as it is): only ids are committed, test_bpe.c reads
                      the vocabulary from the GGUF file (attn_gguf_*) when ATTN_SMOLLM2_GGUF
                      names it

The tokenizers:
  gpt2     ByteLevel pre-tokenizer (GPT-2's regex); <|endoftext|> special and normalized (as
           GPT-2's own file has it), [[tool]] user-defined
  llama    Sequence[Split(Llama 3's regex), ByteLevel(use_regex=false)], ignore_merges, merges
           as "a b" strings, a few vocabulary words that no merge makes (so ignore_merges
           matters), Llama 3's special tokens
  smollm   Sequence[Digits(individual_digits), ByteLevel]: SmolLM2's configuration and
           special tokens, merges as pairs
  edge     built by hand, JSON only: an unknown token (fuse_unk) for two missing bytes,
           a pair merged twice (the later rank wins), merges out of training order, added
           tokens of both passes that overlap (normalized <s>, raw <s>x), a user-defined
           token inside words, Split(GPT-2's regex) + ByteLevel(use_regex=false)
  edge_nofuse  the same with fuse_unk false

    python3 tests/gen_bpe.py [--gguf SmolLM2-135M-Instruct.Q4_1.gguf]

Deterministic (seeded); needs `pip install tokenizers` (and `gguf` for --gguf; `transformers`,
when installed, is compared on the SmolLM2 corpus and the result printed).
"""
import argparse
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "bpe")

GPT2_RE = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")

# ---- text ---------------------------------------------------------------------------------------
WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they I at be this have "
          "from or one had by word but not what all were we when your can said there use an "
          "each which she do how their if will up other about out many then them these so some "
          "her would make like him into time has look two more write go see number no way could "
          "people my than first water been call who oil its now find long down day did get come "
          "made may part Hello World THE QUICK Brown fox jumps over lazy dogs".split(),
    "de": "über Straße Größe Mädchen fünf schön Äpfel Öl Übung weiß".split(),
    "fr": "été déjà garçon français où Noël cœur naïve œuvre".split(),
    "ru": "привет мир Москва это очень хорошо русский язык".split(),
    "el": "Ελληνικά καλημέρα κόσμε ΑΘΗΝΑ λόγος".split(),
    "he": "שלום עולם עברית".split(),
    "ar": "مرحبا بالعالم العربية كتاب".split(),
    "hi": "नमस्ते दुनिया हिन्दी भाषा".split(),
    "th": "สวัสดี ภาษาไทย".split(),
    "zh": "中文 字符 你好 世界 汉字 计算机".split(),
    "ja": "こんにちは 日本語 カタカナ ひらがな".split(),
    "ko": "안녕하세요 한국어 세계".split(),
    "code": "def return if else for while int main printf {} () [] -> => == != <= >= && || "
            "x0 y_1 __init__ self.value foo.bar() #include <stdio.h>".split(),
}
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\r\n", "\r", "\n\n", " \n", "\n ", " \t ",
          "\u00a0", "\u3000", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\u1680", "\u2009",
          " " * 17, "\n" * 9, "\r\n\r\n", " \r\n  "]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "¹²³⁴", "½¼¾",
          "ⅠⅡⅫ", "①②⑳", "\U00010d40\U00010d41", "\U00011de0\U00011de1", "\U000116d0"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE",
                "'VE", "'M", "'LL", "'Ll", "'D", "'\u017f", "'\u017ft", "\u2019s", "'", "''",
                "'x", "I'm", "YOU'LL", "it's", "don't", "WE'RE", "they'VE", "'123"]
PUNCT = ["...", "!?", "\u2014", "\u00ab\u00bb", "()", "{}", "[]", "#$%", "@", "~", "^", "`",
         "\\", "/", "|", "::", "->", "=>", "&&", '"', "''", "?!", ",", ".", ";", "-", "_", "*",
         "\u00a7", "\u00b6", "\u00bf", "\u00a1"]
EMOJI = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467"
         "\u200d\U0001F466", "\U0001F3F3\ufe0f\u200d\U0001F308", "\U0001F1EF\U0001F1F5",
         "\u2764\ufe0f", "1\ufe0f\u20e3", "\U0001F9D1\u200d\U0001F4BB"]
COMBINING = ["e\u0301", "a\u0308\u0323", "\u0301", "\u0301\u0302", " \u0301x",
             "\u1100\u1161\u11a8", "\u0915\u094d\u0937", "n\u0303o", "\u05e9\u05c1"]
ODD = ["\x00", "\x01", "\x1c", "\x1f", "\x7f", "\u200b", "\u200d", "\ufeff", "\ufffd",
       "\ue000", "\u0378", "\U0010ffff", "\U000e0001", "\u1c89", "\U000105c0", "\ua7cb",
       "\u180e", "\u061c", "\u0085x", "\u00ad"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "[[tool]]", "<|im_", "<|endoftext|", "<|<|im_end|>|>",
            "<s>", "</s>", "<s>x", "<<s>>", "ab", "qzq", "<|im_start|>assistant\n"]
BAD_BYTES = [b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf",
             b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5", b"\xff",
             b"\xfe\xff", b"\xc2", b"\xe1\x80", b"\xf0\x90"]


def piece(rng):
    k = rng.random()
    if k < 0.30:
        return rng.choice(WORDS[rng.choice(list(WORDS))])
    if k < 0.45:
        return rng.choice(SPACES)
    if k < 0.55:
        d = rng.choice(DIGITS)
        return "".join(rng.choice(d) for _ in range(rng.randint(1, 12)))
    if k < 0.62:
        return rng.choice(CONTRACTIONS)
    if k < 0.70:
        return rng.choice(PUNCT)
    if k < 0.76:
        return rng.choice(EMOJI)
    if k < 0.81:
        return rng.choice(COMBINING)
    if k < 0.86:
        return rng.choice(ODD)
    if k < 0.94:
        return rng.choice(SPECIALS)
    long_ = [lambda: "a" * rng.randint(50, 300), lambda: " " * rng.randint(20, 80),
             lambda: "".join(rng.choice("0123456789") for _ in range(rng.randint(20, 90))),
             lambda: "".join(rng.choice("abcdefghij") for _ in range(rng.randint(40, 200))),
             lambda: "ab" * rng.randint(10, 60), lambda: "'s" * rng.randint(5, 20)]
    return rng.choice(long_)()


def corpus(seed=1, n=240):
    """(raw bytes, cleaned str) pairs: hand-written texts, then fuzzed ones."""
    rng = random.Random(seed)
    fixed = ["", " ", "a", "Hello world", " Hello world ", "Hello  world", "I'm here. YOU'LL "
             "see, it's 2024-11-23 10:30:59.", "x = 12345678901234567890;", "\t\tindent\n",
             "trailing spaces   ", "   leading", "\r\n\r\n", "a\r\nb\rc\nd", "naïve café",
             "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
             "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
             "<|im_start|>assistant\n",
             "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
             "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "[[tool]]call[[tool]]",
             "'s'S'ſ're'RE", "\U0001F468\u200d\U0001F469\u200d\U0001F467 family",
             "e\u0301e\u0301", "\x00\x00", "\u3000\u3000x", "x\u2028y", "\x85\x85"]
    out = [s.encode("utf-8") for s in fixed]
    out += [b"\xff", b"abc\xe2\x82", b"\xf0\x9f\x98\x80\xf0\x9f", b"\xed\xa0\x80x",
            b"\xc0\xaf\xe0\x80\xaf", b" \x80 \xbf\xbf ", bytes(range(256)),
            bytes(range(255, -1, -1))]
    while len(out) < n:
        parts = [piece(rng) for _ in range(rng.randint(1, 15))]
        sep = rng.choice(["", "", " ", ""])
        b = sep.join(parts).encode("utf-8")
        if rng.random() < 0.2:
            bb = bytearray(b)
            for _ in range(rng.randint(1, 3)):
                at = rng.randint(0, len(bb))
                bb[at:at] = rng.choice(BAD_BYTES)
            if rng.random() < 0.3 and len(bb) > 2:
                del bb[rng.randint(0, len(bb) - 1)]  # cut a character
            b = bytes(bb)
        out.append(b)
    return [(b, b.decode("utf-8", "replace")) for b in out]


def training_text(seed=7, n=6000):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        ws = []
        for _ in range(rng.randint(3, 14)):
            k = rng.random()
            if k < 0.75:
                ws.append(rng.choice(WORDS[rng.choice(["en"] * 6 + list(WORDS))]))
            elif k < 0.85:
                ws.append(str(rng.randint(0, 99999)))
            elif k < 0.92:
                ws.append(rng.choice(PUNCT))
            else:
                ws.append(rng.choice(CONTRACTIONS))
        sep = rng.choice([" ", " ", " ", "  ", "\t"])
        lines.append(sep.join(ws) + rng.choice(["", ".", "!", " "]))
    return "\n".join(lines)


# ---- tokenizers ---------------------------------------------------------------------------------
def byte_alphabet():
    return pre_tokenizers.ByteLevel.alphabet()


def trained(pre, specials, vocab_size, text):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=byte_alphabet(),
                             special_tokens=specials, show_progress=False)
    tk.train_from_iterator(text.split("\n"), tr)
    return json.loads(tk.to_str())


def make_gpt2(text):
    d = trained(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                ["<|endoftext|>"], 700, text)
    for a in d["added_tokens"]:
        a["normalized"] = True  # as GPT-2's own tokenizer.json
    v = d["model"]["vocab"]
    d["added_tokens"].append({"id": len(v), "content": "[[tool]]", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": False})
    return d


def make_llama(text):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    d = trained(pre, specials, 800, text)
    d["model"]["ignore_merges"] = True
    v = d["model"]["vocab"]
    # words no merge makes: with ignore_merges a pre-token equal to one is taken whole
    sp = {b: c for b, c in zip(range(256), byte_level_chars())}
    for w in [" zebra", "zebra", " 123", " THE", "ello", "\n\n\n"]:
        t = "".join(sp[x] for x in w.encode())
        if t not in v:
            v[t] = len(v)
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                            for m in d["model"]["merges"]]
    return d


def byte_level_chars():
    """GPT-2's byte -> character list (for building vocabularies by hand)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def make_smollm(text):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>"]
    return trained(pre, specials, 900, text)


def make_edge(fuse):
    ch = byte_level_chars()
    vocab = {}
    for b in range(256):
        if chr(b) not in "qz":
            vocab[ch[b]] = len(vocab)
    vocab["<unk>"] = len(vocab)

    def tok(s):
        return "".join(ch[x] for x in s.encode())
    merges = []

    def merge(a, b):
        merges.append([tok(a), tok(b)])
        if tok(a + b) not in vocab:
            vocab[tok(a + b)] = len(vocab)
    merge("a", "b")          # rank 0, listed again below: the later rank wins
    merge(" ", "t")
    merge("h", "e")
    merge(" t", "he")
    merge("b", "c")
    merge("he", "l")          # made before "l l" (out of training order)
    merge("l", "l")
    merge("hel", "l")
    merge("hell", "o")
    merge("a", "b")          # repeat: (a, b) now ranks after (b, c)
    merge("ab", "c")
    merge(" ", " ")
    merge("  ", " ")
    merge("1", "2")
    merge("'", "s")
    merge("<", "s")
    merge("<s", ">")
    d = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": GPT2_RE}, "behavior": "Isolated",
              "invert": False},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
              "use_regex": False}]},
         "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                            "trim_offsets": False, "use_regex": True},
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                     "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                   "continuing_subword_prefix": None, "end_of_word_suffix": None,
                   "fuse_unk": fuse, "byte_fallback": False, "ignore_merges": False,
                   "vocab": vocab, "merges": merges}}
    n = len(vocab)
    for content, special, normalized in [("<s>", True, True), ("<s>x", False, False),
                                         ("</s>", True, False), ("ell", False, False),
                                         ("<|im_end|>", True, False)]:
        d["added_tokens"].append({"id": n, "content": content, "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": normalized,
                                  "special": special})
        n += 1
    # "<s>" is also a vocabulary token: the library gives it that id (and the others move up)
    tk = Tokenizer.from_str(json.dumps(d))
    for a in d["added_tokens"]:
        a["id"] = tk.token_to_id(a["content"])
    return d


# ---- writing ------------------------------------------------------------------------------------
def write_arrays(path, d, pre):
    """The vocabulary as a GGUF file would hold it: every id's text and type, the merges."""
    v = d["model"]["vocab"]
    n = len(v)
    texts = [None] * n
    for t, i in v.items():
        texts[i] = t
    types = [1] * n
    for a in d["added_tokens"]:
        if a["id"] >= len(texts):
            texts += [None] * (a["id"] + 1 - len(texts))
            types += [1] * (a["id"] + 1 - len(types))
        texts[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    with open(path, "w") as f:
        f.write("P %s\n" % pre)
        for t, ty in zip(texts, types):
            f.write("V %d %s\n" % (ty, t.encode().hex()))
        for m in d["model"]["merges"]:
            a, b = m.split(" ") if isinstance(m, str) else m
            f.write("M %s %s\n" % (a.encode().hex(), b.encode().hex()))


def id_sequences(tk, texts, rng, n=40):
    """Id sequences to decode: random ids (special ones included) and slices of encodings,
    which cut characters."""
    size = tk.get_vocab_size()
    out = []
    for k in range(n):
        if k % 2:
            out.append([rng.randrange(size) for _ in range(rng.randint(1, 20))])
        else:
            ids = tk.encode(rng.choice(texts), add_special_tokens=False).ids or [0]
            a = rng.randrange(len(ids))
            out.append(ids[a:a + rng.randint(1, 25)])
    return out


def write_expected(path, tk, cps, rng):
    with open(path, "w") as f:
        for _, s in cps:
            tk.encode_special_tokens = False
            i = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = True
            j = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = False
            f.write("I %d %s\n" % (len(i), " ".join(map(str, i))))
            if j == i:
                f.write("J =\n")  # the same
            else:
                f.write("J %d %s\n" % (len(j), " ".join(map(str, j))))
        for ids in id_sequences(tk, [s for _, s in cps], rng):
            f.write("R %d %s\n" % (len(ids), " ".join(map(str, ids))))
            f.write("D %s\n" % tk.decode(ids, skip_special_tokens=False).encode().hex())
            f.write("S %s\n" % tk.decode(ids, skip_special_tokens=True).encode().hex())


def pre_tokenizer(name):
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    if name == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("llama-bpe", "qwen2"):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE if name == "llama-bpe" else QWEN2_RE),
                                 behavior="isolated", invert=False), bl])
    return pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])


def write_pretok(path, cps):
    """The words' ends (bytes): ByteLevel spells each byte as one character."""
    pres = [("G", pre_tokenizer("gpt2")), ("L", pre_tokenizer("llama-bpe")),
            ("M", pre_tokenizer("smollm")), ("Q", pre_tokenizer("qwen2"))]
    with open(path, "w") as f:
        for _, s in cps:
            for tag, pre in pres:
                ends, at = [], 0
                for piece, _ in pre.pre_tokenize_str(s):
                    at += len(piece)
                    ends.append(at)
                assert at == len(s.encode("utf-8"))
                f.write("%s %d %s\n" % (tag, len(ends), " ".join(map(str, ends))))


PROBES = [" ", "a", "1", "'", "\n", "  ", "x ", "'s"]


def chunk_text(k):
    """Every code point of [4096 k, 4096 (k + 1)) (no surrogates), each followed by a probe."""
    out = []
    for c in range(4096 * k, 4096 * (k + 1)):
        if not 0xD800 <= c <= 0xDFFF:
            out.append(chr(c) + PROBES[c % 8])
    return "".join(out)


def fnv(values):
    h = 0xcbf29ce484222325
    for v in values:
        for b in int(v).to_bytes(8, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_pretok_all(path):
    """Every code point through the three pre-tokenizers: per 4096 of them, the word count
    and a hash (FNV-1a of the ends as 64-bit little-endian) of the words' ends."""
    pres = [("G", pre_tokenizer("gpt2")), ("L", pre_tokenizer("llama-bpe")),
            ("M", pre_tokenizer("smollm")), ("Q", pre_tokenizer("qwen2"))]
    with open(path, "w") as f:
        for k in range(0x110000 // 4096):
            s = chunk_text(k)
            for tag, pre in pres:
                ends, at = [], 0
                for piece, _ in pre.pre_tokenize_str(s):
                    at += len(piece)
                    ends.append(at)
                f.write("%s %d %d %016x\n" % (tag, k, len(ends), fnv(ends)))


def smollm2_from_gguf(path):
    """SmolLM2's tokenizer.json rebuilt from the GGUF file: the original's configuration (BPE,
    Sequence[Digits(individual_digits), ByteLevel], ByteLevel decoder, the control tokens as
    special added tokens)."""
    import gguf
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    toks = strings("tokenizer.ggml.tokens")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == 3])
    return tk


def compare_transformers(gguf_path, tk, cps):
    """How transformers' own GGUF conversion tokenizes the corpus, against the rebuilt one."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return
    d, name = os.path.split(os.path.abspath(gguf_path))
    t2 = AutoTokenizer.from_pretrained(d, gguf_file=name)
    diff = [s for _, s in cps
            if t2(s, add_special_tokens=False)["input_ids"] !=
            tk.encode(s, add_special_tokens=False).ids]
    print("transformers' GGUF conversion (pre_tokenizer %s): %d of %d corpus texts differ"
          % (t2.backend_tokenizer.pre_tokenizer, len(diff), len(cps)))
    for s in diff[:5]:
        print("   ", repr(s)[:120])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", help="SmolLM2-135M-Instruct GGUF: rewrite smollm2_expected.txt")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    cps = corpus()
    with open(os.path.join(OUT, "corpus.txt"), "w") as f:
        for b, s in cps:
            f.write("T %s\nC %s\n" % (b.hex(), s.encode("utf-8").hex()))
    write_pretok(os.path.join(OUT, "pretok.expected"), cps)
    write_pretok_all(os.path.join(OUT, "pretok_all.expected"))
    text = training_text()
    fixtures = [("gpt2", make_gpt2(text), "gpt2"), ("llama", make_llama(text), "llama-bpe"),
                ("smollm", make_smollm(text), "smollm"), ("edge", make_edge(True), None),
                ("edge_nofuse", make_edge(False), None)]
    for name, d, pre in fixtures:
        js = json.dumps(d, ensure_ascii=False, indent=1)
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            f.write(js + "\n")
        tk = Tokenizer.from_str(js)
        if pre:
            write_arrays(os.path.join(OUT, name + ".arrays"), d, pre)
        write_expected(os.path.join(OUT, name + ".expected"), tk, cps,
                       random.Random(sum(map(ord, name))))
        print("%s: vocabulary %d, %d merges" % (name, tk.get_vocab_size(),
                                                len(d["model"]["merges"])))
    if args.gguf:
        tk = smollm2_from_gguf(args.gguf)
        write_expected(os.path.join(OUT, "smollm2_expected.txt"), tk, cps, random.Random(5))
        print("smollm2: vocabulary %d" % tk.get_vocab_size())
        compare_transformers(args.gguf, tk, cps)


if __name__ == "__main__":
    main()
