#!/usr/bin/env python3
"""Load and fault test of `attn serve` (docs/serve.md, "Load and faults"), standard library only.

    python3 bench/serve_load.py --attn build/attn --model MODEL.gguf [--requests 1000]
        [--clients 16] [--parallel 8] [--ctx 1024] [--threads 2] [--max-tokens 16]
    python3 bench/serve_load.py --url http://127.0.0.1:8080/ --pid PID ...   (a running server)

Sends --requests requests from --clients concurrent clients, a fixed mix drawn with a seeded
generator: chat completions streamed and not, completions (each must come back complete: 200,
a finish_reason, usage that adds up, a streamed one its finish chunk and [DONE]), streams the
client drops after the first pieces of text (cancelled mid-stream), bodies that are not JSON
(400), bodies over the 1 MiB limit (413), /health and /v1/models.  Then checks that the server
still answers /health, that no sequence is left running (/metrics), and compares its resident
memory (VmRSS of /proc/PID/status) after a warm-up round with the one after the run.  Prints a
summary and exits 1 if anything was wrong."""
import argparse
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain what a hash table is.", "Name three prime numbers.",
           "Translate 'good morning' into Spanish.", "What is 17 times 3?",
           "Give me a tip for learning to cook.", "Why is the sky blue?"]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=300)

    def req(self, method, path, body=None, raw=None):
        c = self.conn()
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body else None)
            c.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()


def good(cl, rng, max_tokens, kind):
    """One request that must be answered completely; returns an error string or None."""
    p = rng.choice(PROMPTS)
    stream = kind.endswith("stream")
    chat = kind.startswith("chat")
    body = {"max_tokens": max_tokens, "temperature": rng.choice([0, 0.7]), "seed": rng.randrange(1000)}
    if chat:
        body["messages"] = [{"role": "user", "content": p}]
    else:
        body["prompt"] = p
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if not stream:
        st, b = cl.req("POST", path, body)
        if st != 200:
            return f"{kind}: status {st}: {b[:200]!r}"
        j = json.loads(b)
        ch = j["choices"][0]
        text = ch["message"]["content"] if chat else ch["text"]
        u = j["usage"]
        if ch["finish_reason"] not in ("stop", "length") or not isinstance(text, str):
            return f"{kind}: finish {ch['finish_reason']}"
        if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"] or \
                u["completion_tokens"] > max_tokens or \
                (ch["finish_reason"] == "length" and u["completion_tokens"] != max_tokens):
            return f"{kind}: usage {u}"
        return None
    body["stream"] = True
    c = cl.conn()
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return f"{kind}: status {r.status}"
        finish, done, usage = None, False, None
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                continue
            j = json.loads(line[6:])
            finish = j["choices"][0]["finish_reason"] or finish
            usage = j.get("usage") or usage
        if not done or finish not in ("stop", "length") or not usage or \
                usage["completion_tokens"] > max_tokens:
            return f"{kind}: incomplete stream (done {done}, finish {finish}, usage {usage})"
        return None
    finally:
        c.close()


def cancelled(cl, rng, max_tokens):
    """A stream the client drops after its first pieces of text."""
    c = cl.conn()
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps({
            "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "stream": True,
            "max_tokens": max_tokens * 8, "ignore_eos": True}).encode(),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return f"cancel: status {r.status}"
        pieces = 0
        for line in r:
            if line.startswith(b"data: {") and b'"content"' in line:
                pieces += 1
                if pieces >= 3:
                    break
        return None
    finally:
        c.sock and c.sock.close()
        c.close()


def too_big(cl):
    """A body of 1.1 MB: the server answers 413 from the Content-Length, before the body, and
    may close while it is sent; the status line is read whatever happened to the sending."""
    s = socket.create_connection((cl.host, cl.port), timeout=60)
    try:
        n = 1100 * 1024
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  f"application/json\r\nContent-Length: {n}\r\n\r\n".encode())
        try:
            for _ in range(n // 65536 + 1):
                s.sendall(b"a" * 65536)
        except OSError:
            pass
        head = b""
        try:
            while b"\r\n" not in head:
                b = s.recv(4096)
                if not b:
                    break
                head += b
        except OSError:
            pass
        m = re.match(rb"HTTP/1\.[01] (\d+)", head)
        return int(m.group(1)) if m else -1
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--attn")
    ap.add_argument("--model")
    ap.add_argument("--url")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    proc = None
    if a.url:
        url, pid = a.url, a.pid
    else:
        if not a.attn or not a.model:
            ap.error("--attn and --model, or --url and --pid")
        proc = subprocess.Popen([a.attn, "serve", "--model", a.model, "--port", "0", "-q",
                                 "--parallel", str(a.parallel), "--ctx", str(a.ctx),
                                 "--queue", "256", "-t", str(a.threads)],
                                stderr=subprocess.PIPE, text=True)
        line = proc.stderr.readline()
        m = re.search(r"http://\S+/", line)
        if not m:
            sys.exit("attn serve did not start: " + line)
        url, pid = m.group(0), proc.pid
    cl = Client(url)
    bad = []
    try:
        # warm-up: every slot used once, so that what the server allocates for good is there
        warm = [threading.Thread(target=lambda i=i: good(cl, random.Random(i), a.max_tokens,
                                                          "chat")) for i in range(a.parallel * 2)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        rss0 = rss_kb(pid) if pid else -1
        rng = random.Random(a.seed)
        kinds = rng.choices(["chat", "chat_stream", "completion", "completion_stream", "cancel",
                             "bad_json", "too_big", "health", "models"],
                            weights=[25, 25, 10, 10, 10, 8, 4, 4, 4], k=a.requests)
        counts, lock, lat = {}, threading.Lock(), []
        next_i = [0]

        def worker(w):
            r = random.Random(a.seed * 1000 + w)
            while True:
                with lock:
                    if next_i[0] >= len(kinds):
                        return
                    k = kinds[next_i[0]]
                    next_i[0] += 1
                t0 = time.time()
                try:
                    if k in ("chat", "chat_stream", "completion", "completion_stream"):
                        err = good(cl, r, a.max_tokens, k)
                    elif k == "cancel":
                        err = cancelled(cl, r, a.max_tokens)
                    elif k == "bad_json":
                        st, _ = cl.req("POST", "/v1/chat/completions",
                                       raw=r.choice([b'{"messages": [', b"not json", b"{}}",
                                                     b'{"messages": "x\xff"}']))
                        err = None if st == 400 else f"bad_json: status {st}"
                    elif k == "too_big":
                        st = too_big(cl)
                        err = None if st == 413 else f"too_big: status {st}"
                    else:
                        st, _ = cl.req("GET", "/health" if k == "health" else "/v1/models")
                        err = None if st == 200 else f"{k}: status {st}"
                except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                    err = f"{k}: {type(e).__name__}: {e}"
                with lock:
                    counts[k] = counts.get(k, 0) + 1
                    lat.append((k, time.time() - t0))
                    if err:
                        bad.append(err)

        t0 = time.time()
        ws = [threading.Thread(target=worker, args=(w,)) for w in range(a.clients)]
        for t in ws:
            t.start()
        for t in ws:
            t.join()
        wall = time.time() - t0
        # the server settles (cancelled streams free their slots at their next token)
        for _ in range(100):
            st, b = cl.req("GET", "/metrics")
            act = re.search(rb"^attn_active_sequences (\d+)", b, re.M)
            qd = re.search(rb"^attn_queue_depth (\d+)", b, re.M)
            if act and qd and act.group(1) == b"0" and qd.group(1) == b"0":
                break
            time.sleep(0.1)
        else:
            bad.append("sequences still running or queued after the run")
        st, b = cl.req("GET", "/health")
        if st != 200:
            bad.append(f"/health after the run: {st}")
        rss1 = rss_kb(pid) if pid else -1
        m = {k: v for k, v in re.findall(rb"^(attn_\w+(?:\{[^}]*\})?) (\d+)", b"".join(
            [cl.req("GET", "/metrics")[1]]), re.M)}
        good_lat = sorted(t for k, t in lat if k in ("chat", "completion"))
        print(f"{len(kinds)} requests, {a.clients} clients, {wall:.1f} s: " +
              ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if good_lat:
            print(f"non-streamed answers: median {good_lat[len(good_lat) // 2] * 1000:.0f} ms, "
                  f"p95 {good_lat[int(len(good_lat) * 0.95)] * 1000:.0f} ms")
        print("server: completion tokens", m.get(b"attn_completion_tokens_total", b"?").decode(),
              "decode steps", m.get(b"attn_decode_steps_total", b"?").decode(),
              "batch rows", m.get(b"attn_decode_batch_rows_total", b"?").decode())
        if rss0 > 0:
            growth = rss1 - rss0
            print(f"RSS after warm-up {rss0 / 1024:.1f} MiB, after the run {rss1 / 1024:.1f} MiB "
                  f"({growth / 1024:+.1f} MiB)")
            if growth > max(8 * 1024, rss0 // 20):
                bad.append(f"RSS grew by {growth / 1024:.1f} MiB")
    finally:
        if proc:
            proc.terminate()
            try:
                rc = proc.wait(90)
                if rc != 0:
                    bad.append(f"attn serve exited {rc} after SIGTERM")
            except subprocess.TimeoutExpired:
                proc.kill()
                bad.append("attn serve did not stop after SIGTERM")
    for e in bad[:20]:
        print("FAIL:", e)
    print("ok" if not bad else f"{len(bad)} failures")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
