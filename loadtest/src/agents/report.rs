//! `loadtest agents`' report: the workers' deliveries merged (as `loadtest
//! run` merges them, [`crate::report::Tally`]), the agents' snapshots,
//! positions and folded states against the listed pods, the server's CPU
//! per change and per delivery, its memory per agent; as JSON and as one
//! summary line.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::fold::{Mismatch, compare, differences};
use super::upstream::delta;
use super::worker::Report;
use super::{AgentsArgs, Run};
use crate::report::{Tally, kb, ms, per_change_percentiles, percentiles};

/// How many mismatched agents the report names.
const EXAMPLES: usize = 5;

pub fn report(args: &AgentsArgs, run: &Run, workers: Vec<Report>) -> anyhow::Result<Value> {
    let mut tally = Tally::new(run.changes)?;
    let mut agents = Vec::new();
    for w in workers {
        tally.add(w.deliveries)?;
        agents.extend(w.agents);
    }
    let delivered = tally.delivered();
    let sum = |f: fn(&super::agent::AgentReport) -> u64| agents.iter().map(f).sum::<u64>();
    let (relists, rewatches, reconnects) = (
        sum(|a| a.relists),
        sum(|a| a.rewatches),
        sum(|a| a.reconnects),
    );
    let window_deliveries = sum(|a| a.window_changes);

    // Snapshots: each agent's, from its connection's start to its end.
    let snapshot_us: Vec<u32> = agents
        .iter()
        .filter_map(|a| {
            a.snapshot_ms
                .map(|s| (s.saturating_sub(a.started_ms) * 1000).min(u32::MAX as u64) as u32)
        })
        .collect();
    let connect_all_ms = agents.iter().filter_map(|a| a.connected_ms).max();

    // Folded states against the listed pods.
    let everything: Option<HashMap<String, u64>> = (args.viewers > 0).then(|| {
        run.pods
            .values()
            .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), *v)))
            .collect()
    });
    let empty = HashMap::new();
    let mut mismatch = Mismatch::default();
    let (mut mismatched, mut examples, mut reached) = (0u64, Vec::new(), 0u64);
    for a in agents.iter().filter(|a| a.snapshot_ms.is_some()) {
        reached += u64::from(a.reached);
        let upstream = match &a.node {
            Some(node) => run.pods.get(node).unwrap_or(&empty),
            None => everything.as_ref().unwrap_or(&empty),
        };
        let m = compare(&a.state, upstream.iter());
        if m.total() > 0 {
            mismatched += 1;
            if examples.len() < EXAMPLES {
                examples.push(
                    json!({"agent": a.index, "node": a.node, "reached": a.reached,
                    "position": a.position, "mismatch": m,
                    // (object, the agent's resourceVersion, the upstream's)
                    "objects": differences(&a.state, upstream, 3)}),
                );
            }
        }
        mismatch.missing += m.missing;
        mismatch.extra += m.extra;
        mismatch.stale += m.stale;
    }
    let connected = agents.iter().filter(|a| a.snapshot_ms.is_some()).count() as u64;
    let failures: Vec<&str> = agents
        .iter()
        .filter_map(|a| a.failed.as_deref())
        .take(EXAMPLES)
        .collect();

    // The server's CPU over the changes' window, per upstream change (the
    // markers' and the churn's: the gateway's events received, else the
    // upstream's resourceVersions), per marker change and per delivery
    // (every change event the agents got in the window).
    let s = &run.samples;
    let cpu_ms = s.start.zip(s.end).map(|(a, b)| b.1.saturating_sub(a.1));
    let upstream_changes = delta(
        &run.metrics[1],
        &run.metrics[2],
        "kubefan_events_received_total",
    )
    .map(|d| d as u64)
    .or(run.rv_window.map(|(a, b)| b.saturating_sub(a)));
    // None where there is nothing to divide by (no agents, no deliveries).
    let per = |n: Option<u64>| {
        cpu_ms
            .zip(n.filter(|n| *n > 0))
            .map(|(ms, n)| ms as f64 * 1000.0 / n as f64)
    };
    let subscribers = (args.agents + args.viewers) as f64;
    let per_agent = |at: super::Sample| {
        s.before
            .zip(at)
            .filter(|_| subscribers > 0.0)
            .map(|(b, a)| (a.0 as f64 - b.0 as f64) * 1024.0 / subscribers)
    };
    // What the gateway adds to a change's last delivery: beyond the
    // upstream's own latency for it (`Cluster::probe`; changes it never
    // saw are left out).
    let added = |i: usize| {
        let upstream = *run.upstream_us.get(i)?;
        (upstream != u32::MAX).then(|| {
            tally
                .per_change
                .get(i)
                .map(|(_, m)| m.saturating_sub(upstream))
        })?
    };
    let added_of = |seqs: &mut dyn Iterator<Item = usize>| {
        per_change_percentiles(seqs.filter_map(added).collect())
    };
    let relist = run.relist.as_ref().map(|r| {
        let late = |seqs: &mut dyn Iterator<Item = usize>| {
            let late: Vec<u32> = seqs.filter_map(|i| tally.per_change.get(i)).map(|(_, m)| *m).collect();
            per_change_percentiles(late)
        };
        let stalled = r.stalled.clone();
        json!({"at_change": r.at, "at_secs": r.at as f64 / args.rate, "error": r.result.as_ref().err(),
            "last_subscriber_ms_after": late(&mut (r.at..tally.per_change.len())),
            // Those only the list can bring (`Relist::stalled`), and the rest.
            "stalled_changes": [stalled.start, stalled.end],
            "last_subscriber_ms_stalled": late(&mut stalled.clone()),
            "last_subscriber_ms_after_but_stalled": late(&mut (r.at..tally.per_change.len()).filter(|i| !stalled.contains(i))),
            "added_ms_after": added_of(&mut (r.at..tally.per_change.len())),
            "added_ms_stalled": added_of(&mut stalled.clone())})
    });
    let gateway = |name: &str| delta(&run.metrics[0], &run.metrics[3], name);
    let mut report = json!({
        "server": args.server, "transport": args.transport,
        "watch_list": (args.transport == crate::target::Transport::Watch).then_some(args.watch_list),
        "tls": args.tls_ca.is_some(), "auth": args.bearer_file.as_ref().map(|_| "bearer"),
        "agents": args.agents, "viewers": args.viewers, "markers": run.markers,
        "rate": args.rate, "duration_secs": args.duration_secs, "changes": run.changes,
        "publish_errors": run.publish_errors, "failed_connections": run.failed,
        "failures": failures,
        "expected": tally.expected, "delivered": delivered, "lost": tally.expected.saturating_sub(delivered),
        "duplicates": tally.duplicates, "leaked": tally.leaked, "resets": tally.resets,
        "relists": relists, "rewatches": rewatches, "reconnects": reconnects,
        "leaked_marks": sum(|a| a.foreign_marks), "snapshots": sum(|a| a.snapshots),
        "backwards": sum(|a| a.backwards), "unparsed": sum(|a| a.unparsed),
        "latency_ms": percentiles(&tally.latency),
        "arrival_ms": percentiles(&tally.arrival),
        "arrival_per_change": tally.arrival_parts(),
        "last_subscriber_ms": tally.last_subscriber(),
        "last_subscriber_by_change_ms": tally.per_change.iter().map(|(_, m)| ms((*m).into())).collect::<Vec<_>>(),
        "upstream_by_change_ms": run.upstream_us.iter().map(|u| (*u != u32::MAX).then(|| ms((*u).into()))).collect::<Vec<_>>(),
        "upstream_unseen": run.upstream_us.iter().filter(|u| **u == u32::MAX).count(),
        "added_by_gateway_ms": added_of(&mut (0..tally.per_change.len())),
    });
    let rest = json!({
        "connect_all_ms": connect_all_ms,
        "snapshot_ms": per_change_percentiles(snapshot_us),
        "snapshots_all_ms": run.snapshots_all_ms,
        "settle": {
            "resource_version": run.settle_at, "deadline_ms": run.settle_ms,
            "list_ms": run.list_ms, "pods": run.pods.values().map(HashMap::len).sum::<usize>(),
            // `POST /debug/churn?rate=0`'s status: 200, the churn paused;
            // 404 or 405, a simulator without it (the churn went on, and
            // each agent's state is the one at the list's resourceVersion).
            "churn_pause_status": run.churn_pause,
            "churn_paused": run.churn_pause.map(|s| (200..300).contains(&s)),
            "agents_reached": reached, "agents_connected": connected,
            "mismatches": mismatch.total(), "mismatch": mismatch,
            "agents_mismatched": mismatched, "examples": examples,
        },
        "relist": relist,
        "gateway": {
            "upstream_relists": gateway("kubefan_upstream_relists_total"),
            "upstream_lists": gateway("kubefan_upstream_lists_total"),
            "upstream_watches": gateway("kubefan_upstream_watches_total"),
            "events_received": gateway("kubefan_events_received_total"),
            "events_sent": gateway("kubefan_events_sent_total"),
            // While the agents were connected.
            "views": run.metrics[1].as_ref().and_then(|m| m.get("kubefan_views").copied()),
        },
        "rss_kib": {"before": s.before.map(|x| x.0), "connected": s.connected.map(|x| x.0),
            "streaming": s.streaming.map(|x| x.0), "after": s.after.map(|x| x.0)},
        "vm_hwm_kib": run.vm_hwm_kib,
        "rss_per_agent_bytes": per_agent(s.streaming),
        "rss_per_agent_connected_bytes": per_agent(s.connected),
        "server_cpu_ms": cpu_ms, "window_ms": run.window_ms,
        "upstream_changes": upstream_changes, "window_deliveries": window_deliveries,
        "server_cpu_us_per_change": per(upstream_changes),
        "server_cpu_us_per_marker_change": per(Some(run.changes as u64)),
        "server_cpu_us_per_delivery": per(Some(window_deliveries)),
        "generator_cpu_ms": run.generator_cpu_ms,
        "generator_busy": run.generator_cpu_ms.map(|g| g as f64 / run.window_ms.max(1) as f64),
    });
    // Two objects: one would pass json!'s recursion limit.
    if let (Some(report), Value::Object(rest)) = (report.as_object_mut(), rest) {
        report.extend(rest);
    }
    Ok(report)
}

/// The report in one line.
pub fn summary(r: &Value) -> String {
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let us = |v: &Value| v.as_f64().map_or("?".into(), |u| format!("{u:.1} µs"));
    let transport = match r["watch_list"].as_bool() {
        Some(false) => "list-watch".to_string(),
        _ => r["transport"].as_str().unwrap_or("?").to_lowercase(),
    };
    format!(
        "{} {} agents={} viewers={} R={}: delivered {}/{} (lost {}, dup {}, leaked {}, resets {}, relists {}), \
         p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms; snapshots p50 {:.1}, p99 {:.1}, max {:.1} ms, \
         all in {} ms; settled {}/{} at {}, mismatches {}{}; {}/change, {}/delivery; {}/agent; upstream relists {}",
        r["server"].as_str().unwrap_or("?"),
        transport,
        num(&r["agents"]),
        num(&r["viewers"]),
        f(&r["rate"]),
        num(&r["delivered"]),
        num(&r["expected"]),
        num(&r["lost"]),
        num(&r["duplicates"]),
        num(&r["leaked"]),
        num(&r["resets"]),
        num(&r["relists"]),
        f(&r["latency_ms"]["p50"]),
        f(&r["latency_ms"]["p99"]),
        f(&r["latency_ms"]["p999"]),
        f(&r["latency_ms"]["max"]),
        f(&r["snapshot_ms"]["p50"]),
        f(&r["snapshot_ms"]["p99"]),
        f(&r["snapshot_ms"]["max"]),
        num(&r["snapshots_all_ms"]),
        num(&r["settle"]["agents_reached"]),
        num(&r["settle"]["agents_connected"]),
        num(&r["settle"]["resource_version"]),
        num(&r["settle"]["mismatches"]),
        match r["settle"]["churn_paused"].as_bool() {
            Some(false) => format!(
                " (churn not paused: {})",
                num(&r["settle"]["churn_pause_status"])
            ),
            _ => String::new(),
        },
        us(&r["server_cpu_us_per_change"]),
        us(&r["server_cpu_us_per_delivery"]),
        kb(&r["rss_per_agent_bytes"]),
        r["gateway"]["upstream_relists"]
            .as_f64()
            .map_or("?".into(), |n| n.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_what_the_report_does() {
        let r = json!({"server": "kubefan", "transport": "Watch", "watch_list": false, "agents": 50,
            "viewers": 0, "rate": 10.0, "delivered": 99, "expected": 100, "lost": 1, "duplicates": 0,
            "leaked": 0, "resets": 0, "relists": 2,
            "latency_ms": {"p50": 1.0, "p99": 2.0, "p999": 3.0, "max": 4.0},
            "snapshot_ms": {"p50": 5.0, "p99": 6.0, "max": 7.0}, "snapshots_all_ms": 80,
            "settle": {"agents_reached": 50, "agents_connected": 50, "resource_version": 1234,
                "mismatches": 0, "churn_paused": false, "churn_pause_status": 405},
            "server_cpu_us_per_change": 12.34, "server_cpu_us_per_delivery": null,
            "rss_per_agent_bytes": 2048.0, "gateway": {"upstream_relists": 0.0}});
        assert_eq!(
            summary(&r),
            "kubefan list-watch agents=50 viewers=0 R=10: delivered 99/100 (lost 1, dup 0, leaked 0, \
             resets 0, relists 2), p50 1.0 ms, p99 2.0 ms, p99.9 3.0 ms, max 4.0 ms; snapshots p50 5.0, \
             p99 6.0, max 7.0 ms, all in 80 ms; settled 50/50 at 1234, mismatches 0 (churn not paused: 405); \
             12.3 µs/change, ?/delivery; 2.0 KB/agent; upstream relists 0"
        );
    }
}
