#!/usr/bin/env bash
# Installs what `make image` uses, when missing: buildah (builds the images and the manifest list
# without a daemon or a container runtime), skopeo (reads the archive's index back), file (checks
# that the binaries are static), python3 (verify.py), the aarch64 cross C compiler and static glibc
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross: ring's C and assembly, and the final link) and
# qemu-user-static (runs the arm64 binary on this host to prove it starts).
set -euo pipefail
need=(buildah:buildah skopeo:skopeo file:file python3:python3
  aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu qemu-aarch64-static:qemu-user-static)
missing=()
for pair in "${need[@]}"; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
# Static glibc for aarch64 (libc.a), which the cross gcc alone does not bring.
[ -f /usr/aarch64-linux-gnu/lib/libc.a ] || missing+=(libc6-dev-arm64-cross)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "image/deps.sh: installing ${missing[*]}" >&2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
