#!/usr/bin/env bash
# The main job: shows an effect surviving a lost answer and a retry.
# Until the replicated cluster lands this runs the core state machine on its own.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --locked --quiet -p ledger-core --example lost_answer
