#!/usr/bin/env bash
# Checks deploy/monitoring: the alert rules parse and pass their unit tests
# (alerts_test.yml), the Prometheus configurations (local and compose) parse, the Grafana
# dashboard is JSON, and every metric the rules and the dashboard name is one a node
# exports (a name defined in node/src or raft-store/src). Installs promtool (Debian's
# prometheus package, without starting it) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=deploy/monitoring

if ! command -v promtool >/dev/null; then
  echo "installing promtool (Debian prometheus package)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
fi
promtool check rules "$dir/alerts.yml"
promtool test rules "$dir/alerts_test.yml"
promtool check config "$dir/prometheus.yml"
# The compose one names its rule file by its path inside the container.
promtool check config --syntax-only deploy/compose/prometheus.yml

python3 - "$dir" <<'PY'
import json, pathlib, re, sys
d = pathlib.Path(sys.argv[1])
exported = set()
for src in list(pathlib.Path("node/src").rglob("*.rs")) + list(pathlib.Path("raft-store/src").rglob("*.rs")):
    exported |= set(re.findall(r'"(ledger_[a-z0-9_]+)"', src.read_text()))
dashboard = json.loads((d / "dashboard.json").read_text())
exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
exprs.append((d / "alerts.yml").read_text())
named = set()
for e in exprs:
    named |= set(re.findall(r"\bledger_[a-z0-9_]+", e))
def base(name):
    for suffix in ("_sum", "_count", "_bucket"):
        if name.endswith(suffix) and name[: -len(suffix)] in exported:
            return name[: -len(suffix)]
    return name
unknown = sorted(n for n in named if base(n) not in exported)
if unknown:
    sys.exit(f"metrics named in {d} that no node exports: {unknown}")
print(f"dashboard: {len(dashboard['panels'])} panels; {len(named)} metric names, all exported")
PY
