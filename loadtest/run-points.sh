#!/usr/bin/env bash
# Runs the comparison matrix: kubefan, nginx+nchan and the floor (`loadtest
# floor`: one write per delivery and nothing else), side by side.
# Each point three times with a fresh server process, the server pinned to
# core 0 and the load generator to core 1 (SERVER_CPUS and GENERATOR_CPUS,
# taskset lists, move them: on a machine with more cores, give each its
# own several; GENERATOR_NICE=19 lets a server that shares the generator's
# cores have them first). Results: loadtest/results/*.json;
# then `python3 loadtest/summarise.py` writes the table and charts.
#
#   bash loadtest/run-points.sh            # full matrix (~15 min)
#   POINTS="1000:sse" REPS=1 bash loadtest/run-points.sh   # one quick point
#   OUT=/tmp/scratch SERVERS=kubefan POINTS="10000:watch" REPS=1 bash loadtest/run-points.sh
#   SERVERS=kubefan POINTS="10000:sse 10000:sse:tls 10000:sse:h2" bash loadtest/run-points.sh
#
# A point is N:TRANSPORT[:MODE].
#
# TRANSPORT is sse, ws, watch, or (kubefan only) `wsmuxK`: kubefan's
# multiplexed WebSocket, `/ws`, K subscriptions per socket; N counts
# subscriptions, so 10000:wsmux10 is 1,000 sockets of 10.
#
# MODE (kubefan only):
# - `plain` (default).
# - `tls`: HTTP/1.1 over TLS (SSE, watch, and WebSocket as `wss://`), one
#   connection per subscriber (the floor
#   too: it encrypts into each subscriber's rustls session and writes the
#   record in one write, as kubefan does); `h2`: HTTP/2
#   over TLS, H2_STREAMS streams per connection (default 100); with a
#   self-signed P-256 certificate made here.
# - `session`: every subscriber signed in, with a session of its own
#   (`--auth oidc`, sessions sealed by `kubefan session-cookies`; SESSIONS=K
#   shares K sessions out instead), its user's group bound by a
#   ClusterRoleBinding in the simulated cluster's RBAC.
# - `jwt`: `--auth jwt`, every subscriber with a bearer token of its own
#   (TOKENS=K shares K out instead), valid 2 h and granting pods in namespace
#   loadtest, minted by `loadtest mint-jwt` with a key made here: JWT_ALG
#   HS256 (default: a random secret, `--jwt-secret-file`), ES256, RS256 or
#   EdDSA (a key pair, `--jwt-public-key-file`).
# - `rbac`: `--auth kubernetes --authorization rbac` against the simulated
#   API server in RBAC mode with USERS users (default 100, `loadtest-U`, each
#   a token of the simulator's) over NAMESPACES namespaces (default 10,
#   `loadtest-K`): user U is bound by its namespace's RoleBinding (to
#   ClusterRole loadtest-pod-reader) in loadtest-(U mod NAMESPACES) alone. The
#   changes are spread over those namespaces (one target pod each), and every
#   subscriber streams every namespace (`/stream/pods`, no namespace=), so
#   kubefan narrows each stream to its user's namespace: a subscriber is to
#   get a tenth of the changes, and one of another namespace counts as
#   leaked. sse, ws and wsmuxK only (the Kubernetes face refuses a narrowed
#   all-namespace watch with 403).
# - `views=V`: the subscribers spread over V distinct views, label selectors
#   `loadtest-view!=vI` that every pod matches (subscriber i takes I = i mod
#   V), so every subscriber still gets every change but kubefan encodes each
#   change once per view instead of once for all.
#
#   SERVERS=kubefan POINTS="10000:sse:jwt" bash loadtest/run-points.sh
#   SERVERS=kubefan POINTS="10000:sse:rbac" bash loadtest/run-points.sh
#   SERVERS=kubefan POINTS="10000:wsmux1 10000:wsmux10" bash loadtest/run-points.sh
# - `clusters=K`: sse and wsmuxK only. K simulated clusters (K
#   simulators, on 18001...), one kubefan serving them (`--cluster
#   cI=...`), every subscriber on one stream across all of them
#   (`/stream/pods?clusters=c0,...`, or a `/ws` subscription's
#   `clusters`); the changes go to the clusters in turn, so each
#   subscriber still gets every change, from K parts.
#
#   SERVERS=kubefan POINTS="10000:sse:views=1000" bash loadtest/run-points.sh
#   SERVERS=kubefan POINTS="10000:sse 10000:sse:clusters=3" bash loadtest/run-points.sh
#
# Binaries are built into $CARGO_TARGET_DIR (default target/).
set -euo pipefail
# Every viewer here comes from one loopback address: the gateway's
# per-address limits (on by default, README "Limits") would refuse the
# load generator, which is one client only by its address.
export KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS=0 KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS=0 \
  KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS=0
cd "$(dirname "$0")/.."
POINTS=${POINTS:-"1000:sse 5000:sse 10000:sse 10000:ws"}
REPS=${REPS:-3}
DURATION=${DURATION:-20}
RATE=${RATE:-10}
SERVERS=${SERVERS:-"kubefan nchan floor"}
SERVER_CPUS=${SERVER_CPUS:-0}
GENERATOR_CPUS=${GENERATOR_CPUS:-1}
# Message bytes for nchan and the floor (kubefan sends whole pods; match its
# mean frame size, kubefan_bytes_sent_total / kubefan_events_sent_total).
PAYLOAD=${PAYLOAD:-1024}
OUT=${OUT:-loadtest/results}
mkdir -p "$OUT" /tmp/kubefan-nchan
if [[ " $SERVERS " == *" nchan "* ]] && { ! command -v nginx >/dev/null || [ ! -e /usr/lib/nginx/modules/ngx_nchan_module.so ]; }; then
  # The peer: Debian's nginx and its nchan module (not on every machine).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq nginx libnginx-mod-nchan >/dev/null
  else
    echo "nginx with nchan is missing: apt-get install nginx libnginx-mod-nchan (or SERVERS without nchan)" >&2
    exit 1
  fi
fi
cargo build --release --locked -p kubefan -p loadtest
BIN=${CARGO_TARGET_DIR:-target}/release
# KUBEFAN_BIN: another build of kubefan to measure (a paired before/after).
KUBEFAN=${KUBEFAN_BIN:-$BIN/kubefan}
# LOADTEST_BIN: another build of the generator (to measure the generator's
# own cost; the floor server stays this tree's).
LOADTEST=${LOADTEST_BIN:-$BIN/loadtest}
# KUBEFAN_ARGS: more flags for `kubefan serve`, split on spaces (e.g.
# "--keepalive-secs 300"); name OUT apart, the result files do not say.
read -r -a kubefan_args <<<"${KUBEFAN_ARGS:-}"
ulimit -n 20000

# A server left on a port (another run's, or one that did not stop) would
# answer in place of the one started here, and be measured instead.
ports_free() {
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "127.0.0.1:$port is already taken (another run?); stop it first" >&2; return 1
    fi
  done
}
wait_http() { for _ in $(seq 100); do curl -sf -o /dev/null "$@" && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
# For servers with no URL that answers 200 at once (the floor's unknown
# paths are 404s; an nchan subscribe holds the connection): accepting is
# enough.
wait_listening() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "nothing listening on $1" >&2; return 1; }

H2_STREAMS=${H2_STREAMS:-100}
CERT=/tmp/kubefan-lt-tls
if [[ "$POINTS" == *:tls* || "$POINTS" == *:h2* ]]; then
  mkdir -p "$CERT"
  # CA:FALSE: rustls refuses a CA certificate as a server's.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
    -keyout "$CERT/key.pem" -out "$CERT/cert.pem" -subj /CN=kubefan-loadtest \
    -addext subjectAltName=IP:127.0.0.1 -addext basicConstraints=critical,CA:FALSE 2>/dev/null
fi

for point in $POINTS; do
  IFS=: read -r n transport mode <<<"$point"
  mode=${mode:-plain}
  transport_run=(--transport "$transport")
  if [[ "$transport" =~ ^wsmux([0-9]+)$ ]]; then
    transport_run=(--transport ws-mux --ws-mux-subscriptions "${BASH_REMATCH[1]}")
  fi
  tls_serve=(); tls_run=(); scheme=http; suffix=""; sim_url=http://127.0.0.1:18001
  if [ "$mode" = tls ] || [ "$mode" = h2 ]; then
    tls_serve=(--tls-cert-file "$CERT/cert.pem" --tls-key-file "$CERT/key.pem")
    tls_run=(--tls-ca "$CERT/cert.pem"); scheme=https; suffix="-$mode"
    [ "$mode" = h2 ] && tls_run+=(--h2-streams-per-connection "$H2_STREAMS")
  elif [ "$mode" = session ]; then
    SESSION=/tmp/kubefan-lt-session
    mkdir -p "$SESSION"
    head -c 48 /dev/urandom >"$SESSION/secret"
    "$KUBEFAN" session-cookies --session-secret-file "$SESSION/secret" --count "${SESSIONS:-$n}" \
      --group loadtest --ttl-secs 86400 >"$SESSION/cookies"
    # The issuer is never asked: sessions need only the shared key.
    tls_serve=(--auth oidc --oidc-issuer-url https://127.0.0.1:9 --oidc-client-id kubefan
      --session-secret-file "$SESSION/secret")
    tls_run=(--cookie-file "$SESSION/cookies"); suffix="-session"
  elif [ "$mode" = jwt ]; then
    JWT=/tmp/kubefan-lt-jwt
    alg=${JWT_ALG:-HS256}
    mkdir -p "$JWT"
    case "$alg" in
      HS*) head -c 48 /dev/urandom | base64 -w0 >"$JWT/key"
           tls_serve=(--auth jwt --jwt-secret-file "$JWT/key") ;;
      ES256) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$JWT/key" ;;
      RS256) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$JWT/key" 2>/dev/null ;;
      EdDSA) openssl genpkey -algorithm ed25519 -out "$JWT/key" ;;
      *) echo "JWT_ALG=$alg: HS256, HS384, HS512, ES256, RS256 or EdDSA" >&2; exit 1 ;;
    esac
    if [[ "$alg" != HS* ]]; then
      openssl pkey -in "$JWT/key" -pubout -out "$JWT/public.pem"
      tls_serve=(--auth jwt --jwt-public-key-file "$JWT/public.pem")
    fi
    "$BIN/loadtest" mint-jwt --key-file "$JWT/key" --alg "$alg" --count "${TOKENS:-$n}" \
      --ttl-secs 7200 --namespaces loadtest --resources pods >"$JWT/tokens"
    tls_run=(--bearer-file "$JWT/tokens"); suffix="-jwt"
  elif [ "$mode" = rbac ]; then
    # The tokens are the simulator's, made when it starts: written below.
    RBAC=/tmp/kubefan-lt-rbac
    mkdir -p "$RBAC"
    tls_serve=(--auth kubernetes --authorization rbac)
    tls_run=(--bearer-file "$RBAC/tokens" --sim-token-file "$RBAC/admin-token"
      --namespaces "${NAMESPACES:-10}"); suffix="-rbac"
  elif [[ "$mode" == views=* ]]; then
    tls_run=(--views "${mode#views=}"); suffix="-views${mode#views=}"
  elif [[ "$mode" == clusters=* ]]; then
    k=${mode#clusters=}
    names=$(seq -s, -f 'c%g' 0 $((k - 1)))
    sims=$(seq -s, -f 'http://127.0.0.1:%g' 18001 $((18000 + k)))
    tls_run=(--clusters "$names"); sim_url=$sims; suffix="-clusters$k"
  elif [ "$mode" != plain ]; then
    echo "$point: MODE is plain, tls, h2, session, jwt, rbac, views=V or clusters=K" >&2; exit 1
  fi
  sim_args=()
  if [ "$mode" = rbac ]; then
    sim_args=(--authorization-mode RBAC --tls off)
    for u in $(seq 0 $(( ${USERS:-100} - 1 ))); do sim_args+=(--user "loadtest-$u"); done
  fi
  workers=$(( (n + 2499) / 2500 )); [ "$workers" -lt 2 ] && workers=2
  for server in $SERVERS; do
    for rep in $(seq "$REPS"); do
      # Other modes are kubefan's; TLS also has a floor (`loadtest floor --tls-listen`).
      [ "$mode" != plain ] && [ "$server" != kubefan ] && ! { [ "$server" = floor ] && [ "$mode" = tls ]; } && continue
      [[ "$transport" == wsmux* ]] && [ "$server" != kubefan ] && continue
      file="$OUT/$server-$transport$suffix-$n-$rep.json"
      publish=()
      if [ "$server" = kubefan ]; then
        ports_free 18001 18080
        rm -f /tmp/lt.kubeconfig
        taskset -c "$SERVER_CPUS" "$KUBEFAN" sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/lt.kubeconfig \
          --churn-rate 0 --pods 100 "${sim_args[@]}" >/tmp/lt-sim.log 2>&1 &
        sim=$!
        wait_http http://127.0.0.1:18001/version
        # Written just after the simulator starts serving.
        for _ in $(seq 50); do [ -s /tmp/lt.kubeconfig ] && break; sleep 0.1; done
        upstream=(--kubeconfig /tmp/lt.kubeconfig)
        if [[ "$mode" == clusters=* ]]; then
          # The first simulator is cluster c0; the others start here.
          upstream=(--cluster c0=/tmp/lt.kubeconfig --default-cluster c0)
          for i in $(seq 1 $((k - 1))); do
            port=$((18001 + i))
            ports_free "$port"
            rm -f "/tmp/lt-$i.kubeconfig"
            taskset -c "$SERVER_CPUS" "$KUBEFAN" sim --listen "127.0.0.1:$port" --kubeconfig-out "/tmp/lt-$i.kubeconfig" \
              --churn-rate 0 --pods 100 >"/tmp/lt-sim-$i.log" 2>&1 &
            sim="$sim $!"
            wait_http "http://127.0.0.1:$port/version"
            for _ in $(seq 50); do [ -s "/tmp/lt-$i.kubeconfig" ] && break; sleep 0.1; done
            upstream+=(--cluster "c$i=/tmp/lt-$i.kubeconfig")
          done
        fi
        if [ "$mode" = rbac ]; then
          # The users' tokens (with the namespace each may see), the
          # admin's, and a RoleBinding per namespace.
          python3 - /tmp/lt.kubeconfig "$RBAC" "${NAMESPACES:-10}" <<'PY'
import json, sys, urllib.request
kubeconfig, out, namespaces = sys.argv[1], sys.argv[2], int(sys.argv[3])
tokens = {u["name"]: u["user"]["token"] for u in json.load(open(kubeconfig))["users"] if "token" in u.get("user", {})}
admin = tokens.pop("kubefan-sim-admin")
open(out + "/admin-token", "w").write(admin + "\n")
users = sorted(tokens, key=lambda n: int(n.rsplit("-", 1)[1]))
with open(out + "/tokens", "w") as f:
    for u in users:
        f.write("%s loadtest-%d\n" % (tokens[u], int(u.rsplit("-", 1)[1]) % namespaces))
def post(path, body):
    req = urllib.request.Request("http://127.0.0.1:18001" + path, json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + admin})
    urllib.request.urlopen(req).read()
rbac = "/apis/rbac.authorization.k8s.io/v1"
post(rbac + "/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "loadtest-pod-reader"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
for k in range(namespaces):
    post("%s/namespaces/loadtest-%d/rolebindings" % (rbac, k), {"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding", "metadata": {"name": "loadtest-readers", "namespace": "loadtest-%d" % k},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "loadtest-pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                     for u in users if int(u.rsplit("-", 1)[1]) % namespaces == k]})
PY
        fi
        if [ "$mode" = session ]; then
          rbac=http://127.0.0.1:18001/apis/rbac.authorization.k8s.io/v1
          curl -sf -o /dev/null -H 'Content-Type: application/json' -X POST "$rbac/clusterroles" -d \
            '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"pod-reader"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]}]}'
          curl -sf -o /dev/null -H 'Content-Type: application/json' -X POST "$rbac/clusterrolebindings" -d \
            '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"loadtest"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"pod-reader"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"loadtest"}]}'
        fi
        taskset -c "$SERVER_CPUS" "$KUBEFAN" serve "${upstream[@]}" --listen 127.0.0.1:18080 \
          --resources pods --workers 1 "${tls_serve[@]}" "${kubefan_args[@]}" >/tmp/lt-gw.log 2>&1 &
        srv=$!
        wait_http "$scheme://127.0.0.1:18080/readyz" -k
        pid=$srv; base=$scheme://127.0.0.1:18080
      elif [ "$server" = floor ]; then
        ports_free 8092
        floor_tls=(); base=http://127.0.0.1:8092
        if [ "$mode" = tls ]; then
          # Subscribers over TLS on 8093, publications in plain on 8092.
          ports_free 8093
          floor_tls=(--tls-listen 127.0.0.1:8093 --tls-cert-file "$CERT/cert.pem" --tls-key-file "$CERT/key.pem")
          base=https://127.0.0.1:8093; publish=(--publish-base http://127.0.0.1:8092)
        fi
        taskset -c "$SERVER_CPUS" "$BIN/loadtest" floor --listen 127.0.0.1:8092 "${floor_tls[@]}" >/tmp/lt-floor.log 2>&1 &
        srv=$!
        wait_listening 8092
        pid=$srv; sim=""
      else
        ports_free 8090
        taskset -c "$SERVER_CPUS" nginx -c "$PWD/loadtest/nchan.conf" -p /tmp/kubefan-nchan/ >/tmp/nchan.log 2>&1 &
        srv=$!
        wait_listening 8090
        sleep 0.5
        pid=$(pgrep -P "$srv" -f "nginx: worker" | head -1)
        base=http://127.0.0.1:8090
        sim=""
      fi
      nice -n "${GENERATOR_NICE:-0}" taskset -c "$GENERATOR_CPUS" "$LOADTEST" run --server "$server" --base "$base" --sim "$sim_url" \
        --pid "$pid" "${transport_run[@]}" --subscribers "$n" --rate "$RATE" \
        --duration-secs "$DURATION" --workers "$workers" --payload "$PAYLOAD" "${tls_run[@]}" "${publish[@]}" --out "$file" >/dev/null
      # shellcheck disable=SC2086 # $sim: one or more simulators' pids.
      kill "$srv" ${sim:+$sim} 2>/dev/null || true
      wait 2>/dev/null || true
    done
  done
done
