//! kubefan's load generator. See `loadtest/README.md` for scenarios and
//! `loadtest/RESULTS.md` for the figures. Every loop is bounded in count
//! and time, and every address is on loopback.

#![deny(unsafe_code)]

mod agents;
mod arrival;
mod floor;
mod http1;
mod mint;
mod publish;
mod report;
mod storm;
mod subscriber;
mod target;
mod worker;
mod ws;

use worker::{WorkerConfig, local_address, worker};

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use publish::{Publisher, publish, setup_kubefan};
use report::{Measured, Tally, proc_cpu_ms, proc_stats, stats_of};
use target::{Target, Transport};

#[derive(Parser)]
#[command(about = "Load generator for kubefan and nginx+nchan")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// N subscribers, R changes per second for D seconds; prints a JSON report.
    Run(Box<RunArgs>),
    /// N subscribers connecting at once; time until the last has its snapshot.
    Herd(HerdArgs),
    /// N node agents, agent K watching node `node-K`'s pods; marker
    /// changes at R per second, spread over the nodes; each agent's folded
    /// state checked against the upstream's at the end.
    Agents(Box<agents::AgentsArgs>),
    /// N subscribers holding their snapshots; when the gateway restarts,
    /// time until the last is consistent again (`run-storm.sh`).
    Storm(storm::StormArgs),
    /// The floor server: one write per delivery and nothing else, speaking
    /// the nchan subset the generator uses (`--server floor`).
    Floor {
        #[arg(long, default_value = "127.0.0.1:8092")]
        listen: std::net::SocketAddr,
        /// Also take subscribers over TLS here (the TLS floor), with
        /// `--tls-cert-file` and `--tls-key-file`.
        #[arg(long, requires_all = ["tls_cert_file", "tls_key_file"])]
        tls_listen: Option<std::net::SocketAddr>,
        #[arg(long)]
        tls_cert_file: Option<std::path::PathBuf>,
        #[arg(long)]
        tls_key_file: Option<std::path::PathBuf>,
    },
    /// Bearer tokens for kubefan's `--auth jwt`, one per line (for
    /// `run --bearer-file`), signed with the key kubefan verifies with.
    MintJwt(mint::MintJwtArgs),
    /// Internal: one worker process's share of subscribers.
    Worker { config: String },
    /// Internal: one worker process's share of `agents`.
    AgentsWorker { config: String },
}

#[derive(clap::Args)]
struct RunArgs {
    /// `kubefan`, `nchan`, or `floor` (`loadtest floor`, which speaks
    /// nchan's publish and subscribe).
    #[arg(long, default_value = "kubefan")]
    server: String,
    /// The server under test; several (comma-separated), e.g. the leaves
    /// of a tier, share the subscribers out (worker W subscribes to base
    /// W mod their number).
    #[arg(long, default_value = "http://127.0.0.1:8080", value_delimiter = ',')]
    base: Vec<String>,
    /// The floor and nchan: where publications go, if not the first base
    /// (the TLS floor takes them on its plain listener).
    #[arg(long)]
    publish_base: Option<String>,
    /// kubefan: the simulated API server changes are driven through;
    /// several (comma-separated), the clusters of a `--clusters` run:
    /// change SEQ goes to the SEQ mod N-th.
    #[arg(long, default_value = "http://127.0.0.1:8001", value_delimiter = ',')]
    sim: Vec<String>,
    /// kubefan, SSE or `/ws`: subscribe to one stream across these
    /// clusters (`/stream/pods?clusters=VALUE`, e.g. `c0,c1,c2`, or a
    /// subscribe message's `clusters`), each `--sim` one of them.
    #[arg(long)]
    clusters: Option<String>,
    /// A bearer token for the simulated API server (in RBAC mode, its
    /// admin's: `kubefan-sim-admin` in its `--kubeconfig-out` file).
    #[arg(long, value_name = "FILE")]
    sim_token_file: Option<std::path::PathBuf>,
    /// kubefan: spread the changes over this many namespaces,
    /// `loadtest-0` ... (change SEQ to a pod in namespace SEQ mod K), and
    /// subscribe to every namespace; a `--bearer-file` line `TOKEN NS,NS`
    /// says which of them its subscribers are to get (the rest count as
    /// leaked). 1: namespace `loadtest` alone, subscribed by name.
    #[arg(long, default_value_t = 1)]
    namespaces: usize,
    /// The server's process ids (comma-separated: the leaves), for memory
    /// and CPU figures, summed.
    #[arg(long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// A tier's root kubefan, whose memory and CPU are reported apart.
    #[arg(long)]
    root_pid: Option<u32>,
    #[arg(long, value_enum, default_value = "sse")]
    transport: Transport,
    /// Subscribers: SSE or watch streams, single-stream WebSockets, or
    /// with `--transport ws-mux` subscriptions (on N /
    /// `--ws-mux-subscriptions` sockets).
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// kubefan: spread the subscribers over this many distinct views
    /// (label selectors `loadtest-view!=vI`, which every pod matches:
    /// each view gets and encodes every change); 0: one view, no
    /// selector.
    #[arg(long, default_value_t = 0)]
    views: usize,
    /// `--transport ws-mux`: subscriptions per `/ws` socket.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    ws_mux_subscriptions: u64,
    /// Changes per second (open loop).
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    #[arg(long, default_value_t = 30)]
    duration_secs: u64,
    /// nchan message size in bytes (kubefan's events are whole pods, ~1 KB).
    #[arg(long, default_value_t = 1024)]
    payload: usize,
    /// Worker processes (each holds at most ~5,000 connections: the
    /// machine allows 20,000 open files per process).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Loopback source addresses to spread connections over (127.0.0.2..).
    #[arg(long, default_value_t = 8)]
    addresses: u8,
    /// Write the JSON report here too.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// PEM CA to trust when --base is https:// (kubefan's --tls-ca-file,
    /// or its certificate when self-signed).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// Subscribe over HTTP/2 (TLS, ALPN h2), this many streams per
    /// connection; 0: HTTP/1.1, one connection per subscriber.
    #[arg(long, default_value_t = 0)]
    h2_streams_per_connection: usize,
    /// `Cookie` header values, one per line, shared out to the subscribers
    /// (signed-in sessions: `kubefan session-cookies`).
    #[arg(long, value_name = "FILE", conflicts_with = "bearer_file")]
    cookie_file: Option<std::path::PathBuf>,
    /// Bearer tokens, one per line, shared out to the subscribers as
    /// `--cookie-file`'s lines are, each sent as `Authorization: Bearer
    /// TOKEN` (`--auth jwt`: `loadtest mint-jwt`).
    #[arg(long, value_name = "FILE")]
    bearer_file: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct HerdArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    #[arg(long, default_value_t = 100)]
    subscribers: usize,
    /// Gives up on a snapshot this long after the herd started (a
    /// 150,000-pod snapshot is hundreds of megabytes, a hundred of them
    /// tens of gigabytes).
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Floor {
        listen,
        tls_listen,
        tls_cert_file,
        tls_key_file,
    } = cli.command
    {
        let tls = match (tls_listen, tls_cert_file, tls_key_file) {
            (Some(listen), Some(cert), Some(key)) => Some(floor::TlsListen { listen, cert, key }),
            _ => None,
        };
        // One thread, as nginx's one worker: the floor of one core.
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(floor::run(listen, tls));
    }
    if let Command::AgentsWorker { config } = &cli.command {
        // One thread, as `worker` below, for the same reasons.
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?
            .block_on(agents::worker::worker(serde_json::from_str(config)?));
    }
    if let Command::Worker { config } = &cli.command {
        // One worker thread: the workers share one core (`run-points.sh`
        // pins the generator to core 1), where a second thread gains
        // nothing. The multi-thread scheduler all the same, for its LIFO
        // slot: an HTTP/2 stream's reader runs right after the connection
        // task that woke it, where the current-thread scheduler queues it
        // behind every other ready connection, and that queue is measured
        // as latency (it was, for reqwest's body readers before `http1.rs`:
        // `RESULTS.md`, stop 42).
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?
            .block_on(worker(serde_json::from_str(config)?));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Run(args) => rt.block_on(run(*args)),
        Command::Herd(args) => rt.block_on(herd(args)),
        Command::Agents(args) => rt.block_on(agents::agents(*args)),
        Command::Storm(args) => rt.block_on(storm::storm(args)),
        Command::MintJwt(args) => mint::mint_jwt(args),
        Command::Floor { .. } | Command::Worker { .. } | Command::AgentsWorker { .. } => {
            unreachable!("run above")
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let sim_token = match &args.sim_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --sim-token-file {}", path.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    if args.server == "kubefan" {
        for sim in &args.sim {
            setup_kubefan(&http, sim, sim_token.as_deref(), args.namespaces).await?;
        }
        if args.clusters.is_some() && !matches!(args.transport, Transport::Sse | Transport::WsMux) {
            bail!("--clusters is for --transport sse or wsmux");
        }
    } else if args.namespaces > 1 || args.views > 0 {
        bail!("--namespaces and --views are for kubefan");
    }
    let before = stats_of(&args.pid);
    let root_before = args.root_pid.and_then(proc_stats);
    let ca_pem = match &args.tls_ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --tls-ca {}", path.display()))?,
        ),
        None => None,
    };
    if args.h2_streams_per_connection > 0 && ca_pem.is_none() {
        bail!("--h2-streams-per-connection needs TLS: an https:// --base and --tls-ca");
    }
    let target = Target {
        server: args.server.clone(),
        base: args.base[0].clone(),
        transport: args.transport,
        path: None,
        ca_pem,
        h2_streams: args.h2_streams_per_connection,
        cookie_file: args
            .cookie_file
            .as_ref()
            .map(|p| p.canonicalize())
            .transpose()?,
        bearer_file: args
            .bearer_file
            .as_ref()
            .map(|p| p.canonicalize())
            .transpose()?,
        first: 0,
        namespaces: args.namespaces,
        ws_mux: args.ws_mux_subscriptions as usize,
        views: args.views,
        clusters: args.clusters.clone(),
    };
    let auth = match (&args.cookie_file, &args.bearer_file) {
        (Some(_), _) => Some("cookie"),
        (_, Some(_)) => Some("bearer"),
        _ => None,
    };
    if let Some(kind) = auth {
        anyhow::ensure!(
            !target::credentials(&target)?.is_empty(),
            "the --{kind}-file has no line"
        );
    }
    let workers = args.workers.max(1);
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    let connect_started = Instant::now();
    for w in 0..workers {
        let share = args.subscribers / workers + usize::from(w < args.subscribers % workers);
        let first = (0..w)
            .map(|v| args.subscribers / workers + usize::from(v < args.subscribers % workers))
            .sum();
        let cfg = WorkerConfig {
            target: Target {
                base: args.base[w % args.base.len()].clone(),
                first,
                ..target.clone()
            },
            subscribers: share,
            first_address: 2 + (w as u8 * args.addresses) % 200,
            addresses: args.addresses,
        };
        let mut child = tokio::process::Command::new(&exe)
            .arg("worker")
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
        let line = tokio::time::timeout(Duration::from_secs(300), stdout.next_line())
            .await
            .context("workers connect in time")??
            .context("worker exited")?;
        failed += line
            .split_whitespace()
            .nth(2)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
    }
    let connect_ms = connect_started.elapsed().as_millis();
    let connected = stats_of(&args.pid);

    let changes = (args.rate * args.duration_secs as f64).round() as usize;
    let drain = Duration::from_secs(10);
    let deadline_ms = args.duration_secs * 1000 + drain.as_millis() as u64;
    for (child, _) in children.iter_mut() {
        let stdin = child.stdin.as_mut().context("worker stdin")?;
        stdin
            .write_all(format!("GO {changes} {deadline_ms}\n").as_bytes())
            .await?;
        stdin.flush().await?;
    }
    // Every worker's readers are running before the first change.
    for (_, stdout) in children.iter_mut() {
        let line = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
            .await
            .context("workers start reading in time")??;
        if line.as_deref() != Some("STARTED") {
            bail!("worker said {line:?} instead of STARTED");
        }
    }
    let cpu_start = stats_of(&args.pid);
    let root_start = args.root_pid.and_then(proc_stats);
    // The generator's own CPU (its workers and this process, which
    // publishes): a generator whose core is busy all the time queues
    // deliveries itself, and its latencies are not only the server's.
    let worker_pids: Vec<u32> = children.iter().filter_map(|(c, _)| c.id()).collect();
    let generator_start = worker_pids
        .iter()
        .chain([&std::process::id()])
        .map(|pid| proc_cpu_ms(*pid))
        .sum::<Option<u64>>();
    let streaming_started = Instant::now();
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let publisher = Publisher {
        http: http.clone(),
        server: args.server.clone(),
        base: args
            .publish_base
            .clone()
            .unwrap_or_else(|| args.base[0].clone()),
        sim: args.sim.clone(),
        sim_token,
        namespaces: args.namespaces,
        payload: args.payload,
    };
    let mut sends = Vec::with_capacity(changes);
    // Memory while streaming, three quarters into the run: what the
    // subscribers hold, not what their connection burst left behind (a
    // server may keep freed memory for a while; kubefan gives it back every
    // 10 s, see src/heap.rs).
    let mut streaming = None;
    for seq in 0..changes {
        interval.tick().await;
        sends.push(tokio::spawn(publish(publisher.clone(), seq)));
        if seq == changes * 3 / 4 {
            streaming = stats_of(&args.pid);
        }
    }
    let mut publish_errors = 0;
    for s in sends {
        if !matches!(s.await, Ok(Ok(()))) {
            publish_errors += 1;
        }
    }
    let mut tally = Tally::new(changes)?;
    let mut generator_end = proc_cpu_ms(std::process::id());
    for (mut child, mut stdout) in children {
        let line = tokio::time::timeout(
            Duration::from_secs(deadline_ms / 1000 + 60),
            stdout.next_line(),
        )
        .await
        .context("worker report in time")??
        .context("worker report")?;
        tally.add(serde_json::from_str(&line)?)?;
        // Its CPU once it has reported, before it exits.
        let worker_cpu = child.id().and_then(proc_cpu_ms);
        generator_end = generator_end.zip(worker_cpu).map(|(sum, w)| sum + w);
        let _ = child.wait().await;
    }
    let measured = Measured {
        tally,
        auth,
        changes,
        failed_connections: failed,
        publish_errors,
        connect_ms,
        before,
        connected,
        streaming,
        start: cpu_start,
        end: stats_of(&args.pid),
        root: [root_before, root_start, args.root_pid.and_then(proc_stats)],
        generator_cpu_ms: generator_start
            .zip(generator_end)
            .map(|(a, b)| b.saturating_sub(a)),
        streaming_ms: streaming_started.elapsed().as_millis() as u64,
    };
    let report = measured.report(&args);
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    if let Some(out) = &args.out {
        std::fs::write(out, &text)?;
    }
    eprintln!("{}", report::summary(&report));
    Ok(())
}

async fn herd(args: HerdArgs) -> anyhow::Result<()> {
    // A raw socket per subscriber, read into one buffer and searched for
    // the snapshot's end, nothing parsed: reqwest's chunked decoding of
    // 100 × 20 MB took the generator's whole core for as long as the
    // herd lasted (client CPU = wall time), so the figure was the
    // client's. This client costs a fraction of the server's CPU.
    let host = args
        .base
        .strip_prefix("http://")
        .context("--base is http://HOST:PORT")?
        .trim_end_matches('/')
        .to_string();
    let addr: std::net::SocketAddr = host
        .parse()
        .context("--base names an IP address and port")?;
    let started = Instant::now();
    let mut all = FuturesUnordered::new();
    for i in 0..args.subscribers {
        let host = host.clone();
        let local = local_address(i, 2, 8);
        all.push(async move {
            use tokio::io::AsyncReadExt;
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind((local, 0).into())?;
            let mut stream = socket.connect(addr).await?;
            stream
                .write_all(format!("GET /stream/pods HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .await?;
            let mut buf = vec![0u8; 256 << 10];
            let mut tail: Vec<u8> = Vec::new();
            let marker = subscriber::SNAPSHOT_END;
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    bail!("the stream ended before its snapshot");
                }
                tail.extend_from_slice(&buf[..n.min(marker.len())]);
                if memchr::memmem::find(&tail, marker).is_some()
                    || memchr::memmem::find(&buf[..n], marker).is_some()
                {
                    break;
                }
                tail.clear();
                tail.extend_from_slice(&buf[n.saturating_sub(marker.len())..n]);
            }
            anyhow::Ok(started.elapsed())
        });
    }
    let mut times = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    while let Some(r) = tokio::time::timeout_at(deadline, all.next())
        .await
        .context("the herd's snapshots in time")?
    {
        times.push(r?);
    }
    times.sort();
    println!(
        "{}",
        serde_json::json!({"subscribers": args.subscribers,
            "first_complete_ms": times.first().map(|t| t.as_millis()),
            "last_complete_ms": times.last().map(|t| t.as_millis())})
    );
    Ok(())
}
