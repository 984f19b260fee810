#!/usr/bin/env bash
# How a core should talk to Kafka, measured against the harness broker:
#   - consume: rust-rdkafka's StreamConsumer, BaseConsumer::poll and Sluice's
#     batch queue over the same topic (worker/benches/consume.rs);
#   - produce: one producer per core vs one shared producer
#     (worker/benches/produce.rs).
# Each side by side in one run, release build.
#
#   bash bench/kafka_clients.sh                            # consume 2 M records; produce 2 × 1 M
#   SLUICE_BENCH_RECORDS=500000 bash bench/kafka_clients.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tests/infra/kafka.sh start >/dev/null
SLUICE_KAFKA_BOOTSTRAP=$(bash tests/infra/kafka.sh bootstrap)
export SLUICE_KAFKA_BOOTSTRAP
cargo bench --locked -p sluice-worker --bench consume
cargo bench --locked -p sluice-worker --bench produce
