#!/usr/bin/env bash
# Tools the packaging tests and benchmarks need, installed from the package
# registries and cached:
#
#   tools.sh helm         Helm (go install from the Go module proxy)
#   tools.sh prometheus   Prometheus (Debian package)
#   tools.sh rdkafka-perf librdkafka's rdkafka_performance, built from the
#                         source bundled in the rdkafka-sys crate (the
#                         physical-limit reference for benchmarks)
#   tools.sh python-clients
#                         a Python venv with confluent-kafka and its Schema
#                         Registry serializers (tests/clients/requirements.txt):
#                         producers and consumers nobody here wrote
#   tools.sh path NAME    print the binary's path
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HELM_BIN="$SLUICE_BIN_DIR/helm-$HELM_VERSION/helm"
PROMETHEUS_BIN=/usr/bin/prometheus
RDKAFKA_SYS_VERSION="$(sed -n 's/^name = "rdkafka-sys"/&/p;/^name = "rdkafka-sys"/{n;s/^version = "\(.*\)"/\1/p}' "$REPO_ROOT/Cargo.lock" 2>/dev/null | tail -1)"
RDKAFKA_PERF_BIN="$SLUICE_BIN_DIR/rdkafka_performance-${RDKAFKA_SYS_VERSION:-unknown}"
CLIENTS_REQUIREMENTS="$REPO_ROOT/tests/clients/requirements.txt"
# Named by the requirements' hash: a changed pin makes a new venv.
CLIENTS_VENV="$SLUICE_CACHE_DIR/venv-clients-$(sha256sum "$CLIENTS_REQUIREMENTS" | cut -c1-12)"
CLIENTS_PYTHON="$CLIENTS_VENV/bin/python"

# A plain `go install` leaves Helm's version and its default Kubernetes
# version (used by `helm template`/`helm lint` without a cluster) at their
# source defaults, v1.20 — which charts requiring a newer kubeVersion reject.
# Stamp both the way Helm's Makefile does for released binaries.
helm_install() {
  if [ -x "$HELM_BIN" ] && [ "$("$HELM_BIN" version --template '{{.Version}}' 2>/dev/null)" = "$HELM_VERSION" ]; then
    return 0
  fi
  command -v go >/dev/null || die "go is required to build helm"
  log "building helm $HELM_VERSION (go install, ~3 min from an empty Go cache)"
  local gomod client_go minor tmp pkg=helm.sh/helm/v3
  gomod="$(go mod download -json "$pkg@$HELM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  client_go="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")"
  minor="${client_go#v0.}"; minor="${minor%%.*}"
  [ -n "$minor" ] || die "cannot find k8s.io/client-go in $gomod"
  local ldflags="-s -w -X $pkg/internal/version.version=$HELM_VERSION"
  ldflags+=" -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$minor"
  ldflags+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$minor"
  mkdir -p "$(dirname "$HELM_BIN")"
  tmp="$(mktemp -d "$(dirname "$HELM_BIN")/build.XXXXXX")"
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$pkg/cmd/helm@$HELM_VERSION"
  mv "$tmp/helm" "$HELM_BIN"
  rmdir "$tmp"
}

python_clients_install() {
  [ -f "$CLIENTS_VENV/.complete" ] && return 0
  apt_install python3-venv
  log "installing the Python Kafka clients in $CLIENTS_VENV"
  rm -rf "$CLIENTS_VENV"
  python3 -m venv "$CLIENTS_VENV"
  "$CLIENTS_VENV/bin/pip" install -q -r "$CLIENTS_REQUIREMENTS"
  touch "$CLIENTS_VENV/.complete"
}

prometheus_install() {
  [ -x "$PROMETHEUS_BIN" ] && return 0
  apt_install prometheus
}

rdkafka_perf_install() {
  [ -x "$RDKAFKA_PERF_BIN" ] && return 0
  [ -n "$RDKAFKA_SYS_VERSION" ] || die "cannot find rdkafka-sys in Cargo.lock"
  (cd "$REPO_ROOT" && cargo fetch --locked >/dev/null 2>&1 || cargo fetch >/dev/null)
  local src
  src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"rdkafka-sys-$RDKAFKA_SYS_VERSION"/librdkafka 2>/dev/null | head -1)"
  [ -d "$src" ] || die "librdkafka source of rdkafka-sys $RDKAFKA_SYS_VERSION not found after cargo fetch"
  local build="$SLUICE_CACHE_DIR/librdkafka-build-$RDKAFKA_SYS_VERSION"
  log "building rdkafka_performance from $src"
  rm -rf "$build"; cp -a "$src/." "$build"
  (
    cd "$build"
    # The same flags rdkafka-sys's build.rs uses when these features are off
    # (the bundled mklove has no modules for the others).
    # Logs go outside the tree: mklove treats any ./configure.* file as a module.
    local logf="$build.log"
    ./configure --disable-gssapi --disable-curl --disable-ssl --disable-zstd --disable-lz4-ext >"$logf" 2>&1 || { tail -30 "$logf"; exit 1; }
    make -j"$(nproc)" -C src >>"$logf" 2>&1 || { tail -30 "$logf"; exit 1; }
    make -C examples rdkafka_performance >>"$logf" 2>&1 || { tail -30 "$logf"; exit 1; }
  )
  cp "$build/examples/rdkafka_performance" "$RDKAFKA_PERF_BIN"
  rm -rf "$build" "$build.log"
}

case "${1:-}" in
  helm) helm_install ;;
  prometheus) prometheus_install ;;
  rdkafka-perf) rdkafka_perf_install ;;
  python-clients) python_clients_install ;;
  path)
    case "${2:-}" in
      helm) echo "$HELM_BIN" ;;
      prometheus) echo "$PROMETHEUS_BIN" ;;
      rdkafka-perf) echo "$RDKAFKA_PERF_BIN" ;;
      python-clients) echo "$CLIENTS_PYTHON" ;;
      *) die "unknown tool ${2:-}" ;;
    esac ;;
  *) echo "usage: $0 helm|prometheus|rdkafka-perf|python-clients|path NAME" >&2; exit 2 ;;
esac
