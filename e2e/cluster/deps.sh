#!/usr/bin/env bash
# Installs the system tools the control plane scripts and e2e tests use, when missing.
set -euo pipefail
missing=()
for tool in curl openssl python3; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
command -v go >/dev/null || missing+=(golang-go)
# The load balancer in front of several celgate processes in the HA test.
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
# nghttp2's HTTP/2 load generator, beside the in-process client in `make bench-webhook`.
command -v h2load >/dev/null || missing+=(nghttp2-client)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps.sh: installing ${missing[*]}" >&2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
