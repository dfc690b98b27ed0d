#!/usr/bin/env bash
# Builds the node's images and pushes them to its loopback registry (plain HTTP):
#   images.sh pause <registry> <work-dir>
#       the pod sandbox image <registry>/pause:celgate, pause.c linked statically, FROM scratch;
#   images.sh celgate <registry> <work-dir> <tag>
#       celgate's image from the project's Containerfile as <registry>/celgate:<tag>, labelled
#       org.opencontainers.image.version=<tag>: a new tag is a new image (its own digest), as a
#       release is. The binary is a static debug build for the host (x86_64-unknown-linux-gnu,
#       +crt-static, in its own target triple directory): `make image` builds the release images
#       for both architectures; the node only needs one that runs here, and a debug build reuses
#       most of the suite's compilation.
# buildah keeps its store under <work-dir>/buildah (vfs; no daemon). Prints the image reference.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
what=${1:?usage: images.sh pause|celgate <registry> <work-dir> [tag]}
registry=${2:?registry host:port}
work=${3:?work directory}
mkdir -p "$work"
store=(--storage-driver vfs --root "$work/buildah/storage" --runroot "$work/buildah/run")

case "$what" in
pause)
  ctx=$work/pause-context
  rm -rf "$ctx" && mkdir -p "$ctx"
  gcc -static -Os -s -o "$ctx/pause" "$here/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Containerfile"
  ref=$registry/pause:celgate
  ;;
celgate)
  tag=${4:?usage: images.sh celgate <registry> <work-dir> <tag>}
  target_dir=${CARGO_TARGET_DIR:-$root/target}
  case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
  triple=x86_64-unknown-linux-gnu
  (
    cd "$root"
    CELGATE_REVISION=$(git rev-parse --short HEAD) RUSTFLAGS='-C target-feature=+crt-static' \
      "${CARGO:-cargo}" build --locked -q -p celgate --target "$triple"
  ) >&2
  bin=$target_dir/$triple/debug/celgate
  ldd "$bin" 2>&1 | grep -q '=>' && { echo "node/images.sh: $bin is not static" >&2; exit 1; }
  ctx=$work/celgate-context
  rm -rf "$ctx" && mkdir -p "$ctx"
  # Without the debug sections (a third of the size); symbols stay for backtraces.
  strip --strip-debug -o "$ctx/celgate" "$bin"
  cp "$root/Containerfile" "$ctx/Containerfile"
  ref=$registry/celgate:$tag
  labels=(--label "org.opencontainers.image.version=$tag")
  ;;
*) echo "node/images.sh: unknown image $what (pause or celgate)" >&2; exit 1 ;;
esac

buildah "${store[@]}" build --isolation chroot --layers=false --platform linux/amd64 \
  ${labels[@]+"${labels[@]}"} -t "$ref" -f "$ctx/Containerfile" "$ctx" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; echo "node/images.sh: could not build $ref" >&2; exit 1; }
buildah "${store[@]}" push --quiet --tls-verify=false "$ref" "docker://$ref" >/dev/null 2>"$work/push.log" \
  || { cat "$work/push.log" >&2; echo "node/images.sh: could not push $ref" >&2; exit 1; }
buildah "${store[@]}" rmi "$ref" >/dev/null
echo "$ref"
