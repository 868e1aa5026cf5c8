#!/usr/bin/env python3
"""Expected chat formatting for tests/test_chat.c: transformers' own Jinja rendering
(render_jinja_template, the code behind apply_chat_template) of a set of templates,
conversations, tool definitions and options, written as C literals to
tests/fixtures/chat/cases.inc.

  python3 -m venv venv && venv/bin/pip install transformers jinja2
  venv/bin/python tests/gen_chat.py

Templates
  - SmolLM2-135M-Instruct's (from its GGUF), a plain ChatML one, a Qwen-style one with another
    default system message, ChatML written over several lines with - markers, with
    trim_blocks / lstrip_blocks whitespace, and with CRLF line ends, a {%+ marker and blanks
    after an expression (which lstrip_blocks keeps).
  - The families' published templates in tests/fixtures/chat/templates: the chat_template of
    each model's tokenizer_config.json (Gemma 2 and 3, Llama 3.0, 3.1, 3.2 and 3.3, Mistral 7B
    v0.3 and Nemo, Qwen2.5 and Qwen3; checked equal to the copies in llama.cpp's
    models/templates); from llama.cpp's models/templates as the llama-cpp-python 0.3.36 sdist
    on PyPI ships them (pip download --no-binary :all: llama-cpp-python):
    Mistral-Small-3.2-24B-Instruct-2506 (mistral-small3.2.jinja),
    Ministral-3-14B-Reasoning-2512 (ministral3.jinja) and MiMo-VL (Qwen2.5's template with
    another default system message); Mistral Large 2411's v7 template (mistral-v7.jinja) from
    the same sdist's tests/test-chat-template.cpp, which names it so.
    Mistral-Small-24B-Instruct-2501's (mistral-small3.jinja): no copy of its
    tokenizer_config.json could be fetched here; the template is the one two independent
    public projects embed as that model's, equal after undoing their string escapes: the Rust
    test test_mistral_small_chat_template in floneum/floneum
    models/kalosm-llama/src/chat_template.rs (its expected output rendered by transformers) and
    a commented-out chat_template literal in a TypeScript LLM client (LLMApi,
    completionsWithTemplate; found by content in a code index that does not name its
    repository); a third copy (a Python script's, "here's mistral small 3 one instead") is the
    same text with the model's name edited.  Mistral Small 3.1 (2503) is not here: its copies
    disagree (see docs/llm.md).
  - Templates attn must refuse: tests/fixtures/chat/templates/refused (from the same
    llama.cpp directory: templates with the markers of a family attn formats that are not its
    published template -- QwQ, Qwen3-Coder, Qwen3.5, Hermes 3, Bielik, Nemotron, StepFun,
    MiniCPM5, SmolLM3, DeepSeek-R1-Distill-Qwen, FireFunction, Functionary, Unsloth's
    Devstral), and small ones written here.

Cases: each template on every conversation with and without the generation prompt; with
enable_thinking True and False (every conversation for Qwen3, three for the others); the tool
conversations (tool calls, tool results, Llama's ipython role, Qwen3's reasoning_content) with
no tools, with two tool lists and with an empty one.  Expected: transformers' text; a case
transformers refuses (raise_exception, or messages[0] of no messages) is expected to be refused
by attn with ATTN_E_INVALID; tools or tool calls for a format whose template does not write
them (chatml, gemma, llama3, mistral-v7, mistral-small3) are refused by attn with
ATTN_E_UNSUPPORTED, and roles the Qwen templates would silently drop with ATTN_E_INVALID,
whatever transformers does.
Llama 3.2 and Mistral Small 3 and 3.2 write today's date: it is replaced by @TODAY@ (%d %b %Y) and
@TODAY_ISO@ (%Y-%m-%d), which the test replaces by its own today.

Also: Python's repr of floats (json.loads of JSON number literals) and json.dumps of JSON texts
(indent None, 4 and 2), for the JSON writer of src/text/chat_json.c."""
import datetime
import json
import os
import random
import struct

from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
TDIR = os.path.join(HERE, "fixtures", "chat", "templates")

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
# CRLF line ends (Jinja reads them as \n), blanks after an expression on the line of a block tag
# (kept: lstrip_blocks strips only from a line's start), a {%+ marker, a trailing newline
CRLF = ("{% for message in messages %}\r\n  {{ '<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>\\n' }}  {% endfor %}\r\n{%+ if add_generation_prompt "
        "%}{{ '<|im_start|>assistant\\n' }}{% endif %}\r\n")
# (name, template, bos, eos, format, file: the template's file under tests/fixtures/chat, which
# the test reads, or None: written into cases.inc)
GOOD = [("smollm2", SMOL, "", "", "chatml", None), ("plain", PLAIN, "", "", "chatml", None),
        ("qwen", QWEN, "", "", "chatml", None), ("multiline", MULTILINE, "", "", "chatml", None),
        ("trimmed", TRIMMED, "", "", "chatml", None), ("crlf", CRLF, "", "", "chatml", None)]
FAMILIES = [("gemma2", "gemma", "<bos>", "<eos>"), ("gemma3", "gemma", "<bos>", "<eos>"),
            ("llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.1", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.2", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("llama3.3", "llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
            ("mistral-v3", "mistral-v3", "<s>", "</s>"),
            ("mistral-nemo", "mistral-tekken", "<s>", "</s>"),
            ("mistral-v7", "mistral-v7", "<s>", "</s>"),
            ("mistral-small3", "mistral-small3", "<s>", "</s>"),
            ("mistral-small3.2", "mistral-small3.2", "<s>", "</s>"),
            ("ministral3", "ministral3", "<s>", "</s>"),
            ("qwen2.5", "qwen", "", "<|im_end|>"), ("mimo-vl", "qwen", "", "<|im_end|>"),
            ("qwen3", "qwen3", "", "<|im_end|>")]
for name, fmt, bos, eos in FAMILIES:
    with open(os.path.join(TDIR, name + ".jinja"), newline="") as f:
        GOOD.append((name, f.read(), bos, eos, fmt, "templates/" + name + ".jinja"))

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
# a published template changed in one place each: the output would differ, so it is refused
with open(os.path.join(TDIR, "qwen3.jinja"), newline="") as f:
    Q3 = f.read()
with open(os.path.join(TDIR, "llama3.1.jinja"), newline="") as f:
    L31 = f.read()
with open(os.path.join(TDIR, "mistral-small3.jinja"), newline="") as f:
    MS3 = f.read()
BAD = [(name, t, None) for name, t in BAD]
BAD += [(name, t, None) for name, t in [
        ("qwen3_edited", Q3.replace("<think>\\n\\n</think>\\n\\n", "<think>\\n</think>\\n")),
        ("qwen3_no_tools", Q3.replace("{%- if tools %}", "{%- if false %}")),
        ("llama3.1_no_trim", L31.replace("message['content'] | trim + '<|eot_id|>'",
                                         "message['content'] + '<|eot_id|>'")),
        ("llama3.1_date_expr", L31.replace('set date_string = "26 Jul 2024"',
                                           'set date_string = "26 Jul " + "2024" | upper')),
        ("mistral_small3_no_eos", MS3.replace("message['content'] + eos_token",
                                              "message['content']")),
        ("mistral_small3_date_call", MS3.replace('The current date is " + today',
                                                 'The current date is " + today | upper'))]]
assert all(t not in (Q3, L31, MS3) for _, t, _ in BAD[-6:])
for fn in sorted(os.listdir(os.path.join(TDIR, "refused"))):
    with open(os.path.join(TDIR, "refused", fn), newline="") as f:
        BAD.append(("refused/" + fn[:-6], f.read(), "templates/refused/" + fn))


def msg(role, content, reasoning=None, calls=None, call_id=None):
    return {"role": role, "content": content, "reasoning_content": reasoning,
            "tool_calls": calls, "tool_call_id": call_id}


BASE = [
    [msg("user", "Hello!")],
    [msg("system", " Be brief. "), msg("user", "Hi")],
    [msg("user", "Say it."), msg("assistant", "It."), msg("user", "Say it."),
     msg("assistant", "It."), msg("user", "Say it.")],
    [msg("system", "S"), msg("user", "Say it."), msg("assistant", "It."), msg("user", "Say it.")],
    [msg("user", "\u3000\u00a0 wide\tspaces \u2003\n"),
     msg("assistant", "<think>\nfirst, think\n</think>\n\nThe answer."), msg("user", "And?")],
    [msg("user", "Q"), msg("assistant", "<think>\nr\n</think>\n\n\nA")],
    [msg("user", "Q"), msg("assistant", "plain")],
    [msg("user", "Q"), msg("user", "again")],
    [msg("system", "You are a pirate."), msg("user", "Where is the treasure?"),
     msg("assistant", "Arr, 'tis buried.\nUnder the \"palm\"."), msg("user", "Why?")],
    [msg("user", "")],
    [msg("user", "Ünïcödé — 日本語 🙂 {{ not a tag }} {% neither %}"),
     msg("assistant", "  leading and trailing spaces  \n\n")],
    [],
    [msg("system", "S"), msg("user", "Hi"), msg("assistant", "Hello"),
     msg("system", "Mid-conversation system"), msg("user", "Go")],
    [msg("user", "Q1"), msg("assistant", "<think>\nr1\n</think>\n\nA1"), msg("user", "Q2"),
     msg("assistant", "<think>\n\n</think>\n\nA2")],
]

# tool calls as the C test passes them: JSON text (compact: the writer must not echo it)
CALL_A = ('[{"id":"call12345","type":"function","function":{"name":"get_weather",'
          '"arguments":{"city":"Paris","days":2,"unit":"celsius","hourly":false,'
          '"ratio":0.5,"note":"caf\\u00e9 \\"x\\"\\n"}}}]')
CALL_STR = ('[{"id":"call12345","type":"function","function":{"name":"get_weather",'
            '"arguments":"{\\"city\\": \\"Paris\\"}"}}]')
CALL_TWO = ('[ {"id": "call00001", "type": "function", "function": {"name": "get_weather", '
            '"arguments": {"city": "Paris"}}},\n {"id": "call00002", "type": "function", '
            '"function": {"name": "search", "arguments": {"query": "Paris weather", '
            '"limit": 10, "score": 1e-7}}} ]')
CALL_UNWRAPPED = '[{"name":"get_weather","arguments":{"city":"Paris"}}]'
CALL_BAD_ID = ('[{"id":"call1","type":"function","function":{"name":"get_weather",'
               '"arguments":{"city":"Paris"}}}]')
CALL_EMPTY = "[]"
RESULT = '{"temperature": 21, "sky": "sunny"}'

TOOL_CONVS = [
    [msg("user", "What's the weather in Paris?")],
    [msg("system", "You are a weather bot."), msg("user", "Weather in Paris?"),
     msg("assistant", "", calls=CALL_A), msg("tool", RESULT, call_id="call12345")],
    [msg("system", "You are a weather bot."), msg("user", "Weather in Paris?"),
     msg("assistant", "", calls=CALL_A), msg("tool", RESULT, call_id="call12345"),
     msg("assistant", "It is 21 °C and sunny."), msg("user", "And tomorrow?")],
    [msg("user", "Weather and news?"), msg("assistant", "Let me check.", calls=CALL_TWO),
     msg("tool", "21", call_id="call00001"), msg("tool", "Nothing new.", call_id="call00002"),
     msg("assistant", "Done.")],
    [msg("user", "Q"), msg("assistant", "", calls=CALL_STR),
     msg("tool", "22", call_id="call12345")],
    [msg("user", "Q"), msg("assistant", "", reasoning="I should call the tool.", calls=CALL_A),
     msg("tool", "21", call_id="call12345"),
     msg("assistant", "<think>\nok\n</think>\n\nIt is 21.")],
    [msg("user", "Q"), msg("assistant", "", calls=CALL_UNWRAPPED),
     msg("tool", "21", call_id="call12345")],
    [msg("user", "Q"), msg("assistant", "", calls=CALL_BAD_ID), msg("tool", "21", call_id="call1")],
    [msg("user", "Q"), msg("assistant", "Sure.", calls=CALL_EMPTY)],
    [msg("user", "Q"), msg("ipython", "42")],
    [msg("tool", "orphan", call_id="call12345"), msg("user", "Q")],
    [msg("user", "Q1"), msg("assistant", "<think>\nr1\n</think>\n\nA1"), msg("user", "Q2"),
     msg("assistant", "", reasoning="r2", calls=CALL_A), msg("tool", "21", call_id="call12345")],
    [msg("user", "Q"), msg("assistant", "", calls=CALL_A),
     msg("user", "<tool_response>\n21\n</tool_response>"),
     msg("assistant", "<think>\nx\n</think>\n\nA")],
    [msg("user", "Q"), msg("assistant", "\n\n", reasoning="", calls=CALL_A),
     msg("tool", "21", call_id="call12345")],
]
CONVS = BASE + TOOL_CONVS
NB = len(BASE)

TOOLS_A = ('[{"type": "function", "function": {"name": "get_weather", "description": "Get the '
           'weather. \\u00dcn\\u00efc\\u00f6d\\u00e9 \\"quoted\\" back\\\\slash\\nnew line\\ttab '
           '\\u0001 \\u2028 \\ud83d\\ude42 \\u007f", "parameters": {"type": "object", '
           '"properties": {"city": {"type": "string", "description": "The city"}, "unit": '
           '{"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}, "days": '
           '{"type": "integer", "minimum": 1, "maximum": 16, "default": 3}, "ratio": {"type": '
           '"number", "default": 0.5, "examples": [1e16, 1.5e-7, 100.0, -0.0, -0, '
           '12345678901234567890, 1E400, 0.1, 2.50, 1e22, 123456789.125]}, "flag": {"type": '
           '"boolean", "default": false}, "none": {"default": null}, "empty": {"type": "object", '
           '"properties": {}}, "list": []}, "required": ["city"]}}}, {"type": "function", '
           '"function": {"name": "search", "description": "Search the web", "parameters": '
           '{"type": "object", "properties": {"query": {"type": "string"}}, "required": '
           '["query"]}, "return": {"type": "string"}}}]')
TOOLS_B = ('[{"type":"function","function":{"name":"now","description":"The time",'
           '"parameters":{"type":"object","properties":{}}}}]')
TOOLS = [TOOLS_A, TOOLS_B, "[]"]
NO_TOOLS = {"chatml", "gemma", "llama3", "mistral-v7", "mistral-small3"}


def py_msgs(conv):
    out = []
    for m in conv:
        d = {"role": m["role"], "content": m["content"]}
        if m["reasoning_content"] is not None:
            d["reasoning_content"] = m["reasoning_content"]
        if m["tool_calls"] is not None:
            d["tool_calls"] = json.loads(m["tool_calls"])
        if m["tool_call_id"] is not None:
            d["tool_call_id"] = m["tool_call_id"]
        out.append(d)
    return out


def attn_refuses(fmt, conv, tools):
    """attn's own refusals: 2 ATTN_E_UNSUPPORTED, 1 ATTN_E_INVALID, 0 none."""
    if fmt in NO_TOOLS and (tools is not None or any(m["tool_calls"] is not None for m in conv)):
        return 2
    if fmt in ("qwen", "qwen3") and any(m["role"] not in ("system", "user", "assistant", "tool")
                                        for m in conv):
        return 1
    return 0


def c_str(s):
    if s is None:
        return "NULL"
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


def c_wrap(s, indent="    "):
    """A long C string literal split over lines (after a newline, or at 80 characters)."""
    lit = c_str(s)
    if len(lit) <= 90:
        return lit
    body, toks, k = lit[1:-1], [], 0
    while k < len(body):
        n = (4 if body[k + 1].isdigit() else 2) if body[k] == '\\' else 1
        toks.append(body[k:k + n])
        k += n
    parts, cur = [], ""
    for t in toks:
        if len(cur) + len(t) > 80:
            parts.append(cur)
            cur = ""
        cur += t
        if t == '\\n' and len(cur) > 40:
            parts.append(cur)
            cur = ""
    if cur:
        parts.append(cur)
    return ("\n" + indent).join('"' + p + '"' for p in parts)


def main():
    today = datetime.datetime.now().strftime("%d %b %Y")
    today_iso = datetime.datetime.now().strftime("%Y-%m-%d")
    L = ["/* Generated by tests/gen_chat.py from transformers' render_jinja_template: do not "
         "edit. */"]
    L.append("/* file: the template's file under tests/fixtures/chat (the test reads it), else "
             "tmpl */")
    L.append("static const struct { const char *name, *file, *tmpl, *bos, *eos, *format; } "
             "TEMPLATES[] = {")
    for name, t, bos, eos, fmt, path in GOOD:
        L.append("    {%s, %s, %s, %s, %s, %s}," % (c_str(name), c_str(path),
                                                  c_wrap(t, "     ") if not path else "NULL",
                                                  c_str(bos), c_str(eos), c_str(fmt)))
    L.append("};")
    L.append("static const struct { const char *name, *file, *tmpl; } BAD_TEMPLATES[] = {")
    for name, t, path in BAD:
        L.append("    {%s, %s, %s}," % (c_str(name), c_str(path),
                                        c_wrap(t, "     ") if not path else "NULL"))
    L.append("};")
    # Mistral Small 3.2's default system message, written once: @SMALL_SYSTEM@ in the texts
    small = render_jinja_template(conversations=[[{"role": "user", "content": "x"}]],
                                  chat_template=GOOD[[g[0] for g in GOOD].index(
                                      "mistral-small3.2")][1], bos_token="", eos_token="")
    small = small[0][0] if isinstance(small, tuple) else small
    small = small if isinstance(small, str) else small[0]
    small = small[len("[SYSTEM_PROMPT]"):small.index("[/SYSTEM_PROMPT]")]
    small_sys = small.replace(today_iso, "@TODAY_ISO@")
    L.append("static const char SMALL_SYSTEM[] =")
    L.append("    %s;" % c_wrap(small_sys, "    "))
    for i, c in enumerate(CONVS):
        if not c:
            continue
        L.append("static const attn_chat_message CONV_%d[] = {" % i)
        for m in c:
            L.append("    {%s, %s, %s, %s, %s}," % (
                c_str(m["role"]), c_str(m["content"]), c_str(m["reasoning_content"]),
                c_wrap(m["tool_calls"], "     ") if m["tool_calls"] else "NULL",
                c_str(m["tool_call_id"])))
        L.append("};")
    L.append("static const struct { const attn_chat_message *m; int n; } CONVS[] = {")
    for i, c in enumerate(CONVS):
        L.append("    {%s, %d}," % ("CONV_%d" % i if c else "NULL", len(c)))
    L.append("};")
    L.append("static const char *const TOOLS[] = {")
    for t in TOOLS:
        L.append("    %s," % c_wrap(t, "    "))
    L.append("};")
    C = []
    texts, order = {}, []
    counts = {}
    for ti, (name, t, bos, eos, fmt, _) in enumerate(GOOD):
        plan = []
        for ci in range(NB):
            for gen in (0, 1):
                plan.append((ci, -1, gen, 0))
                if fmt == "qwen3":
                    plan += [(ci, -1, gen, 1), (ci, -1, gen, 2)]
        if fmt != "qwen3":
            for ci in (0, 2, 4):
                plan += [(ci, -1, 1, 1), (ci, -1, 1, 2)]
        for ci in range(NB, len(CONVS)):
            plan += [(ci, -1, 1, 0), (ci, 1, 1, 0)]
            if ci in (NB, NB + 2, NB + 3):
                plan += [(ci, 0, 1, 0), (ci, 0, 0, 0), (ci, 2, 1, 0), (ci, 0, 1, 2)]
        for ci, tools, gen, think in plan:
            conv = CONVS[ci]
            kw = {}
            if think:
                kw["enable_thinking"] = think == 1
            want = attn_refuses(fmt, conv, TOOLS[tools] if tools >= 0 else None)
            text = None
            if not want:
                try:
                    r = render_jinja_template(
                        conversations=[py_msgs(conv)], chat_template=t,
                        tools=json.loads(TOOLS[tools]) if tools >= 0 else None,
                        add_generation_prompt=bool(gen), bos_token=bos, eos_token=eos, **kw)
                    r = r[0][0] if isinstance(r, tuple) else r
                    text = r if isinstance(r, str) else r[0]
                except Exception:  # raise_exception, messages[0] of no messages, ...
                    want = 1
            if text is not None:
                if name == "llama3.2":
                    text = text.replace("Today Date: " + today, "Today Date: @TODAY@")
                if name == "mistral-small3.2":
                    text = text.replace(small, "@SMALL_SYSTEM@")
                    assert today_iso not in text
                if name == "mistral-small3":
                    text = text.replace("The current date is " + today_iso + ".",
                                        "The current date is @TODAY_ISO@.")
                    assert today_iso not in text
            counts[(name, want)] = counts.get((name, want), 0) + 1
            if text is not None and text not in texts:
                texts[text] = len(order)
                order.append(text)
            C.append("    {%d, %d, %d, %d, %d, %d, %d}," % (
                ti, ci, tools, gen, think, want, texts[text] if text is not None else -1))
    L.append("/* the expected texts (each once) */")
    L.append("static const char *const TEXTS[] = {")
    for t in order:
        L.append("    %s," % c_wrap(t, "    "))
    L.append("};")
    L.append("/* want: 0 the text TEXTS[text], 1 ATTN_E_INVALID, 2 ATTN_E_UNSUPPORTED; tools -1: "
             "none; thinking ATTN_CHAT_THINKING_* */")
    L.append("static const struct { int tmpl, conv, tools, gen, thinking, want, text; } "
             "CASES[] = {")
    L += C
    L.append("};")
    # floats: Python's repr of json.loads(literal)
    rnd = random.Random(7)
    lits = ["0.1", "0.5", "1.0", "100.0", "1e16", "1e15", "9999999999999998.0", "1e-4",
            "1e-5", "0.0001", "0.00001", "1.5e-7", "-0.0", "1E400", "-1e400", "5e-324",
            "4.9e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1e22", "1e23",
            "123456789.125", "2.50", "9007199254740993.0", "0.3", "2.675", "1.1e-10",
            "123456789012345678.0", "-2.5e-5", "6.02214076e23"]
    for e in range(-1074, 1024, 7):
        lits.append(repr(2.0 ** e))
    for _ in range(600):
        bits = rnd.getrandbits(64)
        v = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if v != v or v in (float("inf"), float("-inf")):
            continue
        style = rnd.randrange(4)
        if style == 0:
            lit = repr(v)
        elif style == 1:
            lit = "%.17g" % v
        elif style == 2:
            lit = "%.*e" % (rnd.randrange(1, 17), v)
        else:
            lit = "%.*e" % (rnd.randrange(1, 6), rnd.uniform(-1e6, 1e6))
        if "e" not in lit and "." not in lit and "E" not in lit:
            lit += ".0"
        lits.append(lit.replace("inf", "1e999"))
    L.append("static const struct { const char *lit, *repr; } FLOATS[] = {")
    for lit in lits:
        L.append("    {%s, %s}," % (c_str(lit), c_str(json.dumps(json.loads(lit)))))
    L.append("};")
    docs = [TOOLS_A, TOOLS_B, "[]", "{}", CALL_A, CALL_TWO, '"just a string"',
            '[1, -0, 2.0, true, false, null, [], {}, [[]], {"a": {"b": [1, {"c": {}}]}}]',
            '{"\\u00e9\\n": "x"}']
    L.append("static const struct { const char *json; int indent; const char *dumps; } "
             "DUMPS[] = {")
    for d in docs:
        for ind in (None, 4, 2):
            L.append("    {%s, %d, %s}," % (c_wrap(d, "     "), -1 if ind is None else ind,
                                           c_wrap(json.dumps(json.loads(d), ensure_ascii=False,
                                                             indent=ind), "     ")))
    L.append("};")
    path = os.path.join(HERE, "fixtures", "chat", "cases.inc")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    print("wrote", path, sum(counts.values()), "cases")
    for (name, want), k in sorted(counts.items()):
        print("  %-18s %s %d" % (name, ["text", "invalid", "unsupported"][want], k))


if __name__ == "__main__":
    main()
