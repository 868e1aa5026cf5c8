#!/usr/bin/env bash
# attn serve's chat page (src/serve/serve_page.h, docs/serve.md) in a real browser: headless Chromium
# driven over the DevTools protocol (tests/serve_page_driver.py) loads / (with
# ?temperature=0&max_tokens=16), a message is typed into its box and Enter pressed, and the page
# streams the answer through fetch and its SSE reader.  The page must then show the user's
# message and an assistant message whose text is exactly the API's greedy answer to the same
# chat (asked with curl), the token count and the model's name; its screenshot is saved
# (TMPDIR/page.png) to look at.  Skipped (77), loudly, without chromium (apt-get install
# chromium), curl or python3.
#   bash test_serve_page.sh ATTN TMPDIR       (run in tests/; registered with label serve)
set -u
ATTN=$1 CASE=serve_page TMP=$2
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run
CHROME=
for c in chromium chromium-browser google-chrome; do
    command -v $c >/dev/null && { CHROME=$(command -v $c); break; }
done
if [ -z "$CHROME" ]; then
    echo "SKIP: no chromium: the chat page is not tested in a browser (apt-get install chromium)"
    exit 77
fi
for tool in curl python3; do
    command -v $tool >/dev/null || { echo "SKIP: $tool is missing"; exit 77; }
done
G=fixtures/llama_tiny.gguf
"$ATTN" serve --model $G --port 0 -t 1 --parallel 2 --ctx 128 2>"$T/log" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
URL=
for _ in $(seq 1 100); do
    URL=$(grep -o 'http://[^ ]*/' "$T/log" | head -n 1)
    [ -n "$URL" ] && break
    kill -0 $PID 2>/dev/null || { cat "$T/log"; fail "attn serve did not start"; }
    sleep 0.1
done
[ -n "$URL" ] || fail "attn serve printed no address"

# the API's greedy answer to the chat the page will send (its model field is ignored)
curl -sf "${URL}v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"hello"}],"temperature":0,"max_tokens":16}' \
    >"$T/api.json" || fail "the API's answer"

# headless Chromium driven over the DevTools protocol (tests/serve_page_driver.py): the page
# loads, "hello" is typed into its message box and Enter pressed; the driver waits for the
# stream's end, reads the page's messages and saves the screenshot (kept for a person to look
# at).  The URL's temperature and max_tokens go into the page's requests.
mkdir -p "$TMP"
rm -f "$TMP/page.png"
timeout 180 python3 "$(dirname "$0")/serve_page_driver.py" "$CHROME" \
    "${URL}?temperature=0&max_tokens=16" hello "$T/profile" "$TMP/page.png" >"$T/page.json" ||
    { cat "$T/page.json"; fail "driving the page in chromium"; }

python3 - "$T/api.json" "$T/page.json" <<'PY' || fail "the page's answer (above)"
import json, sys
api = json.load(open(sys.argv[1], encoding="utf-8"))["choices"][0]["message"]["content"]
page = json.loads(open(sys.argv[2], encoding="utf-8").read())
print("page:", json.dumps(page))
bad = []
msgs = page["messages"]
if [r for r, _ in msgs] != ["user", "assistant"]:
    bad.append(f"messages {msgs}, expected user then assistant")
elif msgs[0][1] != "hello":
    bad.append(f"the user's message {msgs[0][1]!r}")
elif not api:
    bad.append("an empty answer proves nothing")
elif msgs[1][1] != api:
    bad.append(f"the page shows {msgs[1][1]!r}, the API answered {api!r}")
if not page["stats"].startswith("16 tokens,"):
    bad.append(f"the page's stats: {page['stats']!r}")
if not page["model"].startswith("llama_tiny.gguf"):
    bad.append(f"the page's model: {page['model']!r}")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
[ -s "$TMP/page.png" ] && [ "$(head -c 8 "$TMP/page.png" | od -An -tx1 | tr -d ' ')" = \
    89504e470d0a1a0a ] || fail "no PNG screenshot"
echo "screenshot: $TMP/page.png"
grep -q 'POST /v1/chat/completions 200' "$T/log" || fail "the server saw no chat request"
kill -TERM $PID
wait $PID || fail "attn serve exited $? after SIGTERM"
echo "ok"
