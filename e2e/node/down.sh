#!/usr/bin/env bash
# Stops the node started by up.sh <state-dir> and cleans up after it: the pods are deleted through
# the API first (the kubelet stops their containers and tears down their network), then the
# kubelet, kube-proxy, kube-scheduler, containerd and the registry are stopped, containers left
# over are removed, and the kubelet's mounts, kube-proxy's iptables rules, the pod bridge and the
# pod cgroups are removed; last the control plane stops. The logs stay in <state-dir>.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: down.sh <state-dir>}
dir=$(cd "$dir" 2>/dev/null && pwd) || { echo "node/down.sh: no $1" >&2; exit 0; }
ctrd=$dir/containerd
ctr=(ctr --address "$ctrd/containerd.sock" -n k8s.io)

if [ -f "$dir/node-pids" ]; then
  if [ -f "$dir/cluster/pids" ]; then
    kubectl=("$(cat "$dir/cluster/bin-dir")/kubectl" --kubeconfig "$dir/cluster/kubeconfig" --request-timeout 10s)
    # Owners first, so nothing re-creates the pods, then the pods, with their grace periods.
    "${kubectl[@]}" delete deployments,replicasets,daemonsets,statefulsets,jobs --all -A --wait=false >/dev/null 2>&1
    "${kubectl[@]}" delete pods --all -A --timeout 60s >/dev/null 2>&1 \
      || echo "node/down.sh: pods still there after 60 s; their containers are removed below" >&2
  fi
  # Every process of the node, in reverse order of start (containerd and the registry last).
  pids=$(tac "$dir/node-pids" | awk '{print $2}')
  # Running, and not a zombie: what up.sh started is reaped by whoever inherited it, maybe late.
  alive() { [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
  stop() { # pid
    kill -TERM "$1" 2>/dev/null || return 0
    local deadline=$(( $(date +%s) + 20 ))
    while alive "$1"; do
      [ "$(date +%s)" -lt "$deadline" ] || { kill -KILL "$1" 2>/dev/null; break; }
      sleep 0.1
    done
  }
  containerd_pid=$(awk '$1=="containerd"{print $2}' "$dir/node-pids")
  for pid in $pids; do
    [ "$pid" = "$containerd_pid" ] && continue
    stop "$pid"
  done
  # What the kubelet did not stop is removed through containerd, then containerd stops.
  if [ -n "$containerd_pid" ] && alive "$containerd_pid"; then
    for task in $("${ctr[@]}" tasks list -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1
      "${ctr[@]}" tasks delete -f "$task" >/dev/null 2>&1
    done
    for c in $("${ctr[@]}" containers list -q 2>/dev/null); do
      "${ctr[@]}" containers delete "$c" >/dev/null 2>&1
    done
    stop "$containerd_pid"
  fi
  # Shims of this containerd that outlived it (they are started with its socket address).
  for pid in $(pgrep -f "containerd-shim.* -address $ctrd/containerd.sock" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null
  done
  rm -f "$dir/node-pids"
fi

# The iptables chains, the pod bridge, the kubelet's and containerd's mounts, the pod cgroups.
# kube-proxy --cleanup leaves the kubelet's own (KUBE-FIREWALL, canaries): every KUBE- chain goes.
nodebin=$("$here/build.sh" 2>/dev/null) && "$nodebin/kube-proxy" --cleanup >/dev/null 2>&1
for ipt in iptables ip6tables; do
  for table in filter nat mangle; do
    "$ipt-save" -t "$table" 2>/dev/null | grep -E '^-A [A-Z-]+ .*-j KUBE-' | sed 's/^-A //' \
      | while read -r rule; do eval "$ipt -t $table -D $rule" 2>/dev/null; done
    for chain in $("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
      "$ipt" -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
      "$ipt" -t "$table" -X "$chain" 2>/dev/null
    done
  done
done
ip link del celgate0 2>/dev/null
for m in $(awk -v d="$dir" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done
# The directories the kubelet, runc and the CNI library make at fixed paths, when left empty,
# and the kubelet's device plugin socket (its path is fixed, whatever --root-dir says).
rm -f /var/lib/kubelet/device-plugins/kubelet.sock
for d in /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni \
  /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/s /run/containerd; do
  rmdir "$d" 2>/dev/null
done
for hierarchy in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$hierarchy" ] && find "$hierarchy" -depth -type d -exec rmdir {} \; 2>/dev/null
done
"$here/../cluster/down.sh" "$dir/cluster" 2>/dev/null
echo "node in $dir stopped" >&2
