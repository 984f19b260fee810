#!/usr/bin/env bash
# Nexmark scaling in the engine: each query at 1, 2, 4, 8 and 16 cores,
# weak scaling (the events grow with the cores, so perfect scaling keeps
# the per-core rate constant), beside Feldera's published 16-core totals.
#
#   bash bench/scaling.sh                               # 1,2,4,8,16 cores (those this machine has)
#   bash bench/scaling.sh --cores 1,2 --queries q15     # issue 37's 2-core check of q15
#   bash bench/scaling.sh --events-per-core N --partitions P --runs R
#   SLUICE_WORKER_BIN=path bash bench/scaling.sh        # a binary built elsewhere (no cargo)
#
# Each query's manifest is run with `sluice-worker run --bounded --cores C`
# over the built-in generator (bench/lib.sh `nexmark_engine_manifest`:
# N = events-per-core × C events, shared by kind as the reference does,
# P simulated partitions per source, 16 by default so that 16 cores own
# one each), sink /dev/null. The rate is the records the query read per
# second (the run summary's figure); a run is repeated R times (1 by
# default) and the median kept. The speed-up is the C-core total over the
# 1-core total; "vs Feldera" is the largest C's total over Feldera's
# 16-core total (feldera/feldera benchmark/README.md). Core counts above
# what the machine has are skipped. Table to stdout and bench/out/scaling.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CORE_LIST=1,2,4,8,16
PER_CORE=2000000
PARTITIONS=16
RUNS=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) CORE_LIST=$2; shift ;;
    --events-per-core) PER_CORE=$2; shift ;;
    --partitions) PARTITIONS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --queries) ONLY=",$2,"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
source bench/lib.sh
bench_worker release
OUT=${BENCH_OUT:-bench/out}
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
nexmark_side_input "$TMP/side-input.json"

CORES=()
for c in ${CORE_LIST//,/ }; do
  if [ "$c" -le "$(nproc)" ]; then CORES+=("$c"); else log "skipping $c cores: this machine has $(nproc)"; fi
done
LAST=${CORES[-1]}
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
selected() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

{
  echo "Nexmark weak scaling in the engine: $PER_CORE events per core, $PARTITIONS partitions per source, median of $RUNS run(s), $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(date -u +%Y-%m-%d)"
  echo
  printf '| query |'; for c in "${CORES[@]}"; do printf ' %s core(s) |' "$c"; done
  printf ' per core at %s | %s / 1 | Feldera 16 cores | vs Feldera |\n' "$LAST" "$LAST"
  printf '|---|'; for _ in "${CORES[@]}"; do printf -- '---:|'; done; printf -- '---:|---:|---:|---:|\n'
} | tee "$OUT/scaling.md"
for q in $(seq 0 22); do
  q="q$q"
  selected "$q" || continue
  [ -z "$(nexmark_skip_reason "$q")" ] || continue
  declare -A R=()
  row="| $q |"
  for c in "${CORES[@]}"; do
    nexmark_engine_manifest "$q" $((PER_CORE * c)) "$PARTITIONS" "$TMP/side-input.json" >"$TMP/$q.yaml"
    rates=()
    for _ in $(seq "$RUNS"); do
      if ! "$WORKER" run -f "$TMP/$q.yaml" --bounded --cores "$c" >/dev/null 2>"$TMP/err"; then
        rates=(); break
      fi
      rates+=("$(sed -n 's/.*sluice-worker: done.*, \([0-9]*\) records\/s.*/\1/p' "$TMP/err")")
    done
    if [ ${#rates[@]} -eq 0 ]; then
      R[$c]=0
      row+=" failed: $(grep 'sluice-worker: error' "$TMP/err" | tail -1 | sed 's/|/\\|/g') |"
      continue
    fi
    R[$c]=$(printf '%s\n' "${rates[@]}" | median)
    row+=$(awk -v r="${R[$c]}" 'BEGIN {printf " %.2f M |", r / 1e6}')
  done
  row+=$(awk -v r="${R[$LAST]}" -v one="${R[1]:-0}" -v c="$LAST" -v f="${FELDERA_PER_CORE[$q]:+$((FELDERA_PER_CORE[$q] * 16))}" 'BEGIN {
    up = (one > 0) ? sprintf("%.1f×", r / one) : "–"
    total = (f == "") ? "–" : sprintf("%.2f M", f / 1000)
    vs = (f == "") ? "–" : sprintf("%.2f×", r / (f * 1000))
    printf " %.2f M | %s | %s | %s |", r / c / 1e6, up, total, vs }')
  echo "$row" | tee -a "$OUT/scaling.md"
  unset R
done
