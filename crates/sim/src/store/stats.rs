//! What the simulator counts, per resource: requests, lists, storage.

use std::collections::BTreeMap;

use serde::Serialize;

/// Request counters for one resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResourceStats {
    /// Watch streams open right now.
    pub open_watches: u64,
    /// Watch requests received, including failed ones.
    pub watch_requests: u64,
    /// List requests received (each page counts), including failed ones.
    pub list_requests: u64,
}

/// What one resource holds in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StorageStats {
    pub objects: u64,
    /// JSON bytes of the current objects.
    pub object_bytes: u64,
    /// Events kept for watches from an older resourceVersion.
    pub history_events: u64,
    /// Bytes those events hold (their JSON and selectable attributes).
    pub history_bytes: u64,
    /// Watches from a resourceVersion below this get 410 Expired.
    pub history_floor: u64,
}

/// What the LISTs of one resource asked for and got; with
/// `ResourceStats::list_requests`, enough to prove a client's
/// resourceVersion probes (`limit=1`) are few and small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ListStats {
    /// LIST pages answered that asked for a `limit`.
    pub limited: u64,
    /// Of those, the ones with `limit=1`: resourceVersion probes, as
    /// caches like kubefan make them (they also count in `limited`).
    pub probes: u64,
    /// Items all answered LIST pages carried.
    pub items: u64,
}

/// Counters for every resource, keyed like the Rust API ("pods", "deployments.apps").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub resource_version: u64,
    pub resources: BTreeMap<String, ResourceStats>,
    pub lists: BTreeMap<String, ListStats>,
    pub storage: BTreeMap<String, StorageStats>,
    /// The bounds of each resource's history (`SimConfig`).
    pub history_limit_events: u64,
    pub history_limit_bytes: u64,
}

impl Stats {
    /// Counters of one resource; zeros for an unknown key.
    pub fn resource(&self, key: &str) -> ResourceStats {
        self.resources.get(key).copied().unwrap_or_default()
    }

    /// List counters of one resource; zeros for an unknown key.
    pub fn lists(&self, key: &str) -> ListStats {
        self.lists.get(key).copied().unwrap_or_default()
    }

    /// What one resource holds; zeros for an unknown key.
    pub fn storage(&self, key: &str) -> StorageStats {
        self.storage.get(key).copied().unwrap_or_default()
    }

    /// Bytes held by every resource's objects and history.
    pub fn bytes(&self) -> u64 {
        self.storage
            .values()
            .map(|s| s.object_bytes + s.history_bytes)
            .sum()
    }
}
