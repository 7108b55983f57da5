//! `kubefan sim`: serve a seeded, churning simulated cluster until shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{ChurnConfig, Sim, SimConfig, SimError, seed_cluster, spawn_churn};

/// Options of `kubefan sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to serve the simulated API server on.
    #[arg(long, env = "KUBEFAN_SIM_LISTEN", default_value = "127.0.0.1:8001")]
    pub listen: SocketAddr,
    /// Write a kubeconfig (JSON) pointing at the simulator to this file.
    #[arg(long, env = "KUBEFAN_SIM_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
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
        ..SimConfig::default()
    });
    let churn = ChurnConfig {
        rate: args.churn_rate,
        nodes: args.nodes,
        pods: args.pods,
        seed: args.seed,
        ..ChurnConfig::default()
    };
    seed_cluster(&sim, &churn);
    let server = sim.serve(args.listen).await?;
    println!("simulated API server at {}", server.url());
    if let Some(path) = &args.kubeconfig_out {
        let json = serde_json::to_vec_pretty(&server.kubeconfig())
            .map_err(|e| SimError::Internal(e.to_string()))?;
        // Written aside and renamed, so a reader never sees half a file.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, path)?;
        println!(
            "kubeconfig written to {} (context kubefan-sim)",
            path.display()
        );
    }
    let task = spawn_churn(sim, churn, shutdown.clone());
    shutdown.cancelled().await;
    let _ = task.await;
    server.stop().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::config::{KubeConfigOptions, Kubeconfig};
    use tokio_util::sync::CancellationToken;

    use super::{SimArgs, run};

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
        };
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(args, shutdown.clone()));
        let kc = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Ok(kc) = Kubeconfig::read_from(&path) {
                    return kc;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("kubeconfig written");
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
