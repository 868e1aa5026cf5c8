#!/usr/bin/env bash
# attn generate / chat / tokenize / perplexity / bench --op llm on tests/fixtures/llama_tiny.gguf
# (tests/gen_llama_gguf.py: a random tiny llama with a byte-level tokenizer), one case per ctest
# test (tests/cli_tests.cmake):   bash test_llm_cli.sh ATTN CASE TMPDIR
# Run in tests/.  Each case exits 0 when the program behaved, else prints what went wrong.
set -u
ATTN=$1 CASE=$2 TMP=$3
G=fixtures/llama_tiny.gguf
mkdir -p "$TMP"
T=$(mktemp -d "$TMP/$CASE.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() {
    echo "FAIL ($CASE): $*"
    [ -f "$T/err" ] && { echo "--- stderr:"; head -c 3000 "$T/err"; }
    [ -f "$T/out" ] && { echo "--- stdout:"; head -c 3000 "$T/out"; }
    exit 1
}
run() { # run RC_WANTED CMD...: stdout to $T/out, stderr to $T/err
    local want=$1
    shift
    timeout 300 "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ "$rc" = 124 ] && fail "timed out: $*"
    [ "$rc" = "$want" ] || fail "exit status $rc, expected $want: $*"
}
case $CASE in
tokenize)
    run 0 "$ATTN" tokenize --model $G --text "hi é"
    [ "$(cat "$T/out")" = "104 105 32 195 169" ] || fail "byte-level ids"
    printf 'ab' >"$T/in"
    run 0 "$ATTN" tokenize --model $G --file "$T/in"
    [ "$(cat "$T/out")" = "97 98" ] || fail "ids of a file" ;;
generate)
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 12 --temperature 0 -q
    cp "$T/out" "$T/a"
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 12 --temperature 0 -q -t 1
    cmp -s "$T/a" "$T/out" || fail "greedy text differs between 1 and 2 threads"
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 12 --seed 5 --top-k 20
    grep -q "generated: .* tokens/s" "$T/err" || fail "no speed line"
    cp "$T/out" "$T/b"
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 12 --seed 5 --top-k 20 -q
    cmp -s "$T/b" "$T/out" || fail "the same seed gave another text"
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 200 --ctx 16 -q
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 3 --cache-bf16 --f32 -q ;;
chat)
    printf 'a\nb\n' | timeout 300 "$ATTN" chat --model $G --tokens 4 --seed 3 \
        >"$T/out" 2>"$T/err" || fail "exit status $?"
    [ "$(grep -c 'tokens at' "$T/err")" = 2 ] || fail "two answers expected"
    printf 'hello\n' | timeout 300 "$ATTN" chat --model $G --tokens 8 --raw >"$T/out" \
        2>"$T/err" || fail "--raw: exit status $?" ;;
perplexity)
    head -c 3000 /dev/urandom | base64 >"$T/text"
    run 0 "$ATTN" perplexity --model $G --file "$T/text" --ctx 64 --chunks 3
    grep -Eq '^Final estimate: PPL = [0-9.]+ \+/- [0-9.]+$' "$T/out" || fail "final line"
    printf 'ab' >"$T/short"
    run 1 "$ATTN" perplexity --model $G --file "$T/short" --ctx 64
    grep -q "fewer than one chunk" "$T/err" || fail "short text message" ;;
bench)
    run 0 "$ATTN" bench --op llm --model $G --prompt-len 16 --gen 4 --repeat 1 --json
    grep -q '"prompt_tokens_per_s": [0-9]' "$T/out" && grep -q '"gen_tokens_per_s": [0-9]' \
        "$T/out" || fail "JSON keys" ;;
errors)
    run 2 "$ATTN" generate --model $G
    grep -q -- "--prompt TEXT is required" "$T/err" || fail "missing --prompt"
    printf 'not a model' >"$T/bad.gguf"
    run 1 "$ATTN" tokenize --model fixtures/llama_tiny --text x
    grep -q "tokenizer" "$T/err" || fail "folder without a tokenizer"
    head -c 1000 $G >"$T/cut.gguf"
    run 1 "$ATTN" generate --model "$T/cut.gguf" --prompt x
    grep -q "attn generate:" "$T/err" || fail "truncated GGUF message"
    run 1 "$ATTN" generate --model $G --prompt "$(head -c 300 /dev/zero | tr '\0' a)" --ctx 64
    grep -q "more than the context" "$T/err" || fail "prompt longer than the context" ;;
*) fail "unknown case" ;;
esac
exit 0
