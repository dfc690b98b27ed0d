#!/usr/bin/env bash
# `make run`: celgate against the cluster in KUBECONFIG, or, when KUBECONFIG is unset, against a
# local control plane started here (and stopped when celgate exits). The webhook is registered by
# URL (https://127.0.0.1:$WEBHOOK_PORT) and celgate's CRDs are applied first.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
port=${WEBHOOK_PORT:-9443}
started=""
if [ -z "${KUBECONFIG:-}" ]; then
  dir=${LOCAL_CLUSTER:-$root/.local/cluster}
  [ -f "$dir/pids" ] && "$root/e2e/cluster/down.sh" "$dir"
  eval "$("$root/e2e/cluster/up.sh" "$dir" | tail -n 1)"
  started=$dir
  trap '"$root/e2e/cluster/down.sh" "$started"' EXIT
  trap 'exit 130' INT TERM
fi
kubectl=$(command -v kubectl || true)
bin=$("$root/e2e/cluster/build.sh")
[ -x "$bin/kubectl" ] && kubectl=$bin/kubectl
"$kubectl" apply -k "$root/config/crd" >/dev/null
KUBECTL=$kubectl "$root/e2e/cluster/established.sh" \
  {validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings,policyexceptions}.admission.celgate.io
cat >&2 <<MSG

celgate is starting against $KUBECONFIG.
In another shell:
  export KUBECONFIG=$KUBECONFIG
  $kubectl label namespace default environment=test --overwrite
  $kubectl apply -f $root/config/samples/demo-policy.yaml
  $kubectl -n default create deployment web --image=nginx --replicas=6   # denied by the demo policy

MSG
# On the control plane started here, celgate accepts only kube-apiserver's credentials.
auth=()
[ -n "$started" ] && auth=(--client-ca-file "$started/pki/ca.crt" --client-names kube-apiserver-webhook-client \
  --token-file "$started/pki/webhook-token")
"${CARGO_TARGET_DIR:-$root/target}/debug/celgate" run --webhook-port "$port" --webhook-url "https://127.0.0.1:$port" "${auth[@]}"
