#!/usr/bin/env bash
# Every check the project holds itself to, cheapest failure first: formatting, lints,
# then the tests. Run from a fresh clone: `bash deploy/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/prereqs.sh

echo "== monitoring: alert rules and their unit tests, scrape config, dashboard metrics"
bash deploy/check-monitoring.sh
echo "== deployment artifacts (Kubernetes, compose, systemd, Dockerfile; no cluster needed)"
bash deploy/check-manifests.sh
echo "== fmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== tests"
cargo test --workspace --locked
echo "== MCP end to end with the official Python SDK (own venv from PyPI; pytest bounded"
echo "   by MCP_PY_TIMEOUT_S, default 600 s)"
bash mcp-server/tests/python/run.sh
echo "== the gateway end to end: shops and clients of the official Python and TypeScript"
echo "   SDKs (PyPI, npm), both protocol eras, lossy proxies (bounded by GATEWAY_E2E_TIMEOUT_S)"
bash gateway/tests/e2e/run.sh
echo "== simulation lint (rustfmt, clippy -D warnings under --cfg madsim)"
bash sim-tests/run.sh lint
echo "== simulation (madsim, own target dir): every scenario on its fixed seeds plus a"
echo "   random batch, the randomized fault/workload runs, the benchmark's safety claim"
bash sim-tests/run.sh
echo "== simulation determinism (a sample of seeds, each three times in one process)"
bash sim-tests/run.sh check
