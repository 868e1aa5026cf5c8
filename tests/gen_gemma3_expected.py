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

# more texts (a second list, written independently)
TEXTS += [
    'The quick brown fox jumps over the lazy dog.',
    ' Hello',
    'Hello ',
    '  leading two spaces',
    'trailing three spaces   ',
    'multiple   inner    spaces     here',
    '   ',
    '    ',
    '     ',
    '       ',
    '        ',
    '                ',
    '                    ',
    '                               ',
    '                                ',
    '                                        ',
    'a      b',
    'x =            1',
    'col1\tcol2\t\tcol3\t\t\t',
    '\n',
    '\n\n',
    'line one\nline two\n\nline four\n',
    'windows\r\nline\r\n',
    '\r',
    ' \n \n  \n',
    '\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n',
    '\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t',
    '你好，世界！今天天气很好。',
    '日本語のテキスト：ひらがな、カタカナ、漢字を混ぜる。',
    '안녕하세요, 세계! 한국어 문장입니다.',
    'Emoji: 😀👍🏽 ❤️ 🎉',
    'Family ZWJ: 👨\u200d👩\u200d👧\u200d👦 and 🏳️\u200d🌈 flags 🇺🇸🇯🇵🇩🇪',
    'Café naïve résumé coöperate façade Ångström ß Œuvre',
    'é (combining acute) vs é (precomposed)',
    'Привет, мир! Съешь же ещё этих мягких французских булок.',
    'مرحبا بالعالم، هذه جملة عربية.',
    'नमस्ते दुनिया, यह एक हिंदी वाक्य है।',
    'ภาษาไทย ไม่มีช่องว่าง',
    'def foo(x, y=2):\n    if x > y:\n        return x ** 2\n    return [i for i in range(y)]\n',
    '#include <stdio.h>\nint main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf("%d\\n", i);\n\t}\n\treturn 0;\n}\n',
    '<html><body><div class="x"><b>bold</b> <i>it</i><table><tr><td>1</td></tr></table></div></body></html>',
    'Visit https://example.com/path/to/page?query=1&lang=en#frag or mailto:someone@example.org',
    '12345678901234567890 3.14159265358979 -0.001 1e-10 1,000,000.00 2024-01-31',
    '0000000000000000000000000000000000',
    'ctrl\x01chars\x7fand\u200bzero\u200cwidth\ufeffbom',
    'nul\x00byte',
    '\x1b[31mred\x1b[0m\x07bell\x08',
    '<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n',
    '<bos>',
    '<bos>text after literal bos',
    '<eos><pad><unk><mask>[multimodal]<unused0><unused6241>',
    '<start_of_image><end_of_image>',
    '<start_of_turn',
    'supercalifragilisticexpialidocious antidisestablishmentarianism',
    'mixedСкрипт日本語abc123Ελληνικά',
    'Ελληνικά: Καλημέρα κόσμε',
    'עברית: שלום עולם',
    'Math: ∑_{i=1}^{n} x_i² ≤ ∞, ∀ε>0 ∃δ; α→β ⇒ γ',
    'Unicode private use \ue000\uf8ff and astral 𝕳𝖊𝖑𝖑𝖔 𠀀',
    'rare bytes: \U0010fffd \uffff',
    'It\'s a "quote" — em-dash… ellipsis «guillemets» ‘single’',
    '   \t  \n mixed whitespace \t\n  ',
    'ALL CAPS SHOUTING AND lowercase and MiXeD CaSe',
    'snake_case camelCase PascalCase kebab-case SCREAMING_SNAKE',
    'JSON: {"key": [1, 2, {"nested": null}], "b": true}',
    "                    GNU GENERAL PUBLIC LICENSE\n                       Version 3, 29 June 2007\n\n Copyright (C) 2007 Free Software Foundation, Inc. <https://fsf.org/>\n Everyone is permitted to copy and distribute verbatim copies\n of this license document, but changing it is not allowed.\n\n                            Preamble\n\n  The GNU General Public License is a free, copyleft license for\nsoftware and other kinds of works.\n\n  The licenses for most software and other practical works are designed\nto take away your freedom to share and change the works.  By contrast,\nthe GNU General Public License is intended to guarantee your freedom to\nshare and change all versions of a program--to make sure it remains free\nsoftware for all its users.  We, the Free Software Foundation, use the\nGNU General Public License for most of our software; it applies also to\nany other work released this way by its authors.  You can apply it to\nyour programs, too.\n\n  When we speak of free software, we are referring to freedom, not\nprice.  Our General Public Licenses are designed to make sure that you\nhave the freedom to distribute copies of free software (and charge for\nthem if you wish), that you receive source code or can get it if you\nwant it, that you can change the software or use pieces of it in new\nfree programs, and that you know you can do these things.\n\n  To protect your rights, we need to prevent others from denying you\nthese rights or asking you to surrender the rights.  Therefore, you have\ncertain responsibilities if you distribute copies of the software, or if\nyou modify it: responsibilities to respect the freedom of others.\n\n  For example, if you distribute copies of such a program, whether\ngratis or for a fee, you must pass on to the recipients the same\nfreedoms that you received.  You must make sure that they, too, receive\nor can get the source code.  And you must show them these terms so they\nknow their rights.\n\n  Developers that use the GNU GPL protect your rights with two steps:\n(1) assert copyright on the software, and (2) offer you this License\ngiving you legal permission to copy, distribute and/or modify it.\n\n  For the developers' and authors' protection, the GPL clearly explains\nthat there is no warranty for this free software.  For both users' and\nauthors' sake, the GPL requires that modified versions be marked as\nchanged, so that their problems will not be attributed erroneously to\nauthors of previous versions.\n\n  Some devices are designed to deny users access to install or run\nmodified versions of the software inside them, although the manufacturer\ncan do so.  This is fundamentally incompatible with the aim of\nprotecting users' freedom to change the software.  The systematic\npattern of such abuse occurs in the area of products for individuals to\nuse, which is precisely where it is most unacceptable.  Therefore, we\nhave designed this version of the GPL to prohibit the practice for those\nproducts.  If such problems arise substantially in other domains, ",
    " " * 32, " " * 40, "x" + " " * 33 + "y", "\t" * 35, "\n" * 34,
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
