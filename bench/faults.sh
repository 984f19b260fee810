#!/usr/bin/env bash
# The disruptive part of the fault suite (tests/tests/disruptive.rs): the
# broker stopped and started, the broker frozen (SIGSTOP) for 75 s while a
# worker restores, the control plane restarted, the broker restarted with
# offsets retention cut to one minute and a partition idle, exactly once
# through a broker outage and a worker frozen past the transaction timeout,
# exactly once through random kills and a broker restart. Each would break tests
# running beside it, so this script runs them one at a time on a harness of
# its own (other ports, its own run directory), then the CI fault tests at
# volume (FAULT_KILLS kills of random workers of eight jobs, default 90: each
# job about ten times, the two at-least-once shapes of issue 34's first
# finding, a global aggregate and an aggregate over an updating aggregate,
# included).
#
#   bash bench/faults.sh
#   FAULT_KILLS=50 FAULT_SEED=7 bash bench/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SLUICE_RUN_DIR="$PWD/target/faults"
export SLUICE_KAFKA_PORT=29092 SLUICE_KAFKA_CONTROLLER_PORT=29093 SLUICE_KAFKA_SASL_PORT=29094 SLUICE_KAFKA_MTLS_PORT=29095
export SLUICE_ETCD_PORT=22379 SLUICE_ETCD_PEER_PORT=22380 SLUICE_APISERVER_PORT=26443 SLUICE_KCM_PORT=20257
export FAULT_KILLS="${FAULT_KILLS:-90}"
cargo build -q --workspace
bash tests/infra/up.sh
trap 'bash tests/infra/down.sh' EXIT
# shellcheck disable=SC1091
source "$SLUICE_RUN_DIR/env"
export SLUICE_WORKER_BIN="$PWD/target/debug/sluice-worker" SLUICE_OPERATOR_BIN="$PWD/target/debug/sluice-operator"
cargo test -q -p sluice-e2e --test disruptive -- --ignored --test-threads=1 --nocapture 2>&1 | grep -E "FIGURES|test result|panicked|^test "
cargo test -q -p sluice-e2e --test worker_kafka random_kill -- --nocapture 2>&1 | grep -E "FIGURES|test result|panicked"
FAULT_KILLS="${EOS_FAULT_KILLS:-10}" cargo test -q -p sluice-e2e --test worker_kafka exactly_once_through -- --ignored \
  --nocapture 2>&1 \
  | grep -E "FIGURES|test result|panicked"
