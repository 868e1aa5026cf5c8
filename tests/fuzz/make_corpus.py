#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (standard library only):

    corpus/             fuzz_safetensors
    corpus_hf_config/   fuzz_hf_config   (config.json, modules.json, 1_Pooling/config.json,
                                          sentence_bert_config.json, split by SEP)
    corpus_tokenizer/   fuzz_tokenizer   (vocab.txt, tokenizer_config.json, text, split by SEP)
    corpus_checkpoint/  fuzz_checkpoint  (checkpoints made by `attn train ... --steps 2`)
    corpus_imgdata/     fuzz_imgdata     (IDX images [SEP labels], raw or gzipped; PGM; PNG,
                                          also with uncompressed scanlines in IDAT)
    corpus_gguf/        fuzz_gguf        (tests/fixtures/gguf's files, every tensor type,
                                          string arrays, a nested array)
    corpus_llm_config/  fuzz_llm_config  (config.json of tests/fixtures/llama_tiny, variants)
    corpus_bpe/         fuzz_bpe         (tokenizer.json or token/merge arrays, SEP, a text;
                                          the tokenizers of tests/fixtures/bpe and
                                          tests/fixtures/wordpiece among them)
    corpus_chat/        fuzz_chat        (a chat template, SEP, tools JSON, SEP, tool calls
                                          JSON; the templates of tests/fixtures/chat)

Run from tests/fuzz: python3 make_corpus.py [ATTN]; with ATTN (the attn program, e.g.
../../build/attn) the checkpoints are made again, else they are left as they are.  The files
are committed (all are small); the library and its tests never need Python."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SEP = b"\x1e\x1e"  # fuzz_util.h FZ_SEP
FIXTURE = os.path.join("..", "fixtures", "bert_tiny")


def write(path, tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes), laid out back to back."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


os.makedirs("corpus", exist_ok=True)
write("corpus/empty.safetensors", [])
write("corpus/basic.safetensors",
      [("weight", "F32", [2, 2], struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)),
       ("bias", "F16", [2], struct.pack("<2H", 0x3C00, 0x0001))],
      {"format": "pt"})
write("corpus/alltypes.safetensors",
      [("f64", "F64", [1], struct.pack("<d", 1e300)),
       ("i64", "I64", [1], struct.pack("<q", -5)),
       ("i32", "I32", [1], struct.pack("<i", 7)),
       ("bf16", "BF16", [1, 1], struct.pack("<H", 0x4049)),
       ("i8", "I8", [2], struct.pack("<2b", -128, 3)),
       ("u8", "U8", [1], b"\xff"),
       ("b", "BOOL", [1], b"\x01"),
       ("empty", "F32", [0, 3], b""),
       ("scalar\u00e9\U0001F600\n\"", "U8", [], b"\x07")],
      {"k\t": "v\u20ac", "": ""}, pad=False)


def put(folder, name, *parts):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(SEP.join(p if isinstance(p, bytes) else p.encode() for p in parts))


def fixture(name):
    with open(os.path.join(FIXTURE, name), "rb") as f:
        return f.read()


# ---- fuzz_hf_config: the fixture's JSON files, and variants that still load ----------------
cfg, mods = fixture("config.json"), fixture("modules.json")
pool, sbert = fixture("1_Pooling/config.json"), fixture("sentence_bert_config.json")
H = "corpus_hf_config"
put(H, "fixture", cfg, mods, pool, sbert)
put(H, "config_only", cfg)
put(H, "no_sbert", cfg, mods, pool)
c = json.loads(cfg)
c.update(num_hidden_layers=1, layer_norm_eps=1e-5, pad_token_id=1)
del c["model_type"], c["type_vocab_size"]
m = json.loads(mods)[:2]
put(H, "one_layer_cls", json.dumps(c),
    json.dumps(m), json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}),
    json.dumps({"max_seq_length": 8, "do_lower_case": True}))
m = [{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
     {"idx": 1, "path": "1_Pooling/", "type": "Pooling"}, {"type": "models.Normalize"}]
put(H, "max_pooling", json.dumps(c, indent=1), json.dumps(m),
    json.dumps({"pooling_mode_max_tokens": True, "pooling_mode_mean_sqrt_len_tokens": False}),
    '{"max_seq_length": 200}')

# ---- fuzz_llm_config: llama_tiny's config.json and variants that still load ----------------
with open(os.path.join("..", "fixtures", "llama_tiny", "config.json"), "rb") as f:
    lcfg = f.read()
L = "corpus_llm_config"
put(L, "fixture", lcfg)
c = json.loads(lcfg)
c.pop("rope_parameters")
c.update(rope_theta=10000.0, rope_scaling=None, head_dim=None, max_position_embeddings=2)
put(L, "old_style", json.dumps(c, indent=1))
c = {k: v for k, v in json.loads(lcfg).items()
     if k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "vocab_size",
              "max_position_embeddings", "tie_word_embeddings")}
c["rope_scaling"] = {"type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 1.0}
put(L, "minimal", json.dumps(c))

# ---- fuzz_tokenizer: vocabularies, settings and texts, hostile UTF-8 among them -------------
vocab, tok = fixture("vocab.txt"), fixture("tokenizer_config.json")
T = "corpus_tokenizer"
put(T, "fixture_en", vocab, tok, "Caf\u00e9 au lait, s'il vous pla\u00eet! The quick brown fox.")
put(T, "fixture_cjk", vocab, tok, "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059"
    " \u6771\u4eac\u30bf\u30ef\u30fc\uff46\uff11 unbelievable supercalifragi")
put(T, "no_config", vocab)
put(T, "cased_accents", vocab,
    '{"do_lower_case": false, "strip_accents": true, "tokenize_chinese_chars": false}',
    "R\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00c9cole Normale Sup\u00e9rieure, Z\u00fcrich "
    "M\u00fcnchen K\u00f6ln \u0130stanbul \u0141\u00f3d\u017a \u00df\u00e6 \ufb01")
hostile = (b"ok \xc0\xaf \xe0\x80\xaf \xed\xa0\x80\xed\xb0\x80 \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80 "
           b"\xe6\x97 trunc\xc3 \xef\xbf\xbd \xef\xbb\xbf bom \xe2\x80\x8b zero\xe2\x80\x8cwidth "
           b"\xe2\x80\xae rtl \xcc\x81\xcc\x81 combining a\xcc\x8a \x01\x7f\t\r\n \xc2\xa0nbsp "
           b"\xf0\x9f\x98\x80 \xf3\xa0\x80\x81 \xee\x80\x80 \xff\xfe")
put(T, "hostile_utf8", vocab, tok, hostile)
small = b"[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nun\r\n##aff\r\n##able\r\nun\r\n##\r\n\r\n" \
        b"\xc3\xa9\n##\xc3\xa9\n!\n"
put(T, "small_crlf", small,
    '{"unk_token": {"content": "[UNK]", "lstrip": false}, "cls_token": "[CLS]", '
    '"pad_token": null, "tokenizer_class": "BertTokenizerFast", "strip_accents": null}',
    "unaffable un!aff able \u00e9\u00e9 " + "x" * 120 + " unaffableunaffable")
put(T, "truncated", vocab, "{}", "hello world " * 80)

# ---- fuzz_imgdata: IDX files (raw, gzipped, with labels), PGM and PNG images --------------
I = "corpus_imgdata"


def idx(ndim_dims, payload):
    return bytes([0, 0, 8, len(ndim_dims)]) + b"".join(struct.pack(">I", d) for d in ndim_dims) \
        + bytes(payload)


def png(w, h, depth, ctype, rows, plte=None, trns=None, raw_idat=False):
    """rows: the packed scanlines; filter type y % 5 on row y (applied here)."""
    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    bpp = max(1, ch * depth // 8)
    out, prev = b"", bytes(len(rows[0]))
    for y, r in enumerate(rows):
        ft, f = y % 5, bytearray([y % 5])
        for i in range(len(r)):
            a = r[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = [0, a, b, (a + b) // 2, a if pa <= pb and pa <= pc else b if pb <= pc else c][ft]
            f.append((r[i] - pred) & 255)
        out += bytes(f)
        prev = r

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))
    if plte:
        data += chunk(b"PLTE", plte)
    if trns:
        data += chunk(b"tRNS", trns)
    return data + chunk(b"IDAT", out if raw_idat else zlib.compress(out, 9)) + chunk(b"IEND", b"")


put(I, "idx_labels", idx([3, 2, 2], range(12)), idx([3], [0, 2, 1]))
put(I, "idx_images", idx([2, 3, 3], range(100, 118)))
put(I, "idx_gz", gzip.compress(idx([2, 2, 3], range(12)), mtime=0), idx([2], [1, 0]))
put(I, "pgm_p5", b"P5\n# seed\n3 2\n255\n" + bytes([0, 1, 128, 254, 255, 16]))
put(I, "pgm_p2", b"P2 4 1 15\n# comment\n0 15 7 8\n")
put(I, "pgm_p5_16", b"P5 3 1 65535\n" + bytes([0, 0, 255, 255, 128, 128]))
rgb = [bytes((x * 40 + y * 7 + c * 90) & 255 for x in range(4) for c in range(3)) for y in range(5)]
for raw in (False, True):
    sfx = "_raw_idat" if raw else ""
    put(I, "png_gray8" + sfx, png(5, 5, 8, 0, [bytes(range(y, y + 5)) for y in range(5)],
                                  raw_idat=raw))
    put(I, "png_rgb8" + sfx, png(4, 5, 8, 2, rgb, trns=b"\0\0\0\7\0\x5a", raw_idat=raw))
    put(I, "png_rgba8" + sfx, png(3, 5, 8, 6, [r[:12] for r in rgb], raw_idat=raw))
    put(I, "png_palette2" + sfx, png(5, 2, 2, 3, [b"\x1b\x80", b"\xe4\x40"],
                                     plte=bytes(range(12)), trns=b"\xff\x00", raw_idat=raw))
    put(I, "png_gray16" + sfx, png(2, 5, 16, 0, [bytes([y, 1, 255 - y, 2]) for y in range(5)],
                                   trns=b"\x02\x01", raw_idat=raw))
    put(I, "png_ga8" + sfx, png(2, 5, 8, 4, [bytes([y * 9, 200, 30, y * 50]) for y in range(5)],
                                raw_idat=raw))
    put(I, "png_gray1" + sfx, png(10, 5, 1, 0, [bytes([0xa5 ^ y, 0x80]) for y in range(5)],
                                  raw_idat=raw))

# ---- fuzz_gguf: the GGUF fixtures (tests/gen_gguf.py) and a few files made here ------------
G = "corpus_gguf"
os.makedirs(G, exist_ok=True)
GGUF_FIX = os.path.join("..", "fixtures", "gguf")
for name in sorted(os.listdir(GGUF_FIX)):
    if name.endswith(".gguf"):
        shutil.copy(os.path.join(GGUF_FIX, name), os.path.join(G, name))


def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs, tensors, align=32, version=3):
    """kvs: encoded entries; tensors: (name, ne list, GGML type, raw bytes), packed in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    data, off = b"", []
    for name, ne, qtype, raw in tensors:
        data += b"\0" * (-len(data) % align)
        off.append(len(data))
        data += raw
    for (name, ne, qtype, raw), o in zip(tensors, off):
        out += gguf_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", qtype, o)
    return out + b"\0" * (-len(out) % align) + data


# one tensor of every type attn reads: (type, block elements, block bytes)
QTYPES = [(0, 1, 4), (1, 1, 2), (2, 32, 18), (3, 32, 20), (6, 32, 22), (7, 32, 24), (8, 32, 34),
          (10, 256, 84), (11, 256, 110), (12, 256, 144), (13, 256, 176), (14, 256, 210),
          (15, 256, 292), (30, 1, 2)]
with open(os.path.join(G, "every_qtype.gguf"), "wb") as f:
    f.write(gguf_file([gguf_str("general.alignment") + struct.pack("<II", 4, 16)],
                      [("t%d" % t, [e, 2], t, bytes(i % 251 for i in range(2 * b)))
                       for t, e, b in QTYPES],
                      align=16))
with open(os.path.join(G, "nested_array.gguf"), "wb") as f:  # refused: arrays of arrays
    f.write(gguf_file([gguf_str("a") + struct.pack("<IIQIQ", 9, 9, 1, 4, 2) + b"\1\0\0\0\2\0\0\0"],
                      []))
with open(os.path.join(G, "strings.gguf"), "wb") as f:
    f.write(gguf_file([gguf_str("general.alignment") + struct.pack("<II", 4, 1),
                       gguf_str("s") + struct.pack("<I", 8) + gguf_str("x" * 20),
                       gguf_str("v") + struct.pack("<IIQ", 9, 8, 3) + gguf_str("") +
                       gguf_str("\u00e9") + gguf_str(b"a\0b"),
                       gguf_str("b") + struct.pack("<IIQ", 9, 7, 2) + b"\1\0"],
                      [("e", [0, 3], 0, b"")], align=1, version=2))

# ---- fuzz_bpe: tokenizer.json files (the test fixtures, a minimal one, broken ones) and token
# arrays, each with a text ------------------------------------------------------------------
B = "corpus_bpe"
BPE = os.path.join("..", "fixtures", "bpe")
texts = ["Hello world, I'm here; YOU'LL see 12345 \u00bd\u00b2 caf\u00e9\t\r\n  x  ",
         "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467 e\u0301 \u4e2d\u6587 \u0627\u0644 'S'LL"]
for i, name in enumerate(["gpt2", "llama", "smollm", "edge"]):
    with open(os.path.join(BPE, name + ".json"), "rb") as f:
        tj = f.read()
    put(B, name, tj, texts[i % len(texts)])
put(B, "gpt2_hostile", open(os.path.join(BPE, "gpt2.json"), "rb").read(), hostile)
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
mini = {"version": "1.0", "added_tokens": [
            {"id": 4, "content": "<s>", "special": True, "normalized": False},
            {"id": 5, "content": "[u]", "special": False, "normalized": True}],
        "normalizer": None, "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
        "model": {"type": "BPE", "dropout": None, "unk_token": "c", "fuse_unk": True,
                  "ignore_merges": True, "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3},
                  "merges": ["a b", ["a", "b"]]}}
put(B, "mini", json.dumps(mini), "ab<s>ba[u]qq ab")
mini["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True}, bl]}
put(B, "mini_digits", json.dumps(mini), "a1b22ab333")
mini["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": False},
    dict(bl, use_regex=False)]}
put(B, "mini_unsupported", json.dumps(mini), "ab")
put(B, "truncated", json.dumps(mini)[:90], "ab")
put(B, "arrays_gpt2", "gpt2\na\nb\nab\n!<|x|>\n?c\n\u0120\n\na b", "ab<|x|> cab")
put(B, "arrays_llama", "llama-bpe\na\nb\nab\n\u0120\n\u0120ab\n!<s>\n\na b\n\u0120 ab",
    "AB 'Ll ab  ab<s>")
put(B, "arrays_smollm", "smollm\n1\n2\n12\n\n1 2", "1212 \u0663")
put(B, "arrays_bad_merge", "gpt2\na\nb\n\na c", "ab")
# WordPiece (BERT's): tests/fixtures/wordpiece's tokenizers, and a minimal one with a normalized
# added token, a prefix of its own and a short word limit
WP = os.path.join("..", "fixtures", "wordpiece")
wtexts = ["Caf\u00e9 NA\u00cfVE [CLS] don't! \u4e2d\u6587x\u6587 \x01\u200b tab\tend " + "z" * 120,
          "[[TOOL]]QQ<Special> unbelievably \U0001F600 \u00bd e\u0301 \u3000 ...?",
          "@@ab abab aab \u0130stanbul \u1e9e STRASSE \x00"]
for i, name in enumerate(["uncased", "cased", "plain"]):
    with open(os.path.join(WP, name + ".json"), "rb") as f:
        put(B, "wp_" + name, f.read(), wtexts[i])
wp = {"version": "1.0", "added_tokens": [
          {"id": 0, "content": "[UNK]", "special": True, "normalized": False},
          {"id": 5, "content": "Ab!", "special": False, "normalized": True}],
      "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                     "strip_accents": None, "lowercase": True},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "BertProcessing", "sep": ["b", 2], "cls": ["a", 1]},
      "decoder": {"type": "WordPiece", "prefix": "~", "cleanup": True},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "~",
                "max_input_chars_per_word": 4, "vocab": {"[UNK]": 0, "a": 1, "b": 2, "~b": 3,
                                                         "ab": 4}}}
put(B, "wp_mini", json.dumps(wp), "AB ab! aB! abab abbbb \u00c1b ~b")

# ---- fuzz_chat: every template of tests/fixtures/chat (those attn formats and those it
# refuses), with tools and tool calls, and a few small ones --------------------------------------
H = "corpus_chat"
TPL = os.path.join("..", "fixtures", "chat", "templates")
tools = json.dumps([{"type": "function", "function": {
    "name": "get_weather", "description": "Weather \u00e9 \"q\"\n", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "default": 0.5},
                                         "n": {"type": "integer", "examples": [1e16, -0, 3]}},
        "required": ["city"]}}, "return": {}}])
calls = json.dumps([{"id": "call12345", "type": "function", "function": {
    "name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2.5, None, True]}}}])
for sub in ("", "refused"):
    for fn in sorted(os.listdir(os.path.join(TPL, sub))):
        if not fn.endswith(".jinja"):
            continue
        with open(os.path.join(TPL, sub, fn), "rb") as f:
            t = f.read()
        put(H, (sub + "_" if sub else "") + fn[:-6], t, tools, calls)
put(H, "chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")
put(H, "chatml_tools", "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
    "'\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}", "[]", "[]")
put(H, "string_arguments", open(os.path.join(TPL, "qwen3.jinja"), "rb").read(), "[]",
    '[{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]')

# ---- fuzz_checkpoint: the smallest models `attn train` makes, two steps of training ----------
if len(sys.argv) > 1:
    attn = os.path.abspath(sys.argv[1])
    C = os.path.abspath("corpus_checkpoint")
    os.makedirs(C, exist_ok=True)
    tmp = tempfile.mkdtemp()
    try:
        with open(os.path.join(tmp, "text.txt"), "w") as f:
            f.write("the cat sat on the mat. a cat is not a hat.\n" * 8)
        small = ["--d-model", "8", "--heads", "2", "--layers", "1", "--ff", "16", "--batch", "2",
                 "--steps", "2", "--threads", "1", "--eval-every", "0"]
        subprocess.run([attn, "train", "charlm", "--text", "text.txt", "--block", "8",
                        "--sample", "4", "--out", "lm"] + small, cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([attn, "train", "dates", "--eval-n", "1", "--out", "dm"] + small, cwd=tmp,
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([attn, "train", "dates", "--eval-n", "1", "--out", "dpost", "--layers",
                        "2", "--ff", "8", "--d-model", "4", "--heads", "1", "--dropout", "0.1"]
                       + small[8:], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        for src, dst in [("lm/model.safetensors", "charlm.safetensors"),
                         ("lm/state.safetensors", "charlm_state.safetensors"),
                         ("dm/model.safetensors", "dates.safetensors"),
                         ("dpost/model.safetensors", "dates_2layers.safetensors")]:
            shutil.copy(os.path.join(tmp, src), os.path.join(C, dst))
    finally:
        shutil.rmtree(tmp)
