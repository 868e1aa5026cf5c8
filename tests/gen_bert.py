#!/usr/bin/env python3
"""Reference data for tests/test_bert.c.

    python3 tests/gen_bert.py                 # tests/fixtures/bert_tiny/ + its expected file
    python3 tests/gen_bert.py --minilm DIR    # tests/fixtures/minilm_expected.txt from the real
                                              # all-MiniLM-L6-v2 folder with sentence-transformers
    python3 tests/gen_bert.py --bench DIR ATTN  # sentences/s at batch 32, length 128, 2 threads:
                                              # the attn program (--dtype f32, f16, bf16)
                                              # against sentence-transformers
    python3 tests/gen_bert.py --fuzz DIR ATTN # token ids of `attn embed --ids` against the HF
                                              # tokenizer on random text and every code point
(The tokenizer's Unicode tables are library source: tools/gen_unicode_tables.py writes them.)

The tiny model is a random BertModel (hidden 32, 2 layers, 4 heads, intermediate 64) over a
small generated vocabulary (English pieces, accented words, Japanese characters).  Expected
token ids come from transformers' BertTokenizer (slow, the definition) and are checked against
BertTokenizerFast; expected embeddings are computed in float64 with transformers' BertModel,
mean-pooled over the real tokens and L2-normalised, one sentence at a time (no padding).

Expected file format, per sentence three lines:
    T <hex of the UTF-8 bytes>
    I <count> <ids...>
    E <hidden floats...>
Needs torch, safetensors and transformers (pip install transformers); --minilm also needs
sentence-transformers.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "fixtures", "bert_tiny")

SENTENCES = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "   ",
    "Café au lait, s'il vous plaît.",
    "naïve façade résumé Ångström",
    "ÉCOLE NORMALE SUPÉRIEURE",
    "Zürich, München & Köln",
    "Łódź, Kraków, Gdańsk — Polish cities",
    "İstanbul ve Ankara",
    "日本語のテキストです。",
    "東京タワーは高いですか？",
    "がぎぐげご パピプペポ ヴァイオリン",
    "こんにちは、世界！",
    "私は学生です",
    "中文分词测试：北京欢迎你",
    "한국어 문장입니다",
    "Ελληνικά: Καλημέρα κόσμε",
    "Привет, мир! Как дела?",
    "What?! No way... (really) [yes] {maybe}",
    "e-mail: someone@example.com, url: https://example.org/path?q=1&r=2",
    "1,234.56 $100 50% #hashtag @user",
    "Tabs\tand\nnewlines\r\nand  multiple   spaces",
    "Control\u0001chars\u0007and\u200bzero\u00adwidth",
    "Non\u00a0breaking\u3000ideographic space",
    "\u201cSmart quotes\u201d and \u2018single\u2019 \u2014 dashes \u2013 and\u2026 ellipsis",
    "¿Qué tal? ¡Muy bien!",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a" * 120,
    " ".join(["sentence embeddings are useful"] * 200),
    "emoji \U0001F600 test \U0001F389",
    "Mixed 日本 English テキスト",
    "unbelievable unbelievably",
    "The cat sat on the mat.",
    "A man is playing guitar.",
    "Machine learning is a subset of artificial intelligence.",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "I can't believe it's not butter!",
    "œuvre, Æsir, straße",
    "x",
    "Numbers: 3.14159 2.71828 1e-10",
    "C'est la vie; c'est comme ça.",
    "Ça va? Où est la gare?",
    "Résumé: expérience à l'étranger",
    "The year 2024 was great.",
    "ÀÁÂÃÄÅàáâãäå ÇçÑñ",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    'She said: "Hello!"',
    "Path C:\\Users\\name\\file.txt",
    "Let's go to the café at 5 o'clock.",
]


def make_vocab():
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    toks += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    toks += ["##" + d for d in "0123456789"]
    words = ("the quick brown fox jumps over lazy dog hello world cafe au lait vous plait "
             "naive facade resume angstrom ecole normale superieure zurich munchen koln "
             "un ##believ ##able ##ably sentence embed ##ding ##dings are use ##ful cat sat "
             "on mat man is playing guitar machine learning subset artificial intelligence "
             "what no way really yes maybe mail example com url https org path super ##cal "
             "##if ##ragi test mixed english can believe it not butter oeuvre strasse numbers "
             "c est la vie comme ca va ou gare year was great uber den wolken she said let go "
             "to at clock tabs and new ##lines multiple spaces control chars zero width "
             "non breaking space smart quotes single dashes ellipsis que tal muy bien "
             "istanbul ve ankara lodz krakow gdansk polish cities").split()
    toks += words
    toks += list("日本語のテキストです東京タワーは高いか世界私学生中文分词测试北京欢迎你")
    toks += ["##" + c for c in "本語のキストすワーいかん界生"]
    toks += list("こんにちカタかきくけこはひふへほ") + ["ｆ", "１", "é", "ß", "æ"]
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def write_expected(path, sents, ids, embs):
    with open(path, "w") as f:
        for s, i, e in zip(sents, ids, embs):
            f.write("T " + s.encode("utf-8").hex() + "\n")
            f.write("I %d %s\n" % (len(i), " ".join(str(x) for x in i)))
            f.write("E " + " ".join("%.9g" % float(x) for x in e) + "\n")


def gen_tiny():
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel, BertTokenizer, BertTokenizerFast

    os.makedirs(os.path.join(TINY, "1_Pooling"), exist_ok=True)
    vocab = make_vocab()
    with open(os.path.join(TINY, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    cfg = dict(architectures=["BertModel"], model_type="bert", hidden_act="gelu",
               hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=80, type_vocab_size=2,
               vocab_size=len(vocab) + 3, layer_norm_eps=1e-12, pad_token_id=0,
               position_embedding_type="absolute", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1)
    with open(os.path.join(TINY, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(TINY, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True,
                   "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]",
                   "tokenizer_class": "BertTokenizer", "model_max_length": 64}, f)
    with open(os.path.join(TINY, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 64, "do_lower_case": False}, f)
    with open(os.path.join(TINY, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}], f, indent=2)
    with open(os.path.join(TINY, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, "pooling_mode_cls_token": False,
                   "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}, f, indent=2)

    torch.manual_seed(5)
    model = BertModel(BertConfig(**cfg), add_pooling_layer=False).eval()
    with torch.no_grad():  # larger weights than BERT's init so every part matters
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    save_file(sd, os.path.join(TINY, "model.safetensors"), metadata={"format": "pt"})

    tok = BertTokenizer(os.path.join(TINY, "vocab.txt"), do_lower_case=True)
    fast = BertTokenizerFast(os.path.join(TINY, "vocab.txt"), do_lower_case=True)
    model = model.double()
    ids, embs = [], []
    for s in SENTENCES:
        i = tok(s, truncation=True, max_length=64)["input_ids"]
        fi = fast(s, truncation=True, max_length=64)["input_ids"]
        if i != fi:
            print("note: slow and fast tokenizers differ on %r" % s, file=sys.stderr)
        with torch.no_grad():
            h = model(torch.tensor([i])).last_hidden_state[0]
        e = h.mean(0)
        e = e / e.norm().clamp_min(1e-12)
        ids.append(i)
        embs.append(e.tolist())
    write_expected(os.path.join(HERE, "fixtures", "bert_tiny_expected.txt"), SENTENCES, ids,
                   embs)
    # CLS and max pooling (sentence-transformers: padding set to -1e9 before the max), both
    # normalised, on the first 20 sentences
    for mode in ("cls", "max"):
        out = []
        for i in ids[:20]:
            with torch.no_grad():
                h = model(torch.tensor([i])).last_hidden_state[0]
            e = h[0] if mode == "cls" else h.max(0).values
            out.append((e / e.norm().clamp_min(1e-12)).tolist())
        write_expected(os.path.join(HERE, "fixtures", "bert_tiny_%s_expected.txt" % mode),
                       SENTENCES[:20], ids[:20], out)


def gen_minilm(d):
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(d, device="cpu")
    tk = m.tokenizer
    ids = [tk(s, truncation=True, max_length=m.max_seq_length)["input_ids"] for s in SENTENCES]
    embs = m.encode(SENTENCES, batch_size=32, convert_to_numpy=True)
    write_expected(os.path.join(HERE, "fixtures", "minilm_expected.txt"), SENTENCES, ids, embs)


def bench(d, attn, rounds=5):
    """Sentences/s of sentence-transformers and of `attn embed` (f32, f16, bf16), measured in
    turns (rounds x each), medians reported: the machine may be shared, and alternating keeps
    a slow spell from favouring one side."""
    import statistics
    import subprocess
    import tempfile
    import time

    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    m = SentenceTransformer(d, device="cpu")
    words = "the model reads a sentence and writes one vector for it".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(126)) for i in range(32)]
    n = len(m.tokenizer(texts[0])["input_ids"])
    reps = 10
    m.encode(texts, batch_size=32)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts) + "\n")

    def run(dtype):
        r = subprocess.run([attn, "embed", "--model", d, "--file", f.name, "--threads", "2",
                            "--repeat", str(reps), "--dtype", dtype], capture_output=True,
                           text=True, check=True)
        return float(r.stderr.split("attn embed: ")[1].split()[0])

    got = {"pt": [], "f32": [], "f16": [], "bf16": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            m.encode(texts, batch_size=32)
        got["pt"].append(32 * reps / (time.perf_counter() - t0))
        for dt in ("f32", "f16", "bf16"):
            got[dt].append(run(dt))
    os.unlink(f.name)
    med = {k: statistics.median(v) for k, v in got.items()}
    pt = med["pt"]
    print("batch 32, length %d, 2 threads, medians of %d turns: PyTorch %s %.1f sentences/s; "
          "attn f32 %.1f (ratio %.2f), f16 %.1f (ratio %.2f), bf16 %.1f (ratio %.2f)"
          % (n, rounds, torch.__version__, pt, med["f32"], med["f32"] / pt, med["f16"],
             med["f16"] / pt, med["bf16"], med["bf16"] / pt))


def fuzz(d, attn, seed=0):
    import random
    import subprocess
    import tempfile

    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(d)
    rnd = random.Random(seed)
    blocks = [(0x20, 0x7E)] * 6 + [
        (0x1, 0x1F), (0x7F, 0x24F), (0x250, 0x36F), (0x370, 0x52F), (0x530, 0x6FF),
        (0x900, 0xE7F), (0x1E00, 0x1FFF), (0x2000, 0x2BFF), (0x2E00, 0x2E7F), (0x3000, 0x30FF),
        (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xE0FF),
        (0xF900, 0xFAFF), (0xFE00, 0xFFEF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF),
        (0xE0000, 0xE007F)]
    texts = []
    for _ in range(4000):
        s = []
        for _ in range(rnd.randint(1, 12)):
            c = rnd.randint(*rnd.choice(blocks))
            if not (0xD800 <= c <= 0xDFFF or c in (0xA, 0xD)):
                s.append(chr(c))
            if rnd.random() < 0.3:
                s.append(" ")
        texts.append("".join(s))
    cps = list(range(0x80, 0x10000)) + list(range(0x10000, 0x110000, 7))
    texts += ["a" + chr(c) + "b" for c in cps
              if not 0xD800 <= c <= 0xDFFF and chr(c) not in "\n\r\x1c\x1d\x1e\x85\u2028\u2029"]
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts) + "\n")
    r = subprocess.run([attn, "embed", "--model", d, "--ids", "--file", f.name],
                       capture_output=True, check=True)
    os.unlink(f.name)
    got = r.stdout.decode().split("\n")
    bad = 0
    for t, g in zip(texts, got):
        want = tok(t, truncation=True, max_length=512)["input_ids"]
        if [int(x) for x in g.split()] != want:
            bad += 1
            if bad <= 10:
                print("differ: %r" % t)
    print("%d of %d texts tokenised differently" % (bad, len(texts)))
    return bad


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--fuzz":
        sys.exit(1 if fuzz(sys.argv[2], sys.argv[3]) else 0)
    elif len(sys.argv) == 4 and sys.argv[1] == "--bench":
        bench(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "--minilm":
        gen_minilm(sys.argv[2])
    else:
        gen_tiny()
