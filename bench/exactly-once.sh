#!/usr/bin/env bash
# Exactly once against at least once, end to end through a real Kafka
# broker, side by side in one run.
#
#   bash bench/exactly-once.sh                    # 2,000,000 records per scenario, release build
#   bash bench/exactly-once.sh --records N --partitions P --latency-rate R --latency-seconds S
#   bash bench/exactly-once.sh --latency-only ...   # part 2 alone
#
# In one run, on the same broker and input topics:
#   1. throughput: S2 (GROUP BY) and S3a (tumbling windows) by
#      `sluice-worker run --bounded` on 1 core and on 2, each with
#      `delivery: AtLeastOnce` and with `delivery: ExactlyOnce` (checkpoints
#      every 1 s, the default), results checked from the sink by a
#      read_committed reader;
#   2. latency as a consumer sees it: S0 at R records/s for S seconds in each
#      mode on 2 cores, a read_committed consumer noting when each result
#      became readable (`tools.py watch`), minus the input record's broker
#      append time. (The worker's own histogram stops at the broker's ack,
#      which comes before the commit that makes a result readable.)
# The table is printed and written to bench/out/exactly-once.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
RECORDS=2000000
PARTITIONS=4
LATENCY_RATE=20000
LATENCY_SECONDS=20
PROFILE=release
THROUGHPUT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --latency-only) THROUGHPUT="" ;;
    --records) RECORDS=$2; shift ;;
    --partitions) PARTITIONS=$2; shift ;;
    --latency-rate) LATENCY_RATE=$2; shift ;;
    --latency-seconds) LATENCY_SECONDS=$2; shift ;;
    --profile) PROFILE=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT="$REPO/bench/out"
mkdir -p "$OUT"
source bench/lib.sh
bench_kafka
bench_python
bench_worker "$PROFILE"
RUN="bench-eos-$(date +%s)"
$PY delete "$BOOTSTRAP" bench-eos- >&2
trap '$PY delete "$BOOTSTRAP" "$RUN" >&2 || true' EXIT
topic() { $PY topic "$BOOTSTRAP" "$@"; }

# An example manifest in delivery mode $4, pointed at this run's topics.
job() { # example input output delivery
  example_manifest "$1" "$2" "$3"
  printf '  delivery: %s\n' "$4"
}

declare -A RATE
MODES=(AtLeastOnce ExactlyOnce)
for s in ${THROUGHPUT:+"S2|s2-group-by.yaml" "S3a|s3a-tumbling.yaml"}; do
  IFS='|' read -r name example <<<"$s"
  input="$RUN-$name-in"
  topic "$input" "$PARTITIONS"
  log "$name: producing $RECORDS trades keyed by trader_id"
  "$WORKER" datagen --scenario trades --records "$RECORDS" --bootstrap "$BOOTSTRAP" --topic "$input" \
    --key trader_id --timestamps event 2>&1 | tail -1 >&2
  for cores in 1 2; do
    for mode in "${MODES[@]}"; do
      out="$RUN-$name-$mode-$cores"
      topic "$out" "$PARTITIONS"
      topic "$out-dlq" 1
      job "$example" "$input" "$out" "$mode" >"$OUT/eos-$name.yaml"
      log "$name: $mode on $cores core(s)"
      summary=$("$WORKER" run -f "$OUT/eos-$name.yaml" --bounded --cores "$cores" --group "$RUN-$name-$mode-$cores" 2>&1 \
        | grep -E 'done:' || true)
      echo "$summary" >&2
      records_in=$(echo "$summary" | sed -n 's/.*records in: \([0-9]*\),.*/\1/p')
      [ "$records_in" = "$RECORDS" ] || { echo "$name $mode: read ${records_in:-?} records, expected $RECORDS" >&2; exit 1; }
      $PY check "$BOOTSTRAP" "$out" --field trade_count --expect "$RECORDS" >&2
      RATE[$name-$mode-$cores]=$(echo "$summary" | sed -n 's/.* \([0-9][0-9]*\) records\/s.*/\1/p')
    done
  done
done

# --- latency as a consumer sees it -------------------------------------------------
declare -A LAT
COUNT=$(( LATENCY_RATE * LATENCY_SECONDS ))
for mode in "${MODES[@]}"; do
  lin="$RUN-lat-$mode-in"; lout="$RUN-lat-$mode-out"
  topic "$lin" "$PARTITIONS" message.timestamp.type=LogAppendTime
  topic "$lout" "$PARTITIONS"
  topic "$lout-dlq" 1
  job s0-pure-select.yaml "$lin" "$lout" "$mode" >"$OUT/eos-latency.yaml"
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  "$WORKER" run -f "$OUT/eos-latency.yaml" --cores 2 --http-port "$port" --group "$RUN-lat-$mode" \
    2>"$OUT/eos-latency-$mode.log" &
  worker_pid=$!
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  $PY watch "$BOOTSTRAP" "$lout" "$OUT/eos-seen-$mode.txt" --id order_id --seconds $(( LATENCY_SECONDS + 8 )) &
  watch_pid=$!
  log "latency: S0 $mode at $LATENCY_RATE records/s for ${LATENCY_SECONDS}s"
  "$WORKER" datagen --scenario orders --records "$COUNT" --rate "$LATENCY_RATE" --bootstrap "$BOOTSTRAP" \
    --topic "$lin" 2>&1 | tail -1 >&2
  wait "$watch_pid"
  kill -TERM "$worker_pid"
  wait "$worker_pid" || true
  LAT[$mode]=$($PY visible-latency "$BOOTSTRAP" "$lin" "$OUT/eos-seen-$mode.txt" --id order_id)
  log "$mode: ${LAT[$mode]}"
done
field() { echo "$1" | python3 -c "import json,sys; v=json.load(sys.stdin).get('$2'); print('-' if v is None else v)"; }

{
  echo "Exactly once vs at least once: $RECORDS records per scenario, $PARTITIONS partitions, profile $PROFILE, checkpoints every 1 s, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| scenario | cores | AtLeastOnce (records/s) | ExactlyOnce (records/s) | ExactlyOnce / AtLeastOnce |"
  echo "|---|---:|---:|---:|---:|"
  for name in S2 S3a; do
    for cores in 1 2; do
      a=${RATE[$name-AtLeastOnce-$cores]:-0}; e=${RATE[$name-ExactlyOnce-$cores]:-0}
      awk -v n="$name" -v c="$cores" -v a="$a" -v e="$e" 'BEGIN { printf "| %s | %d | %d | %d | %.0f%% |\n", n, c, a, e, a ? 100*e/a : 0 }'
    done
  done
  echo
  echo "Latency as a read_committed consumer sees it (input append → result readable), S0 at $LATENCY_RATE records/s, 2 cores, ${LATENCY_SECONDS}s:"
  echo
  echo "| delivery | results | p50 (ms) | p99 (ms) | max (ms) |"
  echo "|---|---:|---:|---:|---:|"
  for mode in "${MODES[@]}"; do
    l=${LAT[$mode]}
    echo "| $mode | $(field "$l" records) | $(field "$l" p50_ms) | $(field "$l" p99_ms) | $(field "$l" max_ms) |"
  done
} | tee "$OUT/exactly-once.md"
