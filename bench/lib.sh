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
bench_worker() {
  local target="${CARGO_TARGET_DIR:-$PWD/target}"
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
