//! `kubefan sim`: serve a seeded, churning simulated cluster until shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    AuthorizationMode, ChurnConfig, ChurnStyle, Sim, SimConfig, SimError, SimUser, seed_cluster,
    spawn_churn,
};

/// The user `kubefan sim` writes first into its kubeconfig in RBAC mode.
const ADMIN: &str = "kubefan-sim-admin";

/// A `--user` value: `NAME` or `NAME:GROUP,GROUP`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpec {
    pub name: String,
    pub groups: Vec<String>,
}

impl std::str::FromStr for UserSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, groups) = s.split_once(':').unwrap_or((s, ""));
        if name.is_empty() {
            return Err(format!(
                "{s:?}: a user needs a name (NAME or NAME:GROUP,GROUP)"
            ));
        }
        Ok(UserSpec {
            name: name.to_owned(),
            groups: groups
                .split(',')
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// Whether `kubefan sim` serves HTTPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    /// HTTPS when requests are authorized (`--authorization-mode RBAC`):
    /// kubectl and client-go send tokens to https:// servers only.
    Auto,
    On,
    Off,
}

/// Options of `kubefan sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to serve the simulated API server on.
    #[arg(long, env = "KUBEFAN_SIM_LISTEN", default_value = "127.0.0.1:8001")]
    pub listen: SocketAddr,
    /// Write a kubeconfig (JSON) pointing at the simulator to this file: a
    /// context per --user (with its token), and in RBAC mode first a
    /// kubefan-sim-admin context (group system:masters).
    #[arg(long, env = "KUBEFAN_SIM_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// AlwaysAllow serves every request; RBAC authenticates bearer tokens
    /// (401) and authorizes every request by the stored RBAC objects (403).
    #[arg(long, env = "KUBEFAN_SIM_AUTHORIZATION_MODE", value_enum, default_value_t = AuthorizationMode::AlwaysAllow)]
    pub authorization_mode: AuthorizationMode,
    /// HTTPS with a CA made at start, written into the --kubeconfig-out
    /// file: auto is on with --authorization-mode RBAC (kubectl sends a
    /// token to https:// servers only), off otherwise.
    #[arg(long, env = "KUBEFAN_SIM_TLS", value_enum, default_value_t = TlsMode::Auto)]
    pub tls: TlsMode,
    /// A user with a generated token, NAME or NAME:GROUP,GROUP; repeatable
    /// (in the variable, separated by ";"). Its token is in the
    /// --kubeconfig-out file (context NAME).
    #[arg(long = "user", env = "KUBEFAN_SIM_USERS", value_delimiter = ';')]
    pub users: Vec<UserSpec>,
    /// Pod operations per second (0 = no churn).
    #[arg(long, env = "KUBEFAN_SIM_CHURN_RATE", default_value_t = 20.0)]
    pub churn_rate: f64,
    #[arg(long, env = "KUBEFAN_SIM_NODES", default_value_t = 3)]
    pub nodes: usize,
    /// Pod population to seed and keep near.
    #[arg(long, env = "KUBEFAN_SIM_PODS", default_value_t = 300)]
    pub pods: usize,
    #[arg(long, env = "KUBEFAN_SIM_BOOKMARK_INTERVAL_SECS", default_value_t = 10)]
    pub bookmark_interval_secs: u64,
    /// Events kept per resource for watches from an older resourceVersion.
    #[arg(long, env = "KUBEFAN_SIM_HISTORY_EVENTS", default_value_t = SimConfig::default().history)]
    pub history_events: usize,
    /// Bytes those events may hold per resource; the oldest go first.
    #[arg(long, env = "KUBEFAN_SIM_HISTORY_BYTES", default_value_t = SimConfig::default().history_bytes)]
    pub history_bytes: usize,
    /// Events younger than this are kept past --history-events and
    /// --history-bytes (up to 102,400 a resource), as kube-apiserver's
    /// watch cache keeps 75 s of events; 0 for the count and byte bounds
    /// alone.
    #[arg(long, env = "KUBEFAN_SIM_HISTORY_WINDOW_SECS", default_value_t = 75)]
    pub history_window_secs: u64,
    /// random: creates, deletes and patches of every kind; rollout:
    /// Deployments' pods replaced a few at a time (create, bind, ready,
    /// terminate, delete).
    #[arg(long, env = "KUBEFAN_SIM_CHURN_STYLE", value_enum, default_value_t = ChurnStyle::Random)]
    pub churn_style: ChurnStyle,
    /// Whether pods carry metadata.managedFields, as kube-apiserver stores
    /// them (3-8 KB a pod; 2-4 KB without).
    #[arg(long, env = "KUBEFAN_SIM_MANAGED_FIELDS", default_value_t = true, action = clap::ArgAction::Set)]
    pub managed_fields: bool,
    /// Seed for a reproducible cluster and churn.
    #[arg(long, env = "KUBEFAN_SIM_SEED")]
    pub seed: Option<u64>,
}

/// Seeds, serves and churns until `shutdown` is cancelled.
pub async fn run(args: SimArgs, shutdown: CancellationToken) -> Result<(), SimError> {
    let sim = Sim::new(SimConfig {
        bookmark_interval: Duration::from_secs(args.bookmark_interval_secs.max(1)),
        history: args.history_events,
        history_bytes: args.history_bytes,
        history_window: Duration::from_secs(args.history_window_secs),
        authorization: args.authorization_mode,
        ..SimConfig::default()
    });
    let token = || uuid::Uuid::new_v4().simple().to_string();
    let mut users: Vec<SimUser> = Vec::new();
    if args.authorization_mode == AuthorizationMode::Rbac {
        users.push(SimUser::new(&token(), ADMIN, &["system:masters"]));
    }
    for spec in &args.users {
        let groups: Vec<&str> = spec.groups.iter().map(String::as_str).collect();
        users.push(SimUser::new(&token(), &spec.name, &groups));
    }
    sim.set_users(users.clone());
    let churn = ChurnConfig {
        rate: args.churn_rate,
        nodes: args.nodes,
        pods: args.pods,
        seed: args.seed,
        style: args.churn_style,
        managed_fields: args.managed_fields,
        ..ChurnConfig::default()
    };
    let started = std::time::Instant::now();
    seed_cluster(&sim, &churn);
    println!(
        "seeded {} pods on {} nodes in {:.1?}",
        args.pods,
        args.nodes,
        started.elapsed()
    );
    let tls = match args.tls {
        TlsMode::On => true,
        TlsMode::Off => false,
        TlsMode::Auto => args.authorization_mode == AuthorizationMode::Rbac,
    };
    let (server, front) = if tls {
        // Plain HTTP on a loopback port of its own, behind the TLS front.
        let server = sim.serve(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let front = crate::tls::front(args.listen, server.addr(), shutdown.clone()).await?;
        (server, Some(front))
    } else {
        (sim.serve(args.listen).await?, None)
    };
    let url = front.as_ref().map_or_else(|| server.url(), |f| f.url());
    println!("simulated API server at {url}");
    if let Some(path) = &args.kubeconfig_out {
        let mut kubeconfig = server.kubeconfig_for(&users);
        if let Some(front) = &front {
            use base64::Engine as _;
            let ca = base64::engine::general_purpose::STANDARD.encode(&front.ca_pem);
            for named in &mut kubeconfig.clusters {
                if let Some(cluster) = named.cluster.as_mut() {
                    cluster.server = Some(front.url());
                    cluster.certificate_authority_data = Some(ca.clone());
                }
            }
        }
        let json = serde_json::to_vec_pretty(&kubeconfig)
            .map_err(|e| SimError::Internal(e.to_string()))?;
        // Written aside and renamed, so a reader never sees half a file.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, path)?;
        let contexts: Vec<&str> = users.iter().map(|u| u.username.as_str()).collect();
        println!(
            "kubeconfig written to {} (context {}; users' contexts: {})",
            path.display(),
            contexts.first().copied().unwrap_or("kubefan-sim"),
            if contexts.is_empty() {
                "none".to_owned()
            } else {
                contexts.join(", ")
            }
        );
    }
    let task = spawn_churn(sim, churn, shutdown.clone());
    shutdown.cancelled().await;
    let _ = task.await;
    server.stop().await;
    if let Some(front) = front {
        front.stopped().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::config::{KubeConfigOptions, Kubeconfig};
    use tokio_util::sync::CancellationToken;

    use super::{SimArgs, UserSpec, run};
    use crate::AuthorizationMode;

    /// Waits (bounded) until `run` has written its kubeconfig.
    async fn written(path: &std::path::Path) -> Kubeconfig {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Ok(kc) = Kubeconfig::read_from(path) {
                    return kc;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("kubeconfig written")
    }

    #[test]
    fn user_specs_name_a_user_and_its_groups() {
        let spec: UserSpec = "alice:devs,ops".parse().unwrap();
        assert_eq!(spec.name, "alice");
        assert_eq!(spec.groups, ["devs", "ops"]);
        assert!("bob".parse::<UserSpec>().unwrap().groups.is_empty());
        assert!(":devs".parse::<UserSpec>().is_err());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn rbac_mode_writes_each_users_token_into_the_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("kubefan-sim-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig.json");
        let args = SimArgs {
            listen: "127.0.0.1:0".parse().unwrap(),
            kubeconfig_out: Some(path.clone()),
            churn_rate: 0.0,
            nodes: 2,
            pods: 3,
            bookmark_interval_secs: 1,
            seed: Some(3),
            history_events: 100,
            history_bytes: 1 << 20,
            history_window_secs: 0,
            churn_style: crate::ChurnStyle::Random,
            managed_fields: true,
            authorization_mode: AuthorizationMode::Rbac,
            tls: super::TlsMode::Auto,
            users: vec!["alice:devs".parse().unwrap()],
        };
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(args, shutdown.clone()));
        let kc = written(&path).await;
        assert_eq!(kc.current_context.as_deref(), Some("kubefan-sim-admin"));
        // RBAC mode serves HTTPS, its CA in the kubeconfig: kubectl sends
        // tokens to https:// servers only.
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert!(
            cluster
                .server
                .as_deref()
                .unwrap()
                .starts_with("https://127.0.0.1:"),
            "{:?}",
            cluster.server
        );
        assert!(cluster.certificate_authority_data.is_some());
        let client = |context: &str| {
            let kc = kc.clone();
            let context = context.to_owned();
            async move {
                let options = KubeConfigOptions {
                    context: Some(context),
                    ..Default::default()
                };
                let cfg = kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .unwrap();
                kube::Client::try_from(cfg).unwrap()
            }
        };
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(client("kubefan-sim-admin").await);
        assert_eq!(
            nodes.list(&Default::default()).await.unwrap().items.len(),
            2
        );
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(client("alice").await);
        match nodes.list(&Default::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
            other => panic!("alice has no binding: expected 403, got {other:?}"),
        }
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(client("kubefan-sim").await);
        match nodes.list(&Default::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "no token is anonymous"),
            other => panic!("expected 403, got {other:?}"),
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn run_serves_a_seeded_cluster_through_the_written_kubeconfig() {
        let dir = std::env::temp_dir().join(format!("kubefan-sim-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig.json");
        let args = SimArgs {
            listen: "127.0.0.1:0".parse().unwrap(),
            kubeconfig_out: Some(path.clone()),
            churn_rate: 50.0,
            nodes: 2,
            pods: 20,
            bookmark_interval_secs: 1,
            seed: Some(3),
            history_events: 100,
            history_bytes: 1 << 20,
            history_window_secs: 0,
            churn_style: crate::ChurnStyle::Random,
            managed_fields: true,
            authorization_mode: AuthorizationMode::AlwaysAllow,
            tls: super::TlsMode::Auto,
            users: vec![],
        };
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(args, shutdown.clone()));
        let kc = written(&path).await;
        assert_eq!(kc.current_context.as_deref(), Some("kubefan-sim"));
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
        let typed = pods.list(&Default::default()).await.unwrap();
        assert!(
            typed
                .items
                .iter()
                .all(|p| p.spec.as_ref().is_some_and(|s| !s.containers.is_empty()))
        );
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let list = nodes.list(&Default::default()).await.unwrap();
        assert_eq!(list.items.len(), 2);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
