#!/usr/bin/env bash
# Installs everything the test suite needs, from the package registries only,
# caching builds and downloads under $SLUICE_CACHE_DIR. Idempotent: a second
# run with warm caches takes seconds.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Build prerequisites of the Rust workspace (rdkafka links system OpenSSL and
# zlib; librdkafka's configure needs a C toolchain and python3).
apt_install build-essential pkg-config libssl-dev zlib1g-dev python3 openssl ca-certificates curl
"$INFRA_DIR/kafka.sh" install
"$INFRA_DIR/registry.sh" install
"$INFRA_DIR/kube.sh" install
"$INFRA_DIR/tools.sh" helm
"$INFRA_DIR/tools.sh" prometheus
"$INFRA_DIR/tools.sh" rdkafka-perf
"$INFRA_DIR/tools.sh" python-clients
log "all tools installed"
