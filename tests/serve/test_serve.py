#!/usr/bin/env python3
"""shadowrt serve with real clients: the official `openai` package and curl.

usage: test_serve.py SHADOWRT WORKDIR

Generates the tiny model (`shadowrt gen-model tiny`), starts `shadowrt serve` on a free loopback
port (--port 0, --port-file), and checks, each check able to fail:
  - completions (token-id prompts) through openai: token counts, finish reasons, usage;
  - streaming through openai: the chunks' ids equal the non-streamed answer; a final usage chunk;
  - seeds: the same seed gives the same tokens, another seed other tokens;
  - 32 concurrent streams (shared prefixes, mixed sampling) equal the same requests run alone;
  - curl: a completion, and every kind of bad input gets its HTTP status and an OpenAI-style
    error body (bad JSON, wrong type, unknown field, ids out of range, prompt over the context,
    max_tokens 0 and absurd, oversized body, unknown route, wrong method, missing API key),
    while the server keeps serving;
  - a client vanishing mid-stream: its sequence is freed (running drops to 0, the request is
    counted cancelled and the disconnect counted);
  - many connections at once (more than the server's limit, some sending half a request):
    a normal request still gets served;
  - /metrics parsed by prometheus_client's text parser, its counters equal what the clients saw;
  - without a tokenizer: text prompts, chat and stop strings get the 400 that says so;
  - SIGTERM while a stream runs: the stream completes, the server exits 0;
  - with the tiny-chat preset (DeepSeek-V4's tokenizer): text completions, chat (the DeepSeek-V4
    chat encoding), streamed text = non-streamed text, stop strings (the text ends right before
    the first occurrence, streamed too), seeds, 8 concurrent chat streams = the same alone.
No fixed time limits: readiness and metrics are polled with generous bounds.
"""
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

try:
    import openai
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:  # deps.sh installs them into .venv
    print(f"skipped: {e}")
    sys.exit(77)

SHADOWRT, WORK = sys.argv[1], sys.argv[2]
KEY = "test-key-123"
VOCAB = 512
MAX_CONTEXT = 4096
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    return cond


def wait_for(pred, what, bound=600.0):
    """Poll pred() until true; the bound is only a guard against a hung server."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise SystemExit(f"gave up waiting for {what}")


def start_server(model_dir, extra=()):
    port_file = os.path.join(WORK, "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    log = open(os.path.join(WORK, "serve.log"), "a")
    p = subprocess.Popen([SHADOWRT, "serve", "--model", model_dir, "--no-tiers", "--port", "0",
                          "--port-file", port_file, "--threads", "2", "--api-key", KEY,
                          "--max-context", str(MAX_CONTEXT), "--max-body", "65536",
                          "--max-connections", "300", "--max-running", "16", *extra],
                         stdout=log, stderr=subprocess.STDOUT)

    def ready():
        if p.poll() is not None:
            raise SystemExit(f"server exited with {p.returncode}; see {WORK}/serve.log")
        try:
            return int(open(port_file).read())
        except (OSError, ValueError):
            return None

    port = wait_for(ready, "the port file")
    return p, port


def http(port, method, path, body=None, key=KEY, raw=None):
    """(status, parsed JSON or text) with urllib."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req) as r:
            status, txt = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, txt = e.code, e.read().decode()
    try:
        return status, json.loads(txt)
    except ValueError:
        return status, txt


def curl(port, *args):
    r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", *args,
                        f"http://127.0.0.1:{port}/v1/completions"], capture_output=True, text=True)
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


def is_error_body(j, status):
    return (isinstance(j, dict) and isinstance(j.get("error"), dict)
            and set(j["error"]) == {"message", "type", "param", "code"}
            and isinstance(j["error"]["message"], str) and j["error"]["message"])


def metrics(port):
    _, txt = http(port, "GET", "/metrics", key=None)
    fams = {f.name: f for f in text_string_to_metric_families(txt)}
    return fams


def sample_value(fams, family, sample, labels=None):
    f = fams.get(family)
    if not f:
        return None
    for s in f.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
            return s.value
    return None


def prompts(n):
    """n token-id prompts: 4 families sharing a prefix, tails of various lengths."""
    out = []
    for i in range(n):
        fam, x = i % 4, 0
        shared = [2 + (fam * 131 + k * 17) % (VOCAB - 2) for k in range(60 + fam * 70)]
        tail = [2 + (i * 37 + k * 11) % (VOCAB - 2) for k in range(3 + i * 5 % 40)]
        out.append(shared + tail)
    return out


def spec(i, p):
    s = {"prompt": p, "max_tokens": 4 + i % 7, "seed": 100 + i}
    if i % 2:
        s.update(temperature=0.8, top_p=0.9)
        if i % 4 == 1:
            s["extra_body"] = {"top_k": 40}  # not in OpenAI's API; the client passes it on
    else:
        s["temperature"] = 0
    return s


def main():
    os.makedirs(WORK, exist_ok=True)
    model = os.path.join(WORK, "tiny")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([SHADOWRT, "gen-model", "tiny", model], check=True,
                       stdout=subprocess.DEVNULL)
    srv, port = start_server(model)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0,
                           timeout=600)
    try:
        run_checks(srv, port, client)
    finally:
        if srv.poll() is None:
            srv.kill()
    chat_model = os.path.join(WORK, "tiny-chat")
    if not os.path.exists(os.path.join(chat_model, "tokenizer.json")):
        subprocess.run([SHADOWRT, "gen-model", "tiny-chat", chat_model], check=True,
                       stdout=subprocess.DEVNULL)
    srv, port = start_server(chat_model, ("--served-model-name", "tiny-chat"))
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0,
                           timeout=600)
    try:
        text_checks(srv, port, client)
    finally:
        if srv.poll() is None:
            srv.kill()
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all serve checks passed")


def run_checks(srv, port, client):
    st, h = http(port, "GET", "/health", key=None)
    check(st == 200 and h.strip() == "ok", f"/health: {st} {h!r}")
    models = client.models.list()
    check([m.id for m in models.data] == ["tiny"], f"/v1/models: {models}")

    # completions with token ids
    p0 = prompts(1)[0]
    r = client.completions.create(model="tiny", prompt=p0, max_tokens=8, temperature=0)
    ids = r.choices[0].model_extra["token_ids"]
    check(len(ids) == 8 and all(0 <= t < VOCAB for t in ids), f"completion ids {ids}")
    check(r.choices[0].finish_reason == "length", f"finish {r.choices[0].finish_reason}")
    check(r.usage.prompt_tokens == len(p0) and r.usage.completion_tokens == 8
          and r.usage.total_tokens == len(p0) + 8, f"usage {r.usage}")

    # streaming equals non-streaming; final usage chunk
    chunks = list(client.completions.create(model="tiny", prompt=p0, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    sids = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
    check(sids == ids, f"streamed ids {sids} != {ids}")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
          and not chunks[-1].choices, "final usage chunk")
    fins = [c.choices[0].finish_reason for c in chunks if c.choices]
    check(fins[-1] == "length" and all(f is None for f in fins[:-1]), f"finish reasons {fins}")
    # the prompt's pages were cached by the first request
    check(chunks[-1].usage.prompt_tokens_details.cached_tokens == 0 or len(p0) >= 256,
          "cached tokens reported")

    # seeds
    def sampled(seed):
        r = client.completions.create(model="tiny", prompt=p0, max_tokens=12, temperature=1.0,
                                      seed=seed)
        return r.choices[0].model_extra["token_ids"]
    s7, s7b, s8 = sampled(7), sampled(7), sampled(8)
    check(s7 == s7b, f"seed 7 twice: {s7} vs {s7b}")
    check(s7 != s8, f"seeds 7 and 8 gave the same tokens {s7}")

    # 32 concurrent streams == the same requests alone
    ps = prompts(32)
    alone = []
    for i, p in enumerate(ps):
        r = client.completions.create(model="tiny", **spec(i, p))
        alone.append(r.choices[0].model_extra["token_ids"])
    got = [None] * 32
    errs = []

    def stream_one(i):
        try:
            toks = []
            for ch in client.completions.create(model="tiny", stream=True, **spec(i, ps[i])):
                if ch.choices:
                    toks += ch.choices[0].model_extra["token_ids"]
            got[i] = toks
        except Exception as e:  # reported below
            errs.append(f"stream {i}: {e!r}")
    ths = [threading.Thread(target=stream_one, args=(i,)) for i in range(32)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    check(not errs, f"concurrent stream errors: {errs}")
    for i in range(32):
        check(got[i] == alone[i], f"stream {i}: {got[i]} != alone {alone[i]}")
    check(len({tuple(x) for x in alone}) > 16, "the 32 requests are not distinct")

    # curl: a completion, then bad input of every kind
    code, body = curl(port, "-H", f"Authorization: Bearer {KEY}", "-d",
                      json.dumps({"prompt": p0, "max_tokens": 8, "temperature": 0}))
    check(code == 200 and json.loads(body)["choices"][0]["token_ids"] == ids,
          f"curl completion {code} {body[:200]}")
    bad = [
        ("malformed JSON", b'{"prompt": [1, 2', 400, "invalid_json"),
        ("not an object", b'[1, 2, 3]', 400, "invalid_json"),
        ("wrong type", json.dumps({"prompt": p0, "max_tokens": "8"}).encode(), 400,
         "invalid_type"),
        ("wrong type temperature", json.dumps({"prompt": p0, "temperature": "hot"}).encode(),
         400, "invalid_type"),
        ("unknown field", json.dumps({"prompt": p0, "frobnicate": 1}).encode(), 400,
         "unknown_parameter"),
        ("id out of range", json.dumps({"prompt": [1, 2, VOCAB]}).encode(), 400,
         "invalid_value"),
        ("negative id", json.dumps({"prompt": [1, -3]}).encode(), 400, "invalid_value"),
        ("empty prompt", json.dumps({"prompt": []}).encode(), 400, "invalid_value"),
        ("no prompt", json.dumps({"max_tokens": 3}).encode(), 400,
         "missing_required_parameter"),
        ("prompt over the context", json.dumps({"prompt": [5] * (MAX_CONTEXT + 1)}).encode(),
         400, "context_length_exceeded"),
        ("max_tokens 0", json.dumps({"prompt": p0, "max_tokens": 0}).encode(), 400,
         "invalid_value"),
        ("max_tokens absurd", json.dumps({"prompt": p0, "max_tokens": 1000000000}).encode(),
         400, "context_length_exceeded"),
        ("n > 1", json.dumps({"prompt": p0, "n": 2}).encode(), 400, "invalid_value"),
        ("other model", json.dumps({"prompt": p0, "model": "gpt-4"}).encode(), 404,
         "model_not_found"),
        ("oversized body", json.dumps({"prompt": [5] * 30000}).encode(), 413,
         "request_too_large"),
    ]
    for what, raw, status, code in bad:
        st, j = http(port, "POST", "/v1/completions", raw=raw)
        check(st == status and is_error_body(j, st) and j["error"]["code"] == code,
              f"{what}: got {st} {str(j)[:300]}")
    st, j = http(port, "POST", "/v1/completions", body={"prompt": p0}, key=None)
    check(st == 401 and is_error_body(j, st), f"no API key: {st} {j}")
    st, j = http(port, "POST", "/v1/completions", body={"prompt": p0}, key="wrong")
    check(st == 401 and is_error_body(j, st), f"wrong API key: {st} {j}")
    st, j = http(port, "GET", "/v1/completions")
    check(st == 405 and is_error_body(j, st), f"GET on completions: {st} {j}")
    st, j = http(port, "GET", "/v1/nothing")
    check(st == 404 and is_error_body(j, st), f"unknown route: {st} {j}")
    # chunked upload over the cap (no Content-Length): 413 too
    code, body = curl(port, "-H", f"Authorization: Bearer {KEY}", "-H",
                      "Transfer-Encoding: chunked", "--data-binary",
                      json.dumps({"prompt": [5] * 30000}))
    check(code == 413, f"chunked oversized body: {code} {body[:200]}")

    # a client vanishing mid-stream frees its sequence
    fams = metrics(port)
    cancelled0 = sample_value(fams, "shadowrt_requests", "shadowrt_requests_total",
                              {"result": "cancelled"}) or 0
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": p0, "max_tokens": 100000 if MAX_CONTEXT > 100000 else
                       MAX_CONTEXT - len(p0) - 1, "ignore_eos": True, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
              KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    got_data = b""
    while b"data:" not in got_data:
        got_data += s.recv(4096)
    s.close()

    def freed():
        f = metrics(port)
        run = sample_value(f, "shadowrt_running_sequences", "shadowrt_running_sequences")
        can = sample_value(f, "shadowrt_requests", "shadowrt_requests_total",
                           {"result": "cancelled"})
        disc = sample_value(f, "shadowrt_client_disconnects", "shadowrt_client_disconnects_total")
        return run == 0 and can == cancelled0 + 1 and disc >= 1
    wait_for(freed, "the vanished client's sequence to be freed")
    check(True, "vanished client freed")

    # many connections: more than --max-connections 300, some sending half a request
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    socks = []
    for i in range(600):
        try:
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            socks.append(c)
        except OSError:
            break
    time.sleep(0.2)
    for c in socks[:100]:
        try:
            c.send(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        except OSError:
            pass
    for c in socks:
        c.close()
    # the server counts a closed connection until its poll sees it: under load that took
    # over the client's retries (a 503 "338 connections are open" in CI), so wait for it
    wait_for(lambda: http(port, "GET", "/health")[0] == 200, "the flood's connections reaped")
    r = client.completions.create(model="tiny", prompt=p0, max_tokens=8, temperature=0)
    check(r.choices[0].model_extra["token_ids"] == ids, "served after a connection flood")

    # exactly --max-connections (300) idle connections open: a new one is answered 503
    # too_many_connections with Connection: close (not dropped without a status); once they
    # close, requests are served again
    idle = []
    for i in range(300):
        c = socket.create_connection(("127.0.0.1", port))
        idle.append(c)

    def refused():
        try:
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = b""
                while d := c.recv(4096):
                    got += d
                return got if got.startswith(b"HTTP/1.1 503") else None
        except OSError:
            return None
    got = wait_for(refused, "a 503 beyond --max-connections")
    head = got.split(b"\r\n\r\n")[0].lower()
    check(b"too_many_connections" in got and b"connection: close" in head
          and b"retry-after: 1" in head, f"over-limit answer: {got[:400]!r}")
    for c in idle:
        c.close()
    wait_for(lambda: http(port, "GET", "/health")[0] == 200, "served again after the idle close")
    fams = metrics(port)
    openc = sample_value(fams, "shadowrt_http_open_connections", "shadowrt_http_open_connections")
    check(openc is not None and 1 <= openc < 300, f"open connections gauge {openc}")

    # text, chat and stop strings need a tokenizer; this model has none
    st, j = http(port, "POST", "/v1/completions", body={"prompt": "Hello"})
    check(st == 400 and "tokenizer" in j["error"]["message"], f"text prompt: {st} {j}")
    st, j = http(port, "POST", "/v1/chat/completions",
                 body={"messages": [{"role": "user", "content": "hi"}]})
    check(st == 400 and is_error_body(j, st), f"chat without tokenizer: {st} {j}")
    st, j = http(port, "POST", "/v1/completions", body={"prompt": p0, "stop": ["x"]})
    check(st == 400 and "tokenizer" in j["error"]["message"], f"stop without tokenizer: {j}")

    # /metrics with the Prometheus parser: families present and consistent
    fams = metrics(port)
    ttft = sample_value(fams, "shadowrt_time_to_first_token_seconds",
                        "shadowrt_time_to_first_token_seconds_count")
    gen = sample_value(fams, "shadowrt_generated_tokens", "shadowrt_generated_tokens_total")
    length = sample_value(fams, "shadowrt_requests", "shadowrt_requests_total",
                          {"result": "length"})
    stop = sample_value(fams, "shadowrt_requests", "shadowrt_requests_total", {"result": "stop"})
    seen = 8 * 4 + len(s7) + len(s7b) + len(s8) + sum(len(x) for x in alone) * 2
    check(ttft is not None and ttft >= 72, f"TTFT histogram count {ttft}")
    # + the tokens the vanished client never read
    check(gen is not None and gen > seen, f"generated tokens {gen}, clients saw {seen}")
    # 71 requests ran to their end (1 + 1 + 3 + 32 + 32 + curl + after the flood)
    check(length is not None and stop is not None and length + stop == 71,
          f"finished requests: length {length} + stop {stop} != 71")
    itl = fams.get("shadowrt_inter_token_latency_seconds")
    check(itl is not None and itl.type == "histogram", "ITL histogram")
    kv = fams.get("shadowrt_kv_bytes")
    check(kv is not None and len([s for s in kv.samples if s.labels.get("tier") == "L1"]) >= 3,
          "KV bytes per pool")
    hits = sample_value(fams, "shadowrt_prefix_hit_tokens", "shadowrt_prefix_hit_tokens_total",
                        {"tier": "L1"})
    check(hits is not None and hits > 0, f"prefix hit tokens L1 {hits}")
    for name in ("shadowrt_queue_depth", "shadowrt_kv_evicted_pages",
                 "shadowrt_http_responses", "shadowrt_inter_token_latency_seconds"):
        check(name in fams, f"metric family {name}")

    # graceful shutdown: a stream in flight completes, the server exits 0
    out = []

    def long_stream():
        for ch in client.completions.create(model="tiny", prompt=p0, max_tokens=40,
                                            temperature=0, stream=True,
                                            extra_body={"ignore_eos": True}):
            if ch.choices:
                out.append((ch.choices[0].model_extra["token_ids"], ch.choices[0].finish_reason))
    t = threading.Thread(target=long_stream)
    t.start()
    wait_for(lambda: out, "the first streamed chunk")
    srv.send_signal(signal.SIGTERM)
    t.join()
    n = sum(len(x[0]) for x in out)
    check(n == 40 and out[-1][1] == "length", f"stream across SIGTERM: {n} tokens, {out[-1]}")
    rc = srv.wait()
    check(rc == 0, f"server exit status after SIGTERM {rc}")


def text_checks(srv, port, client):
    M = "tiny-chat"
    r = client.completions.create(model=M, prompt="The cache keeps", max_tokens=24,
                                  temperature=0)
    text = r.choices[0].text
    check(isinstance(text, str) and len(text) > 0 and r.usage.completion_tokens == 24,
          f"text completion {text!r} {r.usage}")
    st = "".join(c.choices[0].text for c in client.completions.create(
        model=M, prompt="The cache keeps", max_tokens=24, temperature=0, stream=True)
        if c.choices)
    check(st == text, f"streamed text {st!r} != {text!r}")
    # a stop string taken from the middle of the greedy text: the answer ends right before
    # its first occurrence, with finish_reason stop
    mid = len(text) // 2
    stop = text[mid:mid + 2]
    if stop.strip():
        r2 = client.completions.create(model=M, prompt="The cache keeps", max_tokens=24,
                                       temperature=0, stop=[stop, "\u2603never"])
        want = text[:text.find(stop)]
        check(r2.choices[0].text == want and r2.choices[0].finish_reason == "stop",
              f"stop {stop!r}: {r2.choices[0].text!r} ({r2.choices[0].finish_reason}), "
              f"want {want!r}")
        chunks = list(client.completions.create(model=M, prompt="The cache keeps",
                                                max_tokens=24, temperature=0, stop=stop,
                                                stream=True))
        st2 = "".join(c.choices[0].text for c in chunks if c.choices)
        fin = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        check(st2 == want and fin == "stop", f"streamed stop: {st2!r} {fin}, want {want!r}")
    else:
        check(False, f"no usable stop string in {text!r}")

    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a prime number."}]
    c1 = client.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0.7,
                                        seed=3)
    c2 = client.chat.completions.create(model=M, messages=msgs, max_tokens=12, temperature=0.7,
                                        seed=3)
    content = c1.choices[0].message.content
    check(c1.choices[0].message.role == "assistant" and content and content ==
          c2.choices[0].message.content, f"chat with a seed twice: {content!r} vs "
          f"{c2.choices[0].message.content!r}")
    check(c2.usage.prompt_tokens_details.cached_tokens == 0 or c2.usage.prompt_tokens >= 256,
          "chat usage")
    streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=M, messages=msgs, max_tokens=12, temperature=0.7, seed=3, stream=True)
        if ch.choices)
    check(streamed == content, f"chat stream {streamed!r} != {content!r}")

    # 8 concurrent chat streams = the same requests alone
    convs = [[{"role": "user", "content": f"Question {i}: what is {i} + {i * 3}?"}]
             for i in range(8)]
    alone = [client.chat.completions.create(model=M, messages=m, max_tokens=8, seed=i,
                                            temperature=0.9).choices[0].message.content
             for i, m in enumerate(convs)]
    got = [None] * 8

    def one(i):
        got[i] = "".join(ch.choices[0].delta.content or "" for ch in
                         client.chat.completions.create(model=M, messages=convs[i],
                                                        max_tokens=8, seed=i, temperature=0.9,
                                                        stream=True) if ch.choices)
    ths = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for i in range(8):
        check(got[i] == alone[i], f"chat stream {i}: {got[i]!r} != alone {alone[i]!r}")
    st, j = http(port, "POST", "/v1/chat/completions", body={"messages": "hi"})
    check(st == 400 and is_error_body(j, st) and j["error"]["param"] == "messages",
          f"chat with bad messages: {st} {j}")
    st, j = http(port, "POST", "/v1/chat/completions",
                 body={"messages": [{"role": "wizard", "content": "x"}]})
    check(st == 400 and is_error_body(j, st), f"chat with an unknown role: {st} {j}")
    srv.send_signal(signal.SIGINT)
    check(srv.wait() == 0, "tiny-chat server exit status after SIGINT")


if __name__ == "__main__":
    main()
