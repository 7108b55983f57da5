//! One `loadtest agents` worker process: its share of the agents (and
//! viewers), connected from its loopback addresses, and the coordinator's
//! commands on stdin:
//!
//! - (it connects, then prints) `READY FAILED`: every agent has its
//!   snapshot, or failed;
//! - `GO`: the changes start (their deliveries are counted); it answers
//!   `STARTED`;
//! - `STOP`: the changes' window is over;
//! - `SETTLE RV MS`: apply nothing past RV, and end each agent once its
//!   position reached RV, or after MS; then the report, one JSON line.
//!
//! The end of stdin (the coordinator gone) ends every agent.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Semaphore, oneshot, watch};

use super::agent::{Agent, AgentReport, Phase, Shared, Spec};
use super::marks::Marks;
use super::upstream::node_name;
use crate::target::{Transport, bearer_file};
use crate::worker::{WorkerReport, local_address};

#[derive(Serialize, Deserialize)]
pub struct Config {
    pub base: String,
    pub transport: Transport,
    pub watch_list: bool,
    pub ca_pem: Option<String>,
    pub bearer_file: Option<std::path::PathBuf>,
    /// This worker's agents: those of nodes `first_agent..`, `agents` of them.
    pub first_agent: usize,
    pub agents: usize,
    /// Its viewers of every pod: run-wide `first_viewer..`, `viewers` of them.
    pub first_viewer: usize,
    pub viewers: usize,
    /// Agents in the run (a viewer's credential is line agents + its index).
    pub all_agents: usize,
    /// Marker pods the changes are spread over.
    pub markers: usize,
    pub changes: usize,
    pub epoch: u64,
    pub first_address: u8,
    pub addresses: u8,
}

/// A worker's report: the deliveries as `loadtest run`'s workers report
/// them, and each agent's.
#[derive(Serialize, Deserialize)]
pub struct Report {
    pub deliveries: WorkerReport,
    pub agents: Vec<AgentReport>,
}

pub async fn worker(cfg: Config) -> anyhow::Result<()> {
    let ca = cfg.ca_pem.as_deref();
    let lists = (0..cfg.addresses.max(1))
        .map(|a| {
            crate::subscriber::client_for(
                local_address(a as usize, cfg.first_address, cfg.addresses),
                ca,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let shared = Arc::new(Shared {
        base: cfg.base.trim_end_matches('/').to_string(),
        transport: cfg.transport,
        watch_list: cfg.watch_list,
        ca_pem: cfg.ca_pem.clone(),
        credentials: match &cfg.bearer_file {
            Some(path) => bearer_file(path)?,
            None => Vec::new(),
        },
        lists,
        // At most 256 connections and snapshots in flight, as `run`'s workers.
        connecting: Semaphore::new(256),
        epoch: cfg.epoch,
    });
    let (phase_tx, phase) = watch::channel(Phase::Connecting);
    let mut tasks = Vec::new();
    let mut readies = Vec::new();
    let specs = (0..cfg.agents)
        .map(|k| (cfg.first_agent + k, Some(node_name(cfg.first_agent + k))))
        .chain((0..cfg.viewers).map(|v| (cfg.all_agents + cfg.first_viewer + v, None)));
    for (i, (index, node)) in specs.enumerate() {
        let marks = match node {
            // Agent k gets the changes SEQ ≡ k (mod markers).
            Some(_) => Marks::new(cfg.changes, cfg.markers, index),
            None => Marks::new(cfg.changes, 1, 0),
        };
        let spec = Spec {
            index,
            node,
            local: local_address(i, cfg.first_address, cfg.addresses),
        };
        let (ready_tx, ready) = oneshot::channel();
        tasks.push(tokio::spawn(
            Agent::new(spec, shared.clone(), marks).run(phase.clone(), ready_tx),
        ));
        readies.push(ready);
    }
    let mut failed = 0u64;
    for ready in readies {
        failed += u64::from(!ready.await.unwrap_or(false));
    }
    let mut out = tokio::io::stdout();
    say(&mut out, &format!("READY {failed}")).await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    // Bounded by the coordinator's commands (the last is SETTLE) and the
    // end of stdin.
    loop {
        let Some(line) = stdin.next_line().await? else {
            let _ = phase_tx.send(Phase::Abort);
            break;
        };
        let mut words = line.split_whitespace();
        match words.next() {
            Some("GO") => {
                let _ = phase_tx.send(Phase::Counting);
                say(&mut out, "STARTED").await?;
            }
            Some("STOP") => {
                let _ = phase_tx.send(Phase::Quiet);
            }
            Some("SETTLE") => {
                let at: u64 = words.next().context("SETTLE RV")?.parse()?;
                let ms: u64 = words.next().context("SETTLE MS")?.parse()?;
                let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
                let _ = phase_tx.send(Phase::Settle { at, deadline });
                break;
            }
            _ => anyhow::bail!("worker: {line:?}"),
        }
    }
    let mut agents = Vec::with_capacity(tasks.len());
    for task in tasks {
        agents.push(task.await?.finish());
    }
    let report = report(agents, cfg.changes, failed)?;
    say(&mut out, &serde_json::to_string(&report)?).await?;
    Ok(())
}

async fn say(out: &mut tokio::io::Stdout, line: &str) -> anyhow::Result<()> {
    out.write_all(format!("{line}\n").as_bytes()).await?;
    out.flush().await?;
    Ok(())
}

/// The agents' marks as a [`WorkerReport`] (histograms, per change), and
/// their reports.
fn report(
    agents: Vec<(AgentReport, Marks)>,
    changes: usize,
    failed: u64,
) -> anyhow::Result<Report> {
    let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000, 2)?;
    let mut arrival = latency.clone();
    let mut deliveries = WorkerReport {
        per_change: vec![(0, 0); changes],
        arrival_per_change: vec![(u32::MAX, 0); changes],
        failed_connections: failed,
        ..WorkerReport::default()
    };
    let mut reports = Vec::with_capacity(agents.len());
    for (agent, marks) in agents {
        deliveries.duplicates += marks.duplicates;
        deliveries.resets += agent.resets;
        deliveries.leaked += agent.leaked;
        if agent.snapshot_ms.is_some() {
            deliveries.expected += marks.expected();
        }
        for (slot, l) in marks.latency_us.iter().enumerate() {
            if *l == u32::MAX {
                continue;
            }
            let seq = marks.seq(slot);
            latency.saturating_record(u64::from(*l).max(1));
            let arrived = marks.arrival_us[slot];
            arrival.saturating_record(u64::from(arrived).max(1));
            if let Some(change) = deliveries.per_change.get_mut(seq) {
                change.0 += 1;
                change.1 = change.1.max(*l);
            }
            if let Some((first, last)) = deliveries.arrival_per_change.get_mut(seq) {
                (*first, *last) = ((*first).min(arrived), (*last).max(arrived));
            }
        }
        reports.push(agent);
    }
    let counts = |h: &Histogram<u64>| {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    };
    deliveries.histogram = counts(&latency);
    deliveries.arrival_histogram = counts(&arrival);
    Ok(Report {
        deliveries,
        agents: reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_add_up_per_change_over_agents() {
        let now = crate::subscriber::now_nanos();
        let mark = |seq: usize| format!(r#""loadtest/sent":"{seq}:{now}""#);
        // 4 changes over 2 markers: agent 0 gets 0 and 2, agent 1 gets 1
        // and 3 (it misses 3); a viewer gets all four.
        let mut a0 = Marks::new(4, 2, 0);
        let mut a1 = Marks::new(4, 2, 1);
        let mut viewer = Marks::new(4, 1, 0);
        for seq in [0, 2] {
            a0.record(mark(seq).as_bytes(), None);
        }
        a1.record(mark(1).as_bytes(), None);
        for seq in 0..4 {
            viewer.record(mark(seq).as_bytes(), None);
        }
        let agent = |snapshot: bool| AgentReport {
            snapshot_ms: snapshot.then_some(1),
            ..AgentReport::default()
        };
        let r = report(
            vec![(agent(true), a0), (agent(true), a1), (agent(true), viewer)],
            4,
            0,
        )
        .unwrap();
        let d = &r.deliveries;
        assert_eq!(d.expected, 8);
        assert_eq!(
            d.per_change.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [2, 2, 2, 1]
        );
        assert_eq!(d.histogram.iter().map(|(_, c)| c).sum::<u64>(), 7);
        // An agent that never had its snapshot is a failed connection, not
        // a loss.
        let r = report(vec![(agent(false), Marks::new(4, 2, 0))], 4, 1).unwrap();
        assert_eq!(
            (r.deliveries.expected, r.deliveries.failed_connections),
            (0, 1)
        );
    }
}
