#!/usr/bin/env bash
# attn train charlm (and dates) --dtype: bf16 products are named in the banner and kept in the checkpoint
# (train.dtype); a resumed run with --dtype auto (the default) continues in the precision of the
# run it resumes and ends with the uninterrupted run's model, byte for byte; an explicit other
# --dtype is refused by name.  And a finished run resumed (charlm, dates) exits 0; loss.svg is
# drawn from the log.
# usage: test_charlm_dtype.sh ATTN TEXT TMPDIR
set -u
ATTN=$1 TEXT=$2 TMP=$3 CASE=charlm_dtype
. "$(dirname "$0")/cli_lib.sh" # $T, fail, run, err_has, out_has
M="--text $TEXT --d-model 8 --heads 1 --layers 1 --ff 16 --block 16 --batch 2 --sample 0 -t 1"
D="--d-model 8 --heads 1 --layers 1 --ff 16 --steps 2 --batch 4 --eval-n 4 -t 1"

run 0 "$ATTN" train charlm $M --steps 12 --dtype bf16 -o "$T/whole"
err_has "1 threads, bf16 products"
run 0 "$ATTN" info "$T/whole/state.safetensors"
out_has "train.dtype = bf16"
# stopped early by the time limit (after its first step, or later), then resumed (a run that
# had finished resumes too: nothing left to do)
run 0 "$ATTN" train charlm $M --steps 12 --dtype bf16 --time-limit 0.001 -o "$T/part"
run 1 "$ATTN" train charlm $M --steps 12 --dtype f32 --resume "$T/part/state.safetensors" \
    -o "$T/part"
err_has "--dtype"
run 0 "$ATTN" train charlm $M --steps 12 --resume "$T/part/state.safetensors" -o "$T/part"
err_has "bf16 products"
cmp -s "$T/whole/model.safetensors" "$T/part/model.safetensors" ||
    fail "the resumed bf16 run's model differs from the uninterrupted one's"
# and the other way round: an f32 run is not continued in bf16
run 0 "$ATTN" train charlm $M --steps 12 --dtype f32 --time-limit 0.001 -o "$T/f"
run 0 "$ATTN" info "$T/f/state.safetensors"
out_has "train.dtype = f32"
run 1 "$ATTN" train charlm $M --steps 12 --dtype bf16 --resume "$T/f/state.safetensors" -o "$T/f"
err_has "--dtype"
# resuming a run that had finished: nothing to do, exit 0, the loss curve kept (charlm, dates)
run 0 "$ATTN" train charlm $M --steps 3 -o "$T/done"
run 0 "$ATTN" train charlm $M --steps 3 --resume "$T/done/state.safetensors" -o "$T/done"
[ -s "$T/done/loss.svg" ] || fail "the finished charlm run lost its loss curve"
# loss.svg is the run's log drawn as attn plot draws it: steps before the time limit's stop and
# after the resume on one curve; without a log (--log -), no chart, and the summary says so
grep -q ">training loss<" "$T/part/loss.svg" && grep -q ">eval bpc<" "$T/part/loss.svg" ||
    fail "the resumed run's chart lacks the loss or the validation panel"
run 0 "$ATTN" train charlm $M --steps 2 --log - -o "$T/nolog"
[ -e "$T/nolog/loss.svg" ] && fail "a chart without a log"
out_has "loss curve: \\(none: no log\\)"
run 0 "$ATTN" train dates $D --dtype bf16 -o "$T/dd"
err_has "1 threads, bf16 products"
run 0 "$ATTN" info "$T/dd/state.safetensors"
out_has "train.dtype = bf16"
run 1 "$ATTN" train dates -q $D --dtype f32 --resume "$T/dd/state.safetensors" -o "$T/dd"
err_has "--dtype"
run 0 "$ATTN" train dates -q $D --resume "$T/dd/state.safetensors" -o "$T/dd"
[ -s "$T/dd/loss.svg" ] || fail "the finished dates run lost its loss curve"
echo PASS
