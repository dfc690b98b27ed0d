#!/usr/bin/env bash
# Restarts the kube-apiserver of the control plane started by up.sh <state-dir>: SIGTERM, wait
# until it has exited, start it again with the same command line (same port, same etcd), and
# wait until it is ready. Every wait is bounded. Prints the seconds it was down.
set -euo pipefail
dir=${1:?usage: restart-apiserver.sh <state-dir>}
[ -f "$dir/pids" ] && [ -f "$dir/kube-apiserver.args" ] \
  || { echo "restart-apiserver.sh: no control plane from up.sh in $dir" >&2; exit 1; }
pid=$(awk '$1=="kube-apiserver"{print $2}' "$dir/pids")
[ -n "$pid" ] || { echo "restart-apiserver.sh: no kube-apiserver in $dir/pids" >&2; exit 1; }
start=$(date +%s.%N)
kill -TERM "$pid" 2>/dev/null || true
# It drains in-flight requests first; under load that can last long, so after 15 s it is killed.
deadline=$(( $(date +%s) + 15 ))
while kill -0 "$pid" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; break; fi
  sleep 0.1
done
mapfile -d '' args < "$dir/kube-apiserver.args"
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
"${args[@]}" >> "$dir/kube-apiserver.log" 2>&1 &
new=$!
sed -i "s/^kube-apiserver .*/kube-apiserver $new/" "$dir/pids"
pki="$dir/pki"
port=$(cat "$dir/apiserver-port")
deadline=$(( $(date +%s) + 90 ))
until curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "restart-apiserver.sh: kube-apiserver not ready within 90s; log in $dir" >&2
    exit 1
  fi
  sleep 0.2
done
echo "$(date +%s.%N) $start" | awk '{printf "%.1f\n", $1 - $2}'
