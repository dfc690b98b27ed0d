#!/usr/bin/env bash
# Waits, at most ESTABLISHED_SECONDS (default 60), until each CustomResourceDefinition named in the
# arguments (`crd/<name>` or `<name>`) is Established, with KUBECTL (default: kubectl on PATH)
# against KUBECONFIG. A CRD just created has no status.conditions yet, and
# `kubectl wait --for=condition=Established` then fails ('.status.conditions accessor error: <nil>');
# this polls the condition's value instead.
set -euo pipefail
kubectl=${KUBECTL:-kubectl}
limit=${ESTABLISHED_SECONDS:-60}
deadline=$((SECONDS + limit))
for crd in "$@"; do
  name=${crd#crd/}
  until [ "$("$kubectl" get crd "$name" \
    -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "established.sh: CustomResourceDefinition $name is not Established after ${limit}s" >&2
      "$kubectl" get crd "$name" -o yaml >&2 || true
      exit 1
    fi
    sleep 0.2
  done
done
