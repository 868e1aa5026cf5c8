#!/usr/bin/env python3
"""attn serve under load: N concurrent streaming clients, each asking for TOKENS tokens
(ignore_eos, so every answer has exactly that many where the server honours it), measured on
the client side.

    python3 bench/serve_clients.py http://127.0.0.1:8080/ --clients 1 8 --tokens 128

Or start the servers here, one after the other on the same model and load, and compare them:

    python3 bench/serve_clients.py --attn build/attn \
        --llamacpp /work/venv-ref/bin/python --model SmolLM2-135M-Instruct.Q4_1.gguf

(--llamacpp: a Python with llama-cpp-python[server], started as `PYTHON -m llama_cpp.server
--model FILE --n_threads T --n_threads_batch T --n_ctx CTX --interrupt_requests False --port P`
(one sequence at a time: the others wait for it); --llama-server: llama.cpp's own server program, built
from the same sources, started as `BIN -m FILE -t T -np PARALLEL -c PARALLEL*CTX --port P`, so
it batches PARALLEL sequences as attn serve does; --threads T for all, default 2.)

Prints, per number of clients: the aggregate generation rate (all completion tokens over the
wall time from the first request to the last [DONE]), the median time to first token (first
content chunk) and the per-client rate after it, the best of --repeat rounds; each round runs
every number of clients in turn, and each round's ratio of the aggregate rates to the first
number of clients' is printed with their median (on a machine whose speed drifts, the ratio of
two bests taken minutes apart can land on different sides of a drift).  A server that sends no usage in its stream is
counted by its content chunks (one per token for both servers here), and one that stops early
(no ignore_eos) by what it sent: what each server did is printed.  Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


TEMPERATURE = 0  # --temperature: 0 greedy; else sampled with the servers' other defaults


def one(url, prompt, tokens, out):
    try:
        one_request(url, prompt, tokens, out)
    except (OSError, http.client.HTTPException) as e: # a server that failed or went away
        print(f"request failed: {e!r}", file=sys.stderr, flush=True)
        out.append((0.0, 0.0, 0, False))


def one_request(url, prompt, tokens, out):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": TEMPERATURE, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(url + "v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, n, chunks, buf = None, 0, 0, b""
    usage = False
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
                if j.get("usage"):
                    n, usage = j["usage"]["completion_tokens"], True
                if not j.get("choices"):
                    continue
                if j["choices"][0].get("delta", {}).get("content"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - t0
    out.append((first or 0.0, time.perf_counter() - t0, n if usage else chunks, usage))


def run_once(url, nc, tokens):
    """One run of nc concurrent clients: (clients, tokens/s, ttft, per-client tokens/s, tokens,
    wall, usage seen, tokens per answer)."""
    out = []
    th = [threading.Thread(target=one, args=(url, f"Tell me a story about the number {i}.",
                                             tokens, out))
          for i in range(nc)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    total = sum(o[2] for o in out)
    if not any(o[2] for o in out):
        return (nc, 0.0, 0.0, 0.0, 0, wall, False, [0])
    ttft = statistics.median(o[0] for o in out)
    per = statistics.median([(o[2] - 1) / (o[1] - o[0]) for o in out if o[1] > o[0]] or [0.0])
    return (nc, total / wall, ttft, per, total, wall, all(o[3] for o in out),
            sorted(o[2] for o in out))


def load(url, clients, tokens, repeat):
    """repeat rounds, each running every number of clients in turn (so that a machine whose
    speed drifts slows all of them alike); per number of clients, the best run: (clients,
    tokens/s, ttft, per-client tokens/s, tokens, wall, usage seen, tokens per answer).  With
    more than one number of clients, also prints each round's rates over the first one's and
    the median of those ratios."""
    one(url, "warm up", 8, [])
    runs = {nc: [] for nc in clients}
    for _ in range(repeat):
        for nc in clients:
            runs[nc].append(run_once(url, nc, tokens))
            if runs[nc][-1][1] == 0.0:
                break
    res = []
    for nc in clients:
        best = max(runs[nc], key=lambda r: r[1])
        res.append(best)
        print(f"{nc} clients x {tokens} tokens: {best[1]:.1f} tokens/s aggregate, "
              f"time to first token {best[2] * 1e3:.0f} ms (median), {best[3]:.1f} tokens/s "
              f"per client after it ({best[4]} tokens in {best[5]:.2f} s; usage in stream: "
              f"{'yes' if best[6] else 'no, counted by chunks'}; tokens per answer "
              f"{best[7][0]}..{best[7][-1]}; best of {len(runs[nc])})", flush=True)
    base = runs[clients[0]]
    for nc in clients[1:]:
        ratios = [r[1] / b[1] for r, b in zip(runs[nc], base) if b[1] > 0]
        if ratios:
            print(f"{nc} clients over {clients[0]}, round by round: "
                  f"{', '.join(f'{x:.2f}x' for x in ratios)}; median {statistics.median(ratios):.2f}x",
                  flush=True)
    return res


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(cmd, url, what):
    """Starts a server; returns the process once GET /v1/models answers."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 300:
        if p.poll() is not None:
            sys.exit(f"{what} exited ({p.returncode}): {' '.join(cmd)}")
        try:
            urllib.request.urlopen(url + "v1/models", timeout=5).read()
            return p
        except OSError:
            time.sleep(0.5)
    p.kill()
    sys.exit(f"{what} did not start")


def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.*)", out)
        return m.group(1).strip() if m else "?"
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url", nargs="?")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--attn", help="the attn program: start attn serve here")
    ap.add_argument("--llamacpp", help="a Python with llama-cpp-python[server]: start it here")
    ap.add_argument("--llama-server", dest="llama_server",
                    help="llama.cpp's llama-server program: start it here")
    ap.add_argument("--ctx", type=int, default=1024, help="context tokens per sequence")
    ap.add_argument("--model", help="the GGUF file every server serves")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="the requests' temperature (default 0: greedy; 1 is OpenAI's default)")
    ap.add_argument("--parallel", type=int, default=8, help="attn serve's --parallel")
    ap.add_argument("--template", help="attn serve's --template (a model file without one)")
    a = ap.parse_args()
    global TEMPERATURE
    TEMPERATURE = a.temperature
    if a.url:
        load(a.url, a.clients, a.tokens, a.repeat)
        return
    if not a.model or not (a.attn or a.llamacpp or a.llama_server):
        ap.error("give a URL, or --model with --attn, --llamacpp and/or --llama-server")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical CPUs; model {a.model}; "
          f"{a.threads} threads each", flush=True)
    table = []
    for name, exe in (("attn serve", a.attn), ("llama-cpp-python", a.llamacpp),
                      ("llama-server", a.llama_server)):
        if not exe:
            continue
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        if name == "attn serve":
            cmd = [exe, "serve", "--model", a.model, "--port", str(port), "-t", str(a.threads),
                   "--parallel", str(a.parallel), "--ctx", str(a.ctx), "-q"]
            if a.template:
                cmd += ["--template", a.template]
        elif name == "llama-server":
            cmd = [exe, "-m", a.model, "--port", str(port), "-t", str(a.threads),
                   "-tb", str(a.threads), "-np", str(a.parallel),
                   "-c", str(a.parallel * a.ctx), "--log-disable"]
        else:
            # its default interrupts a running request when another one comes: they queue
            cmd = [exe, "-m", "llama_cpp.server", "--model", a.model, "--n_threads",
                   str(a.threads), "--n_threads_batch", str(a.threads), "--n_ctx", str(a.ctx),
                   "--interrupt_requests", "False", "--port", str(port)]
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        p = serve(cmd, url, name)
        try:
            table.append((name, load(url, a.clients, a.tokens, a.repeat)))
            if p.poll() is not None:
                print(f"!!! {name} exited during the run (status {p.returncode}): its figures "
                      f"are not valid", flush=True)
                table.pop()
        finally:
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    if len(table) >= 2 and table[0][0] == "attn serve":
        na, ra = table[0]
        for nb, rb in table[1:]:
            for x, y in zip(ra, rb):
                print(f"{x[0]} clients: {na} {x[1]:.1f} tokens/s, {nb} {y[1]:.1f} tokens/s: "
                      f"{x[1] / y[1]:.2f}x; time to first token {x[2] * 1e3:.0f} vs "
                      f"{y[2] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
