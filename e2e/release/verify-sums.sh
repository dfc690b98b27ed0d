#!/usr/bin/env bash
# Verifies a release folder as docs/release.md tells a user to: SHA256SUMS's signature with the
# folder's cosign.pub, by cosign and by openssl alone (cosign's blob signature is a base64 ECDSA
# P-256 signature over the SHA-256 of the file), then every file against SHA256SUMS.
#   verify-sums.sh <release-dir> [public-key]   (default: the folder's cosign.pub)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: verify-sums.sh <release-dir> [public-key]}
key=$(cd "$(dirname "${2:-$dir/cosign.pub}")" && pwd)/$(basename "${2:-$dir/cosign.pub}")
cosign=$("$here/build-cosign.sh")
cd "$dir"
"$cosign" verify-blob --key "$key" --signature SHA256SUMS.sig --insecure-ignore-tlog=true SHA256SUMS 2>&1 \
  | grep -qx 'Verified OK' || { echo "release/verify-sums.sh: cosign: SHA256SUMS.sig is not $key's signature of SHA256SUMS" >&2; exit 1; }
base64 -d SHA256SUMS.sig > "${TMPDIR:-/tmp}/celgate-sums.$$.sig"
verified=$(openssl dgst -sha256 -verify "$key" -signature "${TMPDIR:-/tmp}/celgate-sums.$$.sig" SHA256SUMS 2>&1 || true)
rm -f "${TMPDIR:-/tmp}/celgate-sums.$$.sig"
[ "$verified" = "Verified OK" ] || { echo "release/verify-sums.sh: openssl: $verified" >&2; exit 1; }
sha256sum --quiet -c SHA256SUMS
echo "release/verify-sums.sh: SHA256SUMS is signed by $key (cosign and openssl agree) and every file matches it" >&2
