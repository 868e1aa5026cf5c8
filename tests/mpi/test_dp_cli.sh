#!/usr/bin/env bash
# attn train ... under mpirun (data parallel, -DATTN_MPI=ON), one case per ctest test
# (tests/CMakeLists.txt):   bash test_dp_cli.sh ATTN NP CASE TMPDIR MPIEXEC [MPIEXEC FLAGS...]
# Run in tests/.  Each case exits 0 when the program behaved, else prints what went wrong.
#   lm          attn train lm (--dtype f32: float products, whatever this CPU would pick) on NP ranks
#               against one process: every step's loss within 1e-5
#               (relative), tied and untied heads, buckets of 500 gradient elements
#   lm_resume   2 ranks stop at step 5 (rank 0 writes the checkpoint); 1 rank (NP 2) or NP
#               ranks (NP 3) resume: the losses continue the one-process run within 1e-5
#   refuse      a batch the ranks do not divide: refused before any work, naming both
#   die         rank 1 exits after step 3 (ATTN_DP_TEST_EXIT_STEP): mpirun reports it and
#               stops the others
#   hang        rank 1 hangs after step 3 (ATTN_DP_TEST_HANG_STEP): another rank stops with a
#               timeout message within ATTN_MPI_TIMEOUT (2 s) and the job ends
# The start-up agreement (common/train_dp.c): the last rank is given something else (mpiexec's
# MPMD form "-np NP-1 attn ... : -np 1 attn ... X"); every case must stop before step 1, fast
# (well under ATTN_MPI_TIMEOUT), non-zero, naming what differs:
#   differ_lr   --lr (train lm)
#   differ_seed --seed (train lm, charlm, dates)
#   differ_data another text (train lm: its token ids; train charlm: its bytes); other initial
#               weights of the same shapes (train lm --init: a copy trained one step)
#   start_fail  the last rank cannot start: a missing --text (train lm), an unknown option
#               (train charlm): the others stop at once, saying which rank stopped
set -u
ATTN=$1 NP=$2 CASE=$3 TMP=$4
shift 4
MPI=("$@")
FAIL_TAG="$CASE, $NP ranks"
. "$(dirname "$0")/../cli_lib.sh" # $T, fail, run (and RC), mktext
hf() { # hf DIR FIXTURE: a tiny HF llama with the byte-level tokenizer
    mkdir "$1" && cp "fixtures/$2"/* "$1/" && cp fixtures/byte_level_tokenizer.json "$1/tokenizer.json"
}
# close A B: the "step N loss X" lines of two files agree within 1e-5 relative (NaN fails)
close() {
    awk 'NR == FNR { if ($1 == "step") a[$2] = $4; next }
         $1 == "step" { n++; if (!($2 in a)) { print "step " $2 " missing"; bad = 1; next }
             if ($4 !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ || a[$2] !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) {
                 print "step " $2 ": not a number: " $4 " against " a[$2]; bad = 1; next }
             d = a[$2] - $4; if (d < 0) d = -d;
             s = a[$2] < 0 ? -a[$2] : a[$2]
             if (!(d <= 1e-5 * s)) { print "step " $2 ": " $4 " against " a[$2]; bad = 1 }
             if (d / (s > 0 ? s : 1) > w) w = d / (s > 0 ? s : 1) }
         END { if (!n) { print "no steps"; bad = 1 }
               printf "%d steps, largest relative difference %.3g\n", n, w; exit bad }' "$1" "$2"
}
# mpmd RC "ARGS" "LAST": NP-1 ranks run attn ARGS, the last one attn ARGS LAST (run's RC);
# took: the seconds it ran
mpmd() {
    local want=$1 a=$2 b=$3 start
    start=$(date +%s)
    # shellcheck disable=SC2086 # the arguments are words
    ATTN_MPI_TIMEOUT=100 run "$want" "${MPI[@]}" -np $((NP - 1)) "$ATTN" $a : -np 1 "$ATTN" $a $b
    took=$(($(date +%s) - start))
    # no rank ends by a signal or with a sanitizer's report
    ! grep -Eq "Sanitizer|runtime error|signal" "$T/err" || fail "a sanitizer report or a signal"
}
# refused WHAT NAME...: the last mpmd run stopped before training, non-zero, in under 60 s
# (ATTN_MPI_TIMEOUT is 100), naming each setting NAME with rank 0's and the last rank's value
refused() {
    local what=$1
    shift
    [ "$RC" = 1 ] || fail "$what: the job ended with status $RC, expected 1"
    ! grep -q "^step 1 " "$T/out" || fail "$what: the ranks trained"
    grep -q "the ranks disagree on settings that change the result" "$T/err" ||
        fail "$what: no disagreement message"
    for n in "$@"; do
        grep -qF -- "  $n: rank 0: " "$T/err" || fail "$what: the message does not name $n"
        grep -F -- "  $n: rank 0: " "$T/err" | grep -q "rank $((NP - 1)): " ||
            fail "$what: no value of the last rank for $n"
    done
    [ "$(grep -c 'the ranks disagree' "$T/err")" = 1 ] || fail "$what: told more than once"
    [ "$took" -lt 60 ] || fail "$what: took $took s to stop"
}
LM="--len 16 --batch 4 --steps 3 -q -t 1"
CH="--batch 6 --steps 3 --d-model 32 --layers 1 --heads 2 --ff 64 --block 16 -q -t 1 --sample 0"
case $CASE in
differ_lr)
    mktext "$T/text"
    hf "$T/hf" llama_tiny
    mpmd any "train lm --init $T/hf --text $T/text $LM -o $T/o" "--lr 1e-3"
    refused "train lm --lr" --lr
    grep -F -- "  --lr: rank 0: " "$T/err" | grep -q "0.00100000005" || fail "no value 1e-3" ;;
differ_seed)
    mktext "$T/text"
    hf "$T/hf" llama_tiny
    mpmd any "train lm --init $T/hf --text $T/text $LM -o $T/o" "--seed 2"
    refused "train lm --seed" --seed
    mpmd any "train charlm --text $T/text $CH -o $T/c" "--seed 2"
    refused "train charlm --seed" --seed
    mpmd any "train dates --steps 3 --batch 4 --d-model 16 --heads 2 --layers 1 --ff 32 \
        --eval-n 10 -q -t 1 -o $T/d" "--seed 7"
    refused "train dates --seed" --seed ;;
differ_data)
    mktext "$T/text"
    sed 's/fox/cat/' "$T/text" >"$T/text2"
    hf "$T/hf" llama_tiny
    mpmd any "train lm --init $T/hf $LM -o $T/o --text $T/text" "--text $T/text2"
    refused "train lm --text" "--text (its token ids)"
    mpmd any "train charlm $CH -o $T/c --text $T/text" "--text $T/text2"
    refused "train charlm --text" "the text (its bytes)"
    # the same shapes, other weights: the tiny model after one step
    run 0 "$ATTN" train lm --init "$T/hf" --text "$T/text" --len 16 --batch 4 --steps 1 -q \
        -t 1 -o "$T/moved"
    mpmd any "train lm --text $T/text $LM -o $T/o --init $T/hf" "--init $T/moved"
    refused "train lm --init" "the initial weights (--init, --resume)" ;;
start_fail)
    mktext "$T/text"
    hf "$T/hf" llama_tiny
    mpmd any "train lm --init $T/hf $LM -o $T/o --text $T/text" "--text $T/missing"
    [ "$RC" = 1 ] || fail "missing text: the job ended with status $RC, expected 1"
    grep -q "cannot open $T/missing" "$T/err" || fail "missing text: no message from the rank"
    grep -q "rank $((NP - 1)) of $NP stopped before training" "$T/err" ||
        fail "missing text: the others did not say which rank stopped"
    [ "$took" -lt 30 ] || fail "missing text: took $took s to stop"
    mpmd any "train charlm --text $T/text $CH -o $T/c" "--bogus"
    [ "$RC" = 1 ] || [ "$RC" = 2 ] || fail "unknown option: the job ended with status $RC (1 or 2: a usage error)"
    grep -q "rank $((NP - 1)) of $NP stopped before training" "$T/err" ||
        fail "unknown option: the others did not say which rank stopped"
    [ "$took" -lt 30 ] || fail "unknown option: took $took s to stop" ;;
lm)
    mktext "$T/text"
    for fx in llama_tiny llama_tiny_untied; do
        hf "$T/$fx" $fx
        L="--init $T/$fx --text $T/text --steps 12 --len 32 --batch 6 --lr 1e-2 --warmup 2 -q --dtype f32"
        run 0 "$ATTN" train lm $L -o "$T/one_$fx" -t 1
        grep "^step" "$T/out" >"$T/one.steps"
        # small buckets: most start during the backward, from the layers' gradient-ready reports
        ATTN_DP_BUCKET=500 run 0 "${MPI[@]}" -np "$NP" "$ATTN" train lm $L -o "$T/dp_$fx" -t 1
        grep "^step" "$T/out" >"$T/dp.steps"
        close "$T/one.steps" "$T/dp.steps" || fail "$fx: $NP-rank losses differ from one process"
        grep -q "data parallel: $NP ranks" "$T/err" || fail "no data-parallel line"
        grep -Eq "the ranks agree on [0-9]+ settings" "$T/err" || fail "no agreement line"
        read -r nb late <<<"$(sed -n 's/.* \([0-9]*\) gradient buckets per step of which \([0-9]*\) started.*/\1 \2/p' "$T/err")"
        [ -n "$nb" ] && [ "$late" -lt "$nb" ] ||
            fail "$fx: no bucket started during the backward ($late of $nb after it)"
        [ "$(grep -c '^step' "$T/dp.steps")" = 12 ] || fail "rank 0 did not print 12 steps once"
        [ -s "$T/dp_$fx/model.safetensors" ] || fail "no model written"
    done ;;
lm_resume)
    mktext "$T/text"
    hf "$T/hf" llama_tiny
    L="--init $T/hf --text $T/text --steps 10 --len 32 --batch 6 --lr 1e-2 --warmup 2 -q -t 1 --dtype f32"
    run 0 "$ATTN" train lm $L -o "$T/full"
    grep "^step" "$T/out" >"$T/full.steps"
    run 0 "${MPI[@]}" -np 2 "$ATTN" train lm $L -o "$T/part" --stop-at 5
    grep -q "continue with --resume" "$T/out" || fail "no stop message"
    grep "^step" "$T/out" >"$T/part.steps"
    if [ "$NP" -ge 3 ]; then
        run 0 "${MPI[@]}" -np "$NP" "$ATTN" train lm $L -o "$T/part" --resume
    else
        run 0 "$ATTN" train lm $L -o "$T/part" --resume
    fi
    grep -q "^held-out loss at step 5:" "$T/out" || fail "resumed run did not start at step 5"
    grep "^step" "$T/out" >>"$T/part.steps"
    [ "$(wc -l <"$T/part.steps")" = 10 ] || fail "expected 10 steps over both runs"
    close "$T/full.steps" "$T/part.steps" || fail "written on 2 ranks, resumed on $NP: losses" ;;
refuse)
    mktext "$T/text"
    B=$((NP * 3 + 1))
    run any "${MPI[@]}" -np "$NP" "$ATTN" train charlm --text "$T/text" --batch $B --steps 5 -q \
        -o "$T/c"
    grep -q "the global batch of $B is not divisible by the $NP ranks" "$T/err" ||
        fail "no refusal naming the batch and the ranks"
    [ "$(grep -c 'not divisible' "$T/err")" = 1 ] || fail "the refusal should be printed once"
    [ "$RC" != 0 ] || fail "the refused run ended with status 0"
    [ ! -e "$T/c/state.safetensors" ] || fail "a refused run wrote a state" ;;
hang)
    mktext "$T/text"
    start=$(date +%s)
    ATTN_MPI_TIMEOUT=2 ATTN_DP_TEST_HANG_STEP=3 run any "${MPI[@]}" -np "$NP" "$ATTN" train \
        charlm --text "$T/text" --batch 6 --steps 50 --d-model 32 --layers 1 --heads 2 \
        --ff 64 --block 16 -q -t 1 -o "$T/c"
    took=$(($(date +%s) - start))
    [ "$RC" != 0 ] || fail "the job ended with status 0"
    grep -q "ATTN_DP_TEST_HANG_STEP: hanging after step 3" "$T/err" || fail "rank 1 did not hang"
    # the first rank (not 1) to time out tells, and its MPI_Abort stops the others
    grep -Eq "rank ([02-9]|[1-9][0-9]+) of $NP waited [0-9.]+ s for .*another rank died, hangs" \
        "$T/err" || fail "no other rank reported the hang"
    grep -q "ATTN_E_TIMEOUT" "$T/err" || fail "no ATTN_E_TIMEOUT"
    [ "$took" -lt 120 ] || fail "the job took $took s to stop" ;;
die)
    mktext "$T/text"
    start=$(date +%s)
    ATTN_MPI_TIMEOUT=30 ATTN_DP_TEST_EXIT_STEP=3 run any "${MPI[@]}" -np "$NP" "$ATTN" train \
        charlm --text "$T/text" --batch 6 --steps 50 --d-model 32 --layers 1 --heads 2 \
        --ff 64 --block 16 -q -t 1 -o "$T/c"
    took=$(($(date +%s) - start))
    [ "$RC" != 0 ] || fail "the job ended with status 0"
    grep -q "ATTN_DP_TEST_EXIT_STEP: exiting after step 3" "$T/err" || fail "rank 1 did not exit"
    grep -Eqi "exited|exit code|non-zero|aborted" "$T/err" || fail "mpirun did not report the exit"
    [ "$took" -lt 120 ] || fail "the job took $took s to stop" ;;
*) fail "unknown case" ;;
esac
exit 0
