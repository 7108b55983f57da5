#!/usr/bin/env bash
# kubefan at Kubernetes' limits (PODS pods on NODES nodes, CHURN changes a
# second): starting, relisting, and a herd of dashboards.
#
# 1. Start: the time from `kubefan serve` to `/readyz` answering 200,
#    against the time a paged LIST (limit=500, as kubefan's --page-size)
#    of the same pods takes from the simulator, both measured here.
# 2. Relist: RELIST_AGENTS node agents and VIEWERS all-pods viewers on
#    SSE, marker changes at RATE a second for DURATION seconds, and
#    RELIST_AT seconds in a forced relist (the simulator's faults: watches
#    stalled, history compacted past kubefan's position, watches ended,
#    so its next watch gets 410 Expired); the deliveries' latencies around
#    it, and kubefan_upstream_relists_total before and after.
# 3. Herd: a fresh gateway; HERD all-pods SSE viewers joining at once
#    (`loadtest herd`); the time until the last has its snapshot, and the
#    gateway's peak RSS (VmHWM, and RSS sampled every 100 ms).
#
#   bash loadtest/run-big.sh
#   PODS=3000 NODES=100 RELIST_AGENTS=100 VIEWERS=2 HERD=10 DURATION=8 RELIST_AT=3 bash loadtest/run-big.sh
#
# SIM_ARGS, KUBEFAN_ARGS: more flags for `kubefan sim` and `kubefan serve`.
# Results: $OUT/start.json, relist.json (and .log), herd.json, big.json
# (all of it), commands.txt.
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
PODS=${PODS:-150000}
NODES=${NODES:-5000}
CHURN=${CHURN:-200}
RELIST_AGENTS=${RELIST_AGENTS:-5000}
VIEWERS=${VIEWERS:-3}
RATE=${RATE:-50}
DURATION=${DURATION:-30}
RELIST_AT=${RELIST_AT:-10}
SETTLE=${SETTLE:-60}
HERD=${HERD:-100}
HERD_TIMEOUT=${HERD_TIMEOUT:-600}
SERVER_CPUS=${SERVER_CPUS:-0}
GENERATOR_CPUS=${GENERATOR_CPUS:-1}
SIM_CPUS=${SIM_CPUS:-$GENERATOR_CPUS}
OUT=${OUT:-loadtest/results-big}
read -r -a sim_args <<<"${SIM_ARGS:-}"
read -r -a kubefan_args <<<"${KUBEFAN_ARGS:-}"
mkdir -p "$OUT"
# With both KUBEFAN_BIN and LOADTEST_BIN, nothing is built.
if [ -z "${KUBEFAN_BIN:-}" ] || [ -z "${LOADTEST_BIN:-}" ]; then
  cargo build --release --locked -p kubefan -p loadtest
fi
BIN=${CARGO_TARGET_DIR:-target}/release
KUBEFAN=${KUBEFAN_BIN:-$BIN/kubefan}
LOADTEST=${LOADTEST_BIN:-$BIN/loadtest}
ulimit -n 20000

SIM=http://127.0.0.1:18001
GW=http://127.0.0.1:18080
ports_free() {
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "127.0.0.1:$port is already taken (another run?); stop it first" >&2; return 1
    fi
  done
}
wait_http() { for _ in $(seq "${2:-600}"); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
metric() { curl -s "$GW/metrics" | awk -v m="$1" '$1 ~ "^"m"(\\{|$)" {s += $2} END {print s + 0}'; }
status_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
run() { echo "+ $*" | tee -a "$OUT/commands.txt" >&2; "$@"; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
serve() {
  ports_free 18080
  echo "+ kubefan serve --resources pods --workers 1 ${KUBEFAN_ARGS:-}" | tee -a "$OUT/commands.txt" >&2
  started=$(now_ms)
  taskset -c "$SERVER_CPUS" "$KUBEFAN" serve --kubeconfig /tmp/big.kubeconfig --listen 127.0.0.1:18080 \
    --resources pods --workers 1 --max-connections 20000 "${kubefan_args[@]}" >>/tmp/big-gw.log 2>&1 &
  gw=$!
  pids+=("$gw")
  # /readyz: 200 once the first list is loaded (polled every 50 ms).
  for _ in $(seq 12000); do
    curl -sf -o /dev/null "$GW/readyz" && break
    kill -0 "$gw" 2>/dev/null || { echo "kubefan exited: /tmp/big-gw.log" >&2; exit 1; }
    sleep 0.05
  done
  ready_ms=$(( $(now_ms) - started ))
}

ports_free 18001 18080
echo "# $(date -u +%FT%TZ) $0: PODS=$PODS NODES=$NODES CHURN=$CHURN RELIST_AGENTS=$RELIST_AGENTS VIEWERS=$VIEWERS HERD=$HERD SIM_ARGS=\"${SIM_ARGS:-}\" KUBEFAN_ARGS=\"${KUBEFAN_ARGS:-}\"" >>"$OUT/commands.txt"
rm -f /tmp/big.kubeconfig
echo "+ kubefan sim --pods $PODS --nodes $NODES --churn-rate $CHURN ${SIM_ARGS:-}" | tee -a "$OUT/commands.txt" >&2
sim_started=$(now_ms)
taskset -c "$SIM_CPUS" "$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/big.kubeconfig \
  --pods "$PODS" --nodes "$NODES" --churn-rate "$CHURN" "${sim_args[@]}" >/tmp/big-sim.log 2>&1 &
sim=$!
pids+=("$sim")
wait_http "$SIM/version" 6000
seed_ms=$(( $(now_ms) - sim_started ))
for _ in $(seq 50); do [ -s /tmp/big.kubeconfig ] && break; sleep 0.1; done

# 1. Start: a paged LIST from the simulator, then the gateway to ready.
python3 - "$SIM" >"$OUT/list.json" <<'PY'
import json, sys, time, urllib.parse, urllib.request
base, cont, pods, size, pages = sys.argv[1], None, 0, 0, 0
started = time.monotonic()
for _ in range(100000):
    q = "limit=500" + ("&continue=" + urllib.parse.quote(cont, safe="") if cont else "")
    body = urllib.request.urlopen(base + "/api/v1/pods?" + q).read()
    page = json.loads(body)
    pods, size, pages = pods + len(page["items"]), size + len(body), pages + 1
    cont = page["metadata"].get("continue")
    if not cont:
        break
print(json.dumps({"list_ms": round((time.monotonic() - started) * 1000), "pods": pods, "pages": pages, "bytes": size}))
PY
serve
list_ms=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["list_ms"])' "$OUT/list.json")
echo "{\"seed_ms\": $seed_ms, \"ready_ms\": $ready_ms, \"list\": $(cat "$OUT/list.json"), \"rss_kib\": $(status_kib "$gw" VmRSS), \"vm_hwm_kib\": $(status_kib "$gw" VmHWM), \"upstream_lists\": $(metric kubefan_upstream_lists_total)}" >"$OUT/start.json"
echo "start: /readyz after $ready_ms ms; a paged LIST of the same pods from the simulator: $list_ms ms ($(python3 -c "print(round($ready_ms/max($list_ms,1), 2))")x)"

# 2. A forced relist under agents and viewers.
relists=$(metric kubefan_upstream_relists_total)
workers=$(( (RELIST_AGENTS + VIEWERS + 2499) / 2500 )); [ "$workers" -lt 2 ] && workers=2
run taskset -c "$GENERATOR_CPUS" "$LOADTEST" agents --base "$GW" --sim "$SIM" --pid "$gw" \
  --agents "$RELIST_AGENTS" --viewers "$VIEWERS" --transport sse --rate "$RATE" --duration-secs "$DURATION" \
  --relist-at-secs "$RELIST_AT" --settle-secs "$SETTLE" --workers "$workers" \
  --out "$OUT/relist.json" >/dev/null 2>"$OUT/relist.log" || { cat "$OUT/relist.log" >&2; exit 1; }
relists_after=$(metric kubefan_upstream_relists_total)
echo "relists (kubefan_upstream_relists_total) $relists -> $relists_after" >>"$OUT/relist.log"
cat "$OUT/relist.log"
kill "$gw"; wait "$gw" 2>/dev/null || true

# 3. The herd, on a fresh gateway (its peak is the herd's, not the boot's
# list: VmHWM is read before and after).
curl -s -o /dev/null -X POST "$SIM/debug/churn?rate=$CHURN" || true
serve
sleep 11 # a trim (every 10 s) returns what the first list's buffers held
steady=$(status_kib "$gw" VmRSS)
hwm_before=$(status_kib "$gw" VmHWM)
rm -f /tmp/big-herd-done /tmp/big-peak
( peak=0; for _ in $(seq $((HERD_TIMEOUT * 10))); do
    r=$(status_kib "$gw" VmRSS 2>/dev/null) || break
    [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" >/tmp/big-peak
    [ -f /tmp/big-herd-done ] && break
    sleep 0.1
  done ) &
sampler=$!
run taskset -c "$GENERATOR_CPUS" "$LOADTEST" herd --base "$GW" --subscribers "$HERD" --timeout-secs "$HERD_TIMEOUT" >"$OUT/herd-run.json"
touch /tmp/big-herd-done
wait "$sampler" 2>/dev/null || true
echo "{\"herd\": $(cat "$OUT/herd-run.json"), \"rss_kib_steady\": $steady, \"rss_kib_peak_sampled\": $(cat /tmp/big-peak 2>/dev/null || echo null), \"vm_hwm_kib_before\": $hwm_before, \"vm_hwm_kib_after\": $(status_kib "$gw" VmHWM), \"snapshots_served\": $(metric kubefan_snapshots_served_total), \"view_encodings\": $(metric kubefan_view_encodings_total)}" >"$OUT/herd.json"
rm -f "$OUT/herd-run.json" /tmp/big-herd-done /tmp/big-peak
cat "$OUT/herd.json"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
start, relist, herd = (json.load(open(os.path.join(out, f))) for f in ("start.json", "relist.json", "herd.json"))
json.dump({"start": start, "relist": relist, "herd": herd}, open(os.path.join(out, "big.json"), "w"), indent=1)
print("start: ready %d ms against a paged LIST's %d ms (%.2fx), %d pods, RSS %d KiB (peak %d)" % (
    start["ready_ms"], start["list"]["list_ms"], start["ready_ms"] / max(start["list"]["list_ms"], 1),
    start["list"]["pods"], start["rss_kib"], start["vm_hwm_kib"]))
r = relist["relist"] or {}
print("relist at change %s: last subscriber after it p50 %s, p99 %s, max %s ms; every delivery's max %s ms; upstream relists %s; lost %d, mismatches %d" % (
    r.get("at_change"), *(r.get("last_subscriber_ms_after", {}).get(k) for k in ("p50", "p99", "max")),
    relist["latency_ms"]["max"], relist["gateway"]["upstream_relists"], relist["lost"], relist["settle"]["mismatches"]))
if r.get("stalled_changes"):
    print("  changes %d..%d made while the fault stalled the watches (only the list brings them): p50 %s, max %s ms; the others after it: p50 %s, p99 %s, max %s ms" % (
        *r["stalled_changes"], *(r["last_subscriber_ms_stalled"].get(k) for k in ("p50", "max")),
        *(r["last_subscriber_ms_after_but_stalled"].get(k) for k in ("p50", "p99", "max"))))
    print("  what the gateway added to the upstream's own latency (a watch straight from it, %d changes unseen there): after the relist p50 %s, p99 %s, max %s ms; the stalled ones max %s ms; the whole run p50 %s, p99 %s, max %s ms" % (
        relist["upstream_unseen"], *(r["added_ms_after"].get(k) for k in ("p50", "p99", "max")), r["added_ms_stalled"].get("max"),
        *(relist["added_by_gateway_ms"].get(k) for k in ("p50", "p99", "max"))))
print("herd of %d: last snapshot at %s ms; RSS %d KiB steady, peak %s KiB sampled, VmHWM %d -> %d KiB" % (
    herd["herd"]["subscribers"], herd["herd"]["last_complete_ms"], herd["rss_kib_steady"],
    herd["rss_kib_peak_sampled"], herd["vm_hwm_kib_before"], herd["vm_hwm_kib_after"]))
PY
