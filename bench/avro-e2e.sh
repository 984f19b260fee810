#!/usr/bin/env bash
# S2 end to end through the harness broker and Schema Registry: JSON in and
# out beside Avro in and out, the same records, the same run.
#
#   bash bench/avro-e2e.sh                      # 2,000,000 trades, 4 partitions, release build
#   bash bench/avro-e2e.sh --records N --partitions P --profile dev
#
# 1. `sluice-worker datagen --scenario trades --key trader_id` writes N
#    trades as JSON (the seeds' S2 input, keyed by trader);
# 2. bench/avro_copy.py (confluent-kafka's AvroSerializer, the schema
#    registered under `<topic>-value`) copies each record into an Avro topic:
#    the same partition, key and timestamp, so both topics hold the same
#    trades partitioned alike;
# 3. manifests/examples/s2-group-by.yaml runs `--bounded` on 1 core and on
#    2 over each: JSON → JSON, then `format: avro` with `sink.format: avro`
#    (results registered as Avro, keys JSON in both);
# and prints one table (also bench/out/avro-e2e.md): records/s as the
# worker reports them (consume → decode → engine → encode → produce →
# commit), Avro ÷ JSON.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORDS=2000000
PARTITIONS=4
PROFILE=release
while [ $# -gt 0 ]; do
  case "$1" in
    --records) RECORDS=$2; shift ;;
    --partitions) PARTITIONS=$2; shift ;;
    --profile) PROFILE=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=bench/out
mkdir -p "$OUT"
source bench/lib.sh
bench_kafka
bash tests/infra/registry.sh start >/dev/null
REGISTRY=$(bash tests/infra/registry.sh url)
bench_python
bash tests/infra/tools.sh python-clients >/dev/null
CLIENTS=$(bash tests/infra/tools.sh path python-clients)
bench_worker "$PROFILE"
RUN="avro-bench-$(date +%s)"
$PY delete "$BOOTSTRAP" avro-bench- >&2
trap '$PY delete "$BOOTSTRAP" "$RUN" >&2 || true' EXIT

$PY topic "$BOOTSTRAP" "$RUN-json" "$PARTITIONS"
$PY topic "$BOOTSTRAP" "$RUN-avro" "$PARTITIONS"
log "producing $RECORDS trades as JSON, keyed by trader"
"$WORKER" datagen --scenario trades --records "$RECORDS" --bootstrap "$BOOTSTRAP" --topic "$RUN-json" \
  --key trader_id --timestamps event 2>&1 | tail -1 >&2
log "copying them into Avro (confluent-kafka's AvroSerializer)"
"$CLIENTS" bench/avro_copy.py "$BOOTSTRAP" "$REGISTRY" "$RUN-json" "$RUN-avro" >&2

declare -A RATE
for format in json avro; do
  for cores in 1 2; do
    out="$RUN-$format-out-$cores"
    $PY topic "$BOOTSTRAP" "$out" "$PARTITIONS"
    $PY topic "$BOOTSTRAP" "$out-dlq" 1
    example_manifest s2-group-by.yaml "$RUN-$format" "$out" >"$OUT/s2-$format.yaml"
    if [ "$format" = avro ]; then
      sed -i -e 's|^    - name: market_data$|    - name: market_data\n      format: avro|' \
        -e "s|^  sink:$|  schemaRegistry: { url: \"$REGISTRY\" }\n  sink:\n    format: avro|" "$OUT/s2-$format.yaml"
    fi
    log "S2 $format → $format on $cores core(s)"
    summary=$("$WORKER" run -f "$OUT/s2-$format.yaml" --bounded --cores "$cores" --group "$RUN-$format-$cores" 2>&1 |
      grep 'done:' || true)
    echo "$summary" >&2
    records_in=$(sed -n 's/.*records in: \([0-9]*\),.*/\1/p' <<<"$summary")
    [ "$records_in" = "$RECORDS" ] || { echo "S2 $format: read ${records_in:-?} records, expected $RECORDS" >&2; exit 1; }
    grep -q 'dead-lettered: 0' <<<"$summary" || { echo "S2 $format: dead letters" >&2; exit 1; }
    RATE[$format-$cores]=$(sed -n 's/.* \([0-9][0-9]*\) records\/s.*/\1/p' <<<"$summary")
  done
done
{
  echo "S2 end to end, JSON vs Avro in and out: $RECORDS trades in $PARTITIONS partitions, profile $PROFILE, $(nproc) cores, one run each ($(date -u +%Y-%m-%d))"
  echo
  echo "| cores | JSON → JSON (records/s) | Avro → Avro (records/s) | Avro ÷ JSON |"
  echo "|---:|---:|---:|---:|"
  for cores in 1 2; do
    awk -v c="$cores" -v j="${RATE[json-$cores]}" -v a="${RATE[avro-$cores]}" \
      'BEGIN {printf "| %d | %d | %d | %.2f |\n", c, j, a, a / j}'
  done
} | tee "$OUT/avro-e2e.md"
