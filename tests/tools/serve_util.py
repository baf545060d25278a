"""Runs `tern serve` for the tests: on 127.0.0.1, a free port (the server prints the one it got),
stderr to a file; plain http.client requests; SIGTERM to stop. Standard library only."""
import http.client
import json
import os
import re
import signal
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
TERN_SAN = os.path.join(ROOT, "build-san", "tern")
MODEL = os.path.join(ROOT, "models", "en-de")


class Server:
    """tern serve on 127.0.0.1, a free port; stderr to a file; stop() sends SIGTERM."""

    def __init__(self, tmp_path, *args, binary=TERN, env=None, start_timeout=120, layout=("-t", "2")):
        self.err_path = tmp_path / f"serve-{time.monotonic_ns()}.err"
        self.err = open(self.err_path, "wb")
        e = dict(os.environ)
        if env:
            e.update(env)
        self.proc = subprocess.Popen([binary, "serve", "-m", f"en-de={MODEL}", "-p", "0", *layout, *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err, env=e)
        deadline = time.monotonic() + start_timeout
        self.port = None
        while time.monotonic() < deadline:
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", self.err_path.read_bytes())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("tern serve did not start:\n" + self.stderr())

    def stderr(self):
        return self.err_path.read_bytes().decode(errors="replace")

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = self.conn(timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, dict(r.getheaders()), data
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=120):
        status, hdrs, data = self.request(method, path, body, headers, timeout)
        return status, json.loads(data), hdrs

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def term(self):
        self.termed = True
        self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=120):
        if self.proc.poll() is None and not getattr(self, "termed", False):
            self.term()
        rc = self.proc.wait(timeout)
        self.err.close()
        return rc


def cli_translate(lines, *args):
    r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "-t", "2", *args], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")[:-1]


def wait_until(pred, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
