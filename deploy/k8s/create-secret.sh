#!/usr/bin/env bash
# Creates the Secret zeroshard-credentials, which every zeroshard pod mounts
# at /etc/zeroshard/credentials, from a credentials directory made by
# scripts/make-dev-credentials.sh (or issued by your CA with the same file
# names), leaving out ca.key, which signs new certificates and stays with you:
#
#   bash scripts/make-dev-credentials.sh creds \
#     DNS:zeroshard-server-0.zeroshard-server DNS:zeroshard-server-1.zeroshard-server
#   bash deploy/k8s/create-secret.sh creds [-n NAMESPACE] [--dry-run=client -o yaml]
#
# Extra arguments go to `kubectl create secret generic`; $KUBECTL names the
# kubectl to run (default: kubectl on PATH).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 CREDENTIALS_DIR [kubectl create secret arguments...]" >&2
  exit 2
fi
dir=$1
shift
files=(ca.pem tokens server.pem server.key
       worker.pem worker.key worker.token ctl.pem ctl.key ctl.token
       admin.pem admin.key admin.token)
args=()
for f in "${files[@]}"; do
  if [ ! -f "$dir/$f" ]; then
    echo "create-secret: $dir/$f is missing (scripts/make-dev-credentials.sh)" >&2
    exit 1
  fi
  args+=("--from-file=$f=$dir/$f")
done
exec "${KUBECTL:-kubectl}" create secret generic zeroshard-credentials "${args[@]}" "$@"
