#!/usr/bin/env bash
# The release key: prints the path of the cosign private key `make release` signs with,
# CELGATE_RELEASE_KEY or ~/.config/celgate/release/cosign.key (outside the checkout and the target
# directory, so a clean build keeps it), made with `cosign generate-key-pair` when missing. The
# key is encrypted with COSIGN_PASSWORD (cosign reads it; empty when unset, for a local key only:
# a published release's key has a password, given to make release in COSIGN_PASSWORD).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
key=${CELGATE_RELEASE_KEY:-$HOME/.config/celgate/release/cosign.key}
if [ ! -f "$key" ]; then
  cosign=$("$here/build-cosign.sh")
  dir=$(dirname "$key")
  mkdir -p "$dir" && chmod 0700 "$dir"
  tmp=$(mktemp -d "$dir/.generate.XXXXXX")
  (cd "$tmp" && COSIGN_PASSWORD=${COSIGN_PASSWORD-} "$cosign" generate-key-pair >/dev/null 2>&1) \
    || { rm -rf "$tmp"; echo "release/key.sh: cosign generate-key-pair failed in $tmp" >&2; exit 1; }
  mv "$tmp/cosign.key" "$key" && mv "$tmp/cosign.pub" "${key%.key}.pub" && rmdir "$tmp"
  echo "release/key.sh: made the release key $key (public half ${key%.key}.pub)" >&2
fi
echo "$key"
