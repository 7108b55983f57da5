//! The reconnect storm: N SSE subscribers on one kubefan, each holding its
//! snapshot; when their streams end (the gateway killed and started again
//! by `run-storm.sh`), each comes back after the `retry:` hint the gateway
//! gave its stream, as browsers do, with the `Last-Event-ID` it last saw,
//! and is consistent again once its resume or fresh snapshot is complete.
//! Reports how long the storm took, from the first stream ending to the
//! last subscriber consistent again, and how many came back by a resume.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use memchr::memmem;
use tokio::sync::{Barrier, Semaphore};

use crate::subscriber::{SNAPSHOT_END, client_for};

/// How long a resumed stream may stay quiet after its first bytes before
/// it counts as current (a RESET would have come at once).
const RESUME_QUIET: Duration = Duration::from_millis(250);
use crate::worker::local_address;

#[derive(clap::Args)]
pub struct StormArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base: String,
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Connections being opened at once (the first connection burst and
    /// every retry share this bound).
    #[arg(long, default_value_t = 512)]
    concurrency: usize,
    /// Written once every subscriber holds its snapshot (the script then
    /// kills the gateway).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Gives up this long after every subscriber was connected.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
}

/// One subscriber's stream: read up to its snapshot's end; the `retry:`
/// hint and the newest id it carried.
struct Stream {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    retry_ms: u64,
    last_id: Option<String>,
    /// When it became current (its last bytes before the quiet, or its
    /// snapshot's end).
    current_at: Instant,
    /// It became current by a resume (no RESET, no fresh snapshot).
    resumed: bool,
}

/// Opens `/stream/pods` (resuming from `last_id`) and reads until the
/// snapshot is complete, or the resume is acknowledged (its first bookmark
/// or event).
async fn open(
    client: &reqwest::Client,
    base: &str,
    last_id: Option<&str>,
) -> anyhow::Result<Stream> {
    let mut req = client.get(format!("{base}/stream/pods"));
    if let Some(id) = last_id {
        req = req.header("Last-Event-ID", id);
    }
    let resp = req.send().await?;
    if !resp.status().is_success() {
        bail!("HTTP {}", resp.status());
    }
    let mut body = resp.bytes_stream().boxed();
    let (mut retry_ms, mut last) = (2000, last_id.map(str::to_string));
    let mut text: Vec<u8> = Vec::new();
    let mut reset = false;
    let mut current_at = Instant::now();
    loop {
        // A resume kubefan can serve starts with the missed changes, if
        // any, and sends nothing more while nothing changes; one it cannot
        // serve starts with a RESET at once. So a resumed stream that stays
        // quiet for RESUME_QUIET after its first bytes is current.
        let next = if last_id.is_some() && !reset && !text.is_empty() {
            match tokio::time::timeout(RESUME_QUIET, body.next()).await {
                Ok(next) => next,
                Err(_) => {
                    return Ok(Stream {
                        body,
                        retry_ms,
                        last_id: last,
                        current_at,
                        resumed: true,
                    });
                }
            }
        } else {
            body.next().await
        };
        let chunk = next.context("stream ended before it was current")??;
        text.extend_from_slice(&chunk);
        current_at = Instant::now();
        reset |= memmem::find(&text, b"event: RESET").is_some();
        if let Some(at) = memmem::find(&text, b"retry: ") {
            let digits: Vec<u8> = text[at + 7..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .copied()
                .collect();
            if let Ok(ms) = String::from_utf8_lossy(&digits).parse() {
                retry_ms = ms;
            }
        }
        for line in text.split(|b| *b == b'\n') {
            if let Some(id) = line.strip_prefix(b"id: ") {
                last = Some(String::from_utf8_lossy(id).into_owned());
            }
        }
        // A fresh snapshot (the first, or after a RESET) ends with its
        // marker.
        if memmem::find(&text, SNAPSHOT_END).is_some() {
            return Ok(Stream {
                body,
                retry_ms,
                last_id: last,
                current_at,
                resumed: false,
            });
        }
        // Keep the tail only: snapshots are megabytes.
        let keep = text.len().saturating_sub(4096);
        text.drain(..keep);
    }
}

pub async fn storm(args: StormArgs) -> anyhow::Result<()> {
    let connecting = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let connected = Arc::new(Barrier::new(args.subscribers + 1));
    let started = Instant::now();
    let mut tasks = FuturesUnordered::new();
    for i in 0..args.subscribers {
        let (base, connecting, connected) =
            (args.base.clone(), connecting.clone(), connected.clone());
        let local: IpAddr = local_address(i, 2, 8);
        tasks.push(tokio::spawn(async move {
            let client = client_for(local, None)?;
            let mut stream = {
                let _permit = connecting.acquire().await?;
                open(&client, &base, None).await?
            };
            connected.wait().await;
            // Until the gateway goes away.
            while let Some(Ok(chunk)) = stream.body.next().await {
                for line in chunk.split(|b| *b == b'\n') {
                    if let Some(id) = line.strip_prefix(b"id: ") {
                        stream.last_id = Some(String::from_utf8_lossy(id).into_owned());
                    }
                }
            }
            let dropped = Instant::now();
            let mut attempts = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(stream.retry_ms)).await;
                attempts += 1;
                let _permit = connecting.acquire().await?;
                if let Ok(back) = open(&client, &base, stream.last_id.as_deref()).await {
                    return anyhow::Ok((
                        dropped,
                        back.current_at,
                        attempts,
                        back.retry_ms,
                        back.resumed,
                    ));
                }
                anyhow::ensure!(attempts < 100, "subscriber {i} never came back");
            }
        }));
    }
    connected.wait().await;
    let connect_ms = started.elapsed().as_millis();
    eprintln!("CONNECTED {} in {connect_ms} ms", args.subscribers);
    if let Some(path) = &args.ready_file {
        std::fs::write(path, format!("{}\n", args.subscribers))?;
    }
    let mut results = Vec::with_capacity(args.subscribers);
    let deadline = Duration::from_secs(args.timeout_secs);
    while let Some(r) = tokio::time::timeout(deadline, tasks.next())
        .await
        .context("storm did not settle in time")?
    {
        results.push(r??);
    }
    let first_drop = results
        .iter()
        .map(|r| r.0)
        .min()
        .context("no subscribers")?;
    let last_back = results
        .iter()
        .map(|r| r.1)
        .max()
        .context("no subscribers")?;
    let attempts: u32 = results.iter().map(|r| r.2).sum();
    let hints: Vec<u64> = results.iter().map(|r| r.3).collect();
    let resumed = results.iter().filter(|r| r.4).count();
    println!(
        "{}",
        serde_json::json!({
            "subscribers": args.subscribers,
            "connect_all_ms": connect_ms,
            "storm_ms": last_back.duration_since(first_drop).as_millis(),
            "reconnect_attempts": attempts,
            // Back by a resume, and by a RESET and a fresh snapshot.
            "resumed": resumed,
            "snapshots_again": results.len() - resumed,
            "retry_hint_ms": {"min": hints.iter().min(), "max": hints.iter().max()},
        })
    );
    Ok(())
}
