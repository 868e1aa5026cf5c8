#!/usr/bin/env python3
"""attn serve's tool calls end to end with the real `openai` package and a real model
(tests/test_serve_openai.sh runs it; docs/serve.md, "Tool calls"):

    python3 serve_openai_tools.py ATTN MODEL.gguf TEMPLATE.jinja

The model (SmolLM2-135M-Instruct, whose own ChatML template writes no tools) is served with a
template that does (Qwen2.5's).  For tool_choice naming the function and "required" (one tool:
the same), not streamed and streamed: the reply is one call of get_weather whose arguments are
a JSON object; streamed, the call's head comes first and its arguments in more than one piece,
and both what the client's stream helper (client.chat.completions.stream) accumulates and what
the raw chunks add up to equal the non-streamed call.  Then the call and its result (role
"tool", tool_call_id) go back and the answer is content, streamed or not.  tool_choice "none"
leaves the tools out of the prompt (fewer prompt tokens) and answers with content; bad
tool_choice values are 400s the client raises as BadRequestError.  Exit 0 on success, 1 with
the failures listed."""
import json
import os
import re
import subprocess
import sys
import time

import openai

attn, model, template = sys.argv[1:4]
bad = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(what)


log = open(os.environ.get("SERVE_LOG", os.devnull), "w")
srv = subprocess.Popen([attn, "serve", "--model", model, "--template", template, "--port", "0",
                        "--parallel", "2", "--ctx", "1024", "-t", "2"],
                       stderr=subprocess.PIPE, text=True)
url = None
t0 = time.time()
while url is None and time.time() - t0 < 120:
    line = srv.stderr.readline()
    if not line:
        break
    log.write(line)
    m = re.search(r"(http://\S+/)", line)
    if m:
        url = m.group(1)
if url is None:
    srv.kill()
    sys.exit("attn serve did not start")

try:
    cl = openai.OpenAI(base_url=url + "v1", api_key="none", max_retries=0, timeout=300)
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    common = dict(model="smollm2", messages=msgs, tools=tools, temperature=0, max_tokens=200)
    named = {"type": "function", "function": {"name": "get_weather"}}

    for choice in (named, "required"):
        what = "named" if isinstance(choice, dict) else "required"
        r = cl.chat.completions.create(tool_choice=choice, **common)
        c = r.choices[0]
        calls = c.message.tool_calls or []
        check(c.finish_reason == "tool_calls" and len(calls) == 1,
              f"{what}: one tool call, finish_reason tool_calls ({c.finish_reason}, {calls})")
        if not calls:
            continue
        call = calls[0]
        check(call.type == "function" and call.function.name == "get_weather" and call.id,
              f"{what}: the call is get_weather with an id ({call})")
        try:
            args = json.loads(call.function.arguments)
        except ValueError:
            args = None
        check(isinstance(args, dict), f"{what}: its arguments are a JSON object "
                                      f"({call.function.arguments!r})")
        check(r.usage.completion_tokens > 0, f"{what}: usage")

        # streamed, through the client's helper, which accumulates the deltas
        with cl.chat.completions.stream(tool_choice=choice, **common) as s:
            final = s.get_final_completion()
        sc = final.choices[0]
        scalls = sc.message.tool_calls or []
        check(sc.finish_reason == "tool_calls" and len(scalls) == 1 and
              scalls[0].function.name == "get_weather" and
              scalls[0].function.arguments == call.function.arguments and scalls[0].id,
              f"{what}, streamed (helper): the same call ({scalls})")

        # streamed, the raw chunks: the head first, then the arguments in pieces
        heads, pieces, content, finish = [], [], "", None
        for ch in cl.chat.completions.create(tool_choice=choice, stream=True, **common):
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.id:
                    heads.append((tc.index, tc.id, tc.function.name, tc.function.arguments))
                elif tc.function and tc.function.arguments:
                    pieces.append((tc.index, tc.function.arguments))
            finish = ch.choices[0].finish_reason or finish
        check(len(heads) == 1 and heads[0][0] == 0 and heads[0][2] == "get_weather" and
              heads[0][3] == "", f"{what}, streamed: one head with the name first ({heads})")
        check(len(pieces) > 1 and all(i == 0 for i, _ in pieces) and
              "".join(p for _, p in pieces) == call.function.arguments,
              f"{what}, streamed: the arguments in {len(pieces)} pieces add up to the call's")
        check(content == "" and finish == "tool_calls",
              f"{what}, streamed: no content, finish_reason tool_calls ({content!r}, {finish})")

        # the tool's result back: the server takes it and answers with content
        back = msgs + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id,
             "content": json.dumps({"city": "Paris", "temperature_c": 21, "sky": "sunny"})}]
        a = cl.chat.completions.create(model="smollm2", messages=back, tools=tools,
                                       tool_choice="none", temperature=0, max_tokens=40)
        text = a.choices[0].message.content
        check(isinstance(text, str) and text.strip() != "" and not a.choices[0].message.tool_calls,
              f"{what}: after the tool's result, an answer with content ({text!r})")
        st = "".join(ch.choices[0].delta.content or "" for ch in cl.chat.completions.create(
            model="smollm2", messages=back, tools=tools, tool_choice="none", temperature=0,
            max_tokens=40, stream=True) if ch.choices)
        check(st == text, f"{what}: streamed, the same answer ({st!r})")

    # strict: a forced call's arguments are kept to the parameters token by token (the
    # schema acceptor), where the plain call's are what the model writes (SmolLM2 writes the
    # schema back); streamed too
    strict_tools = [{"type": "function", "function": dict(tools[0]["function"], strict=True)}]
    plain_call = cl.chat.completions.create(tool_choice=named, **common).choices[0]
    sc = dict(common, tools=strict_tools)
    for choice in (named, "required"):
        r = cl.chat.completions.create(tool_choice=choice, **sc)
        calls = r.choices[0].message.tool_calls or []
        try:
            sargs = json.loads(calls[0].function.arguments) if calls else None
        except ValueError:
            sargs = None
        check(r.choices[0].finish_reason == "tool_calls" and isinstance(sargs, dict) and
              isinstance(sargs.get("city"), str) and set(sargs) == {"city"},
              f"strict, {choice if isinstance(choice, str) else 'named'}: the arguments fit "
              f"({calls[0].function.arguments if calls else None!r}; not strict: "
              f"{plain_call.message.tool_calls[0].function.arguments!r})")
    pieces = "".join(tc.function.arguments or "" for ch in cl.chat.completions.create(
        tool_choice=named, stream=True, **sc) if ch.choices
        for tc in ch.choices[0].delta.tool_calls or [] if tc.function)
    check(json.loads(pieces) == sargs, f"strict, streamed: the same arguments ({pieces!r})")

    # none: the tools stay out of the prompt; the answer is content
    n = cl.chat.completions.create(tool_choice="none", **common)
    plain = cl.chat.completions.create(model="smollm2", messages=msgs, temperature=0,
                                       max_tokens=200)
    check(n.choices[0].message.content == plain.choices[0].message.content and
          not n.choices[0].message.tool_calls and
          n.usage.prompt_tokens == plain.usage.prompt_tokens,
          "none: the answer without tools (content, the same prompt)")

    # "required" with several tools: the name is sampled from the tools' names only (left
    # free, SmolLM2 writes none of these three and runs out of tokens: a 500, as measured)
    odd = ["weather_now", "weather_forecast", "city_time"]
    several = [{"type": "function", "function": {
        "name": n, "description": d,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}
        for n, d in zip(odd, ["Current weather of a city", "Forecast of a city",
                              "Local time in a city"])]
    for stream in (False, True):
        kw = dict(common, tools=several, tool_choice="required", max_tokens=120)
        if stream:
            with cl.chat.completions.stream(**kw) as st:
                for _ in st:
                    pass
                r = st.get_final_completion()
        else:
            r = cl.chat.completions.create(**kw)
        c = r.choices[0]
        calls = c.message.tool_calls or []
        check(c.finish_reason == "tool_calls" and len(calls) >= 1 and
              all(k.function.name in odd for k in calls),
              f"required of {len(odd)} tools (stream {stream}): a call of one of them "
              f"({c.finish_reason}, {[k.function.name for k in calls]})")

    # bad values: 400, raised by the client
    for tc, why in (("always", "\"always\""), ({"type": "function", "function": {"name": "nope"}},
                                               "not one of 'tools'"),
                    ({"type": "function"}, "must be")):
        try:
            cl.chat.completions.create(tool_choice=tc, **dict(common, max_tokens=2))
            check(False, f"tool_choice {tc}: refused")
        except openai.BadRequestError as e:
            check(why in str(e), f"tool_choice {tc}: 400 ({e})")
    try:
        cl.chat.completions.create(model="smollm2", messages=msgs, tool_choice="required",
                                   max_tokens=2)
        check(False, "tool_choice without tools: refused")
    except openai.BadRequestError as e:
        check("only allowed when 'tools'" in str(e), f"tool_choice without tools: 400 ({e})")
    # a forced call cut short: the error, streamed or not
    try:
        cl.chat.completions.create(tool_choice=named, **dict(common, max_tokens=3))
        check(False, "a forced call cut short: an error")
    except openai.InternalServerError as e:
        check("ran out of tokens" in str(e), f"a forced call cut short: 500 ({e})")
    try:
        for _ in cl.chat.completions.create(tool_choice=named, stream=True,
                                            **dict(common, max_tokens=3)):
            pass
        check(False, "a forced call cut short, streamed: an error")
    except openai.APIError as e:
        check("ran out of tokens" in str(e), f"a forced call cut short, streamed: error ({e})")
    # logprobs and logit_bias through the client's types
    lp = cl.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                    max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    ents = lp.choices[0].logprobs.content
    check(len(ents) == lp.usage.completion_tokens and
          all(len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
              and e.logprob <= 0 and bytes(e.bytes).decode("utf-8", "replace") for e in ents) and
          "".join(bytes(b for e in ents for b in e.bytes).decode("utf-8", "replace"))
          .startswith(lp.choices[0].message.content),
          f"chat logprobs: {len(ents)} entries for {lp.usage.completion_tokens} tokens")
    cp = cl.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=3,
                               temperature=0, logprobs=2)
    l = cp.choices[0].logprobs
    check(len(l.tokens) == 3 and len(l.token_logprobs) == 3 and len(l.top_logprobs) == 3 and
          "".join(l.tokens) == cp.choices[0].text,
          f"completions logprobs: {l.tokens} for {cp.choices[0].text!r}")
    ban = cl.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=3,
                                temperature=0, logprobs=1,
                                logit_bias={str(cl_id): -100 for cl_id in [0]})
    check(ban.choices[0].text == cp.choices[0].text, "a logit_bias on an unlikely token: no change")
    # a harness's log-likelihood request: echo, logprobs, max_tokens 0
    ll = {}
    for city in ("Paris", "Berlin"):
        e = cl.completions.create(model="smollm2", prompt=f"The capital of France is {city}",
                                  max_tokens=0, echo=True, logprobs=1)
        el = e.choices[0].logprobs
        ll[city] = sum(x for x in el.token_logprobs if x is not None)
        check(e.choices[0].text == f"The capital of France is {city}" and
              "".join(el.tokens) == e.choices[0].text and el.token_logprobs[0] is None,
              f"echo of the prompt with logprobs: {el.tokens}")
    check(ll["Paris"] > ll["Berlin"], f"log-likelihoods: {ll}")
    # response_format json_object: the answer is one JSON object (greedy, and sampled, streamed)
    jm = [{"role": "user", "content": "Describe a cat as JSON with its name and age."}]
    js = cl.chat.completions.create(model="smollm2", messages=jm, max_tokens=120, temperature=0,
                                    response_format={"type": "json_object"})
    txt = js.choices[0].message.content
    try:
        obj = json.loads(txt)
    except ValueError:
        obj = None
    check(js.choices[0].finish_reason == "stop" and isinstance(obj, dict),
          f"json_object: {txt!r}")
    pieces = [c.choices[0].delta.content or "" for c in cl.chat.completions.create(
        model="smollm2", messages=jm, max_tokens=120, temperature=1, seed=5, stream=True,
        response_format={"type": "json_object"}) if c.choices]
    txt = "".join(pieces)
    check(txt.lstrip().startswith("{"), f"json_object sampled, streamed: {txt!r}")
    # json_schema through the client's structured outputs: a pydantic model, parsed back
    from typing import List, Literal, Optional
    from pydantic import BaseModel, Field

    class Owner(BaseModel):
        name: str

    class Cat(BaseModel):
        name: str
        age: int
        color: Literal["black", "white", "orange"]
        toys: List[str] = Field(max_length=2)  # maxItems (SmolLM2 would list toys to the end)
        owner: Optional[Owner]

    got = cl.beta.chat.completions.parse(model="smollm2", messages=jm, max_tokens=200,
                                         temperature=0, response_format=Cat)
    cat = got.choices[0].message.parsed
    check(got.choices[0].finish_reason == "stop" and isinstance(cat, Cat),
          f"json_schema (pydantic Cat): {got.choices[0].message.content!r} -> {cat!r}")
    try:
        cl.chat.completions.create(model="smollm2", messages=jm, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "allOf": []}}})
        check(False, "json_schema with allOf: refused")
    except openai.BadRequestError as e:
        check("allOf" in str(e), f"json_schema with allOf: refused ({e})")
finally:
    srv.terminate()
    try:
        rc = srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = -9
    log.write(srv.stderr.read())
check(rc == 0, f"attn serve exits 0 after SIGTERM ({rc})")
print(f"{len(bad)} failure(s)" if bad else "all passed")
sys.exit(1 if bad else 0)
