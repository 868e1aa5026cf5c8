#!/usr/bin/env bash
# attn train under signals: SIGINT (and SIGTERM) stop a run after its step with a complete
# checkpoint and a log that ends at that step, and --resume continues from it; kill -9 at
# random moments (a checkpoint every step) always leaves a checkpoint that loads and resumes.
# usage: test_train_interrupt.sh ATTN TEXT
set -u
ATTN=$1
T=$(mktemp -d /tmp/attn_interrupt.XXXXXX)
trap 'rm -rf "$T"' EXIT
cp "$2" "$T/text" && TEXT=$T/text
fail() { echo "FAIL: $*"; exit 1; }
M="--text $TEXT --d-model 16 --heads 2 --layers 1 --ff 32 --block 32 --batch 4 --sample 0 -q -t 1"
step_of() { # the train_step of a checkpoint (its JSON header)
  python3 -c 'import json,struct,sys
f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]
print(json.loads(f.read(n))["__metadata__"]["train_step"])' "$1"
}
lines() { local n=0; [ -f "$1" ] && n=$(grep -c . "$1"); echo "${n:-0}"; }
wait_lines() { # until the log has $2 lines (at most 60 s)
  for _ in $(seq 600); do [ "$(lines "$1")" -ge "$2" ] && return 0; sleep 0.1; done
  fail "the run did not reach step $2"
}

for sig in INT TERM; do
  rm -rf "$T/a"
  "$ATTN" train charlm $M --steps 100000 --save-every 0 -o "$T/a" >"$T/out" 2>"$T/err" &
  pid=$!
  wait_lines "$T/a/log.jsonl" 5
  kill -$sig $pid
  wait $pid
  rc=$?
  [ $rc = 0 ] || fail "SIG$sig: exit $rc ($(cat "$T/err"))"
  grep -q "stopped by a signal: continue with --resume" "$T/out" || fail "SIG$sig: no note"
  s=$(step_of "$T/a/state.safetensors") || fail "SIG$sig: no checkpoint"
  last=$(tail -n 1 "$T/a/log.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/')
  [ "$s" = "$last" ] || fail "SIG$sig: checkpoint at step $s, log ends at step $last"
  [ -s "$T/a/model.safetensors" ] || fail "SIG$sig: no model"
  echo "SIG$sig: stopped at step $s with a checkpoint"
done
# resumed: continues from that step (a short time limit ends it); the log steps stay in order
"$ATTN" train charlm $M --steps 100000 --save-every 0 -o "$T/a" --time-limit 1 \
  --resume "$T/a/state.safetensors" >"$T/out" 2>"$T/err" || fail "resume: $(cat "$T/err")"
s2=$(step_of "$T/a/state.safetensors")
[ "$s2" -gt "$s" ] || fail "resume did not go on: step $s2 after $s"
sed 's/.*"step":\([0-9]*\).*/\1/' "$T/a/log.jsonl" >"$T/steps"
seq 1 "$s2" | cmp -s - "$T/steps" || fail "the resumed log is not steps 1..$s2 once each"

# kill -9 at random moments while a checkpoint is written every step
for i in 1 2 3 4 5 6; do
  rm -rf "$T/k"
  "$ATTN" train charlm $M --steps 100000 --save-every 1 -o "$T/k" >/dev/null 2>&1 &
  pid=$!
  wait_lines "$T/k/log.jsonl" 2
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 $pid
  wait $pid 2>/dev/null
  s=$(step_of "$T/k/state.safetensors") || fail "kill -9 ($i): the checkpoint does not read"
  "$ATTN" train charlm $M --steps 100000 --save-every 1 -o "$T/k" --time-limit 0.3 \
    --resume "$T/k/state.safetensors" >"$T/out" 2>"$T/err" ||
    fail "kill -9 ($i) at step $s: resume failed: $(cat "$T/err")"
  ls "$T/k" | grep -v -x -E "log.jsonl|state.safetensors|model.safetensors|loss.svg" &&
    fail "kill -9 ($i): files left behind"
  echo "kill -9 ($i): checkpoint of step $s read and resumed"
done
echo "PASS"
