#!/usr/bin/env bash
# attn serve (cli/serve.c, docs/serve.md) on the tiny GGUF llama (tests/fixtures/llama_tiny.gguf)
# and the tiny BERT (tests/fixtures/bert_tiny): the endpoints, greedy answers equal to attn
# generate's (alone, streamed, 4 at once), embeddings equal to attn embed's, the error cases,
# the API key, and SIGTERM.  Needs curl and python3 (exit 77, skipped, without them).
#   bash test_serve.sh ATTN TMPDIR        (run in tests/; registered with label serve)
set -u
ATTN=$1 CASE=serve TMP=$2
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run
for tool in curl python3; do
    command -v $tool >/dev/null || { echo "SKIP: $tool is missing"; exit 77; }
done
G=fixtures/llama_tiny.gguf B=fixtures/bert_tiny

# start_server LOG ARGS...: starts attn serve on a free port; sets PID and URL
start_server() {
    local log=$1
    shift
    "$ATTN" serve --port 0 -t 1 "$@" 2>"$log" &
    PID=$!
    URL=
    for _ in $(seq 1 100); do
        URL=$(grep -o 'http://[^ ]*/' "$log" | head -n 1)
        [ -n "$URL" ] && return 0
        kill -0 $PID 2>/dev/null || { cat "$log"; fail "attn serve did not start"; }
        sleep 0.1
    done
    fail "attn serve printed no address"
}

# stop_server: SIGTERM; the server must exit 0
stop_server() {
    kill -TERM $PID
    wait $PID
    local rc=$?
    [ $rc = 0 ] || fail "attn serve exited $rc after SIGTERM"
}

# a non-loopback address without --api-key is refused (usage error)
run 2 "$ATTN" serve --model $G --host 0.0.0.0
err_has "api-key"

# mapped (--mmap), while attn generate, the reference below, reads the file: the same answers
start_server "$T/log" --model $G --embed $B --parallel 4 --ctx 128 --mmap
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT

# the greedy texts of attn generate, the reference of the server's answers
ref() { # ref NAME PROMPT TOKENS
    python3 - "$ATTN" "$G" "$2" "$3" >"$T/ref_$1" <<'PY' || fail "attn generate $1"
import subprocess, sys
a, g, p, n = sys.argv[1:]
out = subprocess.run([a, "generate", "--model", g, "--prompt", p, "--tokens", n,
                      "--temperature", "0", "-q", "-t", "1"], check=True,
                     capture_output=True).stdout
assert out.endswith(b"\n")
sys.stdout.write(out[:-1].decode("utf-8"))
PY
}
CHAT=$'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'
ref chat "$CHAT" 16
ref hello "hello" 20
for i in 0 1 2 3; do ref p$i "prompt number $i says" $((10 + 5 * i)); done
ref copy "one shared prefix, then a question" 12
# 72 tokens: prefilled in two calls (55 + 17: attn__serve_prefill_chunk)
ref long "the quick brown fox jumps over the lazy dog, then the cat sat on the mat" 12

curl -sf "${URL}health" | grep -q '"status":"ok"' || fail "/health"
curl -s -o /dev/null -w '%{http_code}' -X POST "${URL}health" | grep -q 405 || fail "POST /health"
curl -sf "$URL" | grep -q '<title>attn serve</title>' || fail "the chat page"
# a streamed answer with curl: data lines, the last one [DONE]
curl -sfN "${URL}v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":16,"temperature":0,
         "stream":true}' >"$T/sse" || fail "streamed chat with curl"
[ "$(tail -n 2 "$T/sse" | head -n 1)" = "data: [DONE]" ] || fail "the stream ends with [DONE]"
# a body over 1 MiB: 413
head -c 1100000 /dev/zero | tr '\0' a >"$T/big"
code=$(curl -s -o "$T/out" -w '%{http_code}' "${URL}v1/completions" --data-binary @"$T/big")
[ "$code" = 413 ] || fail "a 1.1 MB body: $code, not 413"

python3 - "$URL" "$T" "$ATTN" "$B" <<'PY' || fail "HTTP checks (above)"
import base64, json, struct, subprocess, sys, threading, urllib.error, urllib.request
url, T, attn, bert = sys.argv[1:]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
        print("FAIL:", what)
def call(path, body=None, raw=None, method=None, headers=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)
def js(b):
    return json.loads(b.decode())
def ref(name):
    return open(f"{T}/ref_{name}", encoding="utf-8").read()

st, b, _ = call("v1/models")
check(st == 200 and js(b)["data"][0]["id"] == "llama_tiny.gguf", "/v1/models")

# greedy answers equal attn generate's
chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0}
st, b, _ = call("v1/chat/completions", chat)
j = js(b)
check(st == 200 and j["choices"][0]["message"]["content"] == ref("chat"),
      "chat answer equals attn generate on the rendered prompt")
check(j["usage"]["prompt_tokens"] == 52 and j["usage"]["total_tokens"] ==
      52 + j["usage"]["completion_tokens"], "chat usage")
st, b, _ = call("v1/completions", {"prompt": "hello", "max_tokens": 20, "temperature": 0})
j = js(b)
check(st == 200 and j["choices"][0]["text"] == ref("hello"), "completion equals attn generate")
check(j["object"] == "text_completion" and "usage" in j, "completion shape")
# a prompt longer than a prefill chunk, without the prompt cache: attn generate's answer
long = "the quick brown fox jumps over the lazy dog, then the cat sat on the mat"
st, b, _ = call("v1/completions", {"prompt": long, "max_tokens": 12, "temperature": 0,
                                   "cache_prompt": False})
j = js(b)
check(st == 200 and j["choices"][0]["text"] == ref("long") and j["usage"]["prompt_tokens"] == 72,
      "a 72-token prompt (two prefill calls) without cache_prompt equals attn generate")
st, b, _ = call("v1/completions", {"prompt": "hi", "cache_prompt": "yes"})
check(st == 400 and "cache_prompt" in b.decode(), "cache_prompt must be a boolean")
# presence and frequency penalties (OpenAI's, over the generated tokens): the greedy answer is
# attn generate's with the same penalties, and not the unpenalised one
pen = subprocess.run([attn, "generate", "--model", "fixtures/llama_tiny.gguf", "--prompt",
                      "hello", "--tokens", "20", "--temperature", "0", "-q", "-t", "1",
                      "--presence-penalty", "0.8", "--frequency-penalty", "1.5"], check=True,
                     capture_output=True).stdout[:-1].decode("utf-8")
st, b, _ = call("v1/completions", {"prompt": "hello", "max_tokens": 20, "temperature": 0,
                                   "presence_penalty": 0.8, "frequency_penalty": 1.5})
check(st == 200 and js(b)["choices"][0]["text"] == pen and pen != ref("hello"),
      "penalised completion equals attn generate's with the penalties")

# streamed: the deltas joined equal the answer, then [DONE]
def stream(path, body):
    body = dict(body, stream=True)
    req = urllib.request.Request(url + path, data=json.dumps(body).encode())
    text, done, finish, usage = "", False, None, None
    with urllib.request.urlopen(req, timeout=120) as r:
        check(r.headers["Content-Type"].startswith("text/event-stream"), "SSE content type")
        for ev in r.read().decode().split("\n\n"):
            if not ev or ev.startswith(":"):
                continue
            check(ev.startswith("data: "), "an SSE event is data: ...")
            d = ev[6:]
            if d == "[DONE]":
                done = True
                continue
            check(not done, "nothing after [DONE]")
            c = json.loads(d)["choices"][0]
            text += c["delta"].get("content", "") if "delta" in c else c["text"]
            finish = c["finish_reason"] or finish
            usage = json.loads(d).get("usage") or usage
    check(done, "the stream ends with [DONE]")
    return text, finish, usage
text, finish, usage = stream("v1/chat/completions", chat)
check(text == ref("chat"), "streamed chat equals the answer")
check(finish == "length" and usage and usage["completion_tokens"] == 16, "stream finish/usage")
text, _, _ = stream("v1/completions", {"prompt": "hello", "max_tokens": 20, "temperature": 0})
check(text == ref("hello"), "streamed completion equals the answer")

# 4 at once (2 streamed), each equal to its answer alone
res = {}
def one(i):
    body = {"prompt": f"prompt number {i} says", "max_tokens": 10 + 5 * i, "temperature": 0}
    if i % 2:
        res[i] = stream("v1/completions", body)[0]
    else:
        res[i] = js(call("v1/completions", body)[1])["choices"][0]["text"]
for rep in range(2):
    th = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    [t.start() for t in th]
    [t.join() for t in th]
    for i in range(4):
        check(res.get(i) == ref(f"p{i}"), f"concurrent request {i} (round {rep}) equals alone")

# stop strings: the text cut before the first occurrence
full = ref("hello")
stop = full[3:5]
st, b, _ = call("v1/completions", {"prompt": "hello", "max_tokens": 20, "temperature": 0,
                                   "stop": ["zzzz", stop]})
c = js(b)["choices"][0]
check(c["text"] == full[:full.find(stop)] and c["finish_reason"] == "stop", "stop string")
text, finish, _ = stream("v1/completions", {"prompt": "hello", "max_tokens": 20,
                                            "temperature": 0, "stop": stop})
check(text == full[:full.find(stop)] and finish == "stop", "stop string, streamed")
# sampling with a seed repeats
samp = {"prompt": "hello", "max_tokens": 12, "temperature": 0.9, "top_k": 20, "top_p": 0.9,
        "min_p": 0.01, "seed": 7}
a = js(call("v1/completions", samp)[1])["choices"][0]["text"]
b2 = js(call("v1/completions", samp)[1])["choices"][0]["text"]
check(a == b2, "the same seed gives the same text")
st, b, _ = call("v1/completions", {"prompt": "hello", "max_tokens": 30, "ignore_eos": True})
check(st == 200 and js(b)["usage"]["completion_tokens"] == 30, "ignore_eos, max_tokens 30")

# tokenize / detokenize
st, b, _ = call("tokenize", {"content": "hi é <|im_end|>"})
ids = js(b)["tokens"]
st2, b2, _ = call("detokenize", {"tokens": ids})
check(st == 200 and st2 == 200 and js(b2)["content"] == "hi é <|im_end|>", "tokenize round trip")
check(ids[:5] == [104, 105, 32, 195, 169], "byte-level ids")

# embeddings: equal to attn embed's, as floats and as base64
texts = ["hello world", "東京", "a third one"]
out = subprocess.run([attn, "embed", "--model", bert, "-t", "1"] + texts, check=True,
                     capture_output=True, text=True).stdout.split("\n")
want = [[float(x) for x in line.split()] for line in out if line]
st, b, _ = call("v1/embeddings", {"input": texts, "model": "bert_tiny"})
j = js(b)
check(st == 200 and [d["embedding"] for d in j["data"]] == want, "embeddings equal attn embed")
check(j["usage"]["prompt_tokens"] > 0, "embedding usage")
st, b, _ = call("v1/embeddings", {"input": "hello world", "encoding_format": "base64"})
e = base64.b64decode(js(b)["data"][0]["embedding"])
got = list(struct.unpack(f"<{len(e) // 4}f", e))
want32 = [struct.unpack("<f", struct.pack("<f", x))[0] for x in want[0]] # as float32
check(st == 200 and got == want32, "base64 embedding")

# errors: the OpenAI error object with the right status
def err(path, status, body=None, raw=None, method=None, what=""):
    st, b, h = call(path, body, raw, method)
    ok = st == status
    try:
        e = js(b)["error"]
        ok = ok and isinstance(e["message"], str) and "type" in e and "code" in e
    except Exception:
        ok = False
    check(ok, f"{what or path}: status {st}, want {status}: {b[:200]!r}")
    return b
err("v1/completions", 400, raw=b"{bad json", what="bad JSON")
err("v1/completions", 400, raw=b"", what="empty body")
err("v1/completions", 400, raw=b"[" * 100000 + b"]" * 100000, what="deep nesting")
err("v1/completions", 400, raw=b'{"prompt": "\xff\xfe"}', what="invalid UTF-8")
err("v1/completions", 400, raw=b'{"prompt": "a", "max_tokens": 1e999}', what="huge number")
err("v1/completions", 400, raw=b'{"prompt": "\\ud800"}', what="lone surrogate")
err("v1/completions", 400, raw=b'{"prompt": "a"} x', what="text after the value")
err("v1/completions", 400, {"prompt": 5}, what="prompt of the wrong type")
err("v1/completions", 400, {"prompt": "a", "max_tokens": "5"}, what="max_tokens string")
err("v1/completions", 400, {"prompt": "a", "temperature": -1}, what="negative temperature")
err("v1/completions", 400, {"prompt": "a", "n": 2}, what="n=2")
err("v1/completions", 400, {"prompt": "a", "presence_penalty": 2.5}, what="presence_penalty > 2")
err("v1/completions", 400, {"prompt": "a", "frequency_penalty": "1"},
    what="frequency_penalty string")
err("v1/completions", 400, {"prompt": "x" * 500}, what="prompt longer than the context")
err("v1/completions", 400, {"prompt": "a", "stop": [1]}, what="stop of the wrong type")
err("v1/chat/completions", 400, {"messages": []}, what="no messages")
err("v1/chat/completions", 400, {"messages": [{"content": "hi"}]}, what="message without role")
err("v1/chat/completions", 400, {"messages": [{"role": "user", "content": 3}]},
    what="content of the wrong type")
err("v1/chat/completions", 400, {"messages": [{"role": "user", "content": "a"}] * 2000},
    what="too many messages")
err("v1/chat/completions", 400, [1, 2], what="a body that is no object")
err("v1/chat/completions", 400, {"messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"type": "function", "function": {"name": "f"}}],
                                "tool_choice": "required"},
    what="tool_choice required with a chat format that writes no calls")
err("detokenize", 400, {"tokens": [1, 99999]}, what="detokenize an id out of range")
err("tokenize", 400, {"content": 1}, what="tokenize a number")
err("v1/embeddings", 400, {"input": [1, 2]}, what="embedding token arrays")
err("v1/embeddings", 400, {"input": "a", "encoding_format": "hex"}, what="encoding_format")
err("nope", 404, what="unknown path")
err("v1/completions", 405, method="GET", what="GET /v1/completions")
# a client that leaves in the middle of a stream: the server goes on serving
import socket
host, port = url[7:-1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
body = json.dumps({"prompt": "hello", "max_tokens": 100, "ignore_eos": True,
                   "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body)
s.recv(100)
s.close()
st, b, _ = call("v1/completions", {"prompt": "hello", "max_tokens": 20, "temperature": 0})
check(st == 200 and js(b)["choices"][0]["text"] == ref("hello"), "answer after a client left")
# prefix copy: a request whose prompt a busy slot holds copies that slot's keys and values
# (attn_llm_session_copy) and answers as attn generate does
import threading, time
def metric(name):
    for line in call("metrics")[1].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return -1.0
c0 = metric("attn_prompt_tokens_copied_total")
def long_req(prompt, first): # streamed: its first token says its prompt is in its slot's cache
    body = {"prompt": prompt, "max_tokens": 110, "temperature": 0, "ignore_eos": True,
            "stream": True}
    req = urllib.request.Request(url + "v1/completions", data=json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=120) as r:
        while not r.readline().startswith(b"data: {"): # the first token: prefilled by then
            pass
        first.set()
        r.read()
# a second request while the first still decodes: whether the first is still busy then is a
# matter of timing (the tiny model generates 110 tokens in a few milliseconds), so the copy
# itself is checked by test_llm_families (attn_llm_session_copy: the source's bits), and here
# the answer, copied or not
first = threading.Event()
th = threading.Thread(target=long_req, args=("one shared prefix, then a question", first))
th.start()
first.wait(60)
st, b, _ = call("v1/completions", {"prompt": "one shared prefix, then a question",
                                   "max_tokens": 12, "temperature": 0})
th.join()
check(st == 200 and js(b)["choices"][0]["text"] == ref("copy"),
      "an answer sent while another with its prompt streams equals attn generate")
print("note: prompt tokens copied between slots: %g" %
      (metric("attn_prompt_tokens_copied_total") - c0))

st, b, _ = call("metrics")
m = b.decode()
check(st == 200 and "attn_completion_tokens_total" in m and "attn_queue_depth" in m and
      "attn_batch_size" in m and 'attn_http_requests_total{code="400"}' in m, "/metrics")

# the openai package, where it is installed
try:
    import openai
except ImportError:
    print("note: the openai package is not installed: its check is skipped")
else:
    cl = openai.OpenAI(base_url=url + "v1", api_key="none")
    r = cl.chat.completions.create(model="llama_tiny.gguf", max_tokens=16, temperature=0,
                                   messages=[{"role": "user", "content": "hi"}])
    check(r.choices[0].message.content == ref("chat"), "openai client: chat")
    parts = cl.chat.completions.create(model="x", max_tokens=16, temperature=0, stream=True,
                                       messages=[{"role": "user", "content": "hi"}])
    check("".join(p.choices[0].delta.content or "" for p in parts if p.choices) == ref("chat"),
          "openai client: stream")
    e = cl.embeddings.create(model="bert_tiny", input=["hello world"])
    check([struct.unpack("<f", struct.pack("<f", x))[0] for x in e.data[0].embedding] == want32,
          "openai client: embeddings")
sys.exit(1 if bad else 0)
PY
grep -Eq '^POST /v1/completions 200 [0-9]+ [0-9.]+ ms' "$T/log" || fail "no log line per request"
stop_server
grep -q "attn serve: stopped" "$T/log" || fail "no word of the stop"

# --api-key: 401 without it or with another, 200 with it; /health needs none
start_server "$T/log2" --model $G --api-key sekrit --parallel 1
code=$(curl -s -o "$T/out" -w '%{http_code}' "${URL}v1/models")
[ "$code" = 401 ] || fail "no key: $code, not 401"
grep -q '"authentication_error"' "$T/out" || fail "401 error type"
code=$(curl -s -o "$T/out" -w '%{http_code}' -H 'Authorization: Bearer wrong' "${URL}v1/models")
[ "$code" = 401 ] || fail "a wrong key: $code, not 401"
code=$(curl -s -o "$T/out" -w '%{http_code}' -H 'Authorization: Bearer sekrit' "${URL}v1/models")
[ "$code" = 200 ] || fail "the right key: $code, not 200"
code=$(curl -s -o "$T/out" -w '%{http_code}' "${URL}health")
[ "$code" = 200 ] || fail "/health without a key: $code"
code=$(curl -s -o "$T/out" -w '%{http_code}' "${URL}v1/embeddings" \
       -H 'Authorization: Bearer sekrit' -d '{"input":"x"}')
[ "$code" = 404 ] || fail "embeddings without --embed: $code, not 404"
stop_server

# --act int16: the server's greedy completion equals attn generate --act int16's
start_server "$T/log4" --model $G --act int16 --parallel 1 --ctx 128
python3 - "$URL" "$ATTN" "$G" <<'PY' || fail "--act int16 (above)"
import json, subprocess, sys, urllib.request
url, a, g = sys.argv[1:]
body = {"prompt": "The quick brown fox", "max_tokens": 24, "temperature": 0}
req = urllib.request.Request(url + "v1/completions", data=json.dumps(body).encode())
with urllib.request.urlopen(req, timeout=120) as r:
    got = json.loads(r.read())["choices"][0]["text"]
out = subprocess.run([a, "generate", "--model", g, "--prompt", body["prompt"], "--tokens", "24",
                      "--temperature", "0", "-q", "-t", "1", "--act", "int16"], check=True,
                     capture_output=True).stdout.decode("utf-8")[:-1]
if got != out:
    print("FAIL: serve --act int16 %r, attn generate --act int16 %r" % (got, out))
    sys.exit(1)
PY
stop_server

# --template: a template attn does not recognise stops the server before it listens
run 1 "$ATTN" serve --model $G --port 0 \
    --template fixtures/chat/templates/refused/Qwen-QwQ-32B.jinja
err_has "Qwen-QwQ-32B.jinja: not a chat template attn formats"
# Qwen3's template instead of the model's: chat_template_kwargs.enable_thinking, tools, tool
# calls (OpenAI's arguments string read as the object it holds, which tojson writes with its
# spaces) and tool results, each
# prompt the text transformers renders (tests/gen_chat.py checks the library against it; the
# texts below are transformers 5.24's), each answer attn generate's on that text (the tiny
# model's tokens are bytes: a prompt's token count is its length)
start_server "$T/log3" --model $G --template fixtures/chat/templates/qwen3.jinja --parallel 1 \
    --ctx 128
python3 - "$URL" "$ATTN" "$G" <<'PY' || fail "chat template checks (above)"
import json, subprocess, sys, urllib.error, urllib.request
url, attn, g = sys.argv[1:]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
        print("FAIL:", what)
def call(body):
    req = urllib.request.Request(url + "v1/chat/completions", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
def generate(text, n):
    out = subprocess.run([attn, "generate", "--model", g, "--prompt", text, "--tokens", str(n),
                          "--temperature", "0", "-q", "-t", "1"], check=True,
                         capture_output=True).stdout
    return out[:-1].decode("utf-8")
def count(text):
    ids = subprocess.run([attn, "tokenize", "--model", g, "--no-bos", "--text", text],
                         check=True, capture_output=True, text=True).stdout.split()
    return len(ids)
def same(body, text, what):
    st, j = call(dict(body, max_tokens=8, temperature=0))
    check(st == 200, f"{what}: status {st} {j}")
    if st != 200:
        return
    check(j["usage"]["prompt_tokens"] == count(text), f"{what}: the prompt is transformers' text")
    check(j["choices"][0]["message"]["content"] == generate(text, 8),
          f"{what}: the answer is attn generate's on that text")
hi = [{"role": "user", "content": "hi"}]
plain = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
same({"messages": hi}, plain, "no kwargs")
same({"messages": hi, "chat_template_kwargs": {"enable_thinking": True}}, plain, "thinking on")
same({"messages": hi, "chat_template_kwargs": {"enable_thinking": False}},
     plain + "<think>\n\n</think>\n\n", "thinking off")
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
msgs = [{"role": "user", "content": "w?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "21"}]
want = ('<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with '
        'the user query.\n\nYou are provided with function signatures within <tools></tools> '
        'XML tags:\n<tools>\n{"type": "function", "function": {"name": "get_weather", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n'
        '</tools>\n\nFor each function call, return a json object with function name and '
        'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": '
        '<function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\nw?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": '
        '"get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        '<|im_start|>user\n<tool_response>\n21\n</tool_response><|im_end|>\n'
        '<|im_start|>assistant\n<think>\n\n</think>\n\n')
# longer than the tiny model's 128 positions: the 400 says how many tokens the prompt has
st, j = call({"messages": msgs, "tools": tools, "tool_choice": "auto", "max_tokens": 2,
              "chat_template_kwargs": {"enable_thinking": False}})
check(st == 400 and j["error"]["message"].startswith("the prompt has %d tokens," % count(want)),
      f"tools and a tool call: the prompt is transformers' text: {st} {j}")
# tools given (an empty list, which Qwen3's template does not write: the tiny model's 128
# positions hold no tool definitions): the answer is read for tool calls; the tiny model
# writes none, so it is plain content as before, whole when streamed (the text held back as
# a possible call's start is sent at the end), with no tool_calls
st, j = call({"messages": hi, "tools": [], "max_tokens": 8, "temperature": 0})
ch = j["choices"][0] if st == 200 else {}
check(st == 200 and ch["message"]["content"] == generate(plain, 8) and
      "tool_calls" not in ch["message"] and ch["finish_reason"] == "length",
      f"tools, no call: plain content: {st} {j}")
req = urllib.request.Request(url + "v1/chat/completions", data=json.dumps(
    {"messages": hi, "tools": [], "max_tokens": 8, "temperature": 0, "stream": True}).encode())
text, finish, calls = "", None, 0
with urllib.request.urlopen(req, timeout=120) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        c = json.loads(line[6:])["choices"][0]
        text += c["delta"].get("content") or ""
        calls += "tool_calls" in c["delta"]
        finish = c["finish_reason"] or finish
check(text == generate(plain, 8) and finish == "length" and calls == 0,
      f"tools, no call, streamed: {text!r} {finish} {calls}")
def err(body, what, text):
    st, j = call(dict(body, max_tokens=2))
    check(st == 400 and text in j["error"]["message"], f"{what}: {st} {j}")
err({"messages": hi, "chat_template_kwargs": {"foo": 1}}, "another kwarg", "only enable_thinking")
err({"messages": hi, "chat_template_kwargs": {"enable_thinking": "no"}}, "kwarg type",
    "true or false")
err({"messages": hi, "chat_template_kwargs": []}, "kwargs type", "must be an object")
err({"messages": hi, "tools": {"a": 1}}, "tools type", "'tools' must be an array")
err({"messages": hi, "tools": [1]}, "a tool that is no object", "array of objects")
# tool_choice: "none" leaves the tools out of the prompt (and reads no calls); bad values and
# shapes are 400s naming the problem (the forced calls themselves: test_serve_openai.sh, on a
# model with room for tool definitions)
same({"messages": hi, "tools": tools, "tool_choice": "none"}, plain,
     "tool_choice none: the prompt without the tools")
err({"messages": hi, "tools": tools, "tool_choice": "bogus"}, "tool_choice string", '"bogus"')
err({"messages": hi, "tools": tools, "tool_choice": {"type": "function",
                                                     "function": {"name": "nope"}}},
    "tool_choice naming another function", "not one of 'tools'")
err({"messages": hi, "tool_choice": "required"}, "tool_choice without tools",
    "only allowed when 'tools' are given")
err({"messages": hi, "tools": [], "tool_choice": "required"}, "required without tools",
    "nothing to call")
for shape in (5, [], {}, True, {"type": "function"}, {"function": {"name": "x"}},
              {"type": "function", "function": {"name": 3}},
              {"type": "function", "function": {"name": ""}},
              {"type": "function", "function": "get_weather"}, [{"type": "function"}],
              {"type": "tool", "function": {"name": "get_weather"}}, "Required", "auto\u0000"):
    err({"messages": hi, "tools": tools, "tool_choice": shape}, f"tool_choice {shape!r}",
        "'tool_choice' must be")
bad_args = [dict(msgs[0]), dict(msgs[1]), dict(msgs[2])]
bad_args[1]["tool_calls"] = [{"id": "call12345", "type": "function",
                              "function": {"name": "get_weather", "arguments": "{city"}}]
err({"messages": bad_args}, "arguments that are not JSON", "function.arguments is not JSON")
err({"messages": [{"role": "assistant", "content": "x", "tool_calls": 3}]}, "tool_calls type",
    "tool_calls must be an array")
err({"messages": [{"role": "tool", "content": "x", "tool_call_id": 3}]}, "tool_call_id type",
    "tool_call_id must be a string")
err({"messages": [{"role": "developer", "content": "x"}]}, "a role Qwen3 drops",
    "the template takes system, user, assistant and tool")
sys.exit(1 if bad else 0)
PY
stop_server
echo "ok"
