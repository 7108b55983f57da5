#!/usr/bin/env bash
# What N node agents add per change to kube-apiserver and to kubefan, on
# the same shape, in one sitting: PODS pods over NODES node names, AGENTS
# agents (agent K watches node-K's pods, `fieldSelector=spec.nodeName=node-K`,
# over the Kubernetes watch face: a watch list, as client-go's WatchList
# informer), a marker pod per watched node changed at RATE a second.
#
# 1. kube-apiserver v1.36 (../shared/realk8s/: REALK8S, default ~/realk8s,
#    built and started by its scripts; a fresh namespace per run) with
#    PODS pods bound to node-0..node-(NODES-1) (there is no scheduler:
#    `spec.nodeName` is written on create), for each N in AGENTS: the
#    API server's and etcd's CPU per change (`--pid` sums them).
# 2. kubefan over the simulator holding the same number of pods on the
#    same node names (`kubefan sim --pods PODS --nodes NODES
#    --churn-rate 0`: only the markers change, as on the API server), a
#    fresh gateway per point, pinned to SERVER_CPUS like the API server.
#
#   bash loadtest/run-apiserver-agents.sh
#   PODS=2000 NODES=50 AGENTS="0 100" DURATION=5 bash loadtest/run-apiserver-agents.sh
#
# Results: $OUT/{apiserver,kubefan}-N.json and .log, $OUT/commands.txt,
# $OUT/summary.txt.
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
R=${REALK8S:-$HOME/realk8s}
PODS=${PODS:-15000}
NODES=${NODES:-500}
AGENTS=${AGENTS:-"0 5000"}
RATE=${RATE:-200}
DURATION=${DURATION:-30}
SETTLE=${SETTLE:-90}
SERVER_CPUS=${SERVER_CPUS:-0}
GENERATOR_CPUS=${GENERATOR_CPUS:-1}
OUT=${OUT:-loadtest/results-apiserver-agents}
mkdir -p "$OUT"
if [ -z "${KUBEFAN_BIN:-}" ] || [ -z "${LOADTEST_BIN:-}" ]; then
  cargo build --release --locked -p kubefan -p loadtest
fi
BIN=${CARGO_TARGET_DIR:-target}/release
KUBEFAN=${KUBEFAN_BIN:-$BIN/kubefan}
LOADTEST=${LOADTEST_BIN:-$BIN/loadtest}
ulimit -n 20000
run() { echo "+ $*" | tee -a "$OUT/commands.txt" >&2; "$@"; }
wait_http() { for _ in $(seq "${2:-600}"); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
echo "# $(date -u +%FT%TZ) $0: PODS=$PODS NODES=$NODES AGENTS=\"$AGENTS\" RATE=$RATE DURATION=$DURATION" >>"$OUT/commands.txt"

# 1. kube-apiserver.
bash ../shared/realk8s/start.sh >/dev/null
API=https://127.0.0.1:6443
CA=$R/run/pki/ca.crt
TOKEN=$R/run/admin.token
taskset -apc "$SERVER_CPUS" "$(cat "$R/run/apiserver.pid")" >/dev/null
taskset -apc "$SERVER_CPUS" "$(cat "$R/run/etcd.pid")" >/dev/null
# The loadtest's markers live in namespace `loadtest`; the background pods
# in `big-N` namespaces (30 of them), made here once per API server.
python3 - "$API" "$CA" "$TOKEN" "$PODS" "$NODES" <<'PY'
import concurrent.futures, json, ssl, sys, urllib.request
api, ca, token_file, pods, nodes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
token = open(token_file).read().strip()
ctx = ssl.create_default_context(cafile=ca)
def req(method, path, body=None):
    r = urllib.request.Request(api + path, method=method, data=None if body is None else json.dumps(body).encode(),
                               headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, context=ctx, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
for ns in ["loadtest"] + ["big-%d" % i for i in range(30)]:
    req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
have = 0
for i in range(30):
    _, body = req("GET", "/api/v1/namespaces/big-%d/pods?limit=1" % i)
    meta = json.loads(body).get("metadata", {})
    have += len(json.loads(body).get("items", [])) + int(meta.get("remainingItemCount", 0) or 0)
def make(i):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pod-%06d" % i, "namespace": "big-%d" % (i % 30),
                        "labels": {"app": "app-%d" % (i % 300), "pod-template-hash": "7d9f8c6b5"}},
           "spec": {"nodeName": "node-%d" % (i % nodes),
                    "containers": [{"name": "app", "image": "registry.example/app:1.%d" % (i % 7),
                                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                  "limits": {"cpu": "500m", "memory": "256Mi"}},
                                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}]}}
    status, body = req("POST", "/api/v1/namespaces/%s/pods" % pod["metadata"]["namespace"], pod)
    if status not in (201, 409):
        raise SystemExit("creating %s: %d %s" % (pod["metadata"]["name"], status, body[:200]))
if have < pods:
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(make, range(pods)))
print("kube-apiserver holds %d background pods over %d node names" % (max(have, pods), nodes), file=sys.stderr)
PY
# Every point changes the same markers (as many as the largest point has
# agents), so only the watchers differ between points.
MARKERS=$(for n in $AGENTS; do echo "$n"; done | sort -n | tail -1)
[ "$MARKERS" -lt 1 ] && MARKERS=1
for n in $AGENTS; do
  file="$OUT/apiserver-$n"
  run taskset -c "$GENERATOR_CPUS" "$LOADTEST" agents --server kube-apiserver --base "$API" --tls-ca "$CA" \
    --bearer-file "$TOKEN" --transport watch --pid "$(cat "$R/run/apiserver.pid"),$(cat "$R/run/etcd.pid")" \
    --agents "$n" --markers "$MARKERS" --rate "$RATE" --duration-secs "$DURATION" --settle-secs "$SETTLE" \
    --workers 2 --out "$file.json" >/dev/null 2>"$file.log" || { cat "$file.log" >&2; exit 1; }
  cat "$file.log"
done
bash ../shared/realk8s/stop.sh >/dev/null

# 2. kubefan over the simulator, the same shape.
SIM=http://127.0.0.1:18001
GW=http://127.0.0.1:18080
rm -f /tmp/apiserver-agents.kubeconfig
echo "+ kubefan sim --pods $PODS --nodes $NODES --churn-rate 0" | tee -a "$OUT/commands.txt" >&2
taskset -c "$GENERATOR_CPUS" "$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/apiserver-agents.kubeconfig \
  --pods "$PODS" --nodes "$NODES" --churn-rate 0 >/tmp/apiserver-agents-sim.log 2>&1 &
pids+=($!)
wait_http "$SIM/version" 6000
for _ in $(seq 50); do [ -s /tmp/apiserver-agents.kubeconfig ] && break; sleep 0.1; done
for n in $AGENTS; do
  taskset -c "$SERVER_CPUS" "$KUBEFAN" serve --kubeconfig /tmp/apiserver-agents.kubeconfig --listen 127.0.0.1:18080 \
    --resources pods --workers 1 --max-connections 20000 >/tmp/apiserver-agents-gw.log 2>&1 &
  gw=$!
  wait_http "$GW/readyz" 6000
  file="$OUT/kubefan-$n"
  run taskset -c "$GENERATOR_CPUS" "$LOADTEST" agents --base "$GW" --sim "$SIM" --pid "$gw" --transport watch \
    --agents "$n" --markers "$MARKERS" --rate "$RATE" --duration-secs "$DURATION" --settle-secs "$SETTLE" \
    --workers 2 --out "$file.json" >/dev/null 2>"$file.log" || { cat "$file.log" >&2; exit 1; }
  cat "$file.log"
  kill "$gw"; wait "$gw" 2>/dev/null || true
done

python3 - "$OUT" "$AGENTS" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out, agents = sys.argv[1], [int(a) for a in sys.argv[2].split()]
cpu = {}
print("%-15s %6s %10s %9s %9s %5s %5s" % ("server", "agents", "µs/change", "p99 ms", "max ms", "lost", "mism"))
for server in ("apiserver", "kubefan"):
    for n in agents:
        try:
            r = json.load(open(os.path.join(out, "%s-%d.json" % (server, n))))
        except OSError:
            continue
        cpu[server, n] = r["server_cpu_us_per_change"]
        print("%-15s %6d %10.1f %9.1f %9.1f %5d %5d" % (server, n, cpu[server, n], r["latency_ms"]["p99"],
              r["latency_ms"]["max"], r["lost"], r["settle"]["mismatches"]))
lo, hi = min(agents), max(agents)
for server in ("apiserver", "kubefan"):
    if (server, lo) in cpu and (server, hi) in cpu:
        print("%s: %d agents add %+.0f µs per change (%.0f -> %.0f)" % (server, hi, cpu[server, hi] - cpu[server, lo],
              cpu[server, lo], cpu[server, hi]))
PY
