#!/usr/bin/env bash
# Checkpoint bytes against state size, and restore time, through the real broker.
#
#   bash bench/checkpoints.sh                        # 10, 100 and 1000 MiB of state, release build
#   bash bench/checkpoints.sh --sizes 10,100 --rate 5000 --seconds 20 [--hot H] [--profile dev] [--query table]
#
# For each state size S, on one partition and one core:
#   SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k
# or, with --query table, a stream enriched with the latest row of t, a
# table keyed by k (its state is the table; an update replaces a row):
#   SELECT s.k, t.v FROM s JOIN t ON s.k = t.k
# checkpointing every second (the default interval). Keys 0‥K are produced
# until the engine's state gauge (sluice_state_bytes) reads about S; then
# R updates per second for T seconds, of keys drawn uniformly over all K
# (or over the first H with --hot H). Reported: the bytes written to the
# state topic per checkpoint during the updates
# (sluice_state_written_bytes_total over sluice_checkpoints_total), against
# the state held and what building it wrote. At a fixed update rate, an
# incremental checkpoint's bytes stay flat as the state grows; a checkpoint
# of the whole state would grow with it. The worker keeps a copy of its
# checkpoints in a local directory (--state-dir, as a pod's volume). Then
# it is killed (SIGKILL) and restarted twice: once on its directory (the
# restore reads the copy), once with the directory wiped (the restore reads
# the state topic) — the time of each (sluice_state_restore_seconds) and
# its rate, side by side.
# The table is printed and written to bench/out/checkpoints.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
SIZES=10,100,1000
RATE=5000
SECONDS_UPDATING=20
HOT=0
PROFILE=release
QUERY=groupby
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --seconds) SECONDS_UPDATING=$2; shift ;;
    --hot) HOT=$2; shift ;;
    --profile) PROFILE=$2; shift ;;
    --query) QUERY=$2; shift ;;
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
RUN="bench-ckpt-$(date +%s)"
$PY delete "$BOOTSTRAP" bench-ckpt- >&2
WORKER_PID=""
cleanup() {
  [ -n "$WORKER_PID" ] && kill -9 "$WORKER_PID" 2>/dev/null || true
  $PY delete "$BOOTSTRAP" "$RUN" >&2 || true
}
trap cleanup EXIT

# Sum of a metric's series in the worker's /metrics.
metric() { # port name
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.0f\n", s }'
}
metric_float() { # port name
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.3f\n", s }'
}
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
start_worker() { # manifest group port log state-dir
  "$WORKER" run -f "$1" --cores 1 --http-port "$3" --group "$2" --state-dir "$5" 2>"$4" &
  WORKER_PID=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$3/readyz" >/dev/null && return; sleep 0.1; done
  echo "worker not ready; log: $4" >&2
  exit 1
}
# Waits until the worker has read `n` records and saved what they changed:
# a checkpoint follows within its 1 s interval (none does when nothing
# changed since, so the count of checkpoints cannot be waited on).
wait_caught_up() { # port n
  while [ "$(metric "$1" sluice_records_in_total)" -lt "$2" ]; do sleep 0.5; done
  sleep 2.5
}

ROWS=()
IFS=, read -ra SIZE_LIST <<<"$SIZES"
for size in "${SIZE_LIST[@]}"; do
  in="$RUN-$size-in"; out="$RUN-$size-out"; group="$RUN-$size"
  $PY topic "$BOOTSTRAP" "$in" 1
  $PY topic "$BOOTSTRAP" "$out" 1
  manifest="$OUT/checkpoints-$size.yaml"
  columns='        columns:
          - { name: k, type: bigint, required: true }
          - { name: v, type: bigint, required: true }'
  case "$QUERY" in
    groupby)
      sql="SELECT k, COUNT(*) AS n, SUM(v) AS total FROM t GROUP BY k"
      sources="    - name: t
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $in }
      schema:
$columns
      partitionKey: [k]" ;;
    table)
      $PY topic "$BOOTSTRAP" "$in-stream" 1
      sql="SELECT s.k, t.v FROM s JOIN t ON s.k = t.k"
      sources="    - name: s
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $in-stream }
      schema:
$columns
      partitionKey: [k]
    - name: t
      kafka: { bootstrapServers: \"$BOOTSTRAP\", topic: $in }
      table: { primaryKey: [k] }
      schema:
$columns" ;;
    *) echo "unknown query $QUERY (groupby or table)" >&2; exit 2 ;;
  esac
  cat >"$manifest" <<EOF
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: checkpoints-$size
spec:
  sql: $sql
  sources:
$sources
  sink:
    kafka: { bootstrapServers: "$BOOTSTRAP", topic: $out }
  engine:
    stateMemoryLimit: 16Gi
EOF
  state_dir="$OUT/checkpoints-$size-state"
  rm -rf "$state_dir"
  port=$(free_port)
  start_worker "$manifest" "$group" "$port" "$OUT/checkpoints-$size.log" "$state_dir"
  # Build: keys until the state gauge reads the size asked for.
  target=$(( size * 1024 * 1024 ))
  keys=0
  step=100000
  while :; do
    $PY keys "$BOOTSTRAP" "$in" --start "$keys" --end $(( keys + step ))
    keys=$(( keys + step ))
    wait_caught_up "$port" "$keys"
    held=$(metric "$port" sluice_state_bytes)
    [ "$held" -ge "$target" ] && break
    # Aim straight at the target from the bytes per key so far.
    step=$(( (target - held) / (held / keys + 1) + 1000 ))
  done
  built=$(metric "$port" sluice_state_written_bytes_total)
  build_checkpoints=$(metric "$port" sluice_checkpoints_total)
  log "S=$size MiB: $keys keys, $held bytes of state; building wrote $built bytes in $build_checkpoints checkpoints"
  # Updates at a fixed rate.
  w0=$built; c0=$build_checkpoints
  sent=$($PY updates "$BOOTSTRAP" "$in" --keys "$keys" --rate "$RATE" --seconds "$SECONDS_UPDATING" --hot "$HOT")
  wait_caught_up "$port" $(( keys + sent ))
  w1=$(metric "$port" sluice_state_written_bytes_total)
  c1=$(metric "$port" sluice_checkpoints_total)
  per=$(( (w1 - w0) / (c1 - c0) ))
  log "S=$size MiB: $sent updates wrote $(( w1 - w0 )) bytes in $(( c1 - c0 )) checkpoints: $per bytes per checkpoint"
  # Restore from the worker's directory, then (wiped) from the state topic.
  restored=()
  for from in volume topic; do
    kill -9 "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null || true
    [ "$from" = topic ] && rm -rf "$state_dir"
    port=$(free_port)
    start_worker "$manifest" "$group" "$port" "$OUT/checkpoints-$size-restore-$from.log" "$state_dir"
    while [ "$(metric "$port" sluice_state_restore_seconds_count)" -lt 1 ]; do sleep 0.2; done
    came=$(curl -sf "http://127.0.0.1:$port/metrics" | awk -v f="from=\"$from\"" 'index($1, "sluice_state_restores_total{") == 1 && index($1, f) { s += $2 } END { print s + 0 }')
    [ "$came" -ge 1 ] || { echo "the restore did not come from the $from" >&2; exit 1; }
    restore=$(metric_float "$port" sluice_state_restore_seconds_sum)
    read_bytes=$(sed 's/\x1b\[[0-9;]*m//g' "$OUT/checkpoints-$size-restore-$from.log" | grep 'restored state' \
      | grep -o 'bytes=[0-9]*' | head -1 | cut -d= -f2)
    restored+=("$restore|${read_bytes:-0}")
  done
  kill -TERM "$WORKER_PID"; wait "$WORKER_PID" 2>/dev/null || true
  WORKER_PID=""
  rm -rf "$state_dir"
  ROWS+=("$size|$keys|$held|$built|$per|$(( (w1 - w0) / SECONDS_UPDATING ))|${restored[0]}|${restored[1]}")
done

{
  echo "Checkpoint bytes against state size ($QUERY): one partition, one core, checkpoints every 1 s, $RATE updates/s for ${SECONDS_UPDATING}s $( [ "$HOT" -gt 0 ] && echo "of the first $HOT keys" || echo "uniform over all keys"), profile $PROFILE, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "| state asked (MiB) | keys | state held (MiB) | building wrote (MiB) | per checkpoint while updating (KiB) | per second (KiB) | per checkpoint ÷ state | restore from volume (s) | volume read (MiB) | restore from topic (s) | topic read (MiB) | topic rate (MiB/s) |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r size keys held built per persec rv readv rt readt <<<"$row"
    awk -v s="$size" -v k="$keys" -v h="$held" -v b="$built" -v p="$per" -v ps="$persec" -v rv="$rv" -v dv="$readv" -v rt="$rt" -v dt="$readt" 'BEGIN {
      printf "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.4f | %.2f | %.1f | %.2f | %.1f | %.0f |\n", s, k, h / 1048576, b / 1048576, p / 1024, ps / 1024, p / h, rv, dv / 1048576, rt, dt / 1048576, (rt > 0 ? dt / 1048576 / rt : 0) }'
  done
} | tee "$OUT/checkpoints.md"
