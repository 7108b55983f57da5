//! `kubefan demo`: the gateway against simulated clusters of its own,
//! churning.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use kubefan::app::{App, Upstream};
use kubefan::config::GatewayArgs;
use kubefan_sim as sim;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Simulated pods to keep alive.
    #[arg(long, default_value_t = 300)]
    pods: usize,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Pod changes per second (creates, relabels, phase changes, moves, deletes).
    #[arg(long, default_value_t = 20.0)]
    churn_rate: f64,
    /// Simulated clusters: with more than one, each its own simulated API
    /// server, served by name (`dev`, `staging`, `prod`, then
    /// `cluster-4`...) as `--cluster` would; the dashboard shows them all.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    clusters: u8,
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
}

/// The name of the demo's `i`-th simulated cluster.
fn demo_cluster(i: usize) -> String {
    match ["dev", "staging", "prod"].get(i) {
        Some(name) => name.to_string(),
        None => format!("cluster-{}", i + 1),
    }
}

pub async fn demo(mut args: DemoArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let churn = sim::ChurnConfig {
        rate: args.churn_rate,
        nodes: args.nodes,
        pods: args.pods,
        ..Default::default()
    };
    let several = args.clusters > 1;
    let mut servers = Vec::new();
    let mut churners = Vec::new();
    let mut upstreams = Vec::new();
    for i in 0..usize::from(args.clusters) {
        let sim = sim::Sim::new(sim::SimConfig {
            bookmark_interval: Duration::from_secs(10),
            ..Default::default()
        });
        sim::seed_cluster(&sim, &churn);
        let server = sim
            .serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .context("starting the simulated API server")?;
        churners.push(sim::spawn_churn(
            sim.clone(),
            churn.clone(),
            shutdown.clone(),
        ));
        let client = kube::Client::try_from(server.client_config())?;
        upstreams.push(Upstream {
            name: several.then(|| demo_cluster(i)),
            client: client.clone(),
            reviews: client,
            // A new simulated cluster each run: its URL (a new port) keeps
            // the last run's positions from being used.
            url: Some(server.url()),
        });
        servers.push(server);
    }
    if args.gateway.resources.is_empty() {
        args.gateway.resources = vec!["pods".into(), "nodes".into()];
    }
    let cfg = args.gateway.into_config();
    cfg.validate()?;
    // The whole configuration is one long line: below the URLs a newcomer
    // is here for, so at debug level (`RUST_LOG=debug`), where `serve`
    // logs it at info.
    tracing::debug!(config = ?cfg, "effective configuration");
    let scheme = if cfg.tls.enabled() { "https" } else { "http" };
    let app = App::build_clusters(cfg, upstreams)
        .await
        .context("starting the gateway")?;
    // The URLs come last, after the start-up's log lines: once every
    // cluster's boot resources are in (half a second), or 10 s.
    let ready =
        futures::future::join_all(app.clusters().all().iter().map(|c| c.informers().ready()));
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), ready).await;
    let base = format!("{scheme}://{}", app.local_addr());
    // One write, so no log line lands inside it.
    let mut out = String::new();
    if several {
        let names: Vec<String> = (0..usize::from(args.clusters)).map(demo_cluster).collect();
        let first = &names[0];
        let _ = writeln!(
            out,
            "kubefan demo: {} simulated clusters ({}), each with {} nodes and {} pods, churning",
            args.clusters,
            names.join(", "),
            args.nodes,
            args.pods
        );
        let _ = writeln!(out, "  dashboard, every cluster  {base}/");
        let _ = writeln!(out, "  one cluster's dashboard   {base}/clusters/{first}/");
        let _ = writeln!(out, "  the clusters              curl {base}/clusters");
        let _ = writeln!(
            out,
            "  one cluster's pods        curl -N {base}/clusters/{first}/stream/pods"
        );
        let _ = writeln!(
            out,
            "  every cluster's pods      curl -N '{base}/stream/pods?clusters={}'",
            names.join(",")
        );
        let _ = writeln!(
            out,
            "  as a Kubernetes API       kubectl --server {base}/clusters/{first} get pods --all-namespaces --watch"
        );
    } else {
        let _ = writeln!(
            out,
            "kubefan demo: a simulated cluster with {} nodes and {} pods, churning",
            args.nodes, args.pods
        );
        let _ = writeln!(out, "  dashboard             {base}/");
        let _ = writeln!(out, "  simulated API server  {}", servers[0].url());
        let _ = writeln!(out, "  pods as SSE           curl -N {base}/stream/pods");
        let _ = writeln!(
            out,
            "  one namespace         curl -N '{base}/stream/pods?namespace=web'"
        );
        let _ = writeln!(out, "  nodes                 curl -N {base}/stream/nodes");
        let _ = writeln!(
            out,
            "  as a Kubernetes API   kubectl --server {base} get pods --all-namespaces --watch"
        );
    }
    let _ = writeln!(out, "  readiness, metrics    {base}/readyz  {base}/metrics");
    let _ = writeln!(out, "Ctrl-C to stop.");
    print!("{out}");
    shutdown.cancelled().await;
    app.stop().await;
    for churner in churners {
        let _ = churner.await;
    }
    for server in servers {
        server.stop().await;
    }
    Ok(())
}
