#!/usr/bin/env bash
# Builds celgate's container image without a daemon or a container runtime:
#   1. a static release binary (x86_64-unknown-linux-gnu, -C target-feature=+crt-static) in its
#      own target triple directory, so the host's debug and release builds stay as they are;
#   2. checks that it is static and runs;
#   3. `buildah build` of the Containerfile (FROM scratch) with a context holding only the binary,
#      in a private vfs store under <target>/image/storage;
#   4. writes the image as an OCI archive, <target>/image/celgate-<version>.tar, checks its
#      config and OCI labels (version, git revision, licence) and runs the binary it holds
#      (verify.py), and prints the image reference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
cargo=${CARGO:-cargo}
triple=x86_64-unknown-linux-gnu

"$here/deps.sh"

host=$(rustc -vV | sed -n 's/^host: //p')
[ "$host" = "$triple" ] || {
  echo "image/build.sh: the image is built on an $triple host (this one is $host)" >&2
  exit 1
}
version=$("$cargo" pkgid -p celgate | sed 's/.*[#@]//')
# The revision celgate's build.rs would read, passed to it so the binary and the label agree.
revision=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
license=$("$cargo" metadata --no-deps --format-version 1 --locked | python3 -c \
  'import json, sys; print(next(p["license"] for p in json.load(sys.stdin)["packages"] if p["name"] == "celgate"))')
target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
out=$target_dir/image
ref=celgate:$version
archive=$out/celgate-$version.tar

echo "image/build.sh: building the static release binary of celgate $version" >&2
CELGATE_REVISION=$revision RUSTFLAGS='-C target-feature=+crt-static' "$cargo" build --release --locked -p celgate --target "$triple"
bin=$target_dir/$triple/release/celgate

file "$bin" | grep -Eq 'static(-pie)? linked' \
  || { echo "image/build.sh: $bin is not static: $(file -b "$bin")" >&2; exit 1; }
if ldd "$bin" 2>&1 | grep -q '=>'; then
  echo "image/build.sh: $bin loads shared libraries:" >&2; ldd "$bin" >&2; exit 1
fi
version_line="celgate $version (rev $revision)"
"$bin" --version | grep -qxF "$version_line" \
  || { echo "image/build.sh: $bin --version does not print '$version_line'" >&2; exit 1; }
echo "image/build.sh: $(file -b "$bin" | cut -d, -f1-5)" >&2

context=$out/context
rm -rf "$context" && mkdir -p "$context"
cp "$bin" "$context/celgate"
store=(--storage-driver vfs --root "$out/storage" --runroot "$out/run")
# A rebuild replaces the image of the same tag instead of leaving it dangling in the store.
if buildah "${store[@]}" inspect --type image "$ref" >/dev/null 2>&1; then
  buildah "${store[@]}" rmi --force "$ref" >/dev/null
fi
buildah "${store[@]}" build --isolation chroot --layers=false --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" --build-arg "LICENSES=$license" \
  -f "$root/Containerfile" -t "$ref" "$context" >&2
rm -f "$archive"
buildah "${store[@]}" push "$ref" "oci-archive:$archive:$ref" >&2

python3 "$here/verify.py" "$archive" "$ref" "$version_line" \
  "org.opencontainers.image.version=$version" "org.opencontainers.image.revision=$revision" \
  "org.opencontainers.image.licenses=$license" >&2
echo "image/build.sh: wrote $archive" >&2
echo "$ref"
