//! RBAC objects, ClusterRole aggregation, and SubjectAccessReview.

use super::{allowed, brief, next, sar, start};
use crate::SimConfig;
use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn rbac_kinds_are_ordinary_resources_and_cluster_roles_aggregate() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let (sim, server, client) = start(SimConfig::default()).await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role = |name: &str, labels: Value, rules: Value| -> ClusterRole {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "rules": rules}),
        )
        .unwrap()
    };
    let monitoring: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "monitoring", "labels": {"example.com/aggregate": "true"}},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate": "true"}}]},
    }))
    .unwrap();
    roles
        .create(&PostParams::default(), &monitoring)
        .await
        .unwrap();
    let rv = sim.resource_version().to_string();
    let dynamic: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<ClusterRole>(&()));
    let mut w = dynamic
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let get_pods = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    roles
        .create(
            &PostParams::default(),
            &role(
                "pods-reader",
                json!({"example.com/aggregate": "true"}),
                get_pods.clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "pods-reader".to_owned())
    );
    let rules_of = |ev: WatchEvent<DynamicObject>| match ev {
        WatchEvent::Modified(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("monitoring"));
            o.data["rules"].clone()
        }
        other => panic!("expected the aggregated role's MODIFIED, got {other:?}"),
    };
    assert_eq!(rules_of(next(&mut w).await.unwrap()), get_pods);
    // Roles are taken by name, each rule once.
    let nodes = json!([{"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"]},
                       {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    roles
        .create(
            &PostParams::default(),
            &role(
                "nodes-reader",
                json!({"example.com/aggregate": "true"}),
                nodes.clone(),
            ),
        )
        .await
        .unwrap();
    next(&mut w).await.unwrap();
    assert_eq!(
        rules_of(next(&mut w).await.unwrap()),
        json!([nodes[0], nodes[1]])
    );
    // A role no selector matches changes nothing.
    roles
        .create(
            &PostParams::default(),
            &role("other", json!({}), get_pods.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "other".to_owned())
    );
    // Losing the label takes its rules away.
    roles
        .patch(
            "nodes-reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/aggregate": null}}})),
        )
        .await
        .unwrap();
    next(&mut w).await.unwrap();
    assert_eq!(rules_of(next(&mut w).await.unwrap()), get_pods);
    roles
        .delete("pods-reader", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "pods-reader".to_owned())
    );
    assert_eq!(rules_of(next(&mut w).await.unwrap()), json!([]));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), w.next())
            .await
            .is_err(),
        "nothing more: an unchanged union is not written"
    );

    // RoleBindings: namespaced, names may hold colons, defaulted, validated.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "web");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "system:readers"},
        "roleRef": {"kind": "ClusterRole", "name": "monitoring", "apiGroup": "rbac.authorization.k8s.io"},
        "subjects": [{"kind": "Group", "name": "devs"}],
    }))
    .unwrap();
    let made = bindings.create(&PostParams::default(), &rb).await.unwrap();
    assert_eq!(
        made.subjects.unwrap()[0].api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    let mut moved = bindings.get("system:readers").await.unwrap();
    moved.role_ref.name = "other".into();
    match bindings
        .replace("system:readers", &PostParams::default(), &moved)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(s.message.contains("cannot change roleRef"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert_eq!(
        bindings
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        sim.list("clusterrolebindings.rbac.authorization.k8s.io")
            .0
            .len(),
        0
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn subject_access_reviews_follow_the_stored_rbac_objects() {
    use crate::{SimRule, Subject};
    let (sim, server, _client) = start(SimConfig::default()).await;
    let crole = |name: &str, rules: Value| {
        sim.create(
            "clusterroles.rbac.authorization.k8s.io",
            json!({"metadata": {"name": name}, "rules": rules}),
        )
        .unwrap();
    };
    crole(
        "pod-reader",
        json!([{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]),
    );
    crole(
        "one-config",
        json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]}]),
    );
    crole(
        "logs",
        json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}]),
    );
    crole(
        "discovery",
        json!([{"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}]),
    );
    let bind = |key: &str, ns: Option<&str>, name: &str, role: (&str, &str), subject: Value| {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        sim.create(
            key,
            json!({"metadata": meta, "roleRef": {"kind": role.0, "name": role.1}, "subjects": [subject]}),
        )
        .unwrap();
    };
    let rb = "rolebindings.rbac.authorization.k8s.io";
    let crb = "clusterrolebindings.rbac.authorization.k8s.io";
    // A RoleBinding to a ClusterRole grants it in the binding's namespace only.
    bind(
        rb,
        Some("web"),
        "alice-pods",
        ("ClusterRole", "pod-reader"),
        json!({"kind": "User", "name": "alice"}),
    );
    bind(
        rb,
        Some("web"),
        "devs-config",
        ("ClusterRole", "one-config"),
        json!({"kind": "Group", "name": "devs"}),
    );
    bind(
        rb,
        Some("web"),
        "robot-logs",
        ("ClusterRole", "logs"),
        json!({"kind": "ServiceAccount", "name": "robot"}),
    );
    bind(
        crb,
        None,
        "everyone-discovers",
        ("ClusterRole", "discovery"),
        json!({"kind": "Group", "name": "system:authenticated"}),
    );
    bind(
        rb,
        Some("web"),
        "dangling",
        ("Role", "missing"),
        json!({"kind": "User", "name": "carol"}),
    );

    let res = |verb: &str, ns: &str, resource: &str, sub: &str, name: &str| json!({"verb": verb, "namespace": ns, "resource": resource, "subresource": sub, "name": name});
    let alice_web = sar(&server, "alice", &[], res("watch", "web", "pods", "", "")).await;
    assert!(allowed(&alice_web));
    assert_eq!(
        alice_web["reason"],
        "RBAC: allowed by RoleBinding \"alice-pods/web\" of ClusterRole \"pod-reader\" to User \"alice\""
    );
    assert!(!allowed(
        &sar(&server, "alice", &[], res("watch", "db", "pods", "", "")).await
    ));
    assert!(
        !allowed(&sar(&server, "alice", &[], res("watch", "", "pods", "", "")).await),
        "a RoleBinding never grants across namespaces"
    );
    assert!(!allowed(
        &sar(&server, "alice", &[], res("delete", "web", "pods", "", "a")).await
    ));
    // resourceNames: that object only, and never a list.
    assert!(allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("get", "web", "configmaps", "", "app")
        )
        .await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("get", "web", "configmaps", "", "other")
        )
        .await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("list", "web", "configmaps", "", "")
        )
        .await
    ));
    // A ServiceAccount subject defaults to the binding's namespace; */log is any log.
    let robot = "system:serviceaccount:web:robot";
    assert!(allowed(
        &sar(&server, robot, &[], res("get", "web", "pods", "log", "a")).await
    ));
    assert!(!allowed(
        &sar(&server, robot, &[], res("get", "web", "pods", "", "a")).await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "system:serviceaccount:db:robot",
            &[],
            res("get", "web", "pods", "log", "a")
        )
        .await
    ));
    // Non-resource URLs, through a group.
    let discover = json!({"verb": "get", "path": "/apis/apps/v1"});
    assert!(allowed(
        &sar(&server, "x", &["system:authenticated"], discover.clone()).await
    ));
    assert!(!allowed(&sar(&server, "x", &[], discover).await));
    // An unresolvable role is named in the reason and grants nothing.
    let carol = sar(&server, "carol", &[], res("get", "web", "pods", "", "a")).await;
    assert!(!allowed(&carol));
    assert_eq!(
        carol["reason"],
        "RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
    );
    // system:masters may do anything.
    assert!(allowed(
        &sar(
            &server,
            "root",
            &["system:masters"],
            res("delete", "", "nodes", "", "n1")
        )
        .await
    ));

    // SimRule writes objects that can be changed later like any other.
    sim.set_rules(vec![
        SimRule::read(
            Subject::User("dave".into()),
            &["deployments.apps"],
            &["web"],
        ),
        SimRule::read(Subject::Group("ops".into()), &["*"], &["*"]),
    ]);
    let deploy = |ns: &str| json!({"verb": "list", "namespace": ns, "group": "apps", "resource": "deployments"});
    assert!(allowed(&sar(&server, "dave", &[], deploy("web")).await));
    assert!(!allowed(&sar(&server, "dave", &[], deploy("db")).await));
    assert!(allowed(&sar(&server, "olga", &["ops"], deploy("")).await));
    sim.delete(rb, Some("web"), "kubefan-sim-rule-0").unwrap();
    assert!(!allowed(&sar(&server, "dave", &[], deploy("web")).await));
    sim.set_rules(vec![]);
    assert!(!allowed(&sar(&server, "olga", &["ops"], deploy("")).await));
    assert_eq!(
        sim.list(crb).0.len(),
        1,
        "objects not written by set_rules stay"
    );

    // A review that names neither kind of attributes, or nobody, is invalid.
    for spec in [
        json!({"user": "a"}),
        json!({"resourceAttributes": {"verb": "get"}}),
    ] {
        let resp = reqwest::Client::new()
            .post(format!(
                "{}/apis/authorization.k8s.io/v1/subjectaccessreviews",
                server.url()
            ))
            .json(&json!({"spec": spec}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
    }
    assert_eq!(sim.auth_stats().access_reviews, 21);
    server.stop().await;
}
