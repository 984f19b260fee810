#!/usr/bin/env bash
# README command 1: a real job end to end on this machine, no broker and no
# cluster — generated trades → hourly windows per symbol → results on stdout,
# then a throughput summary. Extra arguments go to `sluice-worker run`.
#
# Needs the Rust toolchain. What the build links beyond it — a C toolchain
# and make (librdkafka is built from source), pkg-config, OpenSSL's and
# zlib's headers, python3 (librdkafka's configure) — is installed here with
# apt when missing (sudo when not root); elsewhere, install those first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
needed=(build-essential pkg-config libssl-dev zlib1g-dev python3)
if command -v dpkg >/dev/null && command -v apt-get >/dev/null; then
  # shellcheck source=tests/infra/lib.sh
  source tests/infra/lib.sh
  apt_install "${needed[@]}"
else
  echo "quickstart: not a Debian-like system; the build needs: a C compiler and make, pkg-config," \
    "OpenSSL and zlib headers, python3 (Debian: ${needed[*]})" >&2
fi
exec cargo run --release -p sluice-worker -- run -f manifests/examples/quickstart.yaml "$@"
