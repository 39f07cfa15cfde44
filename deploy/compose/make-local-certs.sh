#!/usr/bin/env bash
# Makes the local secrets deploy/compose.yaml needs (TLS and bearer tokens are on by default), with
# openssl, in deploy/compose/secrets/ (git-ignored; the folder is yours only, mode 0700):
#   ca/ca.key, ca/ca.crt          a local CA (ECDSA P-256, 10 years); the key never enters a container
#   tls/tls.crt, tls/tls.key      the server certificate (825 days), SANs: localhost, 127.0.0.1, ::1,
#   tls/ca.crt                    posbias (the Compose service name), plus POSBIAS_CERT_EXTRA_SANS;
#                                 usages server and client auth (the health check can present it)
#   client/client.crt, .key       a client certificate (CN=posbias-local-client) for mTLS trials
#                                 (--tls-client-ca-file on the server, --cert-file/--key-file on the CLI)
#   auth/tokens.json              one principal "local-admin" (tenant "local", role admin) holding only
#                                 the SHA-256 of its token
#   token                         that token (mode 0600), printed once when it is made
#   grafana-admin-password        a random Grafana admin password, printed once when it is made
# Files that exist are kept (run it again to fill in what is missing); --force makes everything new
# (then restart the stack, or `docker compose -f deploy/compose.yaml kill -s HUP posbias`).
# Files that containers read (tls/*, auth/tokens.json, grafana-admin-password) are mode 0644, so
# that the containers' users (uid 10001, Grafana's 472) can read them through the bind mount; the
# 0700 folder keeps other users of this machine out.
#
# Usage: bash deploy/compose/make-local-certs.sh [--force] [--out DIR]
#   POSBIAS_CERT_EXTRA_SANS="DNS:posbias.example.internal,IP:192.0.2.10"   more server SANs
#   POSBIAS_CERT_DAYS=825                                                    server/client validity
# Then, with the stack up:
#   POSBIAS_TOKEN="$(cat deploy/compose/secrets/token)" posbias --server localhost:50051 --tls \
#     --ca-file deploy/compose/secrets/tls/ca.crt health
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/secrets"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-local-certs.sh: unknown argument $1 (--force, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
command -v openssl >/dev/null || { echo "make-local-certs.sh: openssl is not installed" >&2; exit 1; }
days="${POSBIAS_CERT_DAYS:-825}"
sans="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:posbias${POSBIAS_CERT_EXTRA_SANS:+,${POSBIAS_CERT_EXTRA_SANS}}"

umask 077
if [ "$force" = 1 ]; then rm -rf "${out:?}/ca" "$out/tls" "$out/client" "$out/auth" "$out/token" "$out/grafana-admin-password"; fi
mkdir -p "$out/ca" "$out/tls" "$out/client" "$out/auth"
chmod 0700 "$out" "$out/ca" "$out/client"
chmod 0755 "$out/tls" "$out/auth"  # inside the 0700 folder: only you can reach them
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
serial() { echo "0x$(openssl rand -hex 16)"; }
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# The CA. A new CA invalidates the certificates it signed: they are made again below.
if [ ! -s "$out/ca/ca.key" ] || [ ! -s "$out/ca/ca.crt" ]; then
  newkey "$out/ca/ca.key"
  openssl req -x509 -new -key "$out/ca/ca.key" -sha256 -days 3650 -set_serial "$(serial)" \
    -subj "/O=posbias local/CN=posbias local CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$out/ca/ca.crt"
  rm -f "$out/tls/tls.crt" "$out/client/client.crt"
  echo "made a local CA: $out/ca/ca.crt"
fi
cp "$out/ca/ca.crt" "$out/tls/ca.crt"
cp "$out/ca/ca.crt" "$out/client/ca.crt"

# sign NAME KEY CRT SUBJECT EXTENSIONS
sign() {
  newkey "$2"
  openssl req -new -key "$2" -subj "$4" -out "$work/$1.csr"
  printf '%s\n' "$5" >"$work/$1.ext"
  openssl x509 -req -in "$work/$1.csr" -CA "$out/ca/ca.crt" -CAkey "$out/ca/ca.key" -sha256 \
    -days "$days" -set_serial "$(serial)" -extfile "$work/$1.ext" -out "$3" 2>/dev/null
  openssl verify -CAfile "$out/ca/ca.crt" "$3" >/dev/null
}

if [ ! -s "$out/tls/tls.crt" ] || [ ! -s "$out/tls/tls.key" ]; then
  sign server "$out/tls/tls.key" "$out/tls/tls.crt" "/O=posbias local/CN=posbias" \
"basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash"
  echo "made the server certificate: $out/tls/tls.crt (SANs $sans)"
fi

if [ ! -s "$out/client/client.crt" ] || [ ! -s "$out/client/client.key" ]; then
  sign client "$out/client/client.key" "$out/client/client.crt" "/O=posbias local/CN=posbias-local-client" \
"basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash"
  echo "made a client certificate: $out/client/client.crt (subject O=posbias local, CN=posbias-local-client)"
fi

# The token: only its SHA-256 goes into tokens.json; the token itself is printed once and kept in a
# file only you can read.
if [ ! -s "$out/token" ] || [ ! -s "$out/auth/tokens.json" ]; then
  token="$(openssl rand -hex 32)"
  hash="$(printf '%s' "$token" | openssl dgst -sha256 -r | cut -d' ' -f1)"
  printf '%s\n' "$token" >"$out/token"
  chmod 0600 "$out/token"
  cat >"$out/auth/tokens.json" <<EOF
{"principals": [
  {"name": "local-admin", "tenant": "local", "roles": ["admin"], "token_sha256": "$hash"}
]}
EOF
  echo "made a bearer token for principal local-admin (role admin), kept in $out/token:"
  echo "  $token"
fi

if [ ! -s "$out/grafana-admin-password" ]; then
  password="$(openssl rand -base64 24 | tr -d '/+=\n' | cut -c1-24)"
  printf '%s' "$password" >"$out/grafana-admin-password"
  echo "made a Grafana admin password (user admin), kept in $out/grafana-admin-password:"
  echo "  $password"
fi

# What the containers read: world-readable files inside the private folder (see the header).
chmod 0644 "$out/tls/tls.crt" "$out/tls/tls.key" "$out/tls/ca.crt" "$out/auth/tokens.json" "$out/grafana-admin-password"
chmod 0600 "$out/ca/ca.key" "$out/client/client.key" "$out/token"
echo "secrets in $out: tls/ auth/ client/ ca/ token grafana-admin-password"
