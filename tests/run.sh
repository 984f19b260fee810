#!/usr/bin/env bash
# The whole test suite, from a fresh machine:
#   1. installs the harness tools from the package registries (cached),
#   2. starts a real Kafka broker and a real Kubernetes control plane on 127.0.0.1,
#   3. runs the gates: cargo fmt --check, cargo clippy -D warnings,
#   4. runs every test of the workspace against them, then the end-to-end
#      benchmark at 100 K records (counts checked, speed not asserted),
#   5. stops everything it started.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SLUICE_RUN_DIR="${SLUICE_RUN_DIR:-$PWD/target/harness}"
mkdir -p "$SLUICE_RUN_DIR"
# A clean checkout builds once: incremental-compilation caches would only
# add gigabytes to target/ (set CARGO_INCREMENTAL=1 to keep them locally).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
start=$(date +%s)
step() { printf '\n==> [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

# What the steps below need before the background install is done: the
# C toolchain and headers the Rust build links (librdkafka, OpenSSL, zlib),
# Python for the golden oracle, GNU time for the benchmark.
bash -c 'source tests/infra/lib.sh && apt_install build-essential pkg-config libssl-dev zlib1g-dev python3 python3-venv time'

# Tool installs (mostly Go builds, network-bound at first) overlap the Rust build.
step "installing harness tools in the background (log: $SLUICE_RUN_DIR/install.log)"
bash tests/infra/install.sh >"$SLUICE_RUN_DIR/install.log" 2>&1 &
install_pid=$!
# If a step fails before the harness is up, stop the install we started.
trap 'kill "$install_pid" 2>/dev/null || true' EXIT

# Golden expectations must be exactly what the independent DuckDB oracle
# computes (nobody may hand-edit them to match the engine).
step "golden expectations match the DuckDB oracle"
venv="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}/venv-golden"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import duckdb, yaml, numpy' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r worker/tests/golden/requirements.txt
fi
"$venv/bin/python" worker/tests/golden/oracle.py --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "building binaries and tests"
cargo build --workspace --bins --locked
cargo test --workspace --locked --no-run
export SLUICE_WORKER_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/sluice-worker"
export SLUICE_OPERATOR_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/sluice-operator"

step "waiting for harness tools"
if ! wait "$install_pid"; then
  tail -50 "$SLUICE_RUN_DIR/install.log"
  echo "harness install failed" >&2
  exit 1
fi

trap 'step "stopping harness"; bash tests/infra/down.sh' EXIT
step "starting harness"
bash tests/infra/up.sh
# shellcheck disable=SC1091
source "$SLUICE_RUN_DIR/env"

step "cargo test --workspace (against the harness)"
cargo test --workspace --locked -- --test-threads="${SLUICE_TEST_THREADS:-4}"

# The end-to-end benchmark at 100 K records: proves the script works and
# checks result counts from the sink topic; asserts no speed.
step "benchmark smoke run (bench/e2e.sh --smoke)"
bash bench/e2e.sh --smoke
step "Nexmark benchmark smoke run (bench/nexmark.sh --smoke --queries q0,q13,q17,q19)"
bash bench/nexmark.sh --smoke --queries q0,q13,q17,q19

step "all tests passed"
