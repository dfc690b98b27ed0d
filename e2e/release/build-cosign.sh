#!/usr/bin/env bash
# Builds cosign ($COSIGN_VERSION in cosign.env) from the Go module proxy into a cache directory
# that survives between runs, as e2e/cluster/build-helm.sh builds helm, under `nice -n 10` (the
# machine's cores are shared). Prints the path of the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cosign.env
. "$here/cosign.env"

cache_root=${CELGATE_CACHE:-$HOME/.cache/celgate}
pin_hash=$(cat "$here/cosign.env" "$here/build-cosign.sh" | sha256sum | cut -c1-12)
out="$cache_root/cosign/cosign-$COSIGN_VERSION-$pin_hash"
if [ -x "$out/bin/cosign" ]; then echo "$out/bin/cosign"; exit 0; fi

command -v go >/dev/null || { echo "build-cosign.sh: Go is required (https://go.dev/dl) to build cosign" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out"
start=$(date +%s)
echo "build-cosign.sh: building cosign v$COSIGN_VERSION" >&2
# `go install pkg@version` builds with cosign's own go.mod and go.sum; the version as cosign's
# Makefile stamps it (sigs.k8s.io/release-utils reads it for `cosign version`).
rm -rf "$out/bin.tmp"
GOBIN="$out/bin.tmp" nice -n 10 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN_VERSION" \
  "github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION"
mkdir -p "$out/bin" && mv "$out/bin.tmp/cosign" "$out/bin/cosign" && rmdir "$out/bin.tmp"
"$out/bin/cosign" version 2>&1 | grep -q "v$COSIGN_VERSION" \
  || { echo "build-cosign.sh: $out/bin/cosign is not v$COSIGN_VERSION: $("$out/bin/cosign" version 2>&1)" >&2; exit 1; }

echo "build-cosign.sh: cosign built in $(( $(date +%s) - start ))s into $out/bin" >&2
echo "$(( $(date +%s) - start ))" > "$out/build-seconds"
echo "$out/bin/cosign"
