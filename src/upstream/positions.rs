//! Where each resource's hub stood, kept across a restart (`--state-dir`).
//!
//! A gateway that starts again lists the upstream afresh at its current
//! resourceVersion R. Its clients come back holding the position X they
//! had from the process that died; if anything changed meanwhile, X < R,
//! the new log starts at R, and every client gets a full snapshot again:
//! 10,000 dashboards on 1,000 pods are 24 GB through the network
//! (`loadtest/RESULTS.md`, reconnect storm). With a saved position P ≤ X,
//! the new process makes its one LIST at exactly P
//! (`resourceVersion=P&resourceVersionMatch=Exact`, served from etcd until
//! compaction:
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>)
//! and watches from P, so its log holds every change from P on and each
//! client resumes from X with only what it missed. A position the upstream
//! no longer has (410), or any other failure of that LIST, falls back to
//! the ordinary LIST at the latest: what a start without saved positions
//! does.
//!
//! The file is rewritten (to a temporary name, then renamed) every
//! [`SAVE_PERIOD`] when a position moved, and at shutdown. A process
//! killed without warning leaves positions at most that old, which only
//! means its clients' missed changes start a little earlier. Positions
//! belong to one upstream (its URL): another's are ignored.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::hub::Hub;

/// How often a moved position is written.
pub const SAVE_PERIOD: Duration = Duration::from_secs(1);

const FILE: &str = "positions.json";

/// Where the positions are kept, and for which upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionsConfig {
    pub dir: PathBuf,
    /// The upstream's identity (its URL): positions saved for another are
    /// not used.
    pub upstream: String,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    upstream: String,
    /// resourceVersion by canonical resource name.
    resources: BTreeMap<String, u64>,
}

/// The positions read at start, handed out once each, and the file they
/// are saved to.
pub struct Positions {
    file: PathBuf,
    upstream: String,
    state: Mutex<State>,
}

struct State {
    /// Read at start and not yet used by a resource's first list.
    unused: BTreeMap<String, u64>,
    /// What the file holds now. A resource not running keeps its entry, so
    /// that one started on demand by returning clients still finds its
    /// position; one the upstream has compacted away costs a LIST that
    /// answers 410.
    written: BTreeMap<String, u64>,
}

impl Positions {
    /// Reads `dir/positions.json` (creating `dir`). A missing file is no
    /// positions; an unreadable, malformed or another upstream's file is
    /// logged and ignored: it only costs the clients a fresh snapshot.
    pub fn open(cfg: &PositionsConfig) -> io::Result<Positions> {
        std::fs::create_dir_all(&cfg.dir)?;
        let file = cfg.dir.join(FILE);
        let saved = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<Saved>(&bytes) {
                Ok(saved) if saved.upstream == cfg.upstream => saved.resources,
                Ok(saved) => {
                    tracing::info!(file = %file.display(), saved_for = %saved.upstream,
                        "positions were saved for another upstream; not using them");
                    BTreeMap::new()
                }
                Err(err) => {
                    tracing::warn!(file = %file.display(), error = %err, "positions file is malformed; not using it");
                    BTreeMap::new()
                }
            },
            Err(err) if err.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(err) => {
                tracing::warn!(file = %file.display(), error = %err, "positions file unreadable; not using it");
                BTreeMap::new()
            }
        };
        if !saved.is_empty() {
            tracing::info!(file = %file.display(), resources = saved.len(), "resuming from saved positions");
        }
        Ok(Positions {
            file,
            upstream: cfg.upstream.clone(),
            state: Mutex::new(State {
                unused: saved.clone(),
                written: saved,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The saved position of `resource`, once: only a hub's first list
    /// starts from it.
    pub fn take(&self, resource: &str) -> Option<u64> {
        self.lock().unused.remove(resource)
    }

    /// Writes the synced hubs' positions over what the file holds, if
    /// that changes it.
    pub fn save(&self, hubs: &[Arc<Hub>]) -> io::Result<()> {
        let mut st = self.lock();
        let mut now = st.written.clone();
        for hub in hubs {
            if hub.is_synced() {
                now.insert(hub.name().to_owned(), hub.resource_version());
            }
        }
        if now == st.written {
            return Ok(());
        }
        let saved = Saved {
            upstream: self.upstream.clone(),
            resources: now,
        };
        write_atomically(&self.file, &serde_json::to_vec_pretty(&saved)?)?;
        st.written = saved.resources;
        Ok(())
    }

    /// Saves every [`SAVE_PERIOD`] until `stop`, then once more. A failure
    /// is logged when it starts and when it ends, not every second.
    pub async fn keep_saving(&self, hubs: impl Fn() -> Vec<Arc<Hub>>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(SAVE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = tick.tick() => false,
            };
            match self.save(&hubs()) {
                Err(err) if !failing => {
                    failing = true;
                    tracing::warn!(file = %self.file.display(), error = %err,
                        "saving positions failed; a restart will give clients snapshots");
                }
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(file = %self.file.display(), "saving positions works again");
                }
                _ => {}
            }
            if stopping {
                return;
            }
        }
    }
}

/// Replaces `file` with `bytes`: written beside it (under a name of this
/// process's own), then renamed, so a crash leaves the old file or the new
/// one, never half of one.
fn write_atomically(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = file.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{LogLimits, ResourceMeta};
    use crate::metrics::Metrics;

    /// A directory removed when the test ends.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> (TempDir, PositionsConfig) {
        let tmp = TempDir(
            std::env::temp_dir().join(format!("kubefan-positions-{}", uuid::Uuid::new_v4())),
        );
        let cfg = PositionsConfig {
            dir: tmp.0.join("state"),
            upstream: "https://10.0.0.1:6443".into(),
        };
        (tmp, cfg)
    }

    fn hub(name: &str, rv: u64) -> Arc<Hub> {
        let hub = Hub::new(
            ResourceMeta {
                name: name.into(),
                api_version: "v1".into(),
                kind: "Pod".into(),
            },
            LogLimits::default(),
            Arc::new(Metrics::new()),
        );
        hub.relist(Vec::new(), rv);
        hub
    }

    #[test]
    fn positions_survive_a_restart_once_each_and_only_for_their_upstream() {
        let (_tmp, cfg) = dir();
        let first = Positions::open(&cfg).unwrap();
        assert_eq!(first.take("pods"), None);
        first.save(&[hub("pods", 41), hub("nodes", 7)]).unwrap();

        let second = Positions::open(&cfg).unwrap();
        assert_eq!(second.take("pods"), Some(41));
        assert_eq!(second.take("pods"), None, "a position is used once");
        // Not running (nodes' hub not started again): its position is kept,
        // so it is still there after another restart.
        second.save(&[hub("pods", 50)]).unwrap();
        let third = Positions::open(&cfg).unwrap();
        assert_eq!(third.take("nodes"), Some(7));
        assert_eq!(third.take("pods"), Some(50));

        let other = Positions::open(&PositionsConfig {
            upstream: "https://10.9.9.9:6443".into(),
            ..cfg.clone()
        })
        .unwrap();
        assert_eq!(other.take("pods"), None, "another upstream's positions");

        std::fs::write(cfg.dir.join(FILE), b"{not json").unwrap();
        let broken = Positions::open(&cfg).unwrap();
        assert_eq!(broken.take("pods"), None);
        broken.save(&[hub("pods", 60)]).unwrap();
        assert_eq!(Positions::open(&cfg).unwrap().take("pods"), Some(60));
    }

    #[test]
    fn a_hub_closed_before_its_first_list_saves_no_position() {
        let (_tmp, cfg) = dir();
        Positions::open(&cfg)
            .unwrap()
            .save(&[hub("pods", 41)])
            .unwrap();
        let again = Positions::open(&cfg).unwrap();
        // A hub whose informer stopped before it ever listed.
        let never = Hub::new(
            ResourceMeta::new("pods", "v1", "Pod"),
            LogLimits::default(),
            Arc::new(Metrics::new()),
        );
        never.close("forbidden");
        again.save(&[never]).unwrap();
        assert_eq!(
            Positions::open(&cfg).unwrap().take("pods"),
            Some(41),
            "the saved position is kept, not overwritten with 0"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn positions_are_saved_while_running_and_at_shutdown() {
        let (_tmp, cfg) = dir();
        let positions = Arc::new(Positions::open(&cfg).unwrap());
        let pods = hub("pods", 10);
        let stop = CancellationToken::new();
        let saver = tokio::spawn({
            let positions = positions.clone();
            let pods = pods.clone();
            let stop = stop.clone();
            async move { positions.keep_saving(|| vec![pods.clone()], stop).await }
        });
        let saved = || Positions::open(&cfg).unwrap().take("pods");
        // The first tick is immediate; then one per period.
        tokio::time::sleep(SAVE_PERIOD / 2).await;
        assert_eq!(saved(), Some(10));
        pods.bookmark(20);
        tokio::time::sleep(SAVE_PERIOD).await;
        assert_eq!(saved(), Some(20));
        pods.bookmark(30);
        stop.cancel();
        saver.await.unwrap();
        assert_eq!(saved(), Some(30), "saved once more at shutdown");
    }
}
