//! The changes a run makes: the target pod each namespace has, made
//! before the subscribers connect, and one change of it per tick, each
//! marked with its sequence number and the time it was sent.

use anyhow::bail;

use crate::subscriber::now_nanos;
use crate::target;

/// A request to the simulated API server, with its token if there is one.
pub fn to_sim(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    let req = http.request(method, url);
    match token {
        Some(token) => req.bearer_auth(token),
        None => req,
    }
}

/// The target pod changes are made to, one in each namespace (and with
/// several namespaces, the namespaces themselves).
pub async fn setup_kubefan(
    http: &reqwest::Client,
    sim: &str,
    token: Option<&str>,
    namespaces: usize,
) -> anyhow::Result<()> {
    for k in 0..namespaces.max(1) {
        let ns = target::namespace_of(k, namespaces);
        if namespaces > 1 {
            let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}});
            let url = format!("{sim}/api/v1/namespaces");
            create(http, url, token, &namespace, &format!("namespace {ns}")).await?;
        }
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "target", "namespace": ns, "annotations": {"loadtest/sent": "none"}},
            "spec": {"nodeName": "node-0", "containers": [{"name": "main", "image": "registry.example/app:1"}]},
            "status": {"phase": "Running"}});
        let url = format!("{sim}/api/v1/namespaces/{ns}/pods");
        create(http, url, token, &pod, &format!("the target pod in {ns}")).await?;
    }
    Ok(())
}

/// Creates `object` at `url` (one there already, 409, will do).
async fn create(
    http: &reqwest::Client,
    url: String,
    token: Option<&str>,
    object: &serde_json::Value,
    what: &str,
) -> anyhow::Result<()> {
    let resp = to_sim(http, reqwest::Method::POST, url, token)
        .json(object)
        .send()
        .await?;
    if !(resp.status().is_success() || resp.status() == 409) {
        bail!("creating {what}: HTTP {}", resp.status());
    }
    Ok(())
}

/// What a change is sent to: the simulated API server (kubefan's
/// upstream) or the peer's publish endpoint.
#[derive(Clone)]
pub struct Publisher {
    pub http: reqwest::Client,
    pub server: String,
    pub base: String,
    pub sim: Vec<String>,
    pub sim_token: Option<String>,
    pub namespaces: usize,
    pub payload: usize,
}

pub async fn publish(p: Publisher, seq: usize) -> anyhow::Result<()> {
    let (http, args) = (&p.http, &p);
    let mark = format!("{seq}:{}", now_nanos());
    let resp = if args.server != "kubefan" {
        let body = serde_json::json!({"metadata": {"annotations": {"loadtest/sent": mark,
            "loadtest/pad": "x".repeat(args.payload.saturating_sub(80))}}});
        http.post(format!("{}/pub/loadtest", args.base))
            .body(body.to_string())
            .send()
            .await?
    } else {
        let patch = serde_json::json!({"metadata": {"annotations": {"loadtest/sent": mark}}});
        let ns = target::namespace_of(seq, args.namespaces);
        to_sim(
            http,
            reqwest::Method::PATCH,
            format!(
                "{}/api/v1/namespaces/{ns}/pods/target",
                args.sim[seq % args.sim.len()]
            ),
            args.sim_token.as_deref(),
        )
        .header("Content-Type", "application/merge-patch+json")
        .body(patch.to_string())
        .send()
        .await?
    };
    if !resp.status().is_success() {
        bail!("publishing change {seq}: HTTP {}", resp.status());
    }
    Ok(())
}
