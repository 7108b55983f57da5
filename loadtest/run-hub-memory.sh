#!/usr/bin/env bash
# The hub's memory against the JSON it holds (issue 16, point 2).
#
# Cache: kubefan synced to a simulator of PODS pods and nothing else; its
# RSS against the JSON of its cache (what a list through its Kubernetes
# face returns, byte for byte the objects it holds).
# Log: PATCHES label changes to the first 1,000 pods fill its event log,
# in two steps; the RSS the second step added against the JSON of the
# objects it added to the log.
#
#   bash loadtest/run-hub-memory.sh                       # 10,000 pods
#   PODS=50000 bash loadtest/run-hub-memory.sh
#   PODS=1000 PATCHES=12000 bash loadtest/run-hub-memory.sh  # the log
#   WRAP=heaptrack BIN=<dir> bash loadtest/run-hub-memory.sh  # a profile
# heaptrack sees malloc's callers only: BIN must then hold a build with
# glibc's allocator (`cargo build --release --no-default-features`), not
# the default jemalloc one (src/heap.rs).
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
PODS=${PODS:-10000}
PATCHES=${PATCHES:-0}
[ -n "${BIN:-}" ] || cargo build --release --locked -p kubefan
BIN=${BIN:-target/release}
wait_http() { for _ in $(seq 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; pkill -f -- "--listen 127.0.0.1:180[19][10] " 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
metric() { curl -s http://127.0.0.1:18090/metrics | awk -v m="$1" '$1 ~ "^"m"\\{" {print $2}'; }

taskset -c 1 "$BIN/kubefan" sim --listen 127.0.0.1:18011 --kubeconfig-out /tmp/hm.kubeconfig \
  --churn-rate 0 --pods "$PODS" >/tmp/hm-sim.log 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18011/version
taskset -c 0 ${WRAP:-} "$BIN/kubefan" serve --kubeconfig /tmp/hm.kubeconfig --listen 127.0.0.1:18090 \
  --resources pods --workers 1 >/tmp/hm-gw.log 2>&1 &
gw=$!
pids+=("$gw")
wait_http http://127.0.0.1:18090/readyz
sleep 11 # a trim (every 10 s) returns what the first list's buffers held
json=$(curl -s http://127.0.0.1:18090/api/v1/pods | python3 -c '
import json, sys
print(sum(len(json.dumps(o, separators=(",", ":"))) for o in json.load(sys.stdin)["items"]))')
base=$(rss "$gw")
echo "pods $PODS: cache JSON $json bytes, kubefan RSS $((base * 1024)) bytes ($(python3 -c "print(round($base*1024/$json, 2))")x)"
[ "$PATCHES" -gt 0 ] || exit 0
# Patches the first 1,000 pods' labels, round robin from patch $1 to $2.
patch() {
python3 - "$1" "$2" <<'PY'
import http.client, json, sys
first, last = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", 18011)
c.request("GET", "/api/v1/pods?limit=1000")
pods = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in json.loads(c.getresponse().read())["items"]]
for i in range(first, last):
    ns, name = pods[i % len(pods)]
    body = json.dumps({"metadata": {"labels": {"round": str(i)}}})
    c.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body,
              {"Content-Type": "application/merge-patch+json"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
# Until the gateway has every change: its resourceVersion is the simulator's.
want=$(curl -s 'http://127.0.0.1:18011/api/v1/pods?limit=1' | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
for _ in $(seq 300); do
  got=$(curl -s 'http://127.0.0.1:18090/api/v1/pods?limit=1' | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
  [ "$got" -ge "$want" ] && break
  sleep 0.1
done
sleep 11
}
# Two fillings of the log, so that what the process holds beside it (and
# the noise of its first RSS) cancels: the RSS the second added against
# the log JSON it added (its events times the mean object: the patches
# keep the pods' size; kubefan_hub_log_bytes also counts frames and
# selectors).
patch 0 $((PATCHES / 6))
rss1=$(rss "$gw"); events1=$(metric kubefan_hub_log_events); bytes1=$(metric kubefan_hub_log_bytes)
patch $((PATCHES / 6)) "$PATCHES"
rss2=$(rss "$gw"); events2=$(metric kubefan_hub_log_events); bytes2=$(metric kubefan_hub_log_bytes)
logjson=$(((events2 - events1) * json / PODS))
echo "log: $events1 -> $events2 events (kubefan_hub_log_bytes $bytes1 -> $bytes2), ~$logjson more bytes of object JSON; RSS $((rss1 * 1024)) -> $((rss2 * 1024)) bytes: $(python3 -c "print(round(($rss2-$rss1)*1024/$logjson, 2))")x the JSON added"
