//! One node agent: its stream of `pods?fieldSelector=spec.nodeName=NODE`
//! (or every pod, for a viewer) over one transport, read straight off its
//! socket ([`crate::http1`], [`crate::ws`]), folded ([`super::fold`]),
//! its marker changes timed ([`super::marks`]). When the stream ends it
//! comes back as the client it stands for would: SSE with `Last-Event-ID`,
//! a WebSocket with `resourceVersion=`, a watch from its last
//! resourceVersion, and after a watch's 410 a relist (a watch list again,
//! or LIST then WATCH). Every loop is bounded.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, oneshot, watch};

use super::fold::{Fold, Outcome};
use super::frame::{Kind, SseEvent, WireList, parse_event};
use super::marks::Marks;
use super::stream::{Stream, Wire, list_path, stream_path, watch_path};
use crate::arrival::Stamped;
use crate::http1::{HttpConn, Io};
use crate::subscriber::{authority, now_nanos, tls_connect};
use crate::target::{Credential, Transport};
use crate::ws::WsConn;

/// Connections (first ones and reconnections) one agent may open.
const MAX_CONNECTS: u32 = 20;
/// LIST pages one list may take (client-go's pager asks for 500 at a time).
const MAX_PAGES: usize = 10_000;
pub const PAGE: usize = 500;

/// What every agent of a worker shares.
pub struct Shared {
    pub base: String,
    pub transport: Transport,
    /// The watch face: a watch list (`sendInitialEvents=true`), else LIST
    /// then WATCH.
    pub watch_list: bool,
    pub ca_pem: Option<String>,
    pub credentials: Vec<Credential>,
    /// HTTP clients for LISTs, one per source address.
    pub lists: Vec<reqwest::Client>,
    /// Connections being opened at once, snapshots included.
    pub connecting: Semaphore,
    /// The run's start (ns since the epoch): every time reported is from it.
    pub epoch: u64,
}

impl Shared {
    fn credential(&self, index: usize) -> Option<&Credential> {
        (!self.credentials.is_empty()).then(|| &self.credentials[index % self.credentials.len()])
    }

    fn since_epoch_ms(&self) -> u64 {
        now_nanos().saturating_sub(self.epoch) / 1_000_000
    }
}

/// What the worker tells its agents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Connecting and streaming, changes not counted.
    Connecting,
    /// The changes' window: deliveries counted.
    Counting,
    /// After it.
    Quiet,
    /// Apply nothing past `at`, and end once the position reached it, or
    /// at `deadline`.
    Settle {
        at: u64,
        deadline: tokio::time::Instant,
    },
    /// The coordinator went away.
    Abort,
}

/// One agent: whose stream, from which address.
pub struct Spec {
    /// Run-wide (its credential is line `index` of the bearer file).
    pub index: usize,
    /// `None`: a viewer of every pod.
    pub node: Option<String>,
    pub local: IpAddr,
}

/// What an agent reports (times in ms since the run's start).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct AgentReport {
    pub index: usize,
    pub node: Option<String>,
    pub started_ms: u64,
    /// Its first response's head.
    pub connected_ms: Option<u64>,
    /// Its first snapshot's end (a LIST then WATCH: the watch's head).
    pub snapshot_ms: Option<u64>,
    /// Its position reached the settle point.
    pub reached: bool,
    pub position: u64,
    /// Its folded state at the settle point, sorted.
    pub state: Vec<(String, u64)>,
    pub resets: u64,
    /// Watch face: relists after a 410.
    pub relists: u64,
    /// Watch face: watches again from the last position after an end.
    pub rewatches: u64,
    /// SSE and WebSocket: reconnections (resuming).
    pub reconnects: u64,
    pub leaked: u64,
    pub backwards: u64,
    /// Changes (events after a snapshot) received, and those in the
    /// changes' window.
    pub changes: u64,
    pub window_changes: u64,
    pub unparsed: u64,
    /// Snapshots (and LISTs) it folded.
    pub snapshots: u64,
    /// Marks of another node's marker it got (also leaked objects).
    pub foreign_marks: u64,
    /// Why its first connection failed, or why it gave up.
    pub failed: Option<String>,
}

/// How the next connection starts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Start {
    /// A snapshot (SSE, WebSocket, a watch list) or a LIST.
    Fresh,
    /// From the position (SSE `Last-Event-ID`, WebSocket
    /// `resourceVersion=`, a watch's `resourceVersion=`).
    From(u64),
}

/// How a stream ended.
enum End {
    /// Settled, past the deadline, or aborted.
    Done,
    /// Closed (or failed): come back from the position.
    Closed(String),
    /// A watch's `ERROR` (410): relist.
    Expired,
}

/// One agent's run.
pub struct Agent {
    spec: Spec,
    shared: Arc<Shared>,
    pub fold: Fold,
    pub marks: Marks,
    pub report: AgentReport,
}

impl Agent {
    pub fn new(spec: Spec, shared: Arc<Shared>, marks: Marks) -> Agent {
        let ids = shared.transport != Transport::Watch;
        let fold = Fold::new(ids, spec.node.clone());
        let report = AgentReport {
            index: spec.index,
            node: spec.node.clone(),
            ..AgentReport::default()
        };
        Agent {
            spec,
            shared,
            fold,
            marks,
            report,
        }
    }

    /// Connects, folds the first snapshot (then says so on `ready`), and
    /// reads until the worker's settle point, coming back when the stream
    /// ends.
    pub async fn run(
        mut self,
        mut phase: watch::Receiver<Phase>,
        ready: oneshot::Sender<bool>,
    ) -> Agent {
        self.report.started_ms = self.shared.since_epoch_ms();
        let mut ready = Some(ready);
        let mut start = Start::Fresh;
        let shared = self.shared.clone();
        // The first connection and its snapshot hold a permit.
        let mut permit = match shared.connecting.acquire().await {
            Ok(p) => Some(p),
            Err(_) => return self,
        };
        for attempt in 0..MAX_CONNECTS {
            if attempt > 0 {
                // As client-go's backoff starts: a second, then on.
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt.min(4)))).await;
                let past = match *phase.borrow() {
                    Phase::Abort => true,
                    Phase::Settle { deadline, .. } => tokio::time::Instant::now() >= deadline,
                    _ => false,
                };
                if past {
                    break;
                }
            }
            // Within 60 s, and never past the settle deadline.
            let mut by = tokio::time::Instant::now() + Duration::from_secs(60);
            if let Phase::Settle { deadline, .. } = *phase.borrow() {
                by = by.min(deadline);
            }
            let opened = tokio::time::timeout_at(by, self.open(start)).await;
            let mut stream = match opened {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) if ready.is_some() => return self.failed(format!("{e:#}"), ready),
                Err(_) if ready.is_some() => {
                    return self.failed("no answer within 60 s".into(), ready);
                }
                Ok(Err(_)) | Err(_) => continue,
            };
            self.report
                .connected_ms
                .get_or_insert(self.shared.since_epoch_ms());
            if ready.is_some() && !self.fold.in_snapshot() {
                // LIST then WATCH: the list was the snapshot.
                self.snapshot_done(&mut ready, &mut permit);
            }
            let end = self
                .read(&mut stream, &mut phase, &mut ready, &mut permit)
                .await;
            match end {
                End::Done => break,
                End::Closed(why) if ready.is_some() => return self.failed(why, ready),
                End::Closed(_) => {
                    if self.shared.transport == Transport::Watch {
                        self.report.rewatches += 1;
                    } else {
                        self.report.reconnects += 1;
                    }
                    start = Start::From(self.fold.position);
                }
                End::Expired => {
                    self.report.relists += 1;
                    start = Start::Fresh;
                }
            }
        }
        if let Some(ready) = ready.take() {
            let _ = ready.send(false);
        }
        self
    }

    fn failed(mut self, why: String, ready: Option<oneshot::Sender<bool>>) -> Agent {
        self.report.failed = Some(why);
        if let Some(ready) = ready {
            let _ = ready.send(false);
        }
        self
    }

    fn snapshot_done(
        &mut self,
        ready: &mut Option<oneshot::Sender<bool>>,
        permit: &mut Option<tokio::sync::SemaphorePermit<'_>>,
    ) {
        if let Some(ready) = ready.take() {
            self.report.snapshot_ms = Some(self.shared.since_epoch_ms());
            let _ = ready.send(true);
        }
        permit.take();
    }

    /// Opens the stream (after its LIST, for LIST then WATCH).
    async fn open(&mut self, start: Start) -> anyhow::Result<Stream> {
        let node = self.spec.node.clone();
        let node = node.as_deref();
        let (path, sse, last_event_id) = match (self.shared.transport, start) {
            (Transport::Sse, Start::Fresh) => (stream_path(node, None), true, None),
            (Transport::Sse, Start::From(rv)) => (stream_path(node, None), true, Some(rv)),
            (Transport::Ws, Start::Fresh) => (stream_path(node, None), false, None),
            (Transport::Ws, Start::From(rv)) => (stream_path(node, Some(rv)), false, None),
            (Transport::Watch, Start::From(rv)) => (watch_path(node, Some(rv)), false, None),
            (Transport::Watch, Start::Fresh) if self.shared.watch_list => {
                self.fold.expect_snapshot();
                (watch_path(node, None), false, None)
            }
            (Transport::Watch, Start::Fresh) => {
                let rv = self.list().await?;
                (watch_path(node, Some(rv)), false, None)
            }
            (Transport::WsMux, _) => bail!("agents use single streams"),
        };
        let host = authority(&self.shared.base)?;
        let addr: std::net::SocketAddr = host
            .parse()
            .context("the base names an IP address and port")?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind((self.spec.local, 0).into())?;
        let (tcp, arrival) = Stamped::new(socket.connect(addr).await?)?;
        let io: Box<dyn Io> = match (&self.shared.ca_pem, self.shared.base.starts_with("https:")) {
            (Some(ca), true) => Box::new(tls_connect(ca, &[b"http/1.1"], tcp).await?),
            (None, true) => bail!("https needs --tls-ca"),
            _ => Box::new(tcp),
        };
        let credential = self.shared.credential(self.spec.index);
        let wire = if self.shared.transport == Transport::Ws {
            Wire::Ws(Box::new(
                WsConn::handshake(io, host, &path, credential).await?,
            ))
        } else {
            let mut extra = String::from("Accept: application/json, */*\r\n");
            if sse {
                extra = String::from("Accept: text/event-stream\r\n");
            }
            if let Some(id) = last_event_id {
                extra.push_str(&format!("Last-Event-ID: {id}\r\n"));
            }
            let body = HttpConn::get(io, host, &path, credential, &extra)
                .await
                .with_context(|| path.clone())?;
            Wire::Http {
                body: Box::new(body),
                partial: Vec::new(),
                sse: sse.then(SseEvent::default),
            }
        };
        Ok(Stream::new(wire, arrival))
    }

    /// LIST (paged) into the fold; its resourceVersion.
    async fn list(&mut self) -> anyhow::Result<u64> {
        let clients = &self.shared.lists;
        let client = &clients[self.spec.index % clients.len()];
        let node = self.spec.node.as_deref();
        let mut items = Vec::new();
        let (mut cont, mut rv) = (None::<String>, None);
        for _ in 0..MAX_PAGES {
            let url = format!("{}{}", self.shared.base, list_path(node, cont.as_deref()));
            let mut req = client.get(&url);
            if let Some(c) = self.shared.credential(self.spec.index) {
                req = req.header(c.header, &c.value);
            }
            let resp = req.send().await?;
            if !resp.status().is_success() {
                bail!("{url}: HTTP {}", resp.status());
            }
            let body = resp.bytes().await?;
            let list: WireList = serde_json::from_slice(&body)?;
            if rv.is_none() {
                rv = list
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok());
            }
            for item in &list.items {
                if let Some(key) = item.key() {
                    items.push((key, item.rv().unwrap_or(0), item.node()));
                }
            }
            cont = list
                .metadata
                .cont
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if cont.is_none() {
                let rv = rv.context("a LIST without a resourceVersion")?;
                self.fold.listed(items, rv);
                return Ok(rv);
            }
        }
        bail!("a LIST past {MAX_PAGES} pages")
    }

    /// Reads until the settle point, the deadline, or the stream's end.
    async fn read(
        &mut self,
        stream: &mut Stream,
        phase: &mut watch::Receiver<Phase>,
        ready: &mut Option<oneshot::Sender<bool>>,
        permit: &mut Option<tokio::sync::SemaphorePermit<'_>>,
    ) -> End {
        // Bounded by the stream (which ends), and once settling by the deadline.
        loop {
            let now = *phase.borrow_and_update();
            let deadline = match now {
                Phase::Abort => return End::Done,
                Phase::Settle { at, deadline } => {
                    self.fold.freeze_at(at);
                    if self.fold.reached(at) {
                        self.report.reached = true;
                        return End::Done;
                    }
                    Some(deadline)
                }
                Phase::Quiet => {
                    // The settle point is being taken, and may be behind
                    // what this agent applies meanwhile.
                    self.fold.keep_undo();
                    None
                }
                _ => None,
            };
            let far = tokio::time::Instant::now() + Duration::from_secs(86_400);
            let next = tokio::select! {
                biased;
                next = stream.next() => next,
                changed = phase.changed() => {
                    if changed.is_err() {
                        return End::Done;
                    }
                    continue;
                }
                () = tokio::time::sleep_until(deadline.unwrap_or(far)) => return End::Done,
            };
            let (id, data) = match next {
                Ok(Some(message)) => message,
                Ok(None) => return End::Closed("the stream ended".into()),
                Err(e) => return End::Closed(format!("{e:#}")),
            };
            let Ok(frame) = parse_event(&data, id) else {
                self.report.unparsed += 1;
                continue;
            };
            let change = matches!(frame.kind, Kind::Added | Kind::Modified | Kind::Deleted);
            if change && !self.fold.in_snapshot() {
                self.marks.record(&data, stream.arrival.get());
                if now == Phase::Counting {
                    self.report.window_changes += 1;
                }
            }
            match self.fold.take(frame) {
                Outcome::Go => {}
                Outcome::SnapshotEnd => self.snapshot_done(ready, permit),
                Outcome::Error(code) => {
                    return match self.shared.transport {
                        Transport::Watch if code == Some(410) => End::Expired,
                        _ => End::Closed(format!("an ERROR ({code:?})")),
                    };
                }
            }
        }
    }

    /// The report, with the fold's figures.
    pub fn finish(mut self) -> (AgentReport, Marks) {
        let f = &self.fold;
        let r = &mut self.report;
        r.position = f.position;
        r.state = f.sorted();
        r.resets = f.resets;
        r.leaked = f.leaked;
        r.backwards = f.backwards;
        r.changes = f.changes;
        r.snapshots = f.snapshots;
        r.foreign_marks = self.marks.foreign;
        (self.report, self.marks)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::http1::accept_request;

    /// A server's chunked response of `body`, in pieces `split` bytes long.
    fn chunked(body: &[u8], split: usize) -> Vec<u8> {
        let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for part in body.chunks(split) {
            out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn shared(base: String, transport: Transport) -> Arc<Shared> {
        Arc::new(Shared {
            base,
            transport,
            watch_list: true,
            ca_pem: None,
            credentials: vec![crate::target::bearer_line("tok")],
            lists: vec![reqwest::Client::new()],
            connecting: Semaphore::new(4),
            epoch: now_nanos(),
        })
    }

    fn pod(kind: &str, name: &str, rv: u64, extra: &str) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"metadata":{{"name":"{name}","namespace":"loadtest","resourceVersion":"{rv}"{extra}}},"spec":{{"nodeName":"node-0"}}}}}}"#
        )
    }

    #[tokio::test]
    async fn an_sse_agent_folds_its_snapshot_times_its_marks_and_settles() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let now = now_nanos();
        let server = tokio::spawn(async move {
            let (mut tcp, head, _) = accept_request(&listener).await;
            let mark = format!(r#","annotations":{{"loadtest/sent":"0:{now}"}}"#);
            let body = format!(
                "retry: 2000\n\nevent: ADDED\ndata: {}\n\nevent: BOOKMARK\nid: 10\ndata: {{\"type\":\"BOOKMARK\",\"object\":{{\"metadata\":{{\"resourceVersion\":\"10\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}\n\n\
                 : keep-alive\n\nevent: MODIFIED\nid: 11\ndata: {}\n\nevent: BOOKMARK\nid: 20\ndata: {{\"type\":\"BOOKMARK\",\"object\":{{\"metadata\":{{\"resourceVersion\":\"20\"}}}}}}\n\n",
                pod("ADDED", "loadtest-agent-node-0", 5, ""),
                pod("MODIFIED", "loadtest-agent-node-0", 11, &mark),
            );
            tcp.write_all(&chunked(body.as_bytes(), 13)).await.unwrap();
            (tcp, head)
        });
        let (phase_tx, phase) = watch::channel(Phase::Connecting);
        let spec = Spec {
            index: 0,
            node: Some("node-0".into()),
            local: "127.0.0.1".parse().unwrap(),
        };
        let agent = Agent::new(
            spec,
            shared(format!("http://{addr}"), Transport::Sse),
            Marks::new(1, 1, 0),
        );
        let (ready_tx, ready) = oneshot::channel();
        let task = tokio::spawn(agent.run(phase, ready_tx));
        assert!(ready.await.unwrap(), "snapshot complete");
        phase_tx
            .send(Phase::Settle {
                at: 20,
                deadline: tokio::time::Instant::now() + Duration::from_secs(5),
            })
            .unwrap();
        let (report, marks) = task.await.unwrap().finish();
        let (_tcp, head) = server.await.unwrap();
        assert!(
            head.starts_with("GET /stream/pods?fieldSelector=spec.nodeName%3Dnode-0 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("Authorization: Bearer tok\r\n"));
        assert!(report.reached && report.position == 20);
        assert_eq!(
            report.state,
            [("loadtest/loadtest-agent-node-0".to_string(), 11)]
        );
        assert_eq!((report.leaked, report.changes, report.unparsed), (0, 1, 0));
        assert_eq!(marks.delivered(), 1);
        assert!(report.snapshot_ms.is_some() && report.failed.is_none());
    }

    #[tokio::test]
    async fn a_watch_agent_relists_after_a_410_and_watches_again_after_an_end() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let end = r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"RV","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
            let mut heads = Vec::new();
            // A watch list, ended by a 410; a watch list again, whose
            // stream then ends; a watch from its position.
            let bodies = [
                format!(
                    "{}\n{}\n{}\n",
                    pod("ADDED", "a", 3, ""),
                    end.replace("RV", "5"),
                    r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#
                ),
                format!("{}\n{}\n", pod("ADDED", "b", 7, ""), end.replace("RV", "8")),
                format!("{}\n", pod("MODIFIED", "b", 9, "")),
            ];
            for body in bodies {
                let (mut tcp, head, _) = accept_request(&listener).await;
                heads.push(head);
                let mut out = chunked(body.as_bytes(), 50);
                out.extend_from_slice(b"0\r\n\r\n");
                tcp.write_all(&out).await.unwrap();
            }
            let (mut tcp, head, _) = accept_request(&listener).await;
            heads.push(head);
            tcp.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await
                .unwrap();
            (tcp, heads)
        });
        let (phase_tx, phase) = watch::channel(Phase::Connecting);
        let spec = Spec {
            index: 0,
            node: Some("node-0".into()),
            local: "127.0.0.1".parse().unwrap(),
        };
        let agent = Agent::new(
            spec,
            shared(format!("http://{addr}"), Transport::Watch),
            Marks::new(0, 1, 0),
        );
        let (ready_tx, ready) = oneshot::channel();
        let task = tokio::spawn(agent.run(phase, ready_tx));
        assert!(ready.await.unwrap());
        let (_tcp, heads) = server.await.unwrap();
        phase_tx
            .send(Phase::Settle {
                at: 9,
                deadline: tokio::time::Instant::now() + Duration::from_secs(5),
            })
            .unwrap();
        let (report, _) = task.await.unwrap().finish();
        assert!(heads[0].contains("sendInitialEvents=true"), "{}", heads[0]);
        assert!(
            heads[1].contains("sendInitialEvents=true"),
            "a relist: {}",
            heads[1]
        );
        assert!(
            heads[2].contains("&resourceVersion=8 "),
            "a rewatch: {}",
            heads[2]
        );
        assert!(heads[3].contains("&resourceVersion=9 "), "{}", heads[3]);
        assert_eq!((report.relists, report.rewatches), (1, 2));
        assert_eq!(report.state, [("loadtest/b".to_string(), 9)]);
        assert!(report.reached);
    }
}
