//! TLS and HTTP/2, end to end: certificates made here with rcgen (ring),
//! real TLS clients (rustls), an HTTP/2 client (the h2 crate) and kubectl.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kubefan_sim::pod;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::sse::seeded;
use crate::support::{Authority, TestEnv, WAIT, spawn, test_config};

/// A directory for one test's files, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "kubefan-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// Writes `name` at once (a rename), as a Secret volume update does.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The gateway over TLS with `leaf` as its certificate, against a seeded
/// simulated API server.
async fn spawn_tls(
    dir: &Dir,
    leaf: &(String, String),
    tune: impl FnOnce(&mut kubefan::config::Config),
) -> TestEnv {
    let mut cfg = test_config(&["pods"]);
    cfg.tls.cert_file = Some(dir.write("tls.crt", &leaf.0));
    cfg.tls.key_file = Some(dir.write("tls.key", &leaf.1));
    tune(&mut cfg);
    let env = spawn(seeded(20), cfg).await;
    env.synced("pods").await;
    env
}

/// A TLS client trusting `ca_pem`, offering `alpn`.
fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

async fn connect(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    tokio::time::timeout(
        WAIT,
        tokio_rustls::TlsConnector::from(cfg).connect(name, tcp),
    )
    .await
    .expect("handshake in time")
    .expect("handshake")
}

/// The common name of the certificate a connection was served.
fn served_name(tls: &TlsStream<TcpStream>) -> String {
    let chain = tls.get_ref().1.peer_certificates().expect("a certificate");
    let text = String::from_utf8_lossy(chain[0].as_ref()).into_owned();
    ["first", "second"]
        .into_iter()
        .find(|n| text.contains(n))
        .unwrap_or("?")
        .to_string()
}

/// An SSE stream over HTTP/1.1 on `tls`, read raw.
struct RawStream {
    tls: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl RawStream {
    async fn open(mut tls: TlsStream<TcpStream>, path: &str) -> RawStream {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut stream = RawStream {
            tls,
            buf: Vec::new(),
        };
        stream.until("HTTP/1.1 200 OK").await;
        stream
    }

    /// Reads until `text` has arrived; what came before it is dropped.
    async fn until(&mut self, text: &str) {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(at) = find(&self.buf, text.as_bytes()) {
                    self.buf.drain(..at + text.len());
                    return;
                }
                let mut chunk = [0u8; 16 << 10];
                let n = self.tls.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the stream ended before {text:?}");
                self.buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{text:?} in time"))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_is_served_to_new_connections_while_an_open_stream_carries_on() {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("tls-reload");
    let env = spawn_tls(&dir, &ca.leaf("first"), |_| {}).await;
    let addr = env.app.local_addr();
    let h1 = client_config(&ca.pem(), &[b"http/1.1"]);

    let tls = connect(addr, h1.clone()).await;
    assert_eq!(served_name(&tls), "first");
    let mut open = RawStream::open(tls, "/stream/pods").await;
    open.until("k8s.io/initial-events-end").await;

    // The key first, then the certificate: for a moment the pair does not
    // match, and the old one is still served.
    let second = ca.leaf("second");
    dir.write("tls.key", &second.1);
    dir.write("tls.crt", &second.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    loop {
        ticks.tick().await;
        let tls = connect(addr, h1.clone()).await;
        if served_name(&tls) == "second" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "new connections still get the first certificate after 10 s"
        );
    }

    // The stream opened before carries on, on its own session.
    env.sim
        .create(
            "pods",
            pod("after-rotation").ns("web").node("node-1").build(),
        )
        .unwrap();
    open.until("\"name\":\"after-rotation\"").await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_or_key_is_a_start_up_error_naming_the_file() {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("tls-bad");
    let (cert, key) = ca.leaf("first");
    let (_, other_key) = ca.leaf("second");
    let sim = seeded(1);
    let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let cases = [
        (
            "garbage.crt",
            "not a certificate\n".to_string(),
            "tls.key",
            key.clone(),
            "holds no PEM certificate",
        ),
        (
            "tls.crt",
            cert.clone(),
            "other.key",
            other_key,
            "is not the private key",
        ),
        (
            "tls.crt",
            cert.clone(),
            "cert-as.key",
            cert.clone(),
            "holds no PEM private key",
        ),
        (
            "truncated.crt",
            cert[..cert.len() / 2].to_string(),
            "tls.key",
            key.clone(),
            "truncated.crt",
        ),
    ];
    for (cert_name, cert_pem, key_name, key_pem, says) in cases {
        let mut cfg = test_config(&[]);
        cfg.tls.cert_file = Some(dir.write(cert_name, &cert_pem));
        cfg.tls.key_file = Some(dir.write(key_name, &key_pem));
        let client = kube::Client::try_from(server.client_config()).unwrap();
        let err = match kubefan::app::App::build(cfg, client).await {
            Ok(_) => panic!("{cert_name} + {key_name} started"),
            Err(err) => err.to_string(),
        };
        assert!(err.contains(says), "{err}");
        assert!(err.contains(cert_name) || err.contains(key_name), "{err}");
    }
    let mut cfg = test_config(&[]);
    cfg.tls.cert_file = Some(dir.path("missing.crt"));
    cfg.tls.key_file = Some(dir.write("tls.key", &key));
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let err = kubefan::app::App::build(cfg, client)
        .await
        .err()
        .expect("a missing file is an error")
        .to_string();
    assert!(
        err.contains("cannot read --tls-cert-file") && err.contains("missing.crt"),
        "{err}"
    );
    server.stop().await;
}

/// An HTTP/2 stream's response: its status and its data as it comes, each
/// piece's window given back only when `read` says so.
struct H2Stream {
    body: h2::RecvStream,
    buf: Vec<u8>,
}

impl H2Stream {
    async fn open(send: &mut h2::client::SendRequest<Bytes>, path: &str) -> H2Stream {
        let req = http::Request::get(format!("https://127.0.0.1{path}"))
            .body(())
            .unwrap();
        let (response, _) = send.send_request(req, true).unwrap();
        let response = tokio::time::timeout(WAIT, response)
            .await
            .expect("response in time")
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "{path}"
        );
        H2Stream {
            body: response.into_body(),
            buf: Vec::new(),
        }
    }

    /// Reads (and gives the window back) until `text` has arrived; returns
    /// what came before it.
    async fn until(&mut self, text: &str) -> String {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(at) = find(&self.buf, text.as_bytes()) {
                    let before: Vec<u8> = self.buf.drain(..at + text.len()).collect();
                    return String::from_utf8_lossy(&before[..at]).into_owned();
                }
                let data = self
                    .body
                    .data()
                    .await
                    .unwrap_or_else(|| panic!("the stream ended before {text:?}"))
                    .unwrap();
                let _ = self.body.flow_control().release_capacity(data.len());
                self.buf.extend_from_slice(&data);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{text:?} in time"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_that_does_not_read_is_lapped_while_another_on_its_connection_gets_every_event()
 {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("h2-lap");
    let env = spawn_tls(&dir, &ca.leaf("first"), |cfg| {
        cfg.upstream.log_limits.max_events = 20;
    })
    .await;
    let tls = connect(env.app.local_addr(), client_config(&ca.pem(), &[b"h2"])).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // A small window per stream, a large one for the connection (as
    // browsers have): one stalled stream cannot take the connection's.
    let (mut send, conn) = h2::client::Builder::new()
        .initial_window_size(8 << 10)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);

    let path = "/stream/pods?namespace=h2";
    let mut reader = H2Stream::open(&mut send, path).await;
    let mut stalled = H2Stream::open(&mut send, path).await;
    reader.until("k8s.io/initial-events-end").await;
    stalled.until("k8s.io/initial-events-end").await;

    // 100 pods of ~2 KB, each read by the reading stream before the next
    // is made: far more than the stalled stream's window, and five times
    // the log.
    for i in 0..100 {
        env.sim
            .create(
                "pods",
                pod(&format!("p{i:03}")).ns("h2").node("node-1").build(),
            )
            .unwrap();
        let before = reader.until(&format!("\"name\":\"p{i:03}\"")).await;
        assert!(!before.contains("RESET"), "the reading stream was reset");
    }

    // Now the stalled one reads: what its window held, then a RESET and a
    // fresh snapshot with every pod, then its end marker.
    let before = stalled.until("event: RESET").await;
    assert!(
        before.contains("\"name\":\"p000\""),
        "it had some events before"
    );
    let snapshot = stalled.until("k8s.io/initial-events-end").await;
    for i in 0..100 {
        assert!(
            snapshot.contains(&format!("\"name\":\"p{i:03}\"")),
            "p{i:03} in the fresh snapshot"
        );
    }
    let metrics = env.app.metrics().encode();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kubefan_cursors_lapped_total") && !l.ends_with(" 0")),
        "{metrics}"
    );

    // Both streams were on this one connection.
    drop((send, reader, stalled));
    conn.abort();
    env.stop().await;
}

/// `name`'s value in the gateway's metrics (summed over its label sets
/// when `labels` is empty).
fn metric_value(env: &TestEnv, name: &str, labels: &str) -> u64 {
    env.app
        .metrics()
        .encode()
        .lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter(|l| {
            l.starts_with(labels) && (labels.is_empty() || l[labels.len()..].starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// An HTTP/2 connection with no stream open for 8 keep-alive intervals
/// is closed with a GOAWAY, whether it never opened one (it answers pings,
/// as h2 clients do by themselves, and reaches no limit) or its streams
/// have ended; one with a stream open stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_with_no_stream_open_is_closed_after_a_while() {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("h2-idle");
    let env = spawn_tls(&dir, &ca.leaf("first"), |cfg| {
        cfg.stream.keepalive = Duration::from_millis(100);
    })
    .await;
    let handshake = || async {
        let tls = connect(env.app.local_addr(), client_config(&ca.pem(), &[b"h2"])).await;
        h2::client::Builder::new()
            .handshake::<_, Bytes>(tls)
            .await
            .unwrap()
    };
    // Never a stream: closed (8 × 100 ms, and a tick).
    let (_send, idle) = handshake().await;
    tokio::time::timeout(WAIT, idle)
        .await
        .expect("an idle connection is closed")
        .expect("with a GOAWAY, not an error");
    // A stream open for longer than that: kept; once it ends, closed.
    let (mut send, conn) = handshake().await;
    let mut conn = tokio::spawn(conn);
    let mut stream = H2Stream::open(&mut send, "/stream/pods").await;
    stream.until("k8s.io/initial-events-end").await;
    let kept = tokio::time::timeout(Duration::from_millis(1500), &mut conn).await;
    assert!(kept.is_err(), "closed with a stream open: {kept:?}");
    drop(stream);
    drop(send);
    tokio::time::timeout(WAIT, conn)
        .await
        .expect("closed once its stream ended")
        .unwrap()
        .expect("with a GOAWAY");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_http2_streams_are_written_by_their_hubs_writer_within_their_windows() {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("h2-batch");
    let env = spawn_tls(&dir, &ca.leaf("first"), |cfg| {
        // Ticks in the middle of it all: keep-alives written by the writer.
        cfg.stream.keepalive = Duration::from_millis(100);
    })
    .await;
    let tls = connect(env.app.local_addr(), client_config(&ca.pem(), &[b"h2"])).await;
    let (mut send, conn) = h2::client::Builder::new()
        .initial_window_size(16 << 10)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    // Two views, two streams each, on one connection.
    let mut streams = Vec::new();
    for path in [
        "/stream/pods?namespace=h2",
        "/stream/pods?namespace=h2",
        "/stream/pods",
        "/stream/pods",
    ] {
        let mut stream = H2Stream::open(&mut send, path).await;
        stream.until("k8s.io/initial-events-end").await;
        streams.push(stream);
    }
    let mut round = 0;
    let mut batched = false;
    while round < 200 && !batched {
        env.sim
            .create("pods", pod(&format!("r{round:03}")).ns("h2").build())
            .unwrap();
        for stream in &mut streams {
            let before = stream.until(&format!("\"name\":\"r{round:03}\"")).await;
            assert!(!before.contains("RESET"), "{before}");
        }
        round += 1;
        batched = metric_value(&env, "kubefan_streams_batched", "") == 4;
    }
    assert!(batched, "caught-up HTTP/2 streams are parked");
    // ~2 KB pods, past each stream's 16 KiB window several times over,
    // each read as it comes: every stream gets every one, in order.
    for i in 0..40 {
        env.sim
            .create(
                "pods",
                pod(&format!("w{i:03}")).ns("h2").node("node-1").build(),
            )
            .unwrap();
        for stream in &mut streams {
            let before = stream.until(&format!("\"name\":\"w{i:03}\"")).await;
            assert!(!before.contains("RESET"), "{before}");
            assert!(!before.contains("\"name\":\"w"), "out of order: {before}");
        }
    }
    // The window's updates wake a parked stream (h2 has one waker per
    // stream for its window and its reset): absorbed, not unparked.
    assert_eq!(
        metric_value(&env, "kubefan_streams_unparked_total", "{reason=\"Input\"}"),
        0
    );
    drop((send, streams));
    conn.abort();
    env.stop().await;
}

/// Runs `kubefan kubeconfig` with `args`; returns the kubeconfig's path.
fn kubeconfig(dir: &Dir, args: &[&str]) -> PathBuf {
    let out = dir.path("kubeconfig");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kubefan"))
        .arg("kubeconfig")
        .args(args)
        .arg("--output")
        .arg(&out)
        .env_remove("KUBEFAN_CONFIG")
        .status()
        .expect("kubefan runs");
    assert!(status.success(), "kubefan kubeconfig {args:?}");
    out
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl is on the PATH (README.md, Development)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_pods_over_https_with_the_kubeconfig_kubefan_writes() {
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("kubectl");
    let env = spawn_tls(&dir, &ca.leaf("first"), |_| {}).await;
    let ca_file = dir.write("ca.crt", &ca.pem());
    let listen = env.app.local_addr().to_string();
    let cert = dir.path("tls.crt");
    let key = dir.path("tls.key");
    let config = kubeconfig(
        &dir,
        &[
            "--listen",
            &listen,
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--tls-ca-file",
            ca_file.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("https://{listen}")), "{text}");
    assert!(!text.contains("insecure"), "verification stays on: {text}");

    let (pods, _) = env.sim.list("pods");
    let out = tokio::task::spawn_blocking(move || kubectl(&config, &["get", "pods", "-A"]))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("NAMESPACE"), "{stdout}");
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert!(stdout.contains(name), "{name} missing from\n{stdout}");
    }
    // kubectl speaks HTTP/2 when offered.
    let metrics = env.app.metrics().encode();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kubefan_connections_total{protocol=\"H2\"}")),
        "{metrics}"
    );

    // The served chain stands for the CA when none is given: a
    // self-signed certificate is its own.
    let self_signed = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    dir.write("tls.crt", &self_signed.cert.pem());
    dir.write("tls.key", &self_signed.signing_key.serialize_pem());
    let config = kubeconfig(
        &dir,
        &[
            "--listen",
            &listen,
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
        ],
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    loop {
        ticks.tick().await;
        let config = config.clone();
        let out = tokio::task::spawn_blocking(move || kubectl(&config, &["get", "pods", "-A"]))
            .await
            .unwrap();
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).starts_with("NAMESPACE"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubectl never trusted the reloaded self-signed certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    env.stop().await;
}

/// A WebSocket over TLS to `url` (HTTP/1.1 by ALPN), and the handshake's
/// response.
async fn wss(
    env: &TestEnv,
    ca: &Authority,
    url: &str,
) -> (
    tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>>,
    tokio_tungstenite::tungstenite::handshake::client::Response,
) {
    let tls = connect(
        env.app.local_addr(),
        client_config(&ca.pem(), &[b"http/1.1"]),
    )
    .await;
    tokio_tungstenite::client_async(url, tls)
        .await
        .expect("WebSocket handshake over TLS")
}

/// A `/ws` socket over TLS with subscription `a` to pods (of `namespace`,
/// or all), its snapshot read and the subscription parked with its hub's
/// writer ([`until_wss_batched`], its changes named after `tag`).
async fn wss_mux_parked(
    env: &TestEnv,
    ca: &Authority,
    namespace: Option<&str>,
    tag: &str,
) -> tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>> {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = wss(env, ca, "wss://127.0.0.1/ws").await;
    let mut subscribe = serde_json::json!({"op": "subscribe", "id": "a", "resource": "pods"});
    if let Some(ns) = namespace {
        subscribe["namespace"] = ns.into();
    }
    ws.send(Message::text(subscribe.to_string())).await.unwrap();
    loop {
        if let Message::Text(text) = next_frame(&mut ws).await
            && text.contains("k8s.io/initial-events-end")
        {
            break;
        }
    }
    until_wss_batched(env, &mut ws, tag).await;
    ws
}

/// The next frame off `ws`, in time.
async fn next_frame(
    ws: &mut tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>>,
) -> tokio_tungstenite::tungstenite::Message {
    use futures::StreamExt;
    tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("a message in time")
        .expect("the socket is open")
        .expect("a frame")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_subscriptions_over_tls_are_written_by_their_hubs_writer_through_the_session() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("wss-mux");
    let env = spawn_tls(&dir, &ca.leaf("first"), |_| {}).await;
    // Caught up: parked with its hub's writer, whose frames (spliced with
    // `{"sub":"a",`) go through the socket's TLS session.
    let mut ws = wss_mux_parked(&env, &ca, Some("wss"), "mux").await;
    for i in 0..20 {
        let name = format!("parked-{i}");
        env.sim
            .create("pods", pod(&name).ns("wss").node("node-1").build())
            .unwrap();
        loop {
            if let Message::Text(text) = next_frame(&mut ws).await
                && text.contains(&format!("\"name\":\"{name}\""))
            {
                assert!(text.starts_with(r#"{"sub":"a","#), "{text}");
                break;
            }
        }
    }
    assert_eq!(metric_value(&env, "kubefan_streams_batched", ""), 1);
    // The control loop answers through the same session meanwhile.
    ws.send(Message::Ping(Bytes::from_static(b"still there")))
        .await
        .unwrap();
    loop {
        if let Message::Pong(payload) = next_frame(&mut ws).await {
            assert_eq!(&payload[..], b"still there");
            break;
        }
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_subscription_over_tls_whose_client_stops_reading_gets_every_frame_whole_in_order() {
    use tokio_tungstenite::tungstenite::Message;
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("wss-slow");
    let env = spawn_tls(&dir, &ca.leaf("first"), |_| {}).await;
    env.sim
        .create("pods", pod("big").ns("web").build())
        .unwrap();
    let mut ws = wss_mux_parked(&env, &ca, None, "slow").await;
    // ~12 MB of changes while the client reads nothing: more than the
    // sockets' buffers. Each frame (~6 KB) fits the session's buffer, so
    // a direct write the socket takes only part of leaves records in the
    // session for the socket's control loop; then frames queue in the
    // outbox, and the subscription goes back to its task and returns.
    const BATCHES: usize = 40;
    let blob = "x".repeat(4 << 10);
    let mut last = 0;
    for batch in 0..BATCHES {
        for i in 0..50 {
            let o = env
                .sim
                .merge_patch(
                    "pods",
                    Some("web"),
                    "big",
                    &serde_json::json!({"metadata": {"annotations": {"blob": format!("{batch}-{i}-{blob}")}}}),
                )
                .unwrap();
            last = crate::support::rv_of(&o);
        }
    }
    let mut seen = Vec::new();
    loop {
        let Message::Text(text) = next_frame(&mut ws).await else {
            continue;
        };
        let msg: serde_json::Value = serde_json::from_str(&text).expect("a whole JSON frame");
        assert_eq!(msg["sub"], "a", "{msg}");
        assert!(
            ["ADDED", "MODIFIED", "BOOKMARK"].contains(&msg["type"].as_str().unwrap_or("")),
            "no reset or error: {msg}"
        );
        let object = &msg["object"];
        if object["metadata"]["name"] != "big" || msg["type"] != "MODIFIED" {
            continue;
        }
        let blob = object["metadata"]["annotations"]["blob"].as_str().unwrap();
        seen.push(blob.split('-').take(2).collect::<Vec<_>>().join("-"));
        if crate::support::rv_of(object) == last {
            break;
        }
    }
    let expected: Vec<String> = (0..BATCHES)
        .flat_map(|b| (0..50).map(move |i| format!("{b}-{i}")))
        .collect();
    assert!(seen == expected, "every change once, in order");
    env.stop().await;
}

/// Changes in namespace `wss`, each read off `ws`, until its stream is
/// held by its hub's writer (a stream is parked once it has written what
/// it had and is caught up).
async fn until_wss_batched(
    env: &TestEnv,
    ws: &mut tokio_tungstenite::WebSocketStream<TlsStream<TcpStream>>,
    tag: &str,
) {
    use tokio_tungstenite::tungstenite::Message;
    for round in 0..200 {
        if metric_value(env, "kubefan_streams_batched", "") == 1 {
            return;
        }
        let name = format!("{tag}-{round}");
        env.sim
            .create("pods", pod(&name).ns("wss").build())
            .unwrap();
        loop {
            if let Message::Text(text) = next_frame(ws).await
                && text.contains(&format!("\"name\":\"{name}\""))
            {
                break;
            }
        }
    }
    panic!("a caught-up WebSocket over TLS is written by its hub's writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_over_tls_is_taken_over_and_reads_and_writes_through_the_session() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("wss");
    let env = spawn_tls(&dir, &ca.leaf("first"), |_| {}).await;
    let (mut ws, response) = wss(&env, &ca, "wss://127.0.0.1/stream/pods?namespace=wss").await;
    assert_eq!(response.status(), 101);
    loop {
        if let Message::Text(text) = next_frame(&mut ws).await
            && text.contains("k8s.io/initial-events-end")
        {
            break;
        }
    }
    // Caught up, its hub's writer holds it and writes through its session.
    until_wss_batched(&env, &mut ws, "before").await;
    // A client frame, decrypted by the taken-over session, answered
    // through it (by its task: then back to the writer).
    ws.send(Message::Ping(Bytes::from_static(b"are you there")))
        .await
        .unwrap();
    loop {
        if let Message::Pong(payload) = next_frame(&mut ws).await {
            assert_eq!(&payload[..], b"are you there");
            break;
        }
    }
    until_wss_batched(&env, &mut ws, "after").await;
    env.sim
        .create("pods", pod("over-wss").ns("wss").node("node-1").build())
        .unwrap();
    loop {
        if let Message::Text(text) = next_frame(&mut ws).await
            && text.contains("\"name\":\"over-wss\"")
        {
            break;
        }
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_tls_streams_are_written_together_through_their_sessions() {
    use crate::sse::batching_env;
    let ca = Authority::new("kubefan test CA");
    let dir = Dir::new("tls-batch");
    let leaf = ca.leaf("127.0.0.1");
    let mut cfg = test_config(&["pods"]);
    cfg.tls.cert_file = Some(dir.write("tls.crt", &leaf.0));
    cfg.tls.key_file = Some(dir.write("tls.key", &leaf.1));
    let mut env = batching_env(cfg).await;
    env.base = format!("https://{}", env.app.local_addr());
    env.http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .build()
        .unwrap();
    // Each stream's events are encrypted into its own session by its hub's
    // writer, and arrive whole, once, in order.
    crate::sse::batched_sse(&env).await;
    env.stop().await;
}
