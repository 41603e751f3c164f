#!/usr/bin/env bash
# Makes a development credentials directory for zeroshard (docs/DESIGN.md,
# "Security"; the layout is wire/credentials.h's):
#
#   bash scripts/make-dev-credentials.sh DIR [SAN ...]
#
#   DIR/ca.pem ca.key            a fresh CA (EC P-256, 30 days) - ca.key is
#                                for making more certificates; do not ship it
#   DIR/server.pem server.key    CN zeroshard-server; SANs localhost,
#                                127.0.0.1, ::1 and every SAN given
#                                ("DNS:name" or "IP:addr")
#   DIR/{worker,ctl,admin}.pem/.key   client certificates whose CN is the role
#   DIR/{worker,ctl,admin}.token      a random bearer token per role
#   DIR/tokens                   the servers' table: "<role> <token>" lines
#
# Keys and tokens are 0600 and DIR 0700. Running it again over DIR replaces
# every file (a rotation: running servers and clients pick the new files up
# without a restart). For production, issue certificates from your own CA
# (cert-manager in Kubernetes) with the same file names.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 DIR [DNS:name|IP:addr ...]" >&2
  exit 2
fi
dir=$1
shift
command -v openssl >/dev/null || {
  echo "make-dev-credentials: openssl is missing (apt-get install openssl)" >&2
  exit 1
}
mkdir -p "$dir"
chmod 700 "$dir"
umask 077
tmp=$(mktemp -d "$dir/.new.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sans="DNS:localhost,IP:127.0.0.1,IP:::1"
for s in "$@"; do
  case "$s" in
    DNS:*|IP:*) sans="$sans,$s" ;;
    *) echo "make-dev-credentials: SAN '$s' is not DNS:name or IP:addr" >&2; exit 2 ;;
  esac
done

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key "$tmp/ca.key"
openssl req -x509 -new -key "$tmp/ca.key" -days 30 -subj "/CN=zeroshard dev CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$tmp/ca.pem" 2>/dev/null

# issue NAME CN EXTENSIONS
issue() {
  local name=$1 cn=$2 ext=$3
  key "$tmp/$name.key"
  openssl req -new -key "$tmp/$name.key" -subj "/CN=$cn" -out "$tmp/$name.csr" 2>/dev/null
  printf '%b' "$ext" > "$tmp/$name.ext"
  openssl x509 -req -in "$tmp/$name.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
    -CAcreateserial -days 30 -extfile "$tmp/$name.ext" -out "$tmp/$name.pem" 2>/dev/null
  rm -f "$tmp/$name.csr" "$tmp/$name.ext"
}
issue server zeroshard-server \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=$sans\n"
table="# role token (scripts/make-dev-credentials.sh)"
for role in worker ctl admin; do
  issue "$role" "$role" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:$role\n"
  token=$(openssl rand -hex 32)
  echo "$token" > "$tmp/$role.token"
  table="$table"$'\n'"$role $token"
done
echo "$table" > "$tmp/tokens"
rm -f "$tmp"/*.srl
# Replace the files one by one (each rename is atomic); certificates before
# the CA's private key matters not, but keys go with their certificates.
for f in ca.key ca.pem server.key server.pem worker.key worker.pem ctl.key ctl.pem \
         admin.key admin.pem worker.token ctl.token admin.token tokens; do
  chmod 600 "$tmp/$f"
  mv -f "$tmp/$f" "$dir/$f"
done
chmod 644 "$dir"/*.pem
echo "make-dev-credentials: wrote $(cd "$dir" && pwd) (SANs $sans)"
