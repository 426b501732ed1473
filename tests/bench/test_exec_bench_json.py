#!/usr/bin/env python3
"""exec_bench --json on the tiny preset: the JSON report holds what the text report says.

Runs the real exec_bench (1 and 2 threads, a short and a deep sequence, --profile) and checks:
- the KV a decode step reads against a count by hand from the tiny preset's shapes (see
  bench/exec_bench.cmake), and that it is less than the KV the deep sequence holds;
- the weights a decode step reads against a count of the checkpoint's tensors read here from
  its safetensors header (weights_of_a_step), in total and per profile phase;
- every best / median against its rounds, every bandwidth share against tokens/s, the bytes
  per step and the read bandwidth of the same run;
- a profile per (threads, depth) whose phases add up to the step time;
- the text report went to stderr, with the same per-round tokens/s;
- --ab: one engine per (variant, thread count), the variants' order alternating by round, and
  every B/A the median of the per-round ratios of the rates in the same report.
usage: test_exec_bench_json.py EXEC_BENCH TINY_MODEL_DIR
"""
import glob
import json
import os
import re
import struct
import statistics
import subprocess
import sys

# By hand (bench/exec_bench.cmake): tiny preset, decode at depth 64 and 1024.
KV_READ = {64: 206480, 1024: 364240}


def weights_of_a_step(model):
    """Bytes of weights one decode step reads on average, per profile phase, counted from the
    safetensors headers: routed experts k of n per layer, the compressors' projections (run
    once per 4 tokens) a quarter, neither the embedding, the hash tables nor the MTP block."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    k, n = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    phases = {}
    for path in sorted(glob.glob(os.path.join(model, "*.safetensors"))):
        with open(path, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
        for name, t in header.items():
            if name == "__metadata__" or name == "embed.weight" or name.startswith("mtp.") \
                    or "tid2eid" in name:
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            if ".ffn.experts." in name:
                phase, size = "moe routed experts", size * k // n
            elif ".ffn.shared_experts." in name:
                phase = "moe shared expert"
            elif ".ffn.gate." in name or ".ffn_norm." in name:
                phase = "moe routing"
            elif ".attn.wo_a." in name or ".attn.wo_b." in name:
                phase = "attention wo_a + wo_b"
            elif ".compressor." in name:
                phase, size = "attention projections", size // 4
            elif ".attn." in name or ".attn_norm." in name:
                phase = "attention projections"
            elif ".hc_attn_" in name or ".hc_ffn_" in name:
                phase = "mHC residual"
            else:
                phase = "engine rest (head, embed)"
            phases[phase] = phases.get(phase, 0) + size
    return phases


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
    want_w = weights_of_a_step(model)
    assert wb == sum(want_w.values()), (wb, want_w)
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
        pw = {p: b for p, b in q["phases_weight_bytes"].items() if b}
        assert pw == want_w, (pw, want_w)
        assert set(q["phases_weight_bytes"]) == set(ph), q
        assert all(v >= 0 for k, v in ph.items() if k != "engine rest (head, embed)"), ph
        # the pool's worker sleeps a step: none without workers
        assert q["pool_sleeps_per_step"] >= 0, q
        assert q["threads"] > 1 or q["pool_sleeps_per_step"] == 0, q
        # the time one thread works while the others wait: a one-thread pool's whole step
        # (every call runs on it, and so does all between them); with two threads a part of
        # it (the products run on both)
        one = q["one_thread_ms_per_step"]
        if q["threads"] == 1:
            assert 0.9 * q["step_ms"] <= one <= 1.01 * q["step_ms"], q
        else:
            assert 0 < one < q["step_ms"], q
    # the text went to stderr: the same rounds' tokens/s, printed with 2 decimals
    text = re.findall(r"round (\d) threads (\d): prefill 64 tokens [\d.]+ tokens/s; decode depth 64 "
                      r"\(batch 1\) ([\d.]+) tokens/s", p.stderr)
    assert len(text) == 6, p.stderr
    for rnd, th, rate in text:
        t = next(t for t in d["threads"] if t["threads"] == int(th))
        assert f"{t['decode'][0]['tokens_per_s']['rounds'][int(rnd) - 1]:.2f}" == rate
    check_ab(exe, model)
    print("exec_bench --json: consistent with the text report and the hand count; --ab pairs "
          "its rounds")


def check_ab(exe, model):
    """--ab: an engine per (variant, thread count), B first in the odd rounds, and each B/A
    the median of the per-round ratios of the same run's rates; a bad value is refused."""
    p = subprocess.run([exe, "--model", model, "--prompt", "64", "--depths", "200", "--runs",
                        "3", "--steps", "2", "--warmup", "0", "--threads", "1,2", "--json",
                        "--ab", "cache.l1_pages=heap,hugepages"],
                       capture_output=True, text=True, check=True)
    d = json.loads(p.stdout)
    a, b = "cache.l1_pages=heap", "cache.l1_pages=hugepages"
    assert [(t["threads"], t["variant"]) for t in d["threads"]] == \
        [(1, a), (2, a), (1, b), (2, b)], d["threads"]
    assert d["ab"]["a"] == a and d["ab"]["b"] == b
    rows = {(r["threads"], r["depth"]): r for r in d["ab"]["decode"]}
    assert set(rows) == {(1, 64), (1, 200), (2, 64), (2, 200)}, sorted(rows)
    for (th, dep), r in rows.items():
        ta = next(t for t in d["threads"] if t["threads"] == th and t["variant"] == a)
        tb = next(t for t in d["threads"] if t["threads"] == th and t["variant"] == b)
        xa = next(x for x in ta["decode"] if x["depth"] == dep)["tokens_per_s"]
        xb = next(x for x in tb["decode"] if x["depth"] == dep)["tokens_per_s"]
        ratios = [vb / va for va, vb in zip(xa["rounds"], xb["rounds"])]
        assert all(abs(x - y) <= 1e-9 * y for x, y in zip(r["round_ratios"], ratios)), r
        assert abs(r["median_round_ratio"] - statistics.median(ratios)) <= 1e-9
        want = xb["median"] / xa["median"]
        assert abs(r["ratio_of_medians"] - want) <= 1e-9 * want
    # the rounds' order in the text: A then B in round 1, B then A in round 2
    order = re.findall(r"round (\d) threads (\d) \[cache\.l1_pages=(\w+)\]", p.stderr)
    assert order[:4] == [("1", "1", "heap"), ("1", "2", "heap"), ("1", "1", "hugepages"),
                         ("1", "2", "hugepages")], order
    assert order[4:8] == [("2", "1", "hugepages"), ("2", "2", "hugepages"), ("2", "1", "heap"),
                          ("2", "2", "heap")], order
    assert "A/B: B = [cache.l1_pages=hugepages] over A = [cache.l1_pages=heap]" in p.stderr
    bad = subprocess.run([exe, "--model", model, "--depths", "none", "--ab",
                          "cache.l1_pages=heap,thp"], capture_output=True, text=True)
    assert bad.returncode != 0 and "hugepages or heap" in bad.stderr, bad.stderr
    bad = subprocess.run([exe, "--ab", "cache.l1_pages=heap"], capture_output=True, text=True)
    assert bad.returncode == 2 and "SECTION.KEY=A,B" in bad.stderr, bad.stderr


if __name__ == "__main__":
    main()
