"""Drives attn serve's chat page in headless Chromium as a user would, over the DevTools
protocol, with nothing but Python's standard library (a minimal WebSocket client: RFC 6455
handshake, masked text frames out, unmasked frames in).  Used by tests/test_serve_page.sh.

    python3 serve_page_driver.py CHROMIUM PAGE_URL MESSAGE PROFILE_DIR SCREENSHOT.png

Starts Chromium (--headless, --remote-debugging-port=0) on PAGE_URL, waits for the page to
load and show the model's name, focuses the message box, types MESSAGE (Input.insertText),
presses Enter (Input.dispatchKeyEvent), waits (60 s at most, real time) until the page says the
answer has streamed (<body data-state="done">), saves a screenshot and prints one JSON line:
{"state", "messages": [[role, text], ...], "stats"}.  Exit status 1 on any failure."""
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request


class WS:
    def __init__(self, url):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.s.recv(1)
            if not b:
                raise RuntimeError("websocket: connection closed during the handshake")
            head += b
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError("websocket handshake: " + head.decode(errors="replace"))
        self.n = 0

    def _read(self, k):
        out = b""
        while len(out) < k:
            b = self.s.recv(k - len(out))
            if not b:
                raise RuntimeError("websocket: connection closed")
            out += b
        return out

    def send(self, obj):
        data = json.dumps(obj).encode()
        n = len(data)
        hdr = bytes([0x81])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0F
            if op == 8:
                raise RuntimeError("websocket: closed by the browser")
            if op in (9, 10):  # ping / pong: not needed here
                continue
            msg += payload
            if b0 & 0x80:
                return json.loads(msg)

    def call(self, method, **params):
        self.n += 1
        self.send({"id": self.n, "method": method, "params": params})
        while True:
            m = self.recv()
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r.get("result", {}).get("value")


def main():
    chrome, url, message, profile, shot = sys.argv[1:]
    proc = subprocess.Popen([chrome, "--headless", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--no-first-run",
                             "--remote-debugging-port=0", "--user-data-dir=" + profile,
                             "--window-size=900,600", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        t0 = time.time()
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if proc.poll() is not None or time.time() - t0 > 60:
                raise RuntimeError("chromium did not open its debugging port")
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        page = None
        while page is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
                page = next((t for t in json.load(r) if t.get("type") == "page"), None)
            if page is None:
                if time.time() - t0 > 60:
                    raise RuntimeError("chromium shows no page")
                time.sleep(0.1)
        ws = WS(page["webSocketDebuggerUrl"])

        def wait(expr, what, limit=60):
            t = time.time()
            while not ws.eval(expr):
                if time.time() - t > limit:
                    raise RuntimeError("timed out waiting for " + what)
                time.sleep(0.1)

        wait("document.readyState === 'complete' && !!document.getElementById('q') && "
             "!document.getElementById('model').textContent.startsWith('...')",
             "the page and the model's name")
        ws.eval("document.getElementById('q').focus()")
        ws.call("Input.insertText", text=message)
        for kind in ("keyDown", "keyUp"):
            ws.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                    windowsVirtualKeyCode=13, nativeVirtualKeyCode=13,
                    **({"text": "\r"} if kind == "keyDown" else {}))
        wait("document.body.dataset.state === 'done'", "the streamed answer")
        out = ws.eval("JSON.stringify({state: document.body.dataset.state, "
                      "messages: [...document.querySelectorAll('#log .m')].map("
                      "(d) => [d.className.slice(2), d.textContent]), "
                      "stats: document.getElementById('stats').textContent, "
                      "model: document.getElementById('model').textContent})")
        png = ws.call("Page.captureScreenshot", format="png")["data"]
        with open(shot, "wb") as f:
            f.write(base64.b64decode(png))
        print(out)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line for the test's log
        print("FAIL: page driver:", e)
        sys.exit(1)
