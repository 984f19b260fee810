#!/usr/bin/env bash
# Joins end to end through a real Kafka broker, beside S2 in the same run.
#
#   bash bench/joins-e2e.sh                       # 2,000,000 records, a 1,000,000-row table
#   bash bench/joins-e2e.sh --records N --table-rows M --partitions P
#
# In one run, on the same broker:
#   * S2 (GROUP BY trader_id, symbol over trades keyed by trader: one stage);
#   * an interval join of two trade topics (each trade meets the other
#     topic's trade of its symbol within ±1 s): both topics are read, both
#     go through the job's repartition topic keyed by symbol, and the join
#     runs after it;
#   * a stream–table join (latest): orders keyed by order_id enriched from a
#     compacted customers topic of M rows (`table: {primaryKey: [id]}`),
#     through the repartition topic keyed by the customer id;
# each `sluice-worker run --bounded` on 1 core, then on 2 (consume →
# decode → stage → repartition topic → join → encode → produce → commit),
# with the result count checked. Rates are source records per second (the
# interval join reads 2 N, the stream–table join N + M).
# The table is printed and written to bench/out/joins.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
RECORDS=2000000
TABLE_ROWS=1000000
PARTITIONS=4
while [ $# -gt 0 ]; do
  case "$1" in
    --records) RECORDS=$2; shift ;;
    --table-rows) TABLE_ROWS=$2; shift ;;
    --partitions) PARTITIONS=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT="$REPO/bench/out"
mkdir -p "$OUT"
source bench/lib.sh
bench_kafka
bench_python
bench_worker release
RUN="bench-joins-$(date +%s)"
$PY delete "$BOOTSTRAP" bench-joins- >&2
trap '$PY delete "$BOOTSTRAP" "$RUN" >&2 || true' EXIT
topic() { $PY topic "$BOOTSTRAP" "$@"; }

TRADES_A="$RUN-trades-a"; TRADES_B="$RUN-trades-b"; ORDERS="$RUN-orders"; CUSTOMERS="$RUN-customers"
topic "$TRADES_A" "$PARTITIONS"; topic "$TRADES_B" "$PARTITIONS"; topic "$ORDERS" "$PARTITIONS"
topic "$CUSTOMERS" "$PARTITIONS" cleanup.policy=compact
log "producing $RECORDS trades to each of two topics, $RECORDS orders"
for t in "$TRADES_A" "$TRADES_B"; do
  "$WORKER" datagen --scenario trades --records "$RECORDS" --bootstrap "$BOOTSTRAP" --topic "$t" \
    --key trader_id --timestamps event 2>&1 | tail -1 >&2
done
"$WORKER" datagen --scenario orders --records "$RECORDS" --bootstrap "$BOOTSTRAP" --topic "$ORDERS" \
  --key order_id 2>&1 | tail -1 >&2

TRADES_SCHEMA='      schema:
        columns:
          - { name: trader_id, type: string, required: true }
          - { name: symbol, type: string, required: true }
          - { name: price, type: double, required: true }
          - { name: quantity, type: bigint, required: true }
          - { name: trade_time, type: timestamp, required: true }
      eventTime: { column: trade_time, watermarkDelayMillis: 5000 }
      partitionKey: [trader_id]'
ORDERS_SCHEMA='      schema:
        columns:
          - { name: order_id, type: bigint, required: true }
          - { name: customer_id, type: bigint, required: true }
          - { name: order_date, type: string, required: true }
          - { name: total_amount, type: double, required: true }
      partitionKey: [order_id]'
job() { # name sql sources-yaml output
  cat <<EOF
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: $1
spec:
  sql: |
    $2
  sources:
$3
  sink:
    kafka: { bootstrapServers: "$BOOTSTRAP", topic: $4 }
  deadLetter:
    kafka: { bootstrapServers: "$BOOTSTRAP", topic: $4-dlq }
EOF
}

# The customers table, written by Sluice itself from generated orders: ids
# 0..M, each once, keyed by id (a compacted topic refuses records without
# a key; an aggregate's results are keyed by its group).
topic "$CUSTOMERS-dlq" 1
job customers "SELECT order_id AS id, MAX(CONCAT('customer ', CAST(order_id AS VARCHAR))) AS name, \
MAX(CASE WHEN order_id % 2 = 0 THEN 'gold' ELSE 'silver' END) AS tier FROM orders GROUP BY order_id" \
"    - name: orders
      datagen: { scenario: Orders, records: $TABLE_ROWS, partitions: $PARTITIONS }
$ORDERS_SCHEMA" "$CUSTOMERS" >"$OUT/joins-table.yaml"
log "producing the $TABLE_ROWS-row customers table"
"$WORKER" run -f "$OUT/joins-table.yaml" --bounded --cores 2 --group "$RUN-table" 2>&1 | grep -E 'done:|error' >&2

S2_SQL="SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM a GROUP BY trader_id, symbol"
INTERVAL_SQL="SELECT a.trader_id, a.symbol, a.price, b.price AS other_price FROM a JOIN b ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time + INTERVAL '1' SECOND"
TABLE_SQL="SELECT o.order_id, o.total_amount, c.name, c.tier FROM orders o LEFT JOIN customers c ON o.order_id = c.id"
source_a="    - name: a
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $TRADES_A }
$TRADES_SCHEMA"
source_b="    - name: b
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $TRADES_B }
$TRADES_SCHEMA"
source_orders="    - name: orders
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $ORDERS }
$ORDERS_SCHEMA"
source_customers="    - name: customers
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $CUSTOMERS }
      table: { primaryKey: [id] }
      schema:
        columns:
          - { name: id, type: bigint, required: true }
          - { name: name, type: string, required: true }
          - { name: tier, type: string }"

declare -A RATE1 RATE2 IN OUTS
NAMES=("S2" "interval join" "stream–table join")
for i in 0 1 2; do
  name=${NAMES[$i]}
  case $i in
    0) sql=$S2_SQL; sources=$source_a; expect_in=$RECORDS; expect_out="" ;;
    1) sql=$INTERVAL_SQL; sources="$source_a
$source_b"; expect_in=$((2 * RECORDS)); expect_out=$RECORDS ;;
    2) sql=$TABLE_SQL; sources="$source_orders
$source_customers"; expect_in=$((RECORDS + TABLE_ROWS)); expect_out=$RECORDS ;;
  esac
  for cores in 1 2; do
    out="$RUN-$i-out-$cores"
    topic "$out" "$PARTITIONS"; topic "$out-dlq" 1
    job "job-$i" "$sql" "$sources" "$out" >"$OUT/joins-$i.yaml"
    log "$name: sluice-worker run --bounded on $cores core(s)"
    summary=$("$WORKER" run -f "$OUT/joins-$i.yaml" --bounded --cores "$cores" --group "$RUN-$i-$cores" 2>&1 \
      | grep -E 'done:|error:' || true)
    echo "$summary" >&2
    rate=$(echo "$summary" | sed -n 's/.* \([0-9][0-9]*\) records\/s.*/\1/p')
    records_in=$(echo "$summary" | sed -n 's/.*records in: \([0-9]*\),.*/\1/p')
    records_out=$(echo "$summary" | sed -n 's/.*out: \([0-9]*\),.*/\1/p')
    [ "$records_in" = "$expect_in" ] || { echo "$name: read ${records_in:-?} records, expected $expect_in" >&2; exit 1; }
    if [ -n "$expect_out" ] && [ "$records_out" != "$expect_out" ]; then
      echo "$name: ${records_out:-?} results, expected $expect_out" >&2; exit 1
    fi
    if [ "$cores" = 1 ]; then RATE1[$name]=$rate; else RATE2[$name]=$rate; fi
    IN[$name]=$records_in; OUTS[$name]=$records_out
  done
done

{
  echo "Sluice joins end to end: $RECORDS stream records, a $TABLE_ROWS-row table, $PARTITIONS partitions, release, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| query | source records | results | 1 core (records/s) | 2 cores (records/s) | 2 cores / 1 core | 1 core ÷ S2's |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for name in "${NAMES[@]}"; do
    awk -v n="$name" -v i="${IN[$name]}" -v o="${OUTS[$name]}" -v r1="${RATE1[$name]}" -v r2="${RATE2[$name]}" \
      -v s="${RATE1[S2]}" 'BEGIN { printf "| %s | %d | %d | %d | %d | %.2f | %.2f |\n", n, i, o, r1, r2, r1 ? r2/r1 : 0, s ? r1/s : 0 }'
  done
} | tee "$OUT/joins.md"
