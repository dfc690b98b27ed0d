#!/usr/bin/env bash
# Stops the control plane started by up.sh <state-dir> and waits until its processes have exited.
set -uo pipefail
dir=${1:?usage: down.sh <state-dir>}
[ -f "$dir/pids" ] || { echo "down.sh: nothing runs from $dir" >&2; exit 0; }
# Stop in reverse order of start, so the controller manager goes before the API server and etcd.
pids=$(tac "$dir/pids" | awk '{print $2}')
for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
deadline=$(( $(date +%s) + 20 ))
# Running, and not a zombie: what up.sh started is reaped by whoever inherited it, maybe late.
alive() { [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
for pid in $pids; do
  while alive "$pid"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; break; fi
    sleep 0.1
  done
done
rm -f "$dir/pids"
echo "control plane in $dir stopped" >&2
