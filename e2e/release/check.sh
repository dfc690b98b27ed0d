#!/usr/bin/env bash
# `make release-check`: the release's packaging, signing and publishing, in seconds, on a stand-in
# image (a text file in place of the binary, both architectures, FROM celgate's Containerfile):
# assemble.sh writes the folder (chart packaged with the index's digest, SHA256SUMS signed with a
# throwaway key), publish.sh pushes the image and the chart to a loopback registry (Debian's
# docker-registry) and signs and verifies both, and the chart from oci:// pinned by digest renders
# the image by its digest; then a changed file fails verify-sums.sh, and the throwaway key's folder
# is refused by publish.sh under another key. The release build itself is `make release`, outside
# CI's time budget.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
for tool in buildah skopeo docker-registry; do
  command -v "$tool" >/dev/null || { "$root/e2e/node/deps.sh"; break; }
done
version=0.0.0-check
work=$(mktemp -d "${TMPDIR:-/tmp}/celgate-release-check.XXXXXX")
registry_pid=
cleanup() {
  [ -z "$registry_pid" ] || kill "$registry_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export CELGATE_RELEASE_KEY=$work/key/cosign.key
# Unset, as a user's first `make release` has it: the key is made and used without a password.
unset COSIGN_PASSWORD

# The stand-in image directory, laid out as e2e/image/build.sh leaves its own.
images=$work/image
store=(--storage-driver vfs --root "$work/buildah/storage" --runroot "$work/buildah/run")
for arch in amd64 arm64; do
  mkdir -p "$images/context-$arch"
  echo "celgate $version stand-in for linux/$arch" > "$images/context-$arch/celgate"
  echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$images/celgate-$version-$arch.cdx.json"
  buildah "${store[@]}" build --quiet --isolation chroot --layers=false --platform "linux/$arch" \
    --manifest "celgate:$version" -f "$root/Containerfile" "$images/context-$arch" >/dev/null
done
buildah "${store[@]}" manifest push --quiet --all --format oci "celgate:$version" \
  "oci-archive:$images/celgate-$version.tar:celgate:$version" >/dev/null

out=$work/release-$version
"$here/assemble.sh" "$out" "$version" "$images"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
printf 'version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: "%s"}}\nhttp: {addr: "127.0.0.1:%s"}\n' \
  "$work/registry" "$port" > "$work/registry.yaml"
docker-registry serve "$work/registry.yaml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.1; done
"$here/publish.sh" "$out" "127.0.0.1:$port/check"
digest=$(cat "$out/celgate-$version-image.digest")
grep -qx "IMAGE=127.0.0.1:$port/check/celgate@$digest" "$out/published.env" \
  || { echo "release/check.sh: published.env does not name the image by the folder's digest" >&2; exit 1; }
# As a user installs it: the chart from oci:// pinned by digest (and its tag checked against it)
# renders the image by the release's digest.
chart=$(sed -n 's/^CHART=//p' "$out/published.env")
kube_version=$(. "$root/e2e/cluster/versions.env" && echo "$K8S_VERSION")
"$("$root/e2e/cluster/build-helm.sh")" template celgate "$chart" --version "$version" --plain-http \
  --namespace celgate-system --kube-version "$kube_version" --set image.repository=127.0.0.1:$port/check/celgate \
  | grep -qF "image: \"127.0.0.1:$port/check/celgate@$digest\"" \
  || { echo "release/check.sh: $chart does not render the image as …@$digest" >&2; exit 1; }

# What must fail, and why: a changed file, and a folder signed by another key.
echo tampered >> "$out/celgate-$version-linux-amd64"
if refused=$("$here/verify-sums.sh" "$out" 2>&1) || ! grep -q "celgate-$version-linux-amd64: FAILED" <<<"$refused"; then
  echo "release/check.sh: verify-sums.sh did not refuse a changed binary: $refused" >&2; exit 1
fi
if refused=$(CELGATE_RELEASE_KEY=$work/other/cosign.key "$here/publish.sh" "$out" "127.0.0.1:$port/check" 2>&1) \
  || ! grep -q "cosign.pub is not the public half of $work/other/cosign.key" <<<"$refused"; then
  echo "release/check.sh: publish.sh did not refuse a folder of another key: $refused" >&2; exit 1
fi
echo "release/check.sh: assembled, published, signed and verified $version; a changed file and another key are refused" >&2
