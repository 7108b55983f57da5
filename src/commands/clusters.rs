//! `serve --cluster NAME=KUBECONFIG[#CONTEXT]`: the flag's values, and the
//! clients of the clusters they name.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubefan::app::Upstream;

/// One `--cluster`: its name and where its API server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    pub name: String,
    /// `None`: the pod's service account (`in-cluster`).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

pub fn parse_cluster(text: &str) -> Result<ClusterSpec, String> {
    let text = text.trim();
    let Some((name, source)) = text.split_once('=') else {
        return Err(format!(
            "{text:?} is not NAME=KUBECONFIG[#CONTEXT] or NAME=in-cluster"
        ));
    };
    kubefan::cluster::check_name(name)?;
    if source == "in-cluster" {
        return Ok(ClusterSpec {
            name: name.to_string(),
            kubeconfig: None,
            context: None,
        });
    }
    let (file, context) = match source.split_once('#') {
        Some((file, context)) => (file, Some(context.to_string())),
        None => (source, None),
    };
    if file.is_empty() || context.as_deref() == Some("") {
        return Err(format!(
            "cluster {name:?}: {source:?} names no kubeconfig file or an empty context"
        ));
    }
    Ok(ClusterSpec {
        name: name.to_string(),
        kubeconfig: Some(PathBuf::from(file)),
        context,
    })
}

/// The clients of `--cluster`s, each reviewing its own tokens.
pub async fn cluster_upstreams(specs: &[ClusterSpec]) -> anyhow::Result<Vec<Upstream>> {
    if specs.iter().filter(|s| s.kubeconfig.is_none()).count() > 1 {
        anyhow::bail!("--cluster: only one cluster can be in-cluster (the pod's own)");
    }
    let mut upstreams = Vec::with_capacity(specs.len());
    for spec in specs {
        let name = &spec.name;
        let config = match &spec.kubeconfig {
            None => kube::Config::incluster()
                .with_context(|| format!("--cluster {name}=in-cluster: not in a pod"))?,
            Some(path) => {
                let kc = Kubeconfig::read_from(path).with_context(|| {
                    format!("--cluster {name}: reading kubeconfig {}", path.display())
                })?;
                known_context(&kc, spec.context.as_deref(), path)
                    .with_context(|| format!("--cluster {name}"))?;
                let options = KubeConfigOptions {
                    context: spec.context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .with_context(|| format!("--cluster {name}: {}", path.display()))?
            }
        };
        let url = config.cluster_url.to_string();
        tracing::info!(cluster = %name, server = %url, "using Kubernetes API server");
        let client = kube::Client::try_from(config)?;
        upstreams.push(Upstream {
            name: Some(name.clone()),
            client: client.clone(),
            reviews: client,
            url: Some(url),
        });
    }
    Ok(upstreams)
}

/// Refuses a context the kubeconfig at `path` does not have, naming the
/// ones it has (kube's own error names only the missing one).
pub fn known_context(kc: &Kubeconfig, context: Option<&str>, path: &Path) -> anyhow::Result<()> {
    let Some(want) = context else {
        return Ok(());
    };
    if kc.contexts.iter().any(|c| c.name == want) {
        return Ok(());
    }
    let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
    anyhow::bail!(
        "{} has no context {want:?}; its contexts: {}",
        path.display(),
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_not_in_the_kubeconfig_is_refused_with_the_ones_there_are() {
        let kc = Kubeconfig::from_yaml(
            "apiVersion: v1\nkind: Config\ncontexts:\n- name: kubefan-sim\n  context: {cluster: c, user: u}\n- name: kubefan-sim-admin\n  context: {cluster: c, user: a}\n",
        )
        .unwrap();
        let path = Path::new("/tmp/kc");
        let err = known_context(&kc, Some("kubefan-sm"), path)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            r#"/tmp/kc has no context "kubefan-sm"; its contexts: kubefan-sim, kubefan-sim-admin"#
        );
        known_context(&kc, Some("kubefan-sim"), path).unwrap();
        known_context(&kc, None, path).unwrap();
    }
}
