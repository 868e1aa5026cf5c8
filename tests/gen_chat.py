#!/usr/bin/env python3
"""Expected chat formatting for tests/test_chat.c: transformers' own Jinja rendering
(render_jinja_template, the code behind apply_chat_template) of a set of templates and
conversations, written as C string literals to tests/fixtures/chat/cases.inc.

  /work/venv/bin/python tests/gen_chat.py      (needs transformers and jinja2)

Templates: SmolLM2-135M-Instruct's (from its GGUF), a plain ChatML one, a Qwen-style one with
another default system prompt, ChatML written over several lines with - markers and with
trim_blocks / lstrip_blocks whitespace, double quotes and message.role; the families' published
templates in tests/fixtures/chat/templates (the chat_template of each model's
tokenizer_config.json: Gemma 2 and 3, Llama 3.0, 3.1, 3.2 and 3.3, Mistral 7B v0.3 and Nemo,
Qwen2.5 and Qwen3), each with its bos and eos texts; and templates attn must refuse (Zephyr,
ChatML with a role branch, text outside the tags, unknown variants of known families).
A conversation a template refuses (raise_exception, or no message where it reads messages[0])
is expected to be refused by attn too (NULL).  Llama 3.2 writes today's date: it is replaced by
@TODAY@, which the test replaces by its own today."""
import datetime
import os

from transformers.utils.chat_template_utils import render_jinja_template

SMOL = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}")
PLAIN = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
         "{{ '<|im_start|>assistant\\n' }}{% endif %}")
QWEN = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}")
MULTILINE = """{%- for message in messages -%}
    {%- if loop.first and messages[0].role != "system" -%}
        {{- "<|im_start|>system\\nBe brief.<|im_end|>\\n" -}}
    {%- endif -%}
    {{- "<|im_start|>" ~ message.role ~ "\\n" ~ message.content ~ "<|im_end|>\\n" -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\\n" -}}
{%- endif -%}
"""
TRIMMED = """{# a comment #}
{% for message in messages %}
  {{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
{% endfor %}
{% if add_generation_prompt %}
  {{ '<|im_start|>assistant\\n' }}
{% endif %}
"""
GOOD = [("smollm2", SMOL, "", ""), ("plain", PLAIN, "", ""), ("qwen", QWEN, "", ""),
        ("multiline", MULTILINE, "", ""), ("trimmed", TRIMMED, "", "")]
TDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "chat", "templates")
FAMILIES = [("gemma2", "gemma", "<bos>", "<eos>"), ("gemma3", "gemma", "<bos>", "<eos>"),
            ("llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.1", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.2", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.3", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("mistral-v3", "mistral-v3", "<s>", "</s>"),
            ("mistral-nemo", "mistral-tekken", "<s>", "</s>"),
            ("qwen2.5", "qwen", "", "<|im_end|>"), ("qwen3", "qwen3", "", "<|im_end|>")]
for name, fmt, bos, eos in FAMILIES:
    with open(os.path.join(TDIR, name + ".jinja")) as f:
        GOOD.append((name, f.read(), bos, eos))
FORMAT = {name: fmt for name, fmt, _, _ in FAMILIES}

BAD = [
    ("llama3_tools", "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + "
     "message['role'] + '<|end_header_id|>\\n\\nEnvironment: ipython\\n' + message['content'] "
     "+ '<|eot_id|>' }}{% endfor %}"),
    ("gemma_other", "{% for message in messages %}{{ '<start_of_turn>' + message['role'] + "
     "'\\n' + message['content'] + '<end_of_turn>\\n' }}{% endfor %}"),
    ("mistral_system", "{{ bos_token }}[SYSTEM_PROMPT]{{ messages[0]['content'] }}"
     "[/SYSTEM_PROMPT]{% for m in messages[1:] %}[INST]{{ m['content'] }}[/INST]{% endfor %}"),
    ("mistral_v1", "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' "
     "%}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + "
     "eos_token }}{% endif %}{% endfor %}"),
    ("zephyr", "{% for message in messages %}{% if message['role'] == 'user' %}"
     "{{ '<|user|>\\n' + message['content'] + eos_token }}{% endif %}{% endfor %}"),
    ("chatml_branch", "{% for message in messages %}{% if message['role'] == 'user' %}"
     "{{'<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n'}}{% endif %}{% endfor %}"),
    ("text_outside", "Conversation:{% for message in messages %}{{'<|im_start|>' + "
     "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}"),
    ("not_chatml", "{% for message in messages %}{{'### ' + message['role'] + ': ' + "
     "message['content'] + '\\n'}}{% endfor %}"),
    ("empty", ""),
    ("unclosed", "{% for message in messages %}{{ 'x' + message['content'] "),
]

CONVS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Say it."}, {"role": "assistant", "content": "It."},
     {"role": "user", "content": "Say it."}, {"role": "assistant", "content": "It."},
     {"role": "user", "content": "Say it."}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Say it."},
     {"role": "assistant", "content": "It."}, {"role": "user", "content": "Say it."}],
    [{"role": "user", "content": "\u3000\u00a0 wide\tspaces \u2003\n"},
     {"role": "assistant", "content": "<think>\nfirst, think\n</think>\n\nThe answer."},
     {"role": "user", "content": "And?"}],
    [{"role": "user", "content": "Q"},
     {"role": "assistant", "content": "<think>\nr\n</think>\n\n\nA"}],
    [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "plain"}],
    [{"role": "user", "content": "Q"}, {"role": "user", "content": "again"}],
    [{"role": "system", "content": "You are a pirate."},
     {"role": "user", "content": "Where is the treasure?"},
     {"role": "assistant", "content": "Arr, 'tis buried.\nUnder the \"palm\"."},
     {"role": "user", "content": "Why?"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "Ünïcödé — 日本語 🙂 {{ not a tag }} {% neither %}"},
     {"role": "assistant", "content": "  leading and trailing spaces  \n\n"}],
    [],
]


def c_str(s):
    out = '"'
    for b in s.encode("utf-8"):
        c = chr(b)
        if c == '"' or c == '\\':
            out += '\\' + c
        elif c == '\n':
            out += '\\n'
        elif 32 <= b < 127 and c != '?':
            out += c
        else:
            out += '\\%03o' % b
    return out + '"'


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    lines = ["/* Generated by tests/gen_chat.py from transformers' render_jinja_template: do not "
             "edit. */"]
    lines.append("static const struct { const char *name, *tmpl, *bos, *eos, *format; } "
                 "TEMPLATES[] = {")
    for name, t, bos, eos in GOOD:
        lines.append("    {%s, %s, %s, %s, %s}," % (c_str(name), c_str(t), c_str(bos), c_str(eos),
                                                c_str(FORMAT.get(name, "chatml"))))
    lines.append("};")
    lines.append("static const struct { const char *name, *tmpl; } BAD_TEMPLATES[] = {")
    for name, t in BAD:
        lines.append("    {%s, %s}," % (c_str(name), c_str(t)))
    lines.append("};")
    lines.append("#define N_CONVS %d" % len(CONVS))
    lines.append("static const int CONV_LEN[] = {%s};" % ", ".join(str(len(c)) for c in CONVS))
    lines.append("#define CONV_MAX %d" % max(len(c) for c in CONVS))
    lines.append("static const char *const CONV[][2 * CONV_MAX] = {")
    for c in CONVS:
        items = []
        for m in c:
            items += [c_str(m["role"]), c_str(m["content"])]
        lines.append("    {%s}," % (", ".join(items) if items else "NULL"))
    lines.append("};")
    lines.append("/* EXPECTED[template][conversation][add_generation_prompt] */")
    lines.append("static const char *const EXPECTED[][N_CONVS][2] = {")
    today = datetime.datetime.now().strftime("%d %b %Y")
    for name, t, bos, eos in GOOD:
        lines.append("    { /* %s */" % name)
        for c in CONVS:
            outs = []
            for gen in (False, True):
                try:
                    r = render_jinja_template(conversations=[c], chat_template=t,
                                              add_generation_prompt=gen, bos_token=bos,
                                              eos_token=eos)
                except Exception:  # raise_exception, or messages[0] of no messages
                    outs.append("NULL")
                    continue
                r = r[0][0] if isinstance(r, tuple) else r
                r = r if isinstance(r, str) else r[0]
                if name == "llama3.2":
                    r = r.replace("Today Date: " + today, "Today Date: @TODAY@")
                outs.append(c_str(r))
            lines.append("        {%s, %s}," % tuple(outs))
        lines.append("    },")
    lines.append("};")
    path = os.path.join(here, "fixtures", "chat", "cases.inc")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
