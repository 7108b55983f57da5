//! The `kubefan` command: `serve` (default), `demo`, `sim`, `kubeconfig`.
//!
//! Settings come from flags, `KUBEFAN_*` environment variables and a
//! `--config FILE`, in that order of precedence. The file is applied before
//! clap parses anything: each key (a long flag name) becomes its flag's
//! default value (`with_file_defaults`), so clap's own order (flag, then
//! variable, then default) does the rest. The environment is not touched.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use kubefan::app::{App, Upstream};
use kubefan::config::GatewayArgs;
use kubefan_sim as sim;

mod commands;

use commands::clusters::{ClusterSpec, cluster_upstreams, parse_cluster};
use commands::demo::{DemoArgs, demo};
use commands::kubeconfig::{KubeconfigArgs, write_kubeconfig};
use commands::session_cookies::{SessionCookiesArgs, session_cookies};

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
    /// Settings file (YAML or JSON): keys are long flag names
    /// (`keepalive-secs: 20`, `resources: [pods, nodes]`). Flags and
    /// KUBEFAN_* variables win over it; an unknown key is an error.
    #[arg(long, global = true, env = "KUBEFAN_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a real cluster (the default command).
    Serve(ServeArgs),
    /// Serve a built-in simulated cluster with churning pods.
    Demo(DemoArgs),
    /// Run the simulated API server alone.
    Sim(sim::SimArgs),
    /// Write a kubeconfig that points kubectl, client-go and client-node at
    /// this kubefan (its URL, its CA when TLS is on, a token when auth is
    /// on, or with --oidc a kubelogin sign-in).
    Kubeconfig(KubeconfigArgs),
    /// Seal session cookies with --session-secret-file, as signing in
    /// would, for load tests (`loadtest --cookie-file`): whoever holds the
    /// secret can make sessions anyway.
    #[command(hide = true)]
    SessionCookies(SessionCookiesArgs),
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
    #[arg(long, env = "KUBEFAN_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long, env = "KUBEFAN_CONTEXT")]
    context: Option<String>,
    /// With `--auth kubernetes`: the API server that reviews clients'
    /// tokens (TokenReview, SubjectAccessReview), when `--kubeconfig`
    /// points at another kubefan (a leaf of a tier, whose root is
    /// read-only): a kubeconfig file, or `in-cluster` for the pod's service
    /// account. Default: the upstream itself.
    #[arg(long, env = "KUBEFAN_AUTH_KUBECONFIG", value_name = "FILE|in-cluster")]
    auth_kubeconfig: Option<String>,
    /// A cluster to serve, as NAME=KUBECONFIG[#CONTEXT] or NAME=in-cluster
    /// (repeatable, or comma-separated; `clusters: [a=/k/a, b=/k/b#ctx]` in
    /// --config). Each is served under /clusters/NAME/ with its own
    /// watches, RBAC and readiness; --default-cluster also at the root
    /// paths. NAME is a DNS label. Without it: one cluster, from
    /// --kubeconfig and --context.
    #[arg(
        long = "cluster",
        alias = "clusters",
        env = "KUBEFAN_CLUSTERS",
        value_delimiter = ',',
        value_name = "NAME=KUBECONFIG[#CONTEXT]",
        value_parser = parse_cluster,
        conflicts_with_all = ["kubeconfig", "context", "auth_kubeconfig"]
    )]
    clusters: Vec<ClusterSpec>,
    #[command(flatten)]
    gateway: GatewayArgs,
}

fn main() -> anyhow::Result<()> {
    // Before any thread: glibc's arenas are made per thread.
    kubefan::heap::one_glibc_arena();
    let mut cmd = Cli::command();
    let mut from_file = Vec::new();
    if let Some(path) = config_path(std::env::args_os(), std::env::var_os("KUBEFAN_CONFIG")) {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading --config {}", path.display()))?;
        from_file = config_settings(&path, &text, &cmd)?;
        cmd = with_file_defaults(cmd, &from_file);
    }
    let matches = cmd.get_matches_from(globals_after_subcommand(std::env::args_os()));
    // Taken from the file: the settings no flag or variable overrode.
    let applied = from_file
        .iter()
        .filter(|s| took_default(&matches, &s.id))
        .map(|s| s.key.clone())
        .collect();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    match cli.command {
        Some(Command::Kubeconfig(args)) => return write_kubeconfig(args),
        Some(Command::SessionCookies(args)) => return session_cookies(args),
        _ => {}
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(run(cli, applied))
}

async fn run(cli: Cli, from_file: Vec<String>) -> anyhow::Result<()> {
    init_logging(cli.log_format);
    if let Some(path) = &cli.config {
        tracing::info!(file = %path.display(), keys = ?from_file, "settings read from --config (flags and KUBEFAN_* variables win)");
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(forward_signals(shutdown.clone()));
    match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => serve(args, shutdown).await,
        Command::Demo(args) => demo(args, shutdown).await,
        Command::Sim(args) => sim::run(args, shutdown)
            .await
            .context("simulated API server failed"),
        Command::Kubeconfig(args) => write_kubeconfig(args),
        Command::SessionCookies(args) => session_cookies(args),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: a file, a pipe and
    // `kubectl logs` get plain text (and `NO_COLOR` turns it off, as
    // no-color.org asks).
    use std::io::IsTerminal;
    let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
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
    if !args.clusters.is_empty() {
        let upstreams = cluster_upstreams(&args.clusters).await?;
        return run_gateway(args.gateway, upstreams, shutdown).await;
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            commands::clusters::known_context(&kc, args.context.as_deref(), path)
                .context("--context")?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not running in a cluster")?,
    };
    tracing::info!(cluster = %config.cluster_url, "using Kubernetes API server");
    let upstream = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)?;
    let reviews = match args.auth_kubeconfig.as_deref() {
        None => None,
        Some("in-cluster") => {
            Some(kube::Config::incluster().context("--auth-kubeconfig in-cluster: not in a pod")?)
        }
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading --auth-kubeconfig {path}"))?;
            Some(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
        }
    };
    let reviews = match reviews {
        Some(config) => {
            tracing::info!(cluster = %config.cluster_url, "reviewing clients' tokens with this API server");
            kube::Client::try_from(config)?
        }
        None => client.clone(),
    };
    let upstream = Upstream {
        name: None,
        client,
        reviews,
        url: Some(upstream),
    };
    run_gateway(args.gateway, vec![upstream], shutdown).await
}

async fn run_gateway(
    args: GatewayArgs,
    upstreams: Vec<Upstream>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let cfg = args.into_config();
    cfg.validate()?;
    log_config(&cfg);
    let app = App::build_clusters(cfg, upstreams)
        .await
        .context("starting the gateway")?;
    shutdown.cancelled().await;
    app.stop().await;
    Ok(())
}

/// States the configuration in effect, once, at start-up. `Config` holds
/// no secret values, only the paths of files that hold them.
pub(crate) fn log_config(cfg: &kubefan::config::Config) {
    tracing::info!(config = ?cfg, "effective configuration");
}

/// Flags every command takes (`--config`, `--log-format`) that come
/// before the subcommand are moved after it: clap's
/// `args_conflicts_with_subcommands` (which keeps `kubefan --listen X sim`
/// from silently dropping `--listen`) refuses them there too
/// (clap-rs/clap#1204 and its relatives), and `kubefan --config F serve`
/// is how a user writes it. Anything else before the subcommand stays
/// before it, for clap to refuse, naming it alone (not the globals too).
fn globals_after_subcommand(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    const GLOBALS: [&str; 2] = ["--config", "--log-format"];
    let args: Vec<OsString> = args.into_iter().collect();
    let cmd = Cli::command();
    let (mut globals, mut others) = (Vec::new(), Vec::new());
    let mut at = 1;
    while let Some(arg) = args.get(at) {
        let text = arg.to_str().unwrap_or_default();
        if text == "--" {
            break;
        }
        if GLOBALS.contains(&text) {
            globals.extend(args[at..].iter().take(2).cloned());
            at += 2;
            continue;
        }
        if GLOBALS.iter().any(|g| {
            text.strip_prefix(g)
                .is_some_and(|rest| rest.starts_with('='))
        }) {
            globals.push(arg.clone());
        } else if cmd
            .get_subcommands()
            .any(|c| c.get_name() == text || c.get_all_aliases().any(|a| a == text))
        {
            if globals.is_empty() {
                break;
            }
            let mut moved = vec![args[0].clone()];
            moved.append(&mut others);
            moved.push(arg.clone());
            moved.append(&mut globals);
            moved.extend_from_slice(&args[at + 1..]);
            return moved;
        } else {
            others.push(arg.clone());
        }
        at += 1;
    }
    args
}

/// The `--config` file named on the command line (`--config FILE` or
/// `--config=FILE`, before any `--`), else by `KUBEFAN_CONFIG`.
fn config_path(args: impl IntoIterator<Item = OsString>, env: Option<OsString>) -> Option<PathBuf> {
    let mut args = args.into_iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(path));
        }
    }
    env.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// One setting of a `--config` file.
#[derive(Debug, Clone, PartialEq)]
struct Setting {
    /// The key as the file spells it (a long flag name or alias).
    key: String,
    /// The flag's argument.
    id: clap::Id,
    /// The value as the flag would take it (a list comma-joined).
    value: String,
}

/// Reads a `--config` file (YAML, so JSON too): a map from long flag names
/// of `cmd` to values (a string, number or boolean, or a list for
/// comma-separated flags). An unknown key, or one for a flag that reads no
/// environment variable (the file ranks with the variables), is an error
/// naming it.
fn config_settings(path: &Path, text: &str, cmd: &clap::Command) -> anyhow::Result<Vec<Setting>> {
    let file = path.display();
    let doc: serde_json::Value =
        serde_norway::from_str(text).with_context(|| format!("--config {file}: not YAML"))?;
    let map = match doc {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Object(map) => map,
        _ => anyhow::bail!("--config {file}: expected a map of flag names to values"),
    };
    let mut settings = Vec::new();
    for (key, value) in map {
        let arg = cmd
            .get_arguments()
            .filter(|a| !matches!(a.get_id().as_str(), "config" | "help" | "version"))
            .find(|a| {
                a.get_long() == Some(key.as_str())
                    || a.get_all_aliases()
                        .is_some_and(|aliases| aliases.contains(&key.as_str()))
            })
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--config {file}: unknown key {key:?} (keys are the long flag names of `kubefan serve --help`)"
                )
            })?;
        if arg.get_env().is_none() {
            anyhow::bail!("--config {file}: {key:?} cannot be set from a file");
        }
        let scalar = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Number(n) => Ok(n.to_string()),
            serde_json::Value::Bool(b) => Ok(b.to_string()),
            _ => Err(anyhow::anyhow!(
                "--config {file}: {key:?} takes a string, number, boolean or a list of them"
            )),
        };
        let value = match &value {
            serde_json::Value::Array(items) => items
                .iter()
                .map(scalar)
                .collect::<anyhow::Result<Vec<_>>>()?
                .join(","),
            v => scalar(v)?,
        };
        settings.push(Setting {
            key,
            id: arg.get_id().clone(),
            value,
        });
    }
    Ok(settings)
}

/// `cmd` with each setting as its flag's default, in every subcommand the
/// flag appears in: a flag or a `KUBEFAN_*` variable still wins, as the
/// documented precedence says, and nothing touches the environment.
fn with_file_defaults(mut cmd: clap::Command, settings: &[Setting]) -> clap::Command {
    for setting in settings {
        if cmd.get_arguments().any(|a| a.get_id() == &setting.id) {
            let value = setting.value.clone();
            cmd = cmd.mut_arg(setting.id.clone(), |a| a.default_value(value));
        }
    }
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subcommands {
        cmd = cmd.mut_subcommand(name, |sub| with_file_defaults(sub, settings));
    }
    cmd
}

/// Whether `id` (in `matches` or the subcommand chosen) took its default.
fn took_default(matches: &clap::ArgMatches, id: &clap::Id) -> bool {
    let here = matches
        .try_get_raw(id.as_str())
        .ok()
        .flatten()
        .is_some()
        .then(|| matches.value_source(id.as_str()));
    match here {
        Some(source) => source == Some(clap::parser::ValueSource::DefaultValue),
        None => matches
            .subcommand()
            .is_some_and(|(_, sub)| took_default(sub, id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settings(text: &str) -> anyhow::Result<Vec<Setting>> {
        config_settings(Path::new("kubefan.yaml"), text, &Cli::command())
    }

    /// Parses `argv` with `file` as the config file's text.
    fn parse_with_file(file: &str, argv: &[&str]) -> (Cli, Vec<String>) {
        let settings = settings(file).unwrap();
        let cmd = with_file_defaults(Cli::command(), &settings);
        let matches = cmd.try_get_matches_from(argv).unwrap();
        let applied = settings
            .iter()
            .filter(|s| took_default(&matches, &s.id))
            .map(|s| s.key.clone())
            .collect();
        (Cli::from_arg_matches(&matches).unwrap(), applied)
    }

    /// Per-address limits are on unless set to 0, the same from the
    /// command line as for a `Config` built in code.
    #[test]
    fn per_address_limits_are_on_by_default() {
        let cli = Cli::try_parse_from(["kubefan"]).unwrap();
        let limits = cli.serve.gateway.into_config().limits;
        assert_eq!(limits.max_per_address, 4096);
        assert_eq!(limits.per_second_per_address, 1000);
        assert_eq!(limits.max_pending_handshakes_per_address, 256);
        let code = kubefan::config::LimitsConfig::default();
        assert_eq!(
            (
                code.max_per_address,
                code.per_second_per_address,
                code.max_pending_handshakes_per_address
            ),
            (4096, 1000, 256)
        );
        let cli = Cli::try_parse_from([
            "kubefan",
            "--max-connections-per-address",
            "0",
            "--connections-per-second-per-address",
            "0",
            "--max-pending-handshakes-per-address",
            "0",
        ])
        .unwrap();
        let limits = cli.serve.gateway.into_config().limits;
        assert_eq!(
            (
                limits.max_per_address,
                limits.per_second_per_address,
                limits.max_pending_handshakes_per_address
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn global_flags_may_come_before_the_subcommand_and_nothing_else_may() {
        let parse = |argv: &[&str]| {
            let argv = globals_after_subcommand(argv.iter().map(OsString::from));
            Cli::try_parse_from(argv)
        };
        let cli = parse(&[
            "kubefan",
            "--config",
            "/k.yaml",
            "--log-format=json",
            "sim",
            "--pods",
            "5",
        ])
        .unwrap();
        assert_eq!(cli.config.as_deref(), Some(Path::new("/k.yaml")));
        assert!(matches!(cli.log_format, LogFormat::Json));
        let Some(Command::Sim(sim)) = cli.command else {
            panic!("the sim command")
        };
        assert_eq!(sim.pods, 5);
        let cli = parse(&["kubefan", "--config=/k.yaml", "serve"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Serve(_))));
        assert_eq!(cli.config.as_deref(), Some(Path::new("/k.yaml")));
        // A serve flag before another command is still refused, not dropped.
        let err = parse(&[
            "kubefan",
            "--config",
            "/k.yaml",
            "--listen",
            "127.0.0.1:1",
            "sim",
        ])
        .err()
        .expect("refused");
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        // Naming the serve flag, not the global beside it.
        let text = err.to_string();
        assert!(text.contains("--listen"), "{text}");
        assert!(!text.contains("--config"), "{text}");
        // Without a subcommand, the line is as it was.
        let cli = parse(&["kubefan", "--config", "/k.yaml", "--listen", "127.0.0.1:1"]).unwrap();
        assert!(cli.command.is_none());
    }

    #[test]
    fn kubeconfig_oidc_refuses_a_token_file_and_its_options_need_it() {
        let parse = |argv: &[&str]| Cli::try_parse_from(argv).err().expect("refused");
        let err = parse(&["kubefan", "kubeconfig", "--oidc", "--token-file", "/t"]);
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let text = err.to_string();
        assert!(
            text.contains("'--oidc' cannot be used with '--token-file <FILE>'"),
            "{text}"
        );
        let err = parse(&["kubefan", "kubeconfig", "--oidc-extra-scope", "email"]);
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--oidc"), "{err}");
        // The contexts' namespace: a DNS label, as kube-apiserver's are.
        let err = parse(&["kubefan", "kubeconfig", "--namespace", "Team_A"]);
        assert!(
            err.to_string()
                .contains("namespace \"Team_A\" is not a DNS label"),
            "{err}"
        );
        let cli = Cli::try_parse_from(["kubefan", "kubeconfig", "-n", "team-a"]).unwrap();
        let Some(Command::Kubeconfig(args)) = cli.command else {
            panic!("the kubeconfig command")
        };
        assert_eq!(args.namespace.as_deref(), Some("team-a"));
        let cli = Cli::try_parse_from([
            "kubefan",
            "kubeconfig",
            "--oidc",
            "--oidc-extra-scope",
            "email,groups",
            "--oidc-issuer-url",
            "https://idp.example",
            "--oidc-client-id",
            "kubefan",
        ])
        .unwrap();
        let Some(Command::Kubeconfig(args)) = cli.command else {
            panic!("the kubeconfig command")
        };
        assert!(args.oidc);
        assert_eq!(args.oidc_extra_scope, ["email", "groups"]);
        assert_eq!(args.namespace, None);
        assert_eq!(args.gateway.into_config().auth.oidc.client_id, "kubefan");
    }

    #[test]
    fn clusters_come_from_flags_or_a_config_file_list_and_are_checked() {
        let file = "clusters: [east=/k/east.yaml, west=/k/west.yaml#ci]\ndefault-cluster: east\n";
        let (cli, _) = parse_with_file(file, &["kubefan"]);
        let east = ClusterSpec {
            name: "east".into(),
            kubeconfig: Some(PathBuf::from("/k/east.yaml")),
            context: None,
        };
        let west = ClusterSpec {
            name: "west".into(),
            kubeconfig: Some(PathBuf::from("/k/west.yaml")),
            context: Some("ci".into()),
        };
        assert_eq!(cli.serve.clusters, [east.clone(), west]);
        assert_eq!(
            cli.serve.gateway.into_config().clusters.default.as_deref(),
            Some("east")
        );
        // The same file gives `kubefan kubeconfig` a context per cluster.
        let (cli, _) = parse_with_file(file, &["kubefan", "kubeconfig"]);
        let Some(Command::Kubeconfig(args)) = cli.command else {
            panic!("kubeconfig")
        };
        assert_eq!(args.clusters, ["east", "west"]);

        let cli = Cli::try_parse_from([
            "kubefan",
            "--cluster",
            "east=/k/east.yaml",
            "--cluster",
            "here=in-cluster",
        ])
        .unwrap();
        assert_eq!(cli.serve.clusters[0], east);
        assert_eq!(cli.serve.clusters[1].kubeconfig, None);
        for (bad, why) in [
            ("East=/k", "not a DNS label"),
            ("east", "not NAME=KUBECONFIG"),
            ("east=/k#", "empty context"),
        ] {
            let err = Cli::try_parse_from(["kubefan", "--cluster", bad])
                .err()
                .expect(bad)
                .to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = Cli::try_parse_from(["kubefan", "--cluster", "a=/k", "--kubeconfig", "/k"])
            .err()
            .expect("conflict")
            .to_string();
        assert!(err.contains("cannot be used with"), "{err}");
    }

    #[test]
    fn a_config_file_sets_what_its_flags_would() {
        let file = "listen: 127.0.0.1:9090\nresources: [pods, deployments.apps]\nkeepalive-secs: 20\n\
             allow-secrets: true\nauth: jwt\nlog-format: json\nreveal-secret-data: true\n\
             kubeconfig: /etc/kube/config\njwt-secret-file: /s\n";
        let (cli, applied) = parse_with_file(file, &["kubefan"]);
        assert!(matches!(cli.log_format, LogFormat::Json));
        assert_eq!(
            cli.serve.kubeconfig.as_deref(),
            Some(Path::new("/etc/kube/config"))
        );
        let cfg = cli.serve.gateway.into_config();
        assert_eq!(cfg.listen.port(), 9090);
        assert_eq!(cfg.upstream.boot_resources, ["pods", "deployments.apps"]);
        assert_eq!(cfg.stream.keepalive, Duration::from_secs(20));
        assert!(cfg.upstream.allow_secrets);
        assert!(cfg.upstream.informer.ingest.reveal_secret_data);
        assert_eq!(applied.len(), 9, "{applied:?}");
        // The same file under a subcommand.
        let (cli, _) = parse_with_file(file, &["kubefan", "demo", "--pods", "5"]);
        let Some(Command::Demo(demo)) = cli.command else {
            panic!("demo")
        };
        assert_eq!(
            demo.gateway.into_config().stream.keepalive,
            Duration::from_secs(20)
        );
        // JSON is YAML too; an empty file sets nothing.
        assert_eq!(settings(r#"{"workers": 4}"#).unwrap().len(), 1);
        assert!(settings("").unwrap().is_empty());
    }

    #[test]
    fn a_flag_wins_over_the_config_file() {
        let (cli, applied) = parse_with_file(
            "keepalive-secs: 20\nworkers: 3\n",
            &["kubefan", "--keepalive-secs", "7"],
        );
        let cfg = cli.serve.gateway.into_config();
        assert_eq!(cfg.stream.keepalive, Duration::from_secs(7));
        assert_eq!(cfg.workers, 3);
        assert_eq!(applied, ["workers"]);
    }

    #[test]
    fn an_unknown_or_malformed_key_in_a_config_file_is_an_error_naming_it() {
        let err = settings("listen: 127.0.0.1:1\nkeepalive: 20\n").unwrap_err();
        assert!(
            err.to_string().contains("unknown key \"keepalive\""),
            "{err}"
        );
        for text in ["config: other.yaml", "help: true", "- a list"] {
            assert!(settings(text).is_err(), "{text}");
        }
        let err = settings("listen: {host: a}").unwrap_err();
        assert!(err.to_string().contains("\"listen\""), "{err}");
    }

    #[test]
    fn the_config_file_is_named_by_the_flag_first_then_the_environment() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let env = Some(OsString::from("/env.yaml"));
        assert_eq!(
            config_path(
                args(&["kubefan", "serve", "--config", "/a.yaml"]),
                env.clone()
            ),
            Some(PathBuf::from("/a.yaml"))
        );
        assert_eq!(
            config_path(args(&["kubefan", "--config=/b.yaml", "serve"]), env.clone()),
            Some(PathBuf::from("/b.yaml"))
        );
        assert_eq!(
            config_path(args(&["kubefan", "serve"]), env.clone()),
            Some(PathBuf::from("/env.yaml"))
        );
        assert_eq!(
            config_path(args(&["kubefan", "--", "--config", "x"]), None),
            None
        );
    }
}
