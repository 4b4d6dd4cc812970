#!/usr/bin/env bash
# Every check the project holds itself to, cheapest failure first: formatting, lints,
# then the tests. Run from a fresh clone: `bash deploy/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/prereqs.sh

echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== tests"
cargo test --workspace --locked
