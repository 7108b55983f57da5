//! One worker process: its share of the subscribers, connected from its
//! loopback addresses; it reads every delivery and reports latencies,
//! duplicates and resets to the `run` process on stdout.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::subscriber::{Client, Seen, connect, h2_connection, read};
use crate::target::{Target, Transport, credentials};

#[derive(Serialize, Deserialize)]
pub struct WorkerConfig {
    pub target: Target,
    pub subscribers: usize,
    pub first_address: u8,
    pub addresses: u8,
}

#[derive(Serialize, Deserialize, Default)]
pub struct WorkerReport {
    /// (latency µs, count) of every delivery.
    pub histogram: Vec<(u64, u64)>,
    /// The same, to when each delivery reached its socket
    /// ([`crate::arrival`]).
    #[serde(default)]
    pub arrival_histogram: Vec<(u64, u64)>,
    /// Per change: its first and last arrival (µs; `(u32::MAX, 0)`: none).
    #[serde(default)]
    pub arrival_per_change: Vec<(u32, u32)>,
    /// Per change: deliveries and the latest one (µs).
    pub per_change: Vec<(u64, u32)>,
    pub duplicates: u64,
    pub resets: u64,
    pub failed_connections: u64,
    /// Deliveries the connected subscribers are to get, all told.
    pub expected: u64,
    /// Deliveries of changes to namespaces a subscriber may not see.
    pub leaked: u64,
}

pub fn local_address(i: usize, first: u8, count: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        0,
        first + (i % count.max(1) as usize) as u8,
    ))
}

/// A connection that failed, carrying `n` subscribers: counted, and the
/// first one's reason told on stderr (the run's report counts them only).
fn failure(n: usize, why: &str, failed_before: u64) -> u64 {
    if failed_before == 0 {
        eprintln!("worker: a connection failed: {why}");
    }
    n as u64
}

pub async fn worker(cfg: WorkerConfig) -> anyhow::Result<()> {
    let started = Instant::now();
    let per_connection = cfg.target.h2_streams;
    let clients: Vec<Client> = if per_connection > 0 {
        // Subscriber i uses connection i / per_connection.
        let connections = cfg.subscribers.div_ceil(per_connection);
        let mut sends = Vec::with_capacity(connections);
        for c in 0..connections {
            let local = local_address(c, cfg.first_address, cfg.addresses);
            let client =
                tokio::time::timeout(Duration::from_secs(60), h2_connection(&cfg.target, local))
                    .await
                    .context("an HTTP/2 connection in time")??;
            sends.push(client);
        }
        sends
    } else {
        vec![Client::Http1]
    };
    let credentials = std::sync::Arc::new(credentials(&cfg.target)?);
    // Subscribers per connection: a `/ws` socket carries several, each
    // other connection (or HTTP/2 stream) one.
    let per_socket = match cfg.target.transport {
        Transport::WsMux => cfg.target.ws_mux.max(1),
        _ => 1,
    };
    let sockets = cfg.subscribers.div_ceil(per_socket);
    let mut conns = Vec::with_capacity(sockets);
    let mut failed = 0u64;
    // At most 256 handshakes in flight.
    let mut pending = FuturesUnordered::new();
    for i in 0..sockets {
        let client = match i.checked_div(per_connection) {
            Some(connection) => clients[connection].clone(),
            None => clients[i % clients.len()].clone(),
        };
        let target = cfg.target.clone();
        let local = local_address(i, cfg.first_address, cfg.addresses);
        let credentials = credentials.clone();
        // The run-wide indexes of the subscribers on this connection; its
        // credential is the first one's.
        let subscribers = target.first + i * per_socket
            ..target.first + ((i + 1) * per_socket).min(cfg.subscribers);
        pending.push(async move {
            let n = subscribers.len();
            let credential = (!credentials.is_empty())
                .then(|| &credentials[subscribers.start % credentials.len()]);
            let wanted = credential.map_or(Vec::new(), |c| c.wanted(target.namespaces));
            let conn = tokio::time::timeout(
                Duration::from_secs(60),
                connect(&target, &client, local, credential, subscribers),
            )
            .await;
            match conn {
                Ok(Ok(conn)) => Ok((conn, wanted, n)),
                Ok(Err(e)) => Err((n, format!("{e:#}"))),
                Err(_) => Err((n, "no connection within 60 s".into())),
            }
        });
        if pending.len() >= 256 {
            match pending.next().await {
                Some(Ok(c)) => conns.push(c),
                Some(Err((n, why))) => failed += failure(n, &why, failed),
                None => {}
            }
        }
    }
    while let Some(r) = pending.next().await {
        match r {
            Ok(c) => conns.push(c),
            Err((n, why)) => failed += failure(n, &why, failed),
        }
    }
    let mut out = tokio::io::stdout();
    out.write_all(format!("READY {} {}\n", started.elapsed().as_millis(), failed).as_bytes())
        .await?;
    out.flush().await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let line = stdin.next_line().await?.context("coordinator went away")?;
    let mut words = line.split_whitespace().skip(1);
    let changes: usize = words.next().context("GO changes")?.parse()?;
    let deadline_ms: u64 = words.next().context("GO deadline")?.parse()?;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(deadline_ms);
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|(c, wanted, n)| {
            let seen = (0..n).map(|_| Seen::new(changes, wanted.clone())).collect();
            tokio::spawn(read(c, seen, deadline))
        })
        .collect();
    // Readers are running: the coordinator may start publishing.
    out.write_all(b"STARTED\n").await?;
    out.flush().await?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 2)?;
    let mut arrival = hist.clone();
    let mut report = WorkerReport {
        per_change: vec![(0, 0); changes],
        arrival_per_change: vec![(u32::MAX, 0); changes],
        failed_connections: failed,
        ..WorkerReport::default()
    };
    // Every reader is done before any connection closes (`read`).
    let (seens, conns): (Vec<Vec<Seen>>, Vec<_>) = futures::future::try_join_all(tasks)
        .await?
        .into_iter()
        .unzip();
    drop(conns);
    for seen in seens.into_iter().flatten() {
        report.duplicates += seen.duplicates;
        report.resets += seen.resets;
        report.expected += seen.expected();
        report.leaked += seen.leaked;
        for (i, l) in seen.latency_us.iter().enumerate() {
            if *l != u32::MAX {
                hist.saturating_record(u64::from(*l).max(1));
                report.per_change[i].0 += 1;
                report.per_change[i].1 = report.per_change[i].1.max(*l);
                let arrived = seen.arrival_us[i];
                arrival.saturating_record(u64::from(arrived).max(1));
                let (first, last) = &mut report.arrival_per_change[i];
                (*first, *last) = ((*first).min(arrived), (*last).max(arrived));
            }
        }
    }
    let counts = |h: &Histogram<u64>| {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    };
    report.histogram = counts(&hist);
    report.arrival_histogram = counts(&arrival);
    out.write_all(format!("{}\n", serde_json::to_string(&report)?).as_bytes())
        .await?;
    out.flush().await?;
    Ok(())
}
