#!/usr/bin/env python3
"""attn serve under load: N concurrent streaming clients, each asking for TOKENS tokens
(ignore_eos, so every answer has exactly that many), measured on the client side.

    python3 bench/serve_clients.py http://127.0.0.1:8080/ --clients 1 8 --tokens 128

Prints, per number of clients: the aggregate generation rate (all completion tokens over the
wall time from the first request to the last [DONE]), the median time to first token (first
content chunk) and the per-client rate after it.  Standard library only.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def one(url, prompt, tokens, out):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(url + "v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, n, buf = None, 0, b""
    with urllib.request.urlopen(req, timeout=600) as r:
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                    continue
                j = json.loads(ev[6:])
                c = j["choices"][0]
                if c["delta"].get("content") and first is None:
                    first = time.perf_counter() - t0
                if j.get("usage"):
                    n = j["usage"]["completion_tokens"]
    out.append((first or 0.0, time.perf_counter() - t0, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    one(a.url, "warm up", 8, [])
    for nc in a.clients:
        best = None
        for _ in range(a.repeat):
            out = []
            th = [threading.Thread(target=one, args=(a.url, f"Tell me a story about the "
                                                   f"number {i}.", a.tokens, out))
                  for i in range(nc)]
            t0 = time.perf_counter()
            for t in th:
                t.start()
            for t in th:
                t.join()
            wall = time.perf_counter() - t0
            total = sum(o[2] for o in out)
            ttft = statistics.median(o[0] for o in out)
            per = statistics.median((o[2] - 1) / (o[1] - o[0]) for o in out if o[1] > o[0])
            r = (total / wall, ttft, per, total, wall)
            if best is None or r[0] > best[0]:
                best = r
        print(f"{nc} clients x {a.tokens} tokens: {best[0]:.1f} tokens/s aggregate, "
              f"time to first token {best[1] * 1e3:.0f} ms (median), {best[2]:.1f} tokens/s "
              f"per client after it ({best[3]} tokens in {best[4]:.2f} s)")


if __name__ == "__main__":
    main()
