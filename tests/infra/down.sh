#!/usr/bin/env bash
# Stops every process the harness started (by recorded PID only).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$INFRA_DIR/kube.sh" stop
"$INFRA_DIR/registry.sh" stop
"$INFRA_DIR/kafka.sh" stop
rm -f "$SLUICE_RUN_DIR/env"
