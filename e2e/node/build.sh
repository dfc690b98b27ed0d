#!/usr/bin/env bash
# Builds the node's Kubernetes binaries, kubelet, kube-proxy and kube-scheduler, at the control
# plane's pin (e2e/cluster/versions.env) from the Go module proxy, the way e2e/cluster/build.sh
# builds the control plane, into their own cache directory (so changing this script leaves the
# control plane's build alone). Prints the directory holding the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../cluster/versions.env
. "$here/../cluster/versions.env"

cache_root=${CELGATE_CACHE:-$HOME/.cache/celgate}
pin_hash=$(cat "$here/../cluster/versions.env" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache_root/node/k8s-$K8S_VERSION-$pin_hash"
bins=(kubelet kube-proxy kube-scheduler)

complete=1
for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then echo "$out/bin"; exit 0; fi

command -v go >/dev/null || { echo "node/build.sh: Go is required (https://go.dev/dl) to build the node" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out/bin"
start=$(date +%s)
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
patch=$(echo "$K8S_VERSION" | cut -d. -f3)

# The same wrapper module as the control plane's: k8s.io/kubernetes at the pin, its staging
# modules (v0.0.0 in its go.mod) replaced by their published v0.<minor>.<patch>.
gomod=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
  | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$gomod" ] || { echo "node/build.sh: could not download k8s.io/kubernetes@v$K8S_VERSION" >&2; exit 1; }
src="$out/src"
rm -rf "$src" && mkdir -p "$src" && cd "$src"
go mod init celgate.invalid/node >/dev/null 2>&1
for m in $(awk '$2=="v0.0.0"{print $1}' "$gomod" | grep '^k8s.io/' | sort -u); do
  go mod edit -replace="$m=$m@v0.$minor.$patch"
done
go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
cat > tools.go <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for b in "${bins[@]}"; do
  echo "node/build.sh: building $b v$K8S_VERSION" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$out/bin/$b.tmp" "$out/bin/$b"
done
echo "node/build.sh: node built in $(( $(date +%s) - start ))s into $out/bin" >&2
echo "$(( $(date +%s) - start ))" > "$out/build-seconds"
echo "$out/bin"
