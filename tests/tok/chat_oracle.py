#!/usr/bin/env python3
"""Compare shadowrt's DeepSeek-V4 chat encoding with DeepSeek's reference, deepseek-recipe.

The oracle is the reference itself: the PyPI package `deepseek-recipe` (DeepSeek's Rust encoder
with Python bindings, MIT), installed by scripts/deps.sh. Each generated request (an OpenAI
chat-completions body) goes through
    ChatCompletionRequest(body).convert(ConversionOptions())      -> Conversation
    DeepseekV4Encoding().render_conversation(conversation).prompt -> the prompt string
    DeepseekV4Encoding().with_tokenizer(Tokenizer.from_file(tokenizer.json)).encode(...) -> ids
and through `shadowrt tokenize --chat`; the prompt strings and the ids must be identical, and a
request the reference refuses must be refused by shadowrt too (and the other way round).

usage: chat_oracle.py SHADOWRT TOKENIZER_JSON [--n N] [--seed S]
"""
import argparse
import json
import random
import subprocess
import sys

import deepseek_recipe as dr

TEXTS = ["hi", "What is the capital of France?", "写一首关于猫的诗。", "1+1=?", "",
         "Explain <think> tags and <｜User｜> tokens.", "｜DSML｜ inside text", "</think>",
         "emoji 🫩🙂‍↔️ and combining é", "multi\nline\n\ntext  with   spaces\t", "json please",
         "Return JSON.", "<tool_result>fake</tool_result>", "  leading space", "trailing\n",
         "数字 12345 和 3.14159", "<｜end▁of▁sentence｜>", "a" * 300, "Привет, мир", "\r\n\r\n"]


def rtext(rng):
    if rng.random() < 0.15:
        return " ".join(rng.choice(TEXTS) for _ in range(rng.randint(2, 4)))
    return rng.choice(TEXTS)


def rvalue(rng, depth=0):
    k = rng.randrange(9 if depth < 2 else 6)
    if k == 0:
        return rtext(rng)
    if k == 1:
        return rng.randint(-10**6, 10**6)
    if k == 2:
        return rng.choice([0.1, 2.5, -0.0, 1e-7, 1e16, 1e15, 123.456, 1e100, 3.0, 0.00001, 1.5e-5])
    if k == 3:
        return rng.choice([True, False, None])
    if k == 4:
        return rng.choice(["é中🙂", "quote \" and \\ back", "ctl \u0001\u001f\b\f", "tab\tnl\n"])
    if k == 5:
        return rng.randint(0, 9)
    if k == 6:
        return [rvalue(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "city", "n", "z", "é"]) + str(i): rvalue(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def rtool(rng, i):
    props = {f"p{k}": rng.choice([{"type": "string", "description": rtext(rng)}, {"type": "integer"},
                                  {"type": "number", "minimum": 0.5},
                                  {"type": "array", "items": {"type": "string"}},
                                  {"type": "object", "properties": {"x": {"type": "boolean"}}}])
             for k in range(rng.randint(0, 3))}
    f = {"name": f"tool_{i}_{rng.choice(['search', 'get_weather', 'run'])}"}
    if rng.random() < 0.8:
        f["description"] = rtext(rng)
    if rng.random() < 0.9:
        f["parameters"] = {"type": "object", "properties": props}
        if props and rng.random() < 0.5:
            f["parameters"]["required"] = sorted(props)[:1]
    if rng.random() < 0.1:
        f["strict"] = False
    return {"type": "function", "function": f}


def rcontent(rng):
    if rng.random() < 0.15:
        return [{"type": "text", "text": rtext(rng)} for _ in range(rng.randint(1, 3))]
    return rtext(rng)


def rargs(rng):
    r = rng.random()
    if r < 0.8:
        return json.dumps({f"k{i}": rvalue(rng) for i in range(rng.randint(0, 4))},
                          ensure_ascii=rng.random() < 0.5)
    return rng.choice(["not json", "[1, 2]", "3", "", "{\"a\": 1,}", "\"s\""])


def conversation(rng, tools_given):
    msgs = []
    if rng.random() < 0.6:
        msgs.append({"role": "system", "content": rcontent(rng)})
    call_id = 0
    rounds = rng.randint(1, 4)
    for r in range(rounds):
        msgs.append({"role": "user", "content": rcontent(rng)})
        if rng.random() < 0.1:
            msgs.append({"role": "system", "content": rtext(rng)})
        if rng.random() < 0.1:
            msgs.append({"role": "latest_reminder", "content": rtext(rng)})
        last = r == rounds - 1
        if last and rng.random() < 0.6:
            break
        for step in range(rng.randint(1, 3)):
            a = {"role": "assistant"}
            if rng.random() < 0.7:
                a["reasoning_content"] = rtext(rng)
            calls = []
            if rng.random() < (0.6 if tools_given else 0.3):
                for _ in range(rng.randint(1, 3)):
                    call_id += 1
                    calls.append({"id": f"call_{call_id}", "type": "function",
                                  "function": {"name": f"tool_{rng.randrange(3)}", "arguments": rargs(rng)}})
                a["tool_calls"] = calls
                a["content"] = rtext(rng) if rng.random() < 0.3 else ""
            else:
                a["content"] = rtext(rng)
            msgs.append(a)
            if not calls:
                break
            order = calls[:]
            rng.shuffle(order)
            for c in order:
                t = {"role": "tool", "tool_call_id": c["id"], "content": rcontent(rng)}
                msgs.append(t)
            if rng.random() < 0.2:
                msgs.append({"role": "user", "content": rtext(rng)})
        if last and rng.random() < 0.3:
            msgs.append({"role": "assistant", "content": rtext(rng), "prefix": True,
                         **({"reasoning_content": rtext(rng)} if rng.random() < 0.5 else {})})
    return msgs


def request(rng):
    q = {"model": "DeepSeek-V4-Pro"}
    tools_given = rng.random() < 0.4
    if tools_given:
        q["tools"] = [rtool(rng, i) for i in range(rng.randint(1, 3))]
        ch = rng.random()
        if ch < 0.15:
            q["tool_choice"] = "none"
        elif ch < 0.3:
            q["tool_choice"] = "required"
        elif ch < 0.4:
            q["tool_choice"] = {"type": "function", "function": {"name": q["tools"][0]["function"]["name"]}}
        elif ch < 0.6:
            q["tool_choice"] = "auto"
    t = rng.random()
    if t < 0.4:
        q["thinking"] = {"type": "enabled"}
    elif t < 0.8:
        q["thinking"] = {"type": "disabled"}
    if rng.random() < 0.6:
        q["reasoning_effort"] = rng.choice(["low", "medium", "high", "xhigh", "max", "minimal", "none"])
    f = rng.random()
    if f < 0.07:
        q["response_format"] = {"type": "json_object"}
    elif f < 0.14:
        q["response_format"] = {"type": "json_schema",
                                "json_schema": {"name": "out", "schema": {"type": "object", "properties":
                                                                          {"answer": {"type": "string"}}}}}
    elif f < 0.17:
        q["response_format"] = {"type": "text"}
    q["messages"] = conversation(rng, tools_given)
    if rng.random() < 0.05:  # broken on purpose: both must refuse
        m = q["messages"]
        k = rng.randrange(3)
        if k == 0:
            m.append({"role": "tool", "tool_call_id": "nope", "content": "x"})
        elif k == 1:
            m.insert(0, {"role": "assistant", "content": "x", "prefix": True})
        else:
            m.append({"role": "assistant", "content": None})
    return q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shadowrt")
    ap.add_argument("tokenizer")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=4)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    reqs = [request(rng) for _ in range(a.n)]
    inp = "\n".join(json.dumps(q, ensure_ascii=False) for q in reqs).encode()
    p = subprocess.run([a.shadowrt, "tokenize", "--tokenizer", a.tokenizer, "--chat"], input=inp,
                       capture_output=True)
    if p.returncode:
        sys.exit(f"chat_oracle: shadowrt failed: {p.stderr.decode(errors='replace')}")
    got = [json.loads(l) for l in p.stdout.decode().split("\n") if l]
    if len(got) != len(reqs):
        sys.exit(f"chat_oracle: {len(got)} answers for {len(reqs)} requests")

    enc = dr.DeepseekV4Encoding()
    enc_ids = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(a.tokenizer))
    opts = dr.ConversionOptions()
    fails, ok, refused = [], 0, 0
    for i, (q, g) in enumerate(zip(reqs, got)):
        try:
            conv = dr.ChatCompletionRequest(q).convert(opts).conversation
            want = enc.render_conversation(conv).prompt
            want_ids = enc_ids.encode(conv)
        except Exception as e:  # the reference refuses the request
            if "error" not in g:
                fails.append(f"request {i}: the reference refuses it ({e}) but shadowrt renders it")
            refused += 1
            continue
        if "error" in g:
            fails.append(f"request {i}: shadowrt refuses it ({g['error']}); the reference renders it")
            continue
        if g["text"] != want:
            k = next((j for j in range(min(len(want), len(g["text"]))) if want[j] != g["text"][j]),
                     min(len(want), len(g["text"])))
            fails.append(f"request {i}: prompt differs at char {k}: shadowrt {g['text'][max(0, k - 40):k + 40]!r}"
                         f" vs reference {want[max(0, k - 40):k + 40]!r}")
            continue
        if g["ids"] != want_ids:
            fails.append(f"request {i}: same prompt, ids differ")
            continue
        ok += 1
    print(f"chat_oracle: {a.n} generated requests: {ok} identical prompts and ids, "
          f"{refused} refused by both")
    if fails:
        print(f"chat_oracle: {len(fails)} MISMATCHES; the first ones:")
        for f in fails[:15]:
            print("  " + f)
        for f in fails[:2]:
            i = int(f.split()[1].rstrip(":"))
            print(json.dumps(reqs[i], ensure_ascii=False)[:3000])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
