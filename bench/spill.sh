#!/usr/bin/env bash
# State larger than memory, in the engine: stateful queries over generated
# Nexmark bids run twice each, side by side with the same binary — with
# the state in memory (8 GiB limit, no state directory), then under a small
# stateMemoryLimit with a state directory, so that the operator spills
# cold keys to the store there (docs/operations.md, "State larger than
# memory"). Prints records/s, peak RSS (from /usr/bin/time), the peak state
# gauge and what was spilled, and checks that both runs emitted the same
# final row per group.
#
#   bash bench/spill.sh [--events N] [--limit 64Mi] [--queries pairs,distinct,sessions,rows,q17,q18,q19,q20,q9]
#
# Figures: docs/benchmarks.md, "State larger than memory".
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

events=10000000
limit=64Mi
queries=pairs,q17,q18,q19
while [ $# -gt 0 ]; do
  case "$1" in
    --events) events=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --queries) queries=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

bench_worker release
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-spill-XXXX")
trap 'rm -rf "$work"' EXIT
bids=$((events * 46 / 50))

# The query: `pairs` is the issue's GROUP BY of (auction, bidder) over
# bids (every pair a group; it grows without end); `distinct` counts each
# auction's distinct bidders (every pair a value of its auction's set);
# `sessions` each (auction, bidder) pair's sessions of bids less than
# 30 minutes apart; `rows` each bid's average of its bidder's last 10 bids on
# its auction (a ROWS frame per pair, kept for good); q* are Nexmark's
# manifests with their sources replaced by the generator (as
# bench/nexmark.sh runs them, one partition each) and their sink by a file:
# q9 (a join of auctions and bids, then each auction's winning bid), q17
# (per auction and day), q18 (the last bid per bidder and auction), q19
# (each auction's 10 highest bids), q20 (bids joined with their auctions,
# kept for good).
manifest() { # query limit out
  if [ "$1" != pairs ] && [ "$1" != distinct ] && [ "$1" != sessions ] && [ "$1" != rows ]; then
    nexmark_engine_manifest "$1" "$events" 1 /dev/null |
      sed -e "s|file: { path: /dev/null }|file: { path: $3 }|" -e "s|stateMemoryLimit: 8Gi|stateMemoryLimit: $2|"
    return
  fi
  local sql="SELECT auction, bidder, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY auction, bidder"
  case "$1" in
    distinct) sql="SELECT auction, COUNT(DISTINCT bidder) AS bidders, COUNT(*) AS n FROM bid GROUP BY auction" ;;
    sessions) sql="SELECT auction, bidder, COUNT(*) AS n, MAX(price) AS top, window_start, window_end FROM bid GROUP BY auction, bidder, SESSION(dateTime, INTERVAL '30' MINUTE)" ;;
    rows) sql="SELECT auction, bidder, price, AVG(price) OVER (PARTITION BY auction, bidder ORDER BY dateTime ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg10 FROM bid" ;;
  esac
  cat <<YAML
apiVersion: sluice.dev/v1alpha1
kind: StreamJob
metadata:
  name: spill-$1
spec:
  sql: |
    $sql
  sources:
    - name: bid
      datagen: { scenario: NexmarkBid, records: $bids, partitions: 1 }
      schema:
        columns:
          - { name: auction, type: bigint, required: true }
          - { name: bidder, type: bigint, required: true }
          - { name: price, type: bigint, required: true }
          - { name: channel, type: string }
          - { name: url, type: string }
          - { name: dateTime, type: timestamp, required: true }
          - { name: extra, type: string }
      eventTime: { column: dateTime, watermarkDelayMillis: 1000 }
  sink:
    file: { path: $3 }
  coresPerWorker: 1
  engine: { stateMemoryLimit: $2 }
YAML
}

# The columns that key a query's output rows (the last row per key is
# the result); `*`: rows are appended, never updated (all of them, in any
# order, are the result).
keys_of() {
  case "$1" in
    q9) echo id ;;
    distinct) echo auction ;;
    q17) echo auction,day ;;
    q19) echo auction,rank_number ;;
    q20 | sessions | rows) echo '*' ;;
    *) echo auction,bidder ;;
  esac
}

# The last row per group of a run's output (its first columns are the
# group's key), as a digest: both runs must agree.
digest() { # file key-columns
  python3 - "$1" "$2" <<'PY'
import hashlib, json, sys
if sys.argv[2] == "*":
    # Appended rows: a multiset's digest (the sum of the rows' hashes),
    # whatever their order.
    total, rows = 0, 0
    with open(sys.argv[1], "rb") as f:
        for line in f:
            total = (total + int.from_bytes(hashlib.sha256(line).digest()[:8], "little")) % 2**64
            rows += 1
    print(f"{rows} rows, sum {total:016x}")
    sys.exit(0)
last = {}
keys = sys.argv[2].split(",")
with open(sys.argv[1]) as f:
    for line in f:
        row = json.loads(line)
        last[tuple(row[k] for k in keys)] = line
h = hashlib.sha256()
for k in sorted(last):
    h.update(last[k].encode())
print(f"{len(last)} groups, sha256 {h.hexdigest()[:16]}")
PY
}

run() { # query mode
  local q=$1 mode=$2 out="$work/$1-$2.jsonl" m="$work/$1-$2.yaml" lim=8Gi args=()
  if [ "$mode" = spill ]; then
    lim=$limit
    rm -rf "$work/state"
    args=(--state-dir "$work/state")
  fi
  manifest "$q" "$lim" "$out" >"$m"
  local summary
  summary=$(/usr/bin/time -f 'rss_kib=%M' "$WORKER" run -f "$m" --bounded --cores 1 --http-port 0 "${args[@]}" 2>&1 | grep -E '^sluice-worker: done|^rss_kib=' | tr '\n' ' ')
  local rate peak spilled rss
  rate=$(sed -n 's/.* \([0-9]*\) records\/s.*/\1/p' <<<"$summary")
  peak=$(sed -n 's/.*peak state: \([0-9.]*\) MiB.*/\1/p' <<<"$summary")
  spilled=$(sed -n 's/.*spilled: \([0-9.]*\) MiB.*/\1/p' <<<"$summary")
  rss=$(sed -n 's/.*rss_kib=\([0-9]*\).*/\1/p' <<<"$summary")
  local keys
  keys=$(keys_of "$q")
  printf '%-6s %-7s %10s rec/s  peak RSS %6s MiB  peak state %8s MiB  spilled %8s MiB  %s\n' \
    "$q" "$mode" "$rate" "$((rss / 1024))" "$peak" "${spilled:-0}" "$(digest "$out" "$keys")"
  rm -f "$out"
}

log "$events events ($bids bids), limit $limit when spilling"
for q in ${queries//,/ }; do
  run "$q" memory
  run "$q" spill
done
