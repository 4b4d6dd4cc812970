#!/usr/bin/env bash
# A local CA and certificates for the ledger's nodes and clients, with the openssl CLI.
#
#   deploy/gen-certs.sh DIR [NAME...]
#
# Writes into DIR (created if missing): ca.pem and ca.key (the CA, ten years), and for
# every NAME (default: node1 node2 node3 client) NAME.pem and NAME.key, signed by the CA,
# valid for two years, usable as server and as client certificate (a node presents its
# certificate to callers and to its peers). Every certificate names, besides NAME,
# localhost, 127.0.0.1, the compose services (node1..node3) and the Kubernetes names of
# deploy/k8s (ledger-0..4.ledger-peers[.effect-ledger.svc[.cluster.local]] and the client
# Service ledger[.effect-ledger.svc]); EXTRA_SANS adds more ("DNS:x.example,IP:10.0.0.5").
#
# Idempotent: an existing CA is kept, and an existing certificate is kept while it is
# signed by that CA; delete a file to make it again (RENEW=1 makes every leaf again,
# keeping the CA, for a rotation). Keys are 0600. CA_KEY puts the CA's key elsewhere
# (default DIR/ca.key): anyone holding it can make certificates every node trusts, so it
# belongs where no node, tool server or client reads DIR (a CA key found in DIR while
# CA_KEY names another place is moved there). Configure a node with
#   [tls]
#   cert_file = "DIR/node1.pem"
#   key_file = "DIR/node1.key"
#   client_ca_file = "DIR/ca.pem"
# and clients with --ca-cert DIR/ca.pem (and --client-cert/--client-key DIR/client.*).
set -euo pipefail

DIR=${1:?usage: deploy/gen-certs.sh DIR [NAME...]}
shift
NAMES=("$@")
[ ${#NAMES[@]} -gt 0 ] || NAMES=(node1 node2 node3 client)
command -v openssl >/dev/null || { echo "gen-certs: openssl is required" >&2; exit 1; }
CA_KEY=${CA_KEY:-$DIR/ca.key}
mkdir -p "$DIR" "$(dirname "$CA_KEY")"
umask 077

if [ "$CA_KEY" != "$DIR/ca.key" ] && [ -s "$DIR/ca.key" ] && [ ! -s "$CA_KEY" ]; then
  mv "$DIR/ca.key" "$CA_KEY"
  echo "gen-certs: moved the CA key from $DIR to $CA_KEY"
fi
if [ ! -s "$DIR/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -days 3650 -subj "/CN=effect-ledger local CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$CA_KEY" -out "$DIR/ca.pem" 2>/dev/null
  chmod 644 "$DIR/ca.pem"
  echo "gen-certs: made CA $DIR/ca.pem"
fi

sans() {
  local name=$1 list="DNS:$name,DNS:localhost,IP:127.0.0.1,DNS:node1,DNS:node2,DNS:node3"
  list+=",DNS:ledger,DNS:ledger.effect-ledger.svc,DNS:ledger.effect-ledger.svc.cluster.local"
  for i in 0 1 2 3 4; do
    list+=",DNS:ledger-$i.ledger-peers,DNS:ledger-$i.ledger-peers.effect-ledger.svc"
    list+=",DNS:ledger-$i.ledger-peers.effect-ledger.svc.cluster.local"
  done
  [ -z "${EXTRA_SANS:-}" ] || list+=",$EXTRA_SANS"
  tr , '\n' <<<"$list" | awk '!seen[$0]++' | paste -sd, -
}

for name in "${NAMES[@]}"; do
  cert=$DIR/$name.pem key=$DIR/$name.key
  if [ "${RENEW:-0}" != 1 ] && [ -s "$cert" ] && [ -s "$key" ] \
    && openssl verify -CAfile "$DIR/ca.pem" "$cert" >/dev/null 2>&1; then
    continue
  fi
  if [ ! -s "$CA_KEY" ]; then
    # A new CA here would make every peer and client distrust what it signs.
    echo "gen-certs: $name needs signing, but the key of $DIR/ca.pem is not at $CA_KEY:" \
      "set CA_KEY to where it is, or remove ca.pem to make a new CA (every certificate" \
      "then changes)" >&2
    exit 1
  fi
  ext=$(mktemp)
  cat > "$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$(sans "$name")
EOF
  # Written beside the old files and moved over them, so a node reloading at SIGHUP never
  # reads a half-written pair.
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -subj "/CN=$name" -keyout "$key.new" -out "$DIR/$name.csr" 2>/dev/null
  openssl x509 -req -in "$DIR/$name.csr" -CA "$DIR/ca.pem" -CAkey "$CA_KEY" \
    -CAcreateserial -days 730 -sha256 -extfile "$ext" -out "$cert.new" 2>/dev/null
  rm -f "$ext" "$DIR/$name.csr"
  chmod 644 "$cert.new"
  mv "$key.new" "$key"
  mv "$cert.new" "$cert"
  echo "gen-certs: made $cert"
done
