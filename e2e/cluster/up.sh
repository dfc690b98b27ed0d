#!/usr/bin/env bash
# Starts a local control plane (etcd, kube-apiserver, kube-controller-manager) on free loopback
# ports, with its own CA, client certificates, RBAC, a Metadata-level audit log and an
# AdmissionConfiguration that gives admission webhooks a client certificate and a bearer token
# (pki/webhook-client.crt, pki/webhook-token).
#   up.sh <state-dir>     state, logs and the kubeconfig go there; the last line printed is
#                         `export KUBECONFIG=<state-dir>/kubeconfig`.
# down.sh <state-dir> stops it. Every wait is bounded.
# CELGATE_K8S_MINOR=1.30 runs that minor's control plane (build.sh); CELGATE_APISERVER_FLAGS
# (space-separated) are added to kube-apiserver's flags, e.g. a feature gate.
# With NODE_IP=<address> (e2e/node/up.sh sets it) the control plane is one a kubelet on that
# address can join: the API server also listens there and advertises it as the `kubernetes`
# Service's endpoint (its certificate names it and the Service's cluster IP), pods get
# ServiceAccount tokens, and the controller manager also runs the workload controllers
# (Deployments, ReplicaSets, EndpointSlices, disruption budgets, pod garbage collection) and the
# node lifecycle controller (it lifts a new node's not-ready taint).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: up.sh <state-dir>}
mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
if [ -f "$dir/pids" ]; then
  echo "up.sh: a control plane already runs from $dir; stop it with down.sh $dir" >&2
  exit 1
fi
bin=$("$here/build.sh")
node_ip=${NODE_IP:-}
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# --- certificates -------------------------------------------------------------------------
pki="$dir/pki"
mkdir -p "$pki"
if [ ! -f "$pki/ca.crt" ]; then
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=celgate-local-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout ca.key -out ca.crt 2>/dev/null
    # X.509 v3 with explicit usages: rustls (celgate's client) rejects v1 certificates.
    sign() { # name subject usage [san]
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [ -n "${4:-}" ] && echo "subjectAltName=$4"
      } > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    # The `kubernetes` Service's cluster IP (the first of --service-cluster-ip-range) is what pods dial.
    sign apiserver "/CN=kube-apiserver" serverAuth \
      "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc,IP:10.96.0.1${node_ip:+,IP:$node_ip}"
    sign admin "/O=system:masters/CN=celgate-admin" clientAuth
    sign controller-manager "/CN=system:kube-controller-manager" clientAuth
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
fi

# kube-apiserver's credentials towards admission webhooks (celgate's --client-ca-file with
# --client-names, or --token-file): a client certificate from the cluster CA and a bearer token.
if [ ! -f "$pki/webhook-client.crt" ]; then
  (
    cd "$pki"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver-webhook-client" \
      -keyout webhook-client.key -out webhook-client.csr 2>/dev/null
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
      > webhook-client.ext
    openssl x509 -req -in webhook-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile webhook-client.ext -out webhook-client.crt 2>/dev/null
    rm -f webhook-client.csr webhook-client.ext
    openssl rand -hex 32 > webhook-token
  )
fi
cat > "$dir/webhook-kubeconfig" <<KC
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $pki/webhook-client.crt
    client-key: $pki/webhook-client.key
    token: $(cat "$pki/webhook-token")
KC
cat > "$dir/admission-config.yaml" <<AC
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $dir/webhook-kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $dir/webhook-kubeconfig
AC

etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
[ "$etcd_port" != "$etcd_peer" ] && [ "$api_port" != "$etcd_port" ] && [ "$api_port" != "$etcd_peer" ] \
  || { echo "up.sh: port collision, try again" >&2; exit 1; }

kubeconfig() { # file user
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}
kubeconfig "$dir/kubeconfig" admin
kubeconfig "$dir/controller-manager.kubeconfig" controller-manager

cat > "$dir/audit-policy.yaml" <<'AP'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
AP

: > "$dir/pids"
start() { # name args...
  local name=$1; shift
  "$@" > "$dir/$name.log" 2>&1 &
  echo "$name $!" >> "$dir/pids"
}

start etcd "$bin/etcd" --name local --data-dir "$dir/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "local=http://127.0.0.1:$etcd_peer" --listen-metrics-urls "" \
  --quota-backend-bytes 4294967296 --unsafe-no-fsync --log-level warn

wait_for() { # description seconds command...
  local what=$1 limit=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "up.sh: $what did not become ready within ${limit}s; logs in $dir" >&2
      "$here/down.sh" "$dir" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}
wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

if [ -n "$node_ip" ]; then
  # The API server reaches the kubelet (logs, exec) at the node's IP, with the admin's certificate.
  node_flags=(--bind-address 0.0.0.0 --advertise-address "$node_ip" --endpoint-reconciler-type lease
    --authorization-mode Node,RBAC --kubelet-preferred-address-types InternalIP
    --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key")
  controllers=deployment-controller,replicaset-controller,endpoints-controller,endpointslice-controller,disruption-controller,pod-garbage-collector-controller,node-lifecycle-controller
else
  node_flags=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none
    --disable-admission-plugins ServiceAccount --authorization-mode RBAC)
  controllers=""
fi
# CELGATE_APISERVER_FLAGS: more kube-apiserver flags, space-separated (an API off by default:
# --runtime-config=admissionregistration.k8s.io/v1beta1=true).
read -ra extra_flags <<< "${CELGATE_APISERVER_FLAGS:-}"
# The API server's command line is kept, so restart-apiserver.sh can start it again as it was.
apiserver=("$bin/kube-apiserver" "${node_flags[@]}" --secure-port "$api_port" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
  --admission-control-config-file "$dir/admission-config.yaml" \
  --profiling=false "${extra_flags[@]}")
printf '%s\0' "${apiserver[@]}" > "$dir/kube-apiserver.args"
start kube-apiserver "${apiserver[@]}"

ready() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
  "https://127.0.0.1:$api_port/readyz" ; }
wait_for kube-apiserver 90 ready

start kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$dir/controller-manager.kubeconfig" \
  --controllers namespace-controller,serviceaccount-controller,clusterrole-aggregation-controller,serviceaccount-token-controller,garbage-collector-controller,root-ca-certificate-publisher-controller,validatingadmissionpolicy-status-controller${controllers:+,$controllers} \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials --leader-elect=false --secure-port 0

# The controller manager is up once it has created the default service account.
wait_for kube-controller-manager 60 "$bin/kubectl" --kubeconfig "$dir/kubeconfig" -n default get serviceaccount default

echo "$api_port" > "$dir/apiserver-port"
echo "$bin" > "$dir/bin-dir"
echo "control plane up: kube-apiserver https://127.0.0.1:$api_port, logs in $dir" >&2
echo "export KUBECONFIG=$dir/kubeconfig PATH=$bin:\$PATH"
