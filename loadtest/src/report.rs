//! What a run measured: the workers' reports merged ([`Tally`]), the
//! server's and the generator's processes read from /proc, and the report
//! made of them, as JSON and as one summary line.

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::RunArgs;
use crate::target::Transport;
use crate::worker::WorkerReport;

/// RSS (KiB) and CPU (ms) of several processes, summed; `None` when
/// there are none or one is gone.
pub fn stats_of(pids: &[u32]) -> Option<(u64, u64)> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold((0, 0), |(rss, cpu), pid| {
        let (r, c) = proc_stats(*pid)?;
        Some((rss + r, cpu + c))
    })
}

/// RSS (KiB) and CPU time (ms) of a process, from /proc.
pub fn proc_stats(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((rss, proc_cpu_ms(pid)?))
}

/// A `kB` field of /proc/PID/status (`VmHWM`: the peak RSS), summed over
/// `pids`.
pub fn status_kib(pids: &[u32], field: &str) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold(0, |sum, pid| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let value: u64 = status
            .lines()
            .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(sum + value)
    })
}

/// CPU time (ms) of a process, from /proc; also of one that has exited and
/// is not yet waited for (which has no RSS left).
pub fn proc_cpu_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    // utime and stime are fields 14 and 15 (1-based), in clock ticks (100/s).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10)
}

/// The workers' reports, merged.
pub struct Tally {
    /// Every delivery's latency (µs), to when the generator read it.
    pub(crate) latency: Histogram<u64>,
    /// The same, to when it reached its socket ([`crate::arrival`]).
    pub(crate) arrival: Histogram<u64>,
    /// Per change: its first and last arrival (µs).
    arrival_per_change: Vec<(u32, u32)>,
    /// Per change, in the order published: deliveries and the latest one
    /// (µs).
    pub(crate) per_change: Vec<(u64, u32)>,
    pub(crate) duplicates: u64,
    pub(crate) resets: u64,
    pub(crate) expected: u64,
    pub(crate) leaked: u64,
}

impl Tally {
    pub fn new(changes: usize) -> anyhow::Result<Tally> {
        Ok(Tally {
            latency: Histogram::new_with_bounds(1, 600_000_000, 2)?,
            arrival: Histogram::new_with_bounds(1, 600_000_000, 2)?,
            arrival_per_change: vec![(u32::MAX, 0); changes],
            per_change: vec![(0, 0); changes],
            duplicates: 0,
            resets: 0,
            expected: 0,
            leaked: 0,
        })
    }

    pub fn add(&mut self, report: WorkerReport) -> anyhow::Result<()> {
        for (v, c) in report.histogram {
            self.latency.record_n(v.max(1), c)?;
        }
        for (v, c) in report.arrival_histogram {
            self.arrival.record_n(v.max(1), c)?;
        }
        for (change, (first, last)) in self
            .arrival_per_change
            .iter_mut()
            .zip(report.arrival_per_change)
        {
            *change = (change.0.min(first), change.1.max(last));
        }
        for (change, (n, m)) in self.per_change.iter_mut().zip(report.per_change) {
            change.0 += n;
            change.1 = change.1.max(m);
        }
        self.duplicates += report.duplicates;
        self.resets += report.resets;
        self.expected += report.expected;
        self.leaked += report.leaked;
        Ok(())
    }

    pub(crate) fn delivered(&self) -> u64 {
        self.per_change.iter().map(|(n, _)| n).sum()
    }

    /// Percentiles of each change's latest delivery (ms).
    pub(crate) fn last_subscriber(&self) -> Value {
        per_change_percentiles(self.per_change.iter().map(|(_, m)| *m).collect())
    }

    /// Each change's deliveries split in two (ms, percentiles over the
    /// changes): `first`, until its first delivery reached a socket (the
    /// server's way to its writes, and any wait behind the change before);
    /// `spread`, from that to its last (one pass over the subscribers'
    /// sockets, and whatever ran in the middle of it).
    pub(crate) fn arrival_parts(&self) -> Value {
        let arrived = self
            .arrival_per_change
            .iter()
            .filter(|(f, _)| *f != u32::MAX);
        json!({
            "first_ms": per_change_percentiles(arrived.clone().map(|(f, _)| *f).collect()),
            "spread_ms": per_change_percentiles(arrived.map(|(f, l)| l - f).collect()),
        })
    }
}

/// p50, p99 and max of one figure per change (µs), in ms.
pub(crate) fn per_change_percentiles(mut per_change: Vec<u32>) -> Value {
    per_change.sort_unstable();
    let pct = |p: f64| {
        per_change
            .get(((per_change.len() as f64 * p) as usize).min(per_change.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    json!({"p50": ms(pct(0.5).into()), "p99": ms(pct(0.99).into()),
        "max": ms(per_change.last().copied().unwrap_or(0).into())})
}

/// p50, p99, p99.9 and max of a histogram of µs, in ms.
pub(crate) fn percentiles(h: &Histogram<u64>) -> Value {
    json!({"p50": ms(h.value_at_quantile(0.5)), "p99": ms(h.value_at_quantile(0.99)),
        "p999": ms(h.value_at_quantile(0.999)), "max": ms(h.max())})
}

/// µs as ms.
pub(crate) fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// A process's (or several's) RSS (KiB) and CPU (ms) at a point of the run.
pub type Sample = Option<(u64, u64)>;

/// Everything a run measured.
pub struct Measured {
    pub tally: Tally,
    /// `cookie` or `bearer`: the credentials subscribers sent.
    pub auth: Option<&'static str>,
    pub changes: usize,
    pub failed_connections: u64,
    pub publish_errors: usize,
    pub connect_ms: u128,
    /// The servers': before connecting, once connected, three quarters
    /// into the changes, as the changes started and at the end.
    pub before: Sample,
    pub connected: Sample,
    pub streaming: Sample,
    pub start: Sample,
    pub end: Sample,
    /// `--root-pid`'s: before connecting, as the changes started and at
    /// the end.
    pub root: [Sample; 3],
    /// The generator's CPU (its workers' and the coordinator's) from the
    /// first change to the last report, and how long that was.
    pub generator_cpu_ms: Option<u64>,
    pub streaming_ms: u64,
}

impl Measured {
    pub fn report(&self, args: &RunArgs) -> Value {
        let t = &self.tally;
        let delivered = t.delivered();
        let cpu_ms = self.start.zip(self.end).map(|(a, b)| b.1 - a.1);
        let per_subscriber = |at: Sample| {
            self.before
                .zip(at)
                .map(|(b, a)| (a.0 as f64 - b.0 as f64) * 1024.0 / args.subscribers as f64)
        };
        let [root_before, root_start, root_end] = self.root;
        let per_delivery =
            |ms: Option<u64>| ms.map(|ms| ms as f64 * 1000.0 / delivered.max(1) as f64);
        json!({
            "server": args.server, "transport": args.transport, "subscribers": args.subscribers,
            "tls": args.tls_ca.is_some(), "h2_streams_per_connection": args.h2_streams_per_connection,
            "auth": self.auth,
            "ws_mux_subscriptions": (args.transport == Transport::WsMux).then_some(args.ws_mux_subscriptions),
            "rate": args.rate, "duration_secs": args.duration_secs, "changes": self.changes,
            "failed_connections": self.failed_connections, "publish_errors": self.publish_errors,
            "expected": t.expected, "delivered": delivered, "lost": t.expected.saturating_sub(delivered),
            "duplicates": t.duplicates, "resets": t.resets, "namespaces": args.namespaces, "leaked": t.leaked,
            "views": args.views, "clusters": args.clusters,
            "latency_ms": percentiles(&t.latency),
            // To when each delivery reached the generator's socket, not when
            // the generator read it: the server's part alone, with the
            // generator's queue left out (`arrival.rs`).
            "arrival_ms": percentiles(&t.arrival),
            "arrival_per_change": t.arrival_parts(),
            "last_subscriber_ms": t.last_subscriber(),
            // Each change's slowest delivery, in the order published (one every
            // 1/R s): when in the run the tail came, and whether it recurs
            // with a period of the server's (a keep-alive interval, a trim).
            "last_subscriber_by_change_ms": t.per_change.iter().map(|(_, m)| ms((*m).into())).collect::<Vec<_>>(),
            "connect_all_ms": self.connect_ms,
            "rss_kib": {"before": self.before.map(|s| s.0), "connected": self.connected.map(|s| s.0),
                "streaming": self.streaming.map(|s| s.0), "after": self.end.map(|s| s.0)},
            "rss_per_subscriber_bytes": per_subscriber(self.streaming),
            "rss_per_subscriber_connected_bytes": per_subscriber(self.connected),
            "server_cpu_ms": cpu_ms,
            "servers": args.base.len(),
            "root": args.root_pid.map(|_| json!({
                "rss_kib": {"before": root_before.map(|s| s.0), "streaming": root_end.map(|s| s.0)},
                "cpu_ms": root_start.zip(root_end).map(|(a, b)| b.1 - a.1),
            })),
            "server_cpu_us_per_delivery": per_delivery(cpu_ms),
            "generator_cpu_ms": self.generator_cpu_ms,
            "generator_cpu_us_per_delivery": per_delivery(self.generator_cpu_ms),
            // Of one core, from the first change to the last report: near 1,
            // the generator's core was saturated (run-points gives it one).
            "generator_busy": self.generator_cpu_ms.map(|ms| ms as f64 / self.streaming_ms.max(1) as f64),
        })
    }
}

/// The report in one line, for the terminal and the run scripts' logs.
pub fn summary(report: &Value) -> String {
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let latency = |p: &str| report["latency_ms"][p].as_f64().unwrap_or(0.0);
    let arrival = |p: &str| report["arrival_ms"][p].as_f64().unwrap_or(0.0);
    let us = |key: &str| {
        report[key]
            .as_f64()
            .map_or("?".into(), |u| format!("{u:.2} µs"))
    };
    format!(
        "{} {} N={} R={}: delivered {}/{} (lost {}, dup {}, resets {}, leaked {}), p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms (arrived: p50 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}), {}/subscriber ({} just after connecting), {} CPU/delivery (generator {}, busy {})",
        report["server"].as_str().unwrap_or("?"),
        report["transport"].as_str().unwrap_or("?"),
        num(&report["subscribers"]),
        report["rate"].as_f64().unwrap_or(0.0),
        num(&report["delivered"]),
        num(&report["expected"]),
        num(&report["lost"]),
        num(&report["duplicates"]),
        num(&report["resets"]),
        num(&report["leaked"]),
        latency("p50"),
        latency("p99"),
        latency("p999"),
        latency("max"),
        arrival("p50"),
        arrival("p99"),
        arrival("p999"),
        arrival("max"),
        kb(&report["rss_per_subscriber_bytes"]),
        kb(&report["rss_per_subscriber_connected_bytes"]),
        us("server_cpu_us_per_delivery"),
        us("generator_cpu_us_per_delivery"),
        report["generator_busy"]
            .as_f64()
            .map_or("?".into(), |b| format!("{b:.2}")),
    )
}

/// A byte count in KB, for the summary.
pub(crate) fn kb(bytes: &serde_json::Value) -> String {
    bytes
        .as_f64()
        .map_or("?".into(), |b| format!("{:.1} KB", b / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(histogram: Vec<(u64, u64)>, per_change: Vec<(u64, u32)>) -> WorkerReport {
        WorkerReport {
            expected: per_change.len() as u64,
            arrival_histogram: histogram.iter().map(|(v, c)| (v / 2, *c)).collect(),
            arrival_per_change: per_change
                .iter()
                .map(|(n, m)| {
                    if *n == 0 {
                        (u32::MAX, 0)
                    } else {
                        (m / 4, m / 2)
                    }
                })
                .collect(),
            histogram,
            per_change,
            duplicates: 1,
            resets: 0,
            failed_connections: 0,
            leaked: 0,
        }
    }

    #[test]
    fn workers_reports_add_up_per_change_and_in_one_histogram() {
        let mut tally = Tally::new(3).unwrap();
        tally
            .add(worker(
                vec![(1_000, 2), (5_000, 1)],
                vec![(1, 1_000), (1, 5_000), (1, 1_000)],
            ))
            .unwrap();
        // A worker whose subscribers missed the second change.
        tally
            .add(worker(
                vec![(2_000, 1), (9_000, 1)],
                vec![(1, 2_000), (0, 0), (1, 9_000)],
            ))
            .unwrap();
        assert_eq!(tally.per_change, [(2, 2_000), (1, 5_000), (2, 9_000)]);
        assert_eq!(tally.delivered(), 5);
        assert_eq!((tally.expected, tally.duplicates), (6, 2));
        assert_eq!(tally.latency.len(), 5);
        // Two significant digits: the max is the top of 9,000 µs's bucket.
        assert!((ms(tally.latency.max()) - 9.0).abs() < 0.1);
        // Arrivals are their own histogram (each half its read here).
        assert_eq!(tally.arrival.len(), 5);
        assert!((ms(tally.arrival.max()) - 4.5).abs() < 0.1);
        // Per change, the earliest first arrival and the latest last one:
        // (250, 1,000), (1,250, 2,500) and (250, 4,500) µs.
        assert_eq!(
            tally.arrival_per_change,
            [(250, 1_000), (1_250, 2_500), (250, 4_500)]
        );
        let parts = tally.arrival_parts();
        assert_eq!(parts["first_ms"]["max"].as_f64(), Some(1.25));
        assert_eq!(parts["spread_ms"]["max"].as_f64(), Some(4.25));
        let last = tally.last_subscriber();
        assert_eq!(
            (last["p50"].as_f64(), last["max"].as_f64()),
            (Some(5.0), Some(9.0))
        );
    }

    #[test]
    fn the_summary_line_says_what_the_report_does() {
        let report = json!({"server": "kubefan", "transport": "Sse", "subscribers": 10, "rate": 10.0,
            "delivered": 9, "expected": 10, "lost": 1, "duplicates": 0, "resets": 0, "leaked": 0,
            "latency_ms": {"p50": 1.3, "p99": 2.0, "p999": 3.0, "max": 4.0},
            "arrival_ms": {"p50": 1.1, "p99": 1.5, "p999": 1.8, "max": 2.5},
            "rss_per_subscriber_bytes": 1500.0, "rss_per_subscriber_connected_bytes": null,
            "server_cpu_us_per_delivery": 9.4, "generator_cpu_us_per_delivery": null,
            "generator_busy": 0.5});
        assert_eq!(
            summary(&report),
            "kubefan Sse N=10 R=10: delivered 9/10 (lost 1, dup 0, resets 0, leaked 0), \
             p50 1.3 ms, p99 2.0 ms, p99.9 3.0 ms, max 4.0 ms \
             (arrived: p50 1.1, p99 1.5, p99.9 1.8, max 2.5), 1.5 KB/subscriber \
             (? just after connecting), 9.40 µs CPU/delivery (generator ?, busy 0.50)"
        );
    }
}
