#!/usr/bin/env bash
# The reconnect storm: N SSE subscribers hold their snapshots of a
# PODS-pod cache; the gateway is killed (SIGKILL: no goodbye) and started
# again on the same port. Each subscriber comes back after its stream's
# `retry:` hint with its Last-Event-ID. Reports how long until the last is
# consistent again, the new gateway's peak RSS (VmHWM) against the old
# one's steady state, and what the upstream saw.
#
#   bash loadtest/run-storm.sh                  # 10,000 subscribers, 1,000 pods
#   N=1000 PODS=200 bash loadtest/run-storm.sh
#   CHANGED=1 bash loadtest/run-storm.sh        # a pod changes while the gateway
#                                               # is down: the new process lists at
#                                               # its saved position (--state-dir)
#                                               # and every client resumes with the
#                                               # change
#   CHANGED=1 STATE=0 bash loadtest/run-storm.sh  # without --state-dir: every
#                                               # resume is a RESET and a fresh
#                                               # snapshot
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
N=${N:-10000}
PODS=${PODS:-1000}
OUT=${OUT:-loadtest/results-storm}
mkdir -p "$OUT"
cargo build --release --locked -p kubefan -p loadtest
BIN=target/release
# KUBEFAN_BIN: another build of kubefan to measure (a paired before/after).
KUBEFAN=${KUBEFAN_BIN:-$BIN/kubefan}
ulimit -n 20000
wait_http() { for _ in $(seq 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
pids=()
state=$(mktemp -d /tmp/storm-state.XXXXXX)
state_args=()
[ "${STATE:-1}" = 1 ] && state_args=(--state-dir "$state")
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }
lists() { curl -s http://127.0.0.1:18001/debug/stats | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["resources"]["pods"]["list_requests"] - d["lists"].get("pods", {}).get("probes", 0))'; }

taskset -c 0 "$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/storm.kubeconfig \
  --churn-rate 0 --pods "$PODS" >/tmp/storm-sim.log 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18001/version
serve() {
  taskset -c 0 "$KUBEFAN" serve --kubeconfig /tmp/storm.kubeconfig --listen 127.0.0.1:18080 \
    --resources pods --workers 1 --max-connections 20000 "${state_args[@]}" >>/tmp/storm-gw.log 2>&1 &
  gw=$!
  pids+=("$gw")
  wait_http http://127.0.0.1:18080/readyz
}
serve
rm -f /tmp/storm.ready
taskset -c 1 "$BIN/loadtest" storm --base http://127.0.0.1:18080 --subscribers "$N" \
  --ready-file /tmp/storm.ready >"$OUT/storm-$N-$PODS-${CHANGED:-0}-${STATE:-1}.json" 2>/tmp/storm-gen.log &
gen=$!
for _ in $(seq 1200); do [ -f /tmp/storm.ready ] && break; sleep 0.1; done
[ -f /tmp/storm.ready ] || { echo "subscribers did not connect" >&2; exit 1; }
sleep 11 # a trim (every 10 s) returns the connection burst's memory
steady=$(rss "$gw")
lists_before=$(lists)
kill -9 "$gw"
wait "$gw" 2>/dev/null || true
if [ "${CHANGED:-0}" = 1 ]; then
  pod=$(curl -s 'http://127.0.0.1:18001/api/v1/pods?limit=1' | python3 -c 'import json,sys; m=json.load(sys.stdin)["items"][0]["metadata"]; print(m["namespace"] + "/" + m["name"])')
  curl -sf -o /dev/null -X PATCH -H 'Content-Type: application/merge-patch+json' \
    -d '{"metadata":{"labels":{"storm":"changed"}}}' "http://127.0.0.1:18001/api/v1/namespaces/${pod%/*}/pods/${pod#*/}"
fi
serve
wait "$gen"
peak=$(hwm "$gw")
lists_after=$(lists)
echo "steady RSS ${steady} KiB (old process), new process peak ${peak} KiB ($(python3 -c "print(round($peak/$steady, 2))")x)"
echo "upstream lists by the new process: $((lists_after - lists_before))"
cat "$OUT/storm-$N-$PODS-${CHANGED:-0}-${STATE:-1}.json"
