#!/usr/bin/env bash
# Installs what the e2e node (e2e/node/up.sh) runs, when missing, from Debian: containerd and runc
# (the container runtime), containernetworking-plugins (the pods' bridge network), iptables and
# conntrack (kube-proxy's service routing), docker-registry (the loopback registry the pods pull
# celgate's image from), buildah and skopeo (build the images and push them there), gcc and libc6-dev (the pause image's static
# program is compiled here: no public registry is reachable).
set -euo pipefail
need=(containerd:containerd runc:runc iptables:iptables conntrack:conntrack
  docker-registry:docker-registry buildah:buildah skopeo:skopeo gcc:gcc)
missing=()
for pair in "${need[@]}"; do
  command -v "${pair%%:*}" >/dev/null || [ -x "/usr/sbin/${pair%%:*}" ] || [ -x "/usr/bin/${pair%%:*}" ] \
    || missing+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
# The static C library the pause program links against.
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f "/usr/lib/$(gcc -dumpmachine 2>/dev/null)/libc.a" ] \
  || missing+=(libc6-dev)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "node/deps.sh: installing ${missing[*]}" >&2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq
# The packages' own services are not used: up.sh runs containerd and the registry with their own
# configuration, state and sockets under the node's directory.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
