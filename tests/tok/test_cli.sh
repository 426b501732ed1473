#!/bin/sh
# CLI test of text in, text out: gen-model writes the tokenizer next to the weights of a
# real-vocabulary preset; tokenize/detokenize round-trip; generate prints text (ids with
# --ids) and says the weights are random; a checkpoint without a tokenizer works on ids with a
# note; chat (through a pipe) answers every line and shows a prefix-cache hit on turn 2.
# usage: test_cli.sh SHADOWRT TINY_CHAT_DIR TINY_DIR SHIPPED_TOKENIZER_DIR WORK
set -u
sr=$1 chatdir=$2 tinydir=$3 shipped=$4 work=$5
mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# gen-model: the shipped tokenizer, byte for byte, next to the weights; --check reports it
cmp -s "$chatdir/tokenizer.json" "$shipped/tokenizer.json" || fail "tokenizer.json not written by gen-model tiny-chat"
cmp -s "$chatdir/tokenizer_config.json" "$shipped/tokenizer_config.json" || fail "tokenizer_config.json not written"
"$sr" gen-model --check "$chatdir" > "$work/check.txt" 2>&1 || fail "gen-model --check failed"
grep -q "tokenizer    tokenizer.json: 129280 token ids, bos 0, eos 1" "$work/check.txt" || fail "--check: no tokenizer line"
[ ! -e "$tinydir/tokenizer.json" ] || fail "tiny (vocab 512) got a tokenizer"

# tokenize / detokenize
text='Hello, world! 你好 <think>x</think> 🙂'
ids=$("$sr" tokenize --model "$chatdir" "$text") || fail "tokenize failed"
[ "$(echo "$ids" | wc -w)" -ge 8 ] || fail "tokenize: too few ids: $ids"
echo "$ids" | grep -q "128821" || fail "tokenize: <think> not one token: $ids"
back=$("$sr" detokenize --model "$chatdir" $ids) || fail "detokenize failed"
[ "$back" = "$text" ] || fail "round trip: '$back' != '$text'"
json=$("$sr" tokenize --model "$chatdir" --json "$text")
echo "$json" | grep -q '"count":' || fail "tokenize --json: $json"
plain=$("$sr" tokenize --model "$chatdir" --no-added "<think>")
[ "$plain" != "128821" ] || fail "--no-added still matched <think>"
"$sr" detokenize --model "$chatdir" 5 999999 > /dev/null 2> "$work/err.txt" && fail "detokenize accepted id 999999"
grep -q "not in the vocabulary" "$work/err.txt" || fail "detokenize: no message for a bad id"
out=$(echo '{"messages": [{"role": "tool", "content": "x"}]}' | "$sr" tokenize --model "$chatdir" --chat)
echo "$out" | grep -q '"error"' || fail "tokenize --chat accepted an unanswered tool message: $out"
out=$(echo '{"messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}}' | "$sr" tokenize --model "$chatdir" --chat)
echo "$out" | grep -q '"ids":\[0,128803,' || fail "tokenize --chat: $out"

# generate: text by default, ids with --ids, a note on random weights
"$sr" generate --model "$chatdir" --prompt "The cache" --max-new-tokens 6 --no-eos > "$work/gen.txt" 2> "$work/gen.err" || fail "generate --prompt failed: $(cat "$work/gen.err")"
[ -s "$work/gen.txt" ] || fail "generate printed no text"
grep -q "random" "$work/gen.err" || fail "generate: no note that the weights are random"
gid=$("$sr" generate --model "$chatdir" --prompt "The cache" --max-new-tokens 6 --no-eos --ids -q) || fail "generate --ids failed"
[ "$(echo "$gid" | tr ',' '\n' | grep -c '^[0-9][0-9]*$')" = 6 ] || fail "generate --ids: '$gid'"
for id in $(echo "$gid" | tr ',' ' '); do [ "$id" -lt 129280 ] || fail "id $id out of the vocabulary"; done
js=$("$sr" generate --model "$chatdir" --prompt "The cache" --max-new-tokens 3 --no-eos --json -q) || fail "generate --json failed"
echo "$js" | grep -q '^{"text":".*","ids":\[[0-9]*,[0-9]*,[0-9]*\],"prompt_tokens":2,' || fail "generate --json: $js"
"$sr" generate --model "$chatdir" --chat --system "Be brief." --prompt "Hi" --max-new-tokens 4 --no-eos -q > /dev/null || fail "generate --chat failed"
echo '{"messages": [{"role": "user", "content": "Weather?"}], "tools": [{"type": "function", "function": {"name": "w"}}], "thinking": {"type": "disabled"}}' > "$work/req.json"
"$sr" generate --model "$chatdir" --request "$work/req.json" --max-new-tokens 2 --no-eos 2> "$work/req.err" > /dev/null || fail "generate --request failed: $(cat "$work/req.err")"
grep -q "^prompt [0-9][0-9][0-9] tokens" "$work/req.err" || fail "generate --request: the tools section is missing from the prompt: $(cat "$work/req.err")"
echo '{"messages": [{"role": "tool", "content": "x"}]}' | "$sr" generate --model "$chatdir" --request - > /dev/null 2> "$work/req2.err" && fail "generate --request accepted an unanswered tool message"
grep -q "messages\[0\]" "$work/req2.err" || fail "generate --request: message does not name the field: $(cat "$work/req2.err")"
"$sr" generate --model "$tinydir" --prompt "Hi" --max-new-tokens 3 --no-eos 2> "$work/tiny.err" > "$work/tiny.txt" || fail "generate on a checkpoint without tokenizer failed"
grep -q "no tokenizer.json: working on token ids" "$work/tiny.err" || fail "no note for a checkpoint without tokenizer"
grep -q '^[0-9][0-9]*,[0-9][0-9]*,[0-9][0-9]*$' "$work/tiny.txt" || fail "tiny: ids expected, got $(cat "$work/tiny.txt")"
"$sr" generate --model "$tinydir" --chat --prompt "Hi" > /dev/null 2>&1 && fail "generate --chat accepted a checkpoint without tokenizer"

# chat through a pipe: a long system prompt so that turn 2 hits the prefix cache
sys=$(awk 'BEGIN { for (i = 0; i < 60; i++) printf "You are a careful assistant who explains caching. " }')
printf 'Hello there!\nTell me about caches.\n/quit\nnot sent\n' | "$sr" chat --model "$chatdir" --system "$sys" --max-new-tokens 5 > "$work/chat.txt" 2> "$work/chat.err" || fail "chat failed: $(cat "$work/chat.err")"
[ "$(grep -c '^model> ' "$work/chat.txt")" = 2 ] || fail "chat: expected 2 replies: $(cat "$work/chat.txt")"
grep -q "not sent" "$work/chat.txt" && fail "chat went on after /quit"
grep -q "^\[turn 1: prompt [0-9]* tokens, prefix cache hit 0 " "$work/chat.err" || fail "chat: turn 1 line: $(cat "$work/chat.err")"
hit2=$(sed -n 's/^\[turn 2: prompt [0-9]* tokens, prefix cache hit \([0-9]*\) .*/\1/p' "$work/chat.err")
[ -n "$hit2" ] && [ "$hit2" -gt 0 ] || fail "chat: no prefix-cache hit on turn 2: $(cat "$work/chat.err")"
echo "hi" | "$sr" chat --model "$tinydir" > /dev/null 2> "$work/chat2.err" && fail "chat accepted a checkpoint without tokenizer"
grep -q "needs text" "$work/chat2.err" || fail "chat: no message for a checkpoint without tokenizer"

[ $fails = 0 ] && echo "test_cli: all checks passed"
exit $fails
