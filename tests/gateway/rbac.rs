//! `--auth kubernetes` with `--authorization rbac` (the default): rights
//! decided locally from the cluster's RBAC objects, all-namespace streams
//! narrowed to them and following them while open, over SSE, WebSocket and
//! the Kubernetes face; tokens reviewed again, with audiences.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::sse::seeded;
use crate::support::{ClientView, SseClient, TestEnv, WAIT, spawn, test_config};
use crate::ws::{WsClient, event};
use kubefan::config::AuthMethod;
use kubefan_sim::{Sim, SimUser};

pub(crate) const ROLES: &str = "roles.rbac.authorization.k8s.io";
pub(crate) const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";
const CLUSTER_ROLES: &str = "clusterroles.rbac.authorization.k8s.io";
const CLUSTER_ROLE_BINDINGS: &str = "clusterrolebindings.rbac.authorization.k8s.io";

/// A Role that may read pods in `ns`.
pub(crate) fn pod_reader(ns: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
}

/// A RoleBinding of `pod-reader` in `ns` to `user`.
pub(crate) fn binding(name: &str, ns: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

/// kubefan's own ClusterRole as deploy/rbac.yaml grants it (pods, nodes,
/// namespaces, the RBAC kinds, TokenReviews), with `deployments` when
/// `with_deployments`.
fn kubefan_role(with_deployments: bool) -> Value {
    let mut rules = vec![
        json!({"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}),
    ];
    if with_deployments {
        rules.push(json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}));
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kubefan"}, "rules": rules})
}

/// A ClusterRoleBinding `name` of ClusterRole `role` to `subject`.
fn cluster_role_binding(name: &str, role: &str, subject: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject]})
}

/// A simulated cluster with pods in default, web and batch, pod readers in
/// each, and the users the tests use.
pub(crate) fn team_sim() -> Sim {
    let sim = seeded(18);
    for ns in ["default", "web", "batch"] {
        sim.create(ROLES, pod_reader(ns)).unwrap();
    }
    sim.set_users(vec![
        SimUser::new("dana-token", "dana", &["team"]),
        SimUser::new("erin-token", "erin", &["team"]),
        SimUser::new("aud-token", "aud", &[]).with_audiences(&["kubefan"]),
    ]);
    sim
}

pub(crate) async fn rbac_env(sim: Sim, tune: impl FnOnce(&mut kubefan::config::Config)) -> TestEnv {
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    cfg.auth.cache_ttl = Duration::from_secs(300);
    tune(&mut cfg);
    let env = spawn(sim, cfg).await;
    env.synced("pods").await;
    env
}

fn namespaces(view: &ClientView) -> BTreeSet<String> {
    view.objects
        .values()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) fn pods_in(sim: &Sim, namespaces: &[&str]) -> Vec<Value> {
    sim.list("pods")
        .0
        .into_iter()
        .filter(|p| namespaces.contains(&p["metadata"]["namespace"].as_str().unwrap()))
        .collect()
}

/// Applies events until the view holds exactly `want`'s keys.
pub(crate) async fn until_holds(sse: &mut SseClient, view: &mut ClientView, want: &[Value]) {
    let keys = |objs: &mut dyn Iterator<Item = &Value>| -> BTreeSet<String> {
        objs.map(crate::support::key_of).collect()
    };
    let want = keys(&mut want.iter());
    tokio::time::timeout(WAIT, async {
        while keys(&mut view.objects.values()) != want {
            let ev = sse.next().await.expect("the stream goes on");
            view.apply(&ev);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the view never held {want:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_sees_what_rbac_grants_and_follows_it_without_reconnecting() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("dana-web", "web", "dana"))
        .unwrap();
    let env = rbac_env(sim, |_| {}).await;

    // Narrowed, not refused: only web's pods.
    let resp = env.get_as("/stream/pods", "dana-token").await;
    assert_eq!(resp.status(), 200);
    let mut sse_client = SseClient::new(resp);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse_client.next().await.unwrap());
    }
    assert_eq!(namespaces(&view), BTreeSet::from(["web".to_string()]));
    assert!(
        view.last_id.as_deref().is_some_and(|id| id.contains('~')),
        "a narrowed stream's ids carry its tag: {:?}",
        view.last_id
    );

    // A binding in batch: its pods arrive as ADDED on the open stream.
    env.sim
        .create(ROLE_BINDINGS, binding("dana-batch", "batch", "dana"))
        .unwrap();
    until_holds(
        &mut sse_client,
        &mut view,
        &pods_in(&env.sim, &["web", "batch"]),
    )
    .await;
    assert!(view.resets.is_empty());

    // The binding in web gone: its pods leave as DELETED.
    env.sim
        .delete(ROLE_BINDINGS, Some("web"), "dana-web")
        .unwrap();
    until_holds(&mut sse_client, &mut view, &pods_in(&env.sim, &["batch"])).await;

    // The last one gone: an ERROR 403 ends the stream.
    env.sim
        .delete(ROLE_BINDINGS, Some("batch"), "dana-batch")
        .unwrap();
    let last = tokio::time::timeout(WAIT, async {
        loop {
            let ev = sse_client.next().await.expect("an ERROR before the end");
            if ev.event == "ERROR" {
                return ev;
            }
        }
    })
    .await
    .expect("the stream ends");
    assert_eq!(last.data["object"]["code"], 403);
    assert!(sse_client.next().await.is_none(), "nothing after the ERROR");

    // Without any grant, a new stream is refused.
    assert_eq!(env.get_as("/stream/pods", "dana-token").await.status(), 403);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_streams_and_the_kubernetes_face_follow_rbac_too() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("erin-web", "web", "erin"))
        .unwrap();
    let env = rbac_env(sim, |_| {}).await;

    // A /ws subscription across namespaces is narrowed, and gains batch.
    let mut mux = WsClient::connect(&env, "/ws?access_token=erin-token").await;
    mux.subscribe(json!({"op": "subscribe", "id": "p", "resource": "pods"}))
        .await;
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&event(&mux.next().await));
    }
    assert_eq!(namespaces(&view), BTreeSet::from(["web".to_string()]));
    env.sim
        .create(ROLE_BINDINGS, binding("erin-batch", "batch", "erin"))
        .unwrap();
    let want: BTreeSet<String> = pods_in(&env.sim, &["web", "batch"])
        .iter()
        .map(crate::support::key_of)
        .collect();
    tokio::time::timeout(WAIT, async {
        while view.objects.keys().cloned().collect::<BTreeSet<_>>() != want {
            view.apply(&event(&mux.next().await));
        }
    })
    .await
    .expect("batch's pods arrive on the open subscription");

    // The Kubernetes face answers as kube-apiserver: within a namespace
    // granted, yes; across namespaces, 403.
    let client = env.kube_client(Some("erin-token")).await;
    let web: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "web");
    let listed = web.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), pods_in(&env.sim, &["web"]).len());
    let all: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
    match all.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("a list across namespaces must be refused: {other:?}"),
    }
    let default: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client, "default");
    match default.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("default is not granted: {other:?}"),
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_cluster_role_grants_what_it_aggregates() {
    let sim = team_sim();
    sim.create(
        CLUSTER_ROLES,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "team-view"},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"example.com/aggregate-to-team-view": "true"}}]},
            "rules": []}),
    )
    .unwrap();
    sim.create(
        CLUSTER_ROLE_BINDINGS,
        cluster_role_binding(
            "team-view",
            "team-view",
            json!({"kind": "Group", "name": "team", "apiGroup": "rbac.authorization.k8s.io"}),
        ),
    )
    .unwrap();
    let env = rbac_env(sim, |_| {}).await;
    // Nothing aggregated yet: nothing granted.
    assert_eq!(env.get_as("/stream/pods", "erin-token").await.status(), 403);
    env.sim
        .create(
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "pods-part",
                    "labels": {"example.com/aggregate-to-team-view": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        )
        .unwrap();
    let granted = tokio::time::timeout(WAIT, async {
        loop {
            let changed = env.app.authorizer().rbac_changed();
            let resp = env.get_as("/stream/pods", "erin-token").await;
            if resp.status() == 200 {
                return resp;
            }
            assert_eq!(resp.status(), 403);
            changed.await;
        }
    })
    .await
    .expect("the aggregated role grants pods in every namespace");
    let mut sse_client = SseClient::new(granted);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse_client.next().await.unwrap());
    }
    view.assert_matches(&env.sim.list("pods").0);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_no_longer_reviews_ends_its_streams_with_401() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("dana-web", "web", "dana"))
        .unwrap();
    let env = rbac_env(sim, |cfg| cfg.auth.cache_ttl = Duration::from_secs(1)).await;
    let resp = env.get_as("/stream/pods", "dana-token").await;
    assert_eq!(resp.status(), 200);
    let mut sse_client = SseClient::new(resp);
    let reviews = env.sim.token_reviews_of("dana-token");
    assert!(env.sim.revoke_token("dana-token"));
    let last = tokio::time::timeout(WAIT, async {
        loop {
            let ev = sse_client.next().await.expect("an ERROR before the end");
            if ev.event == "ERROR" {
                return ev;
            }
        }
    })
    .await
    .expect("the stream ends once the token is reviewed again");
    assert_eq!(last.data["object"]["code"], 401);
    assert!(env.sim.token_reviews_of("dana-token") > reviews);
    assert_eq!(env.get_as("/stream/pods", "dana-token").await.status(), 401);
    env.stop().await;
}

/// A cluster-scoped resource is granted cluster-wide or not at all: a
/// user whose ClusterRoleBinding for nodes goes, and who keeps a
/// namespace's grant of every resource, may no longer see nodes. The
/// stream ends with a 403, not narrowed to namespaces nodes are not in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_stream_ends_when_only_namespace_grants_are_left() {
    let sim = team_sim();
    sim.create(
        CLUSTER_ROLES,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "node-reader"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]}),
    )
    .unwrap();
    sim.create(
        CLUSTER_ROLE_BINDINGS,
        cluster_role_binding(
            "dana-nodes",
            "node-reader",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}),
        ),
    )
    .unwrap();
    sim.create(
        ROLES,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "everything", "namespace": "web"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
    )
    .unwrap();
    sim.create(
        ROLE_BINDINGS,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "dana-everything", "namespace": "web"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "everything"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}]}),
    )
    .unwrap();
    let env = rbac_env(sim, |_| {}).await;
    let resp = env.get_as("/stream/nodes", "dana-token").await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("the snapshot"));
    }
    assert_eq!(view.objects.len(), 3, "the nodes");
    env.sim
        .delete(CLUSTER_ROLE_BINDINGS, None, "dana-nodes")
        .unwrap();
    let error = sse.until_error(&mut view).await;
    assert_eq!(error.data["object"]["code"], 403, "{:?}", error.data);
    assert_eq!(
        env.get_as("/stream/nodes", "dana-token").await.status(),
        403
    );
    env.stop().await;
}

/// The Kubernetes face's watches follow the token's reviews as streams
/// do: revoked, a watch ends with an `ERROR` 401 (kubectl and client-go
/// then relist, and are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_no_longer_reviews_ends_its_kubernetes_watches_with_401() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("dana-web", "web", "dana"))
        .unwrap();
    let env = rbac_env(sim, |cfg| cfg.auth.cache_ttl = Duration::from_secs(1)).await;
    let path = "/api/v1/namespaces/web/pods?watch=1";
    let resp = env.get_as(path, "dana-token").await;
    assert_eq!(resp.status(), 200);
    let mut watch = crate::tables::Lines::new(resp);
    assert_eq!(watch.next().await["type"], "ADDED", "the web pods first");
    let reviews = env.sim.token_reviews_of("dana-token");
    assert!(env.sim.revoke_token("dana-token"));
    let last = loop {
        let ev = watch.next().await;
        if ev["type"] == "ERROR" {
            break ev;
        }
    };
    assert_eq!(last["object"]["code"], 401, "{last}");
    assert!(env.sim.token_reviews_of("dana-token") > reviews);
    assert_eq!(env.get_as(path, "dana-token").await.status(), 401);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_audiences_let_users_hand_kubefan_tokens_minted_for_it_alone() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("aud-web", "web", "aud"))
        .unwrap();
    // Without --token-audiences the review asks for the API server's own
    // audience, which this token is not valid for.
    let env = rbac_env(sim, |_| {}).await;
    assert_eq!(env.get_as("/stream/pods", "aud-token").await.status(), 401);
    env.stop().await;
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("aud-web", "web", "aud"))
        .unwrap();
    let env = rbac_env(sim, |cfg| cfg.auth.token_audiences = vec!["kubefan".into()]).await;
    assert_eq!(env.get_as("/stream/pods", "aud-token").await.status(), 200);
    env.stop().await;
}

/// A thousand subscribers from a hundred users cost one upstream watch per
/// RBAC kind, and an RBAC change that touches all of them recomputes each
/// user's access set once, not once per stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_of_rbac_stays_flat_however_many_streams_a_user_opens() {
    const USERS: usize = 100;
    const STREAMS: usize = 10;
    let sim = seeded(12);
    sim.create(ROLES, pod_reader("web")).unwrap();
    sim.create(
        ROLE_BINDINGS,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "team-web", "namespace": "web"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "Group", "name": "team", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .unwrap();
    let users: Vec<SimUser> = (0..USERS)
        .map(|i| SimUser::new(&format!("token-{i}"), &format!("user-{i}"), &["team"]))
        .collect();
    sim.set_users(users);
    let env = rbac_env(sim, |cfg| cfg.limits.max_connections = 0).await;
    let mut streams = Vec::with_capacity(USERS * STREAMS);
    for i in 0..USERS {
        for _ in 0..STREAMS {
            let resp = env.get_as("/stream/pods", &format!("token-{i}")).await;
            assert_eq!(resp.status(), 200);
            streams.push(SseClient::new(resp));
        }
    }
    // Every stream has its (narrowed) snapshot.
    let mut views = Vec::with_capacity(streams.len());
    for sse_client in &mut streams {
        let mut view = ClientView::new();
        while view.snapshots == 0 {
            view.apply(&sse_client.next().await.unwrap());
        }
        assert_eq!(namespaces(&view), BTreeSet::from(["web".to_string()]));
        views.push(view);
    }
    for kind in [ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS] {
        assert_eq!(env.sim.stats().resource(kind).open_watches, 1, "{kind}");
    }
    let rbac = env
        .app
        .authorizer()
        .rbac()
        .expect("--authorization rbac")
        .clone();
    assert_eq!(rbac.stats().held, USERS, "one held access set per user");
    let before = rbac.stats().computations;

    // A role nobody is bound to yet changes no one's access.
    let changed = env.app.authorizer().rbac_changed();
    env.sim
        .create(
            CLUSTER_ROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "pod-viewer"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        )
        .unwrap();
    tokio::time::timeout(WAIT, changed).await.unwrap();
    let after_role = rbac.stats().computations;
    // One binding that widens every user's access.
    let changed = env.app.authorizer().rbac_changed();
    env.sim
        .create(
            CLUSTER_ROLE_BINDINGS,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "team-everywhere"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-viewer"},
                "subjects": [{"kind": "Group", "name": "team", "apiGroup": "rbac.authorization.k8s.io"}]}),
        )
        .unwrap();
    tokio::time::timeout(WAIT, changed).await.unwrap();
    // Every stream widens to every namespace...
    let everything = env.sim.list("pods").0;
    for (sse_client, view) in streams.iter_mut().zip(views.iter_mut()) {
        until_holds(sse_client, view, &everything).await;
    }
    // ...for one computation per user (the role alone changes no grant;
    // the binding names the team's users once each).
    let spent = rbac.stats().computations - after_role;
    assert_eq!(
        (after_role - before, spent),
        (0, USERS as u64),
        "computations for the role, then the binding ({USERS} users, {} streams)",
        USERS * STREAMS
    );
    for kind in [ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS] {
        assert_eq!(env.sim.stats().resource(kind).open_watches, 1, "{kind}");
    }
    env.stop().await;
}

/// kubefan's own rights: a resource its credentials may not list and watch
/// is refused at once with what to grant, never retried against the
/// upstream, left out of discovery and named by /readyz; granting it (an
/// RBAC change kubefan sees) starts it; revoking it while running ends the
/// open streams with what to grant, at the upstream's next 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubefans_own_rights_are_checked_and_it_says_what_to_grant() {
    let sim = Sim::new(kubefan_sim::SimConfig {
        authorization: kubefan_sim::AuthorizationMode::Rbac,
        ..crate::support::sim_config()
    });
    kubefan_sim::seed_cluster(
        &sim,
        &kubefan_sim::ChurnConfig {
            pods: 6,
            nodes: 2,
            seed: Some(7),
            ..Default::default()
        },
    );
    sim.set_users(vec![
        SimUser::service_account("kubefan-sa-token", "kubefan", "kubefan"),
        SimUser::new("dana-token", "dana", &[]),
    ]);
    // What deploy/rbac.yaml grants: pods, nodes, namespaces and the RBAC
    // kinds, not deployments.
    sim.create(CLUSTER_ROLES, kubefan_role(false)).unwrap();
    sim.create(
        CLUSTER_ROLE_BINDINGS,
        cluster_role_binding(
            "kubefan",
            "kubefan",
            json!({"kind": "ServiceAccount", "name": "kubefan", "namespace": "kubefan"}),
        ),
    )
    .unwrap();
    sim.create(
        CLUSTER_ROLE_BINDINGS,
        cluster_role_binding(
            "dana-everything",
            "cluster-admin",
            json!({"kind": "User", "name": "dana"}),
        ),
    )
    .unwrap();
    // (cluster-admin is the simulator's bootstrap policy in RBAC mode.)
    let mut cfg = test_config(&["pods", "deployments.apps"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    let env = crate::support::spawn_as(sim, cfg, Some("kubefan-sa-token")).await;
    env.synced("pods").await;

    // Refused at once, saying what to grant; the upstream never listed it.
    let resp = env.get_as("/stream/deployments.apps", "dana-token").await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("list, watch deployments.apps")
            && message.contains("\"deployments\" in API group \"apps\""),
        "{message}"
    );
    assert_eq!(
        env.sim.stats().resource("deployments.apps").list_requests,
        0
    );
    // /readyz names it; discovery does not offer it.
    let (status, ready) = env.get_json("/readyz").await;
    assert_eq!(status, 503);
    let reason = ready["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "deployments.apps")
        .map(|r| r["reason"].to_string())
        .unwrap_or_default();
    assert!(reason.contains("grant its ClusterRole"), "{ready}");
    let client = env.kube_client(Some("dana-token")).await;
    let apps = client
        .list_api_group_resources("apps/v1")
        .await
        .map(|l| {
            l.resources
                .iter()
                .map(|r| r.name.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert!(!apps.contains(&"deployments".to_string()), "{apps:?}");

    // Granted: kubefan sees the RBAC change and starts it.
    env.sim.update(CLUSTER_ROLES, kubefan_role(true)).unwrap();
    tokio::time::timeout(WAIT, env.app.informers().ready())
        .await
        .expect("deployments start once granted");
    assert_eq!(env.get_json("/readyz").await.0, 200);
    let resp = env.get_as("/stream/deployments.apps", "dana-token").await;
    assert_eq!(resp.status(), 200);
    let mut stream = SseClient::new(resp);

    // Revoked while running: kube-apiserver does not end a watch when RBAC
    // changes (authorization is per request), so kubefan learns it when
    // its watch ends and the next request is 403. The open stream ends
    // with what to grant, and the upstream is not asked again and again.
    env.sim.update(CLUSTER_ROLES, kubefan_role(false)).unwrap();
    env.sim.end_watches();
    let ended = loop {
        let ev = stream.next().await.expect("an ERROR before the end");
        if ev.event == "ERROR" {
            break ev;
        }
    };
    let message = ended.data["object"]["message"]
        .as_str()
        .or(ended.data["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("deployments"), "{:?}", ended.data);
    assert!(
        stream.next().await.is_none(),
        "the stream ends after its ERROR"
    );
    let requests = |env: &TestEnv| {
        let stats = env.sim.stats();
        let r = stats.resource("deployments.apps");
        r.list_requests + r.watch_requests
    };
    let after_end = requests(&env);
    let resp = env.get_as("/stream/deployments.apps", "dana-token").await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains(
            "grant its ClusterRole get, list and watch on \"deployments\" in API group \"apps\""
        ),
        "{body}"
    );
    assert_eq!(
        requests(&env),
        after_end,
        "refused without asking the upstream"
    );
    env.stop().await;
}

/// A leaf of a tier (its upstream a root kubefan, which is read-only)
/// reviews its clients' tokens with the API server (`--auth-kubeconfig`),
/// reads the RBAC objects through the root like any resource, and narrows
/// a teammate's stream as the root would; the API server still sees one
/// watch on pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_reviews_tokens_with_the_api_server_and_reads_rbac_through_its_root() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("dana-web", "web", "dana"))
        .unwrap();
    sim.set_users(vec![
        SimUser::new("dana-token", "dana", &["team"]),
        SimUser::new("leaf-token", "kubefan-leaf", &[]),
    ]);
    // What a leaf's ServiceAccount is granted on the root (as deploy/'s
    // ClusterRole grants kubefan on the API server).
    sim.create(
        CLUSTER_ROLES,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "kubefan-leaf"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], "verbs": ["get", "list", "watch"]}]}),
    )
    .unwrap();
    sim.create(
        CLUSTER_ROLE_BINDINGS,
        cluster_role_binding(
            "kubefan-leaf",
            "kubefan-leaf",
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kubefan-leaf"}),
        ),
    )
    .unwrap();
    let root = rbac_env(sim, |_| {}).await;

    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    cfg.auth.cache_ttl = Duration::from_secs(300);
    let upstream = root.kube_client(Some("leaf-token")).await;
    let reviews =
        kube::Client::try_from(root.server.client_config()).expect("a client of the API server");
    let leaf = kubefan::app::App::build_with_reviews(cfg, upstream, reviews)
        .await
        .expect("the leaf starts");
    let leaf_base = format!("http://{}", leaf.local_addr());
    let resp = tokio::time::timeout(
        WAIT,
        root.http
            .get(format!("{leaf_base}/stream/pods"))
            .bearer_auth("dana-token")
            .send(),
    )
    .await
    .expect("response in time")
    .expect("request");
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let mut stream = SseClient::new(resp);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&stream.next().await.unwrap());
    }
    assert_eq!(namespaces(&view), BTreeSet::from(["web".to_string()]));
    let refused = tokio::time::timeout(
        WAIT,
        root.http
            .get(format!("{leaf_base}/stream/pods"))
            .bearer_auth("nobody-token")
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(root.sim.stats().resource("pods").open_watches, 1);
    tokio::time::timeout(WAIT, leaf.stop()).await.unwrap();
    root.stop().await;
}

/// A Role in `ns` that may get, list and watch only the pod `name`.
pub(crate) fn one_pod_reader(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "one-pod", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": [name],
                   "verbs": ["get", "list", "watch"]}]})
}

/// A grant limited by `resourceNames` opens that one object to `get`, and
/// to a `list` or `watch` whose field selector requires its name, as
/// kube-apiserver authorizes them (`RequestInfo.Name` from
/// `metadata.name=NAME`); the collection stays closed. Both with RBAC
/// evaluated here and with every decision a SubjectAccessReview.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_by_resource_name_opens_that_object_to_get_list_and_watch() {
    for review in [false, true] {
        let sim = team_sim();
        let mine = pods_in(&sim, &["web"]);
        let name = mine[0]["metadata"]["name"].as_str().unwrap().to_string();
        let other = mine[1]["metadata"]["name"].as_str().unwrap().to_string();
        sim.create(ROLES, one_pod_reader("web", &name)).unwrap();
        sim.create(ROLE_BINDINGS, json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding", "metadata": {"name": "dana-one", "namespace": "web"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "one-pod"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}]}))
            .unwrap();
        let env = rbac_env(sim, |cfg| {
            if review {
                cfg.auth.authorization = kubefan::config::AuthorizationMode::Review;
            }
        })
        .await;
        let status = |path: String| {
            let env = &env;
            async move { env.get_as(&path, "dana-token").await.status().as_u16() }
        };
        let pods = "/api/v1/namespaces/web/pods";
        let mode = if review { "review" } else { "rbac" };
        assert_eq!(status(format!("{pods}/{name}")).await, 200, "{mode}: get");
        for (path, what) in [
            (format!("{pods}/{other}"), "another"),
            (pods.to_string(), "the collection"),
            (
                format!("{pods}?fieldSelector=metadata.name!%3D{name}"),
                "all but it",
            ),
            (
                format!("/api/v1/namespaces/web/pods/{other}?watch=1"),
                "another, by its path (a get)",
            ),
            (
                format!("/api/v1/watch/namespaces/web/pods/{other}"),
                "another, by the deprecated watch path",
            ),
            (
                format!("/api/v1/pods?fieldSelector=metadata.name%3D{name}"),
                "across namespaces, where the RoleBinding does not reach",
            ),
        ] {
            assert_eq!(status(path).await, 403, "{mode}: {what}");
        }
        let listed = env
            .get_as(
                &format!("{pods}?fieldSelector=metadata.name%3D{name}"),
                "dana-token",
            )
            .await;
        assert_eq!(listed.status(), 200, "{mode}: the list naming it");
        let listed: Value = listed.json().await.unwrap();
        let names: Vec<&str> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, [name.as_str()], "{mode}");
        // The watch naming it: its ADDED, then its changes only.
        let watch = env
            .get_as(
                &format!("{pods}?fieldSelector=metadata.name%3D{name}&watch=1"),
                "dana-token",
            )
            .await;
        assert_eq!(watch.status(), 200, "{mode}: the watch naming it");
        let mut lines = crate::tables::Lines::new(watch);
        let added = lines.next().await;
        assert_eq!(added["type"], "ADDED", "{mode}: {added}");
        assert_eq!(added["object"]["metadata"]["name"], name.as_str());
        for pod in [&other, &name] {
            env.sim
                .merge_patch(
                    "pods",
                    Some("web"),
                    pod,
                    &json!({"metadata": {"labels": {"touched": "yes"}}}),
                )
                .unwrap();
        }
        let modified = lines.next().await;
        assert_eq!(modified["type"], "MODIFIED", "{mode}: {modified}");
        assert_eq!(modified["object"]["metadata"]["name"], name.as_str());
        // And by the deprecated watch path.
        let by_path = env
            .get_as(
                &format!("/api/v1/watch/namespaces/web/pods/{name}"),
                "dana-token",
            )
            .await;
        assert_eq!(by_path.status(), 200, "{mode}: the watch path naming it");
        let added = crate::tables::Lines::new(by_path).next().await;
        assert_eq!(added["object"]["metadata"]["name"], name.as_str(), "{mode}");
        env.stop().await;
    }
}
