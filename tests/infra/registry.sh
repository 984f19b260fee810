#!/usr/bin/env bash
# A real Schema Registry: Apicurio Registry from Maven Central, which
# serves Confluent's REST API at /apis/ccompat/v7 (see ../../shared/INFRA.md).
# Storage is in memory: a restart forgets every schema.
#
#   registry.sh install  fetch and unpack the registry (cached)
#   registry.sh start    start it on 127.0.0.1 and wait until it serves
#   registry.sh stop     stop it (by recorded PID)
#   registry.sh url      print the Confluent-compatible API's base URL
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# 2.6.x runs on the Java 17 the harness installs (3.x needs Java 21).
APICURIO_VERSION="2.6.13.Final"
APICURIO_DIR="$SLUICE_CACHE_DIR/apicurio-$APICURIO_VERSION"
REGISTRY_DIR="$SLUICE_RUN_DIR/registry"

install() {
  [ -f "$APICURIO_DIR/.complete" ] && return 0
  command -v mvn >/dev/null || apt_install maven
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  log "fetching Apicurio Registry $APICURIO_VERSION from Maven Central"
  mvn -q -B dependency:get -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" -Dtransitive=false
  local archive="$HOME/.m2/repository/io/apicurio/apicurio-registry-app/$APICURIO_VERSION/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
  rm -rf "$APICURIO_DIR" && mkdir -p "$APICURIO_DIR"
  tar -xzf "$archive" -C "$APICURIO_DIR"
  [ -n "$(runner)" ] || die "no *-runner.jar in $archive"
  touch "$APICURIO_DIR/.complete"
}

runner() { find "$APICURIO_DIR" -name '*-runner.jar' | head -1; }

start() {
  install
  mkdir -p "$REGISTRY_DIR"
  # Loopback only: its management port binds 0.0.0.0 unless told.
  start_bg registry "$REGISTRY_DIR/registry.log" env \
    QUARKUS_HTTP_HOST=127.0.0.1 QUARKUS_HTTP_PORT="$REGISTRY_PORT" \
    QUARKUS_MANAGEMENT_HOST=127.0.0.1 QUARKUS_MANAGEMENT_PORT="$REGISTRY_MANAGEMENT_PORT" \
    java -Xmx384m -jar "$(runner)"
  wait_until "the schema registry" 90 curl -sf "$(url)/subjects"
  log "schema registry ready at $(url)"
}

url() { echo "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"; }

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_bg registry ;;
  url) url ;;
  *) die "usage: registry.sh install|start|stop|url" ;;
esac
