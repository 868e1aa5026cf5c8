#!/usr/bin/env bash
# Hostile input and output for the attn program, one case per ctest test (tests/cli_tests.cmake):
#   bash test_cli_io.sh ATTN CASE TMPDIR DATES_MODEL CHARLM_MODEL
# Run from tests/ (fixtures/, data/).  Each case exits 0 when the program behaved, else prints
# what went wrong and exits 1.  Every command that could block runs under `timeout`, so a
# regression fails instead of hanging.
set -u
ATTN=$1 CASE=$2 TMP=$3 DATES=${4:-} CHARLM=${5:-}
BERT=fixtures/bert_tiny
RUN_TIMEOUT=120
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, err_has, out_has

# full CMD...: with stdout on /dev/full, CMD must fail (1) and say so
full() {
    timeout 120 "$@" >/dev/full 2>"$T/err"
    local rc=$?
    [ "$rc" = 1 ] || fail "stdout on /dev/full: exit status $rc, expected 1: $*"
    err_has "error writing to standard output: No space left on device"
}
# closed CMD...: the same with stdout closed
closed() {
    timeout 120 "$@" >&- 2>"$T/err"
    local rc=$?
    [ "$rc" = 1 ] || fail "stdout closed: exit status $rc, expected 1: $*"
    err_has "error writing to standard output: Bad file descriptor"
}

# the commands that print, each with arguments that make it print (fast)
printing() {
    case $1 in
    help) echo "--help" ;;
    version) echo "--version" ;;
    info) echo "info data/unknown_op.safetensors" ;;
    eval) echo "eval --list-ops" ;;
    eval_file) echo "eval fixtures/multihead_attention_1.safetensors -o $T/o.safetensors" ;;
    walkthrough) echo "walkthrough --section 1" ;;
    translate) echo "translate --model $DATES/model.safetensors 21.11.2026" ;;
    heatmap) echo "heatmap --model $DATES/model.safetensors -o $T/h.png 21.11.2026" ;;
    heatmap_stdout) echo "heatmap --model $DATES/model.safetensors -o - 21.11.2026" ;;
    generate) echo "generate --model $CHARLM/model.safetensors --length 5" ;;
    embed) echo "embed --model $BERT hello" ;;
    embed_ids) echo "embed --model $BERT --ids hello" ;;
    similar) echo "similar --model $BERT --corpus data/corpus.txt cat" ;;
    bench) echo "bench --len 16 --heads 1 --repeat 1 --no-ref" ;;
    train) echo "train dates -q --steps 1 --batch 2 --d-model 8 --heads 1 --layers 1 --ff 8 --eval-n 2 -o $T/d" ;;
    demo) echo "demo -q --steps 1 --eval-n 20 -o $T/demo" ;;
    charlm) echo "train charlm -q --text ../README.md --steps 1 --batch 2 --d-model 8 --heads 1 --layers 1 --ff 8 --sample 4 -o $T/c" ;;
    *) fail "no such printing command '$1'" ;;
    esac
}

# every command, for the usage checks: NAME ARGS-BEFORE-OPTIONS
COMMANDS="eval info walkthrough translate heatmap generate embed similar bench demo plot train_dates train_charlm
          train_vit classify attention-map"
cmdline() {
    case $1 in
    train_dates) echo "train dates" ;;
    train_charlm) echo "train charlm" ;;
    train_vit) echo "train vit" ;;
    *) echo "$1" ;;
    esac
}

case $CASE in
full_*)        # stdout on /dev/full: exit 1 with the message, for every printing command
    # shellcheck disable=SC2046
    full "$ATTN" $(printing "${CASE#full_}") ;;
closed_*)      # stdout closed
    # shellcheck disable=SC2046
    closed "$ATTN" $(printing "${CASE#closed_}") ;;
help_full)     # every command's --help to /dev/full
    for c in $COMMANDS; do
        # shellcheck disable=SC2046
        full "$ATTN" $(cmdline "$c") --help
    done ;;
broken_pipe)       # a reader that has gone: exit 1 with a message, no SIGPIPE; nothing removed
    { sleep 1; exec "$ATTN" walkthrough --section 1; } 2>"$T/err" | true
    rc=${PIPESTATUS[0]}
    [ "$rc" = 1 ] || fail "walkthrough into a closed pipe: exit status $rc, expected 1"
    err_has "attn walkthrough: error writing to standard output: Broken pipe"
    { sleep 1; exec "$ATTN" eval fixtures/multihead_attention_1.safetensors -o -; } 2>"$T/err" |
        true
    rc=${PIPESTATUS[0]}
    [ "$rc" = 1 ] || fail "eval -o - into a closed pipe: exit status $rc, expected 1"
    err_has "Broken pipe"
    ln -s /proc/self/fd/1 "$T/link"
    { sleep 1; exec "$ATTN" eval fixtures/multihead_attention_1.safetensors -o "$T/link"; } \
        2>"$T/err" | true
    rc=${PIPESTATUS[0]}
    [ "$rc" = 1 ] || fail "eval -o LINK-TO-STDOUT into a closed pipe: exit status $rc, expected 1"
    err_has "cannot write .*link.*: Broken pipe"
    [ -L "$T/link" ] || fail "eval removed the output path after a write error"
    true ;;
outputs_closed)    # binary output to a closed stdout fails; files still go where they belong
    timeout 120 "$ATTN" eval fixtures/multihead_attention_1.safetensors -o - >&- 2>"$T/err"
    [ $? = 1 ] || fail "eval -o - with stdout closed must fail"
    timeout 120 "$ATTN" train dates -q --steps 1 --batch 2 --d-model 8 --heads 1 --layers 1 \
        --ff 8 --eval-n 2 -o "$T/d" >&- 2>"$T/err"
    [ $? = 1 ] || fail "train dates prints its summary: closed stdout must fail"
    [ -f "$T/d/model.safetensors" ] || fail "train dates with stdout closed wrote no model (or wrote it elsewhere)"
    ;;

# ---- the text reader: --file, --corpus, --text ------------------------------------------------
devzero)
    run 1 "$ATTN" embed --model $BERT --file /dev/zero
    err_has "/dev/zero: not a regular file \(a character device\)"
    run 1 "$ATTN" similar --model $BERT --corpus /dev/zero x
    err_has "/dev/zero: not a regular file \(a character device\)"
    run 1 "$ATTN" train charlm --text /dev/zero -o "$T/c"
    err_has "/dev/zero: not a regular file \(a character device\)"
    [ -e "$T/c" ] && fail "train charlm created its output folder before reading the text"
    true ;;
directory)
    run 1 "$ATTN" embed --model $BERT --file "$T"
    err_has "not a regular file \(a directory\)"
    run 1 "$ATTN" similar --model $BERT --corpus "$T" x
    err_has "not a regular file \(a directory\)"
    run 1 "$ATTN" train charlm --text "$T" -o "$T/c"
    err_has "not a regular file \(a directory\)" ;;
missing)
    run 1 "$ATTN" embed --model $BERT --file "$T/no_such_file"
    err_has "cannot open .*no_such_file: No such file" ;;
fifo_no_writer)  # a FIFO waits a bounded time (10 s) for its writer, then fails with a message
    mkfifo "$T/fifo" || fail "mkfifo"
    # the three commands wait side by side: one wait in all; beside them, a writer that holds
    # a second FIFO open 11 s before it sends anything (a slow <(cmd)): read, not refused
    mkfifo "$T/slow" || fail "mkfifo"
    ( exec 3>"$T/slow"; sleep 11; printf 'hello world\n' >&3 ) &
    timeout 60 "$ATTN" embed --model $BERT --file "$T/slow" >"$T/o4" 2>"$T/e4" & p4=$!
    timeout 60 "$ATTN" embed --model $BERT --file "$T/fifo" >"$T/o1" 2>"$T/e1" & p1=$!
    timeout 60 "$ATTN" similar --model $BERT --corpus "$T/fifo" x >"$T/o2" 2>"$T/e2" & p2=$!
    timeout 60 "$ATTN" train charlm --text "$T/fifo" -o "$T/c" >"$T/o3" 2>"$T/e3" & p3=$!
    for k in 1 2 3; do
        eval "wait \$p$k"
        rc=$?
        cp "$T/e$k" "$T/err"
        [ $rc = 124 ] && fail "command $k with --file FIFO hung"
        [ $rc = 1 ] || fail "command $k with a FIFO no program writes to: exit status $rc, expected 1"
        err_has "is a FIFO and no program opened it for writing within 10 s"
    done
    [ -e "$T/c/model.safetensors" ] && fail "train charlm wrote a model from nothing"
    wait $p4 || { cp "$T/e4" "$T/err"; fail "a writer silent for 11 s: refused"; }
    # a writer that opens the FIFO after the reader: read as any stream
    ( sleep 1; printf 'hello world\n' >"$T/fifo" ) &
    run 0 "$ATTN" embed --model $BERT --file "$T/fifo"
    wait
    mv "$T/out" "$T/fifo_out"
    run 0 "$ATTN" embed --model $BERT "hello world"
    cmp -s "$T/out" "$T/fifo_out" || fail "embed of a FIFO's text differs from the same text"
    cmp -s "$T/out" "$T/o4" || fail "embed of a slow FIFO's text differs from the same text" ;;
stdin_dash)      # --file - reads standard input: the same embeddings as the arguments
    run 0 "$ATTN" embed --model $BERT "hello world" "東京"
    mv "$T/out" "$T/args"
    printf 'hello world\r\n東京\n' | timeout 60 "$ATTN" embed --model $BERT --file - >"$T/out" 2>"$T/err" ||
        fail "embed --file - failed"
    cmp -s "$T/args" "$T/out" || fail "embed --file - differs from the same texts as arguments"
    printf 'a cat\n\nthe stock market\n' | timeout 60 "$ATTN" similar --model $BERT --corpus - cat \
        >"$T/out" 2>"$T/err" || fail "similar --corpus - failed"
    [ "$(wc -l <"$T/out")" = 2 ] || fail "similar --corpus -: expected 2 lines"
    printf 'hello world\n東京\n' >"$T/t.txt"
    timeout 60 "$ATTN" embed --model $BERT --file - <"$T/t.txt" >"$T/out" 2>"$T/err" ||
        fail "embed --file - < FILE failed"
    cmp -s "$T/args" "$T/out" || fail "embed --file - < FILE differs" ;;
pipe_path)       # a pipe named by path (bash process substitution, /dev/fd/N)
    run 0 "$ATTN" embed --model $BERT a b
    mv "$T/out" "$T/args"
    timeout 60 "$ATTN" embed --model $BERT --file <(printf 'a\nb\n') >"$T/out" 2>"$T/err" ||
        fail "embed --file <(...) failed"
    cmp -s "$T/args" "$T/out" || fail "embed --file <(...) differs" ;;
stdin_over_bound)  # a stream past the bound is refused, naming the bound
    head -c 5000 /dev/zero | tr '\0' 'a' | ATTN_MAX_TEXT_BYTES=1000 timeout 60 "$ATTN" embed \
        --model $BERT --file - >"$T/out" 2>"$T/err"
    [ $? = 1 ] || fail "embed --file - past ATTN_MAX_TEXT_BYTES: expected exit 1"
    err_has "standard input: more than the limit of 1000 bytes \(ATTN_MAX_TEXT_BYTES\)"
    # an endless stream ends at the bound too
    ATTN_MAX_TEXT_BYTES=100000 timeout 60 "$ATTN" embed --model $BERT --file - </dev/zero \
        >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc = 124 ] && fail "embed --file - < /dev/zero did not stop at the bound"
    [ $rc = 1 ] || fail "embed --file - < /dev/zero: exit status $rc"
    err_has "more than the limit of 100000 bytes"
    cat /dev/zero | ATTN_MAX_TEXT_BYTES=100000 timeout 60 "$ATTN" train charlm --text - \
        -o "$T/c" >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc = 1 ] || fail "train charlm --text - from an endless pipe: exit status $rc"
    err_has "more than the limit of 100000 bytes"
    # within the bound it works
    printf 'hello\n' | ATTN_MAX_TEXT_BYTES=1000 timeout 60 "$ATTN" embed --model $BERT \
        --file - >"$T/out" 2>"$T/err" || fail "a short stream under the bound was refused" ;;
stdin_st_stream)   # info/eval '-' on a stream read no further than the header describes
    # /dev/zero's header length is 0: 8 bytes are read, the rest stays in the pipe
    head -c 50000000 /dev/zero | { timeout 60 "$ATTN" info - >"$T/out" 2>"$T/err"
        echo $? >"$T/rc"; wc -c >"$T/rest"; }
    [ "$(cat "$T/rc")" = 1 ] || fail "info - from zeros: exit status $(cat "$T/rc")"
    err_has "standard input: safetensors header"
    [ "$(tr -d ' ' <"$T/rest")" = 49999992 ] ||
        fail "info - read $((50000000 - $(cat "$T/rest"))) bytes of zeros, expected 8"
    # a valid image followed by more: read up to the end of its data, the rest left unread
    { cat fixtures/multihead_attention_1.safetensors; printf TRAILER; } |
        { timeout 60 "$ATTN" info - >"$T/out" 2>"$T/err"; echo $? >"$T/rc"; cat >"$T/rest"; }
    [ "$(cat "$T/rc")" = 0 ] || fail "info - on a valid image followed by bytes: exit status $(cat "$T/rc")"
    out_has "key_padding_mask +BOOL +\[2, 7\]"
    [ "$(cat "$T/rest")" = TRAILER ] || fail "info - read past the image's data"
    # endless streams end at once
    run 1 "$ATTN" info - </dev/zero
    cat /dev/zero | timeout 60 "$ATTN" eval - -o "$T/o.st" >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc = 124 ] && fail "eval - < endless pipe did not stop"
    [ $rc = 1 ] || fail "eval - < endless pipe: exit status $rc"
    { cat fixtures/multihead_attention_1.safetensors; cat /dev/zero; } |
        timeout 60 "$ATTN" eval - -o "$T/o.st" >"$T/out" 2>"$T/err" ||
        fail "eval - on a valid image followed by endless zeros failed"
    # a header claiming more data than ATTN_LIMIT_FILE_BYTES is refused before the data is read
    hdr='{"a":{"dtype":"F32","shape":[25000000000000],"data_offsets":[0,100000000000000]}}'
    n=${#hdr}
    { printf "$(printf '\\%03o' $((n & 255)) $(((n >> 8) & 255)))\0\0\0\0\0\0%s" "$hdr"
      cat /dev/zero; } | timeout 60 "$ATTN" info - >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc = 1 ] || fail "info - with a header claiming 100 TB: exit status $rc"
    err_has "the safetensors header describes more than the limit of [0-9]+ bytes \(ATTN_LIMIT_FILE_BYTES\)" ;;
file_over_bound)   # a regular file past the bound is refused before it is read
    run 1 env ATTN_MAX_TEXT_BYTES=100 "$ATTN" embed --model $BERT --file ../README.md
    err_has "README.md: [0-9]+ bytes, over the limit of 100 bytes \(ATTN_MAX_TEXT_BYTES\)"
    run 1 env ATTN_MAX_TEXT_BYTES=100 "$ATTN" similar --model $BERT --corpus ../README.md x
    err_has "over the limit of 100 bytes"
    run 1 env ATTN_MAX_TEXT_BYTES=100 "$ATTN" train charlm --text ../README.md -o "$T/c"
    err_has "over the limit of 100 bytes"
    run 1 env ATTN_MAX_TEXT_BYTES=0 "$ATTN" embed --model $BERT --file data/corpus.txt
    err_has "ATTN_MAX_TEXT_BYTES: expected a positive integer" ;;

# ---- options ------------------------------------------------------------------------------------
unknown_option)    # refused everywhere, naming the option (exit 2)
    for c in $COMMANDS; do
        # shellcheck disable=SC2046
        run 2 "$ATTN" $(cmdline "$c") --bogus x
        err_has "attn $(cmdline "$c"): unknown option '--bogus'"
        # shellcheck disable=SC2046
        run 2 "$ATTN" $(cmdline "$c") -Z
        err_has "unknown option '-Z'"
    done
    run 2 "$ATTN" translate --model "$DATES/model.safetensors" --bogus x
    [ -s "$T/out" ] && fail "translate printed a translation of an unknown option"
    true ;;
help_every)        # -h and --help on every command: usage and an example, exit 0
    for c in $COMMANDS; do
        for h in -h --help; do
            # shellcheck disable=SC2046
            run 0 "$ATTN" $(cmdline "$c") $h
            out_has "^usage: attn $(cmdline "$c")"
            out_has "^examples:"
            out_has "^  attn $(cmdline "$c")"
        done
    done
    run 0 "$ATTN" train --help
    out_has "attn train charlm"
    run 0 "$ATTN" --help
    out_has "exit status"
    out_has "^  2  usage error"
    out_has "one per physical core this process may" ;;
opt_equals)        # --opt=value is --opt value
    run 0 "$ATTN" walkthrough --section 2
    mv "$T/out" "$T/a"
    run 0 "$ATTN" walkthrough --section=2
    cmp -s "$T/a" "$T/out" || fail "--section=2 differs from --section 2"
    run 0 "$ATTN" embed --model=$BERT --threads=1 --dtype=bf16 hi
    run 0 "$ATTN" embed --model $BERT -t1 hi
    run 0 "$ATTN" bench --len=16 --heads=1 --repeat=1 --no-ref --json
    out_has '"len": 16'
    run 2 "$ATTN" bench --json=1
    err_has "option '--json' takes no value"
    run 0 "$ATTN" eval --threads=1 fixtures/multihead_attention_1.safetensors --output="$T/o.st"
    [ -s "$T/o.st" ] || fail "eval --output= wrote nothing" ;;
opt_errors)        # a missing or malformed value is a usage error naming the option
    run 2 "$ATTN" embed --model
    err_has "attn embed: option '--model' needs a value"
    run 2 "$ATTN" embed --model $BERT --threads x hi
    err_has "attn embed: --threads: expected an integer in \[0, 1024\], got 'x'"
    run 2 "$ATTN" embed --model $BERT -t 2000 hi
    err_has "attn embed: -t: expected an integer in \[0, 1024\], got '2000'"
    run 2 "$ATTN" embed --model $BERT --repeat 1000000000 hi
    err_has "--repeat: expected an integer in \[0, 100000\]"
    run 2 "$ATTN" embed --model $BERT --dtype f64 hi
    err_has "--dtype: expected one of f32, f16, bf16, got 'f64'"
    run 2 "$ATTN" generate --model x --temperature hot
    err_has "--temperature: expected a number"
    run 2 "$ATTN" walkthrough --section 9
    err_has "--section: expected an integer in \[1, 5\], got '9'"
    run 2 "$ATTN" bench --op frobnicate
    err_has "--op: expected one of sdpa, "
    run 2 "$ATTN" train dates --steps -3
    err_has "--steps: expected an integer" ;;
double_dash)       # -- ends the options: what follows is text, even "-x"
    run 0 "$ATTN" translate --model "$DATES/model.safetensors" -- "-5 nov 2026" --bogus
    out_has "^-5 nov 2026 +-> "
    out_has "^--bogus +-> "
    run 0 "$ATTN" embed --model $BERT -- --json
    [ "$(wc -l <"$T/out")" = 1 ] || fail "embed -- --json: one embedding expected"
    out_has "^-?[0-9]"
    run 0 "$ATTN" embed --model $BERT hi --json
    out_has '^\{"index": 0' ;;
threads_default)   # 0 = one per core the process may use (within its CPU quota), the default
    run 0 "$ATTN" info --cpu --rows 1 --repeat 1   # quick: the ARM64 stage runs it under qemu
    n=$(sed -n 's/.* \([0-9][0-9]*\) by default (one per physical core.*/\1/p' "$T/out")
    [ -n "$n" ] && [ "$n" -ge 1 ] && [ "$n" -le "$(nproc)" ] ||
        fail "attn info --cpu: no default thread count in [1, nproc]"
    run 0 "$ATTN" bench --len 16 --heads 1 --repeat 1 --no-ref --json
    out_has "\"threads\": $n,"
    run 0 "$ATTN" bench --len 16 --heads 1 --repeat 1 --no-ref --json -t 0
    out_has "\"threads\": $n,"
    if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
        run 0 taskset -c 0 "$ATTN" bench --len 16 --heads 1 --repeat 1 --no-ref --json
        out_has '"threads": 1,'
    fi ;;
train_out_not_dir)  # checked before training starts, not at the first save
    : >"$T/file"
    run 1 "$ATTN" train dates --steps 100000 -o "$T/file"
    err_has "is not a directory"
    grep -q "step" "$T/err" && fail "train dates started training into a file"
    run 1 "$ATTN" train charlm --text ../README.md --steps 100000 -o "$T/file"
    err_has "is not a directory"
    run 1 "$ATTN" demo -o "$T/file"
    err_has "is not a directory"
    true ;;
stdout_dash)       # -o - writes to standard output
    run 0 "$ATTN" eval fixtures/multihead_attention_1.safetensors -o "$T/a.st"
    run 0 "$ATTN" eval fixtures/multihead_attention_1.safetensors -o -
    cmp -s "$T/a.st" "$T/out" || fail "eval -o - differs from eval -o FILE"
    timeout 60 "$ATTN" eval - -o - <fixtures/multihead_attention_1.safetensors >"$T/b.st" \
        2>"$T/err" || fail "eval - -o - failed"
    cmp -s "$T/a.st" "$T/b.st" || fail "eval - -o - differs"
    timeout 60 "$ATTN" info - <"$T/a.st" >"$T/out" 2>"$T/err" || fail "info - failed"
    out_has "attn_weights +F32"
    run 0 env TMPDIR="$T" "$ATTN" heatmap --model "$DATES/model.safetensors" -o - "21 Nov 2026"
    [ "$(head -c 4 "$T/out" | od -An -c | tr -d ' ')" = '211PNG' ] || fail "heatmap -o - is not a PNG"
    ls "$T" | grep -q heatmap && fail "heatmap -o - left its temporary file"
    true ;;
info_escapes)      # names and metadata from a file cannot reach the terminal raw
    hdr='{"__metadata__":{"op":"x\u001b[2J\rforged = yes","k\u007f":"v"},"name\u001b]0;t\u0007":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    n=${#hdr}
    printf "$(printf '\\%03o' $((n & 255)) $(((n >> 8) & 255)))\0\0\0\0\0\0" >"$T/h.st"
    printf '%s' "$hdr" >>"$T/h.st"
    printf '\0\0\0\0' >>"$T/h.st"
    run 0 "$ATTN" info "$T/h.st"
    LC_ALL=C grep -q "$(printf '[\033\r\177\007]')" "$T/out" && fail "raw control bytes in the output"
    out_has '^  op = x\\x1b\[2J\\x0dforged = yes$'
    out_has '^  k\\x7f = v$'
    out_has '^  name\\x1b\]0;t\\x07 +F32 +\[1\]$'
    [ "$(wc -l <"$T/out")" = 4 ] || fail "expected 4 lines" ;;
*)
    fail "unknown case" ;;
esac
exit 0
