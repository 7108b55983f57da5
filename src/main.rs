//! The `kubefan` command: `serve` (default), `demo`, `sim`.

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use kubefan::app::App;
use kubefan::config::GatewayArgs;
use kubefan::sim;

#[derive(Parser)]
#[command(
    name = "kubefan",
    version,
    about = "Kubernetes watch fan-out gateway",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Log format.
    #[arg(long, global = true, env = "KUBEFAN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a real cluster (the default command).
    Serve(ServeArgs),
    /// Serve a built-in simulated cluster with churning pods.
    Demo(DemoArgs),
    /// Run the simulated API server alone.
    Sim(sim::SimArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the
    /// in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    context: Option<String>,
    #[command(flatten)]
    gateway: GatewayArgs,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Simulated pods to keep alive.
    #[arg(long, default_value_t = 300)]
    pods: usize,
    /// Simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Pod changes per second (creates, relabels, phase changes, moves, deletes).
    #[arg(long, default_value_t = 20.0)]
    churn_rate: f64,
    #[command(flatten)]
    gateway: GatewayArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let shutdown = CancellationToken::new();
    tokio::spawn(forward_signals(shutdown.clone()));
    match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => serve(args, shutdown).await,
        Command::Demo(args) => demo(args, shutdown).await,
        Command::Sim(args) => sim::run(args, shutdown)
            .await
            .context("simulated API server failed"),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn forward_signals(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}

async fn serve(args: ServeArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not running in a cluster")?,
    };
    tracing::info!(cluster = %config.cluster_url, "using Kubernetes API server");
    let client = kube::Client::try_from(config)?;
    run_gateway(args.gateway, client, shutdown).await
}

async fn run_gateway(
    args: GatewayArgs,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let cfg = args.into_config();
    let app = App::build(cfg, client)
        .await
        .context("starting the gateway")?;
    shutdown.cancelled().await;
    app.stop().await;
    Ok(())
}

async fn demo(mut args: DemoArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let sim = sim::Sim::new(sim::SimConfig {
        bookmark_interval: Duration::from_secs(10),
        ..Default::default()
    });
    let churn = sim::ChurnConfig {
        rate: args.churn_rate,
        nodes: args.nodes,
        pods: args.pods,
        ..Default::default()
    };
    sim::seed_cluster(&sim, &churn);
    let server = sim
        .serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .context("starting the simulated API server")?;
    let churner = sim::spawn_churn(sim.clone(), churn, shutdown.clone());
    if args.gateway.resources.is_empty() {
        args.gateway.resources = vec!["pods".into(), "nodes".into()];
    }
    let client = kube::Client::try_from(server.client_config())?;
    let cfg = args.gateway.into_config();
    let app = App::build(cfg, client)
        .await
        .context("starting the gateway")?;
    let base = format!("http://{}", app.local_addr());
    println!(
        "kubefan demo: a simulated cluster with {} nodes and {} pods, churning",
        args.nodes, args.pods
    );
    println!("  simulated API server  {}", server.url());
    println!("  pods as SSE           curl -N {base}/stream/pods");
    println!("  one namespace         curl -N '{base}/stream/pods?namespace=web'");
    println!("  nodes                 curl -N {base}/stream/nodes");
    println!("  as a Kubernetes API   kubectl --server {base} get pods --all-namespaces --watch");
    println!("  readiness, metrics    {base}/readyz  {base}/metrics");
    println!("Ctrl-C to stop.");
    shutdown.cancelled().await;
    app.stop().await;
    let _ = churner.await;
    server.stop().await;
    Ok(())
}
