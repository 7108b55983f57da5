#!/usr/bin/env bash
# Starts the etcd and kube-apiserver that build.sh made, on loopback
# (127.0.0.1:6443), with a fresh etcd; prints READY and leaves them
# running (their pids in $KUBE_DIR/run/*.pid; stop them with
# `kill $(cat $KUBE_DIR/run/*.pid)`). Writes $KUBE_DIR/run/kubeconfig with
# contexts `real` (an admin, system:masters) and `dana` (a user with no
# groups, for RBAC cases). Tokens: admin-token, nobody-token, dana-token.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out=${KUBE_DIR:-$root/target/apiserver}
mkdir -p "$out/run"
cd "$out/run"
if [ ! -f ca.pem ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca-key.pem -out ca.pem -subj /CN=kube-ca 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=kube-apiserver 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 \
        -out server.pem -extfile san.ext 2>/dev/null
    openssl genrsa -out sa-key.pem 2048 2>/dev/null
    openssl rsa -in sa-key.pem -pubout -out sa.pem 2>/dev/null
    printf 'admin-token,admin,1,system:masters\nnobody-token,nobody,2\ndana-token,dana,3\n' >tokens.csv
fi
for port in 2379 2380 6443; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "127.0.0.1:$port is taken (another run's server, still stopping?); stop it first" >&2
        exit 1
    fi
done
rm -rf etcd-data
"$out/etcd" etcd-data >etcd.log 2>&1 &
echo $! >etcd.pid
for _ in $(seq 100); do grep -q "etcd ready" etcd.log && break; sleep 0.2; done
"$out/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --secure-port=6443 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --tls-cert-file=server.pem --tls-private-key-file=server-key.pem --client-ca-file=ca.pem \
    --token-auth-file=tokens.csv --authorization-mode=Node,RBAC \
    --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file=sa.pem --service-account-signing-key-file=sa-key.pem \
    --api-audiences=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.96.0.0/12 >apiserver.log 2>&1 &
echo $! >apiserver.pid
for _ in $(seq 300); do
    kill -0 "$(cat apiserver.pid)" 2>/dev/null || { echo "kube-apiserver exited: $out/run/apiserver.log" >&2; exit 1; }
    curl -sf --cacert ca.pem -H "Authorization: Bearer admin-token" https://127.0.0.1:6443/readyz >/dev/null && break
    sleep 0.5
done
cat >kubeconfig <<KC
apiVersion: v1
kind: Config
clusters:
- cluster: {server: https://127.0.0.1:6443, certificate-authority: $out/run/ca.pem}
  name: real
users:
- name: admin
  user: {token: admin-token}
- name: dana
  user: {token: dana-token}
contexts:
- context: {cluster: real, user: admin}
  name: real
- context: {cluster: real, user: dana}
  name: dana
current-context: real
KC
echo READY
