//! The clusterrole-aggregation controller
//! (pkg/controller/clusterroleaggregation in kubernetes/kubernetes): a
//! ClusterRole with an `aggregationRule` has as its `rules` the union of
//! the rules of every other ClusterRole one of its `clusterRoleSelectors`
//! matches, selectors in order, matching roles by name, each rule once.
//!
//! The controller reacts to every ClusterRole change by resyncing every
//! aggregated ClusterRole and writes only those whose rules differ (a
//! MODIFIED event). Here it runs under the store's lock right after the
//! write that triggered it, so the aggregated role's MODIFIED event follows
//! that write's event directly, at the next resourceVersion; in a cluster
//! it follows a moment later.

use serde_json::Value;

use super::{CLUSTER_ROLES, aggregation_of, rules_of};
use crate::store::Store;

/// Brings every aggregated ClusterRole's rules up to date. Aggregated
/// roles may select each other; each pass can settle one more link of such
/// a chain, so the passes are bounded by the number of roles (a cycle
/// settles too, since rules only accumulate within a pass).
pub(crate) fn aggregate(store: &mut Store) {
    let Ok(count) = store.objects(CLUSTER_ROLES).map(|r| r.len()) else {
        return;
    };
    for _ in 0..=count {
        if !aggregate_once(store) {
            return;
        }
    }
    tracing::warn!("clusterrole aggregation did not settle");
}

/// One resync of every aggregated ClusterRole; true if any was rewritten.
fn aggregate_once(store: &mut Store) -> bool {
    let Ok(stored) = store.objects(CLUSTER_ROLES) else {
        return false;
    };
    // Sorted by name: the store keeps objects in (namespace, name) order.
    let roles: Vec<(std::sync::Arc<crate::attrs::Attrs>, Value)> = stored
        .into_iter()
        .filter_map(|s| Some((s.attrs.clone(), s.value().ok()?)))
        .collect();
    let mut changed = false;
    for (attrs, role) in &roles {
        let Some(selectors) = aggregation_of(role) else {
            continue;
        };
        let mut rules = Vec::new();
        for selector in &selectors {
            for (other_attrs, other) in &roles {
                if other_attrs.name == attrs.name || !selector.matches(other_attrs) {
                    continue;
                }
                for rule in rules_of(other).unwrap_or_default() {
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
            }
        }
        if rules_of(role).unwrap_or_default() == rules {
            continue;
        }
        let mut updated = role.clone();
        updated["rules"] = serde_json::to_value(&rules).unwrap_or_default();
        match store.update(CLUSTER_ROLES, updated) {
            Ok(_) => changed = true,
            Err(e) => {
                tracing::warn!(role = %attrs.name, error = %e, "aggregating a ClusterRole failed")
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::CLUSTER_ROLES;
    use crate::store::{Limits, Store};

    fn store() -> Store {
        let mut store = Store::new(Limits {
            history: 100,
            history_bytes: 1 << 20,
            history_window: std::time::Duration::ZERO,
            watch_queue: 10,
            list_snapshots: 1,
        });
        for def in crate::builtins::builtins() {
            store.register(def);
        }
        store
    }

    fn role(name: &str, label: &str, selects: Option<&str>, verb: Option<&str>) -> Value {
        let mut r = json!({"metadata": {"name": name, "labels": {label: "true"}}});
        if let Some(sel) = selects {
            r["aggregationRule"] =
                json!({"clusterRoleSelectors": [{"matchLabels": {sel: "true"}}]});
        }
        if let Some(verb) = verb {
            r["rules"] = json!([{"verbs": [verb], "apiGroups": [""], "resources": ["pods"]}]);
        }
        r
    }

    fn verbs(store: &Store, name: &str) -> Vec<String> {
        let role = store
            .get(CLUSTER_ROLES, None, name)
            .unwrap()
            .value()
            .unwrap();
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["verbs"][0].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn chains_of_aggregated_roles_settle_and_cycles_end() {
        let mut s = store();
        // top aggregates middle, which aggregates leaf: written top first.
        s.create(CLUSTER_ROLES, role("top", "t", Some("to-top"), None))
            .unwrap();
        s.create(
            CLUSTER_ROLES,
            role("middle", "to-top", Some("to-middle"), None),
        )
        .unwrap();
        s.create(CLUSTER_ROLES, role("leaf", "to-middle", None, Some("get")))
            .unwrap();
        assert_eq!(verbs(&s, "middle"), ["get"]);
        assert_eq!(verbs(&s, "top"), ["get"], "the chain settles in one write");
        // Two roles aggregating each other take each other's rules, once.
        s.create(CLUSTER_ROLES, role("a", "x", Some("y"), None))
            .unwrap();
        s.create(CLUSTER_ROLES, role("b", "y", Some("x"), None))
            .unwrap();
        s.create(CLUSTER_ROLES, role("c", "x", None, Some("list")))
            .unwrap();
        assert_eq!(verbs(&s, "b"), ["list"]);
        assert_eq!(verbs(&s, "a"), ["list"]);
    }
}
