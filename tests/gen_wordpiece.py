#!/usr/bin/env python3
"""Writes the WordPiece fixtures of tests/test_bpe.c (attn_bpe's WordPiece kind: BERT's
tokenizer) into tests/fixtures/wordpiece/, from the Hugging Face tokenizers library (and
transformers, for a BERT folder's vocab.txt):

  corpus.txt          the test texts: tests/gen_bpe.py's fuzzed corpus (every script, runs of
                      whitespace, controls, emoji, invalid UTF-8, ...) and texts for BERT's rules:
                      accents in both cases, CJK ideographs between letters, emoji and symbols,
                      every ASCII punctuation mark, control and format characters, NUL, runs of
                      spaces and tabs, words over max_input_chars_per_word, characters no token
                      holds ([UNK]), special and added tokens inside text; per text its bytes (T)
                      and the str the library sees, bytes.decode('utf-8', 'replace') (C)
  NAME.json           a small WordPiece tokenizer.json, its vocabulary built here from
                      gen_bpe's training text and more words (deterministic)
  NAME.expected       per text of corpus.txt: the ids with special tokens parsed (I) and not
                      parsed (J, the library's encode_special_tokens; "J =" when the same), no
                      [CLS]/[SEP] (add_special_tokens=False) and no truncation or padding; then
                      id sequences (R) with the library's decode (D; S skipping special tokens)
  folder/             vocab.txt (uncased's vocabulary) and a tokenizer_config.json of other
                      options, for attn_bpe_load_wordpiece; folder.expected: transformers'
                      BertTokenizer loaded from that folder (its backend tokenizer), as above
  minilm_expected.txt the same for the real all-MiniLM-L6-v2 tokenizer.json (--minilm DIR, or
                      left as it is): only ids are committed; test_bpe.c reads DIR's
                      tokenizer.json and vocab.txt when ATTN_MINILM_DIR names it

The tokenizers:
  uncased  BertNormalizer's defaults (clean_text, handle_chinese_chars, strip_accents null,
           lowercase), BertPreTokenizer, WordPiece ("##", 100 characters), WordPiece decoder with
           cleanup, TemplateProcessing [CLS] $A [SEP]; added tokens: the five special ones, a
           normalized non-special "[[Tool]]" (matched as "[[tool]]" in the lower-cased text), a
           raw non-special "QQ" and a normalized special "<Special>"
  cased    BertNormalizer(clean_text=false, handle_chinese_chars=false, strip_accents=true,
           lowercase=false), max_input_chars_per_word 12, decoder without cleanup,
           BertProcessing
  plain    no normalizer, continuing_subword_prefix "@@" (the decoder's too), 8 characters a
           word, unk "<unk>", no post-processor, padding with pad_id

    python3 tests/gen_wordpiece.py [--minilm DIR]

Deterministic (seeded); needs `pip install tokenizers transformers`.
"""
import argparse
import json
import os
import random
import sys
import tempfile

from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "wordpiece")
sys.path.insert(0, HERE)
import gen_bpe  # noqa: E402  (the corpus, the id sequences, the expected file's format)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

EXTRA_WORDS = ("Café CAFÉ naïve NAÏVE résumé Ångström Øresund Łódź Straße STRASSE İstanbul "
               "ǅemal ﬁnance Ⅻ ½ Ωmega ΣΊΣΥΦΟΣ Ǆ ß ẞ Æsir œuvre Ça Où Noël ñandú São Paulo "
               "Ελληνικά Привет мир Καλημέρα עברית العربية हिन्दी ภาษาไทย 한국어 "
               "日本語 中文 漢字 東京 北京 你好世界 テキスト ひらがな "
               "unbelievable unbelievably playing played player plays replay "
               "tokenization tokenizer token tokens embedding embeddings").split()


def texts():
    """gen_bpe's corpus, then texts for BERT's normalizer, pre-tokenizer and WordPiece."""
    out = [b for b, _ in gen_bpe.corpus()]
    fixed = [
        "Hello, World! How are you?", "HELLO world", "héllo HÉLLO Héllo", "naïve NAÏVE",
        "Ångström ÅNGSTRÖM", "Straße STRASSE ẞ", "İstanbul ıi İI", "ǅemal Ǆ ǆ", "ﬁnance ﬂ",
        "Ⅻ ⅻ ½ ²", "e\u0301 E\u0301 \u0301 x\u0301\u0302y", "한국어 한글", "\u1100\u1161",
        "日本語のテキスト", "中文分词测试：北京欢迎你", "abc東京def", "x中y文z",
        "\U00020000\U0002A700 \u3400 \uF900\uFA6D", "カタカナ ひらがな ﾊﾝｶｸ",
        "emoji \U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "a!b\"c#d$e%f&g'h(i)j*k+l,m-n.o/p",
        "¡¿«»§¶·—–…‘’“”„†‡•′″‰‹›", "don't can't I'm we're they've it's",
        "don ' t . , ! ? do not", "tab\tsep\tvalues", "line\nbreak\r\nwindows\rmac",
        "a  b   c    d     e", "          ", " \t \n \r ", "\u00a0nbsp\u2003em\u3000ideo",
        "\u200bzero\u200cwidth\u200djoiner\ufeffbom", "soft\u00adhyphen", "ctrl\x01\x02\x1f\x7f",
        "nul\x00byte", "\x85next line", "\u2028\u2029", "private \ue000\uf8ff",
        "unassigned \u0378 \U000e0001", "replacement \ufffd char",
        "a" * 99, "a" * 100, "a" * 101, "b" * 12, "b" * 13, "c" * 8, "c" * 9,
        "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
        "x" * 300 + " y", "unbelievable unbelievably UNBELIEVABLE", "playing replayed",
        "tokenization tokenizers", "\u2603 \u2764 \u0f00 \U0001d11e \U0001f984",
        "[CLS] hello [SEP] world [MASK] [PAD] [UNK]", "[cls] [Sep] [MASK][MASK]",
        "a[CLS]b[SEP]c", "[[Tool]] [[tool]] [[TOOL]] x[[tool]]y", "QQ qq Qq xQQx",
        "<Special> <special> <SPECIAL> a<Special>b", "[[Tool]]QQ<Special>[CLS]",
        "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "3.14159 1,234,567 50% $100 #tag @user",
        "https://example.org/path?q=1&r=2#frag", "e-mail: someone@example.com",
        "C'est la vie; ça va? Où est la gare?", "¿Qué tal? ¡Muy bien!",
    ]
    out += [s.encode("utf-8") for s in fixed]
    out += [b"\xff\xfe hello \xc3 world", b"caf\xc3\xa9 caf\xc3", b"\xe6\x97\xa5\xe6\x9c"]
    return [(b, b.decode("utf-8", "replace")) for b in out]


def training_lines(seed=11):
    rng = random.Random(seed)
    lines = gen_bpe.training_text().split("\n")
    for _ in range(3000):
        lines.append(" ".join(rng.choice(EXTRA_WORDS) for _ in range(rng.randint(2, 9))))
    return lines


def vocabulary(normalizer, prefix, specials, size):
    """A WordPiece vocabulary built here, deterministically (the library's WordPieceTrainer
    breaks ties in a different order on every run): the special tokens, every character of the
    normalized training text alone and as a continuation, then the most frequent words (ties
    by text), each also cut in two (its first half, and the rest as a continuation) and with
    its last three characters as a continuation, until there are size tokens."""
    from collections import Counter
    pre = pre_tokenizers.BertPreTokenizer()
    counts = Counter()
    for line in training_lines():
        s = normalizer.normalize_str(line) if normalizer else line
        counts.update(w for w, _ in pre.pre_tokenize_str(s))
    chars = sorted({c for w in counts for c in w})
    vocab, seen = [], set()

    def add(t):
        if t not in seen and len(vocab) < size:
            seen.add(t)
            vocab.append(t)
    for t in specials:
        add(t)
    for c in chars:
        add(c)
    for c in chars:
        add(prefix + c)
    for w in sorted(counts, key=lambda w: (-counts[w], w)):
        add(w)
        if len(w) >= 4:
            add(w[:len(w) // 2])
            add(prefix + w[len(w) // 2:])
        if len(w) >= 6:
            add(prefix + w[-3:])
    return {t: i for i, t in enumerate(vocab)}


def trained(normalizer, vocab_size, prefix="##", unk="[UNK]", specials=SPECIALS,
            max_chars=100):
    vocab = vocabulary(normalizer, prefix, specials, vocab_size)
    tk = Tokenizer(models.WordPiece(vocab=vocab, unk_token=unk,
                                    max_input_chars_per_word=max_chars,
                                    continuing_subword_prefix=prefix))
    tk.normalizer = normalizer
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    return tk


def make_uncased():
    tk = trained(normalizers.BertNormalizer(), 1500)
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tk.add_tokens([AddedToken("[[Tool]]", normalized=True, special=False),
                   AddedToken("QQ", normalized=False, special=False)])
    tk.add_special_tokens([AddedToken("<Special>", normalized=True, special=True)])
    return tk


def make_cased():
    norm = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                      strip_accents=True, lowercase=False)
    tk = trained(norm, 1500, max_chars=12)
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tk.post_processor = processors.BertProcessing(("[SEP]", tk.token_to_id("[SEP]")),
                                                  ("[CLS]", tk.token_to_id("[CLS]")))
    return tk


def make_plain():
    tk = trained(None, 900, prefix="@@", unk="<unk>",
                 specials=["<pad>", "<unk>", "<s>", "</s>"], max_chars=8)
    tk.decoder = decoders.WordPiece(prefix="@@", cleanup=True)
    tk.enable_padding(pad_id=tk.token_to_id("<pad>"), pad_token="<pad>")
    return tk


def write_expected(path, tk, cps, rng, decodes=True):
    tk.no_truncation()
    tk.no_padding()
    with open(path, "w") as f:
        for _, s in cps:
            tk.encode_special_tokens = False
            i = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = True
            j = tk.encode(s, add_special_tokens=False).ids
            tk.encode_special_tokens = False
            f.write("I %d %s\n" % (len(i), " ".join(map(str, i))))
            if j == i:
                f.write("J =\n")
            else:
                f.write("J %d %s\n" % (len(j), " ".join(map(str, j))))
        if not decodes:
            return
        for ids in gen_bpe.id_sequences(tk, [s for _, s in cps], rng):
            f.write("R %d %s\n" % (len(ids), " ".join(map(str, ids))))
            f.write("D %s\n" % tk.decode(ids, skip_special_tokens=False).encode().hex())
            f.write("S %s\n" % tk.decode(ids, skip_special_tokens=True).encode().hex())


def folder_tokenizer(tk):
    """uncased's vocabulary as a BERT folder with other options; transformers' tokenizer."""
    from transformers import BertTokenizer
    d = os.path.join(OUT, "folder")
    os.makedirs(d, exist_ok=True)
    vocab = tk.get_vocab(with_added_tokens=False)
    words = [None] * len(vocab)
    for w, i in vocab.items():
        words[i] = w
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(w + "\n" for w in words))
    cfg = {"do_lower_case": False, "strip_accents": True, "tokenize_chinese_chars": False,
           "unk_token": {"__type": "AddedToken", "content": "[UNK]", "lstrip": False,
                         "normalized": False,
                         "rstrip": False, "single_word": False, "special": True},
           "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
           "mask_token": {"__type": "AddedToken", "content": "[MASK]", "special": True},
           "tokenizer_class": "BertTokenizer", "model_max_length": 512}
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    with tempfile.TemporaryDirectory() as t:  # transformers may write beside the files
        for name in ("vocab.txt", "tokenizer_config.json"):
            with open(os.path.join(d, name), "rb") as a, open(os.path.join(t, name), "wb") as b:
                b.write(a.read())
        return BertTokenizer.from_pretrained(t).backend_tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minilm", help="all-MiniLM-L6-v2 folder: rewrite minilm_expected.txt")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    cps = texts()
    with open(os.path.join(OUT, "corpus.txt"), "w") as f:
        for b, s in cps:
            f.write("T %s\nC %s\n" % (b.hex(), s.encode("utf-8").hex()))
    uncased = None
    for name, make in [("uncased", make_uncased), ("cased", make_cased), ("plain", make_plain)]:
        tk = make()
        js = json.dumps(json.loads(tk.to_str()), ensure_ascii=False, indent=1)
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            f.write(js + "\n")
        tk = Tokenizer.from_str(js)
        write_expected(os.path.join(OUT, name + ".expected"), tk, cps,
                       random.Random(sum(map(ord, name))))
        print("%s: vocabulary %d" % (name, tk.get_vocab_size()))
        if name == "uncased":
            uncased = tk
    ft = folder_tokenizer(uncased)
    write_expected(os.path.join(OUT, "folder.expected"), ft, cps, random.Random(3))
    print("folder: vocabulary %d, normalizer %s" % (ft.get_vocab_size(), ft.normalizer))
    if args.minilm:
        tk = Tokenizer.from_file(os.path.join(args.minilm, "tokenizer.json"))
        write_expected(os.path.join(OUT, "minilm_expected.txt"), tk, cps, random.Random(5))
        print("minilm: vocabulary %d" % tk.get_vocab_size())


if __name__ == "__main__":
    main()
