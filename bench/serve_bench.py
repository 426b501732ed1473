#!/usr/bin/env python3
"""Load benchmark of `shadowrt serve`: replay a Mooncake-format trace against the server.

Each trace line {timestamp (ms), input_length, output_length, hash_ids (one id per 512-token
block)} becomes one streamed /v1/completions request with a token-id prompt. Scaling, so a trace
built for a GPU cluster fits a small machine (say which you used when you quote figures):
  --block-tokens B   every hash block becomes B tokens instead of 512 (equal ids -> equal
                     tokens, so the prefix structure, hence the ceiling hit rate, is kept);
                     prompt length = ceil(input_length * B / 512), at least 1
  --max-output N     output_length capped at N tokens (ignore_eos, so exactly that many)
  --time-scale F     arrival times multiplied by F (as SGLang's bench_serving scales a trace's
                     timestamps: < 1 = faster arrivals)
  --requests N       the first N requests of the trace
  --duration S       stop sending after S seconds of wall time; requests still running at
                     2 x S are cancelled (their connections closed): the run is bounded
Loopback only: the server is started here (--shadowrt, --model, a temporary L3 directory), or
--url names one on 127.0.0.1 / localhost.

Prints request throughput, output tokens/s, TTFT and inter-token latency p50/p90/p99, and the
prefix-hit rate per tier (from the server's /metrics, before and after).
"""
import argparse
import http.client
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request


def block_tokens(h, n, vocab):
    rng = random.Random(h * 0x9E3779B97F4A7C15 & (2**64 - 1))
    return [rng.randrange(2, vocab) for _ in range(n)]


def load_trace(path, limit, B, vocab, max_out):
    """(requests, ceiling): the ceiling is the share of prompt tokens in hash blocks seen
    before (what an unbounded cache could serve at block granularity)."""
    reqs, cache, seen_tok = [], {}, 0
    with open(path) as f:
        for line in f:
            if limit and len(reqs) >= limit:
                break
            r = json.loads(line)
            n = max(1, math.ceil(r["input_length"] * B / 512))
            toks = []
            for k, h in enumerate(r["hash_ids"]):
                if h in cache:
                    seen_tok += max(0, min(B, n - k * B))
                else:
                    cache[h] = block_tokens(h, B, vocab)
                toks += cache[h]
            toks = toks[:n]
            out = max(1, min(max_out, r["output_length"]))
            reqs.append((r["timestamp"] / 1000.0, toks, out))
    total = sum(len(t) for _, t, _ in reqs)
    return reqs, (seen_tok / total if total else 0.0)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def metrics(host, port):
    with urllib.request.urlopen(f"http://{host}:{port}/metrics") as r:
        txt = r.read().decode()
    out = {}
    for line in txt.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, val = line.rpartition(" ")
        out[name] = float(val)
    return out


class Result:
    def __init__(self):
        self.ttft = None
        self.itl = []
        self.tokens = 0
        self.cached = 0
        self.ok = False
        self.err = None


def one_request(host, port, model, toks, out, res, conns, lock):
    body = json.dumps({"model": model, "prompt": toks, "max_tokens": out, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, port, timeout=3600)
    with lock:
        conns.add(c)
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            res.err = f"HTTP {r.status}: {r.read()[:200]!r}"
            return
        last = None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                res.ok = True
                break
            j = json.loads(data)
            if "error" in j:
                res.err = j["error"]["message"]
                break
            if j.get("usage"):
                res.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"]
            for ch in j.get("choices", []):
                n = len(ch.get("token_ids", []))
                if not n:
                    continue
                now = time.monotonic()
                if res.ttft is None:
                    res.ttft = now - t0
                else:
                    # tokens of one chunk arrived together: spread the gap over them
                    res.itl += [(now - last) / n] * n
                last = now
                res.tokens += n
    except (OSError, http.client.HTTPException, ValueError) as e:
        res.err = repr(e)
    finally:
        with lock:
            conns.discard(c)
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "traces",
                                                    "mooncake-synthetic.jsonl"))
    ap.add_argument("--url", help="a running server (loopback only); else one is started")
    ap.add_argument("--shadowrt", default="build/bin/shadowrt")
    ap.add_argument("--model", default="small")
    ap.add_argument("--threads", type=int, default=0, help="engine threads (0 = all cores)")
    ap.add_argument("--l1-budget", default="", help="[tier.l1] budget, e.g. 64MiB")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--block-tokens", type=int, default=32)
    ap.add_argument("--max-output", type=int, default=16)
    ap.add_argument("--time-scale", type=float, default=0.05)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--vocab", type=int, default=0, help="default: the served model's")
    a = ap.parse_args()

    srv = tmp = None
    if a.url:
        u = urllib.parse.urlparse(a.url)
        host, port = u.hostname, u.port or 80
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("serve_bench: loopback only (--url must be 127.0.0.1 or localhost)")
    else:
        tmp = tempfile.mkdtemp(prefix="serve_bench.")
        ini = os.path.join(tmp, "bench.ini")
        with open(ini, "w") as f:
            f.write(f"[tier.l3]\nplugin = file\npath = {tmp}/l3\nbudget = 64GiB\n")
            if a.l1_budget:
                f.write(f"[tier.l1]\nplugin = host\nbudget = {a.l1_budget}\n")
        pf = os.path.join(tmp, "port")
        log = open(os.path.join(tmp, "serve.log"), "w")
        srv = subprocess.Popen([a.shadowrt, "serve", "--model", a.model, "--config", ini,
                                "--port", "0", "--port-file", pf, "--threads", str(a.threads),
                                "--max-running", "64"], stdout=log, stderr=subprocess.STDOUT)
        host = "127.0.0.1"
        t0 = time.monotonic()
        while not os.path.exists(pf):
            if srv.poll() is not None:
                sys.exit(f"serve_bench: server exited: {open(log.name).read()[-2000:]}")
            if time.monotonic() - t0 > 1800:
                sys.exit("serve_bench: server not ready after 30 min")
            time.sleep(0.1)
        port = int(open(pf).read())
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v1/models") as r:
            model = json.loads(r.read())["data"][0]["id"]
        vocab = a.vocab
        if not vocab:
            # ask the server: an id far out of range is refused with the vocabulary size
            req = urllib.request.Request(f"http://{host}:{port}/v1/completions",
                                         json.dumps({"prompt": [2**30]}).encode())
            try:
                urllib.request.urlopen(req)
            except urllib.error.HTTPError as e:
                msg = json.loads(e.read())["error"]["message"]
                vocab = int(msg.rsplit(", ", 1)[1].rstrip(")"))
        reqs, ceiling = load_trace(a.trace, a.requests, a.block_tokens, vocab, a.max_output)
        m0 = metrics(host, port)
        print(f"serve_bench: {len(reqs)} requests of {os.path.basename(a.trace)}, blocks of "
              f"{a.block_tokens} tokens (x{a.block_tokens / 512:g} of the trace's 512), output "
              f"<= {a.max_output}, arrivals x{a.time_scale:g}, model {model} (vocab {vocab})",
              flush=True)
        results = [Result() for _ in reqs]
        conns, lock, threads = set(), threading.Lock(), []
        start = time.monotonic()
        for i, (ts, toks, out) in enumerate(reqs):
            due = start + ts * a.time_scale
            now = time.monotonic()
            if now - start > a.duration:
                print(f"serve_bench: --duration reached: {len(reqs) - i} requests not sent")
                results = results[:i]
                break
            if due > now:
                time.sleep(due - now)
            t = threading.Thread(target=one_request,
                                 args=(host, port, model, toks, out, results[i], conns, lock))
            t.start()
            threads.append(t)
        deadline = start + 2 * a.duration
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with lock:
            for c in list(conns):  # over time: close, the server cancels them
                try:
                    c.sock and c.sock.shutdown(2)
                except OSError:
                    pass
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        m1 = metrics(host, port)
    finally:
        if srv:
            srv.send_signal(signal.SIGTERM)
            srv.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    ok = [r for r in results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [x for r in ok for x in r.itl]
    out_toks = sum(r.tokens for r in ok)
    print(f"completed {len(ok)} of {len(results)} requests in {wall:.1f} s "
          f"({len(results) - len(ok)} failed or cut)")
    for r in results:
        if r.err:
            print(f"  first error: {r.err}")
            break
    print(f"request throughput {len(ok) / wall:.3f} req/s, output {out_toks / wall:.1f} tokens/s, "
          f"prompt tokens {sum(len(t) for _, t, _ in reqs[:len(results)])}")
    print("TTFT  ms: p50 %.1f  p90 %.1f  p99 %.1f" % tuple(pct(ttft, p) * 1e3
                                                         for p in (50, 90, 99)))
    print("ITL   ms: p50 %.1f  p90 %.1f  p99 %.1f" % tuple(pct(itl, p) * 1e3
                                                         for p in (50, 90, 99)))

    def d(k):
        return m1.get(k, 0) - m0.get(k, 0)
    prompt = d("shadowrt_prompt_tokens_total")
    hits = [d(f'shadowrt_prefix_hit_tokens_total{{tier="{t}"}}') for t in ("L1", "L2", "L3")]
    if prompt:
        print("prefix hits: L1 %.1f%%  L2 %.1f%%  L3 %.1f%%  (total %.1f%% of %d prompt tokens)"
              % (*(100 * h / prompt for h in hits), 100 * sum(hits) / prompt, prompt))
    print(f"  ceiling (prompt tokens in hash blocks seen before): {100 * ceiling:.1f}%; a hit "
          f"counts whole pages only")
    print(f"preemptions {d('shadowrt_preemptions_total'):.0f}, scheduler steps "
          f"{d('shadowrt_scheduler_steps_total'):.0f}, computed tokens "
          f"{d('shadowrt_computed_tokens_total'):.0f}")


if __name__ == "__main__":
    main()
