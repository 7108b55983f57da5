//! Rollout churn: Deployment after Deployment gets a new template
//! revision, and its pods are replaced `SURGE` at a time, each
//! replacement taking the writes a real rolling update makes
//! (pkg/controller/deployment/rolling.go scales the new ReplicaSet up by
//! maxSurge and the old one down as new pods become available):
//!
//! 1. the ReplicaSet controller creates the new pod: Pending, unbound;
//! 2. the scheduler binds it (`spec.nodeName` set; a watcher with a
//!    `spec.nodeName` field selector sees it ADDED here);
//! 3. the kubelet reports it Running and ready;
//! 4. the old pod is marked for deletion (`deletionTimestamp`,
//!    `deletionGracePeriodSeconds`: it shows Terminating);
//! 5. after its grace period the kubelet's final delete removes it
//!    (DELETED).
//!
//! Each step is one write, so `ChurnConfig::rate` counts writes. The
//! population stays where it was seeded.

use std::collections::VecDeque;

use rand::RngExt;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::json;

use super::{ChurnConfig, Deployment};
use crate::Sim;

/// Pods a rollout replaces at once (maxSurge and maxUnavailable, as
/// counts).
const SURGE: usize = 3;

enum Step {
    Create { name: String },
    Bind { name: String, node: String },
    Ready { name: String, node: String },
    Terminate { name: String },
    Delete { name: String },
}

pub(super) struct Rollout {
    deploys: Vec<Deployment>,
    /// The Deployment being rolled and its pods of older revisions left.
    current: Option<(usize, Vec<String>)>,
    steps: VecDeque<Step>,
}

impl Rollout {
    pub fn new(deploys: Vec<Deployment>) -> Rollout {
        Rollout {
            deploys,
            current: None,
            steps: VecDeque::new(),
        }
    }

    /// Makes the next write of the rollout.
    pub fn step(&mut self, sim: &Sim, cfg: &ChurnConfig, nodes: &[String], rng: &mut StdRng) {
        if self.steps.is_empty() {
            self.plan(sim, nodes, rng);
        }
        let Some(step) = self.steps.pop_front() else {
            return;
        };
        let Some((i, _)) = &self.current else {
            return;
        };
        let d = &self.deploys[*i];
        let ns = d.ns.clone();
        // A pod someone else deleted meanwhile is skipped (NotFound).
        let result = match step {
            Step::Create { name } => sim.create("pods", d.pod_named(cfg, &name, None).build()),
            Step::Bind { name, node } => rewrite(sim, cfg, d, &name, &node, "Pending"),
            Step::Ready { name, node } => rewrite(sim, cfg, d, &name, &node, "Running"),
            Step::Terminate { name } => sim.merge_patch(
                "pods",
                Some(&ns),
                &name,
                &json!({"metadata": {"deletionTimestamp": crate::store::now_rfc3339(),
                    "deletionGracePeriodSeconds": 30}}),
            ),
            Step::Delete { name } => sim.delete("pods", Some(&ns), &name),
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "a rollout step failed");
        }
    }

    /// Queues the writes that replace the next `SURGE` old pods, starting
    /// a new Deployment's rollout when the current one is done.
    fn plan(&mut self, sim: &Sim, nodes: &[String], rng: &mut StdRng) {
        if self.deploys.is_empty() || nodes.is_empty() {
            return;
        }
        if self.current.as_ref().is_none_or(|(_, old)| old.is_empty()) {
            let i = rng.random_range(0..self.deploys.len());
            let d = &mut self.deploys[i];
            d.revision += 1;
            let hash = d.hash();
            let old: Vec<String> = sim
                .names("pods")
                .into_iter()
                .filter(|(ns, name)| *ns == d.ns && d.owns(name))
                .map(|(_, name)| name)
                .collect();
            // Pods of every older revision are replaced.
            let old: Vec<String> = old
                .into_iter()
                .filter(|n| !n.contains(&format!("-{hash}-")))
                .collect();
            self.current = Some((i, old));
        }
        let Some((i, old)) = &mut self.current else {
            return;
        };
        let d = &self.deploys[*i];
        let n = old.len().min(SURGE);
        if n == 0 {
            return;
        }
        let replaced: Vec<String> = old.drain(..n).collect();
        let rs = d.replica_set();
        let new: Vec<(String, String)> = replaced
            .iter()
            .map(|_| {
                let suffix: String = (0..5)
                    .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
                    .collect();
                let node = nodes.choose(rng).cloned().unwrap_or_default();
                (format!("{rs}-{suffix}"), node)
            })
            .collect();
        for (name, _) in &new {
            self.steps.push_back(Step::Create { name: name.clone() });
        }
        for (name, node) in &new {
            self.steps.push_back(Step::Bind {
                name: name.clone(),
                node: node.clone(),
            });
        }
        for (name, node) in &new {
            self.steps.push_back(Step::Ready {
                name: name.clone(),
                node: node.clone(),
            });
        }
        for name in &replaced {
            self.steps.push_back(Step::Terminate { name: name.clone() });
        }
        for name in replaced {
            self.steps.push_back(Step::Delete { name });
        }
    }
}

/// The pod `name` as bound to `node` in `phase` (Pending: bound, its
/// containers being created; Running: started and ready), written over
/// the stored one (its uid and creation time are kept by the update).
fn rewrite(
    sim: &Sim,
    cfg: &ChurnConfig,
    d: &Deployment,
    name: &str,
    node: &str,
    phase: &str,
) -> Result<serde_json::Value, crate::SimError> {
    sim.update(
        "pods",
        d.pod_named(cfg, name, Some(node)).phase(phase).build(),
    )
}
