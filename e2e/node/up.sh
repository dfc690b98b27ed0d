#!/usr/bin/env bash
# Starts a one-node cluster in <state-dir>: the control plane of e2e/cluster/up.sh (reachable from
# pods), kube-scheduler, and a node, `celgate-node`: containerd (runc, CNI bridge) with its own
# configuration, root, state and socket under <state-dir>, the kubelet and kube-proxy (iptables),
# plus a loopback registry (Debian's docker-registry) serving the pod sandbox image and whatever
# e2e/node/images.sh pushes. Needs root (the kubelet and containerd manage mounts, cgroups and
# network namespaces).
#   up.sh <state-dir>   the last line printed is `export KUBECONFIG=… PATH=… REGISTRY=…`.
# down.sh <state-dir> deletes the pods, stops everything and cleans up. Every wait is bounded.
#
# This machine kind (a VM or container without CAP_SYS_RESOURCE, cgroup v1) needs:
# containerd's `restrict_oom_score_adj` (lowering a sandbox's oom_score_adj is denied otherwise,
# and every sandbox fails to start), the kubelet's `failCgroupV1: false` and the cgroupfs driver
# (runc's SystemdCgroup = false), and the node IP of the default route's interface (a loopback
# node IP is refused).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: up.sh <state-dir>}
[ "$(id -u)" = 0 ] || { echo "node/up.sh: the node needs root (kubelet, containerd); run it as root" >&2; exit 1; }
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
# A fresh cluster each time: an etcd kept from a previous run keeps the `kubernetes` Service's
# endpoint at that run's API server port.
[ -e "$dir/cluster/etcd-data" ] && [ ! -f "$dir/node-pids" ] && {
  echo "node/up.sh: $dir holds a previous run's cluster; remove it or pick another directory" >&2; exit 1; }
[ -f "$dir/node-pids" ] && { echo "node/up.sh: a node already runs from $dir; stop it with down.sh $dir" >&2; exit 1; }
"$here/deps.sh"
nodebin=$("$here/build.sh")
node_name=celgate-node
# One node per machine: the pod bridge, kube-proxy's iptables chains and the cgroups are host-wide.
ip link show celgate0 >/dev/null 2>&1 && {
  echo "node/up.sh: another node runs on this machine (the bridge celgate0 exists); stop it with node/down.sh <its dir>" >&2
  exit 1; }
pod_cidr=10.244.0.0/24
node_ip=$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[ -n "$node_ip" ] || { echo "node/up.sh: no IPv4 default route: the node needs a non-loopback address" >&2; exit 1; }
[ "${#dir}" -le 60 ] || { echo "node/up.sh: $dir is too long for containerd's socket paths (60 characters at most)" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# --- control plane ------------------------------------------------------------------------------
NODE_IP=$node_ip "$here/../cluster/up.sh" "$dir/cluster" >/dev/null
bin=$(cat "$dir/cluster/bin-dir")
api_port=$(cat "$dir/cluster/apiserver-port")
pki=$dir/cluster/pki
kubectl=("$bin/kubectl" --kubeconfig "$dir/cluster/kubeconfig")

: > "$dir/node-pids"
start() { # name args...
  local name=$1; shift
  "$@" > "$dir/$name.log" 2>&1 &
  echo "$name $!" >> "$dir/node-pids"
}
fail() {
  echo "node/up.sh: $1; logs in $dir" >&2
  "$here/down.sh" "$dir" >&2 || true
  exit 1
}
wait_for() { # description seconds command...
  local what=$1 limit=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what did not become ready within ${limit}s"
    sleep 0.2
  done
}

# Client certificates from the cluster CA for the node's components; the API server's bootstrap
# RBAC (and the Node authorizer for the kubelet) grants these names what each needs.
client_cert() { # name subject
  [ -f "$pki/$1.crt" ] && return
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    > "$pki/$1.ext"
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
    -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
  rm -f "$pki/$1.csr" "$pki/$1.ext"
}
kubeconfig() { # file cert-name
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$pki/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$pki/$2.crt", client-key: "$pki/$2.key"}
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}
client_cert kubelet "/O=system:nodes/CN=system:node:$node_name"
client_cert kube-proxy "/CN=system:kube-proxy"
client_cert kube-scheduler "/CN=system:kube-scheduler"
for c in kubelet kube-proxy kube-scheduler; do kubeconfig "$dir/$c.kubeconfig" "$c"; done

start kube-scheduler "$nodebin/kube-scheduler" --kubeconfig "$dir/kube-scheduler.kubeconfig" \
  --leader-elect=false --secure-port 0

# --- registry -----------------------------------------------------------------------------------
registry_port=$(free_port)
registry=127.0.0.1:$registry_port
mkdir -p "$dir/registry"
cat > "$dir/registry.yaml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: "$dir/registry"}
  delete: {enabled: true}
http: {addr: "$registry"}
YAML
start registry docker-registry serve "$dir/registry.yaml"
wait_for registry 30 curl -sf "http://$registry/v2/"
"$here/images.sh" pause "$registry" "$dir/images" >/dev/null || fail "the pause image could not be built"

# --- containerd ---------------------------------------------------------------------------------
ctrd=$dir/containerd
mkdir -p "$ctrd" "$dir/cni" "$ctrd/certs.d/$registry"
cat > "$ctrd/certs.d/$registry/hosts.toml" <<TOML
server = "http://$registry"
[host."http://$registry"]
  capabilities = ["pull", "resolve"]
TOML
cat > "$ctrd/config.toml" <<TOML
version = 2
root = "$ctrd/root"
state = "$ctrd/state"
[grpc]
  address = "$ctrd/containerd.sock"
[ttrpc]
  address = "$ctrd/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$registry/pause:celgate"
  # No CAP_SYS_RESOURCE: keep the sandboxes' oom_score_adj at or above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$ctrd/certs.d"
TOML
# Pods on a bridge of their own; reachable from the host (the API server calls the webhook there).
cat > "$dir/cni/10-celgate.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "celgate",
  "plugins": [
    {"type": "bridge", "bridge": "celgate0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$dir/cni-ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
JSON
start containerd containerd --config "$ctrd/config.toml"
wait_for containerd 30 ctr --address "$ctrd/containerd.sock" version

# --- kubelet ------------------------------------------------------------------------------------
cat > "$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$ctrd/containerd.sock
# cgroup v1 here, managed by path (no systemd).
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $node_ip
port: $(free_port)
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(free_port)
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# A test node on a shared disk: no eviction or image collection for disk space.
evictionHard: {memory.available: "50Mi", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
# The containers' logs stay with the node (the default is /var/log/pods).
podLogsDir: $dir/pod-logs
registerNode: true
maxPods: 30
YAML
start kubelet "$nodebin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
  --root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" --hostname-override "$node_name" \
  --node-ip "$node_ip" --v 1
echo "$dir/kubelet" > "$dir/kubelet-root"

# --- kube-proxy ---------------------------------------------------------------------------------
cat > "$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$dir/kube-proxy.kubeconfig"}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $pod_cidr
healthzBindAddress: ""
metricsBindAddress: "127.0.0.1:$(free_port)"
# Leave the host's conntrack limits and timeouts as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {minSyncPeriod: 0s, syncPeriod: 30s}
YAML
start kube-proxy "$nodebin/kube-proxy" --config "$dir/kube-proxy.yaml"

node_ready() {
  [ "$("${kubectl[@]}" get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "node $node_name" 90 node_ready
# A Deployment needs the `kubernetes` Service routed (its pods talk to the API server).
wait_for "kube-proxy's rules for the kubernetes Service" 60 \
  sh -c "iptables-save -t nat | grep -q 'default/kubernetes:https'"

echo "$registry" > "$dir/registry-address"
echo "$node_name" > "$dir/node-name"
echo "node up: $node_name ($node_ip), registry $registry, logs in $dir" >&2
echo "export KUBECONFIG=$dir/cluster/kubeconfig PATH=$bin:\$PATH REGISTRY=$registry"
