#!/usr/bin/env bash
# attn generate / chat / tokenize / perplexity / bench --op llm on tests/fixtures/llama_tiny.gguf
# (tests/gen_llama_gguf.py: a random tiny llama with a byte-level tokenizer), one case per ctest
# test (tests/cli_tests.cmake):   bash test_llm_cli.sh ATTN CASE TMPDIR
# Run in tests/.  Each case exits 0 when the program behaved, else prints what went wrong.
set -u
ATTN=$1 CASE=$2 TMP=$3
G=fixtures/llama_tiny.gguf
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, mktext
case $CASE in
tokenize)
    run 0 "$ATTN" tokenize --model $G --text "hi é"
    [ "$(cat "$T/out")" = "104 105 32 195 169" ] || fail "byte-level ids"
    printf 'ab' >"$T/in"
    run 0 "$ATTN" tokenize --model $G --file "$T/in"
    [ "$(cat "$T/out")" = "97 98" ] || fail "ids of a file"
    # a BERT folder (vocab.txt): [CLS] ... [SEP] as transformers' BertTokenizer gives them
    run 0 "$ATTN" tokenize --model fixtures/bert_tiny --text "Hello, wörld! [SEP] 東京"
    [ "$(cat "$T/out")" = "2 117 16 118 5 3 247 248 3" ] || fail "BERT folder ids"
    run 0 "$ATTN" tokenize --model fixtures/bert_tiny --text "Hello, wörld! [SEP] 東京" --no-bos
    [ "$(cat "$T/out")" = "117 16 118 5 3 247 248" ] || fail "BERT folder ids, --no-bos" ;;
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
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 3 --cache-bf16 --f32 -q
    # --act: the default (auto) is int16 where the CPU has its kernels (attn info --cpu names
    # the table), else f32; the prompt's logits (5 tokens: the matrix-vector kernels) tell
    for act in default auto int16 f32; do
        A=(--act $act); [ $act = default ] && A=()
        run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 1 -q --logits "$T/$act.st" "${A[@]}"
    done
    cmp -s "$T/default.st" "$T/auto.st" || fail "--act auto differs from the default"
    cmp -s "$T/default.st" "$T/int16.st" || fail "the default's logits are not int16's"
    run 0 "$ATTN" info --cpu --repeat 1 --threads 1 --rows 64 # the rates: a short measure
    if grep -q "int16 activations: none" "$T/out"; then
        cmp -s "$T/default.st" "$T/f32.st" || fail "no int16 kernels, yet the default is not f32"
    else
        cmp -s "$T/default.st" "$T/f32.st" && fail "int16 kernels, yet the default gives f32's logits"
    fi
    run 2 "$ATTN" generate --model $G --prompt "hello" --act int4
    grep -q "one of auto, f32, int8, int16" "$T/err" || fail "--act int4: no list of choices" ;;
chat)
    printf 'a\nb\n' | timeout 300 "$ATTN" chat --model $G --tokens 4 --seed 3 \
        >"$T/out" 2>"$T/err" || fail "exit status $?"
    [ "$(grep -c 'tokens at' "$T/err")" = 2 ] || fail "two answers expected"
    printf 'hello\n' | timeout 300 "$ATTN" chat --model $G --tokens 8 --raw >"$T/out" \
        2>"$T/err" || fail "--raw: exit status $?" ;;
chat_template)
    # --template FILE and --no-think: the prompt is the template's text (its token count: the
    # tiny model's tokenizer is byte-level, so every byte of the text counts)
    Q=fixtures/chat/templates/qwen3.jinja
    count() { # tokens of the text printf makes of $1 (X keeps its trailing newlines)
        echo $(( $("$ATTN" tokenize --model $G --no-bos --text "$(printf "${1}X")" | wc -w) - 1 ))
    }
    QP='<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'
    run 0 "$ATTN" generate --model $G --chat --template $Q --prompt hi --tokens 1
    err_has "^prompt: $(count "$QP") tokens"
    run 0 "$ATTN" generate --model $G --chat --template $Q --no-think --prompt hi --tokens 1
    err_has "^prompt: $(count "$QP<think>\n\n</think>\n\n") tokens"
    run 0 "$ATTN" generate --model $G --chat --template $Q --system S --prompt hi --tokens 1
    err_has "^prompt: $(count "<|im_start|>system\nS<|im_end|>\n$QP") tokens"
    printf 'hi\n' >"$T/in"
    run 0 "$ATTN" chat --model $G --template $Q --no-think --tokens 2 <"$T/in"
    err_has "^\[$(count "$QP<think>\n\n</think>\n\n") prompt tokens"
    # a format by its name: the published file's prompt; a file of that name comes first
    run 0 "$ATTN" chat --model $G --template qwen3 --no-think --tokens 2 <"$T/in"
    err_has "^\[$(count "$QP<think>\n\n</think>\n\n") prompt tokens"
    run 0 "$ATTN" generate --model $G --chat --template fixtures/chat/templates/gemma3.jinja \
        --system S --prompt hi --tokens 1 --ids -q
    cp "$T/out" "$T/gemma_file"
    run 0 "$ATTN" generate --model $G --chat --template gemma3 --system S --prompt hi \
        --tokens 1 --ids -q
    cmp -s "$T/out" "$T/gemma_file" || fail "--template gemma3: not the published template's ids"
    (cd "$T" && cp "$OLDPWD/$Q" gemma3 && "$ATTN" generate --model "$OLDPWD/$G" --chat \
        --template gemma3 --prompt hi --tokens 1) 2>"$T/err" >/dev/null ||
        fail "--template gemma3 with a file of that name"
    err_has "^prompt: $(count "$QP") tokens"
    # Mistral Large 2411's template: no thinking switch, said so
    run 0 "$ATTN" generate --model $G --chat --template fixtures/chat/templates/mistral-v7.jinja \
        --no-think --prompt hi --tokens 1
    err_has "the mistral-v7 template has no thinking switch"
    # templates attn does not recognise: refused with the file's name and first line
    R=fixtures/chat/templates/refused
    run 1 "$ATTN" chat --model $G --template $R/Qwen-QwQ-32B.jinja <"$T/in"
    err_has "QwQ-32B.jinja: not a chat template attn formats \(its first line: \"\{%- if tools"
    err_has "\{%- if tools %\}\"\): chat template: it has ChatML's"
    run 1 "$ATTN" generate --model $G --chat --prompt hi --template \
        $R/unsloth-mistral-Devstral-Small-2507.jinja
    err_has "not a chat template attn formats \(its first line: \"\{#- Copyright 2025-pres"
    err_has "the Unsloth team\. All rights reserved\. #\}\"\)"
    printf 'a\0b' >"$T/nul"
    run 1 "$ATTN" chat --model $G --template "$T/nul" <"$T/in"
    err_has "a NUL byte at byte 1"
    run 1 "$ATTN" chat --model $G --template "$T/none" <"$T/in"
    err_has "cannot open"
    run 2 "$ATTN" generate --model $G --template $Q --prompt hi
    err_has "give --chat"
    run 2 "$ATTN" chat --model $G --raw --no-think <"$T/in"
    err_has "not --raw" ;;
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
        "$T/out" || fail "JSON keys"
    run 0 "$ATTN" bench --op llm --model $G --prompt-len 16 --gen 4 --repeat 1 --parallel 3 --json
    grep -q '"parallel": 3' "$T/out" || fail "--parallel 3 in the JSON" ;;
errors)
    run 2 "$ATTN" generate --model $G
    grep -q -- "--prompt TEXT is required" "$T/err" || fail "missing --prompt"
    printf 'not a model' >"$T/bad.gguf"
    # a file that is not GGUF, a folder nor a safetensors file: said what it is (round 3, F11)
    : >"$T/empty.gguf"
    for f in "$T/bad.gguf" ../README.md "$T/empty.gguf" "$T/missing.gguf"; do
        run 1 "$ATTN" generate --model "$f" --prompt x --tokens 2
        grep -q "unknown option" "$T/err" && fail "generate --model $f: taken for a charlm model"
        grep -Eq "not a GGUF file|too short for the magic|No such file" "$T/err" ||
            fail "generate --model $f: no word on what the file is"
    done
    run 1 "$ATTN" tokenize --model fixtures/llama_tiny --text x
    grep -q "tokenizer" "$T/err" || fail "folder without a tokenizer"
    head -c 1000 $G >"$T/cut.gguf"
    run 1 "$ATTN" generate --model "$T/cut.gguf" --prompt x
    grep -q "attn generate:" "$T/err" || fail "truncated GGUF message"
    run 1 "$ATTN" generate --model $G --prompt "$(head -c 300 /dev/zero | tr '\0' a)" --ctx 64
    grep -q "more than the context" "$T/err" || fail "prompt longer than the context"
    # chat's standard input is bounded and must be text (review round 3, F3)
    head -c 5000000 /dev/zero >"$T/zeros"
    run 1 "$ATTN" chat --model $G --raw -t 1 <"$T/zeros"
    grep -q "a line holds a NUL byte" "$T/err" || fail "chat: NUL bytes on stdin"
    head -c 3000000 /dev/zero | tr '\0' a >"$T/aaa"
    ATTN_MAX_TEXT_BYTES=100000 run 1 "$ATTN" chat --model $G --raw -t 1 <"$T/aaa"
    grep -q "is over 100000 bytes (ATTN_MAX_TEXT_BYTES)" "$T/err" || fail "chat: endless line"
    printf 'hi\nthere\n' >"$T/two"
    run 0 "$ATTN" chat --model $G --raw -t 1 --tokens 2 <"$T/two"
    # a context that scores no token is refused (F5)
    run 1 "$ATTN" perplexity --model $G --file ../README.md --ctx 2
    grep -q -- "--ctx 2 scores no token" "$T/err" || fail "perplexity --ctx 2"
    run 0 "$ATTN" perplexity --model $G --file ../README.md --ctx 3 --chunks 1 -q
    grep -Eq "PPL = [0-9]" "$T/out" || fail "perplexity --ctx 3"
    # a non-finite scale in a quantized matrix is refused at load by every command (F4)
    if command -v python3 >/dev/null; then
        run 0 "$ATTN" export --model $G --gguf "$T/q8.gguf" --type q8_0
        cp "$T/q8.gguf" "$T/nan.gguf"
        python3 gguf_patch.py "$T/nan.gguf" blk.0.attn_q.weight 0 007e || fail "gguf_patch"
        for c in "generate --prompt hi -n 2" "perplexity --file ../README.md --ctx 16" \
                 "export --gguf $T/out.gguf"; do
            run 1 "$ATTN" ${c%% *} --model "$T/nan.gguf" ${c#* }
            grep -q "tensor blk.0.attn_q.weight (Q8_0): block 0 has a non-finite d" "$T/err" ||
                fail "NaN scale not refused by ${c%% *}"
        done
        [ ! -e "$T/out.gguf" ] || fail "export wrote the NaN model"
        run 0 "$ATTN" tokenize --model "$T/nan.gguf" --text hi # the tokenizer alone: no weights
        # tokenizer strings (F11): the pre-tokenizer name with a NUL inside, a token that is
        # not UTF-8 (load refuses; export --tokenizer does not copy it)
        python3 - $G "$T" <<'PY' || fail "patching the tokenizer keys"
import sys
d = open(sys.argv[1], "rb").read()
i = d.index(b"tokenizer.ggml.pre") + len("tokenizer.ggml.pre") + 4 + 8
assert d[i:i + 4] == b"gpt2"
open(sys.argv[2] + "/pre_nul.gguf", "wb").write(d[:i] + b"gp\0t" + d[i + 4:])
j = d.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 4 + 4 + 8 + 8
assert d[j:j + 2] == "\u0100".encode()
open(sys.argv[2] + "/tok_utf8.gguf", "wb").write(d[:j] + b"\xff\x80" + d[j + 2:])
PY
        # tokenize reads the tokenizer alone: a model of another architecture tokenizes
        python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); k = b'general.architecture'
i = d.index(k) + len(k) + 12; assert d[i:i + 5] == b'llama'
open(sys.argv[2], 'wb').write(d[:i] + b'gemma' + d[i + 5:])" $G "$T/arch.gguf" || fail "patch"
        run 0 "$ATTN" tokenize --model $G --text "Hello, world <|im_end|>"
        mv "$T/out" "$T/ids_full"
        run 0 "$ATTN" tokenize --model "$T/arch.gguf" --text "Hello, world <|im_end|>"
        cmp -s "$T/out" "$T/ids_full" || fail "tokenize of another architecture: other ids"
        run 1 "$ATTN" generate --model "$T/arch.gguf" --prompt hi -n 2
        err_has 'architecture "gemma" is not supported'
        run 1 "$ATTN" generate --model "$T/pre_nul.gguf" --prompt hi -n 2
        err_has "tokenizer.ggml.pre\) holds a NUL byte"
        run 1 "$ATTN" generate --model "$T/tok_utf8.gguf" --prompt hi -n 2
        err_has "tokenizer.ggml.tokens\[0\] is not valid UTF-8"
        run 1 "$ATTN" export --model $G --tokenizer "$T/tok_utf8.gguf" --gguf "$T/tu.gguf"
        err_has "the tokenizer of .*tok_utf8.gguf: .*tokenizer.ggml.tokens\[0\] is not valid UTF-8"
        [ ! -e "$T/tu.gguf" ] || fail "export copied a tokenizer that is not UTF-8"
        run 0 "$ATTN" generate --model "$T/q8.gguf" --prompt hi -n 2 -q
    fi
    # the file is read by default, or mapped with --mmap (F6): the same ids; a file read into
    # memory truncated during the run cannot kill it
    cp $G "$T/m.gguf"
    run 0 "$ATTN" generate --model "$T/m.gguf" --mmap --prompt "hello" -n 6 --temperature 0 --ids -q
    cp "$T/out" "$T/mapped"
    for how in "" --no-mmap; do
        rm -f "$T/turns" && mkfifo "$T/turns"
        cp $G "$T/m.gguf"
        (printf 'hello\n'; sleep 0.5; truncate -s 100 "$T/m.gguf"; printf 'again\n') >"$T/turns" &
        run 0 "$ATTN" chat --model "$T/m.gguf" $how --raw -t 1 --tokens 5 <"$T/turns"
        wait
        [ "$(grep -c 'prompt tokens' "$T/err")" = 2 ] || fail "'$how': the second turn did not run"
        cp $G "$T/m.gguf"
        run 0 "$ATTN" generate --model "$T/m.gguf" $how --prompt "hello" -n 6 --temperature 0 --ids -q
        cmp -s "$T/out" "$T/mapped" || fail "'$how' changed the ids"
    done
    # export and train lm take it too (the re-check of round 3)
    run 0 "$ATTN" export --model "$T/m.gguf" --no-mmap --gguf "$T/nm.gguf"
    run 0 "$ATTN" generate --model "$T/nm.gguf" --prompt "hello" -n 6 --temperature 0 --ids -q
    cmp -s "$T/out" "$T/mapped" || fail "export --no-mmap: another model"
    run 0 "$ATTN" export --model "$T/m.gguf" --mmap --gguf "$T/mm.gguf"
    cmp -s "$T/nm.gguf" "$T/mm.gguf" || fail "export --mmap: another file"
    run 0 "$ATTN" train lm --help
    out_has "--no-mmap"
    out_has "--mmap" ;;
train_lm) # a tiny HF llama (llama_tiny + a byte-level tokenizer.json): the held-out loss drops
    mkdir "$T/hf" && cp fixtures/llama_tiny/* fixtures/byte_level_tokenizer.json "$T/hf/" &&
        mv "$T/hf/byte_level_tokenizer.json" "$T/hf/tokenizer.json"
    mktext "$T/text"
    L="--init $T/hf --text $T/text --steps 12 --len 32 --lr 1e-2 --warmup 2 --eval-every 6"
    run 0 "$ATTN" train lm $L -o "$T/a" -t 2
    grep -q "tok/s .* ETA" "$T/err" || fail "no progress line"
    grep -Eq "^held-out loss at step 6: " "$T/out" || fail "no held-out loss at step 6"
    read -r l0 l1 <<<"$(sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\1 \2/p' "$T/out")"
    awk -v a="$l0" -v b="$l1" 'BEGIN { exit !(b < 0.7 * a) }' ||
        fail "held-out loss did not drop: $l0 -> $l1"
    grep "^step" "$T/out" >"$T/steps2"
    run 0 "$ATTN" train lm $L -o "$T/b" -t 1
    grep "^step" "$T/out" | cmp -s - "$T/steps2" || fail "1 and 2 threads gave other losses"
    cmp -s "$T/a/model.safetensors" "$T/b/model.safetensors" || fail "1 and 2 threads: weights"
    for f in config.json model.safetensors tokenizer.json state.safetensors loss.svg; do
        [ -s "$T/a/$f" ] || fail "no $f in the output folder"
    done
    run 0 "$ATTN" generate --model "$T/a" --prompt "the" --tokens 8 --temperature 0 -q --ids
    cp "$T/out" "$T/ids"
    # to GGUF with the tokenizer.json converted to tokenizer.ggml.* keys
    run 0 "$ATTN" export --model "$T/a" --gguf "$T/a.gguf"
    run 0 "$ATTN" info "$T/a.gguf"
    grep -q 'tokenizer.ggml.pre  *STRING  *"gpt2"' "$T/out" || fail "no tokenizer.ggml.pre"
    run 0 "$ATTN" generate --model "$T/a.gguf" --prompt "the" --tokens 8 --temperature 0 -q --ids
    cmp -s "$T/out" "$T/ids" || fail "the GGUF export continues otherwise than the folder" ;;
train_lm_resume) # stopped at step 5 and resumed (on another thread count) = uninterrupted
    mkdir "$T/hf" && cp fixtures/llama_tiny/* "$T/hf/" &&
        cp fixtures/byte_level_tokenizer.json "$T/hf/tokenizer.json"
    mktext "$T/text"
    L="--init $T/hf --text $T/text --steps 10 --len 32 --batch 3 --lr 1e-2 --warmup 2 -q"
    run 0 "$ATTN" train lm $L -o "$T/full" --save-every 4
    grep "^step" "$T/out" >"$T/full.steps"
    run 0 "$ATTN" train lm $L -o "$T/part" --stop-at 5 -t 2
    grep -q "continue with --resume" "$T/out" || fail "no stop message"
    grep "^step" "$T/out" >"$T/part.steps"
    run 0 "$ATTN" train lm $L -o "$T/part" --resume -t 1
    grep -q "^held-out loss at step 5:" "$T/out" || fail "resumed run did not start at step 5"
    grep "^step" "$T/out" >>"$T/part.steps"
    cmp -s "$T/full.steps" "$T/part.steps" || fail "resumed losses differ"
    cmp -s "$T/full/state.safetensors" "$T/part/state.safetensors" || fail "checkpoints differ"
    cmp -s "$T/full/model.safetensors" "$T/part/model.safetensors" || fail "models differ"
    run 0 "$ATTN" train lm $L -o "$T/p2" --stop-at 3
    run 0 "$ATTN" export --model "$T/p2/state.safetensors" --hf "$T/p2hf"
    run 0 "$ATTN" generate --model "$T/p2hf" --prompt "the" --tokens 4 -q
    run 1 "$ATTN" train lm $L --seed 2 -o "$T/part" --resume
    grep -q -- "--seed differs from the run being continued (1 there, 2 now)" "$T/err" ||
        fail "another run's checkpoint" ;;
train_lm_bf16) # mixed precision: the loss drops, 1 and 2 threads agree, --dtype is a setting
    mkdir "$T/hf" && cp fixtures/llama_tiny/* "$T/hf/" &&
        cp fixtures/byte_level_tokenizer.json "$T/hf/tokenizer.json"
    mktext "$T/text"
    L="--init $T/hf --text $T/text --steps 12 --len 32 --lr 1e-2 --warmup 2 --dtype bf16"
    run 0 "$ATTN" train lm $L -o "$T/a" -t 2
    grep -q "mixed precision (bf16 products)" "$T/err" || fail "no mixed-precision note"
    read -r l0 l1 <<<"$(sed -n 's/^held-out loss: \([0-9.]*\) -> \([0-9.]*\) .*/\1 \2/p' "$T/out")"
    awk -v a="$l0" -v b="$l1" 'BEGIN { exit !(b < 0.7 * a) }' ||
        fail "held-out loss did not drop in bf16: $l0 -> $l1"
    grep "^step" "$T/out" >"$T/steps2"
    run 0 "$ATTN" train lm $L -o "$T/b" -t 1
    grep "^step" "$T/out" | cmp -s - "$T/steps2" || fail "bf16: 1 and 2 threads differ"
    run 0 "$ATTN" train lm ${L/--dtype bf16/--dtype f32} -o "$T/f" -t 2
    grep "^step" "$T/out" | cmp -s - "$T/steps2" && fail "bf16 and f32 gave the same losses"
    run 1 "$ATTN" train lm ${L/--dtype bf16/--dtype f32} -o "$T/a" --resume
    grep -q -- "--dtype differs from the run being continued (bf16 there, f32 now)" "$T/err" ||
        fail "resume with another dtype"
    # --dtype auto (the default) resumes in the precision of the run it continues, whatever
    # this CPU would pick for a new run; the run has finished: nothing to train, exit 0
    run 0 "$ATTN" train lm ${L/--dtype bf16/} -o "$T/a" --resume
    grep -q "mixed precision (bf16 products)" "$T/err" || fail "auto resume left bf16"
    # the chart is drawn from the run's log, so a finished run resumed keeps the whole curve
    grep -q "loss curve: $T/a/loss.svg" "$T/out" && grep -q "eval loss" "$T/a/loss.svg" ||
        fail "finished run resumed: its chart from the log" ;;
train_lm_gguf) # from the tiny GGUF (dequantized), exported back to GGUF with its tokenizer
    mktext "$T/text"
    run 0 "$ATTN" train lm --init $G --text "$T/text" --steps 4 --len 32 -q -o "$T/a"
    grep -q "no tokenizer.json" "$T/out" || fail "no note on the missing tokenizer"
    run 0 "$ATTN" export --model "$T/a" --gguf "$T/a.gguf" # the tokenizer of the --init GGUF
    run 0 "$ATTN" export --model "$T/a/state.safetensors" --gguf "$T/s.gguf"
    cmp -s "$T/a.gguf" "$T/s.gguf" || fail "the checkpoint and the folder exported differently"
    run 0 "$ATTN" export --model "$T/a" --gguf "$T/t.gguf" --tokenizer $G
    cmp -s "$T/a.gguf" "$T/t.gguf" || fail "--tokenizer the same GGUF gave another file"
    run 0 "$ATTN" export --model "$T/a" --gguf "$T/a8.gguf" --tokenizer $G --type q8_0
    run 0 "$ATTN" generate --model "$T/a.gguf" --prompt "hello" --tokens 8 --temperature 0 -q
    run 0 "$ATTN" generate --model "$T/a8.gguf" --prompt "hello" --tokens 8 --temperature 0 -q ;;
export) # round trips: GGUF -> GGUF (F32) and GGUF -> HF -> GGUF give the source's greedy ids
    run 0 "$ATTN" generate --model $G --prompt "hello" --tokens 24 --temperature 0 -q --ids
    cp "$T/out" "$T/ref"
    run 0 "$ATTN" export --model $G --gguf "$T/f32.gguf"
    run 0 "$ATTN" export --model $G --gguf "$T/q8.gguf" --type q8_0
    run 0 "$ATTN" export --model $G --hf "$T/hf"
    run 0 "$ATTN" export --model "$T/hf" --gguf "$T/rt.gguf" --tokenizer $G
    for m in f32 rt; do
        run 0 "$ATTN" generate --model "$T/$m.gguf" --prompt "hello" --tokens 24 \
            --temperature 0 -q --ids
        cmp -s "$T/out" "$T/ref" || fail "$m.gguf: other greedy ids"
    done
    cmp -s "$T/f32.gguf" "$T/rt.gguf" || fail "GGUF -> HF -> GGUF changed the file"
    run 0 "$ATTN" generate --model "$T/q8.gguf" --prompt "hello" --tokens 8 -q
    run 0 "$ATTN" info "$T/q8.gguf"
    grep -q "blk.0.attn_q.weight  *Q8_0" "$T/out" || fail "no Q8_0 matrices"
    grep -q "tokenizer.ggml.tokens" "$T/out" || fail "no tokenizer keys"
    run 1 "$ATTN" export --model "$T/hf" --gguf "$T/x.gguf"
    grep -q "has no tokenizer (tokenizer.json): give --tokenizer" "$T/err" ||
        fail "folder without a tokenizer, and no --tokenizer"
    run 2 "$ATTN" export --model $G
    grep -q "give one of --gguf FILE and --hf DIR" "$T/err" || fail "no output given" ;;
export_families) # every family's tiny model as a HF folder: its family's config and weights
    # (Gemma's norms written as w, not 1 + w), read back by attn as the same model: exported
    # again, the same bytes; GGUF export refuses the families llama.cpp writes otherwise
    for f in llama3 mistral qwen2 qwen3 gemma3; do
        run 0 "$ATTN" export --model fixtures/families/$f --hf "$T/$f.a"
        run 0 "$ATTN" export --model "$T/$f.a" --hf "$T/$f.b"
        cmp -s "$T/$f.a/model.safetensors" "$T/$f.b/model.safetensors" ||
            fail "$f: weights changed on a second round trip"
        cmp -s "$T/$f.a/config.json" "$T/$f.b/config.json" || fail "$f: config changed"
    done
    grep -q '"model_type": "gemma3_text"' "$T/gemma3.a/config.json" || fail "gemma3 model_type"
    grep -q '"full_attention"\]' "$T/gemma3.a/config.json" || fail "gemma3 layer types"
    grep -q '"model_type": "qwen2"' "$T/qwen2.a/config.json" || fail "qwen2 model_type"
    grep -q '"rope_type": "llama3"' "$T/llama3.a/config.json" || fail "llama3 RoPE scaling"
    grep -q '"sliding_window": 6' "$T/mistral.a/config.json" || fail "mistral window"
    run 1 "$ATTN" export --model fixtures/families/qwen3 --gguf "$T/q.gguf" --tokenizer $G
    grep -q "this one is qwen3" "$T/err" || fail "GGUF export of qwen3 not refused by name" ;;
export_transformers) # transformers on the exports (skipped without it): tests/check_export.py
    PY=${ATTN_TEST_PYTHON:-python3}
    LIB=${ATTN%/*}/libattn.so
    [ -f "$LIB" ] || { echo "no $LIB: skipped"; exit 77; }
    "$PY" -c "import transformers, torch, gguf, numpy" 2>/dev/null ||
        { echo "$PY has no transformers/torch/gguf: skipped"; exit 77; }
    "$PY" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$LIB" 2>/dev/null ||
        { echo "$LIB does not load into $PY (a sanitizer build?): skipped"; exit 77; }
    run 0 "$ATTN" export --model $G --gguf "$T/f32.gguf"
    run 0 "$ATTN" export --model $G --gguf "$T/q8.gguf" --type q8_0
    run 0 "$ATTN" export --model $G --hf "$T/hf"
    run 0 "$ATTN" export --model "$T/hf" --gguf "$T/rt.gguf" --tokenizer $G
    timeout 600 "$PY" check_export.py "$LIB" $G "$T/f32.gguf" "$T/q8.gguf" "$T/hf" \
        "$T/rt.gguf" >"$T/out" 2>"$T/err" || fail "check_export.py"
    grep "bound" "$T/out" ;;
train_lm_errors)
    mktext "$T/text"
    run 2 "$ATTN" train lm --init $G
    grep -q -- "--text FILE is required" "$T/err" || fail "missing --text"
    run 2 "$ATTN" train lm --text "$T/text"
    grep -q -- "--init MODEL is required" "$T/err" || fail "missing --init"
    run 1 "$ATTN" train lm --init $G --text "$T/none" -o "$T/o"
    grep -q "cannot open" "$T/err" || fail "missing text file"
    printf 'a short text' >"$T/short"
    run 1 "$ATTN" train lm --init $G --text "$T/short" -o "$T/o"
    grep -q "too short for --len 128" "$T/err" || fail "text shorter than a window"
    run 1 "$ATTN" train lm --init fixtures/bert_tiny --text "$T/text" -o "$T/o"
    grep -q 'model_type "bert" is not supported' "$T/err" || fail "another architecture"
    run 1 "$ATTN" train lm --init $G --text "$T/text" -o "$T/r" --resume
    grep -q -- "--resume: no checkpoint" "$T/err" || fail "--resume without a checkpoint"
    [ -e "$T/r" ] && fail "--resume without a checkpoint made the output folder"
    run 2 "$ATTN" train lm --init $G --text "$T/text" --held-out 1.5
    grep -q -- "--held-out" "$T/err" || fail "held-out 1.5"
    run 2 "$ATTN" train lm --init $G --text "$T/text" --held-out 0
    grep -q -- "--held-out must be between 0 and 1" "$T/err" || fail "held-out 0"
    run 2 "$ATTN" train lm --init $G --text "$T/text" --steps 3 --epochs 1
    grep -q "not both" "$T/err" || fail "--steps and --epochs" ;;
*) fail "unknown case" ;;
esac
exit 0
