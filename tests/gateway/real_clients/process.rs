//! A real client as a child process: its stdout is a stream of JSON values
//! folded into a state the test waits on, its stderr is kept (the last
//! lines) for failure messages, and it is killed when dropped, also when a
//! test panics. Its stdin stays open: the client programs exit when it
//! closes.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

/// Every wait on a real client is bounded by this: it includes process
/// start-up and client-go's back-off while kubefan restarts.
pub const CLIENT_WAIT: Duration = Duration::from_secs(60);

/// Lines of a client's stderr kept for failure messages.
const STDERR_LINES: usize = 40;

/// A program the test runs, from the environment variable `var` that
/// `conformance/run` sets. Missing is a failure, never a skip.
pub fn program(var: &str) -> PathBuf {
    let path = std::env::var_os(var).unwrap_or_else(|| {
        panic!(
            "{var} is not set: conformance/run builds the real clients and sets it \
             (README, Development)"
        )
    });
    let path = PathBuf::from(path);
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

pub struct ClientProcess<S> {
    pub name: String,
    child: Child,
    /// Held open: the client exits when it closes.
    _stdin: Option<ChildStdin>,
    state_rx: watch::Receiver<S>,
    /// Becomes true when stdout ends (the process is exiting).
    ended_rx: watch::Receiver<bool>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl<S: Clone + Default + Send + Sync + 'static> ClientProcess<S> {
    /// Starts `command`; every JSON value it prints is folded into the
    /// state with `fold`.
    pub fn spawn(
        name: &str,
        mut command: Command,
        mut fold: impl FnMut(&mut S, Value) + Send + 'static,
    ) -> ClientProcess<S> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout piped");
        let stderr_pipe = child.stderr.take().expect("stderr piped");
        let (state_tx, state_rx) = watch::channel(S::default());
        let (ended_tx, ended_rx) = watch::channel(false);
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let out_tail = stderr.clone();
        let label = name.to_string();
        tokio::spawn(async move {
            // Also when `fold` panics on what the client printed.
            let _ended = EndOnDrop(ended_tx);
            // Values may be one a line or pretty-printed over many lines.
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 64 << 10];
            loop {
                let n = match stdout.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                let mut values = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
                let mut folded = Vec::new();
                let mut bad = None;
                for value in values.by_ref() {
                    match value {
                        Ok(v) => folded.push(v),
                        Err(e) if e.is_eof() => break,
                        Err(e) => {
                            bad = Some(e);
                            break;
                        }
                    }
                }
                let consumed = values.byte_offset();
                if let Some(e) = bad {
                    let text =
                        String::from_utf8_lossy(&buf[consumed..buf.len().min(consumed + 200)]);
                    push_line(
                        &out_tail,
                        format!("[test] {label} printed what is not JSON ({e}): {text:?}"),
                    );
                    break;
                }
                buf.drain(..consumed);
                if !folded.is_empty() {
                    state_tx.send_modify(|state| {
                        for v in folded {
                            fold(state, v);
                        }
                    });
                }
            }
        });
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                push_line(&tail, line);
            }
        });
        ClientProcess {
            name: name.to_string(),
            child,
            _stdin: stdin,
            state_rx,
            ended_rx,
            stderr,
        }
    }

    /// The state folded so far.
    pub fn state(&self) -> S {
        self.state_rx.borrow().clone()
    }

    /// The last lines the client wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap();
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Waits until the state satisfies `done`; panics with `describe` of the
    /// last state and the client's stderr if the client ends first or
    /// [`CLIENT_WAIT`] passes.
    pub async fn wait_for(&mut self, done: impl Fn(&S) -> bool, describe: impl Fn(&S) -> String) {
        let mut ended = self.ended_rx.clone();
        let outcome = tokio::time::timeout(CLIENT_WAIT, async {
            tokio::select! {
                reached = self.state_rx.wait_for(|s| done(s)) => reached.is_ok(),
                _ = ended.wait_for(|e| *e) => false,
            }
        })
        .await;
        if outcome != Ok(true) {
            let why = match outcome {
                Err(_) => format!("not within {CLIENT_WAIT:?}"),
                Ok(_) => "the client ended first".to_string(),
            };
            panic!(
                "{}: {why}: {}\n--- its stderr:\n{}",
                self.name,
                describe(&self.state()),
                self.stderr_tail()
            );
        }
    }

    /// Waits until the client exits by itself (its stream ended).
    pub async fn exited(&mut self) -> ExitStatus {
        tokio::time::timeout(CLIENT_WAIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit within {CLIENT_WAIT:?}", self.name))
            .expect("wait for child")
    }
}

/// Says that stdout has ended when the task reading it ends, however.
struct EndOnDrop(watch::Sender<bool>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// Keeps the last [`STDERR_LINES`] lines.
fn push_line(tail: &Mutex<VecDeque<String>>, line: String) {
    let mut tail = tail.lock().unwrap();
    if tail.len() == STDERR_LINES {
        tail.pop_front();
    }
    tail.push_back(line);
}

/// Runs `program args` to completion (bounded by [`CLIENT_WAIT`]) and
/// returns its stdout; panics with its stderr if it fails.
pub async fn run_to_end<I, A>(program: &PathBuf, args: I, envs: &[(&str, &OsStr)]) -> Vec<u8>
where
    I: IntoIterator<Item = A>,
    A: AsRef<OsStr>,
{
    let mut command = Command::new(program);
    command.args(args).kill_on_drop(true);
    for (k, v) in envs {
        command.env(k, v);
    }
    let output = tokio::time::timeout(CLIENT_WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish in time", program.display()))
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} failed ({}): {}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A certificate for kubefan, signed by a test CA, written for a client
/// that verifies it (kubectl sends no bearer token over plain HTTP).
pub struct TlsFiles {
    pub dir: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_file: PathBuf,
}

impl TlsFiles {
    /// In a fresh directory named after `name`.
    pub fn new(name: &str) -> TlsFiles {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kubefan-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let authority = crate::support::Authority::new("kubefan test CA");
        let (cert, key) = authority.leaf("kubefan");
        let files = TlsFiles {
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
            ca_file: dir.join("ca.crt"),
            dir,
        };
        std::fs::write(&files.cert_file, cert).unwrap();
        std::fs::write(&files.key_file, key).unwrap();
        std::fs::write(&files.ca_file, authority.pem()).unwrap();
        files
    }
}
