#!/usr/bin/env bash
# Applies celgate's CRDs (config/crd) with KUBECTL (default: kubectl on PATH) against KUBECONFIG
# and waits, at most CRD_WAIT_SECONDS (default 60), until each one is Established. A CRD just
# created has no status.conditions yet, so this polls the condition's value instead of
# `kubectl wait --for=condition=…`, which fails on a CRD without conditions.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kubectl=${KUBECTL:-kubectl}
limit=${CRD_WAIT_SECONDS:-60}
crds=(validatingadmissionpolicies validatingadmissionpolicybindings
  mutatingadmissionpolicies mutatingadmissionpolicybindings)
"$kubectl" apply -k "$root/config/crd" >/dev/null
deadline=$((SECONDS + limit))
for crd in "${crds[@]}"; do
  name=$crd.admission.celgate.io
  until [ "$("$kubectl" get crd "$name" \
    -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "crds.sh: CustomResourceDefinition $name is not Established after ${limit}s" >&2
      "$kubectl" get crd "$name" -o yaml >&2 || true
      exit 1
    fi
    sleep 0.2
  done
done
