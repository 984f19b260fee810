#!/usr/bin/env bash
# A real Kubernetes control plane on loopback: etcd (Debian etcd-server),
# kube-apiserver and kube-controller-manager built from the Go module proxy,
# certificates from openssl, and a kubeconfig for tests. No scheduler and no
# kubelet: tests play the kubelet themselves where they need running pods.
#
#   kube.sh install   build/download what is missing (cached)
#   kube.sh start     start etcd, apiserver, controller-manager; write kubeconfig
#   kube.sh stop      stop them (by recorded PID)
#   kube.sh crds FILE...  apply CRDs and wait until they are established
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBE_BUILD_DIR="$SLUICE_CACHE_DIR/kube-build-$K8S_VERSION"
APISERVER_BIN="$SLUICE_BIN_DIR/kube-apiserver-$K8S_VERSION"
KCM_BIN="$SLUICE_BIN_DIR/kube-controller-manager-$K8S_VERSION"
PKI_DIR="$SLUICE_RUN_DIR/kube/pki"
KUBECONFIG_FILE="$SLUICE_RUN_DIR/kube/kubeconfig"

# Version stamps: without them the binaries report v0.0.0-master and Helm's
# kubeVersion checks fail.
version_ldflags() {
  local minor="${K8S_VERSION#1.}"; minor="${minor%%.*}"
  echo "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

build_control_plane() {
  [ -x "$APISERVER_BIN" ] && [ -x "$KCM_BIN" ] && return 0
  command -v go >/dev/null || die "go is required to build kube-apiserver"
  mkdir -p "$KUBE_BUILD_DIR"
  (
  cd "$KUBE_BUILD_DIR"
  # `go install k8s.io/kubernetes/cmd/...@v` is refused because of its replace
  # directives; a wrapper module that pins every staging module works.
  if [ ! -f go.sum ]; then
    log "preparing wrapper module for k8s.io/kubernetes v$K8S_VERSION"
    cat >go.mod <<MOD
module sluice.dev/kube-build

go 1.24

require k8s.io/kubernetes v$K8S_VERSION
MOD
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
    local staging
    staging="$(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | grep -v "/sample-" | sort -u)"
    [ -n "$staging" ] || die "found no staging modules in $gomod"
    {
      echo
      for m in $staging; do echo "replace $m => $m v0.${K8S_VERSION#1.}"; done
    } >>go.mod
    cat >tools.go <<'TOOLS'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
TOOLS
    go mod tidy
  fi
  local ldflags; ldflags="$(version_ldflags)"
  # Never change CGO_ENABLED/-trimpath between builds: it discards the cache.
  if [ ! -x "$APISERVER_BIN" ]; then
    log "building kube-apiserver v$K8S_VERSION (several minutes from an empty Go cache)"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$APISERVER_BIN.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$APISERVER_BIN.tmp" "$APISERVER_BIN"
  fi
  if [ ! -x "$KCM_BIN" ]; then
    log "building kube-controller-manager v$K8S_VERSION"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$KCM_BIN.tmp" k8s.io/kubernetes/cmd/kube-controller-manager
    mv "$KCM_BIN.tmp" "$KCM_BIN"
  fi
  )
}

# kubectl from the same wrapper module (-mod=mod records what it needs
# beyond the two servers in go.sum).
build_kubectl() {
  [ -x "$KUBECTL_DIR/kubectl" ] && return 0
  build_control_plane
  log "building kubectl v$K8S_VERSION (the machine has none)"
  mkdir -p "$KUBECTL_DIR"
  (cd "$KUBE_BUILD_DIR" &&
    CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$(version_ldflags)" -o "$KUBECTL_DIR/kubectl.tmp" \
      k8s.io/kubernetes/cmd/kubectl)
  mv "$KUBECTL_DIR/kubectl.tmp" "$KUBECTL_DIR/kubectl"
}

install() {
  apt_install etcd-server openssl
  build_control_plane
  command -v kubectl >/dev/null || build_kubectl
}

make_pki() {
  [ -f "$PKI_DIR/admin.crt" ] && return 0
  mkdir -p "$PKI_DIR"
  log "creating certificates in $PKI_DIR"
  (
  cd "$PKI_DIR"
  new_ca "/CN=sluice-test-ca"
  sign_cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  sign_cert admin "/O=system:masters/CN=sluice-admin"
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() {
  mkdir -p "$(dirname "$KUBECONFIG_FILE")"
  cat >"$KUBECONFIG_FILE" <<KC
apiVersion: v1
kind: Config
clusters:
- name: sluice-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI_DIR/ca.crt
users:
- name: sluice-admin
  user:
    client-certificate: $PKI_DIR/admin.crt
    client-key: $PKI_DIR/admin.key
contexts:
- name: sluice-test
  context:
    cluster: sluice-test
    user: sluice-admin
    namespace: default
current-context: sluice-test
KC
}

apiserver_ready() {
  kubectl --kubeconfig "$KUBECONFIG_FILE" get --raw /readyz
}

start() {
  install
  make_pki
  write_kubeconfig
  local d="$SLUICE_RUN_DIR/kube"
  mkdir -p "$d/etcd-data"
  # etcd reads every ETCD_* variable as configuration: run it with a clean set.
  start_bg etcd "$d/etcd.log" env -u ETCD_NAME /usr/bin/etcd \
    --name sluice-test --data-dir "$d/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "sluice-test=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_until "etcd on :$ETCD_CLIENT_PORT" 30 port_open "$ETCD_CLIENT_PORT"
  # The apiserver holds its port ~3 s after a previous instance exits.
  if ! is_running apiserver; then
    wait_until "apiserver port :$APISERVER_PORT to be free" 30 bash -c "! (exec 3<>/dev/tcp/127.0.0.1/$APISERVER_PORT) 2>/dev/null"
  fi
  start_bg apiserver "$d/apiserver.log" "$APISERVER_BIN" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
    --service-account-key-file="$PKI_DIR/sa.pub" --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=RBAC \
    --endpoint-reconciler-type=none
  wait_until "kube-apiserver /readyz" 90 apiserver_ready
}

start_controller_manager() {
  local d="$SLUICE_RUN_DIR/kube"
  start_bg controller-manager "$d/controller-manager.log" "$KCM_BIN" \
    --kubeconfig="$KUBECONFIG_FILE" --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file="$PKI_DIR/sa.key" --root-ca-file="$PKI_DIR/ca.crt" \
    --cluster-signing-cert-file="$PKI_DIR/ca.crt" --cluster-signing-key-file="$PKI_DIR/ca.key" \
    --use-service-account-credentials=false \
    --controllers='*,-podgc,-nodelifecycle'
  # Tests play the kubelet and bind pods to a node object-less "fake node";
  # pod GC and node lifecycle would evict those pods, so they are off.
  # It creates the `default` ServiceAccount; without it Pod creation fails.
  wait_until "default ServiceAccount" 60 kubectl --kubeconfig "$KUBECONFIG_FILE" -n default get serviceaccount default
}

stop() {
  stop_bg controller-manager
  stop_bg apiserver
  stop_bg etcd
}

# Applies CRDs and waits until each is Established. The controller-manager's
# garbage collector only watches kinds it discovered at start, so CRDs must be
# applied before it starts.
crds() {
  local f
  for f in "$@"; do
    f="$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
    kubectl --kubeconfig "$KUBECONFIG_FILE" apply --server-side -f "$f" >/dev/null
    # Right after the apply the CRD may have no status yet, and kubectl
    # wait then fails at once ("status.conditions accessor error")
    # instead of waiting: try again until it is Established.
    local tries=0
    until kubectl --kubeconfig "$KUBECONFIG_FILE" wait --for=condition=Established -f "$f" --timeout=60s \
      >/dev/null 2>&1; do
      tries=$((tries + 1))
      [ "$tries" -lt 30 ] || die "CRD $f not Established"
      sleep 1
    done
  done
}

case "${1:-}" in
  install) install ;;
  start) start; shift; [ $# -gt 0 ] && crds "$@"; start_controller_manager ;;
  stop) stop ;;
  kubeconfig) echo "$KUBECONFIG_FILE" ;;
  build-kubectl) build_kubectl; echo "$KUBECTL_DIR/kubectl" ;;
  *) echo "usage: $0 install|start [CRD files...]|stop|kubeconfig|build-kubectl" >&2; exit 2 ;;
esac
