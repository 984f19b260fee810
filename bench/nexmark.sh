#!/usr/bin/env bash
# Nexmark in the engine: each query of manifests/nexmark/ that Sluice runs,
# over the built-in generator, beside the per-core figures Feldera and Flink
# publish (measured the same way: in-process generator → engine → discard).
#
#   bash bench/nexmark.sh                       # 10,000,000 events, release build, 1 core
#   bash bench/nexmark.sh --events N --cores C --queries q0,q5
#   bash bench/nexmark.sh --smoke               # 200,000 events, debug build: proves it works
#                                               # (fails if a query fails or writes no row)
#   bash bench/nexmark.sh --broker [--events N] # end to end through the harness broker, 1 and 2 cores
#
# For each query: its manifest with every Kafka source replaced by the
# generator's source of that event kind (the kinds' shares of N events:
# people 1/50, auctions 3/50, bids 46/50; 4 simulated partitions, people and
# auctions keyed by id, bids round-robin, as docs/benchmarks.md describes)
# and the sink by /dev/null (q13's side input by a file of 10,000 rows read
# as a table), run with `sluice-worker run --bounded --cores C`.
# The rate is the records the query read per second (a bid-only query reads
# only the bids: it is not credited for the people and auctions it did not
# have to generate), per core; peak RSS from GNU time. Each query runs
# three times, the median is reported; peak state is the engine's own
# account (the `sluice_state_bytes` gauge's peak, summed over cores). The
# table goes to stdout and to bench/out/nexmark.md.
#
# --broker: the events are produced once to three topics of the harness
# broker (4 partitions; people and auctions keyed by id, bids unkeyed;
# record timestamps = event times) with q13's side input (10,000 rows, a
# compacted topic read as a table), rdkafka_performance consumes the bid
# topic (the physical limit: 92 % of every query's input), then each query
# runs `sluice-worker run --bounded` from the topics to a sink topic on 1
# core, then on 2: consume → decode → engine → encode → produce → commit.
# One run each (the events are read from Kafka, not generated). Table in
# bench/out/nexmark-broker.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EVENTS=10000000
CORES=1
PROFILE=release
ONLY=""
BROKER=""
SMOKE=""
SMOKE_FAILED=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) EVENTS=200000; PROFILE=dev; SMOKE=1 ;;
    --events) EVENTS=$2; shift ;;
    --cores) CORES=$2; shift ;;
    --queries) ONLY=",$2,"; shift ;;
    --profile) PROFILE=$2; shift ;;
    --broker) BROKER=1 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
source bench/lib.sh
[ -x /usr/bin/time ] || { source tests/infra/lib.sh; apt_install time; }
bench_worker "$PROFILE"
OUT=bench/out
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Published per-core figures (K events/s): Feldera's in bench/lib.sh
# (FELDERA_PER_CORE); Flink's 16-core figures divided by 16, as issue 16
# gives them.
declare -A FLINK=([q0]=165 [q1]=163 [q2]=195 [q3]=127 [q4]=31 [q5]=41 [q7]=18 [q8]=131 [q9]=13 [q11]=34
  [q12]=125 [q13]=98 [q14]=137 [q15]=57 [q16]=15 [q17]=107 [q18]=32 [q19]=63 [q20]=17 [q21]=77 [q22]=95)

PEOPLE=$((EVENTS / 50)); AUCTIONS=$((EVENTS * 3 / 50)); BIDS=$((EVENTS * 46 / 50))
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
kilo() { awk -v v="$1" 'BEGIN {printf "%.0f K", v / 1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == "") print "–"; else printf "%.1f×", a / (b * 1000)}'; }

selected() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }
mib() { awk -v b="$1" 'BEGIN {printf "%.0f MiB", b / 1024}'; }
# The run summary's peak state, "N MiB" (or – for a stateless query).
state_of() { sed -n 's/.*peak state: \([0-9.]*\) MiB.*/\1/p' <<<"$1" | awk '{ if ($1 + 0 > 0) printf "%.1f MiB", $1; else print "–" }'; }

if [ -n "$BROKER" ]; then
  bench_kafka
  bash tests/infra/tools.sh rdkafka-perf
  PERF=$(bash tests/infra/tools.sh path rdkafka-perf)
  bench_python
  RUN="nexmark-$(date +%s)"
  $PY delete "$BOOTSTRAP" nexmark- >&2
  trap '$PY delete "$BOOTSTRAP" "$RUN" >&2 || true; rm -rf "$TMP"' EXIT
  # q13's side input: 10,000 rows keyed 0..9999, a compacted topic read as a table.
  $PY topic "$BOOTSTRAP" "$RUN-side-input" 4 cleanup.policy=compact
  $PY side-input "$BOOTSTRAP" "$RUN-side-input" 10000
  for kind in person:$PEOPLE:id auction:$AUCTIONS:id bid:$BIDS:; do
    IFS=: read -r name count key <<<"$kind"
    $PY topic "$BOOTSTRAP" "$RUN-$name" 4
    log "producing $count nexmark-$name events${key:+ keyed by $key}"
    "$WORKER" datagen --scenario "nexmark-$name" --records "$count" --bootstrap "$BOOTSTRAP" --topic "$RUN-$name" \
      ${key:+--key "$key"} --timestamps event 2>&1 | tail -1 >&2
  done
  CONSUME=$("$PERF" -C -t "$RUN-bid" -p 0 -p 1 -p 2 -p 3 -b "$BOOTSTRAP" -o beginning -c "$BIDS" -q 2>&1 |
    sed -n 's/.* \([0-9][0-9]*\) msgs\/s.*/\1/p' | tail -1)
  {
    echo "Nexmark through the broker: $EVENTS events ($BIDS bids) in 4-partition topics, profile $PROFILE, $(nproc) cores, one run each ($(date -u +%Y-%m-%d))"
    echo
    echo "rdkafka_performance consumes the bid topic at $CONSUME msgs/s (1 process, all partitions)."
    echo
    echo "| query | records read | 1 core (records/s) | vs consume | 2 cores (records/s) | vs consume | 2 / 1 | output rows | peak RSS | peak state |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  } | tee "$OUT/nexmark-broker.md"
  for q in $(seq 0 22); do
    q="q$q"
    selected "$q" || continue
    why=$(nexmark_skip_reason "$q")
    if [ -n "$why" ]; then
      echo "| $q | $why | | | | | | | | |" | tee -a "$OUT/nexmark-broker.md"
      continue
    fi
    declare -A R=(); rss=0; line=""
    for cores in 1 2; do
      out="$RUN-$q-out-$cores"
      $PY topic "$BOOTSTRAP" "$out" 4
      sed -e "s|kafka:9092|$BOOTSTRAP|g" -e "s#topic: nexmark-\(person\|auction\|bid\|side-input\) }#topic: $RUN-\1 }#" \
        -e "s|topic: nexmark-$q }|topic: $out }|" "manifests/nexmark/$q.yaml" >"$TMP/$q.yaml"
      printf '  engine: { stateMemoryLimit: 8Gi }\n' >>"$TMP/$q.yaml"
      if ! /usr/bin/time -f '%M' -o "$TMP/rss" "$WORKER" run -f "$TMP/$q.yaml" --bounded --cores "$cores" \
        --group "$RUN-$q-$cores" >/dev/null 2>"$TMP/err"; then
        R[$cores]=failed; continue
      fi
      line=$(grep 'sluice-worker: done' "$TMP/err")
      R[$cores]=$(sed -n 's/.*, \([0-9]*\) records\/s.*/\1/p' <<<"$line")
      rss=$(( $(cat "$TMP/rss") > rss ? $(cat "$TMP/rss") : rss ))
      state=$(state_of "$line")
    done
    if [ "${R[1]}" = failed ] || [ "${R[2]}" = failed ]; then
      echo "| $q | failed: $(grep 'sluice-worker: error' "$TMP/err" | tail -1 | sed 's/|/\\|/g') | | | | | | | | |" | tee -a "$OUT/nexmark-broker.md"
      continue
    fi
    read_records=$(sed -n 's/.*records in: \([0-9]*\),.*/\1/p' <<<"$line")
    out_rows=$(sed -n 's/.*out: \([0-9]*\),.*/\1/p' <<<"$line")
    awk -v q="$q" -v n="$read_records" -v c="$CONSUME" -v r1="${R[1]}" -v r2="${R[2]}" -v o="$out_rows" \
      -v rss="$(mib "$rss")" -v st="$state" 'BEGIN {
      printf "| %s | %d | %d | %.0f%% | %d | %.0f%% | %.2f | %d | %s | %s |\n", q, n, r1, c ? 100*r1/c : 0, r2, c ? 100*r2/c : 0, r1 ? r2/r1 : 0, o, rss, st }' |
      tee -a "$OUT/nexmark-broker.md"
  done
  exit 0
fi

nexmark_side_input "$TMP/side-input.json"

{
  echo "Nexmark in the engine: $EVENTS events, $CORES core(s), profile $PROFILE, median of 3 runs ($(date -u +%Y-%m-%d))"
  echo
  echo "| query | records read | records/s per core | Feldera per core | vs Feldera | Flink per core | vs Flink | output rows | peak RSS | peak state |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} | tee "$OUT/nexmark.md"
for q in $(seq 0 22); do
  q="q$q"
  selected "$q" || continue
  manifest="manifests/nexmark/$q.yaml"
  why=$(nexmark_skip_reason "$q")
  if [ -n "$why" ]; then
    echo "| $q | $why | | ${FELDERA_PER_CORE[$q]:-–} K | | ${FLINK[$q]:-–} K | | | | |" | tee -a "$OUT/nexmark.md"
    continue
  fi
  nexmark_engine_manifest "$q" "$EVENTS" 4 "$TMP/side-input.json" >"$TMP/$q.yaml"
  rates=(); rss=(); line=""; failed=""
  for _ in 1 2 3; do
    if ! /usr/bin/time -f '%M' -o "$TMP/rss" "$WORKER" run -f "$TMP/$q.yaml" --bounded --cores "$CORES" >/dev/null 2>"$TMP/err"; then
      # A worker killed without an error line (a signal, the OOM killer)
      # still fails the query, not the script.
      failed=$(grep 'sluice-worker: error' "$TMP/err" | tail -1 | sed 's/|/\\|/g' || true)
      failed=${failed:-see the log}
      break
    fi
    line=$(grep 'sluice-worker: done' "$TMP/err")
    rates+=("$(sed -n 's/.*, \([0-9]*\) records\/s.*/\1/p' <<<"$line")")
    rss+=("$(cat "$TMP/rss")")
  done
  if [ -n "$failed" ]; then
    echo "| $q | failed: $failed | | ${FELDERA_PER_CORE[$q]:-–} K | | ${FLINK[$q]:-–} K | | | | |" | tee -a "$OUT/nexmark.md"
    SMOKE_FAILED+=" $q"
    continue
  fi
  read_records=$(sed -n 's/.*records in: \([0-9]*\),.*/\1/p' <<<"$line")
  out_rows=$(sed -n 's/.*out: \([0-9]*\),.*/\1/p' <<<"$line")
  [ "${out_rows:-0}" -gt 0 ] || SMOKE_FAILED+=" $q(no rows)"
  rate=$(printf '%s\n' "${rates[@]}" | median)
  per_core=$((rate / CORES))
  peak=$(printf '%s\n' "${rss[@]}" | median)
  echo "| $q | $read_records | $(kilo "$per_core") | ${FELDERA_PER_CORE[$q]:-–} K | $(ratio "$per_core" "${FELDERA_PER_CORE[$q]:-}") | ${FLINK[$q]:-–} K | $(ratio "$per_core" "${FLINK[$q]:-}") | $out_rows | $((peak / 1024)) MiB | $(state_of "$line") |" | tee -a "$OUT/nexmark.md"
done
if [ -n "$SMOKE" ] && [ -n "$SMOKE_FAILED" ]; then
  echo "nexmark smoke: failed:$SMOKE_FAILED" >&2
  exit 1
fi
