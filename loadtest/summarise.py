#!/usr/bin/env python3
"""Turns loadtest/results/*.json into the RESULTS.md table (medians of the
repetitions) and PNG charts (latency and memory per subscriber against N,
kubefan beside nginx+nchan).  Usage: python3 loadtest/summarise.py [DIR]
(DIR: the results directory, default loadtest/results; charts only for it)"""
import glob, json, os, statistics, sys
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))
runs = defaultdict(list)
results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "results")
for f in glob.glob(os.path.join(results, "*.json")):
    r = json.load(open(f))
    transport = r["transport"]
    if r.get("h2_streams_per_connection"):
        transport += " HTTP/2 (TLS, %d streams/conn)" % r["h2_streams_per_connection"]
    elif r.get("tls"):
        transport += " TLS"
    if r.get("ws_mux_subscriptions"):
        transport += " (%d per socket)" % r["ws_mux_subscriptions"]
    if r.get("auth"):
        transport += " (%s)" % r["auth"]
    if r.get("views"):
        transport += ", %d views" % r["views"]
    if (r.get("namespaces") or 1) > 1:
        transport += ", %d namespaces" % r["namespaces"]
    runs[(r["server"], transport, r["subscribers"])].append(r)

def med(rs, *path):
    vals = []
    for r in rs:
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    return statistics.median(vals) if vals else None

rows = []
print("| server | transport | N | delivered / expected | lost | dup | p50 ms | p99 ms | p99.9 ms | max ms | last subscriber p99 ms | memory / subscriber (streaming) | just after connecting | CPU / delivery | runs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
kb = lambda b: '%.1f KB' % (b / 1000) if b is not None else '?'
for key in sorted(runs, key=lambda k: (k[1], k[2], k[0])):
    rs = runs[key]
    server, transport, n = key
    mem = med(rs, "rss_per_subscriber_bytes")
    connected = med(rs, "rss_per_subscriber_connected_bytes")
    cpu = med(rs, "server_cpu_us_per_delivery")
    row = dict(server=server, transport=transport, n=n, p99=med(rs, "latency_ms", "p99"), mem=mem)
    rows.append(row)
    # Runs before the generator reported it have none.
    p999 = med(rs, "latency_ms", "p999")
    p999 = "%.1f" % p999 if p999 is not None else "?"
    print(f"| {server} | {transport} | {n} | {int(med(rs,'delivered'))} / {int(med(rs,'expected'))} | "
          f"{sum(r['lost'] for r in rs)} | {sum(r['duplicates'] for r in rs)} | {med(rs,'latency_ms','p50'):.1f} | "
          f"{med(rs,'latency_ms','p99'):.1f} | {p999} | {med(rs,'latency_ms','max'):.1f} | {med(rs,'last_subscriber_ms','p99'):.1f} | "
          f"{kb(mem)} | {kb(connected)} | {'%.2f µs' % cpu if cpu is not None else '?'} | {len(rs)} |")

if len(sys.argv) > 1:
    sys.exit(0)
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("charts need matplotlib: pip install matplotlib")
for metric, label, fname in [("p99", "p99 delivery latency (ms)", "latency.png"), ("mem", "memory per subscriber while streaming (KB)", "memory.png")]:
    fig, ax = plt.subplots(figsize=(6, 4))
    for server in sorted({r["server"] for r in rows}):
        pts = sorted((r["n"], r[metric]) for r in rows if r["server"] == server and r["transport"] == "Sse" and r[metric] is not None)
        if pts:
            ys = [y / 1000 if metric == "mem" else y for _, y in pts]
            ax.plot([x for x, _ in pts], ys, marker="o", label=server)
    ax.set_xlabel("SSE subscribers (N), 10 changes/s")
    ax.set_ylabel(label)
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(here, fname), dpi=110)
    print(f"wrote loadtest/{fname}", file=sys.stderr)
