//! The gateway under attack, and what the attack did to everyone else.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Every wait of the harness itself is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);
/// How long an attacking connection may last before it is refused or cut.
pub const CUT_WITHIN: Duration = Duration::from_secs(3);
/// How long each attack goes on, a connection after another.
pub const ATTACK_FOR: Duration = Duration::from_secs(2);
/// The gateway's churn: the viewer's events come this often.
const CHURN_PER_SECOND: &str = "20";

/// The goals: the viewer's longest wait for a change, a fresh request's
/// longest wait for its answer, and the RSS an attack may leave behind.
const LONGEST_GAP: Duration = Duration::from_secs(1);
const SLOWEST_ANSWER: Duration = Duration::from_millis(100);
const RSS_LEFT: u64 = 10 << 20;

/// One gateway (and its figures) at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A connection to the gateway, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub type Conn = Pin<Box<dyn Io>>;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Plain,
    /// HTTPS; HTTP/2 by ALPN where asked for.
    Tls,
}

/// `kubefan demo` running as a child process.
pub struct Gateway {
    child: Child,
    pub addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    dir: PathBuf,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Gateway {
    /// Starts the demo on a port of its own and waits until it is ready.
    pub async fn start(scheme: Scheme) -> Gateway {
        let turn = ONE_AT_A_TIME.lock().await;
        let dir = std::env::temp_dir().join(format!(
            "kubefan-hostile-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefan"));
        cmd.args(["demo", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(["--churn-rate", CHURN_PER_SECOND])
            .env_remove("KUBEFAN_CONFIG")
            .env("RUST_LOG", "info,kubefan::access=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let tls = (scheme == Scheme::Tls).then(|| {
            let (ca, cert, key) = certificates();
            std::fs::write(dir.join("tls.crt"), cert).unwrap();
            std::fs::write(dir.join("tls.key"), key).unwrap();
            cmd.arg("--tls-cert-file")
                .arg(dir.join("tls.crt"))
                .arg("--tls-key-file")
                .arg(dir.join("tls.key"));
            client_config(&ca)
        });
        let mut child = cmd.spawn().expect("the kubefan binary runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("\"kubefan listening\"") {
                    let log: serde_json::Value = serde_json::from_str(&line).unwrap();
                    return log["fields"]["addr"].as_str().unwrap().parse().unwrap();
                }
            }
            panic!("kubefan exited before it listened");
        })
        .await
        .expect("kubefan listens in time");
        // The log goes on; it must never fill the pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let gw = Gateway {
            child,
            addr,
            tls,
            dir,
            _turn: turn,
        };
        tokio::time::timeout(WAIT, async {
            while gw.get("/readyz").await.0 != 200 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("kubefan ready in time");
        gw
    }

    /// The gateway's resident memory, in bytes.
    pub fn rss(&self) -> u64 {
        let pid = self.child.id().expect("kubefan is running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status");
        kb << 10
    }

    /// The CPU time the gateway has used so far (user and system).
    fn cpu(&self) -> Duration {
        let pid = self.child.id().expect("kubefan is running");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th of the line (proc(5)), in clock ticks.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|f| f.parse().unwrap())
            .collect();
        // SC_CLK_TCK is 100 on Linux.
        Duration::from_millis((fields[0] + fields[1]) * 10)
    }

    /// A new connection: HTTP/1.1, or HTTP/2 over TLS if `h2`.
    pub async fn connect(&self, h2: bool) -> Conn {
        self.connect_from("127.0.0.1".parse().unwrap(), h2).await
    }

    /// [`Gateway::connect`] from another loopback address: another client
    /// as per-address limits count them.
    pub async fn connect_from(&self, source: std::net::IpAddr, h2: bool) -> Conn {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source, 0)).unwrap();
        let tcp = socket.connect(self.addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let Some(cfg) = &self.tls else {
            assert!(!h2, "HTTP/2 is served over TLS only");
            return Box::pin(tcp);
        };
        let mut cfg = (**cfg).clone();
        cfg.alpn_protocols = vec![if h2 {
            b"h2".to_vec()
        } else {
            b"http/1.1".to_vec()
        }];
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        Box::pin(tls)
    }

    /// `GET path` on a fresh connection: the status and the body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let mut conn = self.connect(false).await;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        let _ = conn.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).to_string();
        let status = text
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("GET {path}: {text:?}"));
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    /// How long a fresh connection waits for the head of `GET path`.
    async fn time_to_head(&self, path: &str) -> Duration {
        let start = Instant::now();
        let mut conn = self.connect(false).await;
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tokio::time::timeout(WAIT, conn.read(&mut byte))
                .await
                .unwrap_or_else(|_| panic!("GET {path} answered"))
                .unwrap();
            assert!(n > 0, "GET {path}: the connection closed");
            head.extend_from_slice(&byte[..n]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "GET {path}");
        start.elapsed()
    }

    /// A counter's value in `/metrics` (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

/// A legitimate SSE viewer of the pods, noting when each change arrives.
struct Viewer {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Viewer {
    async fn start(gw: &Gateway) -> Viewer {
        let mut conn = gw.connect(false).await;
        conn.write_all(b"GET /stream/pods HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let (seen, (count_tx, mut count_rx)) = (arrivals.clone(), tokio::sync::watch::channel(0));
        let task = tokio::spawn(async move {
            const END: &[u8] = b"initial-events-end";
            let mut buf = vec![0u8; 64 << 10];
            // The end of the last read, for a marker split between reads.
            let mut tail = Vec::new();
            let mut snapshot_done = false;
            loop {
                let n = conn.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return;
                }
                let carried = tail.len();
                tail.extend_from_slice(&buf[..n]);
                // What this read brought, with enough before it for a
                // marker split between reads.
                let fresh = |len: usize| &tail[carried.saturating_sub(len - 1)..];
                if !snapshot_done {
                    // The end of the snapshot is marked (PROTOCOL.md).
                    snapshot_done = fresh(END.len()).windows(END.len()).any(|w| w == END);
                } else if fresh(7).windows(7).any(|w| w == b"event: ") {
                    let mut seen = seen.lock().unwrap();
                    seen.push(Instant::now());
                    count_tx.send_replace(seen.len());
                }
                tail.drain(..tail.len().saturating_sub(END.len()));
            }
        });
        tokio::time::timeout(WAIT, count_rx.wait_for(|n| *n >= 10))
            .await
            .expect("the viewer gets changes")
            .unwrap();
        Viewer { arrivals, task }
    }

    /// The longest wait for a change between `from` and `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let arrivals = self.arrivals.lock().unwrap();
        let mut last = from;
        let mut longest = Duration::ZERO;
        for &at in arrivals.iter().filter(|&&at| at > from && at <= to) {
            longest = longest.max(at - last);
            last = at;
        }
        longest.max(to - last)
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an attack did to everyone else.
struct Report {
    /// How long the attack went on, and the gateway's CPU time meanwhile
    /// (the viewer's, the probes' and the churn's included).
    attack: Duration,
    cpu: Duration,
    /// The slowest fresh request before the attack.
    slowest_before: Duration,
    longest_gap: Duration,
    slowest_readyz: Duration,
    slowest_subscriber: Duration,
    probes: usize,
    rss_before: u64,
    rss_after: u64,
}

/// One line for the README's figures.
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} s of attack, gateway CPU {:.2} s; viewer's longest gap {:?}; \
             slowest fresh /readyz {:?}, new subscriber {:?} ({:?} before; {} probes); \
             RSS {:.1} MB -> {:.1} MB",
            self.attack.as_secs_f64(),
            self.cpu.as_secs_f64(),
            self.longest_gap,
            self.slowest_readyz,
            self.slowest_subscriber,
            self.slowest_before,
            self.probes,
            self.rss_before as f64 / 1048576.0,
            self.rss_after as f64 / 1048576.0,
        )
    }
}

/// The gateway's CPU time during an attack, and the attack's length.
pub struct Spent {
    pub cpu: Duration,
    pub wall: Duration,
}

/// Runs `attack` against `gw` while a viewer watches and fresh requests
/// probe it every 100 ms, then checks the goals (see the crate docs).
pub async fn withstands(gw: &Gateway, name: &str, attack: impl Future<Output = ()>) -> Spent {
    let viewer = Viewer::start(gw).await;
    let mut quiet = Duration::ZERO;
    for _ in 0..5 {
        quiet = quiet.max(gw.time_to_head("/readyz").await);
        quiet = quiet.max(gw.time_to_head("/stream/pods").await);
    }
    let rss_before = gw.rss();
    let done = AtomicBool::new(false);
    let (start, cpu_before) = (Instant::now(), gw.cpu());
    let probes = async {
        let (mut readyz, mut subscriber, mut probes) = (Duration::ZERO, Duration::ZERO, 0);
        let mut every = tokio::time::interval(Duration::from_millis(100));
        while !done.load(Ordering::Relaxed) {
            every.tick().await;
            readyz = readyz.max(gw.time_to_head("/readyz").await);
            subscriber = subscriber.max(gw.time_to_head("/stream/pods").await);
            probes += 1;
        }
        (readyz, subscriber, probes)
    };
    let attack = async {
        tokio::time::timeout(ATTACK_FOR + CUT_WITHIN + WAIT, attack)
            .await
            .expect("the attack ends");
        done.store(true, Ordering::Relaxed);
    };
    let ((slowest_readyz, slowest_subscriber, probes), ()) = tokio::join!(probes, attack);
    let longest_gap = viewer.longest_gap(start, Instant::now());
    let report = Report {
        attack: start.elapsed(),
        cpu: gw.cpu() - cpu_before,
        slowest_before: quiet,
        longest_gap,
        slowest_readyz,
        slowest_subscriber,
        probes,
        rss_before,
        rss_after: gw.rss(),
    };
    eprintln!("{name}: {report}");
    assert!(report.probes > 0, "{name}: no fresh request was tried");
    assert!(
        report.longest_gap < LONGEST_GAP,
        "{name}: the viewer waited {:?} for a change",
        report.longest_gap
    );
    assert!(
        report.slowest_readyz < SLOWEST_ANSWER && report.slowest_subscriber < SLOWEST_ANSWER,
        "{name}: fresh requests waited up to {:?} (readyz), {:?} (a new subscriber); {:?} before the attack",
        report.slowest_readyz,
        report.slowest_subscriber,
        report.slowest_before,
    );
    assert!(
        report.rss_after <= report.rss_before + RSS_LEFT,
        "{name}: RSS {} MB before, {} MB after",
        report.rss_before >> 20,
        report.rss_after >> 20
    );
    Spent {
        cpu: report.cpu,
        wall: report.attack,
    }
}

/// A CA certificate (PEM), and a server certificate for 127.0.0.1 it
/// signed, with its key (PEM).
fn certificates() -> (String, String, String) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca =
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Arc::new(cfg)
}

/// Repeats `attack` (one connection each, which must be cut or refused
/// within [`CUT_WITHIN`]) for [`ATTACK_FOR`].
pub async fn again_and_again<F, Fut>(mut attack: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let start = Instant::now();
    let (mut connections, mut longest) = (0, Duration::ZERO);
    while start.elapsed() < ATTACK_FOR {
        let began = Instant::now();
        tokio::time::timeout(CUT_WITHIN, attack())
            .await
            .expect("the attacker is cut off in time");
        longest = longest.max(began.elapsed());
        connections += 1;
    }
    eprintln!("{connections} attacking connections, the longest lasted {longest:?}");
}
