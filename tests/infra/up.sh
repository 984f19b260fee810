#!/usr/bin/env bash
# Starts the harness — Kafka, the Schema Registry, etcd, kube-apiserver (with the StreamJob CRD
# applied) and kube-controller-manager, all on 127.0.0.1 — and writes
# $SLUICE_RUN_DIR/env, which tests source to find them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$INFRA_DIR/kafka.sh" start
"$INFRA_DIR/registry.sh" start
"$INFRA_DIR/registry.sh" secure-start
"$INFRA_DIR/kube.sh" start "$REPO_ROOT/crds/streamjob.yaml"

cat >"$SLUICE_RUN_DIR/env" <<ENV
export SLUICE_HARNESS=1
export SLUICE_KAFKA_BOOTSTRAP=$("$INFRA_DIR/kafka.sh" bootstrap)
export SLUICE_KAFKA_SASL_BOOTSTRAP=$("$INFRA_DIR/kafka.sh" sasl-bootstrap)
export SLUICE_KAFKA_MTLS_BOOTSTRAP=$("$INFRA_DIR/kafka.sh" mtls-bootstrap)
export SLUICE_KAFKA_TLS_DIR=$("$INFRA_DIR/kafka.sh" tls-dir)
export SLUICE_REGISTRY_URL=$("$INFRA_DIR/registry.sh" url)
export SLUICE_REGISTRY_SECURE_URL=$("$INFRA_DIR/registry.sh" secure-url)
export SLUICE_REGISTRY_TLS_DIR=$("$INFRA_DIR/registry.sh" tls-dir)
export KUBECONFIG=$("$INFRA_DIR/kube.sh" kubeconfig)
export SLUICE_HELM=$("$INFRA_DIR/tools.sh" path helm)
export SLUICE_PROMETHEUS=$("$INFRA_DIR/tools.sh" path prometheus)
export SLUICE_RDKAFKA_PERF=$("$INFRA_DIR/tools.sh" path rdkafka-perf)
export SLUICE_CLIENTS_PYTHON=$("$INFRA_DIR/tools.sh" path python-clients)
export SLUICE_RUN_DIR=$SLUICE_RUN_DIR
export PATH=$(dirname "$(command -v kubectl)"):\$PATH
ENV
log "harness up; environment in $SLUICE_RUN_DIR/env"
