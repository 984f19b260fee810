#!/usr/bin/env bash
# A real Schema Registry: Apicurio Registry from Maven Central, which
# serves Confluent's REST API at /apis/ccompat/v7 (see ../../shared/INFRA.md).
# Storage is in memory: a restart forgets every schema.
#
#   registry.sh install  fetch and unpack the registry (cached)
#   registry.sh start    start it on 127.0.0.1 and wait until it serves
#   registry.sh stop     stop it (by recorded PID)
#   registry.sh url      print the Confluent-compatible API's base URL
#   registry.sh secure-start  start nginx in front of it, as a registry is
#                        run behind an ingress: TLS (a CA of its own) and
#                        HTTP basic authentication (user `sluice`)
#   registry.sh secure-url    print the API's base URL through nginx
#   registry.sh tls-dir  print the folder with ca.crt, user and password
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

TLS_DIR="$REGISTRY_DIR/tls"

install_nginx() {
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] && return 0
  # The package's scripts would start the system's nginx (port 80, every
  # address): service starts are refused while it installs.
  local policy=/usr/sbin/policy-rc.d created=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    created=1
  fi
  apt_install nginx
  [ -z "$created" ] || as_root rm -f "$policy"
}

secure_start() {
  install_nginx
  mkdir -p "$TLS_DIR" "$REGISTRY_DIR/nginx"
  (
  cd "$TLS_DIR"
  if [ ! -f server.crt ]; then
    new_ca "/O=sluice-test/CN=sluice-registry-ca"
    sign_cert server "/O=sluice-test/CN=schema-registry" "IP:127.0.0.1,DNS:localhost"
    echo sluice >user
    openssl rand -hex 16 >password
    printf 'sluice:%s\n' "$(openssl passwd -apr1 "$(cat password)")" >htpasswd
    # nginx's workers (not root) read the hashes.
    chmod 600 ./*.key password
    chmod 644 htpasswd
  fi
  )
  cat >"$REGISTRY_DIR/nginx/nginx.conf" <<CONF
daemon off;
# As whoever runs the harness (for root, nginx's default would be an
# unprivileged user who may not reach the run folder; otherwise ignored).
user $(id -un);
worker_processes 1;
pid $REGISTRY_DIR/nginx/nginx.pid;
error_log $REGISTRY_DIR/nginx/error.log;
events { worker_connections 256; }
http {
  access_log $REGISTRY_DIR/nginx/access.log;
  client_body_temp_path $REGISTRY_DIR/nginx/body;
  proxy_temp_path $REGISTRY_DIR/nginx/proxy;
  fastcgi_temp_path $REGISTRY_DIR/nginx/fastcgi;
  uwsgi_temp_path $REGISTRY_DIR/nginx/uwsgi;
  scgi_temp_path $REGISTRY_DIR/nginx/scgi;
  server {
    listen 127.0.0.1:$REGISTRY_TLS_PORT ssl;
    ssl_certificate $TLS_DIR/server.crt;
    ssl_certificate_key $TLS_DIR/server.key;
    auth_basic "schema registry";
    auth_basic_user_file $TLS_DIR/htpasswd;
    location / { proxy_pass http://127.0.0.1:$REGISTRY_PORT; }
  }
}
CONF
  local nginx
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  start_bg registry-nginx "$REGISTRY_DIR/nginx/nginx.log" "$nginx" -c "$REGISTRY_DIR/nginx/nginx.conf" -p "$REGISTRY_DIR/nginx"
  wait_until "the registry's TLS front" 30 curl -sf --cacert "$TLS_DIR/ca.crt" -u "sluice:$(cat "$TLS_DIR/password")" \
    "$(secure_url)/subjects"
  log "schema registry behind TLS and basic auth at $(secure_url)"
}

secure_url() { echo "https://127.0.0.1:$REGISTRY_TLS_PORT/apis/ccompat/v7"; }

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop_bg registry-nginx; stop_bg registry ;;
  url) url ;;
  secure-start) secure_start ;;
  secure-url) secure_url ;;
  tls-dir) echo "$TLS_DIR" ;;
  *) die "usage: registry.sh install|start|stop|url|secure-start|secure-url|tls-dir" ;;
esac
