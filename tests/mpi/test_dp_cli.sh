#!/usr/bin/env bash
# attn train ... under mpirun (data parallel, -DATTN_MPI=ON), one case per ctest test
# (tests/CMakeLists.txt):   bash test_dp_cli.sh ATTN NP CASE TMPDIR MPIEXEC [MPIEXEC FLAGS...]
# Run in tests/.  Each case exits 0 when the program behaved, else prints what went wrong.
#   lm          attn train lm on NP ranks against one process: every step's loss within 1e-5
#               (relative), tied and untied heads, buckets of 500 gradient elements
#   lm_resume   2 ranks stop at step 5 (rank 0 writes the checkpoint); 1 rank (NP 2) or NP
#               ranks (NP 3) resume: the losses continue the one-process run within 1e-5
#   refuse      a batch the ranks do not divide: refused before any work, naming both
#   die         rank 1 exits after step 3 (ATTN_DP_TEST_EXIT_STEP): mpirun reports it and
#               stops the others
#   hang        rank 1 hangs after step 3 (ATTN_DP_TEST_HANG_STEP): another rank stops with a
#               timeout message within ATTN_MPI_TIMEOUT (2 s) and the job ends
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
case $CASE in
lm)
    mktext "$T/text"
    for fx in llama_tiny llama_tiny_untied; do
        hf "$T/$fx" $fx
        L="--init $T/$fx --text $T/text --steps 12 --len 32 --batch 6 --lr 1e-2 --warmup 2 -q"
        run 0 "$ATTN" train lm $L -o "$T/one_$fx" -t 1
        grep "^step" "$T/out" >"$T/one.steps"
        # small buckets: most start during the backward, from the layers' gradient-ready reports
        ATTN_DP_BUCKET=500 run 0 "${MPI[@]}" -np "$NP" "$ATTN" train lm $L -o "$T/dp_$fx" -t 1
        grep "^step" "$T/out" >"$T/dp.steps"
        close "$T/one.steps" "$T/dp.steps" || fail "$fx: $NP-rank losses differ from one process"
        grep -q "data parallel: $NP ranks" "$T/err" || fail "no data-parallel line"
        read -r nb late <<<"$(sed -n 's/.* \([0-9]*\) gradient buckets per step of which \([0-9]*\) started.*/\1 \2/p' "$T/err")"
        [ -n "$nb" ] && [ "$late" -lt "$nb" ] ||
            fail "$fx: no bucket started during the backward ($late of $nb after it)"
        [ "$(grep -c '^step' "$T/dp.steps")" = 12 ] || fail "rank 0 did not print 12 steps once"
        [ -s "$T/dp_$fx/model.safetensors" ] || fail "no model written"
    done ;;
lm_resume)
    mktext "$T/text"
    hf "$T/hf" llama_tiny
    L="--init $T/hf --text $T/text --steps 10 --len 32 --batch 6 --lr 1e-2 --warmup 2 -q -t 1"
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
