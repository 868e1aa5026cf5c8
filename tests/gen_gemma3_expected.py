#!/usr/bin/env python3
"""Writes fixtures/bpe/gemma3_expected.txt: Hugging Face's ids for varied texts with the
tokenizer transformers converts from Gemma 3 270M's GGUF file (the reference of test_bpe's
Gemma 3 case).  Needs transformers, gguf, sentencepiece and protobuf:

    python3 gen_gemma3_expected.py DIR gemma-3-270m-q4_k_m.gguf > fixtures/bpe/gemma3_expected.txt

Per text: "T hex(text)", "I n ids" (tok.encode(text, add_special_tokens=False): no BOS, special
tokens written in the text parsed) and "D hex(tok.decode(ids))"."""
import sys

from transformers import AutoTokenizer

GPL = "/usr/share/common-licenses/GPL-3"

TEXTS = [
    "Hello world", "Hello, world!", " leading space", "trailing space ", "two  spaces",
    "   three leading", "a" + " " * 2 + "b" + " " * 5 + "c" + " " * 9 + "d" + " " * 20 + "e",
    " ", "  ", "", "\t", "tab\tseparated\tvalues", "\t\tindented", "line\nbreak",
    "para\n\nbreak", "windows\r\nline", "many\n\n\n\n\n\nnewlines", "\n leading newline",
    "日本語のテキストを分割します。", "中文分词测试：你好，世界！", "한국어 토큰화 테스트입니다",
    "カタカナとひらがなと漢字", "emoji 😀👍🏽 and 👨‍👩‍👧‍👦 family, flags 🇯🇵🇫🇷",
    "Crème brûlée, naïve café, Ångström", "Привет, как дела?", "مرحبا بالعالم",
    "नमस्ते दुनिया", "ελληνικά γράμματα",
    "def f(x):\n    return x * 2  # double\n", "int main(void) {\n\tprintf(\"%d\\n\", 42);\n}\n",
    "<html><body><h1>Title</h1><p>text</p></body></html>", "<div class=\"a\">  </div>",
    "https://example.com/path?q=1&r=two#frag", "user@example.org",
    "3.14159265358979 and 1234567890123456789", "1,000,000.00 $ 42% 7/8",
    "control \x01 char \x7f and \u200b zero width", "<start_of_turn>user\nhi<end_of_turn>\n",
    "<start_of_turn>model\nHello!<end_of_turn>", "<bos>literal bos", "<eos><pad><unk>",
    "a" * 200, "ab" * 100, "Mixed日本English한국", "CamelCaseIdentifierNames snake_case_names",
    "ALL CAPS SHOUTING", "don't won't it's y'all", "¿Qué? ¡Sí! «citation» „Zitat“",
    "x²+y²=z² ∑∫√∞ ≠ ≤ ≥", "\u00a0non-breaking\u00a0space", "  \n  \n", "end with newline\n",
    "Zwischen den Zeilen",
    "The quick brown fox jumps over the lazy dog. " * 3,
]


def main():
    tok = AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])
    texts = list(TEXTS)
    try:
        texts.append(open(GPL, encoding="utf-8").read()[:3000])
    except OSError:
        pass
    out = sys.stdout
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False)
        out.write("T " + t.encode("utf-8").hex() + "\n")
        out.write("I %d%s\n" % (len(ids), "".join(" %d" % i for i in ids)))
        out.write("D " + tok.decode(ids).encode("utf-8").hex() + "\n")


if __name__ == "__main__":
    main()
