#!/usr/bin/env bash
# `make bench-memory`: celgate's resident memory when idle. Starts a local control plane, applies
# celgate's CRDs and the docs' example policies (as celgate objects), runs the release build of
# celgate against it, waits until it is ready and has settled, and prints VmRSS and VmHWM from
# /proc, and writes them to target/bench/memory.json (MEMORY_REPORT to change). Everything it
# starts is stopped on exit; every wait is bounded.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac
celgate=$target/release/celgate
[ -x "$celgate" ] || { echo "idle-rss.sh: $celgate is missing; run cargo build --release -p celgate" >&2; exit 1; }
settle=${SETTLE_SECONDS:-20}
dir=$(mktemp -d /tmp/celgate-rss-XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  "$root/e2e/cluster/down.sh" "$dir/cluster" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
eval "$("$root/e2e/cluster/up.sh" "$dir/cluster" | tail -n 1)"
kubectl=$("$root/e2e/cluster/build.sh")/kubectl
"$kubectl" apply -k "$root/config/crd" >/dev/null
"$kubectl" wait --for=condition=Established --timeout=60s \
  crd/{validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings}.admission.celgate.io >/dev/null
policies=0
for f in "$root"/e2e/testdata/docs/*.yaml "$root"/config/samples/*.yaml; do
  # The docs' examples are written for the in-tree API group; celgate's CRDs take the same specs.
  sed 's|admissionregistration.k8s.io/v1|admission.celgate.io/v1|' "$f" \
    | "$kubectl" apply -f - >/dev/null 2>&1 && policies=$((policies + 1)) || true
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
metrics_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
"$celgate" run --bind-address 127.0.0.1 --webhook-port "$port" --webhook-url "https://127.0.0.1:$port" \
  --metrics-port "$metrics_port" \
  >"$dir/celgate.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  curl -skf "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/celgate.log" >&2; exit 1; }
  sleep 0.2
done
curl -skf "https://127.0.0.1:$port/readyz" >/dev/null || { echo "celgate never became ready" >&2; exit 1; }
sleep "$settle"
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
objects=$("$kubectl" get celgate --no-headers 2>/dev/null | wc -l)
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
echo "celgate idle: RSS $(mb "$rss") MB, peak $(mb "$hwm") MB (release build, $objects celgate objects from $policies files, ${settle}s after ready)"
report=${MEMORY_REPORT:-$root/target/bench/memory.json}
mkdir -p "$(dirname "$report")"
printf '{"rss_mb": %s, "hwm_mb": %s, "celgate_objects": %s, "files": %s, "settle_seconds": %s, "loadavg": "%s"}\n' \
  "$(mb "$rss")" "$(mb "$hwm")" "$objects" "$policies" "$settle" "$(cat /proc/loadavg)" >"$report"
echo "report: $report"
