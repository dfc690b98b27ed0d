#!/usr/bin/env bash
# Publishes a release folder (build.sh) to a registry, as `make release … REGISTRY=…` does:
#   publish.sh <release-dir> <registry>      registry: host[:port][/path]
#   1. the image index as <registry>/celgate:<version> (skopeo, every digest kept: the pushed index
#      is the folder's celgate-<version>-image.digest);
#   2. the chart as oci://<registry>/charts/celgate:<version> (helm push);
#   3. both signed by digest with the release key (cosign; no transparency log), the signatures
#      pushed beside them and written to the folder (celgate-<version>-{image,chart}.sig and
#      .payload.json), then verified with the folder's cosign.pub as docs/release.md tells users;
#   4. <release-dir>/published.env: VERSION, IMAGE (<registry>/celgate@sha256:…) and CHART
#      (oci://<registry>/charts/celgate@sha256:…).
# A loopback registry (127.0.0.1, localhost) is spoken to over plain HTTP. Log in to another first
# (`skopeo login`, `helm registry login`, `cosign login`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${1:?usage: publish.sh <release-dir> <registry>}
registry=${2:?usage: publish.sh <release-dir> <registry>}
dir=$(cd "$dir" && pwd)
digests=("$dir"/celgate-*-image.digest)
[ ${#digests[@]} = 1 ] && [ -f "${digests[0]}" ] \
  || { echo "release/publish.sh: $dir is not a release folder (no single celgate-<version>-image.digest)" >&2; exit 1; }
version=$(basename "${digests[0]}" -image.digest) && version=${version#celgate-}
image_digest=$(cat "${digests[0]}")
helm=$("$root/e2e/cluster/build-helm.sh")
cosign=$("$here/build-cosign.sh")
key=$("$here/key.sh")
# The key's password, empty when unset as key.sh made it: cosign would ask a terminal for one.
export COSIGN_PASSWORD=${COSIGN_PASSWORD-}
# The folder's public key must be the key's: a folder built with another key is not re-signed.
[ "$("$cosign" public-key --key "$key")" = "$(cat "$dir/cosign.pub")" ] \
  || { echo "release/publish.sh: $dir/cosign.pub is not the public half of $key" >&2; exit 1; }

copy_tls=() inspect_tls=() helm_http=() cosign_http=()
case "${registry%%/*}" in
127.*|localhost|localhost:*|'[::1]'*)
  copy_tls=(--dest-tls-verify=false) inspect_tls=(--tls-verify=false) helm_http=(--plain-http)
  cosign_http=(--allow-http-registry --allow-insecure-registry)
  ;;
esac

# 1. The image.
skopeo copy --quiet --all --preserve-digests ${copy_tls[@]+"${copy_tls[@]}"} \
  "oci-archive:$dir/celgate-$version-image.tar:celgate:$version" "docker://$registry/celgate:$version" >&2
pushed=$(skopeo inspect --raw ${inspect_tls[@]+"${inspect_tls[@]}"} "docker://$registry/celgate:$version" | sha256sum | cut -d' ' -f1)
[ "sha256:$pushed" = "$image_digest" ] \
  || { echo "release/publish.sh: $registry/celgate:$version is sha256:$pushed, not the release's $image_digest" >&2; exit 1; }
image=$registry/celgate@$image_digest

# 2. The chart.
out=$("$helm" push "$dir/celgate-$version.tgz" "oci://$registry/charts" ${helm_http[@]+"${helm_http[@]}"} 2>&1) \
  || { echo "$out" >&2; echo "release/publish.sh: helm push failed" >&2; exit 1; }
chart_digest=$(sed -n 's/^Digest: \(sha256:[0-9a-f]\{64\}\)$/\1/p' <<<"$out")
[ -n "$chart_digest" ] || { echo "$out" >&2; echo "release/publish.sh: helm push printed no digest" >&2; exit 1; }
chart=$registry/charts/celgate@$chart_digest

# 3. Signatures, then the users' check.
for what in image chart; do
  ref=${!what}
  "$cosign" sign --yes --key "$key" --tlog-upload=false ${cosign_http[@]+"${cosign_http[@]}"} \
    --output-signature "$dir/celgate-$version-$what.sig" --output-payload "$dir/celgate-$version-$what.payload.json" \
    "$ref" >/dev/null 2>"$dir/.sign.log" || { cat "$dir/.sign.log" >&2; echo "release/publish.sh: cosign sign $ref failed" >&2; exit 1; }
  "$cosign" verify --key "$dir/cosign.pub" --insecure-ignore-tlog=true ${cosign_http[@]+"${cosign_http[@]}"} \
    "$ref" >/dev/null 2>"$dir/.sign.log" || { cat "$dir/.sign.log" >&2; echo "release/publish.sh: cosign verify $ref failed" >&2; exit 1; }
done
rm -f "$dir/.sign.log"

printf 'VERSION=%s\nIMAGE=%s\nCHART=oci://%s\n' "$version" "$image" "$chart" > "$dir/published.env"
echo "release/publish.sh: published and signed $image and oci://$chart" >&2
