#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl (Kubernetes $K8S_VERSION) and etcd
# ($ETCD_VERSION) from the Go module proxy into a cache directory that survives between runs.
# Prints the directory holding the binaries. Rebuilds only when the pins change.
# CELGATE_K8S_MINOR=1.30 builds that minor's pins (versions.sh); unset, today's versions.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pins=$("$here/versions.sh" pins "${CELGATE_K8S_MINOR:-}")
# shellcheck source=versions.env
. "$pins"

cache_root=${CELGATE_CACHE:-$HOME/.cache/celgate}
# The contents only: a checkout elsewhere (a CI clone, a worktree) reuses the same build.
pin_hash=$(cat "$pins" "$here/build.sh" | sha256sum | cut -c1-12)
out="$cache_root/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-$pin_hash"
bins=(kube-apiserver kube-controller-manager kubectl etcd)

complete=1
for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then echo "$out/bin"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is required (https://go.dev/dl) to build the control plane" >&2; exit 1; }
# GO_TOOLCHAIN (a pins file's, e.g. go1.23.12): that Go, fetched from the module proxy as
# golang.org/toolchain, for a release this machine's Go no longer builds.
export GOTOOLCHAIN=${GO_TOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out/bin" "$out/src"
start=$(date +%s)

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
patch=$(echo "$K8S_VERSION" | cut -d. -f3)

# 1) kubernetes' own go.mod lists its staging modules at v0.0.0; read it outside any module.
gomod=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
  | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$gomod" ] || { echo "build.sh: could not download k8s.io/kubernetes@v$K8S_VERSION" >&2; exit 1; }

# 2) a throwaway wrapper module that points every staging module at its published v0.<minor>.<patch>.
kdir="$out/src/kubernetes"
rm -rf "$kdir" && mkdir -p "$kdir" && cd "$kdir"
go mod init celgate.invalid/control-plane >/dev/null 2>&1
# STAGING_PATCHES (a pins file's, "module=version …"): staging modules whose tag of this patch
# the module proxy does not have, built at the named (the newest published) patch instead.
for m in $(awk '$2=="v0.0.0"{print $1}' "$gomod" | grep '^k8s.io/' | sort -u); do
  version=v0.$minor.$patch
  for p in ${STAGING_PATCHES:-}; do [ "${p%%=*}" = "$m" ] && version=${p#*=}; done
  go mod edit -replace="$m=$m@$version"
done
go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
cat > tools.go <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for b in kube-apiserver kube-controller-manager kubectl; do
  echo "build.sh: building $b v$K8S_VERSION" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$out/bin/$b.tmp" "$out/bin/$b"
done

# 3) etcd: a three-line main over etcdmain.
edir="$out/src/etcd"
rm -rf "$edir" && mkdir -p "$edir" && cd "$edir"
go mod init celgate.invalid/etcd >/dev/null 2>&1
cat > main.go <<GO
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
echo "build.sh: building etcd v$ETCD_VERSION" >&2
go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1
go mod tidy >/dev/null 2>&1
go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd.tmp" .
mv "$out/bin/etcd.tmp" "$out/bin/etcd"

echo "build.sh: control plane built in $(( $(date +%s) - start ))s into $out/bin" >&2
echo "$(( $(date +%s) - start ))" > "$out/build-seconds"
echo "$out/bin"
