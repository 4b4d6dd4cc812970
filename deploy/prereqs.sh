#!/usr/bin/env bash
# What a fresh machine lacks to build the ledger: RocksDB's bindings are generated with
# libclang at build time; the demo's certificates are made with openssl. Installs them
# (Debian packages, as root) if they are missing.
set -euo pipefail
if ! ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so'; then
  echo "== installing libclang-dev (RocksDB's build needs it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq libclang-dev >/dev/null
fi
# deploy/gen-certs.sh (the demo's TLS certificates) needs the openssl command.
if ! command -v openssl >/dev/null; then
  echo "== installing openssl (deploy/gen-certs.sh needs it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq openssl >/dev/null
fi
