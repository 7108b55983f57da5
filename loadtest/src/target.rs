//! What a run's subscribers subscribe to, and with which credentials.

use anyhow::Context;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Transport {
    Sse,
    Ws,
    /// The Kubernetes watch face (kubefan only).
    Watch,
    /// kubefan's multiplexed WebSocket, `GET /ws`: several subscriptions
    /// per socket (`--ws-mux-subscriptions`), each a subscriber.
    WsMux,
}

/// Where and how to subscribe.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// `kubefan`, or `nchan` / `floor` (the same publish/subscribe paths).
    pub server: String,
    /// Base URL, `http://127.0.0.1:8080`.
    pub base: String,
    pub transport: Transport,
    /// Overrides the path (and query) subscribed to.
    pub path: Option<String>,
    /// PEM CA to trust for an `https://` base.
    #[serde(default)]
    pub ca_pem: Option<String>,
    /// HTTP/2 streams per connection (ALPN `h2`); 0: HTTP/1.1, one
    /// connection per subscriber.
    #[serde(default)]
    pub h2_streams: usize,
    /// A file of `Cookie` header values, one per line (signed-in
    /// sessions).
    #[serde(default)]
    pub cookie_file: Option<std::path::PathBuf>,
    /// A file of bearer tokens, one per line, sent as `Authorization:
    /// Bearer TOKEN`.
    #[serde(default)]
    pub bearer_file: Option<std::path::PathBuf>,
    /// The run-wide index of this worker's first subscriber: its
    /// subscriber `i` signs in with line `first + i` of the cookie or
    /// bearer file (modulo their number).
    #[serde(default)]
    pub first: usize,
    /// Namespaces the changes are spread over (`loadtest-0` ...); 0 or 1:
    /// namespace `loadtest` alone. With more, kubefan's subscribers
    /// stream every namespace (no `namespace=`).
    #[serde(default)]
    pub namespaces: usize,
    /// `ws-mux`: subscriptions per socket.
    #[serde(default)]
    pub ws_mux: usize,
    /// kubefan: distinct views the subscribers are spread over (0: one,
    /// no selector). Subscriber `i` of the run selects
    /// [`view_selector`]`(i % views)`.
    #[serde(default)]
    pub views: usize,
    /// kubefan, SSE or `/ws`: one stream across these clusters
    /// (`clusters=`, or a subscribe message's `clusters`).
    #[serde(default)]
    pub clusters: Option<String>,
}

/// A label selector of its own for view `v` that every pod matches: no pod
/// has the label `loadtest-view`, and `!=` matches a missing label. kubefan
/// keys views by their parsed selectors, so V of them are V views, each
/// getting (and encoding) every change.
pub fn view_selector(v: usize) -> String {
    format!("loadtest-view!=v{v}")
}

/// The namespace of change `seq` (and of target pod `seq`) when changes
/// are spread over `namespaces`.
pub fn namespace_of(seq: usize, namespaces: usize) -> String {
    if namespaces <= 1 {
        "loadtest".into()
    } else {
        format!("loadtest-{}", seq % namespaces)
    }
}

/// A header a subscriber signs in with: `Cookie` (a `--cookie-file` line)
/// or `Authorization` (`Bearer` and a `--bearer-file` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub header: &'static str,
    pub value: String,
    /// The namespaces the credential may see, when its line says
    /// (`TOKEN NS,NS`); `None`: all of them.
    pub namespaces: Option<Vec<String>>,
}

impl Credential {
    /// [`Seen::wanted`] for a subscriber with this credential when the
    /// changes are spread over `namespaces`.
    pub fn wanted(&self, namespaces: usize) -> Vec<bool> {
        match &self.namespaces {
            None => Vec::new(),
            Some(granted) => (0..namespaces.max(1))
                .map(|k| granted.contains(&namespace_of(k, namespaces)))
                .collect(),
        }
    }
}

/// The non-empty lines of `path`, read for `flag`.
fn read_lines(path: &std::path::Path, flag: &str) -> anyhow::Result<Vec<String>> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {flag} {}", path.display()))?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The credentials `target`'s subscribers share out (none: anonymous).
pub fn credentials(target: &Target) -> anyhow::Result<Vec<Credential>> {
    let mut all = Vec::new();
    if let Some(path) = &target.cookie_file {
        all.extend(
            read_lines(path, "--cookie-file")?
                .into_iter()
                .map(|value| Credential {
                    header: "Cookie",
                    value,
                    namespaces: None,
                }),
        );
    }
    if let Some(path) = &target.bearer_file {
        all.extend(bearer_file(path)?);
    }
    Ok(all)
}

/// A `--bearer-file`'s credentials, a line each.
pub(crate) fn bearer_file(path: &std::path::Path) -> anyhow::Result<Vec<Credential>> {
    Ok(read_lines(path, "--bearer-file")?
        .iter()
        .map(|line| bearer_line(line))
        .collect())
}

/// A `--bearer-file` line: `TOKEN`, or `TOKEN NS,NS` naming the
/// namespaces the token may see.
pub(crate) fn bearer_line(line: &str) -> Credential {
    let mut words = line.split_whitespace();
    let token = words.next().unwrap_or_default();
    Credential {
        header: "Authorization",
        value: format!("Bearer {token}"),
        namespaces: words.next().map(|list| {
            list.split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        }),
    }
}

impl Target {
    /// The view selector of subscriber `index` of the run, if views are
    /// spread.
    pub(crate) fn selector(&self, index: usize) -> Option<String> {
        (self.views > 0).then(|| view_selector(index % self.views))
    }

    /// What subscriber `index` of the run subscribes to.
    pub(crate) fn url(&self, index: usize) -> String {
        if let Some(path) = &self.path {
            return format!("{}{path}", self.base);
        }
        let ws_base = self.base.replacen("http", "ws", 1);
        if self.server != "kubefan" {
            return match self.transport {
                Transport::Ws => format!("{ws_base}/sub/loadtest"),
                _ => format!("{}/sub/loadtest", self.base),
            };
        }
        if self.transport == Transport::WsMux {
            // What to subscribe to is in the subscribe messages.
            return format!("{ws_base}/ws");
        }
        // Spread over namespaces: every namespace, narrowed (or not) by
        // what the subscriber's token may see.
        let all = self.namespaces > 1;
        let mut query: Vec<String> = Vec::new();
        let (base, path) = match self.transport {
            Transport::Watch => {
                query.push(
                    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
                        .into(),
                );
                let path = if all {
                    "/api/v1/pods"
                } else {
                    "/api/v1/namespaces/loadtest/pods"
                };
                (&self.base, path)
            }
            transport => {
                if !all {
                    query.push("namespace=loadtest".into());
                }
                let base = if transport == Transport::Ws {
                    &ws_base
                } else {
                    &self.base
                };
                if let Some(clusters) = &self.clusters {
                    query.push(format!("clusters={clusters}"));
                }
                (base, "/stream/pods")
            }
        };
        if let Some(selector) = self.selector(index) {
            // `!` and `=` percent-encoded (`%21%3D`).
            query.push(format!(
                "labelSelector={}",
                selector.replace('!', "%21").replace('=', "%3D")
            ));
        }
        let sep = if query.is_empty() { "" } else { "?" };
        format!("{base}{path}{sep}{}", query.join("&"))
    }

    /// The `/ws` message subscribing to what [`Target::url`] streams
    /// otherwise, as subscription `s{id}` for subscriber `index` of the run.
    pub(crate) fn subscribe_message(&self, id: usize, index: usize) -> String {
        let mut msg =
            serde_json::json!({"op": "subscribe", "id": format!("s{id}"), "resource": "pods"});
        if self.namespaces <= 1 {
            msg["namespace"] = "loadtest".into();
        }
        if let Some(selector) = self.selector(index) {
            msg["labelSelector"] = selector.into();
        }
        if let Some(clusters) = &self.clusters {
            msg["clusters"] = clusters.as_str().into();
        }
        msg.to_string()
    }
}

#[cfg(test)]
impl Target {
    /// kubefan at `base` over `transport`: one subscriber a socket, one
    /// namespace, no views, no credentials (tests change what they need).
    pub(crate) fn kubefan(base: String, transport: Transport) -> Target {
        Target {
            server: "kubefan".into(),
            base,
            transport,
            path: None,
            ca_pem: None,
            h2_streams: 0,
            cookie_file: None,
            bearer_file: None,
            first: 0,
            namespaces: 1,
            ws_mux: 1,
            views: 0,
            clusters: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_distinct_selectors_every_pod_matches_on_every_transport() {
        let target = |transport, views| Target {
            views,
            ..Target::kubefan("http://h:1".into(), transport)
        };
        assert_eq!(
            target(Transport::Sse, 0).url(7),
            "http://h:1/stream/pods?namespace=loadtest"
        );
        assert_eq!(
            target(Transport::Sse, 1000).url(1007),
            "http://h:1/stream/pods?namespace=loadtest&labelSelector=loadtest-view%21%3Dv7"
        );
        assert_eq!(
            target(Transport::Ws, 1000).url(3),
            "ws://h:1/stream/pods?namespace=loadtest&labelSelector=loadtest-view%21%3Dv3"
        );
        assert!(
            target(Transport::Watch, 10)
                .url(12)
                .ends_with("&labelSelector=loadtest-view%21%3Dv2")
        );
        let msg: serde_json::Value =
            serde_json::from_str(&target(Transport::WsMux, 1000).subscribe_message(4, 2004))
                .unwrap();
        assert_eq!(msg["id"], "s4");
        assert_eq!(msg["labelSelector"], "loadtest-view!=v4");
    }

    #[test]
    fn a_bearer_line_may_name_the_namespaces_its_token_sees() {
        let plain = bearer_line("abc");
        assert_eq!(plain.value, "Bearer abc");
        assert_eq!(plain.namespaces, None);
        assert!(plain.wanted(10).is_empty(), "every change");
        let narrowed = bearer_line("abc loadtest-3,loadtest-5");
        assert_eq!(narrowed.value, "Bearer abc");
        let wanted = narrowed.wanted(10);
        assert_eq!((0..10).filter(|k| wanted[*k]).collect::<Vec<_>>(), [3, 5]);
    }
}
