#!/usr/bin/env bash
# Installs Prometheus (Debian's `prometheus` package: `prometheus` and `promtool`) when missing:
# the monitoring tests check the alert rules with promtool and scrape celgate with a real server.
set -euo pipefail
command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0
echo "monitoring/deps.sh: installing prometheus" >&2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq
# --no-install-recommends: the server and promtool only, not the node exporter and web assets.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus
