#!/usr/bin/env bash
# Builds celgate's container image for linux/amd64 and linux/arm64 without a daemon, a container
# runtime or emulation:
#   1. static release binaries, cross-compiled the same way for both (<arch>-unknown-linux-gnu,
#      -C target-feature=+crt-static; aarch64 linked by Debian's aarch64-linux-gnu-gcc) in their
#      own target triple directories, so the host's debug and release builds stay as they are;
#   2. checks that each is static and for its architecture, and runs it (arm64 under
#      qemu-aarch64-static);
#   3. `buildah build --platform` of the Containerfile (FROM scratch: no RUN, nothing to emulate)
#      per architecture, with the OCI labels and annotations (source, version, revision, licenses),
#      into one manifest list, in a private vfs store under <target>/image/storage;
#   4. writes the list and both images as an OCI archive, <target>/image/celgate-<version>.tar,
#      with a CycloneDX SBOM per architecture beside it; checks the archive (verify.py) and prints
#      the image reference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
cargo=${CARGO:-cargo}
# image architecture -> Rust target
declare -A triples=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
sample=$root/config/samples/demo-policy.yaml

"$here/deps.sh"

host=$(rustc -vV | sed -n 's/^host: //p')
[ "$host" = "${triples[amd64]}" ] || {
  echo "image/build.sh: the image is built on an ${triples[amd64]} host (this one is $host)" >&2
  exit 1
}
installed=$(rustup target list --installed)
for triple in "${triples[@]}"; do
  grep -qx "$triple" <<<"$installed" || rustup target add "$triple" >&2
done

metadata=$("$cargo" metadata --locked --no-deps --format-version 1)
field() { python3 -c 'import json,sys; p=[p for p in json.load(sys.stdin)["packages"] if p["name"]=="celgate"][0]; print(p.get(sys.argv[1]) or "")' "$1" <<<"$metadata"; }
version=$(field version)
licenses=$(field license)
revision=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || revision=$revision-dirty
# The short revision celgate's build.rs would read, passed to it so the binary and the label agree.
short_revision=$(git rev-parse --short HEAD)
version_line="celgate $version (rev $short_revision)"
# Where the source is: CELGATE_SOURCE, else the crate's `repository`, else the git remote origin.
source_url=${CELGATE_SOURCE:-$(field repository)}
[ -n "$source_url" ] || source_url=$(git remote get-url origin 2>/dev/null || true)
labels=("org.opencontainers.image.version=$version" "org.opencontainers.image.revision=$revision"
  "org.opencontainers.image.licenses=$licenses")
if [ -n "$source_url" ]; then
  labels+=("org.opencontainers.image.source=$source_url")
else
  echo "image/build.sh: warning: no org.opencontainers.image.source label: set CELGATE_SOURCE," \
    "\`repository\` in Cargo.toml or a git remote origin" >&2
fi

target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
out=$target_dir/image
ref=celgate:$version
archive=$out/celgate-$version.tar

echo "image/build.sh: building the static release binaries of celgate $version" >&2
CELGATE_REVISION=$short_revision RUSTFLAGS='-C target-feature=+crt-static' \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
  "$cargo" build --release --locked -p celgate --target "${triples[amd64]}" --target "${triples[arm64]}"

declare -A machine=([amd64]=x86-64 [arm64]='ARM aarch64') runner=([amd64]='' [arm64]=qemu-aarch64-static)
for arch in amd64 arm64; do
  bin=$target_dir/${triples[$arch]}/release/celgate
  description=$(file -b "$bin")
  grep -Eq '(statically|static-pie) linked' <<<"$description" && grep -q ", ${machine[$arch]}," <<<"$description" \
    || { echo "image/build.sh: $bin is not a static ${machine[$arch]} binary: $description" >&2; exit 1; }
  # ldd only reads binaries of the host's architecture; file's "static" covers arm64.
  if [ "$arch" = amd64 ] && ldd "$bin" 2>&1 | grep -q '=>'; then
    echo "image/build.sh: $bin loads shared libraries:" >&2; ldd "$bin" >&2; exit 1
  fi
  ${runner[$arch]} "$bin" --version | grep -qxF "$version_line" \
    || { echo "image/build.sh: $arch: $bin --version does not print '$version_line'" >&2; exit 1; }
  echo "image/build.sh: $arch: $(cut -d, -f1-5 <<<"$description")" >&2
done

store=(--storage-driver vfs --root "$out/storage" --runroot "$out/run")
# A rebuild starts from an empty store (private to this script), leaving no image of the last one.
buildah "${store[@]}" rmi --all --force >/dev/null
build_labels=()
for label in "${labels[@]}"; do build_labels+=(--label "$label" --annotation "$label"); done
for arch in amd64 arm64; do
  context=$out/context-$arch
  rm -rf "$context" && mkdir -p "$context"
  cp "$target_dir/${triples[$arch]}/release/celgate" "$context/celgate"
  buildah "${store[@]}" build --isolation chroot --layers=false --platform "linux/$arch" \
    "${build_labels[@]}" --manifest "$ref" -f "$root/Containerfile" "$context" >&2
done
rm -f "$archive"
buildah "${store[@]}" manifest push --all --format oci "$ref" "oci-archive:$archive:$ref" >&2

for arch in amd64 arm64; do
  python3 "$here/sbom.py" "${triples[$arch]}" "$revision" "$out/celgate-$version-$arch.cdx.json" >&2
done
python3 "$here/verify.py" "$archive" "$ref" "$version_line" "$sample" "${labels[@]}" >&2
echo "image/build.sh: wrote $archive and its SBOMs $out/celgate-$version-{amd64,arm64}.cdx.json" >&2
echo "$ref"
