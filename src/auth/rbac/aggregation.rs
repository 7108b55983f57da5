//! Aggregated ClusterRoles: a role with an `aggregationRule` also grants the
//! rules of every ClusterRole whose labels one of its
//! `clusterRoleSelectors` matches.
//!
//! kube-controller-manager's clusterrole-aggregation controller
//! (`pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go`)
//! writes, for each aggregated role, the union of the rules of the other
//! roles its selectors match, taking those roles' rules as written (theirs
//! included aggregated ones it wrote earlier); it runs again whenever any
//! ClusterRole changes, so through chains of aggregated roles (`admin`
//! aggregates `edit`, which aggregates `view`) it converges to the rules of
//! every role reachable through selectors. That converged union is what
//! [`effective_rules`] computes, added to the rules written in the object:
//! kube-apiserver authorizes with those, and they lag the controller.
//!
//! Selectors follow `metav1.LabelSelectorAsSelector`
//! (`k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`): `matchLabels` and
//! `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`) all hold;
//! an empty selector matches every role. A selector it would refuse (an
//! unknown operator, values where none belong or none where some must) makes
//! the controller give up on the role, leaving its rules as written: the
//! role then aggregates nothing here either.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::object::{ClusterRole, Rule};

/// One of a role's `clusterRoleSelectors`; all its requirements must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// The selector of `selector`, or why `LabelSelectorAsSelector` would
    /// refuse it.
    pub fn from_api(selector: &LabelSelector) -> Result<Selector, String> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for expr in selector.match_expressions.iter().flatten() {
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let key = expr.key.clone();
            let requirement = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!(
                        "{} on {key:?} needs at least one value",
                        expr.operator
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!("{} on {key:?} takes no values", expr.operator));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            requirements.push(requirement);
        }
        Ok(Selector(requirements))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// The rules each ClusterRole grants: its written rules, and for an
/// aggregated role the written rules of every role reachable from it
/// through selectors (itself excluded, as the controller excludes it; a
/// cycle ends where it meets a role already reached).
///
/// Cost: one pass over all roles per selector of each aggregated role.
/// ClusterRole changes are rare (a CRD installed, a role edited), and a
/// relist recomputes once, not once per role.
pub fn effective_rules(roles: &HashMap<String, ClusterRole>) -> HashMap<String, Arc<Vec<Rule>>> {
    // Sorted, so that the rules come in one order however the map iterates.
    let mut names: Vec<&String> = roles.keys().collect();
    names.sort();
    let sources = |name: &str| -> Vec<&String> {
        let role = &roles[name];
        names
            .iter()
            .copied()
            .filter(|other| other.as_str() != name)
            .filter(|other| {
                role.selectors
                    .iter()
                    .any(|s| s.matches(&roles[*other].labels))
            })
            .collect()
    };
    let mut effective = HashMap::with_capacity(roles.len());
    for name in &names {
        let role = &roles[*name];
        if role.selectors.is_empty() {
            effective.insert((*name).clone(), role.rules.clone());
            continue;
        }
        let mut rules: Vec<Rule> = role.rules.as_ref().clone();
        let mut reached: BTreeSet<&str> = BTreeSet::from([name.as_str()]);
        let mut queue = sources(name);
        while let Some(source) = queue.pop() {
            if !reached.insert(source) {
                continue;
            }
            let source_role = &roles[source];
            for rule in source_role.rules.iter() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
            if !source_role.selectors.is_empty() {
                queue.extend(sources(source));
            }
        }
        effective.insert((*name).clone(), Arc::new(rules));
    }
    effective
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn match_labels_and_expressions_must_all_hold() {
        let selector = Selector::from_api(&LabelSelector {
            match_labels: Some(labels(&[("aggregate", "true")])),
            match_expressions: Some(vec![
                expr("tier", "In", &["a", "b"]),
                expr("team", "NotIn", &["x"]),
                expr("owner", "Exists", &[]),
                expr("legacy", "DoesNotExist", &[]),
            ]),
        })
        .unwrap();
        let fits = [("aggregate", "true"), ("tier", "a"), ("owner", "o")];
        assert!(selector.matches(&labels(&fits)));
        assert!(selector.matches(&labels(&[
            ("aggregate", "true"),
            ("tier", "b"),
            ("owner", ""),
            ("team", "y"),
        ])));
        for (key, value) in [
            ("aggregate", "false"),
            ("tier", "c"),
            ("team", "x"),
            ("legacy", "1"),
        ] {
            let mut l = labels(&fits);
            l.insert(key.into(), value.into());
            assert!(!selector.matches(&l), "{key}={value}");
        }
        let mut l = labels(&fits);
        l.remove("owner");
        assert!(!selector.matches(&l), "owner must exist");
    }

    #[test]
    fn an_empty_selector_matches_every_role_and_a_malformed_one_is_refused() {
        let everything = Selector::from_api(&LabelSelector::default()).unwrap();
        assert!(everything.matches(&BTreeMap::new()));
        for bad in [
            expr("k", "In", &[]),
            expr("k", "NotIn", &[]),
            expr("k", "Exists", &["v"]),
            expr("k", "DoesNotExist", &["v"]),
            expr("k", "Equals", &["v"]),
        ] {
            let selector = LabelSelector {
                match_expressions: Some(vec![bad.clone()]),
                ..Default::default()
            };
            assert!(Selector::from_api(&selector).is_err(), "{bad:?}");
        }
    }
}
