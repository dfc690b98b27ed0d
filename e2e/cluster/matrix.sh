#!/usr/bin/env bash
# The version matrix: runs, on each chosen Kubernetes minor, the e2e suites that prove celgate
# works there, and prints one line per minor and suite (result, seconds) plus the control
# plane's build time (0 when cached).
#   matrix.sh <all|1.30,1.34,…> <suite>…
# The MutatingAdmissionPolicy differential joins the suites from 1.32 on, where kube-apiserver
# has a MutatingAdmissionPolicy to compare with (turned on by the test). CARGO names cargo.
# Writes the table to target/e2e-versions.txt as well; exits non-zero if any suite failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
chosen=${1:?usage: matrix.sh <all|minor,…> <suite>…}; shift
[ "$#" -gt 0 ] || { echo "matrix.sh: name at least one suite" >&2; exit 2; }
cargo=${CARGO:-cargo}
minors=$("$here/versions.sh" list "$chosen")

tests=()
for s in "$@" mutating_differential; do tests+=(--test "$s"); done
"$cargo" test -p celgate-e2e --no-run "${tests[@]}" >&2

report="$root/target/e2e-versions.txt"
mkdir -p "$root/target"
: > "$report"
line() { echo "$*" | tee -a "$report"; }
failed=0
for minor in $minors; do
  start=$(date +%s)
  CELGATE_K8S_MINOR=$minor "$here/build.sh" >/dev/null
  line "$minor build $(( $(date +%s) - start ))s"
  suites=("$@")
  [ "${minor#1.}" -ge 32 ] && suites+=(mutating_differential)
  for suite in "${suites[@]}"; do
    start=$(date +%s)
    if CELGATE_K8S_MINOR=$minor "$cargo" test -q -p celgate-e2e --test "$suite" -- --test-threads=1 \
        > "$root/target/e2e-versions-$minor-$suite.log" 2>&1; then
      result=ok
    else
      result=FAILED
      failed=1
    fi
    line "$minor $suite $result $(( $(date +%s) - start ))s (log: target/e2e-versions-$minor-$suite.log)"
  done
done
exit "$failed"
