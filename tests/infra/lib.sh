#!/usr/bin/env bash
# Shared helpers for the test harness scripts: where things are cached, where
# processes keep their state, and how they are started and stopped by PID.
#
# Everything listens on 127.0.0.1 only. Downloads and builds are cached under
# $SLUICE_CACHE_DIR (outside the repository) so a second run is fast; runtime
# state (data dirs, logs, pid files) lives under $SLUICE_RUN_DIR (ignored by git).

set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$INFRA_DIR/../.." && pwd)"
SLUICE_CACHE_DIR="${SLUICE_CACHE_DIR:-$HOME/.cache/sluice}"
SLUICE_RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/target/harness}"
SLUICE_BIN_DIR="$SLUICE_CACHE_DIR/bin"
mkdir -p "$SLUICE_CACHE_DIR" "$SLUICE_RUN_DIR" "$SLUICE_BIN_DIR"

# Pinned versions (see ../../shared/INFRA.md for why these).
KAFKA_VERSION="4.3.1"
K8S_VERSION="1.33.13"
# kubectl: the machine's, or one built from the same Kubernetes release by
# `kube.sh install` when the machine has none.
KUBECTL_DIR="$SLUICE_CACHE_DIR/kubectl-$K8S_VERSION"
if ! command -v kubectl >/dev/null 2>&1 && [ -x "$KUBECTL_DIR/kubectl" ]; then
  export PATH="$KUBECTL_DIR:$PATH"
fi
HELM_VERSION="v3.22.0"

# Ports (non-default so a developer's own services do not clash).
KAFKA_PORT="${SLUICE_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${SLUICE_KAFKA_CONTROLLER_PORT:-19093}"
# The same broker's authenticated listeners: SASL_SSL (SCRAM-SHA-512/256, PLAIN)
# and SSL with a client certificate required (mTLS).
KAFKA_SASL_PORT="${SLUICE_KAFKA_SASL_PORT:-19094}"
KAFKA_MTLS_PORT="${SLUICE_KAFKA_MTLS_PORT:-19095}"
ETCD_CLIENT_PORT="${SLUICE_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${SLUICE_ETCD_PEER_PORT:-12380}"
APISERVER_PORT="${SLUICE_APISERVER_PORT:-16443}"
REGISTRY_PORT="${SLUICE_REGISTRY_PORT:-18081}"
REGISTRY_MANAGEMENT_PORT="${SLUICE_REGISTRY_MANAGEMENT_PORT:-19000}"
REGISTRY_TLS_PORT="${SLUICE_REGISTRY_TLS_PORT:-18443}"
KCM_PORT="${SLUICE_KCM_PORT:-10257}"

log() { printf '[harness %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Runs a command as root (directly, or through sudo when not root).
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs Debian packages only when a command they provide is missing.
apt_install() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

pidfile() { echo "$SLUICE_RUN_DIR/$1.pid"; }

is_running() {
  local pf; pf="$(pidfile "$1")"
  [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null
}

# start_bg NAME LOGFILE CMD... — starts CMD in the background in its own
# session and records its PID. Does nothing if NAME is already running.
start_bg() {
  local name="$1" logf="$2"; shift 2
  if is_running "$name"; then log "$name already running (pid $(cat "$(pidfile "$name")"))"; return 0; fi
  setsid "$@" >"$logf" 2>&1 < /dev/null &
  echo $! >"$(pidfile "$name")"
  log "started $name (pid $!), log: $logf"
}

# stop_bg NAME — SIGTERM the recorded PID, wait up to 30 s, then SIGKILL.
# Only ever signals the PID this harness recorded.
stop_bg() {
  local name="$1" pf pid i
  pf="$(pidfile "$name")"
  [ -f "$pf" ] || return 0
  pid="$(cat "$pf")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "$name did not stop in 30 s, SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$pf"
}

# wait_until DESCRIPTION TIMEOUT_SECONDS CMD... — polls CMD every 0.2 s.
wait_until() {
  local what="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then die "timed out after ${timeout}s waiting for $what"; fi
    sleep 0.2
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Test certificates (in the current directory), as the API server's and the
# broker's listeners use them:
#   new_ca SUBJECT                  ca.key, ca.crt (self-signed, 10 years)
#   sign_cert NAME SUBJECT [SANS]   NAME.key, NAME.crt signed by ca.*
#                                   (SANS: an openssl subjectAltName value)
new_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "$1" -keyout ca.key -out ca.crt 2>/dev/null
}
sign_cert() {
  local name=$1 subject=$2 sans=${3:-}
  openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$name.key" -out "$name.csr" 2>/dev/null
  if [ -n "$sans" ]; then
    printf 'subjectAltName=%s\n' "$sans" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  else
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out "$name.crt" 2>/dev/null
  fi
  rm -f "$name.csr"
}
