#!/usr/bin/env bash
# Checks the deployment artifacts without a cluster: the Kubernetes manifests (kubeconform
# against the Kubernetes schemas, plus cross-references between them), the compose file,
# the systemd unit, the Dockerfile (hadolint, when installed), and builds the image when a
# container builder is already on the machine. Cheap: run from deploy/test.sh.
#
# Environment:
#   KUBERNETES_VERSION   schemas to validate against (default 1.33.0)
#   REQUIRE_KUBECONFORM  1: fail when kubeconform cannot be fetched (default 0: say so
#                        and go on with the offline checks)
#   BUILD_IMAGE          0: never build the image, even with a builder present (default 1)
#   TOOLS                where downloaded tools and schemas are kept (default .data/tools)
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=${KUBERNETES_VERSION:-1.33.0}
REQUIRE_KUBECONFORM=${REQUIRE_KUBECONFORM:-0}
BUILD_IMAGE=${BUILD_IMAGE:-1}
TOOLS=${TOOLS:-.data/tools}
# kubeconform's release and the SHA-256 of its linux tarballs (from the release's CHECKSUMS).
KUBECONFORM_VERSION=v0.8.0
declare -A KUBECONFORM_SHA256=(
  [amd64]=9bc2bffbf71f261128533edaf912153948b7ff238f9a531ae6d34466ec287883
  [arm64]=1f53fc8e81258197a35e8603054162a5af1de8c5af13746c71ab680d9534ed87
)
K8S_DIR=deploy/k8s
SKIPPED=()

step() { printf '== %s\n' "$*"; }
skip() { printf '   skipped: %s\n' "$*"; SKIPPED+=("$*"); }
fail() { printf 'check-manifests: %s\n' "$*" >&2; exit 1; }

# A python3 that has PyYAML, installing Debian's python3-yaml when none has.
pick_python() {
  local candidate
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import yaml, tomllib' 2>/dev/null; then
      PYTHON=$candidate; return
    fi
  done
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "   installing python3-yaml (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-yaml >/dev/null \
      || fail "apt-get install python3-yaml failed; install PyYAML for python3 (3.11 or later)"
    PYTHON=/usr/bin/python3
    "$PYTHON" -c 'import yaml, tomllib' || fail "/usr/bin/python3 lacks yaml or tomllib (needs 3.11+)"
    return
  fi
  fail "needs python3 (3.11 or later) with PyYAML: apt-get install python3-yaml"
}

# Fetches the pinned kubeconform into $TOOLS, checking its checksum; leaves its path in
# $KUBECONFORM, or returns 1 when it is not cached and GitHub cannot be reached.
fetch_kubeconform() {
  local arch dir archive url expected actual
  case "$(uname -m)" in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "   no pinned kubeconform for $(uname -m)"; return 1 ;;
  esac
  dir=$TOOLS/kubeconform-$KUBECONFORM_VERSION
  KUBECONFORM=$dir/kubeconform
  [ -x "$KUBECONFORM" ] && return 0
  url=https://github.com/yannh/kubeconform/releases/download/$KUBECONFORM_VERSION/kubeconform-linux-$arch.tar.gz
  if ! curl -sS --head --max-time 10 -o /dev/null https://github.com 2>/dev/null; then
    echo "   github.com cannot be reached from here (no network, or a proxy is needed):"
    echo "   cannot download $url"
    return 1
  fi
  mkdir -p "$dir"
  archive=$dir/kubeconform.tar.gz
  curl -sSfL --max-time 120 -o "$archive" "$url" || fail "downloading $url failed"
  expected=${KUBECONFORM_SHA256[$arch]}
  actual=$(sha256sum "$archive" | cut -d' ' -f1)
  if [ "$actual" != "$expected" ]; then
    rm -f "$archive"
    fail "checksum mismatch for $url: expected $expected, got $actual"
  fi
  tar -xzf "$archive" -C "$dir" kubeconform
  rm -f "$archive"
}

check_kubeconform() {
  step "kubernetes: kubeconform $KUBECONFORM_VERSION, strict, Kubernetes $KUBERNETES_VERSION schemas"
  if ! fetch_kubeconform; then
    [ "$REQUIRE_KUBECONFORM" = 1 ] && fail "kubeconform is required (REQUIRE_KUBECONFORM=1) and could not be fetched"
    skip "kubeconform (not cached in $TOOLS and not downloadable)"
    return
  fi
  local cache=$TOOLS/kubeconform-schemas
  mkdir -p "$cache"
  # Schemas come from GitHub on first use and are cached; without network the cached
  # ones serve, and a missing one is an error that names the schema.
  if ! "$KUBECONFORM" -strict -summary -kubernetes-version "$KUBERNETES_VERSION" \
      -cache "$cache" -skip Kustomization "$K8S_DIR"/*.yaml; then
    fail "kubeconform found invalid manifests (above); if it could not download a schema, \
the machine needs access to raw.githubusercontent.com once (schemas are cached in $cache)"
  fi
}

# Cross-references kubeconform cannot see: names, selectors, ports, the rendered node
# configuration. Also rejects duplicate YAML keys, which kubectl would silently merge.
check_k8s_references() {
  step "kubernetes: cross-references, the rendered node configuration, render.sh"
  "$PYTHON" - "$K8S_DIR" <<'EOF'
import os, subprocess, sys, tomllib, yaml

class Strict(yaml.SafeLoader):
    pass
def no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {sorted(dup)}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, no_duplicates)

root = sys.argv[1]
errors = []
def check(cond, message):
    if not cond:
        errors.append(message)

docs = {}
for name in sorted(os.listdir(root)):
    if not name.endswith(".yaml"):
        continue
    with open(os.path.join(root, name)) as f:
        for doc in yaml.load_all(f, Loader=Strict):
            if doc is None:
                continue
            for field in ("apiVersion", "kind"):
                check(field in doc, f"{name}: a document lacks {field}")
            if doc.get("kind") != "Kustomization":
                check("name" in doc.get("metadata", {}), f"{name}: a {doc.get('kind')} has no name")
            docs.setdefault(doc.get("kind"), {})[doc.get("metadata", {}).get("name")] = (name, doc)

kust = docs["Kustomization"][None][1]
for resource in kust["resources"]:
    check(os.path.exists(os.path.join(root, resource)), f"kustomization: {resource} does not exist")
check("secret.example.yaml" not in kust["resources"], "kustomization must not apply the example Secret")

sts = docs["StatefulSet"]["ledger"][1]["spec"]
pod = sts["template"]["spec"]
labels = sts["template"]["metadata"]["labels"]
check(sts["selector"]["matchLabels"].items() <= labels.items(), "StatefulSet selector does not match its pods")
check(sts["podManagementPolicy"] == "Parallel", "pods must start in parallel")
peers = docs["Service"].get(sts["serviceName"])
check(peers is not None, f"no Service {sts['serviceName']} for the StatefulSet")
if peers:
    spec = peers[1]["spec"]
    check(spec.get("clusterIP") == "None", "the peer Service must be headless")
    check(spec.get("publishNotReadyAddresses") is True, "the peer Service must publish not-ready pods")
for svc_name, (_, svc) in docs["Service"].items():
    check(svc["spec"]["selector"].items() <= labels.items(), f"Service {svc_name} selects no node pod")
for pdb_name, (_, pdb) in docs["PodDisruptionBudget"].items():
    check(pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), f"PDB {pdb_name} selects no node pod")

configmaps = docs.get("ConfigMap", {})
secrets = docs.get("Secret", {})
def check_volumes(owner, spec):
    for volume in spec.get("volumes", []):
        if "configMap" in volume and not volume["configMap"].get("optional"):
            check(volume["configMap"]["name"] in configmaps, f"{owner}: ConfigMap {volume['configMap']['name']} is not defined")
        if "secret" in volume:
            check(volume["secret"]["secretName"] in secrets, f"{owner}: Secret {volume['secret']['secretName']} has no example")
    names = {v["name"] for v in spec.get("volumes", [])} | {c["metadata"]["name"] for c in sts.get("volumeClaimTemplates", [])}
    for container in spec.get("initContainers", []) + spec["containers"]:
        for mount in container.get("volumeMounts", []):
            check(mount["name"] in names, f"{owner}/{container['name']}: no volume {mount['name']}")
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secret = secrets.get(ref["name"])
                check(secret is not None and ref["key"] in secret[1].get("stringData", {}), f"{owner}/{container['name']}: secret key {ref['name']}/{ref['key']} is not in the example")
        sc = container.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, f"{owner}/{container['name']}: root filesystem must be read-only")
        check(sc.get("allowPrivilegeEscalation") is False, f"{owner}/{container['name']}: privilege escalation must be off")
        check("limits" in container.get("resources", {}), f"{owner}/{container['name']}: no resource limits")
    check(spec["securityContext"].get("runAsNonRoot") is True, f"{owner}: pods must run as non-root")
check_volumes("StatefulSet ledger", pod)
for job_name, (_, job) in docs.get("Job", {}).items():
    check_volumes(f"Job {job_name}", job["spec"]["template"]["spec"])

node = pod["containers"][0]
ports = {p["name"]: p["containerPort"] for p in node["ports"]}
check(node["readinessProbe"]["grpc"]["port"] == ports["health"], "readiness must ask the gRPC health service on the health port")
check(node["livenessProbe"]["tcpSocket"]["port"] in ("grpc", ports["grpc"]), "liveness must be a TCP check of the gRPC port")

# Render one pod's configuration as the init container does, and parse it.
data = configmaps["ledger-config"][1]["data"]
secret_toml = secrets["ledger-secrets"][1]["stringData"]["secrets.toml"]
template = tomllib.loads(data["node.toml"])
rendered = 'node_id = 1\n' + secret_toml + "\n" + data["node.toml"]
config = tomllib.loads(rendered)
for field in ("node_id", "listen_addr", "data_dir", "cluster_secret", "api_keys"):
    check(field in config, f"the rendered node configuration lacks {field}")
check(config["listen_addr"].endswith(f":{ports['grpc']}"), "listen_addr does not match the gRPC container port")
check(config.get("metrics_listen_addr", "").endswith(f":{ports['metrics']}"), "metrics_listen_addr does not match the metrics port")
check(config.get("health_listen_addr", "").endswith(f":{ports['health']}"), "health_listen_addr does not match the health port")
tls_mount = next((m["mountPath"] for m in node["volumeMounts"] if m["name"] == "tls"), None)
for field in ("cert_file", "key_file", "client_ca_file"):
    path = config.get("tls", {}).get(field, "")
    check(tls_mount is not None and path.startswith(tls_mount + "/"), f"tls.{field} ({path}) is not in the mounted Secret ledger-tls")
    key = os.path.basename(path)
    check(key in secrets.get("ledger-tls", (None, {}))[1].get("stringData", {}), f"tls.{field}: the example Secret ledger-tls has no {key}")
check(any(k.get("operator") for k in config["api_keys"]), "the example Secret has no operator key")
syntax = subprocess.run(["bash", "-n"], input=data["render.sh"], text=True, capture_output=True)
check(syntax.returncode == 0, f"render.sh: {syntax.stderr.strip()}")
job = docs["Job"]["ledger-bootstrap"][1]["spec"]["template"]["spec"]["containers"][0]
syntax = subprocess.run(["bash", "-n"], input=job["args"][0], text=True, capture_output=True)
check(syntax.returncode == 0, f"bootstrap Job script: {syntax.stderr.strip()}")

if errors:
    print("\n".join("   " + e for e in errors))
    sys.exit(1)
print(f"   {sum(len(v) for v in docs.values())} documents, references consistent")
EOF
}

check_compose() {
  step "compose: deploy/compose.yaml"
  if command -v docker >/dev/null && docker compose version >/dev/null 2>&1; then
    docker compose -f deploy/compose.yaml config --quiet || fail "docker compose rejects deploy/compose.yaml"
    echo "   docker compose config: valid"
  else
    echo "   (no docker compose here: parsing it with python instead)"
  fi
  "$PYTHON" - deploy <<'EOF'
import os, sys, tomllib, yaml

base = sys.argv[1]
errors = []
def check(cond, message):
    if not cond:
        errors.append(message)

with open(os.path.join(base, "compose.yaml")) as f:
    compose = yaml.safe_load(f)
services, volumes = compose["services"], compose.get("volumes") or {}
for name in ("certs", "node1", "node2", "node3", "init", "providers", "mcp"):
    check(name in services, f"no service {name}")
for name, svc in services.items():
    check("image" in svc or "build" in svc, f"{name}: no image or build")
    build = svc.get("build")
    if build:
        context = os.path.normpath(os.path.join(base, build["context"]))
        check(os.path.isfile(os.path.join(context, build["dockerfile"])), f"{name}: no {build['dockerfile']} in {context}")
    for mount in svc.get("volumes", []):
        source = mount.split(":")[0]
        if source.startswith("."):
            check(os.path.isfile(os.path.join(base, source)), f"{name}: {source} does not exist")
        else:
            check(source in volumes, f"{name}: named volume {source} is not declared")
    for dep in svc.get("depends_on", []):
        check(dep in services, f"{name}: depends on unknown service {dep}")

members = dict(m.split("=", 1) for m in services["init"]["environment"]["LEDGER_MEMBERS"].split())
endpoints = services["init"]["environment"]["LEDGER_ENDPOINTS"].split(",")
for n in (1, 2, 3):
    with open(os.path.join(base, "compose", f"node{n}.toml"), "rb") as f:
        node = tomllib.load(f)
    check(node["node_id"] == n, f"node{n}.toml: node_id is {node['node_id']}")
    address = f"node{n}:" + node["listen_addr"].rsplit(":", 1)[1]
    check(members.get(str(n)) == address, f"init's member {n} is not node{n}'s address {address}")
    check(address in endpoints, f"init does not reach node{n}")
    check(any(k.get("operator") and k["key"] == services["init"]["environment"]["LEDGER_API_KEY"] for k in node["api_keys"]), f"node{n} does not accept init's operator key")
    tls = node.get("tls") or {}
    made = services["certs"]["command"]
    check(tls.get("cert_file") == f"/etc/ledger/tls/node{n}.pem" and f"node{n}" in made, f"node{n}: no certificate of its own from the certs service")
    check(tls.get("client_ca_file") == "/etc/ledger/tls/ca.pem", f"node{n}: peers are not checked against the compose CA")
    check("tls:/etc/ledger/tls:ro" in services[f"node{n}"]["volumes"], f"node{n}: the tls volume is not mounted")
    port = node["listen_addr"].rsplit(":", 1)[1]
    metrics = node["metrics_listen_addr"].rsplit(":", 1)[1]
    published = [p.rsplit(":", 1)[1] for p in services[f"node{n}"]["ports"]]
    check(port in published and metrics in published, f"node{n}: gRPC or metrics port is not published")
with open(os.path.join(base, "compose", "mcp.toml"), "rb") as f:
    mcp = tomllib.load(f)
check(sorted(mcp["ledger_endpoints"]) == sorted(endpoints), "the MCP server does not name every node")
check(mcp["provider_addr"].split(":")[0] in services, "the MCP server's provider is not a service")
check((mcp.get("ledger_tls") or {}).get("ca_cert_file") == "/etc/ledger/tls/ca.pem", "the MCP server does not verify the nodes")
check(services["init"]["environment"].get("LEDGER_CA_CERT") == "/etc/ledger/tls/ca.pem", "the bootstrap does not verify the nodes")

if errors:
    print("\n".join("   " + e for e in errors))
    sys.exit(1)
print(f"   {len(services)} services, {len(volumes)} volumes, node configurations consistent")
EOF
}

check_systemd() {
  step "systemd: deploy/systemd/ledger-node.service"
  if ! command -v systemd-analyze >/dev/null; then
    skip "systemd-analyze verify (systemd-analyze is not installed)"
    return
  fi
  # verify wants ExecStart's binary to exist: check a copy that starts /bin/true instead.
  local dir out
  dir=$(mktemp -d)
  sed 's|^ExecStart=/usr/local/bin/ledger-node|ExecStart=/bin/true|' \
    deploy/systemd/ledger-node.service > "$dir/ledger-node.service"
  out=$(systemd-analyze verify "$dir/ledger-node.service" 2>&1) || { rm -rf "$dir"; fail "systemd-analyze verify: $out"; }
  rm -rf "$dir"
  # Unknown keys and bad values are only warnings to verify: any output is a failure here.
  [ -z "$out" ] || fail "systemd-analyze verify: $out"
  echo "   systemd-analyze verify: clean"
}

check_dockerfile() {
  step "Dockerfile: hadolint, and the image build when a builder is present"
  if command -v hadolint >/dev/null; then
    hadolint deploy/Dockerfile || fail "hadolint found problems in deploy/Dockerfile"
    echo "   hadolint: clean"
  else
    skip "hadolint (not installed)"
  fi
  bash -n deploy/container/bootstrap.sh || fail "deploy/container/bootstrap.sh does not parse"
  local builder=()
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    builder=(docker build)
  elif command -v podman >/dev/null && podman info >/dev/null 2>&1; then
    builder=(podman build)
  elif command -v buildah >/dev/null; then
    builder=(buildah build)
  fi
  if [ ${#builder[@]} = 0 ]; then
    skip "image build (no container builder here: docker without a daemon, podman and buildah absent)"
  elif [ "$BUILD_IMAGE" = 0 ]; then
    skip "image build (BUILD_IMAGE=0)"
  else
    echo "   ${builder[*]} -f deploy/Dockerfile -t effect-ledger:check ."
    "${builder[@]}" -f deploy/Dockerfile -t effect-ledger:check . || fail "the image does not build"
  fi
}

pick_python
check_kubeconform
check_k8s_references
check_compose
check_systemd
check_dockerfile
if [ ${#SKIPPED[@]} -gt 0 ]; then
  echo "== deployment checks passed; not checked here:"
  printf '   - %s\n' "${SKIPPED[@]}"
else
  echo "== deployment checks passed"
fi
