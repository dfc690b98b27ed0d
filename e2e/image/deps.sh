#!/usr/bin/env bash
# Installs what `make image` uses, when missing: buildah (builds the image without a daemon or a
# container runtime), file (checks that the binary is static) and python3 (verify.py).
set -euo pipefail
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v file >/dev/null || missing+=(file)
command -v python3 >/dev/null || missing+=(python3)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "image/deps.sh: installing ${missing[*]}" >&2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
