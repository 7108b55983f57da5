//! What `loadtest agents` asks of the cluster it drives (the simulated API
//! server, or a real kube-apiserver) and of the gateway: the marker pods
//! and their changes, the upstream's resourceVersion and its pods grouped
//! by node, the simulator's churn pause and compaction fault, and the
//! gateway's counters.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::json;

use super::frame::WireList;
use crate::subscriber::now_nanos;

/// The namespace of the marker pods.
pub const NAMESPACE: &str = "loadtest";

/// The marker pod of `node`.
pub fn marker_name(node: &str) -> String {
    format!("loadtest-agent-{node}")
}

/// Node `i`, as the simulator names its nodes.
pub fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// The cluster changes are made through, with its token.
#[derive(Clone)]
pub struct Cluster {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
}

impl Cluster {
    /// A pooled client, trusting `ca_pem` for https.
    pub fn new(base: &str, ca_pem: Option<&str>, token: Option<String>) -> anyhow::Result<Cluster> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120));
        if let Some(ca) = ca_pem {
            builder =
                builder.use_preconfigured_tls(crate::subscriber::tls_config(ca, &[b"http/1.1"])?);
        }
        Ok(Cluster {
            http: builder.build()?,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Creates `object` at `path`; one there already (409) will do.
    async fn create(&self, path: &str, object: serde_json::Value) -> anyhow::Result<()> {
        let resp = self
            .request(reqwest::Method::POST, path)
            .json(&object)
            .send()
            .await?;
        if !(resp.status().is_success() || resp.status() == 409) {
            bail!(
                "POST {path}: HTTP {}: {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// The namespace and one marker pod per node in `nodes`, 32 at a time.
    pub async fn create_markers(&self, nodes: &[String]) -> anyhow::Result<()> {
        self.create(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}),
        )
        .await?;
        let path = format!("/api/v1/namespaces/{NAMESPACE}/pods");
        let mut creates = futures::stream::iter(nodes.iter().map(|node| {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": marker_name(node), "namespace": NAMESPACE,
                    "labels": {"app": "loadtest-agent"}, "annotations": {"loadtest/sent": "none"}},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/agent:1"}]},
                "status": {"phase": "Running"}});
            self.create(&path, pod)
        }))
        .buffer_unordered(32);
        while let Some(r) = creates.next().await {
            r?;
        }
        Ok(())
    }

    /// Change `seq`: its mark on the marker of `node`.
    pub async fn mark(&self, node: &str, seq: usize) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"annotations": {"loadtest/sent": format!("{seq}:{}", now_nanos())}}});
        let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/{}", marker_name(node));
        let resp = self
            .request(reqwest::Method::PATCH, &path)
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("change {seq}: HTTP {}", resp.status());
        }
        Ok(())
    }

    /// The upstream's current resourceVersion (a `limit=1` LIST, a
    /// consistent read).
    pub async fn resource_version(&self) -> anyhow::Result<u64> {
        let body = self.get("/api/v1/pods?limit=1").await?;
        let list: WireList = serde_json::from_slice(&body)?;
        list.metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .context("a LIST without a resourceVersion")
    }

    async fn get(&self, path: &str) -> anyhow::Result<bytes::Bytes> {
        let resp = self.request(reqwest::Method::GET, path).send().await?;
        if !resp.status().is_success() {
            bail!("GET {path}: HTTP {}", resp.status());
        }
        Ok(resp.bytes().await?)
    }

    /// The upstream's own latency for each of `changes` marks: a watch of
    /// the marker pods' namespace straight from the upstream, from `rv`,
    /// noting in `seen` when each mark is first seen (µs after it was
    /// sent; `u32::MAX` until then), until `until` or every mark is seen. It resumes an ended watch,
    /// and after a 410 lists the namespace (a mark first seen in that
    /// list is as late as the upstream itself brings it to a client that
    /// must relist): the floor a gateway's deliveries are measured against.
    pub async fn probe(
        &self,
        mut rv: u64,
        seen: &std::sync::Mutex<Vec<u32>>,
        until: tokio::time::Instant,
    ) {
        let mut left = seen.lock().unwrap().len();
        let note = |left: &mut usize, obj: &serde_json::Value| {
            let mark = obj["metadata"]["annotations"]["loadtest/sent"].as_str();
            let Some((seq, sent)) = mark.and_then(|m| m.split_once(':')) else {
                return;
            };
            let (Ok(seq), Ok(sent)) = (seq.parse::<usize>(), sent.parse::<u64>()) else {
                return;
            };
            let mut seen = seen.lock().unwrap();
            if let Some(at) = seen.get_mut(seq).filter(|at| **at == u32::MAX) {
                *at = (now_nanos().saturating_sub(sent) / 1000).min(u32::MAX as u64 - 1) as u32;
                *left -= 1;
            }
        };
        let rv_of = |obj: &serde_json::Value| {
            obj["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse::<u64>().ok())
        };
        // Bounded: a watch per round, and rounds end at `until`.
        for _ in 0..10_000 {
            if tokio::time::Instant::now() >= until || left == 0 {
                break;
            }
            let path = format!("/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={rv}");
            let resp = match tokio::time::timeout_at(
                until,
                self.request(reqwest::Method::GET, &path).send(),
            )
            .await
            {
                Ok(Ok(resp)) if resp.status().is_success() => resp,
                Ok(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(_) => break,
            };
            let mut body = resp.bytes_stream();
            let mut buf = Vec::new();
            let mut expired = false;
            'read: while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(until, body.next()).await
            {
                buf.extend_from_slice(&chunk);
                while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&line) else {
                        continue;
                    };
                    if event["type"] == "ERROR" {
                        expired = event["object"]["code"] == 410;
                        break 'read;
                    }
                    note(&mut left, &event["object"]);
                    rv = rv_of(&event["object"]).unwrap_or(rv);
                }
            }
            if expired {
                let Ok(Ok(body)) = tokio::time::timeout_at(
                    until,
                    self.get(&format!("/api/v1/namespaces/{NAMESPACE}/pods")),
                )
                .await
                else {
                    continue;
                };
                let Ok(list) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    continue;
                };
                for item in list["items"].as_array().into_iter().flatten() {
                    note(&mut left, item);
                }
                rv = list["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(rv);
            }
        }
    }

    /// Every pod, in pages of `limit`, grouped by node (`""`: unscheduled),
    /// and the list's resourceVersion (its first page's: the pages are of
    /// one consistent state).
    pub async fn pods_by_node(&self, limit: usize) -> anyhow::Result<(ByNode, u64)> {
        let mut by_node = ByNode::new();
        let mut cont: Option<String> = None;
        let mut rv = None;
        // 150,000 pods are 300 pages of 500; bounded all the same.
        for _ in 0..100_000 {
            let path = match &cont {
                Some(token) => format!("/api/v1/pods?limit={limit}&continue={}", urlencode(token)),
                None => format!("/api/v1/pods?limit={limit}"),
            };
            let body = self.get(&path).await?;
            let list: WireList = serde_json::from_slice(&body)?;
            if rv.is_none() {
                rv = list
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok());
            }
            for item in &list.items {
                let key = item.key().context("a pod without a name")?;
                by_node
                    .entry(item.node().unwrap_or_default())
                    .or_default()
                    .insert(key, item.rv().unwrap_or(0));
            }
            cont = list
                .metadata
                .cont
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cont.is_none() {
                return Ok((by_node, rv.context("a LIST without a resourceVersion")?));
            }
        }
        bail!("the LIST did not end")
    }

    /// The simulator's churn set to `rate` (`POST /debug/churn?rate=N`):
    /// the answer's status (404 or 405: a simulator without it).
    pub async fn set_churn(&self, rate: f64) -> anyhow::Result<u16> {
        let resp = self
            .request(reqwest::Method::POST, &format!("/debug/churn?rate={rate}"))
            .send()
            .await?;
        Ok(resp.status().as_u16())
    }

    /// Makes the gateway's next watch get 410 Expired, so that it relists:
    /// its watches stall, a pod changes (`loadtest/loadtest-relist`, on no
    /// node), the history is compacted past its position, and its watches
    /// end (the simulator's `/debug/faults/`).
    pub async fn force_relist(&self) -> anyhow::Result<()> {
        self.fault("stall-watches?on=true").await?;
        // A write after the gateway's position: created, or changed if it
        // is there from before.
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "loadtest-relist", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main", "image": "registry.example/agent:1"}]},
            "status": {"phase": "Pending"}});
        let written = async {
            self.create(&format!("/api/v1/namespaces/{NAMESPACE}/pods"), pod)
                .await?;
            let patch =
                json!({"metadata": {"annotations": {"loadtest/relist": now_nanos().to_string()}}});
            let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/loadtest-relist");
            let resp = self
                .request(reqwest::Method::PATCH, &path)
                .header("Content-Type", "application/merge-patch+json")
                .body(patch.to_string())
                .send()
                .await?;
            anyhow::ensure!(
                resp.status().is_success(),
                "PATCH {path}: HTTP {}",
                resp.status()
            );
            anyhow::Ok(())
        }
        .await;
        let compacted = async {
            written?;
            self.fault("compact").await?;
            self.fault("end-watches").await
        }
        .await;
        // Never leave the watches stalled.
        self.fault("stall-watches?on=false").await?;
        compacted
    }

    async fn fault(&self, what: &str) -> anyhow::Result<()> {
        let resp = self
            .request(reqwest::Method::POST, &format!("/debug/faults/{what}"))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("POST /debug/faults/{what}: HTTP {}", resp.status());
        }
        Ok(())
    }
}

/// Pods by node: node → `namespace/name` → resourceVersion.
pub type ByNode = HashMap<String, HashMap<String, u64>>;

/// A continue token in a query (they are base64: `+`, `/`, `=`).
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The gateway's counters (`/metrics`), each family summed over its
/// labels.
pub async fn scrape(http: &reqwest::Client, url: &str) -> Option<HashMap<String, f64>> {
    let resp = http.get(url).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(families(&resp.text().await.ok()?))
}

/// Prometheus text: each sample's value added to its family's (the name
/// before `{`).
pub fn families(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, rest) = match line.find('{') {
            Some(at) => (
                &line[..at],
                line[at..].rsplit_once('}').map_or("", |(_, v)| v),
            ),
            None => line.split_once(' ').unwrap_or((line, "")),
        };
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        *out.entry(name.to_string()).or_insert(0.0) += value;
    }
    out
}

/// What a counter went up by between two scrapes.
pub fn delta(
    before: &Option<HashMap<String, f64>>,
    after: &Option<HashMap<String, f64>>,
    name: &str,
) -> Option<f64> {
    let get =
        |m: &Option<HashMap<String, f64>>| m.as_ref().map(|m| m.get(name).copied().unwrap_or(0.0));
    Some(get(after)? - get(before)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_families_are_summed_over_their_labels() {
        let text = "# HELP kubefan_upstream_relists_total Relists\n\
            # TYPE kubefan_upstream_relists_total counter\n\
            kubefan_upstream_relists_total{resource=\"pods\",reason=\"expired\"} 2\n\
            kubefan_upstream_relists_total{resource=\"nodes\",reason=\"a b}\"} 1\n\
            kubefan_views 3\n\
            kubefan_events_sent_total{x=\"1\"} 1.5e3\n\
            broken{x=\"1\"} nope\n";
        let f = families(text);
        assert_eq!(f["kubefan_upstream_relists_total"], 3.0);
        assert_eq!(f["kubefan_views"], 3.0);
        assert_eq!(f["kubefan_events_sent_total"], 1500.0);
        assert!(!f.contains_key("broken"));
        let later = Some(HashMap::from([("kubefan_views".to_string(), 5.0)]));
        assert_eq!(delta(&Some(f.clone()), &later, "kubefan_views"), Some(2.0));
        assert_eq!(
            delta(&Some(f), &later, "kubefan_upstream_relists_total"),
            Some(-3.0)
        );
        assert_eq!(delta(&None, &later, "kubefan_views"), None);
    }

    #[test]
    fn names_and_tokens() {
        assert_eq!(marker_name(&node_name(7)), "loadtest-agent-node-7");
        assert_eq!(urlencode("ab+/=9"), "ab%2B%2F%3D9");
    }
}
