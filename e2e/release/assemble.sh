#!/usr/bin/env bash
# Writes a release folder from an image build (e2e/image/build.sh's output directory):
#   assemble.sh <out-dir> <version> <image-dir>
# <image-dir> holds celgate-<version>.tar (the OCI archive of the image index celgate:<version>),
# celgate-<version>-{amd64,arm64}.cdx.json and context-{amd64,arm64}/celgate (the binaries the
# images hold). <out-dir> is emptied, then gets:
#   celgate-<version>-image.tar          the image index (linux/amd64, linux/arm64), OCI archive
#   celgate-<version>-image.digest       the index's digest (sha256:…), kept by every push
#   celgate-<version>-{amd64,arm64}.cdx.json  its CycloneDX SBOMs
#   celgate-<version>-linux-{amd64,arm64}     the `celgate` CLI: the images' static binaries
#   celgate-<version>.tgz                the Helm chart, version and appVersion <version>, its
#                                        image.digest the index's (a chart pinned pins the image)
#   cosign.pub                           the release key's public half (key.sh)
#   SHA256SUMS, SHA256SUMS.sig           every file's checksum, signed with the release key
# then checks the folder as a user would (verify-sums.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: assemble.sh <out-dir> <version> <image-dir>}
version=${2:?usage: assemble.sh <out-dir> <version> <image-dir>}
images=${3:?usage: assemble.sh <out-dir> <version> <image-dir>}
helm=$("$root/e2e/cluster/build-helm.sh")
cosign=$("$here/build-cosign.sh")
key=$("$here/key.sh")
# The key's password, empty when unset as key.sh made it: cosign would ask a terminal for one.
export COSIGN_PASSWORD=${COSIGN_PASSWORD-}
work=$out.work
rm -rf "$out" "$work" && mkdir -p "$out" "$work"

# 1. The image, its digest, SBOMs and binaries.
image=$out/celgate-$version-image.tar
cp "$images/celgate-$version.tar" "$image"
digest=$(python3 - "$image" "celgate:$version" <<'PY'
import json, sys, tarfile
archive, ref = sys.argv[1], sys.argv[2]
with tarfile.open(archive) as tar:
    index = json.load(tar.extractfile("index.json"))
named = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref]
if len(named) != 1 or named[0]["mediaType"] != "application/vnd.oci.image.index.v1+json":
    sys.exit(f"release/assemble.sh: {archive} does not hold one image index named {ref}: {index}")
print(named[0]["digest"])
PY
)
echo "$digest" > "$out/celgate-$version-image.digest"
for arch in amd64 arm64; do
  cp "$images/celgate-$version-$arch.cdx.json" "$out/"
  install -m 0755 "$images/context-$arch/celgate" "$out/celgate-$version-linux-$arch"
done

# 2. The chart: a copy of charts/celgate (its links to config/ read through) with the index's
# digest as image.digest's default, packaged at <version>; it must render the image by digest.
cp -rL "$root/charts/celgate" "$work/celgate"
values=$work/celgate/values.yaml
grep -qx '  digest: ""' "$values" \
  || { echo "release/assemble.sh: charts/celgate/values.yaml has no '  digest: \"\"' line under image:" >&2; exit 1; }
sed -i "s/^  digest: \"\"\$/  digest: \"$digest\"/" "$values"
"$helm" lint --strict "$work/celgate" >"$work/lint.log" 2>&1 \
  || { cat "$work/lint.log" >&2; echo "release/assemble.sh: helm lint failed" >&2; exit 1; }
"$helm" package "$work/celgate" --version "$version" --app-version "$version" --destination "$out" >/dev/null
chart=$out/celgate-$version.tgz
# shellcheck source=../cluster/versions.env
kube_version=$(. "$root/e2e/cluster/versions.env" && echo "$K8S_VERSION")
"$helm" show chart "$chart" | grep -qx "appVersion: $version" \
  || { echo "release/assemble.sh: $chart's appVersion is not $version" >&2; exit 1; }
"$helm" template celgate "$chart" --namespace celgate-system --kube-version "$kube_version" \
  --set image.repository=registry.example/celgate | grep -qF "image: \"registry.example/celgate@$digest\"" \
  || { echo "release/assemble.sh: $chart does not render its image as <repository>@$digest" >&2; exit 1; }
rm -rf "$work"

# 3. Checksums of every file, signed with the release key (cosign.pub verifies them with cosign
# or openssl).
"$cosign" public-key --key "$key" > "$out/cosign.pub"
(cd "$out" && sha256sum -- * > SHA256SUMS)
"$cosign" sign-blob --yes --key "$key" --tlog-upload=false --output-signature "$out/SHA256SUMS.sig" \
  "$out/SHA256SUMS" >"$work.log" 2>&1 || { cat "$work.log" >&2; echo "release/assemble.sh: cosign sign-blob failed" >&2; exit 1; }
rm -f "$work.log"
"$here/verify-sums.sh" "$out"
echo "release/assemble.sh: wrote $out" >&2
