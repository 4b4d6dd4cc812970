#!/usr/bin/env bash
# What a fresh machine lacks to build the ledger: RocksDB's bindings are generated with
# libclang at build time. Installs it (Debian packages, as root) if it is missing.
set -euo pipefail
if ! ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so'; then
  echo "== installing libclang-dev (RocksDB's build needs it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq libclang-dev >/dev/null
fi
