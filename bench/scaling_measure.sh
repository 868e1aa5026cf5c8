#!/bin/sh
# The measurements of docs/scaling.md, then its tables.
#
#   bench/scaling_measure.sh [ATTN] [OUT]      (defaults: build/attn, docs/scaling-data)
#
# ATTN: an attn program built with -DATTN_MPI=ON (Open MPI's mpirun on the PATH).  Writes the
# JSON of every run into OUT and the Markdown tables of bench/scaling_model.py into
# OUT/tables.md (links, data-parallel and ring-attention projections, the checks), and
# replaces the marked blocks of docs/scaling.md (or $DOC) with them.  About 5 minutes on a 2-core machine.  Run it on
# an idle machine: every figure is a median, but other jobs on the cores move them by tens
# of percent.  TABLES_ONLY=1 skips the measurements and remakes the tables from OUT's JSON;
# LINKS_ONLY=1 measures the links alone, then remakes the tables.
set -eu
ATTN=${1:-build/attn}
OUT=${2:-docs/scaling-data}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# Open MPI as root, and more ranks than cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OVER=--oversubscribe
NB="--bind-to none" # let the ranks move off cores that other jobs hold

if [ "${TABLES_ONLY:-0}" != 1 ]; then
echo "links: shared memory and TCP over loopback, 2 and 4 ranks"
mpirun -np 2 "$ATTN" bench --op mpi-link --label shm --json > "$OUT/link_shm_np2.json"
mpirun -np 2 --mca btl self,tcp "$ATTN" bench --op mpi-link --label tcp --json \
  > "$OUT/link_tcp_np2.json"
mpirun -np 4 $OVER "$ATTN" bench --op mpi-link --label shm --json > "$OUT/link_shm_np4.json"
mpirun -np 4 $OVER --mca btl self,tcp "$ATTN" bench --op mpi-link --label tcp --json \
  > "$OUT/link_tcp_np4.json"

fi
if [ "${TABLES_ONLY:-0}" != 1 ] && [ "${LINKS_ONLY:-0}" != 1 ]; then
echo "a node's training speed: a small GPT step"
"$ATTN" bench --op gpt-step --layers 4 --len 256 --batch 2 --threads 2 --repeat 3 --json \
  > "$OUT/gpt_step.json"

# ring attention: the single process, N copies of it at once (the compute a rank gets
# while N processes share the cores), and the ring, at a size of seconds and a small one
for L in 16384 2048; do
  S="--len $L --heads 4 --causal"
  R=3
  [ "$L" = 2048 ] && R=21
  echo "ring attention, L = $L"
  "$ATTN" bench --op sdpa $S -t 1 --repeat $R --no-ref --json > "$OUT/single_L${L}_fwd.json"
  "$ATTN" bench --op sdpa-backward $S -t 1 --repeat $R --no-ref --json \
    > "$OUT/single_L${L}_bwd.json"
  for np in 2 4; do
    [ "$L" = 2048 ] && [ "$np" = 4 ] && continue
    F="$NB"
    [ "$np" = 4 ] && F="$NB $OVER"
    mpirun -np $np $F "$ATTN" bench --op sdpa $S -t 1 --repeat $R --no-ref --json \
      > "$OUT/copies${np}_L${L}_fwd.json"
    mpirun -np $np $F "$ATTN" bench --op sdpa-backward $S -t 1 --repeat $R --no-ref --json \
      > "$OUT/copies${np}_L${L}_bwd.json"
    mpirun -np $np $F "$ATTN" bench --op ring-sdpa $S --threads 1 --repeat $R --json \
      > "$OUT/ring_np${np}_L${L}_shm.json"
  done
  mpirun -np 2 $NB --mca btl self,tcp "$ATTN" bench --op ring-sdpa $S --threads 1 \
    --repeat $R --json > "$OUT/ring_np2_L${L}_tcp.json"
done
fi

M="python3 $HERE/scaling_model.py"
D="$OUT"
{
  echo "<!-- scaling:model (bench/scaling_measure.sh writes this block) -->"
  $M --link "shared memory=$D/link_shm_np2.json" --link "TCP=$D/link_tcp_np2.json" \
     --link "shared memory=$D/link_shm_np4.json" --link "TCP=$D/link_tcp_np4.json" \
     --gamma-link "shared memory" --dp-link "$D/link_shm_np2.json"
  echo "Measured at the same time: a small GPT step (\`attn bench --op gpt-step --layers 4 --len 256 --batch 2 --threads 2\`) at $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['gflops']))" "$D/gpt_step.json") GFLOP/s on the busy machine; the projections use R = 228 GFLOP/s, the README's idle figure (\`--gflops\`)."
  echo "<!-- /scaling:model -->"
  echo "<!-- scaling:check (bench/scaling_measure.sh writes this block) -->"
  for L in 16384 2048; do
    C="--check-single $D/single_L${L}_fwd.json,$D/single_L${L}_bwd.json"
    C="$C --check-control 2=$D/copies2_L${L}_fwd.json,$D/copies2_L${L}_bwd.json"
    echo "#### L = $L, shared memory"
    echo
    if [ "$L" = 16384 ]; then
      C="$C --check-control 4=$D/copies4_L${L}_fwd.json,$D/copies4_L${L}_bwd.json"
      $M --only-check $C --check-link "$D/link_shm_np2.json" \
         --check "2=$D/ring_np2_L${L}_shm.json" --check "4=$D/ring_np4_L${L}_shm.json"
    else
      $M --only-check $C --check-link "$D/link_shm_np2.json" --check "2=$D/ring_np2_L${L}_shm.json"
    fi
    echo "#### L = $L, TCP"
    echo
    $M --only-check $C --check-link "$D/link_tcp_np2.json" --check "2=$D/ring_np2_L${L}_tcp.json"
  done
  echo "<!-- /scaling:check -->"
} > "$OUT/tables.md"
echo "tables: $OUT/tables.md"
# the blocks into the document, when it has them
DOC=${DOC:-$HERE/../docs/scaling.md}
if [ -f "$DOC" ]; then
  python3 - "$OUT/tables.md" "$DOC" <<'PY'
import re, sys
tables, doc = (open(p).read() for p in sys.argv[1:3])
for name in ("model", "check"):
    block = (r"<!-- scaling:%s \(bench/scaling_measure.sh writes this block\) -->.*?"
             r"<!-- /scaling:%s -->" % (name, name))
    m = re.search(block, tables, re.S)
    doc, n = re.subn(block, lambda _: m.group(0), doc, flags=re.S)
    if n != 1:
        sys.exit("%s: %d blocks named %s (expected 1)" % (sys.argv[2], n, name))
open(sys.argv[2], "w").write(doc)
PY
  echo "tables written into $DOC"
fi
