//! `loadtest agents`: node agents, one per node, each watching its node's
//! pods (`fieldSelector=spec.nodeName=node-K`), as log shippers, node
//! exporters, CNI and CSI agents and kubelets do on a big cluster; over
//! SSE, WebSocket or the Kubernetes watch face (a watch list, or LIST then
//! WATCH), against kubefan or a real kube-apiserver.
//!
//! The run: one marker pod per watched node (`loadtest/loadtest-agent-node-K`,
//! which the simulator's churn never touches); the agents connect and fold
//! their snapshots; the markers change at an open-loop rate R for D
//! seconds, spread over the nodes (change SEQ to node SEQ mod M), each
//! change marked with its send time; then the changes stop, the
//! simulator's churn is paused (`POST /debug/churn?rate=0`, where it has
//! one), every pod is listed (paged), and every agent, frozen at that
//! list's resourceVersion, reads until its position reaches it; its folded
//! state is compared with the listed pods of its node.
//!
//! [`frame`] parses a stream's messages, [`fold`] folds them, [`marks`] times an agent's marker
//! changes, [`agent`] is one agent's connection, [`stream`] what it asks for and how its stream is read, [`worker`] a worker
//! process's agents, [`upstream`] the cluster and gateway requests, and
//! [`report`] the report.

pub mod agent;
pub mod fold;
pub mod frame;
pub mod marks;
mod report;
pub mod stream;
pub mod upstream;
pub mod worker;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::report::{proc_cpu_ms, stats_of, status_kib};
use crate::subscriber::now_nanos;
use crate::target::Transport;
use upstream::{Cluster, node_name};

#[derive(clap::Args)]
pub struct AgentsArgs {
    /// `kubefan`, or `kube-apiserver` (the watch face only; changes are
    /// made through it, and no simulator is asked for anything).
    #[arg(long, default_value = "kubefan")]
    pub server: String,
    /// The server the agents watch.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub base: String,
    /// Where the marker pods are made and changed, and every pod is listed
    /// at the end: the simulated API server (kubefan's upstream); for
    /// `--server kube-apiserver`, `--base` by default.
    #[arg(long)]
    pub sim: Option<String>,
    /// The server's process ids (comma-separated), for memory and CPU.
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// `sse`, `ws` or `watch`.
    #[arg(long, value_enum, default_value = "sse")]
    pub transport: Transport,
    /// `watch`: a watch list (`sendInitialEvents=true`, ending at the
    /// bookmark annotated `k8s.io/initial-events-end`), as client-go's
    /// WatchList informer; `false`: LIST (paged, 500), then WATCH from its
    /// resourceVersion.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_list: bool,
    /// Agents: agent K watches node `node-K` (no more than the nodes).
    #[arg(long, default_value_t = 100)]
    pub agents: usize,
    /// Marker pods the changes go round (node-0 .. node-(M-1)), at least
    /// one per agent; default one per agent. A point with fewer agents
    /// given the markers of the largest keeps the upstream's writes the
    /// same: at 0 agents, 200 patches a second to one pod are mostly 409
    /// Conflict on kube-apiserver (its retries on one object run out).
    #[arg(long)]
    pub markers: Option<usize>,
    /// Viewers of every pod beside the agents (each gets every change).
    #[arg(long, default_value_t = 0)]
    pub viewers: usize,
    /// Marker changes per second (open loop).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 30)]
    pub duration_secs: u64,
    /// How long the agents may take to reach the final resourceVersion
    /// (kubefan tells an idle stream its position on keep-alive ticks,
    /// every 15 s by default; kube-apiserver sends its bookmarks about
    /// once a minute: give it 90).
    #[arg(long, default_value_t = 60)]
    pub settle_secs: u64,
    /// Force an upstream relist this far into the changes (the
    /// simulator's faults: its watches stall, history is compacted past
    /// the gateway's position, its watches end, and its next watch gets
    /// 410 Expired).
    #[arg(long)]
    pub relist_at_secs: Option<f64>,
    /// Worker processes (each under the 20,000 open files a process may hold).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Loopback source addresses per worker (127.0.0.2..).
    #[arg(long, default_value_t = 8)]
    pub addresses: u8,
    /// PEM CA to trust for an https:// --base (and --sim).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// Bearer tokens, one per line, shared out to the agents (agent K
    /// takes line K mod their number).
    #[arg(long, value_name = "FILE")]
    pub bearer_file: Option<std::path::PathBuf>,
    /// The token changes are made with (default: the --bearer-file's first).
    #[arg(long, value_name = "FILE")]
    pub sim_token_file: Option<std::path::PathBuf>,
    /// The gateway's Prometheus counters, read around the run (default
    /// for kubefan: BASE/metrics).
    #[arg(long)]
    pub metrics: Option<String>,
    /// Write the JSON report here too.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// The server's (summed) RSS and CPU, as [`stats_of`] reads them.
type Sample = Option<(u64, u64)>;

/// The server's memory and CPU through the run.
pub(crate) struct Samples {
    /// Before the agents connect (the markers made).
    pub before: Sample,
    /// Once every snapshot is in.
    pub connected: Sample,
    /// As the changes start, three quarters into them, and after the
    /// last one's deliveries.
    pub start: Sample,
    pub streaming: Sample,
    pub end: Sample,
    /// Once every agent settled.
    pub after: Sample,
}

/// A forced relist (`--relist-at-secs`).
pub(crate) struct Relist {
    /// The change after which it was forced.
    pub at: usize,
    /// The changes made while the fault held the watches stalled (from its
    /// first request to its last answer): only the relist's list can bring
    /// them, so they are late by the list's length whatever the gateway
    /// does.
    pub stalled: std::ops::Range<usize>,
    pub result: Result<(), String>,
}

/// What the coordinator saw, beside the workers' reports.
pub(crate) struct Run {
    pub changes: usize,
    pub markers: usize,
    pub publish_errors: usize,
    pub failed: u64,
    pub snapshots_all_ms: u64,
    pub samples: Samples,
    pub vm_hwm_kib: Option<u64>,
    pub rv_window: Option<(u64, u64)>,
    pub metrics: [Option<HashMap<String, f64>>; 4],
    pub churn_pause: Option<u16>,
    pub settle_at: u64,
    pub settle_ms: u64,
    pub relist: Option<Relist>,
    /// The upstream's own latency per change, in µs (`Cluster::probe`).
    pub upstream_us: Vec<u32>,
    pub generator_cpu_ms: Option<u64>,
    pub window_ms: u64,
    pub pods: upstream::ByNode,
    pub list_ms: u64,
}

fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

pub async fn agents(args: AgentsArgs) -> anyhow::Result<()> {
    let real = args.server == "kube-apiserver";
    if real && args.transport != Transport::Watch {
        bail!("kube-apiserver has the watch face only: --transport watch");
    }
    if !matches!(
        args.transport,
        Transport::Sse | Transport::Ws | Transport::Watch
    ) {
        bail!("--transport sse, ws or watch");
    }
    if args.rate <= 0.0 || !args.rate.is_finite() {
        bail!("--rate must be positive");
    }
    let sim = match (&args.sim, real) {
        (Some(sim), _) => sim.clone(),
        (None, true) => args.base.clone(),
        (None, false) => "http://127.0.0.1:8001".into(),
    };
    let ca_pem = match &args.tls_ca {
        Some(path) => Some(
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        ),
        None => None,
    };
    let token = match (&args.sim_token_file, &args.bearer_file) {
        (Some(path), _) | (None, Some(path)) => Some(read_token(path)?),
        (None, None) => None,
    };
    let cluster = Cluster::new(&sim, ca_pem.as_deref(), token)?;
    let metrics_url = args
        .metrics
        .clone()
        .or_else(|| (!real).then(|| format!("{}/metrics", args.base.trim_end_matches('/'))));
    let scrape = || async {
        match &metrics_url {
            Some(url) => upstream::scrape(&cluster.http, url).await,
            None => None,
        }
    };
    let m0 = scrape().await;

    // One marker per watched node (one on node-0 with no agent), or as
    // many as `--markers` asks.
    let markers = args.markers.unwrap_or(0).max(args.agents).max(1);
    let nodes: Vec<String> = (0..markers).map(node_name).collect();
    cluster
        .create_markers(&nodes)
        .await
        .context("creating the marker pods")?;
    let before = stats_of(&args.pid);

    let changes = (args.rate * args.duration_secs as f64).round() as usize;
    let workers = args.workers.max(1).min((args.agents + args.viewers).max(1));
    let share = |total: usize, w: usize| total / workers + usize::from(w < total % workers);
    let first = |total: usize, w: usize| (0..w).map(|v| share(total, v)).sum::<usize>();
    let epoch = now_nanos();
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for w in 0..workers {
        let cfg = worker::Config {
            base: args.base.clone(),
            transport: args.transport,
            watch_list: args.watch_list,
            ca_pem: ca_pem.clone(),
            bearer_file: args
                .bearer_file
                .as_ref()
                .map(|p| p.canonicalize())
                .transpose()?,
            first_agent: first(args.agents, w),
            agents: share(args.agents, w),
            first_viewer: first(args.viewers, w),
            viewers: share(args.viewers, w),
            all_agents: args.agents,
            markers,
            changes,
            epoch,
            first_address: 2 + (w as u8).wrapping_mul(args.addresses) % 200,
            addresses: args.addresses,
        };
        let mut child = tokio::process::Command::new(&exe)
            .arg("agents-worker")
            .arg(serde_json::to_string(&cfg)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
        children.push((child, stdout));
    }
    let mut failed = 0u64;
    for (_, stdout) in children.iter_mut() {
        let line = tokio::time::timeout(Duration::from_secs(900), stdout.next_line())
            .await
            .context("the agents connect in time")??
            .context("a worker exited")?;
        failed += line
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
    }
    let snapshots_all_ms = started.elapsed().as_millis() as u64;
    let connected = stats_of(&args.pid);

    // The changes' window.
    for (child, _) in children.iter_mut() {
        tell(child, "GO").await?;
    }
    for (_, stdout) in children.iter_mut() {
        let line = tokio::time::timeout(Duration::from_secs(60), stdout.next_line()).await??;
        if line.as_deref() != Some("STARTED") {
            bail!("a worker said {line:?} instead of STARTED");
        }
    }
    let worker_pids: Vec<u32> = children.iter().filter_map(|(c, _)| c.id()).collect();
    let generator_cpu = || {
        worker_pids
            .iter()
            .chain([&std::process::id()])
            .map(|pid| proc_cpu_ms(*pid))
            .sum::<Option<u64>>()
    };
    let generator_start = generator_cpu();
    let rv_start = cluster.resource_version().await.ok();
    let m1 = scrape().await;
    let start = stats_of(&args.pid);
    let window = Instant::now();
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let relist_seq = args
        .relist_at_secs
        .map(|s| ((s * args.rate).round() as usize).min(changes.saturating_sub(1)));
    let mut relist = None;
    // The upstream's own latency, watched beside the gateway's streams
    // (until a while after the last change: see below).
    let probe_until = tokio::time::Instant::now()
        + Duration::from_secs_f64(changes as f64 / args.rate)
        + Duration::from_secs(30);
    let upstream_seen = std::sync::Arc::new(std::sync::Mutex::new(vec![u32::MAX; changes]));
    let probe = rv_start.map(|rv| {
        let (cluster, seen) = (cluster.clone(), upstream_seen.clone());
        tokio::spawn(async move { cluster.probe(rv, &seen, probe_until).await })
    });
    let mut sends = Vec::with_capacity(changes);
    let mut sent_at = Vec::with_capacity(changes);
    let mut streaming = None;
    for seq in 0..changes {
        interval.tick().await;
        sent_at.push(Instant::now());
        let marker = cluster.clone();
        let node = node_name(seq % markers);
        sends.push(tokio::spawn(async move { marker.mark(&node, seq).await }));
        if seq == changes * 3 / 4 {
            streaming = stats_of(&args.pid);
        }
        if Some(seq) == relist_seq {
            let cluster = cluster.clone();
            relist = Some((
                seq,
                tokio::spawn(async move {
                    let began = Instant::now();
                    let result = cluster.force_relist().await;
                    (began..Instant::now(), result)
                }),
            ));
        }
    }
    let mut publish_errors = 0;
    for s in sends {
        if !matches!(s.await, Ok(Ok(()))) {
            publish_errors += 1;
        }
    }
    let relist = match relist {
        Some((at, task)) => Some(match task.await {
            Ok((held, result)) => Relist {
                at,
                // `sent_at` is in order: the changes sent while it held.
                stalled: sent_at.partition_point(|t| *t < held.start)
                    ..sent_at.partition_point(|t| *t <= held.end),
                result: result.map_err(|e| format!("{e:#}")),
            },
            Err(e) => Relist {
                at,
                stalled: 0..0,
                result: Err(e.to_string()),
            },
        }),
        None => None,
    };
    // The last deliveries.
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Some(mut probe) = probe {
        // It ends once it saw every change; what it missed stays unseen.
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut probe).await;
        probe.abort();
    }
    let upstream_us = std::mem::take(&mut *upstream_seen.lock().unwrap());
    let end = stats_of(&args.pid);
    let rv_end = cluster.resource_version().await.ok();
    let m2 = scrape().await;
    let window_ms = window.elapsed().as_millis() as u64;
    let generator_end = generator_cpu();
    for (child, _) in children.iter_mut() {
        tell(child, "STOP").await?;
    }

    // The settle point: churn paused, every pod listed.
    let churn_pause = if real {
        None
    } else {
        cluster.set_churn(0.0).await.ok()
    };
    let listed = Instant::now();
    let (pods, settle_at) = cluster
        .pods_by_node(agent::PAGE)
        .await
        .context("listing every pod")?;
    let list_ms = listed.elapsed().as_millis() as u64;
    let settle_ms = args.settle_secs * 1000;
    for (child, _) in children.iter_mut() {
        tell(child, &format!("SETTLE {settle_at} {settle_ms}")).await?;
    }
    let mut reports = Vec::with_capacity(workers);
    for (mut child, mut stdout) in children {
        let line = tokio::time::timeout(
            Duration::from_millis(settle_ms + 120_000),
            stdout.next_line(),
        )
        .await
        .context("a worker's report in time")??
        .context("a worker's report")?;
        reports.push(serde_json::from_str::<worker::Report>(&line)?);
        let _ = child.wait().await;
    }
    let after = stats_of(&args.pid);
    let vm_hwm_kib = status_kib(&args.pid, "VmHWM");
    let m3 = scrape().await;
    let run = Run {
        changes,
        markers,
        publish_errors,
        failed,
        snapshots_all_ms,
        samples: Samples {
            before,
            connected,
            start,
            streaming,
            end,
            after,
        },
        vm_hwm_kib,
        rv_window: rv_start.zip(rv_end),
        metrics: [m0, m1, m2, m3],
        churn_pause,
        settle_at,
        settle_ms,
        relist,
        upstream_us,
        generator_cpu_ms: generator_start
            .zip(generator_end)
            .map(|(a, b)| b.saturating_sub(a)),
        window_ms,
        pods,
        list_ms,
    };
    let report = report::report(&args, &run, reports)?;
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text)?;
    }
    eprintln!("{}", report::summary(&report));
    Ok(())
}

async fn tell(child: &mut tokio::process::Child, line: &str) -> anyhow::Result<()> {
    let stdin = child.stdin.as_mut().context("worker stdin")?;
    stdin.write_all(format!("{line}\n").as_bytes()).await?;
    stdin.flush().await?;
    Ok(())
}
