#!/usr/bin/env bash
# attn train vit under mpirun (data parallel, -DATTN_MPI=ON), one case per ctest test
# (tests/CMakeLists.txt):   bash test_vit_dp.sh ATTN GEN NP CASE TMPDIR MPIEXEC [FLAGS...]
# GEN is tests/vit_tiny_data.c built.  Run in tests/.
#   curve   5 epochs of 10 steps (320 tiny images, batch 32, augmentation on, --dtype f32) on
#           one process and on NP ranks: every step's loss of log.jsonl within 1e-5 relative
#           (NaN or a missing step fails), every epoch's test loss within 1e-4; rank 0 alone
#           writes the files; prints the largest relative difference
#   dropout the same with --dropout 0.2: each rank draws its images' masks of the whole batch,
#           so the losses still follow the one-process run within 1e-5
#   resume  NP ranks stop after epoch 2 (--stop-after) and resume inside the same folder on NP
#           ranks: the losses continue the one-process run within 1e-5
#   refuse  a batch the ranks do not divide: refused before any work
set -u
ATTN=$1 GEN=$2 NP=$3 CASE=$4 TMP=$5
shift 5
MPI=("$@")
FAIL_TAG="vit $CASE, $NP ranks"
. "$(dirname "$0")/../cli_lib.sh" # $T, fail, run (and RC)
D=$T/data
mkdir -p "$D" && "$GEN" "$D" 320 60 >/dev/null || fail "the data generator failed"
A="--data $D --limit 320 --test-limit 60 --epochs 5 --batch 32 --patch 4 --dim 16 --heads 2
   --ffn 32 --layers 2 --warmup 10 --dtype f32 -q -t 1"
# close KEY TOL A B: KEY ("loss", "eval_loss") of each step of log.jsonl A present in B and
# within TOL relative; prints the largest relative difference (and the steps compared)
close() {
    awk -v key="$1" -v tol="$2" '
        function val(line, k,   m) {
            if (match(line, "\"" k "\":[^,}]*")) return substr(line, RSTART + length(k) + 3, RLENGTH - length(k) - 3)
            return "" }
        { s = val($0, "step"); v = val($0, key) }
        NR == FNR { if (v != "") a[s] = v; next }
        v != "" { n++
            if (!(s in a)) { print "step " s " missing"; bad = 1; next }
            if (v !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ || a[s] !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) {
                print "step " s ": not a number: " v " against " a[s]; bad = 1; next }
            d = a[s] - v; if (d < 0) d = -d; m = a[s] < 0 ? -a[s] : a[s]
            r = d / (m > 0 ? m : 1); if (r > w) w = r
            if (!(d <= tol * m)) { print "step " s ": " key " " v " against " a[s]; bad = 1 } }
        END { if (!n) { print "no " key " compared"; bad = 1 }
              printf "%s: %d steps, largest relative difference %.3g\n", key, n, w; exit bad }' "$3" "$4"
}
mpi() { run "$1" "${MPI[@]}" -np "$NP" "$ATTN" "${@:2}"; }
# shellcheck disable=SC2086 # the options are words
case $CASE in
dropout)
    run 0 "$ATTN" train vit $A --dropout 0.2 -o "$T/one"
    mpi 0 train vit $A --dropout 0.2 -o "$T/np"
    close loss 1e-5 "$T/one/log.jsonl" "$T/np/log.jsonl" || fail "the loss curves differ" ;;
curve)
    run 0 "$ATTN" train vit $A -o "$T/one"
    mpi 0 train vit $A -o "$T/np"
    err_has "^data parallel: $NP ranks"
    for f in model.safetensors state.safetensors log.csv loss.svg log.jsonl; do
        [ -s "$T/np/$f" ] || fail "rank 0 wrote no $f"
    done
    [ "$(grep -c '"loss"' "$T/np/log.jsonl")" = 50 ] || fail "50 steps expected in log.jsonl"
    grep -q '"ranks":'"$NP" "$T/np/log.jsonl" || fail "log.jsonl does not say $NP ranks"
    close loss 1e-5 "$T/one/log.jsonl" "$T/np/log.jsonl" || fail "the loss curves differ"
    close eval_loss 1e-4 "$T/one/log.jsonl" "$T/np/log.jsonl" || fail "the test losses differ" ;;
resume)
    run 0 "$ATTN" train vit $A -o "$T/one"
    mpi 0 train vit $A --stop-after 2 -o "$T/np"
    [ "$(grep -c '"loss"' "$T/np/log.jsonl")" = 20 ] || fail "20 steps expected after --stop-after 2"
    mpi 0 train vit $A --resume -o "$T/np"
    [ "$(grep -c '"loss"' "$T/np/log.jsonl")" = 50 ] || fail "50 steps expected after the resume"
    close loss 1e-5 "$T/one/log.jsonl" "$T/np/log.jsonl" || fail "the resumed curve differs" ;;
refuse)
    [ "$NP" -gt 1 ] || exit 0
    mpi 1 train vit $A --batch $((NP * 16 + 1)) -o "$T/np"
    err_has "not divisible|divide"
    [ ! -e "$T/np/log.jsonl" ] || fail "trained anyway" ;;
*) fail "unknown case" ;;
esac
exit 0
