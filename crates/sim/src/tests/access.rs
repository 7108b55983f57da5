//! The simulator's own clients: RBAC mode, self reviews, TokenReview audiences.

use super::{brief, call, next, pods, start};
use crate::{SimConfig, pod};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchParams};
use kube::discovery::Discovery;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn rbac_mode_authenticates_and_authorizes_the_simulators_own_clients() {
    use crate::{AuthorizationMode, SimRule, SimUser, Subject};
    use reqwest::Method;
    let cfg = SimConfig {
        authorization: AuthorizationMode::Rbac,
        ..SimConfig::default()
    };
    let (sim, server, _) = start(cfg).await;
    sim.set_users(vec![
        SimUser::new("admin-token", "root", &["system:masters"]),
        SimUser::new("alice-token", "alice", &["devs"]),
    ]);
    sim.set_rules(vec![SimRule::read(
        Subject::Group("devs".into()),
        &["pods"],
        &["web"],
    )]);
    sim.create("pods", pod("a").ns("web").build()).unwrap();
    let roles: Vec<String> = sim
        .list("clusterroles.rbac.authorization.k8s.io")
        .0
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for bootstrap in [
        "cluster-admin",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
    ] {
        assert!(
            roles.iter().any(|r| r == bootstrap),
            "{bootstrap} in {roles:?}"
        );
    }

    // Through kube-rs with the user's token, as a gateway would call it.
    let alice = kube::Client::try_from(server.client_config_with_token("alice-token")).unwrap();
    let web: Api<DynamicObject> =
        Api::namespaced_with(alice.clone(), "web", &ApiResource::erase::<Pod>(&()));
    assert_eq!(
        web.list(&ListParams::default().limit(1))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let mut w = web
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "a".to_owned())
    );
    match pods(&alice).list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    assert!(
        pods(&alice)
            .watch(&WatchParams::default(), "0")
            .await
            .is_err()
    );
    let d = Discovery::new(alice.clone()).run().await.unwrap();
    assert!(d.has_group("apps"), "authenticated users may discover");

    let (code, status) = call(
        &server,
        Method::GET,
        "/apis/apps/v1/namespaces/web/deployments/d",
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "deployments.apps \"d\" is forbidden: User \"alice\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"web\""
    );
    assert_eq!(
        status["details"],
        json!({"name": "d", "group": "apps", "kind": "deployments"})
    );
    let (code, status) = call(&server, Method::GET, "/api/v1/pods", Some("stolen"), None).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
    // No token is system:anonymous: /version is public, discovery is not.
    assert_eq!(
        call(&server, Method::GET, "/version", None, None).await.0,
        200
    );
    let (code, status) = call(&server, Method::GET, "/api", None, None).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    assert_eq!(
        call(
            &server,
            Method::GET,
            "/api/v1/pods",
            Some("admin-token"),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(&server, Method::GET, "/debug/stats", None, None)
            .await
            .0,
        200
    );

    // The caller's own access and identity.
    let ssar = |verb: &str, ns: &str| json!({"spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}});
    let ssar_path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(ssar("watch", "web")),
    )
    .await;
    assert_eq!((code, &review["status"]["allowed"]), (201, &json!(true)));
    let (_, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(ssar("watch", "")),
    )
    .await;
    assert_eq!(review["status"]["allowed"], false);
    let ssrr_path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let (code, rules) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {"namespace": "web"}})),
    )
    .await;
    assert_eq!(code, 201);
    let resource_rules = rules["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules.contains(
            &json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]})
        ),
        "{rules}"
    );
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"][0] == "selfsubjectaccessreviews")
    );
    assert!(
        !rules["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (_, rules) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {"namespace": "db"}})),
    )
    .await;
    assert!(
        !rules["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "pods")
    );
    let (code, _) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {}})),
    )
    .await;
    assert_eq!(code, 400, "a rules review needs a namespace");
    let (code, me) = call(
        &server,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some("alice-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "alice", "groups": ["devs", "system:authenticated"]})
    );

    // Access follows the objects: a removed binding takes it away.
    sim.delete(
        "rolebindings.rbac.authorization.k8s.io",
        Some("web"),
        "kubefan-sim-rule-0",
    )
    .unwrap();
    assert_eq!(
        call(
            &server,
            Method::GET,
            "/api/v1/namespaces/web/pods",
            Some("alice-token"),
            None
        )
        .await
        .0,
        403
    );
    let stats = sim.auth_stats();
    assert_eq!((stats.unauthorized, stats.forbidden), (1, 5));
    assert_eq!(
        (stats.self_access_reviews, stats.self_rules_reviews),
        (2, 3)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn by_default_requests_and_self_reviews_are_allowed_as_always_allow_allows_them() {
    use crate::{SimRule, SimUser, Subject};
    use reqwest::Method;
    let (sim, server, _) = start(SimConfig::default()).await;
    sim.set_users(vec![SimUser::new("alice-token", "alice", &[])]);
    sim.set_rules(vec![SimRule::read(
        Subject::User("alice".into()),
        &["pods"],
        &["web"],
    )]);
    assert_eq!(
        call(&server, Method::GET, "/api/v1/pods", Some("anything"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        call(&server, Method::GET, "/api/v1/pods", None, None)
            .await
            .0,
        200
    );
    assert!(
        sim.list("clusterroles.rbac.authorization.k8s.io")
            .0
            .iter()
            .all(|r| r["metadata"]["name"] != "cluster-admin"),
        "no bootstrap policy unless asked for"
    );
    let ssar_path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let body = json!({"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "web"}}});
    let (_, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(review["status"]["allowed"], true);
    // The AlwaysAllow authorizer answers a self review as it answers every
    // request (kube-apiserver's SelfSubjectAccessReview asks the configured
    // authorizer): even a caller with no binding may.
    let (_, review) = call(&server, Method::POST, ssar_path, None, Some(body.clone())).await;
    assert_eq!(review["status"]["allowed"], true, "{review}");
    assert_eq!(
        call(&server, Method::POST, ssar_path, Some("stolen"), Some(body))
            .await
            .0,
        401
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn token_reviews_check_audiences_and_revoked_tokens_stop_reviewing() {
    use crate::{AuthorizationMode, SimUser};
    use reqwest::Method;
    let cfg = SimConfig {
        authorization: AuthorizationMode::Rbac,
        ..SimConfig::default()
    };
    let (sim, server, _) = start(cfg).await;
    sim.set_users(vec![
        SimUser::new("alice-token", "alice", &["devs"]),
        SimUser::service_account("kubefan-token", "kubefan", "kubefan")
            .with_audiences(&["kubefan", "metrics"]),
    ]);
    let review = |token: &str, audiences: Option<Vec<&str>>| {
        let mut spec = json!({"token": token});
        if let Some(a) = audiences {
            spec["audiences"] = json!(a);
        }
        let server = &server;
        async move {
            let (code, body) = call(
                server,
                Method::POST,
                "/apis/authentication.k8s.io/v1/tokenreviews",
                Some("kubefan-token-unused"),
                Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})),
            )
            .await;
            (code, body["status"].clone())
        }
    };
    // The review endpoint itself needs a caller allowed to create reviews.
    let (code, _) = review("alice-token", None).await;
    assert_eq!(code, 401, "the caller's own token is checked first");
    sim.set_users(vec![
        SimUser::new("alice-token", "alice", &["devs"]),
        SimUser::service_account("kubefan-token", "kubefan", "kubefan")
            .with_audiences(&["kubefan", "metrics"]),
        SimUser::new("kubefan-token-unused", "reviewer", &["system:masters"]),
    ]);
    let api = "https://kubernetes.default.svc.cluster.local";
    let (code, status) = review("alice-token", None).await;
    assert_eq!(code, 201);
    assert_eq!(status["authenticated"], true);
    assert_eq!(status["audiences"], json!([api]));
    assert_eq!(
        status["user"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    let (_, status) = review("alice-token", Some(vec!["kubefan"])).await;
    assert_eq!(status["authenticated"], false);
    assert_eq!(
        status["error"],
        format!("token audiences [\"{api}\"] is invalid for the target audiences [\"kubefan\"]")
    );
    // A token minted for kubefan reviews for kubefan, answered in the order asked.
    let (_, status) = review("kubefan-token", Some(vec!["other", "metrics", "kubefan"])).await;
    assert_eq!(status["authenticated"], true);
    assert_eq!(status["audiences"], json!(["metrics", "kubefan"]));
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:kubefan:kubefan"
    );
    assert_eq!(
        status["user"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:kubefan",
            "system:authenticated"
        ])
    );
    let (_, status) = review("kubefan-token", None).await;
    assert_eq!(
        status["authenticated"], false,
        "not a token for the API server"
    );
    // ... so the API server itself does not take it.
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/pods",
        Some("kubefan-token"),
        None,
    )
    .await;
    assert_eq!(code, 401);

    // Revoked: the next review fails, and so do requests.
    assert_eq!(
        sim.token_reviews_of("alice-token"),
        2,
        "a refused caller's review is not answered"
    );
    assert!(sim.revoke_token("alice-token"));
    assert!(!sim.revoke_token("alice-token"));
    let (_, status) = review("alice-token", None).await;
    assert_eq!(
        (&status["authenticated"], &status["error"]),
        (&json!(false), &json!("invalid bearer token"))
    );
    assert_eq!(sim.token_reviews_of("alice-token"), 3);
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/web/pods",
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(code, 401);
    assert_eq!(sim.auth_stats().token_reviews, 5);
    server.stop().await;
}

/// kube-apiserver's user-facing roles are there to bind, aggregated as
/// kube-controller-manager aggregates them: `view` reads pods and not
/// secrets, `edit` writes pods and reads secrets, `admin` also grants
/// RoleBindings; a RoleBinding of `view` in one namespace opens that
/// namespace only.
#[tokio::test(flavor = "multi_thread")]
async fn the_bootstrap_admin_edit_and_view_roles_are_aggregated_and_bindable() {
    use crate::{AuthorizationMode, SimUser};
    use reqwest::Method;
    let cfg = SimConfig {
        authorization: AuthorizationMode::Rbac,
        ..SimConfig::default()
    };
    let (sim, server, _) = start(cfg).await;
    sim.set_users(vec![SimUser::new("alice-token", "alice", &["devs"])]);
    let roles = "clusterroles.rbac.authorization.k8s.io";
    let allows = |role: &str, verb: &str, group: &str, resource: &str| {
        let r = sim
            .get(roles, None, role)
            .unwrap_or_else(|| panic!("{role}"));
        r["rules"].as_array().unwrap().iter().any(|rule| {
            let has =
                |k: &str, v: &str| rule[k].as_array().is_some_and(|a| a.iter().any(|x| x == v));
            has("verbs", verb) && has("apiGroups", group) && has("resources", resource)
        })
    };
    assert!(allows("view", "list", "", "pods"));
    assert!(
        !allows("view", "get", "", "secrets"),
        "view reads no secrets"
    );
    assert!(allows("edit", "create", "", "pods") && allows("edit", "list", "", "pods"));
    assert!(allows("edit", "get", "", "secrets"));
    assert!(allows(
        "admin",
        "create",
        "rbac.authorization.k8s.io",
        "rolebindings"
    ));
    assert!(
        allows("admin", "watch", "apps", "deployments"),
        "edit's and view's rules too"
    );
    let view = sim.get(roles, None, "view").unwrap();
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );

    sim.create(
        "rolebindings.rbac.authorization.k8s.io",
        json!({"metadata": {"name": "devs-view", "namespace": "web"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]}),
    )
    .unwrap();
    let get = |path: &'static str| call(&server, Method::GET, path, Some("alice-token"), None);
    assert_eq!(get("/api/v1/namespaces/web/pods").await.0, 200);
    assert_eq!(get("/api/v1/namespaces/web/secrets").await.0, 403);
    assert_eq!(get("/api/v1/namespaces/batch/pods").await.0, 403);
}
