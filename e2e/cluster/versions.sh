#!/usr/bin/env bash
# The version matrix: today's control plane (versions.env) and one pins file per older minor
# (versions/<minor>.env), latest patch of each with the etcd that release pins.
#   versions.sh pins [<minor>]   the pins file of 1.<n> (today's when empty)
#   versions.sh list [all|<minor>,…]   the chosen minors, oldest first, one a line
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

default_minor() { sed -n 's/^K8S_VERSION=\([0-9]*\.[0-9]*\)\..*/\1/p' "$here/versions.env"; }

all_minors() {
  { default_minor; for f in "$here"/versions/*.env; do basename "$f" .env; done; } | sort -t. -k1,1n -k2,2n -u
}

pins() {
  local minor=${1:-}
  if [ -z "$minor" ] || [ "$minor" = "$(default_minor)" ]; then echo "$here/versions.env"; return; fi
  [ -f "$here/versions/$minor.env" ] || {
    echo "versions.sh: no pins for Kubernetes $minor; the matrix is: $(all_minors | paste -sd' ')" >&2
    exit 1
  }
  echo "$here/versions/$minor.env"
}

list() {
  local chosen=${1:-all}
  if [ "$chosen" = all ]; then all_minors; return; fi
  for m in ${chosen//,/ }; do pins "$m" >/dev/null && echo "$m"; done | sort -t. -k1,1n -k2,2n -u
}

case "${1:-}" in
  pins) pins "${2:-}" ;;
  list) list "${2:-all}" ;;
  *) echo "usage: versions.sh pins [<minor>] | list [all|<minor>,…]" >&2; exit 2 ;;
esac
