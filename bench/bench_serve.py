#!/usr/bin/env python3
"""Load test of `tern serve` on loopback: N concurrent clients (asyncio, one keep-alive HTTP/1.1
connection each, standard library only) send LibreTranslate /translate requests of 1 to 10
sentences drawn from a text file for a fixed time; prints throughput (requests/s, sentences/s),
latency p50/p99, failures by status, the server's CPU time (user + system, all its threads: sentences
per server CPU second, comparable with bench/bench_batching.c's figure outside the server) and
its resident memory over the run.

Runs one server per mode given: `cross` (batching across requests, the default) and `alone`
(--no-cross-batching: each request's sentences batched alone), same model, options and threads.
Both servers are up for the whole run and the clients turn to one then the other in --rounds
alternating rounds (each --seconds / --rounds long, after a --warmup of its own), so that the
load of a shared machine falls on both modes alike; the ratio is of the summed rounds.

  nice python3 bench/bench_serve.py --seconds 60 --rounds 4 --clients 64 \\
      --data ../shared/data/multi30k/test_2016_flickr.en --modes cross alone

A soak (issue 31: 10 minutes at 64 clients with flat resident memory): --mix sends every kind of
request the server takes (text, HTML with inline tags, source "auto", quality, /v1 n-best with scores,
/detect), checks each answer's shape, and reports the server's resident memory per tenth of the run:

  nice python3 bench/bench_serve.py --mix --seconds 600 --clients 64 --modes cross --warmup 10

A 503 (queue full) is counted apart: it is the server refusing on purpose, not a failure.
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(args, mode):
    err = tempfile.NamedTemporaryFile(prefix="bench-serve-", suffix=".err", delete=False)
    cmd = [args.tern, "serve", "-m", f"en-de={args.model}", "-p", "0", "-q", "--max-queue", str(args.max_queue),
           "--compute-type", args.compute_type]
    if args.workers:
        cmd += ["-w", str(args.workers)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    if mode == "alone":
        cmd.append("--no-cross-batching")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", open(err.name, "rb").read())
        if m:
            return proc, int(m.group(1)), err.name, cmd
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not start:\n" + open(err.name).read())


def cpu_s(pid):
    """User + system CPU seconds of the process so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def http_post(reader, writer, path, body):
    writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed")
    status = int(status_line.split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.decode().partition(":")
        if k.lower() == "content-length":
            length = int(v)
    data = await reader.readexactly(length)
    return status, data


MIX_KINDS = ("text", "html", "auto", "quality", "v1", "detect")


def mixed_request(kind, q, rng):
    """--mix: one request of the given kind for the lines q; returns (path, body, check), check(answer)
    True when the answer has the request's shape (one item per line)."""
    n = len(q)
    if kind == "html":
        def tag(line):  # a word of the sentence in an inline tag, the whole in a block
            w = line.split(" ")
            k = rng.randrange(len(w))
            w[k] = f"<b>{w[k]}</b>"
            return "<p>" + " ".join(w) + "</p>"
        return "/translate", {"q": [tag(x) for x in q], "source": "en", "target": "de", "format": "html"}, \
            lambda j: len(j["translatedText"]) == n and all(t.startswith("<p>") for t in j["translatedText"])
    if kind == "auto":
        return "/translate", {"q": q, "source": "auto", "target": "de"}, \
            lambda j: len(j["translatedText"]) == n and len(j["detectedLanguage"]) == n
    if kind == "quality":
        return "/translate", {"q": q, "source": "en", "target": "de", "quality": True}, \
            lambda j: len(j["translatedText"]) == n and len(j["quality"]) == n
    if kind == "v1":
        return "/v1/translate", {"q": q, "source": "en", "target": "de", "beam_size": 2, "num_hypotheses": 2,
                                 "return_scores": True, "quality": True}, \
            lambda j: len(j["translations"]) == n and all(len(t["hypotheses"]) == 2 for t in j["translations"])
    if kind == "detect":
        return "/detect", {"q": " ".join(q)}, lambda j: isinstance(j, list) and j and j[0]["language"] == "en"
    return "/translate", {"q": q, "source": "en", "target": "de"}, lambda j: len(j["translatedText"]) == n


async def client(port, lines, stop_at, stats, rng, mix=False):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            n = rng.randint(1, 10)
            i = rng.randrange(0, len(lines) - n)
            q = lines[i:i + n]
            kind = rng.choice(MIX_KINDS) if mix else "text"
            path, req, check = mixed_request(kind, q, rng)
            body = json.dumps(req).encode()
            t0 = time.monotonic()
            try:
                status, data = await http_post(reader, writer, path, body)
            except (ConnectionError, asyncio.IncompleteReadError):
                stats["errors"] += 1
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            dt = time.monotonic() - t0
            if status == 200:
                try:
                    good = check(json.loads(data))
                except (ValueError, KeyError, TypeError):
                    good = False
                if not good:
                    stats["errors"] += 1
                    stats["bad_answers"][kind] = stats["bad_answers"].get(kind, 0) + 1
                    continue
                stats["lat"].append(dt)
                stats["ok"] += 1
                stats["sentences"] += n
                stats["kinds"][kind] = stats["kinds"].get(kind, 0) + 1
            elif status == 503:
                stats["refused"] += 1
                await asyncio.sleep(0.05)
            else:
                stats["status"][status] = stats["status"].get(status, 0) + 1
    finally:
        writer.close()


async def sample_rss(pid, stop_at, samples):
    t0 = time.monotonic()
    while time.monotonic() < stop_at:
        samples.append((time.monotonic() - t0, rss_kib(pid)))
        await asyncio.sleep(1.0)


def new_stats():
    return {"ok": 0, "sentences": 0, "errors": 0, "refused": 0, "status": {}, "lat": [], "wall": 0.0, "cpu": 0.0,
            "rss": [], "kinds": {}, "bad_answers": {}}


async def run_round(port, pid, lines, args, seconds, stats, round_no, t_origin):
    """One round against one server: a warm-up of the same load (not counted), then `seconds` of
    load; adds to stats (wall time from the start of the counted load until its last answer)."""
    warm = new_stats()
    stop_warm = time.monotonic() + args.warmup
    await asyncio.gather(*[client(port, lines, stop_warm, warm, random.Random(100000 * round_no + 1000 + k), args.mix)
                           for k in range(args.clients)])
    samples = []
    t0, c0 = time.monotonic(), cpu_s(pid)
    stop_at = t0 + seconds
    await asyncio.gather(sample_rss(pid, stop_at, samples),
                         *[client(port, lines, stop_at, stats, random.Random(100000 * round_no + k), args.mix)
                           for k in range(args.clients)])
    stats["wall"] += time.monotonic() - t0
    stats["cpu"] += cpu_s(pid) - c0
    stats["rss"] += [(t0 - t_origin + t, r) for t, r in samples]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def metric(metrics, name):
    return float(re.search(r'^' + name + r'\{model="en-de"\} (\S+)', metrics, re.M).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default=os.path.join(ROOT, "build", "tern"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "en-de"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "multi30k", "test_2016_flickr.en"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=60, help="counted load per mode (all rounds)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per mode (default 1)")
    ap.add_argument("--warmup", type=float, default=5, help="uncounted load before each round")
    ap.add_argument("--workers", type=int, default=0, help="tern serve -w (default: the server's)")
    ap.add_argument("--threads", type=int, default=0, help="tern serve -t (default: the server's)")
    ap.add_argument("--compute-type", default="auto")
    ap.add_argument("--max-queue", type=int, default=4096)
    ap.add_argument("--modes", nargs="+", default=["cross", "alone"], choices=["cross", "alone"])
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--mix", action="store_true",
                    help="a soak: each request one of " + ", ".join(MIX_KINDS) + " at random (answers checked "
                    "for their shape), resident memory reported per tenth of the run")
    args = ap.parse_args()
    with open(args.data, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    servers, stats, results = {}, {}, {}
    try:
        for mode in args.modes:
            servers[mode] = start_server(args, mode)
            stats[mode] = new_stats()
        t_origin = time.monotonic()
        for k in range(args.rounds):
            for mode in (args.modes if k % 2 == 0 else args.modes[::-1]):
                proc, port = servers[mode][0], servers[mode][1]
                asyncio.run(run_round(port, proc.pid, lines, args, args.seconds / args.rounds, stats[mode], k,
                                      t_origin))
        for mode in args.modes:
            proc, port, err, cmd = servers[mode]
            st = stats[mode]
            peak = 0
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = int(line.split()[1])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as resp:
                metrics = resp.read().decode()
            bsum, bcnt = metric(metrics, "tern_batch_size_sum"), metric(metrics, "tern_batch_size_count")
            rss = [r for _, r in sorted(st["rss"])]  # this server's samples, in time order
            first, half = rss[:len(rss) // 2], rss[len(rss) // 2:]
            results[mode] = {
                "mode": mode, "command": " ".join(cmd), "clients": args.clients, "rounds": args.rounds,
                "seconds": round(st["wall"], 2), "requests_ok": st["ok"], "sentences": st["sentences"],
                "requests_per_s": round(st["ok"] / st["wall"], 2),
                "sentences_per_s": round(st["sentences"] / st["wall"], 2),
                "server_cpu_s": round(st["cpu"], 2), "sentences_per_server_cpu_s": round(st["sentences"] / st["cpu"], 1),
                "p50_ms": round(1000 * pct(st["lat"], 50), 1), "p99_ms": round(1000 * pct(st["lat"], 99), 1),
                "failed": st["errors"] + sum(st["status"].values()), "failed_by_status": st["status"],
                "refused_503": st["refused"], "peak_rss_mib": round(peak / 1024, 1),
                "rss_mib_first_half_max": round(max(first) / 1024, 1) if first else None,
                "rss_mib_second_half_max": round(max(half) / 1024, 1) if half else None,
                "mean_batch": round(bsum / max(bcnt, 1), 1),
                "requests_by_kind": st["kinds"], "bad_answers_by_kind": st["bad_answers"],
                # the largest resident memory of each tenth of the run, MiB: flat when nothing leaks
                "rss_mib_by_tenth": [round(max(rss[k * len(rss) // 10:(k + 1) * len(rss) // 10] or [0]) / 1024, 1)
                                     for k in range(10)],
            }
    finally:
        for mode, (proc, *_rest) in servers.items():
            proc.send_signal(signal.SIGTERM)
        for mode, (proc, *_rest) in servers.items():
            rc = proc.wait(120)
            if mode in results:
                results[mode]["server_exit"] = rc
    for mode in args.modes:
        print(json.dumps(results[mode]), flush=True)
    if "cross" in results and "alone" in results:
        ratio = results["cross"]["sentences_per_s"] / max(results["alone"]["sentences_per_s"], 1e-9)
        print(f"throughput ratio cross/alone: {ratio:.2f}x", flush=True)
        results["ratio"] = round(ratio, 2)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
