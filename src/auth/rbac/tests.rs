//! The evaluator end to end: RBAC objects in as the informers deliver them
//! (JSON), questions out, and the cache's cost counted.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{Namespaces, Request};
use super::identity::Identity;
use super::reference::{Authorizer, World};
use super::{Kind, Rbac, Refresh};
use crate::auth::User;
use crate::auth::Verb;

// ---- fixtures -------------------------------------------------------------

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

fn named(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources, "resourceNames": names})
}

fn role(ns: &str, name: &str, rules: &[Value]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": rules,
    })
}

fn cluster_role(name: &str, labels: Value, rules: &[Value]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": rules,
    })
}

fn aggregated(name: &str, labels: Value, selectors: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "aggregationRule": {"clusterRoleSelectors": selectors},
    })
}

fn role_binding(ns: &str, name: &str, role_ref: (&str, &str), subjects: &[Value]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_ref.0, "name": role_ref.1},
        "subjects": subjects,
    })
}

fn cluster_role_binding(name: &str, role_ref: (&str, &str), subjects: &[Value]) -> Value {
    json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_ref.0, "name": role_ref.1},
        "subjects": subjects,
    })
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn service_account(ns: Option<&str>, name: &str) -> Value {
    match ns {
        Some(ns) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
        None => json!({"kind": "ServiceAccount", "name": name}),
    }
}

fn who(name: &str, groups: &[&str]) -> User {
    User {
        username: name.into(),
        uid: None,
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn kind_of(object: &Value) -> Kind {
    let namespaced = object["metadata"].get("namespace").is_some();
    match (object.get("roleRef").is_some(), namespaced) {
        (true, true) => Kind::RoleBinding,
        (true, false) => Kind::ClusterRoleBinding,
        (false, true) => Kind::Role,
        (false, false) => Kind::ClusterRole,
    }
}

fn rbac(objects: &[Value]) -> Rbac {
    let rbac = Rbac::new();
    for object in objects {
        rbac.apply(kind_of(object), object);
    }
    rbac
}

fn only(namespaces: &[&str]) -> Namespaces {
    Namespaces::Only(namespaces.iter().map(|ns| ns.to_string()).collect())
}

/// Where `user` may watch pods.
fn pods(rbac: &Rbac, user: &User) -> Namespaces {
    rbac.access(user).namespaces(Verb::Watch, "", "pods")
}

fn get(rbac: &Rbac, user: &User, resource: &str, subresource: &str, ns: &str, name: &str) -> bool {
    let (resource, group) = resource
        .split_once('.')
        .map_or((resource, ""), |(r, g)| (r, g));
    rbac.access(user).allows(&Request {
        verb: Verb::Get,
        group,
        resource,
        subresource,
        namespace: ns,
        name,
    })
}

const WATCH_PODS: &[&str] = &["get", "list", "watch"];

// ---- bindings and subjects ------------------------------------------------

#[test]
fn a_role_binding_grants_its_role_in_its_own_namespace_only() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "ann-reads", ("Role", "reader"), &[user("ann")]),
        // The same role name in b is another role, not bound here.
        role("b", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
    ]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    assert!(get(&rbac, &ann, "pods", "", "a", "p"));
    assert!(!get(&rbac, &ann, "pods", "", "b", "p"));
    assert!(
        !rbac.access(&ann).cluster_wide(Verb::Watch, "", "pods"),
        "across namespaces needs a ClusterRoleBinding"
    );
    assert_eq!(pods(&rbac, &who("bob", &[])), Namespaces::Nothing);
}

#[test]
fn a_role_binding_to_a_cluster_role_is_scoped_to_the_binding_namespace() {
    let rbac = rbac(&[
        cluster_role(
            "pod-reader",
            json!({}),
            &[rule(WATCH_PODS, &[""], &["pods", "nodes"])],
        ),
        role_binding("a", "x", ("ClusterRole", "pod-reader"), &[user("ann")]),
        role_binding("b", "x", ("ClusterRole", "pod-reader"), &[user("ann")]),
    ]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), only(&["a", "b"]));
    assert!(
        !rbac.access(&ann).cluster_wide(Verb::List, "", "nodes"),
        "a cluster-scoped resource is never in a RoleBinding's namespace"
    );
}

#[test]
fn a_cluster_role_binding_grants_every_namespace_and_cluster_scoped_resources() {
    let rbac = rbac(&[
        cluster_role(
            "viewer",
            json!({}),
            &[rule(WATCH_PODS, &[""], &["pods", "nodes"])],
        ),
        cluster_role_binding("everyone", ("ClusterRole", "viewer"), &[group("viewers")]),
    ]);
    let ann = who("ann", &["viewers"]);
    assert_eq!(pods(&rbac, &ann), Namespaces::All);
    assert!(rbac.access(&ann).cluster_wide(Verb::List, "", "nodes"));
    assert!(get(&rbac, &ann, "pods", "", "anywhere", "p"));
    assert!(get(&rbac, &ann, "nodes", "", "", "n1"));
}

#[test]
fn a_cluster_role_binding_to_a_role_grants_nothing() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        cluster_role_binding("odd", ("Role", "reader"), &[user("ann")]),
        role_binding("a", "odd", ("Secret", "reader"), &[user("ann")]),
    ]);
    assert!(rbac.access(&who("ann", &[])).is_empty());
}

#[test]
fn users_groups_and_service_accounts_are_matched_by_kind_and_name() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding(
            "a",
            "readers",
            ("Role", "reader"),
            &[
                user("ann"),
                group("dev"),
                service_account(Some("ops"), "robot"),
                // Subjects match on kind and name; their apiGroup is not
                // compared (appliesToUser).
                json!({"kind": "User", "apiGroup": "example.com", "name": "eve"}),
                json!({"kind": "Robot", "name": "bob"}),
            ],
        ),
    ]);
    for (user, groups) in [
        ("ann", &[][..]),
        ("someone", &["dev"][..]),
        ("system:serviceaccount:ops:robot", &[][..]),
        ("eve", &[][..]),
    ] {
        assert_eq!(pods(&rbac, &who(user, groups)), only(&["a"]), "{user}");
    }
    for (user, groups) in [
        ("bob", &["ann"][..]),
        ("dev", &[][..]),
        ("system:serviceaccount:a:robot", &[][..]),
        ("robot", &["system:serviceaccounts:ops"][..]),
    ] {
        assert_eq!(
            pods(&rbac, &who(user, groups)),
            Namespaces::Nothing,
            "{user}"
        );
    }
}

#[test]
fn a_service_account_without_a_namespace_is_the_role_bindings_own_and_nobody_cluster_wide() {
    let rbac = rbac(&[
        cluster_role("viewer", json!({}), &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding(
            "a",
            "local",
            ("ClusterRole", "viewer"),
            &[service_account(None, "robot")],
        ),
        cluster_role_binding(
            "global",
            ("ClusterRole", "viewer"),
            &[service_account(None, "robot")],
        ),
    ]);
    assert_eq!(
        pods(&rbac, &who("system:serviceaccount:a:robot", &[])),
        only(&["a"])
    );
    assert_eq!(
        pods(&rbac, &who("system:serviceaccount::robot", &[])),
        Namespaces::Nothing
    );
}

// ---- rules ------------------------------------------------------------------

#[test]
fn wildcards_match_any_verb_group_and_resource() {
    let rbac = rbac(&[
        role("a", "all", &[rule(&["*"], &["*"], &["*"])]),
        role("b", "apps", &[rule(&["watch"], &["apps"], &["*"])]),
        role_binding("a", "x", ("Role", "all"), &[user("ann")]),
        role_binding("b", "x", ("Role", "apps"), &[user("ann")]),
    ]);
    let set = rbac.access(&who("ann", &[]));
    assert_eq!(
        set.namespaces(Verb::List, "example.com", "widgets"),
        only(&["a"])
    );
    assert_eq!(
        set.namespaces(Verb::Watch, "apps", "deployments"),
        only(&["a", "b"])
    );
    assert_eq!(
        set.namespaces(Verb::List, "apps", "deployments"),
        only(&["a"])
    );
    assert_eq!(set.namespaces(Verb::Watch, "", "pods"), only(&["a"]));
    assert!(
        get(&rbac, &who("ann", &[]), "pods", "log", "a", "p"),
        "* covers subresources"
    );
}

#[test]
fn other_verbs_and_non_resource_urls_grant_no_reads() {
    let rbac = rbac(&[
        cluster_role(
            "writer",
            json!({}),
            &[
                rule(&["create", "update", "delete"], &[""], &["pods"]),
                json!({"verbs": ["get"], "nonResourceURLs": ["*"]}),
                rule(&["get"], &[], &["pods"]),
                rule(&[], &[""], &["pods"]),
            ],
        ),
        cluster_role_binding("w", ("ClusterRole", "writer"), &[user("ann")]),
    ]);
    assert!(rbac.access(&who("ann", &[])).is_empty());
}

#[test]
fn resource_names_grant_the_named_object_not_the_collection() {
    let rbac = rbac(&[
        role("a", "one", &[named(WATCH_PODS, &[""], &["pods"], &["web"])]),
        role_binding("a", "x", ("Role", "one"), &[user("ann")]),
        cluster_role(
            "cm",
            json!({}),
            &[named(&["get"], &[""], &["configmaps"], &["settings"])],
        ),
        cluster_role_binding("x", ("ClusterRole", "cm"), &[user("ann")]),
    ]);
    let ann = who("ann", &[]);
    assert!(get(&rbac, &ann, "pods", "", "a", "web"));
    assert!(!get(&rbac, &ann, "pods", "", "a", "db"));
    assert!(!get(&rbac, &ann, "pods", "", "b", "web"));
    assert_eq!(
        pods(&rbac, &ann),
        Namespaces::Nothing,
        "no list or watch of the collection"
    );
    let set = rbac.access(&ann);
    let watch_web = Request {
        verb: Verb::Watch,
        group: "",
        resource: "pods",
        subresource: "",
        namespace: "a",
        name: "web",
    };
    assert!(
        set.allows(&watch_web),
        "a watch with fieldSelector metadata.name=web"
    );
    assert!(set.may_get("", "configmaps", "any", "settings"));
    assert!(!set.may_get("", "configmaps", "any", "other"));
}

#[test]
fn a_subresource_needs_its_own_rule_and_star_slash_names_it_for_every_resource() {
    let rbac = rbac(&[
        role(
            "a",
            "logs",
            &[
                rule(WATCH_PODS, &[""], &["pods/log"]),
                rule(&["get"], &["apps"], &["*/scale"]),
            ],
        ),
        role("a", "pods", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "logs", ("Role", "logs"), &[user("ann")]),
        role_binding("a", "pods", ("Role", "pods"), &[user("bob")]),
    ]);
    let (ann, bob) = (who("ann", &[]), who("bob", &[]));
    assert!(get(&rbac, &ann, "pods", "log", "a", "p"));
    assert!(
        !get(&rbac, &ann, "pods", "", "a", "p"),
        "pods/log does not grant pods"
    );
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
    assert!(get(&rbac, &ann, "deployments.apps", "scale", "a", "d"));
    assert!(get(&rbac, &ann, "statefulsets.apps", "scale", "a", "s"));
    assert!(!get(&rbac, &ann, "deployments.apps", "", "a", "d"));
    assert!(!get(&rbac, &ann, "deployments.apps", "status", "a", "d"));
    assert!(get(&rbac, &bob, "pods", "", "a", "p"));
    assert!(
        !get(&rbac, &bob, "pods", "log", "a", "p"),
        "pods does not grant pods/log"
    );
}

#[test]
fn a_namespace_object_is_got_through_a_binding_in_itself() {
    let rbac = rbac(&[
        role("team", "ns", &[rule(&["get"], &[""], &["namespaces"])]),
        role_binding("team", "ns", ("Role", "ns"), &[user("ann")]),
    ]);
    let set = rbac.access(&who("ann", &[]));
    assert!(set.may_get("", "namespaces", "", "team"));
    assert!(!set.may_get("", "namespaces", "", "other"));
    assert!(!set.cluster_wide(Verb::List, "", "namespaces"));
}

// ---- aggregation ------------------------------------------------------------

#[test]
fn an_aggregated_cluster_role_grants_what_it_aggregates_and_loses_it_when_the_label_goes() {
    let label = json!({"example.com/aggregate-to-view": "true"});
    let rbac = rbac(&[
        aggregated("view", json!({}), json!([{"matchLabels": label}])),
        cluster_role_binding("viewers", ("ClusterRole", "view"), &[group("team")]),
    ]);
    let ann = who("ann", &["team"]);
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
    let widgets = |labels: Value| {
        cluster_role(
            "widget-view",
            labels,
            &[rule(WATCH_PODS, &["example.com"], &["widgets"])],
        )
    };
    rbac.apply(Kind::ClusterRole, &widgets(label.clone()));
    let set = rbac.access(&ann);
    assert!(set.cluster_wide(Verb::Watch, "example.com", "widgets"));
    rbac.apply(Kind::ClusterRole, &widgets(json!({"other": "label"})));
    let set = rbac.access(&ann);
    assert!(!set.cluster_wide(Verb::Watch, "example.com", "widgets"));
    assert!(set.is_empty());
}

#[test]
fn aggregation_reaches_through_aggregated_roles_and_stops_at_cycles() {
    let to = |role: &str| json!({format!("aggregate-to-{role}"): "true"});
    let rbac = rbac(&[
        aggregated("admin", json!({}), json!([{"matchLabels": to("admin")}])),
        aggregated("edit", to("admin"), json!([{"matchLabels": to("edit")}])),
        aggregated("view", to("edit"), json!([{"matchLabels": to("view")}])),
        // A cycle back to admin: it ends, and grants what the roles hold.
        aggregated("loop", to("view"), json!([{"matchLabels": to("admin")}])),
        cluster_role(
            "pods-view",
            to("view"),
            &[rule(WATCH_PODS, &[""], &["pods"])],
        ),
        cluster_role_binding("admins", ("ClusterRole", "admin"), &[user("ann")]),
    ]);
    assert_eq!(pods(&rbac, &who("ann", &[])), Namespaces::All);
}

#[test]
fn aggregation_selects_with_match_expressions_and_an_invalid_selector_aggregates_nothing() {
    let rbac = rbac(&[
        aggregated(
            "tiers",
            json!({}),
            json!([{"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "retired", "operator": "DoesNotExist"},
            ]}]),
        ),
        aggregated(
            "broken",
            json!({}),
            json!([{"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]}]),
        ),
        cluster_role(
            "gold",
            json!({"tier": "gold"}),
            &[rule(WATCH_PODS, &[""], &["pods"])],
        ),
        cluster_role(
            "old",
            json!({"tier": "silver", "retired": "yes"}),
            &[rule(WATCH_PODS, &[""], &["secrets"])],
        ),
        cluster_role_binding("t", ("ClusterRole", "tiers"), &[user("ann")]),
        cluster_role_binding("b", ("ClusterRole", "broken"), &[user("bob")]),
    ]);
    let set = rbac.access(&who("ann", &[]));
    assert!(set.cluster_wide(Verb::Watch, "", "pods"));
    assert!(
        !set.cluster_wide(Verb::Watch, "", "secrets"),
        "retired is excluded"
    );
    assert!(rbac.access(&who("bob", &[])).is_empty());
}

// ---- changes ------------------------------------------------------------------

#[test]
fn a_role_binding_to_a_missing_role_grants_nothing_until_the_role_appears() {
    let rbac = rbac(&[role_binding("a", "x", ("Role", "reader"), &[user("ann")])]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
    rbac.apply(
        Kind::Role,
        &role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
    );
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    rbac.delete(Kind::Role, "a", "reader");
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
}

#[test]
fn deleting_a_binding_withdraws_what_it_granted() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role("b", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "x", ("Role", "reader"), &[user("ann")]),
        role_binding("b", "x", ("Role", "reader"), &[user("ann")]),
    ]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), only(&["a", "b"]));
    rbac.delete(Kind::RoleBinding, "a", "x");
    assert_eq!(pods(&rbac, &ann), only(&["b"]));
    rbac.delete(Kind::RoleBinding, "", "x");
    assert_eq!(
        pods(&rbac, &ann),
        only(&["b"]),
        "a RoleBinding has a namespace"
    );
    rbac.delete(Kind::RoleBinding, "b", "x");
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
}

#[test]
fn an_unparsable_object_grants_nothing_and_withdraws_what_its_previous_version_granted() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "x", ("Role", "reader"), &[user("ann")]),
    ]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    let mut broken = role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]);
    broken["rules"][0]["verbs"] = json!("watch");
    rbac.apply(Kind::Role, &broken);
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
    assert_eq!(rbac.stats().ignored, 1);
    // A binding whose subjects are not a list: nothing, for anyone.
    let mut broken = role_binding("b", "y", ("Role", "reader"), &[user("ann")]);
    broken["subjects"] = json!("ann");
    rbac.apply(Kind::RoleBinding, &broken);
    assert_eq!(rbac.stats().ignored, 2);
    assert!(rbac.access(&ann).is_empty());
    rbac.apply(
        Kind::Role,
        &role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
    );
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    rbac.delete(Kind::RoleBinding, "b", "y");
    assert_eq!(rbac.stats().ignored, 0);
}

#[test]
fn a_relist_drops_what_is_gone_and_recomputes_nothing_when_nothing_changed() {
    let bindings = [
        role_binding("a", "x", ("ClusterRole", "viewer"), &[user("ann")]),
        role_binding("b", "x", ("ClusterRole", "viewer"), &[user("ann")]),
    ];
    let rbac = rbac(&[cluster_role(
        "viewer",
        json!({}),
        &[rule(WATCH_PODS, &[""], &["pods"])],
    )]);
    rbac.replace(Kind::RoleBinding, &bindings);
    let ann = who("ann", &[]);
    let held = rbac.hold(&ann);
    assert_eq!(
        held.current().namespaces(Verb::Watch, "", "pods"),
        only(&["a", "b"])
    );
    let before = rbac.stats().computations;
    assert_eq!(
        rbac.replace(Kind::RoleBinding, &bindings),
        Refresh::default()
    );
    assert_eq!(rbac.stats().computations, before);
    let refresh = rbac.replace(Kind::RoleBinding, &bindings[1..]);
    assert_eq!(refresh.recomputed, 1);
    assert_eq!(
        held.current().namespaces(Verb::Watch, "", "pods"),
        only(&["b"])
    );
}

#[test]
fn synced_once_every_kind_has_been_listed() {
    let rbac = Rbac::new();
    for kind in Kind::ALL {
        assert!(!rbac.synced());
        rbac.replace(kind, &[]);
    }
    assert!(rbac.synced());
    assert_eq!(
        Kind::for_resource("rbac.authorization.k8s.io", "clusterrolebindings"),
        Some(Kind::ClusterRoleBinding)
    );
    assert_eq!(Kind::for_resource("", "roles"), None);
}

// ---- the cache --------------------------------------------------------------

#[test]
fn an_rbac_change_recomputes_each_affected_access_set_once_not_once_per_holder() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role("b", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "team", ("Role", "reader"), &[group("team")]),
    ]);
    // A thousand subscribers from a hundred users, all in the team.
    let users: Vec<User> = (0..100)
        .map(|i| who(&format!("user-{i}"), &["team", "system:authenticated"]))
        .collect();
    let held: Vec<_> = (0..1000).map(|i| rbac.hold(&users[i % 100])).collect();
    let stats = rbac.stats();
    assert_eq!((stats.computations, stats.held), (100, 100));

    // The team gains b: each user's set once, and every holder sees it.
    let refresh = rbac.apply(
        Kind::RoleBinding,
        &role_binding("b", "team", ("Role", "reader"), &[group("team")]),
    );
    assert_eq!((refresh.recomputed, refresh.changed), (100, 100));
    assert_eq!(rbac.stats().computations, 200);
    assert!(
        held.iter()
            .all(|h| h.current().namespaces(Verb::Watch, "", "pods") == only(&["a", "b"]))
    );

    // A binding naming one user: that user's set only.
    let refresh = rbac.apply(
        Kind::RoleBinding,
        &role_binding("b", "solo", ("Role", "reader"), &[user("user-7")]),
    );
    assert_eq!((refresh.recomputed, refresh.changed), (1, 0));
    // A role the team is bound to: the team's sets again, once each.
    let refresh = rbac.apply(
        Kind::Role,
        &role("a", "reader", &[rule(&["get"], &[""], &["pods"])]),
    );
    assert_eq!((refresh.recomputed, refresh.changed), (100, 100));
    // Nobody cached is named: nothing.
    let refresh = rbac.apply(
        Kind::ClusterRoleBinding,
        &cluster_role_binding(
            "x",
            ("ClusterRole", "view"),
            &[user("stranger"), group("ops")],
        ),
    );
    assert_eq!(refresh, Refresh::default());
    assert_eq!(rbac.stats().computations, 301);
}

#[test]
fn holders_are_woken_when_their_set_changes_and_not_otherwise() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "x", ("Role", "reader"), &[user("ann")]),
    ]);
    let access = rbac.hold(&who("ann", &["team"]));
    let other = rbac.hold(&who("ann", &["team"]));
    assert!(Arc::ptr_eq(&access, &other), "one handle per identity");
    let seen = access.changes().current();
    // Another verb, another rule to the same effect: no change seen.
    let refresh = rbac.apply(
        Kind::Role,
        &role(
            "a",
            "reader",
            &[
                rule(WATCH_PODS, &[""], &["pods"]),
                rule(&["delete"], &[""], &["pods"]),
            ],
        ),
    );
    assert_eq!((refresh.recomputed, refresh.changed), (1, 0));
    assert_eq!(access.changes().current(), seen);
    rbac.apply(
        Kind::RoleBinding,
        &role_binding("b", "x", ("ClusterRole", "missing"), &[group("team")]),
    );
    assert_eq!(
        access.changes().current(),
        seen,
        "a missing role grants nothing new"
    );
    rbac.delete(Kind::RoleBinding, "a", "x");
    assert_ne!(access.changes().current(), seen);
    assert!(access.current().is_empty());
}

#[tokio::test]
async fn a_holder_waiting_on_the_epoch_is_woken_by_a_change() {
    let rbac = Arc::new(rbac(&[role(
        "a",
        "reader",
        &[rule(WATCH_PODS, &[""], &["pods"])],
    )]));
    let access = rbac.hold(&who("ann", &[]));
    let waiter = tokio::spawn({
        let access = access.clone();
        async move {
            access
                .changes()
                .until(|| {
                    access.current().namespaces(Verb::Watch, "", "pods") != Namespaces::Nothing
                })
                .await
        }
    });
    tokio::task::yield_now().await;
    rbac.apply(
        Kind::RoleBinding,
        &role_binding("a", "x", ("Role", "reader"), &[user("ann")]),
    );
    tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .expect("woken by the binding")
        .unwrap();
}

#[test]
fn sets_nobody_holds_are_dropped_when_touched_and_computed_again_when_asked_for() {
    let rbac = rbac(&[
        role("a", "reader", &[rule(WATCH_PODS, &[""], &["pods"])]),
        role_binding("a", "x", ("Role", "reader"), &[user("ann")]),
    ]);
    let ann = who("ann", &[]);
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    assert_eq!(pods(&rbac, &ann), only(&["a"]));
    assert_eq!(rbac.stats().computations, 1, "cached between changes");
    let held = rbac.hold(&ann);
    drop(held);
    let refresh = rbac.delete(Kind::RoleBinding, "a", "x");
    assert_eq!(
        refresh,
        Refresh {
            recomputed: 0,
            changed: 0,
            dropped: 1
        }
    );
    assert_eq!(rbac.stats().cached, 0);
    assert_eq!(pods(&rbac, &ann), Namespaces::Nothing);
    assert_eq!(rbac.stats().computations, 2);
}

// ---- against the reference authorizer -------------------------------------

/// xorshift64*: deterministic, so a failure reproduces.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.roll(items.len())]
    }

    fn some<'a>(&mut self, items: &[&'a str], most: usize) -> Vec<&'a str> {
        (0..self.roll(most + 1)).map(|_| self.pick(items)).collect()
    }
}

const NAMESPACES: &[&str] = &["a", "b"];
const ROLES: &[&str] = &["r1", "r2", "c1", "c2", "c3"];
const BINDINGS: &[&str] = &["b1", "b2", "b3"];
const LABELS: &[&str] = &["agg=1", "agg=2", "tier=1"];

fn random_rule(dice: &mut Dice) -> Value {
    let mut rule = json!({
        "verbs": dice.some(&["get", "list", "watch", "*", "create"], 2),
        "apiGroups": dice.some(&["", "apps", "*"], 2),
        "resources": dice.some(&["pods", "pods/log", "*/scale", "deployments", "*", "nodes", "namespaces"], 2),
    });
    if dice.roll(4) == 0 {
        rule["resourceNames"] = json!(dice.some(&["x", "y", "", "a"], 2));
    }
    if dice.roll(12) == 0 {
        rule = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]});
    }
    rule
}

fn random_labels(dice: &mut Dice) -> Value {
    let mut labels = serde_json::Map::new();
    for label in dice.some(LABELS, 2) {
        let (k, v) = label.split_once('=').unwrap();
        labels.insert(k.into(), v.into());
    }
    Value::Object(labels)
}

fn random_object(dice: &mut Dice, kind: Kind, ns: &str, name: &str) -> Value {
    let rules: Vec<Value> = (0..=dice.roll(3)).map(|_| random_rule(dice)).collect();
    let mut object = match kind {
        Kind::Role => role(ns, name, &rules),
        Kind::ClusterRole if dice.roll(3) == 0 => {
            let selector = match dice.roll(4) {
                0 => json!({"matchLabels": {"agg": dice.pick(&["1", "2"])}}),
                1 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                2 => {
                    json!({"matchExpressions": [{"key": "agg", "operator": "NotIn", "values": ["1"]}]})
                }
                _ => json!({"matchExpressions": [{"key": "agg", "operator": "In", "values": []}]}),
            };
            let mut role = aggregated(name, random_labels(dice), json!([selector]));
            role["rules"] = json!(rules);
            role
        }
        Kind::ClusterRole => cluster_role(name, random_labels(dice), &rules),
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            let role_ref = (
                dice.pick(&["Role", "ClusterRole", "ClusterRole"]),
                dice.pick(ROLES),
            );
            let subjects: Vec<Value> = (0..=dice.roll(3))
                .map(|_| match dice.roll(4) {
                    0 => user(dice.pick(&["ann", "bob"])),
                    1 => group(dice.pick(&["dev", "ops"])),
                    2 => service_account(None, "robot"),
                    _ => service_account(Some(dice.pick(NAMESPACES)), "robot"),
                })
                .collect();
            if kind == Kind::RoleBinding {
                role_binding(ns, name, role_ref, &subjects)
            } else {
                cluster_role_binding(name, role_ref, &subjects)
            }
        }
    };
    if dice.roll(15) == 0 {
        object["rules"] = json!("not a list");
        object["roleRef"] = json!(7);
    }
    object
}

fn world(objects: &std::collections::BTreeMap<(Kind, String, String), Value>) -> World {
    let mut world = World::default();
    for ((kind, _, _), object) in objects {
        // What does not parse is not there, for the reference too.
        match kind {
            Kind::Role => world.roles.extend(Deserialize::deserialize(object).ok()),
            Kind::RoleBinding => world
                .role_bindings
                .extend(Deserialize::deserialize(object).ok()),
            Kind::ClusterRole => world
                .cluster_roles
                .extend(Deserialize::deserialize(object).ok()),
            Kind::ClusterRoleBinding => world
                .cluster_role_bindings
                .extend(Deserialize::deserialize(object).ok()),
        }
    }
    world
}

#[test]
fn random_rbac_histories_agree_with_the_reference_authorizer() {
    let identities: Vec<User> = vec![
        who("ann", &[]),
        who("ann", &["dev"]),
        who("bob", &["dev", "ops"]),
        who("carol", &["ops"]),
        who("system:serviceaccount:a:robot", &["system:serviceaccounts"]),
        who("system:serviceaccount:b:robot", &["dev"]),
    ];
    let requests: Vec<(Verb, &str, &str, &str)> = [Verb::Get, Verb::List, Verb::Watch]
        .into_iter()
        .flat_map(|verb| {
            ["", "apps", "other"].into_iter().flat_map(move |group| {
                [
                    ("pods", ""),
                    ("pods", "log"),
                    ("deployments", "scale"),
                    ("deployments", ""),
                    ("nodes", ""),
                    ("namespaces", ""),
                    ("secrets", ""),
                ]
                .into_iter()
                .map(move |(resource, sub)| (verb, group, resource, sub))
            })
        })
        .collect();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let rbac = Rbac::new();
    let mut objects = std::collections::BTreeMap::new();
    // Half the identities are held (kept current), half asked once.
    let held: Vec<_> = identities.iter().step_by(2).map(|u| rbac.hold(u)).collect();
    let mut ignored_seen = false;
    let (mut allowed, mut asked) = (0usize, 0usize);
    for step in 0..150 {
        let kind = Kind::ALL[dice.roll(4)];
        let ns = if kind.namespaced() {
            dice.pick(NAMESPACES)
        } else {
            ""
        };
        let name = match kind {
            Kind::Role | Kind::ClusterRole => dice.pick(ROLES),
            _ => dice.pick(BINDINGS),
        };
        let key = (kind, ns.to_string(), name.to_string());
        match dice.roll(10) {
            0..=6 => {
                let object = random_object(&mut dice, kind, ns, name);
                rbac.apply(kind, &object);
                objects.insert(key, object);
            }
            7 | 8 => {
                rbac.delete(kind, ns, name);
                objects.remove(&key);
            }
            _ => {
                objects.retain(|(k, _, _), _| *k != kind || dice.roll(3) != 0);
                let listed: Vec<&Value> = objects
                    .iter()
                    .filter(|((k, _, _), _)| *k == kind)
                    .map(|(_, v)| v)
                    .collect();
                rbac.replace(kind, listed);
            }
        }
        ignored_seen |= rbac.stats().ignored > 0;
        let world = world(&objects);
        let reference = Authorizer::new(&world);
        for (i, user) in identities.iter().enumerate() {
            let identity = Identity::from(user);
            let set = if i % 2 == 0 {
                held[i / 2].current()
            } else {
                rbac.access(user)
            };
            for &(verb, group, resource, subresource) in &requests {
                let mut namespaces = BTreeSet::new();
                let mut cluster_wide = false;
                for namespace in ["", "a", "b", "c"] {
                    for name in ["", "x", "y", "a"] {
                        let request = Request {
                            verb,
                            group,
                            resource,
                            subresource,
                            namespace,
                            name,
                        };
                        let expected = reference.allows(&identity, &request);
                        asked += 1;
                        allowed += usize::from(expected);
                        assert_eq!(
                            set.allows(&request),
                            expected,
                            "step {step}: {identity:?} {request:?}\n{objects:#?}"
                        );
                        if name.is_empty() && subresource.is_empty() && expected {
                            if namespace.is_empty() {
                                cluster_wide = true;
                            } else {
                                namespaces.insert(namespace.to_string());
                            }
                        }
                    }
                }
                if !subresource.is_empty() {
                    continue;
                }
                let got = set.namespaces(verb, group, resource);
                match got {
                    Namespaces::All => assert!(
                        cluster_wide,
                        "step {step}: {identity:?} {verb:?} {group}/{resource}"
                    ),
                    Namespaces::Only(ref some) => {
                        assert!(!cluster_wide);
                        assert_eq!(
                            *some, namespaces,
                            "step {step}: {identity:?} {verb:?} {group}/{resource}"
                        );
                    }
                    Namespaces::Nothing => assert!(!cluster_wide && namespaces.is_empty()),
                }
            }
        }
    }
    assert!(
        ignored_seen,
        "the history included objects that do not parse"
    );
    // Neither answer is rare: most of the grid asks for what no rule
    // grants, and tens of thousands of requests are allowed.
    assert!(
        allowed * 50 > asked && allowed * 2 < asked,
        "{allowed} of {asked} allowed"
    );
}
