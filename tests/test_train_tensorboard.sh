#!/usr/bin/env bash
# attn train --tensorboard DIR: TensorBoard event files beside the JSON-lines log, read back by
# tests/check_tfevents.py (framing, CRC-32C, the Event fields, the log's values); a resumed run
# writes a file of its own; an unwritable directory is refused with a message.
# usage: test_train_tensorboard.sh ATTN TEXT
set -u
ATTN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/attn_tb.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
M="--text $2 --d-model 16 --heads 2 --layers 1 --ff 32 --block 16 --batch 4 --sample 0 -q -t 1"
"$ATTN" train charlm $M --steps 6 --eval-every 3 -o "$T/a" --tensorboard "$T/tb" >/dev/null \
  2>"$T/err" || fail "charlm: $(cat "$T/err")"
python3 "$HERE/check_tfevents.py" "$T/tb" "$T/a/log.jsonl" tokens || fail "charlm events"
"$ATTN" train dates --steps 4 --eval-every 2 --eval-n 20 --d-model 16 --heads 2 --layers 1 \
  --ff 32 --batch 8 -q -t 1 -o "$T/d" --tensorboard "$T/tbd" >/dev/null 2>"$T/err" ||
  fail "dates: $(cat "$T/err")"
python3 "$HERE/check_tfevents.py" "$T/tbd" "$T/d/log.jsonl" tokens || fail "dates events"
# stopped at step 3 and resumed: two files, the second from step 4
"$ATTN" train charlm $M --steps 6 --time-limit 1e-9 -o "$T/r" --tensorboard "$T/tbr" \
  >/dev/null 2>"$T/err" || fail "stopped run: $(cat "$T/err")"
"$ATTN" train charlm $M --steps 6 -o "$T/r" --resume "$T/r/state.safetensors" \
  --tensorboard "$T/tbr" >/dev/null 2>"$T/err" || fail "resumed run: $(cat "$T/err")"
[ "$(ls "$T/tbr" | grep -c tfevents)" = 2 ] || fail "resume: $(ls "$T/tbr")"
# unwritable: a file where the directory should be
: >"$T/file"
"$ATTN" train charlm $M --steps 2 -o "$T/b" --tensorboard "$T/file" >/dev/null 2>"$T/err" &&
  fail "a file as the TensorBoard directory was accepted"
grep -q "tfevents" "$T/err" || fail "no message naming the events file: $(cat "$T/err")"
echo PASS
