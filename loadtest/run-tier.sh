#!/usr/bin/env bash
# The leaf tier on one machine: a simulated API server, one root kubefan
# (the only one that watches it), LEAVES leaf kubefans whose upstream is
# the root's Kubernetes face, and N SSE subscribers spread over the leaves
# (more than one process may hold: each process is limited to 20,000 open
# files here). Reports delivery, loss, p99, the leaves' memory and CPU,
# the root's, and what the upstream saw (one watch per resource).
#
#   bash loadtest/run-tier.sh                      # 40,000 over 3 leaves, R=5
#   N=3000 LEAVES=3 DURATION=10 bash loadtest/run-tier.sh
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
N=${N:-40000}
LEAVES=${LEAVES:-3}
RATE=${RATE:-5}
DURATION=${DURATION:-20}
OUT=${OUT:-loadtest/results-tier}
mkdir -p "$OUT"
cargo build --release --locked -p kubefan -p loadtest
BIN=target/release
ulimit -n 20000
wait_http() { for _ in $(seq 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

"$BIN/kubefan" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/tier-sim.kubeconfig \
  --churn-rate 0 --pods 100 >/tmp/tier-sim.log 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18001/version
"$BIN/kubefan" serve --kubeconfig /tmp/tier-sim.kubeconfig --listen 127.0.0.1:18100 \
  --resources pods --workers 1 >/tmp/tier-root.log 2>&1 &
root=$!
pids+=("$root")
wait_http http://127.0.0.1:18100/readyz
"$BIN/kubefan" kubeconfig --server http://127.0.0.1:18100 -o /tmp/tier-root.kubeconfig

bases=(); leaf_pids=()
for i in $(seq "$LEAVES"); do
  port=$((18100 + i))
  "$BIN/kubefan" serve --kubeconfig /tmp/tier-root.kubeconfig --listen "127.0.0.1:$port" \
    --resources pods --workers 1 >"/tmp/tier-leaf-$i.log" 2>&1 &
  leaf_pids+=($!); pids+=($!)
  bases+=("http://127.0.0.1:$port")
done
for b in "${bases[@]}"; do wait_http "$b/readyz"; done

workers=$(( (N + 4999) / 5000 )); [ "$workers" -lt "$LEAVES" ] && workers=$LEAVES
IFS=,
"$BIN/loadtest" run --server kubefan --base "${bases[*]}" --sim http://127.0.0.1:18001 \
  --pid "${leaf_pids[*]}" --root-pid "$root" --transport sse --subscribers "$N" \
  --rate "$RATE" --duration-secs "$DURATION" --workers "$workers" \
  --out "$OUT/tier-$LEAVES-$N.json" >/dev/null
unset IFS
echo "upstream (the simulated API server) saw:"
curl -s http://127.0.0.1:18001/debug/stats | python3 -c '
import json, sys
d = json.load(sys.stdin)
s, l = d["resources"]["pods"], d["lists"].get("pods", {})
print("  pods: %d open watch(es), %d watch request(s), %d list request(s), %d of them resourceVersion probes (limit=1) for the leaves\x27 consistent LISTs"
      % (s["open_watches"], s["watch_requests"], s["list_requests"], l.get("probes", 0)))'
