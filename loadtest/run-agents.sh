#!/usr/bin/env bash
# Node agents at Kubernetes' limits: a simulated cluster of PODS pods on
# NODES nodes with CHURN changes a second, one kubefan (a fresh one per
# point) pinned to SERVER_CPUS, and `loadtest agents` (with the simulator)
# on GENERATOR_CPUS: N agents, agent K watching node-K's pods
# (`fieldSelector=spec.nodeName=node-K`), for each N in AGENTS and each
# transport in TRANSPORTS; marker changes at RATE a second for DURATION
# seconds, spread over the N nodes; each agent's folded state checked
# against the simulator's pods on its node at the end. Then the gateway's
# CPU per change at each point, and the ratio of the largest point's to
# 50 agents' (the goal: at most 2x; an event should cost the streams it
# reaches, not the streams there are).
#
#   bash loadtest/run-agents.sh                                # 0, 50, 500, 5,000 agents; 150,000 pods
#   AGENTS="0 50" TRANSPORTS=sse PODS=2000 NODES=100 DURATION=5 SETTLE=40 bash loadtest/run-agents.sh
#   SIM_ARGS="--churn-style rollout --history-window-secs 300" bash loadtest/run-agents.sh
#
# TRANSPORTS: sse, ws, watch (a watch list, as client-go's WatchList
# informer), list-watch (LIST, then WATCH from its resourceVersion).
# FILL_LOG=1: each point waits for the hub's log to be full before its
# agents connect (memory per agent read against a steady RSS).
# SIM_ARGS: more flags for `kubefan sim` (the simulator branch's
# `--churn-style`, `--history-window-secs`), KUBEFAN_ARGS for `kubefan
# serve`, AGENT_ARGS for `loadtest agents`; split on spaces.
# KUBEFAN_BIN, LOADTEST_BIN: other builds (a paired before/after).
# Results: $OUT/agents-TRANSPORT-N.json (and .log, the summary line),
# $OUT/commands.txt, $OUT/summary.txt.
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
AGENTS=${AGENTS:-"0 50 500 5000"}
TRANSPORTS=${TRANSPORTS:-"sse ws watch list-watch"}
RATE=${RATE:-100}
DURATION=${DURATION:-30}
SETTLE=${SETTLE:-60}
SERVER_CPUS=${SERVER_CPUS:-0}
GENERATOR_CPUS=${GENERATOR_CPUS:-1}
SIM_CPUS=${SIM_CPUS:-$GENERATOR_CPUS}
OUT=${OUT:-loadtest/results-agents}
read -r -a sim_args <<<"${SIM_ARGS:-}"
read -r -a kubefan_args <<<"${KUBEFAN_ARGS:-}"
read -r -a agent_args <<<"${AGENT_ARGS:-}"
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
# Up to $2 tenths of a second (seeding 150,000 pods, or listing them, takes a while).
wait_http() { for _ in $(seq "${2:-600}"); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
metric() { curl -s "$GW/metrics" | awk -v m="$1" '$1 ~ "^"m"(\\{|$)" {s += $2} END {print s + 0}'; }
# Prints a command, records it, runs it.
run() { echo "+ $*" | tee -a "$OUT/commands.txt" >&2; "$@"; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

ports_free 18001 18080
echo "# $(date -u +%FT%TZ) $0: PODS=$PODS NODES=$NODES CHURN=$CHURN AGENTS=\"$AGENTS\" TRANSPORTS=\"$TRANSPORTS\" RATE=$RATE DURATION=$DURATION SIM_ARGS=\"${SIM_ARGS:-}\" KUBEFAN_ARGS=\"${KUBEFAN_ARGS:-}\"" >>"$OUT/commands.txt"
rm -f /tmp/agents.kubeconfig
echo "+ kubefan sim --pods $PODS --nodes $NODES --churn-rate $CHURN ${SIM_ARGS:-}" | tee -a "$OUT/commands.txt" >&2
taskset -c "$SIM_CPUS" "$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/agents.kubeconfig \
  --pods "$PODS" --nodes "$NODES" --churn-rate "$CHURN" "${sim_args[@]}" >/tmp/agents-sim.log 2>&1 &
pids+=($!)
wait_http "$SIM/version" 6000
for _ in $(seq 50); do [ -s /tmp/agents.kubeconfig ] && break; sleep 0.1; done

for n in $AGENTS; do
  if [ "$n" -gt "$NODES" ]; then echo "AGENTS: $n is more than the $NODES nodes" >&2; exit 1; fi
  for transport in $TRANSPORTS; do
    case "$transport" in
      sse|ws|watch) how=(--transport "$transport") ;;
      list-watch) how=(--transport watch --watch-list false) ;;
      *) echo "TRANSPORTS: sse, ws, watch or list-watch, not $transport" >&2; exit 1 ;;
    esac
    # The last point paused the churn (where the simulator can): on again.
    curl -s -o /dev/null -X POST "$SIM/debug/churn?rate=$CHURN" || true
    ports_free 18080
    taskset -c "$SERVER_CPUS" "$KUBEFAN" serve --kubeconfig /tmp/agents.kubeconfig --listen 127.0.0.1:18080 \
      --resources pods --workers 1 --max-connections 20000 "${kubefan_args[@]}" >/tmp/agents-gw.log 2>&1 &
    gw=$!
    wait_http "$GW/readyz" 6000
    if [ -n "${FILL_LOG:-}" ]; then
      # The hub's log full (10,000 events) before the agents come, so the
      # RSS an agent adds is the agent's, not the log's growth meanwhile.
      for _ in $(seq 1800); do [ "$(metric kubefan_hub_log_events)" -ge 10000 ] && break; sleep 0.1; done
    fi
    workers=$(( (n + 2499) / 2500 )); [ "$workers" -lt 2 ] && workers=2
    relists=$(metric kubefan_upstream_relists_total)
    file="$OUT/agents-$transport-$n"
    run taskset -c "$GENERATOR_CPUS" "$LOADTEST" agents --base "$GW" --sim "$SIM" --pid "$gw" \
      --agents "$n" "${how[@]}" --rate "$RATE" --duration-secs "$DURATION" --settle-secs "$SETTLE" \
      --workers "$workers" "${agent_args[@]}" --out "$file.json" >/dev/null 2>"$file.log" || { cat "$file.log" >&2; exit 1; }
    echo "relists (kubefan_upstream_relists_total) $relists -> $(metric kubefan_upstream_relists_total)" >>"$file.log"
    cat "$file.log"
    kill "$gw"; wait "$gw" 2>/dev/null || true
  done
done

# CPU per change by point, and the largest point against 50 agents'.
python3 - "$OUT" "$AGENTS" "$TRANSPORTS" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out, agents, transports = sys.argv[1], [int(a) for a in sys.argv[2].split()], sys.argv[3].split()
def load(t, n):
    try:
        return json.load(open(os.path.join(out, "agents-%s-%d.json" % (t, n))))
    except OSError:
        return None
fmt = lambda v, d=1: "?" if v is None else ("%.*f" % (d, v))
print("%-11s %6s %9s %9s %9s %9s %9s %9s %5s %5s %7s" % ("transport", "agents", "µs/change", "µs/deliv",
      "B/agent", "snap p99", "p99 ms", "max ms", "lost", "mism", "relists"))
for t in transports:
    cpu = {}
    for n in agents:
        r = load(t, n)
        if r is None:
            continue
        cpu[n] = r["server_cpu_us_per_change"]
        print("%-11s %6d %9s %9s %9s %9s %9s %9s %5d %5d %7s" % (t, n, fmt(cpu[n]),
              fmt(r["server_cpu_us_per_delivery"]), fmt(r["rss_per_agent_bytes"], 0),
              fmt(r["snapshot_ms"]["p99"]), fmt(r["latency_ms"]["p99"]), fmt(r["latency_ms"]["max"]),
              r["lost"], r["settle"]["mismatches"], fmt(r["gateway"]["upstream_relists"], 0)))
    big = max(cpu) if cpu else None
    if big and 50 in cpu and big != 50 and cpu[50]:
        print("%s: CPU per change at %d agents / at 50: %.2fx (goal: <= 2x)" % (t, big, cpu[big] / cpu[50]))
PY
