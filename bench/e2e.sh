#!/usr/bin/env bash
# End-to-end benchmark through a real Kafka broker, against librdkafka's own limit.
#
#   bash bench/e2e.sh                 # 5,000,000 records per scenario, release build
#   bash bench/e2e.sh --smoke         # 100,000 records, debug build: proves it works (CI)
#   bash bench/e2e.sh --records N --partitions P --latency-seconds S
#   bash bench/e2e.sh --scenarios S0,S2 --latency-rate R   # a subset; latency at R records/s
#   bash bench/e2e.sh ... --latency-checkpoint-millis MS    # the latency job's checkpoint interval
#
# In one run, on the same broker and topics:
#   1. rdkafka_performance produces N records of 100 bytes and consumes each
#      scenario topic (all partitions assigned): the physical limit;
#   2. sluice-worker run --bounded for each seed scenario on 1 core, then on
#      2 cores (consume → decode → engine → encode → produce → commit), with
#      peak RSS; results are checked for correct counts from the sink topic;
#   3. latency: S0 at half the 2-core throughput measured above, p50/p99/max
#      from the worker's histogram, cross-checked from the broker's
#      timestamps (result LogAppendTime − input LogAppendTime), next to
#      librdkafka's own produce → consume latency at the same rate;
# and prints one table (also written to bench/out/results.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
RECORDS=5000000
PARTITIONS=4
LATENCY_SECONDS=20
PROFILE=release
ONLY=""
LATENCY_RATE=""
CHECKPOINT_MILLIS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) RECORDS=100000; LATENCY_SECONDS=4; PROFILE=dev ;;
    --records) RECORDS=$2; shift ;;
    --partitions) PARTITIONS=$2; shift ;;
    --latency-seconds) LATENCY_SECONDS=$2; shift ;;
    --profile) PROFILE=$2; shift ;;
    --scenarios) ONLY=",$2,"; shift ;;
    --latency-rate) LATENCY_RATE=$2; shift ;;
    --latency-checkpoint-millis) CHECKPOINT_MILLIS=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT="$REPO/bench/out"
mkdir -p "$OUT"
source bench/lib.sh

# Tools: the broker, rdkafka_performance, GNU time, the Python Kafka client.
bench_kafka
bash tests/infra/tools.sh rdkafka-perf
PERF=$(bash tests/infra/tools.sh path rdkafka-perf)
[ -x /usr/bin/time ] || { source tests/infra/lib.sh; apt_install time; }
bench_python
bench_worker "$PROFILE"
RUN="bench-$(date +%s)"
# Topics of earlier runs go first; this run's go when it ends.
$PY delete "$BOOTSTRAP" bench- >&2
trap '$PY delete "$BOOTSTRAP" "$RUN" >&2 || true' EXIT

# --- the physical limit -------------------------------------------------------
topic() { $PY topic "$BOOTSTRAP" "$@"; }
rate_of() { sed -n 's/.* \([0-9][0-9]*\) msgs\/s.*/\1/p' | tail -1; }
topic "$RUN-raw" "$PARTITIONS"
log "rdkafka_performance: producing $RECORDS messages of 100 bytes"
PRODUCE_LIMIT=$("$PERF" -P -t "$RUN-raw" -b "$BOOTSTRAP" -s 100 -c "$RECORDS" -q -X linger.ms=5 -X batch.size=1000000 2>&1 | rate_of)

# --- scenarios ------------------------------------------------------------------
#   name      example file                     datagen     key        check field / mode
SCENARIOS=(
  "S0|s0-pure-select.yaml|orders||count"
  "S1|s1-rows-window.yaml|market-data|symbol|count"
  "S2|s2-group-by.yaml|trades|trader_id|trade_count"
  "S2r|s2r-group-by-symbol.yaml|trades|trader_id|trade_count"
  "S3a|s3a-tumbling.yaml|trades|trader_id|trade_count"
  "S3b|s3b-tumbling-emit-changes.yaml|trades|trader_id|trade_count"
)


# rdkafka_performance arguments assigning every partition.
assigned() { for p in $(seq 0 $((PARTITIONS - 1))); do echo -p "$p"; done; }

declare -A INPUT CONSUME RATE1 RATE2 RSS
for s in "${SCENARIOS[@]}"; do
  IFS='|' read -r name example scenario key field <<<"$s"
  [ -z "$ONLY" ] || [[ "$ONLY" == *",$name,"* ]] || continue
  input="$RUN-$name-in"
  INPUT[$name]=$input
  topic "$input" "$PARTITIONS"
  log "$name: producing $RECORDS $scenario records${key:+ keyed by $key}"
  "$WORKER" datagen --scenario "$scenario" --records "$RECORDS" --bootstrap "$BOOTSTRAP" --topic "$input" \
    ${key:+--key "$key"} --timestamps event 2>&1 | tail -1 >&2
  CONSUME[$name]=$("$PERF" -C -t "$input" $(assigned) \
    -b "$BOOTSTRAP" -o beginning -c "$RECORDS" -q 2>&1 | rate_of)
  for cores in 1 2; do
    out="$RUN-$name-out-$cores"
    topic "$out" "$PARTITIONS"
    topic "$out-dlq" 1
    example_manifest "$example" "$input" "$out" >"$OUT/$name.yaml"
    log "$name: sluice-worker run --bounded on $cores core(s)"
    summary=$(/usr/bin/time -f 'peak-rss-kb %M' "$WORKER" run -f "$OUT/$name.yaml" --bounded --cores "$cores" \
      --group "$RUN-$name-$cores" 2>&1 | grep -E 'done:|peak-rss-kb' || true)
    echo "$summary" >&2
    rate=$(echo "$summary" | sed -n 's/.* \([0-9][0-9]*\) records\/s.*/\1/p')
    records_in=$(echo "$summary" | sed -n 's/.*records in: \([0-9]*\),.*/\1/p')
    [ "$records_in" = "$RECORDS" ] || { echo "$name: read ${records_in:-?} records, expected $RECORDS" >&2; exit 1; }
    if [ "$field" = count ]; then
      records_out=$(echo "$summary" | sed -n 's/.*out: \([0-9]*\),.*/\1/p')
      [ "$records_out" = "$RECORDS" ] || { echo "$name: produced ${records_out:-?} results, expected $RECORDS" >&2; exit 1; }
    else
      $PY check "$BOOTSTRAP" "$out" --field "$field" --expect "$RECORDS" >&2
    fi
    if [ "$cores" = 1 ]; then RATE1[$name]=$rate; else RATE2[$name]=$rate; fi
    rss=$(echo "$summary" | sed -n 's/peak-rss-kb \([0-9]*\)/\1/p')
    RSS[$name]=$(( ${RSS[$name]:-0} > rss ? ${RSS[$name]:-0} : rss ))
  done
done

# --- latency at half of saturation -------------------------------------------
HALF=${LATENCY_RATE:-$(( ${RATE2[S0]:-0} / 2 ))}
[ "$HALF" -gt 0 ] || { echo "no S0 rate to take half of: run S0 or pass --latency-rate" >&2; exit 2; }
COUNT=$(( HALF * LATENCY_SECONDS ))
log "latency: S0 at $HALF records/s (half of the 2-core rate) for ${LATENCY_SECONDS}s"
# The floor under any Kafka-to-Kafka job on this box: librdkafka alone,
# rdkafka_performance producing at the same rate with the sink's settings
# (linger 1 ms, acks=all) while another instance consumes (-l: send →
# receive per message; it reports the average and the maximum, no p99).
topic "$RUN-lat-raw" "$PARTITIONS"
timeout $(( LATENCY_SECONDS * 3 + 30 )) "$PERF" -C -t "$RUN-lat-raw" $(assigned) -b "$BOOTSTRAP" -o end -l -u \
  -c "$COUNT" >"$OUT/latency-raw.log" 2>&1 &
raw_pid=$!
sleep 2
"$PERF" -P -t "$RUN-lat-raw" -b "$BOOTSTRAP" -l -r "$HALF" -c "$COUNT" -s 100 -X linger.ms=1 -X acks=all \
  >/dev/null 2>&1
wait "$raw_pid" || true
# The last row of its table: lat_avg and lat_hi (ms) are columns 11 and 13.
RAW_LAT=$(awk -F'|' '$2 ~ /^ *[0-9]+ *$/ && $3 + 0 > 0 { avg = $11; hi = $13 }
  END { gsub(/ /, "", avg); gsub(/ /, "", hi); print (avg == "" ? "-" : avg), (hi == "" ? "-" : hi) }' "$OUT/latency-raw.log")
log "rdkafka_performance alone (avg, max ms): $RAW_LAT"
lin="$RUN-lat-in"; lout="$RUN-lat-out"
# Both topics stamp records when the broker appends them, so latency runs
# from the moment an input record is in Kafka to the moment its result is:
# the load generator's own client-side batching is not Sluice's latency.
topic "$lin" "$PARTITIONS" message.timestamp.type=LogAppendTime
topic "$lout" "$PARTITIONS" message.timestamp.type=LogAppendTime
topic "$lout-dlq" 1
example_manifest s0-pure-select.yaml "$lin" "$lout" >"$OUT/latency.yaml"
if [ -n "$CHECKPOINT_MILLIS" ]; then
  printf '  engine:\n    checkpointIntervalMillis: %s\n' "$CHECKPOINT_MILLIS" >>"$OUT/latency.yaml"
fi
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$WORKER" run -f "$OUT/latency.yaml" --cores 2 --http-port "$port" --group "$RUN-lat" 2>"$OUT/latency-worker.log" &
worker_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
"$WORKER" datagen --scenario orders --records "$COUNT" --rate "$HALF" --bootstrap "$BOOTSTRAP" --topic "$lin" 2>&1 | tail -1 >&2
sleep 2
curl -sf "http://127.0.0.1:$port/metrics" >"$OUT/latency-metrics.txt"
kill -TERM "$worker_pid"
wait "$worker_pid" || true
WORKER_LAT=$($PY quantiles "$OUT/latency-metrics.txt" sluice_end_to_end_latency_seconds)
BROKER_LAT=$($PY latency "$BOOTSTRAP" "$lin" "$lout" --id order_id)
log "worker histogram: $WORKER_LAT"
log "broker timestamps: $BROKER_LAT"
field() { echo "$1" | python3 -c "import json,sys; v=json.load(sys.stdin).get('$2'); print('-' if v is None else v)"; }

# --- the table -------------------------------------------------------------------
{
  echo "Sluice end-to-end benchmark: $RECORDS records per scenario, $PARTITIONS partitions, profile $PROFILE, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "rdkafka_performance produce: ${PRODUCE_LIMIT} msgs/s (100-byte messages)"
  echo
  echo "| scenario | rdkafka_performance consume (msgs/s) | Sluice 1 core (records/s) | vs consume | Sluice 2 cores (records/s) | vs consume | 2 cores / 1 core | peak RSS (MB) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  for s in "${SCENARIOS[@]}"; do
    IFS='|' read -r name _ <<<"$s"
    [ -n "${RATE1[$name]:-}" ] || continue
    c=${CONSUME[$name]:-0}; r1=${RATE1[$name]:-0}; r2=${RATE2[$name]:-0}
    awk -v n="$name" -v c="$c" -v r1="$r1" -v r2="$r2" -v rss="${RSS[$name]:-0}" 'BEGIN {
      printf "| %s | %d | %d | %.0f%% | %d | %.0f%% | %.2f | %.0f |\n", n, c, r1, c ? 100*r1/c : 0, r2, c ? 100*r2/c : 0, r1 ? r2/r1 : 0, rss/1024 }'
  done
  echo
  if [ -n "$LATENCY_RATE" ]; then how="as given"; else how="half of its 2-core rate"; fi
  echo "Latency, S0 at $HALF records/s ($how), ${LATENCY_SECONDS}s:"
  echo
  echo "| measured by | p50 (ms) | p99 (ms) | max (ms) |"
  echo "|---|---:|---:|---:|"
  echo "| worker histogram (input append → sink ack; bucket upper bounds) | $(field "$WORKER_LAT" p50_ms) | $(field "$WORKER_LAT" p99_ms) | - |"
  echo "| broker timestamps (result LogAppendTime − input LogAppendTime) | $(field "$BROKER_LAT" p50_ms) | $(field "$BROKER_LAT" p99_ms) | $(field "$BROKER_LAT" max_ms) |"
  echo "| librdkafka alone, same rate: rdkafka_performance -l (send → receive; average in the p50 column, no p99) | avg ${RAW_LAT% *} | - | ${RAW_LAT#* } |"
} | tee "$OUT/results.md"
