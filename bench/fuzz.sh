#!/usr/bin/env bash
# Fuzzes the places untrusted input enters — the JSON (flat and nested), Avro, Protobuf and Debezium (JSON, Avro) decoders, registry
# schemas (column derivation and compilation: what the operator and each core run per schema) and
# the SQL front end (planner, then the engine over extreme records) — with the
# deterministic mutation fuzzer in worker/examples/fuzz.rs. Not a CI step:
# CI runs the property tests from a fixed seed instead.
#
#   bash bench/fuzz.sh                 # 10 M inputs each, seed 24301
#   INPUTS=1000000 SEED=7 bash bench/fuzz.sh
#
# Exits non-zero on any panic, over-long input (> 100 ms), hang (10 s) or
# disagreement between the decoder's fast path and its serde visitor; each
# is printed with its input number, reproducible from (target, seed, number).
set -euo pipefail
cd "$(dirname "$0")/.."
INPUTS="${INPUTS:-10000000}"
SEED="${SEED:-24301}"
cargo build --release -q -p sluice-worker --example fuzz
for target in json json-nested avro protobuf debezium debezium-avro registry-schema registry-proto sql; do
  ./target/release/examples/fuzz "$target" "$INPUTS" "$SEED"
done
# The property tests at volume, from a fresh seed each run.
PROPTEST_CASES="${PROPTEST_CASES:-20000}" PROPTEST_RNG_SEED="$SEED" \
  cargo test --release -q -p sluice-worker --test never_panics --test decode_paths --test avro_never_panics --test protobuf_never_panics --test debezium_never_panics --test nested_never_panics
