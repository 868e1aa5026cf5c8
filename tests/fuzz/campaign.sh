#!/usr/bin/env bash
# A fuzzing campaign: runs one libFuzzer target for RUNS executions in all, split over JOBS
# processes (default 1), then prints the executions, time, speed, coverage and crashes from
# libFuzzer's final stats.
#
#   tests/fuzz/campaign.sh TARGET RUNS [JOBS]
#   tests/fuzz/campaign.sh fuzz_tokenizer 10000000 2
#
# TARGET is fuzz_safetensors, fuzz_hf_config, fuzz_tokenizer, fuzz_checkpoint, fuzz_imgdata,
# fuzz_gguf, fuzz_llm_config or fuzz_bpe.
# Environment:
#   FUZZ_BUILD  the build folder of the targets (default: build-fuzz in the repository; it is
#               configured and built with clang when the target is missing there)
#   FUZZ_WORK   where the growing corpus, the logs and any crashing inputs go
#               (default /tmp/attn-fuzz/TARGET); the seed corpus in tests/fuzz is only read
#   FUZZ_ARGS   more libFuzzer options
# Memory: -rss_limit_mb=1024 and -malloc_limit_mb=64 make a hostile size claim that balloons
# memory a reported failure (the targets' contexts bound files to 1 MB); -timeout=10 a hang.
# Exit status: 0 when no crash, leak, timeout or memory failure was found, 1 otherwise.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 TARGET RUNS [JOBS]" >&2
  exit 2
fi
target=$1 runs=$2 jobs=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
work=${FUZZ_WORK:-/tmp/attn-fuzz/$target}
case $target in
  fuzz_safetensors) seeds=$here/corpus dict=$here/safetensors.dict ;;
  fuzz_hf_config | fuzz_tokenizer | fuzz_checkpoint | fuzz_imgdata | fuzz_gguf | \
  fuzz_llm_config | fuzz_bpe | fuzz_chat | fuzz_json_schema)
    seeds=$here/corpus_${target#fuzz_} dict=$here/${target#fuzz_}.dict ;;
  *) echo "$0: unknown target $target" >&2; exit 2 ;;
esac
bin=$build/tests/fuzz/$target
if [ ! -x "$bin" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DATTN_FUZZ=ON -DATTN_BUILD_TESTS=OFF \
        -DATTN_BUILD_CLI=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target "$target" >/dev/null
fi
mkdir -p "$work/corpus" "$work/crashes"
rm -f "$work"/fuzz-*.log "$work/campaign.log"

opts=(-rss_limit_mb=1024 -malloc_limit_mb=64 -timeout=10 -print_final_stats=1
      "-dict=$dict" "-artifact_prefix=$work/crashes/")
# shellcheck disable=SC2206
extra=(${FUZZ_ARGS:-})
start=$(date +%s)
status=0
if [ "$jobs" -le 1 ]; then
  "$bin" "${opts[@]}" "${extra[@]}" -runs="$runs" "$work/corpus" "$seeds" \
    >"$work/fuzz-0.log" 2>&1 || status=$?
else
  # -jobs=N runs N processes of RUNS/N executions each, logs in fuzz-K.log of the cwd
  (cd "$work" && "$bin" "${opts[@]}" "${extra[@]}" -runs=$(((runs + jobs - 1) / jobs)) \
    -jobs="$jobs" -workers="$jobs" "$work/corpus" "$seeds" >"$work/campaign.log" 2>&1) ||
    status=$?
fi
secs=$(( $(date +%s) - start ))
[ "$secs" -gt 0 ] || secs=1

total=0
for log in "$work"/fuzz-*.log; do
  n=$(grep -a '^stat::number_of_executed_units:' "$log" | tail -n 1 | awk '{print $2}')
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  echo "$(basename "$log"): executions ${n:-?}; ${done_line:-no final stats line (crashed?)}"
  grep -a -E '^(==[0-9]+==ERROR|SUMMARY|.*check failed)' "$log" | head -n 5 || true
  total=$((total + ${n:-0}))
done
crashes=$(find "$work/crashes" -type f | wc -l)
echo "$target: $total executions in ${secs} s ($((total / secs)) exec/s), $jobs job(s); crashes: $crashes"
echo "logs: $work/fuzz-*.log; corpus: $work/corpus; crashing inputs: $work/crashes"
if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  exit 1
fi
