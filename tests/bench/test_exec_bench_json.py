#!/usr/bin/env python3
"""exec_bench --json on the tiny preset: the JSON report holds what the text report says.

Runs the real exec_bench (1 and 2 threads, a short and a deep sequence, --profile) and checks:
- the KV a decode step reads against a count by hand from the tiny preset's shapes (see
  bench/exec_bench.cmake), and that it is less than the KV the deep sequence holds;
- every best / median against its rounds, every bandwidth share against tokens/s, the bytes
  per step and the read bandwidth of the same run;
- a profile per (threads, depth) whose phases add up to the step time;
- the text report went to stderr, with the same per-round tokens/s.
usage: test_exec_bench_json.py EXEC_BENCH TINY_MODEL_DIR
"""
import json
import re
import statistics
import subprocess
import sys

# By hand (bench/exec_bench.cmake): tiny preset, decode at depth 64 and 1024.
KV_READ = {64: 206480, 1024: 364240}


def check_stats(st, what, scale=1.0):
    r = st["rounds"]
    assert r and all(v > 0 for v in r), f"{what}: rounds {r}"
    assert abs(st["best"] - max(r)) <= 1e-9 * max(r), f"{what}: best {st['best']} of {r}"
    med = statistics.median(r)
    assert abs(st["median"] - med) <= 1e-9 * med, f"{what}: median {st['median']} of {r}"


def main():
    exe, model = sys.argv[1], sys.argv[2]
    p = subprocess.run([exe, "--model", model, "--prompt", "64", "--depths", "1024", "--runs",
                        "3", "--steps", "2", "--warmup", "0", "--threads", "1,2", "--profile",
                        "--json"], capture_output=True, text=True, check=True)
    d = json.loads(p.stdout)  # stdout is the JSON object alone
    assert d["numerics"] in ("reference", "f32"), d["numerics"]
    assert d["prompt"] == 64 and d["runs"] == 3 and d["batch"] == 1
    wb = d["weights_bytes_per_step"]
    assert wb > 0
    assert [t["threads"] for t in d["threads"]] == [1, 2]
    for t in d["threads"]:
        bw = t["read_bandwidth_bytes_per_s"]
        assert bw > 1e8, bw
        check_stats(t["prefill"]["tokens_per_s"], "prefill")
        held_deep = t["deep_prefill"][0]["kv_held_bytes"]
        assert [x["depth"] for x in t["decode"]] == [64, 1024]
        for x in t["decode"]:
            dep = x["depth"]
            assert x["short"] == (dep == 64)
            assert x["kv_read_bytes_per_step"] == KV_READ[dep], (dep, x["kv_read_bytes_per_step"])
            assert x["kv_read_bytes_per_step"] < x["kv_held_bytes"], x
            check_stats(x["tokens_per_s"], f"decode {dep}")
            check_stats(x["bandwidth_share"], f"share {dep}")
            for rate, share in zip(x["tokens_per_s"]["rounds"], x["bandwidth_share"]["rounds"]):
                want = rate * (wb + x["kv_read_bytes_per_step"]) / bw
                assert abs(share - want) <= 1e-9 * want, (dep, share, want)
            if dep == 1024:
                assert x["kv_held_bytes"] == held_deep
                m0 = t["decode"][0]["tokens_per_s"]["median"]
                want = x["tokens_per_s"]["median"] / m0
                assert abs(x["of_short_median"] - want) <= 1e-9 * want
        if t["threads"] == 2:
            v = t["vs_first_medians"]
            first = d["threads"][0]
            want = t["decode"][0]["tokens_per_s"]["median"] / first["decode"][0]["tokens_per_s"]["median"]
            assert v["threads"] == 1 and abs(v["short_decode"] - want) <= 1e-9 * want
    profs = {(q["threads"], q["depth"]): q for q in d["profiles"]}
    assert set(profs) == {(1, 64), (1, 1024), (2, 64), (2, 1024)}, sorted(profs)
    for q in profs.values():
        ph = q["phases_ms"]
        assert "attention core" in ph and "moe routed experts" in ph, sorted(ph)
        assert abs(sum(ph.values()) - q["step_ms"]) <= 1e-6 * q["step_ms"] + 1e-9, q
        assert all(v >= 0 for k, v in ph.items() if k != "engine rest (head, embed)"), ph
    # the text went to stderr: the same rounds' tokens/s, printed with 2 decimals
    text = re.findall(r"round (\d) threads (\d): prefill 64 tokens [\d.]+ tokens/s; decode depth 64 "
                      r"\(batch 1\) ([\d.]+) tokens/s", p.stderr)
    assert len(text) == 6, p.stderr
    for rnd, th, rate in text:
        t = next(t for t in d["threads"] if t["threads"] == int(th))
        assert f"{t['decode'][0]['tokens_per_s']['rounds'][int(rnd) - 1]:.2f}" == rate
    print("exec_bench --json: consistent with the text report and the hand count")


if __name__ == "__main__":
    main()
