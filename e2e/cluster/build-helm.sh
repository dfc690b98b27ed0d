#!/usr/bin/env bash
# Builds helm ($HELM_VERSION in helm.env) from the Go module proxy into a cache directory that
# survives between runs, as build.sh does for the control plane. Prints the path of the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=helm.env
. "$here/helm.env"

cache_root=${CELGATE_CACHE:-$HOME/.cache/celgate}
pin_hash=$(cat "$here/helm.env" "$here/build-helm.sh" | sha256sum | cut -c1-12)
out="$cache_root/helm/helm-$HELM_VERSION-$pin_hash"
if [ -x "$out/bin/helm" ]; then echo "$out/bin/helm"; exit 0; fi

command -v go >/dev/null || { echo "build-helm.sh: Go is required (https://go.dev/dl) to build helm" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out/bin"
start=$(date +%s)
echo "build-helm.sh: building helm v$HELM_VERSION" >&2
# `go install pkg@version` builds with helm's own go.mod and go.sum; the version as helm's
# Makefile sets it (its source says only the minor).
GOBIN="$out/bin.tmp" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
mv "$out/bin.tmp/helm" "$out/bin/helm" && rmdir "$out/bin.tmp"
"$out/bin/helm" version --short | grep -q "^v$HELM_VERSION" \
  || { echo "build-helm.sh: $out/bin/helm is not v$HELM_VERSION: $("$out/bin/helm" version --short)" >&2; exit 1; }

echo "build-helm.sh: helm built in $(( $(date +%s) - start ))s into $out/bin" >&2
echo "$(( $(date +%s) - start ))" > "$out/build-seconds"
echo "$out/bin/helm"
