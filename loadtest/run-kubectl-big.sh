#!/usr/bin/env bash
# The Kubernetes face at Kubernetes' limits, read by a real kubectl: a
# simulated cluster of PODS pods on NODES nodes with no churn (so that the
# API server and the gateway hold the same objects), one kubefan in front
# of it, and each kubectl command below run against both, timed, its
# output compared line for line. `kubectl get` pages its lists by 500
# (`--chunk-size`, its default), as kubefan's own informer pages.
#
#   bash loadtest/run-kubectl-big.sh
#   PODS=3000 NODES=100 bash loadtest/run-kubectl-big.sh
#
# The simulator prints no tables (kube-apiserver's printers are the
# oracle for those: `conformance/run kubectl`, `tests/gateway/tables.rs`),
# so the lists are compared as objects (custom columns, for which kubectl
# asks for whole objects, paged the same), and the gateway's tables are
# timed, their lines counted, and told apart from the simulator's name-only
# table ("different" there is expected). The AGE column is left out: the
# two answers are read seconds apart.
# KUBECTL: another kubectl (default: the one on PATH). KUBEFAN_BIN: another
# build (default: built here). Results: $OUT/summary.txt, $OUT/commands.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PODS=${PODS:-150000}
NODES=${NODES:-5000}
OUT=${OUT:-loadtest/results-kubectl-big}
KUBECTL=${KUBECTL:-kubectl}
mkdir -p "$OUT"
if [ -z "${KUBEFAN_BIN:-}" ]; then
  cargo build --release --locked -p kubefan
fi
KUBEFAN=${KUBEFAN_BIN:-${CARGO_TARGET_DIR:-target}/release/kubefan}
SIM=http://127.0.0.1:18001
GW=http://127.0.0.1:18080
wait_http() { for _ in $(seq "${2:-600}"); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
work=$(mktemp -d)

echo "# $(date -u +%FT%TZ) $0: PODS=$PODS NODES=$NODES $($KUBECTL version --client 2>/dev/null | head -1)" >>"$OUT/commands.txt"
"$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out "$work/sim.kubeconfig" \
  --pods "$PODS" --nodes "$NODES" --churn-rate 0 >"$work/sim.log" 2>&1 &
pids+=($!)
wait_http "$SIM/version" 6000
for _ in $(seq 50); do [ -s "$work/sim.kubeconfig" ] && break; sleep 0.1; done
"$KUBEFAN" serve --kubeconfig "$work/sim.kubeconfig" --listen 127.0.0.1:18080 \
  --resources pods,nodes >"$work/gw.log" 2>&1 &
pids+=($!)
wait_http "$GW/readyz" 6000
"$KUBEFAN" kubeconfig --server "$GW" >"$work/gw.kubeconfig"

# Prints the table without its AGE column (found by its header).
no_age() {
  awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "AGE") age = i }
       { out = ""; for (i = 1; i <= NF; i++) if (i != age) out = out (out == "" ? "" : " ") $i; print out }'
}
node="node-$((NODES / 2))"
# The objects themselves, as both serve them: kubectl asks for whole
# objects (no Table) for custom columns.
cols=NAMESPACE:.metadata.namespace,NAME:.metadata.name,NODE:.spec.nodeName,PHASE:.status.phase,RV:.metadata.resourceVersion,UID:.metadata.uid
printf '%-62s %8s %8s %9s %s\n' command lines "sim s" "kubefan s" same >"$OUT/summary.txt"
while IFS= read -r args; do
  [ -z "$args" ] && continue
  read -r -a argv <<<"$args"
  for side in sim gw; do
    echo "+ kubectl --kubeconfig $side.kubeconfig $args" >>"$OUT/commands.txt"
    start=$(date +%s.%N)
    "$KUBECTL" --kubeconfig "$work/$side.kubeconfig" "${argv[@]}" >"$work/$side.out" 2>"$work/$side.err"
    end=$(date +%s.%N)
    echo "$start $end" >"$work/$side.time"
  done
  no_age <"$work/sim.out" >"$work/sim.cmp"
  no_age <"$work/gw.out" >"$work/gw.cmp"
  what=""
  if [ "$(head -1 "$work/sim.cmp")" = "NAMESPACE NAME" ] || [ "$(head -1 "$work/sim.cmp")" = "NAME" ]; then
    # The simulator's table: names only. The rows compared by those.
    fields=$(head -1 "$work/sim.cmp" | wc -w)
    awk -v n="$fields" '{ out = $1; if (n > 1) out = out " " $2; print out }' "$work/gw.cmp" >"$work/gw.names"
    mv "$work/gw.names" "$work/gw.cmp"
    what=" (rows by name; the simulator prints no columns)"
  fi
  if cmp -s "$work/sim.cmp" "$work/gw.cmp"; then same="identical$what"; else
    same="DIFFERENT ($( (diff "$work/sim.cmp" "$work/gw.cmp" || true) | grep -c '^[<>]') lines)"
    { echo "## $args"; diff "$work/sim.cmp" "$work/gw.cmp" | head -20; } >>"$OUT/diff.txt" || true
  fi
  secs() { awk '{ printf "%.2f", $2 - $1 }' "$work/$1.time"; }
  printf '%-62s %8s %8s %9s %s\n' "${args/$cols/COLS}" "$(wc -l <"$work/gw.out")" "$(secs sim)" "$(secs gw)" "$same" >>"$OUT/summary.txt"
done <<EOF
get pods -A -o custom-columns=$cols
get pods -A --field-selector spec.nodeName=$node -o custom-columns=$cols
get pods -n batch -o custom-columns=$cols
get nodes -o custom-columns=NAME:.metadata.name,RV:.metadata.resourceVersion
get pods -A
get pods -A -o wide
get pods -A --field-selector spec.nodeName=$node -o wide
EOF
echo "COLS: $cols" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
