"""`tern serve` in production (issue 31 point 4; docs/serving.md, "Production"): HTTPS, IPv6 and
dual stack, the access log, --trusted-proxies and X-Forwarded-For, the /metrics bearer token and
the process metrics, API keys reloaded on SIGHUP, options from TERN_SERVE_* variables, slow and
stalled clients, connection limits.

Loopback only, the shipped model models/en-de. The peers: Python's ssl module verifying the
server's certificate (a self-signed one made at test time by the openssl CLI), the kernel's own
figures in /proc/PID (status, stat, fd) for the process metrics, the requests this test makes
(their method, path, status, body length, User-Agent, time) for each access log field.
"""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import MODEL, TERN, cli_translate, wait_until  # noqa: E402

LISTEN = re.compile(rb"listening on (https?)://(\[[0-9a-f:]+\]|[0-9.]+):(\d+)")


class Prod:
    """tern serve with any host and scheme: the address and port it prints; SIGTERM to stop."""

    def __init__(self, tmp_path, *args, env=None, model=True):
        self.err_path = tmp_path / f"serve-{time.monotonic_ns()}.err"
        e = dict(os.environ)
        e.update(env or {})
        cmd = [TERN, "serve", "-p", "0", "-t", "1", "-w", "1"] + (["-m", f"en-de={MODEL}"] if model else []) + list(args)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=e)
        deadline = time.monotonic() + 120
        self.port = None
        while time.monotonic() < deadline:
            m = LISTEN.search(self.err_path.read_bytes())
            if m:
                self.scheme, self.host, self.port = m.group(1).decode(), m.group(2).decode(), int(m.group(3))
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

    def request(self, method, path, body=None, headers=None, host="127.0.0.1", context=None, timeout=60):
        if context is not None:
            c = http.client.HTTPSConnection(host, self.port, timeout=timeout, context=context)
        else:
            c = http.client.HTTPConnection(host, self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def metrics(self, token=None):
        st, _, data = self.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"} if token else {})
        assert st == 200, data
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def run_fail(*args, env=None, timeout=120, base=("-p", "0", "-t", "1", "-w", "1")):
    """tern serve that must not start: its exit code and stderr."""
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([TERN, "serve", *base, *args], capture_output=True, text=True,
                       env=e, timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for localhost, 127.0.0.1 and ::1, and a second unrelated key."""
    d = tmp_path_factory.mktemp("tls")
    for name in ("", "2"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / f"key{name}.pem"),
                        "-out", str(d / f"cert{name}.pem"), "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"],
                       check=True, capture_output=True)
    return d


def have_ipv6():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# ------------------------------------------------------------------------------------ TLS


def test_tls_same_answers_as_http(tmp_path, cert):
    """HTTPS verified against the test's certificate gives the answers plain HTTP gives (and those
    of `tern translate`); plain HTTP to the HTTPS port gets no HTTP answer."""
    plain = Prod(tmp_path)
    tls = Prod(tmp_path, "--ssl-cert", str(cert / "cert.pem"), "--ssl-key", str(cert / "key.pem"))
    try:
        assert tls.scheme == "https" and plain.scheme == "http"
        ctx = ssl.create_default_context(cafile=str(cert / "cert.pem"))
        assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
        lines = ["A man is riding a bicycle.", "Two dogs play in the snow."]
        body = {"q": lines, "source": "en", "target": "de"}
        for host in ("127.0.0.1", "localhost"):
            st, h, data = tls.request("POST", "/translate", body, host=host, context=ctx)
            assert st == 200 and json.loads(data) == {"translatedText": cli_translate(lines)}
        for method, path, b in [("POST", "/translate", body), ("GET", "/languages", None), ("GET", "/health", None),
                                ("POST", "/v1/translate", {"q": lines[0], "num_hypotheses": 2}),
                                ("POST", "/translate", {"q": "x", "source": "en", "target": "xx"}),
                                ("GET", "/nope", None)]:
            a = plain.request(method, path, b)
            t = tls.request(method, path, b, context=ctx)
            assert a[0] == t[0] and a[2] == t[2], (path, a, t)
        # a client that does not trust the certificate is refused by its own check
        with pytest.raises(ssl.SSLCertVerificationError):
            tls.request("GET", "/health", context=ssl.create_default_context())
        # plain HTTP on the HTTPS port: no HTTP response
        with pytest.raises((http.client.HTTPException, ConnectionError, socket.timeout)):
            tls.request("GET", "/health", timeout=5)
        assert tls.request("GET", "/health", context=ctx)[0] == 200
    finally:
        assert plain.stop() == 0 and tls.stop() == 0, tls.stderr()


def test_tls_errors_name_the_file(tmp_path, cert):
    c, k, k2 = str(cert / "cert.pem"), str(cert / "key.pem"), str(cert / "key2.pem")
    cases = [
        (["--ssl-cert", str(tmp_path / "none.pem"), "--ssl-key", k], f"--ssl-cert {tmp_path / 'none.pem'}: cannot open"),
        (["--ssl-cert", c, "--ssl-key", str(tmp_path / "none.pem")], f"--ssl-key {tmp_path / 'none.pem'}: cannot open"),
        (["--ssl-cert", k, "--ssl-key", k], f"--ssl-cert {k}: not a PEM certificate"),
        (["--ssl-cert", c, "--ssl-key", c], f"--ssl-key {c}: not a PEM private key"),
        (["--ssl-cert", c, "--ssl-key", k2], f"--ssl-cert {c}, --ssl-key {k2}: cannot use them: GnuTLS"),
        (["--ssl-cert", c], "--ssl-cert without --ssl-key"),
    ]
    (tmp_path / "empty.pem").write_bytes(b"")
    cases.append((["--ssl-cert", str(tmp_path / "empty.pem"), "--ssl-key", k], "not a PEM certificate"))
    for args, msg in cases:
        rc, err = run_fail("-m", f"en-de={MODEL}", *args)
        assert rc == 1 and msg in err, (args, err)
    assert "do not match" in run_fail("-m", f"en-de={MODEL}", "--ssl-cert", c, "--ssl-key", k2)[1]


# ------------------------------------------------------------------------------------ IPv6


@pytest.mark.skipif(not have_ipv6(), reason="no IPv6 on this machine's loopback")
def test_ipv6_and_dual_stack(tmp_path):
    """--host ::1 serves IPv6 only; --host :: serves IPv4 and IPv6 clients (dual stack), each
    logged with its own address."""
    s6 = Prod(tmp_path, "--host", "::1")
    try:
        assert s6.host == "[::1]"
        assert s6.request("GET", "/health", host="::1")[0] == 200
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", s6.port), timeout=5)
    finally:
        assert s6.stop() == 0
    log = tmp_path / "access.json"
    both = Prod(tmp_path, "--host", "::", "--access-log", str(log), "--access-log-format", "json")
    try:
        assert both.host == "[::]"
        body = {"q": "A dog.", "source": "en", "target": "de"}
        a = both.request("POST", "/translate", body, host="127.0.0.1")
        b = both.request("POST", "/translate", body, host="::1")
        assert a[0] == b[0] == 200 and a[2] == b[2]
    finally:
        assert both.stop() == 0
    clients = [json.loads(x)["client"] for x in log.read_text().splitlines()]
    assert sorted(clients) == ["127.0.0.1", "::1"]  # in the order the requests completed


# ------------------------------------------------------------------------------------ access log

COMBINED = re.compile(r'^(\S+) - - \[(\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4})\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+|-) '
                      r'"((?:[^"\\]|\\x[0-9a-f]{2})*)" "((?:[^"\\]|\\x[0-9a-f]{2})*)"$')


def _requests(s):
    """Requests of known shape: (method, path, body, headers, status, response bytes, request id, t0, t1)."""
    made = []
    for method, path, body, headers in [
        ("GET", "/health", None, {"User-Agent": "probe/1.0"}),
        ("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de"}, {"User-Agent": "ua \"quoted\" \u00e9"}),
        ("GET", "/nope", None, {"User-Agent": "x", "Referer": "http://example.com/page"}),
        ("POST", "/translate", {"q": "A dog.", "source": "en", "target": "zz"}, {}),
        ("DELETE", "/health", None, {"User-Agent": "z"}),
    ]:
        t0 = time.time()
        st, h, data = s.request(method, path, body, {k: v.encode() for k, v in headers.items()})  # UTF-8 on the wire
        made.append((method, path, headers, st, len(data), h["X-Request-Id"], t0, time.time()))
    return made


def test_access_log_json_and_combined(tmp_path):
    """One line per request, each field as the request made it; SIGHUP reopens the file."""
    logj, logc = tmp_path / "a.json", tmp_path / "a.log"
    sj = Prod(tmp_path, "--access-log", str(logj), "--access-log-format", "json")
    sc = Prod(tmp_path, "--access-log", str(logc))
    try:
        made_j, made_c = _requests(sj), _requests(sc)
        # logrotate: the file moved away, SIGHUP, the next line goes to a new file of the name
        os.rename(logj, tmp_path / "a.json.1")
        wait_until(lambda: len((tmp_path / "a.json.1").read_text().splitlines()) == len(made_j), 10, "lines written")
        sj.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "models reloaded" in sj.stderr(), 60, "SIGHUP handled")
        assert sj.request("GET", "/health")[0] == 200
        wait_until(lambda: logj.exists() and logj.read_text().count("\n") == 1, 10, "new log file")
    finally:
        assert sj.stop() == 0 and sc.stop() == 0
    # a line is written when libmicrohttpd reports its request complete, which can come after the
    # client has its answer and sent the next one: the lines are matched to the requests by request id
    # (JSON) and by method, path and status (combined; the five requests differ in those)
    rows = [json.loads(x) for x in (tmp_path / "a.json.1").read_text().splitlines()]
    assert len(rows) == len(made_j)
    by_id = {r["request_id"]: r for r in rows}
    assert len(by_id) == len(rows)
    for (method, path, headers, st, n, rid, t0, t1) in made_j:
        r = by_id[rid]
        assert list(r) == ["time", "client", "method", "path", "protocol", "status", "bytes", "duration",
                           "user_agent", "referer", "request_id"]
        assert (r["client"], r["method"], r["path"], r["protocol"], r["status"], r["bytes"], r["request_id"]) == \
            ("127.0.0.1", method, path, "HTTP/1.1", st, n, rid)
        assert r["user_agent"] == headers.get("User-Agent")
        assert r["referer"] == headers.get("Referer")
        ts = time.mktime(time.strptime(r["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        ts += int(r["time"][20:23]) / 1000
        assert t0 - 0.002 <= ts <= t1 + 0.002, (r["time"], t0, t1)
        assert 0 <= r["duration"] <= t1 - t0 + 0.002
    assert json.loads(logj.read_text())["path"] == "/health"
    lines = logc.read_text().splitlines()
    assert len(lines) == len(made_c)
    parsed = [COMBINED.match(line) for line in lines]
    assert all(parsed), lines
    by_req = {(m.group(3), m.group(4), int(m.group(6))): m for m in parsed}
    assert len(by_req) == len(lines)
    for (method, path, headers, st, n, rid, t0, t1) in made_c:
        m = by_req[(method, path, st)]
        ts = time.mktime(time.strptime(m.group(2), "%d/%b/%Y:%H:%M:%S %z"))
        assert int(t0) - 1 <= ts <= t1 + 1
        esc = lambda v: "-" if v is None else "".join(  # noqa: E731
            f"\\x{b:02x}" if b in (0x22, 0x5c) or b < 0x20 or b >= 0x7f else chr(b) for b in v.encode())
        assert m.group(1, 3, 4, 5) == ("127.0.0.1", method, path, "HTTP/1.1")
        assert int(m.group(6)) == st and m.group(7) == (str(n) if n else "-")
        assert m.group(8) == esc(headers.get("Referer"))
        assert m.group(9) == esc(headers.get("User-Agent"))
    assert '"ua \\x22quoted\\x22 \\xc3\\xa9"' in by_req[("POST", "/translate", 200)].group(0)


# ------------------------------------------------------------------------------------ proxies


def _detect(s, xff=None):
    h = {"X-Forwarded-For": xff} if xff is not None else {}
    return s.request("POST", "/detect", {"q": "A man is riding a bicycle."}, h)[0]


def test_trusted_proxies(tmp_path):
    """From a trusted peer the client is X-Forwarded-For's rightmost untrusted address (rate limits
    and log); from any other peer the header is ignored."""
    log = tmp_path / "t.json"
    s = Prod(tmp_path, "--trusted-proxies", "127.0.0.0/8,10.0.0.0/8", "--req-limit", "2", "--access-log", str(log),
             "--access-log-format", "json")
    try:
        assert _detect(s, "203.0.113.7") == 200
        assert _detect(s, "198.51.100.99, 203.0.113.7") == 200  # the left one is the client's own claim
        assert _detect(s, "203.0.113.7, 10.1.2.3") == 429       # 10.1.2.3: a trusted proxy: still .7
        assert _detect(s, "203.0.113.8") == 200                 # another forwarded client: its own budget
        assert _detect(s, "2001:db8::1") == 200
        assert _detect(s) == 200                                # no header: the peer
        assert _detect(s, "garbage") == 200                     # unparsable: the peer (its 2nd)
        assert _detect(s) == 429
    finally:
        assert s.stop() == 0
    # the log thread writes each request when libmicrohttpd reports it complete, which can come after
    # the client has its answer and sent the next request: compare (client, status) as a multiset
    got = sorted((json.loads(x)["client"], json.loads(x)["status"]) for x in log.read_text().splitlines())
    assert got == sorted([("203.0.113.7", 200), ("203.0.113.7", 200), ("203.0.113.7", 429), ("203.0.113.8", 200),
                          ("2001:db8::1", 200), ("127.0.0.1", 200), ("127.0.0.1", 200), ("127.0.0.1", 429)])

    log2 = tmp_path / "u.json"
    u = Prod(tmp_path, "--trusted-proxies", "10.0.0.0/8", "--req-limit", "2", "--access-log", str(log2),
             "--access-log-format", "json")
    try:  # the peer (127.0.0.1) is not trusted: every request is the peer's, whatever the header says
        assert [_detect(u, x) for x in ("203.0.113.7", "203.0.113.8", "203.0.113.9")] == [200, 200, 429]
    finally:
        assert u.stop() == 0
    assert {json.loads(x)["client"] for x in log2.read_text().splitlines()} == {"127.0.0.1"}
    rc, err = run_fail("-m", f"en-de={MODEL}", "--trusted-proxies", "10.0.0.0/8,10.0.0.0/33")
    assert rc == 1 and "--trusted-proxies: '10.0.0.0/33' is not an address or CIDR range" in err


# ------------------------------------------------------------------------------------ metrics


def _proc(pid):
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
    stat = open(f"/proc/{pid}/stat").read()
    f = stat[stat.rindex(")") + 2:].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(f[11]) + int(f[12])) / tick
    btime = int(re.search(r"^btime (\d+)", open("/proc/stat").read(), re.M).group(1))
    return rss, cpu, btime + int(f[19]) / tick, len(os.listdir(f"/proc/{pid}/fd"))


def test_metrics_token_and_process_metrics(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    s = Prod(tmp_path, "--metrics-token-file", str(tok))
    try:
        st, h, data = s.request("GET", "/metrics")
        assert st == 401 and h["WWW-Authenticate"].startswith("Bearer") and "Authorization" in json.loads(data)["error"]
        for bad in ("Bearer wrong", "Bearer s3cret-toke", "Bearer s3cret-token2", "Basic s3cret-token", "s3cret-token"):
            assert s.request("GET", "/metrics", headers={"Authorization": bad})[0] == 401, bad
        assert s.request("GET", "/health")[0] == 200  # only /metrics asks
        # translate something so the process has worked
        assert s.request("POST", "/translate", {"q": "A man is riding a bicycle.", "source": "en", "target": "de"})[0] == 200
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(3)]
        wait_until(lambda: s.metrics("s3cret-token").get("tern_http_open_connections") == 4, 10, "4 connections")
        before = _proc(s.proc.pid)
        m = s.metrics("s3cret-token")
        after = _proc(s.proc.pid)
        for c in idle:
            c.close()
        rss = m["process_resident_memory_bytes"]
        assert abs(rss - after[0]) <= 0.10 * after[0], (rss, after[0])
        assert before[1] - 0.02 <= m["process_cpu_seconds_total"] <= after[1] + 0.02
        assert abs(m["process_start_time_seconds"] - after[2]) < 0.02
        assert abs(m["process_start_time_seconds"] - time.time()) < 300
        assert abs(m["process_open_fds"] - after[3]) <= 2, (m["process_open_fds"], after[3])
        assert m["process_max_fds"] >= m["process_open_fds"]
        assert m['tern_http_requests_total{route="/metrics",code="401"}'] == 6
        assert m["tern_http_slow_clients_closed_total"] == 0
    finally:
        assert s.stop() == 0
    # open without a token; the token by its own option
    s = Prod(tmp_path, "--metrics-token", "abc")
    try:
        assert s.request("GET", "/metrics")[0] == 401
        assert s.metrics("abc")["tern_http_requests_total{route=\"/metrics\",code=\"401\"}"] == 1
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------------------------------ keys


def test_sighup_reloads_api_keys(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    s = Prod(tmp_path, "--api-keys", str(keys), "--require-api-key")
    body = {"q": "A dog.", "source": "en", "target": "de"}
    try:
        assert s.request("POST", "/translate", {**body, "api_key": "old-key"})[0] == 200
        assert s.request("POST", "/translate", {**body, "api_key": "new-key"})[0] == 403
        keys.write_text("# rotated\nnew-key 100\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "API keys reloaded" in s.stderr(), 30, "keys reloaded")
        assert s.request("POST", "/translate", {**body, "api_key": "old-key"})[0] == 403
        assert s.request("POST", "/translate", {**body, "api_key": "new-key"})[0] == 200
        keys.write_text("new-key 100\nbroken-key -5\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "the old keys stay" in s.stderr(), 30, "reload refused")
        assert f"{keys}:2: expected" in s.stderr()
        assert s.request("POST", "/translate", {**body, "api_key": "new-key"})[0] == 200
        assert s.request("POST", "/translate", {**body, "api_key": "broken-key"})[0] == 403
        keys.unlink()
        s.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: s.stderr().count("the old keys stay") == 2, 30, "reload refused")
        assert s.request("POST", "/translate", {**body, "api_key": "new-key"})[0] == 200
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------------------------------ environment


def _long_options():
    out = subprocess.run([TERN, "serve", "--help"], capture_output=True, text=True).stdout
    return sorted(set(re.findall(r"^\s+(?:-\w, )?--([a-z][a-z-]+)", out, re.M)) - {"help"})


def test_every_option_from_the_environment(tmp_path, cert):
    """Each option of --help has its TERN_SERVE_ variable: a bad value there is refused naming it
    (so the variable is read and parsed as the option); the command line wins over it."""
    bad = {  # variable value -> what the refusal says
        "model": ("nomodel", "--model expects SRC-TGT=DIR"), "compute-type": ("int3", "--compute-type is"),
        "workers": ("0", "--workers"), "threads": ("x", "--threads"), "beam-size": ("0", "--beam-size"),
        "length-penalty": ("-1", "--length-penalty"), "max-decoding-length": ("0", "--max-decoding-length"),
        "max-batch-tokens": ("0", "--max-batch-tokens"), "max-batch-size": ("-1", "--max-batch-size"),
        "no-cross-batching": ("maybe", "TERN_SERVE_NO_CROSS_BATCHING=maybe: a flag is"),
        "max-queue": ("0", "--max-queue"), "max-body": ("0", "--max-body"), "char-limit": ("-2", "--char-limit"),
        "max-file-size": ("0", "--max-file-size"), "max-unzipped": ("0", "--max-unzipped"),
        "max-zip-entries": ("0", "--max-zip-entries"), "max-files": ("0", "--max-files"),
        "file-lifetime": ("0", "--file-lifetime"),
        "batch-limit": ("-2", "--batch-limit"), "max-segments": ("0", "--max-segments"),
        "no-split-sentences": ("2", "TERN_SERVE_NO_SPLIT_SENTENCES=2: a flag is"), "max-beam": ("0", "--max-beam"),
        "host": ("localhost", "--host localhost: not an IPv4 or IPv6 address"), "port": ("70000", "--port"),
        "ssl-cert": (str(tmp_path / "no.pem"), "HTTPS needs both"), "ssl-key": (str(tmp_path / "no.pem"), "HTTPS needs both"),
        "max-connections": ("0", "--max-connections"), "max-connections-per-ip": ("-1", "--max-connections-per-ip"),
        "connection-timeout": ("0", "--connection-timeout"), "timeout": ("0", "--timeout"),
        "drain-timeout": ("-1", "--drain-timeout"), "api-keys": (str(tmp_path / "no-keys"), "cannot open the API keys"),
        "require-api-key": ("1", "--require-api-key needs --api-keys"), "req-limit": ("-1", "--req-limit"),
        "trusted-proxies": ("1.2.3.4/40", "is not an address or CIDR range"),
        "access-log": (str(tmp_path / "no" / "dir.log"), "cannot open for writing"),
        "access-log-format": ("xml", "--access-log-format is combined or json"),
        "metrics-token": ("", None), "metrics-token-file": (str(tmp_path / "no-token"), "--metrics-token-file"),
        "quiet": ("perhaps", "TERN_SERVE_QUIET=perhaps: a flag is"),
    }
    opts = _long_options()
    assert set(opts) == set(bad), set(opts) ^ set(bad)

    def one(opt):
        var = "TERN_SERVE_" + opt.upper().replace("-", "_")
        value, msg = bad[opt]
        if msg is None:  # an empty token: refused as the option's own empty value
            value, msg = "", "--metrics-token: empty"
        args = [] if opt == "model" else ["-m", f"en-de={MODEL}"]
        base = [a for o, a in (("port", ("-p", "0")), ("threads", ("-t", "1")), ("workers", ("-w", "1")))
                if o != opt for a in a]  # the option under test not on the command line (it would win)
        rc, err = run_fail(*args, env={var: value}, base=base, timeout=60)
        return opt, var, rc, err, msg

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for opt, var, rc, err, msg in ex.map(one, opts):
            assert rc in (1, 2) and msg in err, (opt, rc, err)
            if rc == 2 and "a flag is" not in msg and opt not in ("require-api-key",):
                assert f"the value came from the environment: {var}" in err, (opt, err)
    # and good values work; the command line wins
    log = tmp_path / "env.log"
    keys = tmp_path / "keys"
    keys.write_text("k1\n")
    s = Prod(tmp_path, "-p", "0", model=False, env={
        "TERN_SERVE_MODEL": f"en-de={MODEL}", "TERN_SERVE_PORT": "1", "TERN_SERVE_MAX_BODY": "100",
        "TERN_SERVE_ACCESS_LOG": str(log), "TERN_SERVE_ACCESS_LOG_FORMAT": "json", "TERN_SERVE_API_KEYS": str(keys),
        "TERN_SERVE_METRICS_TOKEN": "tok", "TERN_SERVE_QUIET": "true", "TERN_SERVE_CHAR_LIMIT": "5"})
    try:
        assert s.port != 1  # -p 0 on the command line won over TERN_SERVE_PORT=1
        assert s.request("POST", "/translate", {"q": "A" * 200, "source": "en", "target": "de"})[0] == 413
        assert s.request("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de", "api_key": "k2"})[0] == 403
        st, _, data = s.request("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de", "api_key": "k1"})
        assert st == 400 and b"exceeds text limit (5)" in data
        assert s.request("GET", "/metrics")[0] == 401 and s.metrics("tok")
        assert "model en-de" not in s.stderr()  # quiet
    finally:
        assert s.stop() == 0
    assert sorted(json.loads(x)["status"] for x in log.read_text().splitlines()) == [200, 400, 401, 403, 413]
    s = Prod(tmp_path, "--char-limit", "20000", "--metrics-token", "cli", env={"TERN_SERVE_CHAR_LIMIT": "5",
                                                                              "TERN_SERVE_METRICS_TOKEN": "env"})
    try:
        assert s.request("POST", "/translate", {"q": "A dog runs.", "source": "en", "target": "de"})[0] == 200
        assert s.metrics("cli") and s.request("GET", "/metrics", headers={"Authorization": "Bearer env"})[0] == 401
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------------------------------ slow clients


def test_slowloris_cut_off_while_others_served(tmp_path):
    """A client sending its headers a byte every 0.3 s (never idle long enough for an idle
    timeout) is cut off --connection-timeout seconds after it connected; meanwhile another client
    is answered at once."""
    s = Prod(tmp_path, "--connection-timeout", "2")
    try:
        slow = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        t0 = time.monotonic()
        closed = {}

        def trickle():
            req = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n\r\n"
            for i in range(len(req)):
                try:
                    slow.sendall(req[i:i + 1])
                except OSError:
                    break
                time.sleep(0.3)
            closed["t"] = time.monotonic() - t0

        th = threading.Thread(target=trickle)
        th.start()
        time.sleep(0.5)
        t1 = time.monotonic()
        assert s.request("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de"})[0] == 200
        assert time.monotonic() - t1 < 2  # served while the slow client is connected
        data = slow.recv(4096)  # the server shuts the connection: b"" (never an answer)
        while data:
            data = slow.recv(4096)
        cut = time.monotonic() - t0
        assert 2.0 <= cut <= 3.5, cut
        th.join(60)
        slow.close()
        assert closed["t"] < 6  # the sender hit the closed socket soon after
        assert s.metrics()["tern_http_slow_clients_closed_total"] == 1
        # a kept-alive connection idle between requests gets the same deadline
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        c.request("GET", "/health")
        assert c.getresponse().read()
        time.sleep(3.0)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            c.request("GET", "/health")
            c.getresponse()
        c.close()
    finally:
        assert s.stop() == 0


def _held(port, n):
    """n connections, each with half a request sent (accepted and waiting)."""
    out = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        out.append(c)
    return out


def _refused(port):
    """1 when a connection beyond the limit is closed without an answer."""
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = c.recv(4096)
        c.close()
        return data == b""
    except (ConnectionResetError, BrokenPipeError):
        return 1


def _health_ok(s):
    """/health answered 200 on a new connection (False where the connection was refused)."""
    try:
        return s.request("GET", "/health")[0] == 200
    except (ConnectionResetError, BrokenPipeError, ConnectionRefusedError):
        return False


@pytest.mark.parametrize("opt", ["--max-connections", "--max-connections-per-ip"])
def test_connection_limits(tmp_path, opt):
    s = Prod(tmp_path, opt, "3", "--connection-timeout", "20")
    try:
        held = _held(s.port, 3)
        time.sleep(0.5)
        assert _refused(s.port) and _refused(s.port)
        for c in held:  # the held ones complete and are answered
            c.sendall(b"\r\n")
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            c.close()
        # served again once the server has counted the closed connections (each close is seen
        # asynchronously: a probe can get a slot just before the next connection is refused)
        wait_until(lambda: _health_ok(s), 10, "a request answered after the held ones closed")
    finally:
        assert s.stop() == 0


# ------------------------------------------------------------------------------------ description


def test_openapi_states_this_servers_limits(tmp_path):
    """/openapi.json states the limits of the server's options where a schema can (schemathesis,
    tests/test_serve_schema.py, then sends requests beyond them): each maximum is where the
    handler starts refusing (400), checked on both sides."""
    s = Prod(tmp_path, "--max-beam", "5", "--max-decoding-length", "40", "--batch-limit", "7")
    try:
        st, _, data = s.request("GET", "/openapi.json")
        spec = json.loads(data)
        v1 = spec["components"]["schemas"]["V1TranslateRequest"]["properties"]
        lt = spec["components"]["schemas"]["TranslateRequest"]["properties"]
        assert [v1[k]["maximum"] for k in ("beam_size", "num_hypotheses", "num_samples")] == [5, 5, 5]
        # the cap of a call's decoding length: the larger of 512 and --max-decoding-length (the default)
        assert [v1[k]["maximum"] for k in ("max_decoding_length", "max_length_b", "min_length",
                                           "no_repeat_ngram_size")] == [512] * 4
        assert v1["q"]["oneOf"][1]["maxItems"] == 7 and lt["q"]["oneOf"][1]["maxItems"] == 7
        assert [a for a in lt["alternatives"]["oneOf"] if a["type"] == "integer"][0]["maximum"] == 4
        assert "401" in spec["paths"]["/metrics"]["get"]["responses"]
        assert spec["components"]["securitySchemes"]["metricsToken"]["scheme"] == "bearer"
        for field, hi in [("beam_size", 5), ("num_hypotheses", 5), ("max_decoding_length", 512), ("max_length_b", 512)]:
            body = {"q": "A dog.", field: hi, **({"beam_size": 5} if field == "num_hypotheses" else {})}
            assert s.request("POST", "/v1/translate", body)[0] == 200, field
            assert s.request("POST", "/v1/translate", {**body, field: hi + 1})[0] == 400, field
        assert s.request("POST", "/v1/translate", {"q": "A dog.", "min_length": 513})[0] == 400
        assert s.request("POST", "/v1/translate", {"q": ["A."] * 7})[0] == 200
        assert s.request("POST", "/v1/translate", {"q": ["A."] * 8})[0] == 400
        lt_body = {"q": ["A."] * 7, "source": "en", "target": "de"}
        assert s.request("POST", "/translate", lt_body)[0] == 200
        assert s.request("POST", "/translate", {**lt_body, "q": ["A."] * 8})[0] == 400
        assert s.request("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de", "alternatives": 4})[0] == 200
        assert s.request("POST", "/translate", {"q": "A dog.", "source": "en", "target": "de", "alternatives": 5})[0] == 400
        # a search option the model cannot take is the request's fault: 400, not 500
        st, _, data = s.request("POST", "/v1/translate", {"q": "A dog.", "sampling_topk": 26674})
        assert st == 400 and b"larger than the target vocabulary" in data
    finally:
        assert s.stop() == 0
