B=/work/target-ht/release/kubefan; rm -f /tmp/z.kubeconfig
taskset -c 1 $B sim --listen 127.0.0.1:18001 --kubeconfig-out /tmp/z.kubeconfig --pods 150000 --nodes 5000 --churn-rate 200 >/tmp/z-sim.log 2>&1 & S=$!
for i in $(seq 600); do curl -sf -o /dev/null http://127.0.0.1:18001/version && [ -s /tmp/z.kubeconfig ] && break; sleep 0.1; done
XXX_STATS=1 $GWENV taskset -c 0 $B serve --kubeconfig /tmp/z.kubeconfig --listen 127.0.0.1:18080 --resources pods --workers 1 >/tmp/z-gw.log 2>&1 & G=$!
sleep ${SECS:-360}
kill $G $S; wait
