#!/usr/bin/env bash
# `make release VERSION=<version> [REGISTRY=<host[:port][/path]>]`: builds the image (e2e/image/
# build.sh: both architectures, the release profile, fat LTO), then assemble.sh writes everything
# a user pulls into <target>/release-<version>/ (docs/release.md), and with REGISTRY publish.sh
# pushes the image and the chart there and signs both by digest. <version> must be the workspace's
# version (Cargo.toml): the binaries print it, the image's labels carry it. Prints the folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
version=${1:?usage: build.sh <version> [registry]}
registry=${2:-}

crate_version=$(${CARGO:-cargo} metadata --locked --no-deps --format-version 1 \
  | python3 -c 'import json,sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"]=="celgate"][0]["version"])')
[ "$version" = "$crate_version" ] || {
  echo "release/build.sh: VERSION=$version is not celgate's version $crate_version: set" \
    "[workspace.package] version in Cargo.toml first, so the binaries, the image and the chart say the same" >&2
  exit 1
}
[ -z "$(git status --porcelain --untracked-files=no)" ] \
  || echo "release/build.sh: warning: the work tree has changes; the image's revision label says -dirty" >&2
# The tools first: a missing one fails now, not after the image's build.
"$root/e2e/cluster/build-helm.sh" >/dev/null
"$here/build-cosign.sh" >/dev/null
"$here/key.sh" >/dev/null

target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
ref=$(CARGO=${CARGO:-cargo} "$root/e2e/image/build.sh")
[ "$ref" = "celgate:$version" ] || { echo "release/build.sh: make image built $ref, not celgate:$version" >&2; exit 1; }
out=$target_dir/release-$version
"$here/assemble.sh" "$out" "$version" "$target_dir/image"
[ -z "$registry" ] || "$here/publish.sh" "$out" "$registry"
echo "$out"
