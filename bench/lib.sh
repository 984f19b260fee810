# Shared by the broker benchmarks (bench/e2e.sh, bench/joins-e2e.sh): the
# broker, the Python Kafka client for topic admin and checks, the worker
# binary. Source it from the repository root.

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Starts the harness broker; sets BOOTSTRAP.
bench_kafka() {
  bash tests/infra/kafka.sh start >/dev/null
  BOOTSTRAP=$(bash tests/infra/kafka.sh bootstrap)
}

# Sets PY to bench/tools.py under a venv with confluent-kafka.
bench_python() {
  local venv="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/venv-bench"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import confluent_kafka' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r bench/requirements.txt
  fi
  PY="$venv/bin/python bench/tools.py"
}

# Builds sluice-worker in profile $1 (release or dev); sets WORKER.
# SLUICE_WORKER_BIN names a binary built elsewhere instead (the lent
# 16-core machine has no Rust toolchain: a stripped release binary travels
# with the checkout).
bench_worker() {
  local target="${CARGO_TARGET_DIR:-$PWD/target}"
  if [ -n "${SLUICE_WORKER_BIN:-}" ]; then
    WORKER=$SLUICE_WORKER_BIN
    return
  fi
  if [ "$1" = release ]; then
    log "building sluice-worker (release)"
    cargo build --release --locked -p sluice-worker --bin sluice-worker >&2
    WORKER="$target/release/sluice-worker"
  else
    cargo build --locked -p sluice-worker --bin sluice-worker >&2
    WORKER="$target/debug/sluice-worker"
  fi
}

# A seed scenario's example manifest, pointed at this run's broker and topics.
example_manifest() { # example input output
  sed -e "s|kafka:9092|$BOOTSTRAP|g" \
      -e "s|topic: [a-z0-9-]*-dlq|topic: $3-dlq|" \
      -e "/sources:/,/sink:/ s|topic: [a-z0-9-]*|topic: $2|" \
      -e "/sink:/,/deadLetter:/ s|topic: [a-z0-9-]*|topic: $3|" \
      "manifests/examples/$1"
}

# A Nexmark query's manifest run in the engine: every Kafka source replaced
# by the generator's source of its event kind (the kinds' shares of the
# events: people 1/50, auctions 3/50, bids 46/50, in $3 simulated
# partitions), q13's side input by the file $4, the sink by /dev/null, and
# the state limit raised (the distinct counts of q15/q16 and the per-key
# state of q18/q19 outgrow the 256 MiB default at 10 M events, which is
# what the limit is for).
nexmark_engine_manifest() { # query events partitions side-input-file
  local people=$(($2 / 50)) auctions=$(($2 * 3 / 50)) bids=$(($2 * 46 / 50))
  sed -e "s|kafka: { bootstrapServers: kafka:9092, topic: nexmark-person }|datagen: { scenario: NexmarkPerson, records: $people, partitions: $3 }|" \
      -e "s|kafka: { bootstrapServers: kafka:9092, topic: nexmark-auction }|datagen: { scenario: NexmarkAuction, records: $auctions, partitions: $3 }|" \
      -e "s|kafka: { bootstrapServers: kafka:9092, topic: nexmark-bid }|datagen: { scenario: NexmarkBid, records: $bids, partitions: $3 }|" \
      -e "s|kafka: { bootstrapServers: kafka:9092, topic: nexmark-side-input }|file: { path: $4 }|" \
      -e "s|kafka: { bootstrapServers: kafka:9092, topic: nexmark-$1 }|file: { path: /dev/null }|" \
      "manifests/nexmark/$1.yaml"
  printf '  engine: { stateMemoryLimit: 8Gi }\n'
}

# q13's side input as the broker runs have it: 10,000 rows keyed 0..9999.
nexmark_side_input() { # file
  for k in $(seq 0 9999); do printf '{"key":%d,"value":"%d"}\n' "$k" "$k"; done >"$1"
}

# Why Nexmark query $1 cannot run here, if it cannot (empty if it can).
nexmark_skip_reason() {
  local manifest="manifests/nexmark/$1.yaml"
  if grep -q 'nexmark-unsupported' "$manifest"; then
    echo "not supported: $(sed -n 's/.*nexmark-unsupported: "\(.*\)"/\1/p' "$manifest")"
  fi
}

# Feldera's published per-core Nexmark rates (K events/s): its 16-core
# streaming table (feldera/feldera benchmark/README.md, "16-core Nexmark
# Streaming Performance", in-process generator) divided by 16.
declare -A FELDERA_PER_CORE=([q0]=436 [q1]=412 [q2]=422 [q3]=413 [q4]=265 [q5]=412 [q6]=250 [q7]=196 [q8]=415
  [q9]=57 [q12]=418 [q13]=230 [q14]=429 [q15]=221 [q16]=51 [q17]=242 [q18]=85 [q19]=75 [q20]=85 [q21]=415 [q22]=394)
