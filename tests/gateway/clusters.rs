//! Several clusters behind one gateway (`--cluster`): each served under
//! `/clusters/NAME/` with its own watches, readiness and RBAC, a
//! `--default-cluster` at the root paths, and the errors of naming one
//! that is not there.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kubefan::app::{App, Upstream};
use kubefan::cluster::ReadyWhen;
use kubefan::config::{AuthMethod, Config};
use kubefan_sim::{Sim, SimServer, SimUser, pod};
use serde_json::Value;

use crate::rbac::{ROLE_BINDINGS, binding};
use crate::sse::seeded;
use crate::support::{ClientView, SseClient, SseEvent, WAIT, test_config, validate_status};

/// Simulated clusters and one gateway serving them all.
struct Env {
    /// Each cluster's simulator and its server (`None` while stopped).
    sims: Vec<(&'static str, Sim, Option<SimServer>)>,
    app: App,
    base: String,
    http: reqwest::Client,
}

/// A simulated cluster `name` whose pods are told apart from the other
/// clusters' by one of its own (`only-NAME` in `web`).
fn cluster_sim(name: &str) -> Sim {
    let sim = seeded(6);
    sim.create("pods", pod(&format!("only-{name}")).ns("web").build())
        .unwrap();
    sim
}

async fn serve(sims: Vec<(&'static str, Sim)>, cfg: Config) -> Env {
    serve_as(sims.into_iter().map(|(n, s)| (n, s, None)).collect(), cfg).await
}

/// Clusters `east` and `west` ([`cluster_sim`]).
async fn east_west(cfg: Config) -> Env {
    serve(
        vec![("east", cluster_sim("east")), ("west", cluster_sim("west"))],
        cfg,
    )
    .await
}

/// [`serve`], kubefan reading each cluster with the token given for it
/// (none: the simulator's own).
async fn serve_as(sims: Vec<(&'static str, Sim, Option<&str>)>, cfg: Config) -> Env {
    let mut upstreams = Vec::new();
    let mut served = Vec::new();
    for (name, sim, token) in sims {
        let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let config = match token {
            Some(token) => server.client_config_with_token(token),
            None => server.client_config(),
        };
        let client = kube::Client::try_from(config).unwrap();
        upstreams.push(Upstream {
            name: Some(name.to_string()),
            client: client.clone(),
            reviews: client,
            url: Some(server.url()),
        });
        served.push((name, sim, Some(server)));
    }
    let app = App::build_clusters(cfg, upstreams)
        .await
        .expect("gateway starts");
    Env {
        base: format!("http://{}", app.local_addr()),
        sims: served,
        app,
        http: reqwest::Client::new(),
    }
}

impl Env {
    fn sim(&self, name: &str) -> &Sim {
        &self.sims.iter().find(|(n, ..)| *n == name).unwrap().1
    }

    /// Stops cluster `name`'s API server (its address stays known).
    async fn kill(&mut self, name: &str) -> std::net::SocketAddr {
        let (_, _, server) = self.sims.iter_mut().find(|(n, ..)| *n == name).unwrap();
        let server = server.take().expect("running");
        let addr = server.addr();
        server.stop().await;
        addr
    }

    /// Starts cluster `name`'s API server again at `addr`, its objects
    /// and history as they are (an API server restart; etcd kept).
    async fn restart(&mut self, name: &str, addr: std::net::SocketAddr) {
        let (_, sim, server) = self.sims.iter_mut().find(|(n, ..)| *n == name).unwrap();
        *server = Some(sim.serve(addr).await.expect("the same address binds again"));
    }

    async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        tokio::time::timeout(WAIT, req.send())
            .await
            .expect("response in time")
            .expect("request")
    }

    async fn json(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let resp = self.get(path, token).await;
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("a JSON body"))
    }

    /// The snapshot a stream at `path` sends, as a client holds it.
    async fn snapshot(&self, path: &str, token: Option<&str>) -> (ClientView, SseClient) {
        let resp = self.get(path, token).await;
        assert_eq!(resp.status(), 200, "GET {path}");
        let mut sse = SseClient::new(resp);
        let view = crate::support::first_snapshot(&mut sse).await;
        (view, sse)
    }

    /// Waits until every cluster's RBAC objects are loaded: until then a
    /// cluster's part of a merged stream starts later, in the stream.
    async fn rbac_loaded(&self) {
        tokio::time::timeout(WAIT, async {
            for cluster in self.app.clusters().all() {
                let authorizer = cluster.authorizer();
                loop {
                    // Taken before looking, so a load in between is not missed.
                    let changed = authorizer.rbac_changed();
                    if authorizer.loaded() {
                        break;
                    }
                    changed.await;
                }
            }
        })
        .await
        .expect("every cluster's RBAC objects loaded in time");
    }

    /// Changes in both clusters: three pods more in east, two in west,
    /// and west's own gone.
    fn change_both(&self) {
        for (cluster, n) in [("east", 3), ("west", 2)] {
            for i in 0..n {
                self.sim(cluster)
                    .create("pods", pod(&format!("{cluster}-{i}")).ns("web").build())
                    .unwrap();
            }
        }
        self.sim("west")
            .delete("pods", Some("web"), "only-west")
            .unwrap();
    }

    /// A pod more in each cluster, made while a merged stream is away.
    fn change_while_away(&self) {
        for (cluster, ns) in [("east", "web"), ("west", "batch")] {
            self.sim(cluster)
                .create("pods", pod("while-away").ns(ns).build())
                .unwrap();
        }
    }

    async fn stop(self) {
        self.app.stop().await;
        for (_, _, server) in self.sims {
            if let Some(server) = server {
                server.stop().await;
            }
        }
    }
}

fn names(view: &ClientView) -> BTreeSet<String> {
    view.objects
        .values()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// The namespaces a view holds.
fn namespaces(view: &ClientView) -> BTreeSet<String> {
    view.objects
        .values()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

/// Simulated clusters `names`, each a team's (`rbac::team_sim`: pods in
/// default, web and batch, a pod reader Role in each), with `users(name)`
/// as the users its TokenReview knows, and `bindings` (cluster, user,
/// namespace): RoleBindings of the pod reader.
fn team_clusters(
    names: &[&'static str],
    users: impl Fn(&str) -> Vec<SimUser>,
    bindings: &[(&str, &str, &str)],
) -> Vec<(&'static str, Sim)> {
    names
        .iter()
        .map(|&name| {
            let sim = crate::rbac::team_sim();
            sim.set_users(users(name));
            for (_, user, ns) in bindings.iter().filter(|(c, ..)| *c == name) {
                sim.create(ROLE_BINDINGS, binding(&format!("{user}-{ns}"), ns, user))
                    .unwrap();
            }
            (name, sim)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_is_served_under_its_own_path_with_one_watch_per_resource() {
    let log = crate::support::access_log();
    let env = east_west(test_config(&["pods"])).await;

    // Three viewers of each cluster's pods: each sees its cluster's, and
    // each cluster's API server sees one watch.
    let mut streams = Vec::new();
    for cluster in ["east", "west"] {
        for _ in 0..3 {
            let (view, sse) = env
                .snapshot(&format!("/clusters/{cluster}/stream/pods"), None)
                .await;
            view.assert_matches(&env.sim(cluster).list("pods").0);
            assert!(names(&view).contains(&format!("only-{cluster}")));
            streams.push((cluster, view, sse));
        }
    }
    for cluster in ["east", "west"] {
        assert_eq!(
            env.sim(cluster).stats().resource("pods").open_watches,
            1,
            "{cluster}: one upstream watch"
        );
    }
    // Metrics say which cluster: each hub's gauges its own, nothing
    // recorded without the label.
    let metrics = env.get("/metrics", None).await.text().await.unwrap();
    for cluster in ["east", "west"] {
        let objects = env.sim(cluster).list("pods").0.len();
        for line in [
            format!(
                "kubefan_subscribers{{cluster=\"{cluster}\",resource=\"pods\",transport=\"Sse\"}} 3"
            ),
            format!(
                "kubefan_hub_cache_objects{{cluster=\"{cluster}\",resource=\"pods\"}} {objects}"
            ),
            format!("kubefan_upstream_watches_total{{cluster=\"{cluster}\",resource=\"pods\"}} 1"),
        ] {
            assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
        }
    }
    assert!(
        !metrics.contains("{resource=\"pods\""),
        "every pods series names its cluster:\n{metrics}"
    );
    // A change in one cluster reaches its viewers only.
    env.sim("west")
        .create("pods", pod("new-in-west").ns("web").build())
        .unwrap();
    let rv = env.sim("west").stats().resource_version;
    for (cluster, view, sse) in &mut streams {
        if *cluster == "west" {
            tokio::time::timeout(WAIT, view.follow(sse, rv))
                .await
                .expect("west's change in time");
            assert!(names(view).contains("new-in-west"));
        }
    }
    let (east, _) = env.snapshot("/clusters/east/stream/pods", None).await;
    assert!(!names(&east).contains("new-in-west"));

    // The Kubernetes face, per cluster: its objects, its discovery.
    let (status, pod) = env
        .json("/clusters/west/api/v1/namespaces/web/pods/only-west", None)
        .await;
    assert_eq!(
        (status, pod["metadata"]["name"].as_str()),
        (200, Some("only-west"))
    );
    // The access log names the cluster, and the path as the client sent it.
    let line = log
        .wait_for("for west's pod", |l| {
            l["path"] == "/clusters/west/api/v1/namespaces/web/pods/only-west"
        })
        .await;
    assert_eq!(line["cluster"], "west", "{line}");
    let (status, body) = env
        .json("/clusters/east/api/v1/namespaces/web/pods/only-west", None)
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = env.json("/clusters/east/api/v1", None).await;
    assert_eq!(status, 200);
    assert!(
        body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods")
    );

    // `/clusters` lists both, ready; `/readyz` says so per cluster.
    let (status, body) = env.json("/clusters", None).await;
    assert_eq!(status, 200);
    let listed: Vec<(&str, bool, &str)> = body["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["ready"].as_bool().unwrap(),
                c["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("east", true, "/clusters/east"),
            ("west", true, "/clusters/west")
        ]
    );
    let (status, body) = env.json("/readyz", None).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("ready")),
        "{body}"
    );
    assert_eq!(body["clusters"].as_array().unwrap().len(), 2);

    // A cluster's page is at its path with a slash, where the dashboard's
    // relative links resolve: without one, a redirect there.
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = plain
        .get(format!("{}/clusters/west?namespace=web", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 308);
    assert_eq!(resp.headers()["location"], "/clusters/west/?namespace=web");
    let resp = env.get("/clusters/west/", None).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("<title>kubefan"));

    // No default cluster: a root path names none; an unknown name is 404.
    let (status, body) = env.json("/stream/pods", None).await;
    assert_eq!(status, 404);
    validate_status(&body);
    assert!(
        body["message"].as_str().unwrap().contains("/clusters/NAME"),
        "{body}"
    );
    let (status, body) = env.json("/clusters/north/stream/pods", None).await;
    assert_eq!(status, 404);
    validate_status(&body);
    assert!(
        body["message"].as_str().unwrap().contains("\"north\""),
        "{body}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_leaves_the_others_served_and_readiness_says_which() {
    for ready_when in [ReadyWhen::Any, ReadyWhen::All] {
        let mut cfg = test_config(&["pods"]);
        cfg.clusters.default = Some("up".into());
        cfg.clusters.ready_when = ready_when;
        cfg.stream.sync_timeout = Duration::from_millis(500);
        // `down`'s API server answers no list, streaming or not: nothing
        // syncs there.
        let down = cluster_sim("down");
        down.delay_lists(Duration::from_secs(60));
        down.stall_watches(true);
        let env = serve(vec![("up", cluster_sim("up")), ("down", down)], cfg).await;

        // The default cluster at the root paths and under its own.
        let (root, _) = env.snapshot("/stream/pods", None).await;
        assert!(names(&root).contains("only-up"));
        let (own, _) = env.snapshot("/clusters/up/stream/pods", None).await;
        assert_eq!(names(&own), names(&root));

        let (status, body) = env.json("/readyz", None).await;
        let report = |name: &str| {
            body["clusters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
                .unwrap()["ready"]
                .as_bool()
        };
        assert_eq!(
            (report("up"), report("down")),
            (Some(true), Some(false)),
            "{body}"
        );
        // Each cluster's own, under its path.
        for (name, code, said) in [("up", 200, "ready"), ("down", 503, "not ready")] {
            let (status, own) = env.json(&format!("/clusters/{name}/readyz"), None).await;
            assert_eq!(
                (status, own["name"].as_str(), own["status"].as_str()),
                (code, Some(name), Some(said)),
                "{own}"
            );
        }
        let want = match ready_when {
            ReadyWhen::Any => 200,
            ReadyWhen::All => 503,
        };
        assert_eq!(status, want, "--ready-when {ready_when:?}: {body}");
        // A stream of the cluster that is down is refused in time, not hung.
        let (status, body) = env.json("/clusters/down/stream/pods", None).await;
        assert_eq!(status, 503, "{body}");
        validate_status(&body);
        env.stop().await;
    }
}

/// A merged stream's parts for `double-token`, each cluster's own user
/// (below): east's dana sees web and batch, west's wes web alone.
fn assert_double_token_parts(merged: &Merged) {
    assert_eq!(
        namespaces(&merged.views["east"]),
        BTreeSet::from(["web".to_string(), "batch".to_string()])
    );
    assert_eq!(
        namespaces(&merged.views["west"]),
        BTreeSet::from(["web".to_string()])
    );
}

/// Each cluster reviews its own tokens and evaluates its own RBAC: one
/// user, granted `web` in one cluster and `batch` in the other, sees each
/// cluster's part as its grants there say.
/// With a default cluster at the root, a request across clusters there
/// (`/clusters`, `/stream/R?clusters=`) is still for no cluster: any
/// cluster that accepts its token lets it in (the default first), and the
/// default's API server down takes the others' merged viewers away no
/// more than it takes their own. The root's own paths stay the default's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_clusters_at_a_root_with_a_default_any_cluster_reviews_the_token() {
    let mut env = east_default_and_west(&[("wes", "web")]).await;

    async fn merged_west(env: &Env, token: &str) -> BTreeSet<String> {
        let resp = env.get("/stream/pods?clusters=west", Some(token)).await;
        assert_eq!(resp.status(), 200, "{token}");
        let mut sse = SseClient::new(resp);
        let mut merged = Merged::default();
        merged.until_synced(&mut sse, &["west"]).await;
        namespaces(&merged.views["west"])
    }
    // A token only west knows.
    assert_eq!(
        merged_west(&env, "wes-token").await,
        BTreeSet::from(["web".to_string()])
    );
    // The key percent-encoded is the same request: the middleware decodes
    // it as the stream's handler does (it took this for east's).
    let resp = env
        .get("/stream/pods?%63lusters=west", Some("wes-token"))
        .await;
    assert_eq!(resp.status(), 200, "an encoded key names the clusters too");
    let mut sse = SseClient::new(resp);
    let mut encoded = Merged::default();
    encoded.until_synced(&mut sse, &["west"]).await;
    assert_eq!(
        namespaces(&encoded.views["west"]),
        BTreeSet::from(["web".to_string()])
    );
    let (status, body) = env.json("/clusters", Some("wes-token")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["clusters"].as_array().unwrap().len(), 1, "{body}");
    let (status, body) = env.json("/stream/pods", Some("wes-token")).await;
    assert_eq!(status, 401, "the root's own paths are east's: {body}");

    // East's API server down: dana's merged stream of west still opens.
    env.kill("east").await;
    assert_eq!(
        merged_west(&env, "dana-token").await,
        BTreeSet::from(["batch".to_string()])
    );
    env.stop().await;
}

/// Clusters east (the default, served at the root too) and west under
/// `--auth kubernetes`, their RBAC loaded: dana (`dana-token`) in both,
/// reading web in east and batch in west; and users only west knows, each
/// `(USER, NAMESPACE)` with the token `USER-token`, reading that namespace.
async fn east_default_and_west(west_only: &[(&str, &str)]) -> Env {
    let mut bindings = vec![("east", "dana", "web"), ("west", "dana", "batch")];
    bindings.extend(west_only.iter().map(|&(user, ns)| ("west", user, ns)));
    let sims = team_clusters(
        &["east", "west"],
        |name| {
            let mut users = vec![SimUser::new("dana-token", "dana", &["team"])];
            if name == "west" {
                users.extend(
                    west_only
                        .iter()
                        .map(|&(user, _)| SimUser::new(&format!("{user}-token"), user, &[])),
                );
            }
            users
        },
        &bindings,
    );
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    cfg.auth.cache_ttl = Duration::from_secs(300);
    cfg.clusters.default = Some("east".into());
    let env = serve(sims, cfg).await;
    env.rbac_loaded().await;
    env
}

/// Root `/ws` of a gateway of several clusters, with a default one, is
/// across clusters: any cluster may accept its token, every cluster at
/// once (a hung default delays no other's answer), and each subscription
/// is authorized as its own cluster's principal, the default's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_ws_with_a_default_cluster_is_across_clusters() {
    let mut env = east_default_and_west(&[("wes", "web"), ("wren", "batch")]).await;
    let addr = env.app.local_addr();

    /// Subscribes `sub` to pods (in `cluster`, or the socket's own): the
    /// namespaces of its snapshot.
    async fn snapshot(
        ws: &mut crate::ws::WsClient,
        sub: &str,
        cluster: Option<&str>,
    ) -> BTreeSet<String> {
        let mut op = serde_json::json!({"op": "subscribe", "id": sub, "resource": "pods"});
        if let Some(cluster) = cluster {
            op["cluster"] = cluster.into();
        }
        ws.subscribe(op).await;
        let mut view = ClientView::new();
        tokio::time::timeout(WAIT, async {
            while view.snapshots == 0 {
                view.apply(&crate::ws::event(&next_of(ws, sub).await));
            }
        })
        .await
        .expect("the snapshot in time");
        namespaces(&view)
    }
    // A token only west knows opens the socket (east alone reviewed it:
    // 401), and reads west; the socket's own cluster, east, does not
    // know it, and says so for that subscription alone.
    let mut ws = crate::ws::WsClient::connect_to(addr, "/ws?access_token=wes-token").await;
    assert_eq!(
        snapshot(&mut ws, "w", Some("west")).await,
        BTreeSet::from(["web".to_string()])
    );
    ws.subscribe(serde_json::json!({"op": "subscribe", "id": "e", "resource": "pods"}))
        .await;
    let refused = next_of(&mut ws, "e").await;
    assert_eq!(refused["type"], "ERROR", "{refused}");
    assert_eq!(refused["object"]["code"], 401, "{refused}");
    // Dana, whom both know: the default's subscription is east's dana
    // (web), a named one west's (batch).
    let mut ws = crate::ws::WsClient::connect_to(addr, "/ws?access_token=dana-token").await;
    assert_eq!(
        snapshot(&mut ws, "e", None).await,
        BTreeSet::from(["web".to_string()])
    );
    assert_eq!(
        snapshot(&mut ws, "w", Some("west")).await,
        BTreeSet::from(["batch".to_string()])
    );

    // East's API server hung: it takes connections and never answers, so
    // its review of a token it has not seen waits out its 10 s. Reviewed
    // one cluster after another, east first, a token only west knows
    // waited for that; reviewed at once, west's answer opens the socket.
    let east = env.kill("east").await;
    let hung = tokio::net::TcpListener::bind(east)
        .await
        .expect("east's address");
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = hung.accept().await {
            held.push(conn);
        }
    });
    let mut ws = tokio::time::timeout(
        Duration::from_secs(5),
        crate::ws::WsClient::connect_to(addr, "/ws?access_token=wren-token"),
    )
    .await
    .expect("west's answer opens the socket while east's review hangs");
    assert_eq!(
        snapshot(&mut ws, "w", Some("west")).await,
        BTreeSet::from(["batch".to_string()])
    );
    held.abort();
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_reviews_its_tokens_and_evaluates_its_own_rbac() {
    let sims = team_clusters(
        &["east", "west"],
        |name| {
            let mut users = vec![
                SimUser::new("dana-token", "dana", &["team"]),
                SimUser::new("erin-token", "erin", &["team"]),
            ];
            if name == "west" {
                users.push(SimUser::new("wes-token", "wes", &[]));
            }
            // One token, a different user in each cluster.
            users.push(SimUser::new(
                "double-token",
                if name == "east" { "dana" } else { "wes" },
                &[],
            ));
            users
        },
        &[
            ("east", "dana", "web"),
            ("west", "dana", "batch"),
            ("west", "wes", "web"),
        ],
    );
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    cfg.auth.cache_ttl = Duration::from_secs(300);
    let env = serve(sims, cfg).await;
    env.rbac_loaded().await;

    let (east, _) = env
        .snapshot("/clusters/east/stream/pods", Some("dana-token"))
        .await;
    assert_eq!(namespaces(&east), BTreeSet::from(["web".to_string()]));
    let (west, mut west_sse) = env
        .snapshot("/clusters/west/stream/pods", Some("dana-token"))
        .await;
    assert_eq!(namespaces(&west), BTreeSet::from(["batch".to_string()]));

    // A grant in east reaches east's streams, not west's.
    env.sim("east")
        .create(ROLE_BINDINGS, binding("dana-batch", "batch", "dana"))
        .unwrap();
    let (east, _) = tokio::time::timeout(WAIT, async {
        let authorizer = env.app.clusters().all()[0].authorizer();
        loop {
            // Taken before looking, so a change in between is not missed.
            let changed = authorizer.rbac_changed();
            let (view, sse) = env
                .snapshot("/clusters/east/stream/pods", Some("dana-token"))
                .await;
            if namespaces(&view).len() == 2 {
                return (view, sse);
            }
            changed.await;
        }
    })
    .await
    .expect("east's grant in time");
    assert_eq!(
        namespaces(&east),
        BTreeSet::from(["web".to_string(), "batch".to_string()])
    );
    let rv = env.sim("west").stats().resource_version;
    env.sim("west")
        .create("pods", pod("late").ns("web").build())
        .unwrap();
    env.sim("west")
        .create("pods", pod("late").ns("batch").build())
        .unwrap();
    let mut view = west;
    tokio::time::timeout(WAIT, view.follow(&mut west_sse, rv + 2))
        .await
        .expect("west's changes in time");
    assert_eq!(namespaces(&view), BTreeSet::from(["batch".to_string()]));

    // A token only west knows: west accepts it, east does not.
    let (west, _) = env
        .snapshot("/clusters/west/stream/pods", Some("wes-token"))
        .await;
    assert_eq!(namespaces(&west), BTreeSet::from(["web".to_string()]));
    let (status, body) = env
        .json("/clusters/east/stream/pods", Some("wes-token"))
        .await;
    assert_eq!(status, 401, "{body}");
    validate_status(&body);

    // `/clusters` lists those the caller may read something in.
    let listed = |body: &Value| -> Vec<String> {
        body["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, body) = env.json("/clusters", Some("dana-token")).await;
    assert_eq!(
        (status, listed(&body)),
        (200, vec!["east".into(), "west".into()])
    );
    let (status, body) = env.json("/clusters", Some("erin-token")).await;
    assert_eq!(
        (status, listed(&body)),
        (200, Vec::<String>::new()),
        "{body}"
    );
    let (status, _) = env.json("/clusters", None).await;
    assert_eq!(status, 401);
    // Which clusters exist is told only to whoever has credentials.
    let (status, _) = env.json("/clusters/north/stream/pods", None).await;
    assert_eq!(status, 401);
    let (status, body) = env
        .json("/clusters/north/stream/pods", Some("dana-token"))
        .await;
    assert_eq!(status, 404, "{body}");
    // Only west accepts wes's token: only west is listed.
    let (status, body) = env.json("/clusters", Some("wes-token")).await;
    assert_eq!((status, listed(&body)), (200, vec!["west".to_string()]));

    // A stream across clusters: each cluster reviews the token itself,
    // so each part is what that cluster's user may see (east's dana: web
    // and batch; west's wes: web; not west's dana, who has batch).
    let resp = env
        .get("/stream/pods?clusters=east,west", Some("double-token"))
        .await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east", "west"]).await;
    assert_double_token_parts(&merged);
    drop(sse);
    // A token one cluster does not accept: named, 401 naming it; with `*`,
    // that cluster is left out and said so.
    let (status, body) = env
        .json("/stream/pods?clusters=east,west", Some("wes-token"))
        .await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cluster \"east\""),
        "{body}"
    );
    let resp = env.get("/stream/pods?clusters=*", Some("wes-token")).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let first = sse.next().await.unwrap();
    assert_eq!(
        (
            first.event.as_str(),
            first.data["cluster"].as_str(),
            first.data["object"]["code"].as_u64()
        ),
        ("CLUSTER", Some("east"), Some(401))
    );

    // On `/ws` the same: a socket opened on east whose subscription names
    // west is west's user (wes: web), not the socket's (east's dana), and
    // a merged subscription's parts are each cluster's.
    let addr = env.app.local_addr();
    let mut ws =
        crate::ws::WsClient::connect_to(addr, "/clusters/east/ws?access_token=double-token").await;
    ws.subscribe(
        serde_json::json!({"op": "subscribe", "id": "w", "resource": "pods", "cluster": "west"}),
    )
    .await;
    let mut west = ClientView::new();
    tokio::time::timeout(WAIT, async {
        while west.snapshots == 0 {
            west.apply(&crate::ws::event(&next_of(&mut ws, "w").await));
        }
    })
    .await
    .expect("w's snapshot in time");
    assert_eq!(namespaces(&west), BTreeSet::from(["web".to_string()]));
    ws.subscribe(
        serde_json::json!({"op": "subscribe", "id": "m", "resource": "pods", "clusters": "*"}),
    )
    .await;
    let mut merged = Merged::default();
    merged
        .until_synced(&mut Sub(&mut ws, "m"), &["east", "west"])
        .await;
    assert_double_token_parts(&merged);
    // Wes's token on a west socket: east is left out of `*`, and said so;
    // named, it refuses the subscription, naming it.
    let mut ws =
        crate::ws::WsClient::connect_to(addr, "/clusters/west/ws?access_token=wes-token").await;
    ws.subscribe(
        serde_json::json!({"op": "subscribe", "id": "m", "resource": "pods", "clusters": "*"}),
    )
    .await;
    let first = next_of(&mut ws, "m").await;
    assert_eq!(
        (
            first["type"].as_str(),
            first["cluster"].as_str(),
            first["object"]["code"].as_u64()
        ),
        (Some("CLUSTER"), Some("east"), Some(401)),
        "{first}"
    );
    ws.subscribe(serde_json::json!({"op": "subscribe", "id": "n", "resource": "pods", "clusters": "west,east"}))
        .await;
    let refused = next_of(&mut ws, "n").await;
    assert_eq!(refused["object"]["code"], 401, "{refused}");
    assert!(
        refused["object"]["message"]
            .as_str()
            .unwrap()
            .contains("cluster \"east\""),
        "{refused}"
    );
    env.stop().await;
}

#[tokio::test]
async fn clusters_that_cannot_be_served_are_refused_at_start_saying_why() {
    let sim = Sim::new(crate::support::sim_config());
    let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let upstream = |name: Option<&str>| Upstream {
        name: name.map(str::to_string),
        client: client.clone(),
        reviews: client.clone(),
        url: None,
    };
    let refused = |upstreams: Vec<Upstream>, default: Option<&str>| {
        let mut cfg = test_config(&[]);
        cfg.clusters.default = default.map(str::to_string);
        async move {
            match App::build_clusters(cfg, upstreams).await {
                Ok(_) => panic!("started"),
                Err(err) => err.to_string(),
            }
        }
    };
    let err = refused(vec![upstream(Some("a")), upstream(Some("a"))], None).await;
    assert!(err.contains("\"a\" is given twice"), "{err}");
    let err = refused(vec![upstream(Some("Prod"))], None).await;
    assert!(err.contains("not a DNS label"), "{err}");
    let err = refused(vec![upstream(Some("a")), upstream(Some("b"))], Some("c")).await;
    assert!(
        err.contains("--default-cluster \"c\" is not one of the clusters (a, b)"),
        "{err}"
    );
    let err = refused(vec![upstream(None)], Some("a")).await;
    assert!(
        err.contains("--default-cluster \"a\" names no cluster"),
        "{err}"
    );
    server.stop().await;
}

/// A merged stream's event as its cluster's part alone: the same event,
/// with that cluster's position as its id (an id that no longer names the
/// cluster cleared it, as a `RESET` does).
fn part_of(ev: &SseEvent) -> (String, SseEvent) {
    let cluster = ev.data["cluster"]
        .as_str()
        .unwrap_or_else(|| panic!("every message names its cluster: {:?}", ev))
        .to_string();
    let id = ev.id.as_ref().map(|compound| {
        compound
            .split(',')
            .find_map(|part| part.strip_prefix(&format!("{cluster}=")))
            .unwrap_or("")
            .to_string()
    });
    (
        cluster,
        SseEvent {
            event: ev.event.clone(),
            id,
            data: ev.data.clone(),
        },
    )
}

/// A merged stream's messages, as SSE events: an SSE stream's, or a
/// merged `/ws` subscription's.
trait Feed {
    async fn event(&mut self) -> SseEvent;
}

impl Feed for SseClient {
    async fn event(&mut self) -> SseEvent {
        self.next().await.expect("the merged stream goes on")
    }
}

/// Subscription `.1` of a `/ws` socket: its messages (any other's is a
/// failure).
struct Sub<'a>(&'a mut crate::ws::WsClient, &'a str);

impl Feed for Sub<'_> {
    async fn event(&mut self) -> SseEvent {
        let msg = self.0.next().await;
        assert_eq!(msg["sub"], self.1, "{msg}");
        crate::ws::event(&msg)
    }
}

/// Per-cluster views of one merged stream.
#[derive(Default)]
struct Merged {
    views: BTreeMap<String, ClientView>,
    /// The last compound id seen.
    last_id: Option<String>,
    events: Vec<(String, String)>,
    /// `CLUSTER` messages: the cluster and its Status's code.
    announced: Vec<(String, u64)>,
    /// Parts ended: the cluster and its `ERROR`'s code.
    ended: Vec<(String, u64)>,
    /// `WARNING` messages: the cluster and the text.
    warned: Vec<(String, String)>,
}

impl Merged {
    fn apply(&mut self, ev: &SseEvent) {
        if ev.event == "CLUSTER" {
            let cluster = ev.data["cluster"].as_str().unwrap().to_string();
            let code = ev.data["object"]["code"].as_u64().unwrap();
            self.announced.push((cluster, code));
            return;
        }
        if ev.event == "ERROR" {
            let cluster = ev.data["cluster"].as_str().unwrap().to_string();
            let code = ev.data["object"]["code"].as_u64().unwrap();
            self.ended.push((cluster, code));
            return;
        }
        if ev.event == "WARNING" {
            let cluster = ev.data["cluster"].as_str().unwrap().to_string();
            let text = ev.data["message"].as_str().unwrap().to_string();
            self.warned.push((cluster, text));
            return;
        }
        if let Some(id) = &ev.id {
            self.last_id = Some(id.clone()).filter(|i| !i.is_empty());
        }
        let (cluster, part) = part_of(ev);
        self.events.push((cluster.clone(), ev.event.clone()));
        self.views.entry(cluster).or_default().apply(&part);
    }

    /// Reads until every one of `clusters` has had its snapshot (a
    /// narrowed part's position moves only with what it may see, so it
    /// is not waited for at the simulator's).
    async fn until_synced(&mut self, feed: &mut impl Feed, clusters: &[&str]) {
        tokio::time::timeout(WAIT, async {
            while !clusters
                .iter()
                .all(|c| self.views.get(*c).is_some_and(|v| v.snapshots > 0))
            {
                let ev = feed.event().await;
                self.apply(&ev);
            }
        })
        .await
        .expect("every part's snapshot in time");
    }

    /// A reconnect from the last compound id follows: each view's picture
    /// is kept, to be resumed without a snapshot.
    fn resuming(&mut self) {
        for view in self.views.values_mut() {
            view.resume();
        }
        self.events.clear();
    }

    /// A merged stream resumed with `cluster`'s position kept (its view
    /// expects no snapshot) and the others' gone.
    fn resuming_only(cluster: &str) -> Merged {
        let mut merged = Merged::default();
        let mut view = ClientView::new();
        view.resume();
        merged.views.insert(cluster.into(), view);
        merged
    }

    /// Every part resumed from its position: its cluster's truth, with no
    /// snapshot but the first and no RESET.
    fn assert_resumed(&self, env: &Env, clusters: &[&str]) {
        for cluster in clusters {
            let view = &self.views[*cluster];
            view.assert_matches(&env.sim(cluster).list("pods").0);
            assert_eq!(view.snapshots, 1, "{cluster} resumed without a snapshot");
        }
        assert!(
            self.events.iter().all(|(_, e)| e != "RESET"),
            "{:?}",
            self.events
        );
    }

    /// `cluster`'s part alone started over (its RESET and snapshot, its
    /// cluster's truth); the others neither reset nor sent a snapshot.
    fn assert_reset_alone(&self, env: &Env, cluster: &str) {
        self.views[cluster].assert_matches(&env.sim(cluster).list("pods").0);
        assert!(
            self.events
                .iter()
                .all(|(c, e)| c == cluster || (e != "RESET" && e != "BOOKMARK")),
            "the others neither reset nor sent a snapshot: {:?}",
            self.events
        );
        assert!(
            self.events
                .iter()
                .any(|(c, e)| c == cluster && e == "RESET"),
            "{:?}",
            self.events
        );
    }

    /// Reads until `done` holds of what was read.
    async fn until(&mut self, feed: &mut impl Feed, done: impl Fn(&Merged) -> bool) {
        tokio::time::timeout(WAIT, async {
            while !done(self) {
                let ev = feed.event().await;
                self.apply(&ev);
            }
        })
        .await
        .expect("the merged stream in time");
    }

    /// Reads until `cluster` is announced with `code`.
    async fn until_announced(&mut self, feed: &mut impl Feed, cluster: &str, code: u64) {
        let want = (cluster.to_string(), code);
        tokio::time::timeout(WAIT, async {
            while !self.announced.contains(&want) {
                let ev = feed.event().await;
                self.apply(&ev);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{cluster} announced {code} in time: {:?}", self.announced));
    }

    /// Reads until every cluster's view is settled at its simulator's
    /// resourceVersion.
    async fn follow(&mut self, feed: &mut impl Feed, env: &Env, clusters: &[&str]) {
        let want: Vec<u64> = clusters
            .iter()
            .map(|c| env.sim(c).stats().resource_version)
            .collect();
        tokio::time::timeout(WAIT, async {
            while !clusters
                .iter()
                .zip(&want)
                .all(|(c, rv)| self.views.get(*c).is_some_and(|v| v.settled(*rv)))
            {
                let ev = feed.event().await;
                self.apply(&ev);
            }
        })
        .await
        .expect("every cluster's part in time");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_stream_is_each_clusters_truth_and_resumes_each_part_alone() {
    let env = east_west(test_config(&["pods"])).await;
    let clusters = ["east", "west"];
    let open = |id: Option<&str>, query: &str| {
        let mut req = env
            .http
            .get(format!("{}/stream/pods?clusters={query}", env.base));
        if let Some(id) = id {
            req = req.header("Last-Event-ID", id);
        }
        async move {
            let resp = tokio::time::timeout(WAIT, req.send())
                .await
                .expect("in time")
                .expect("request");
            assert_eq!(resp.status(), 200);
            SseClient::new(resp)
        }
    };

    // One snapshot of each, each message naming its cluster (the client
    // validates every message against the schema), then every change.
    let mut sse = open(None, "east,west").await;
    let mut merged = Merged::default();
    merged.follow(&mut sse, &env, &clusters).await;
    for cluster in clusters {
        merged.views[cluster].assert_matches(&env.sim(cluster).list("pods").0);
    }
    env.change_both();
    merged.follow(&mut sse, &env, &clusters).await;
    for cluster in clusters {
        merged.views[cluster].assert_matches(&env.sim(cluster).list("pods").0);
        assert!(merged.views[cluster].resets.is_empty());
    }
    let id = merged.last_id.clone().expect("a compound id");
    assert!(id.starts_with("east=") && id.contains(",west="), "{id}");
    for cluster in clusters {
        assert_eq!(env.sim(cluster).stats().resource("pods").open_watches, 1);
    }
    drop(sse);

    // Changes while away; the reconnect resumes each part from its own
    // position: no snapshot, no reset, every change.
    env.change_while_away();
    merged.resuming();
    let mut sse = open(Some(&id), "east,west").await;
    merged.follow(&mut sse, &env, &clusters).await;
    merged.assert_resumed(&env, &clusters);
    drop(sse);

    // East's position is long gone from its log: east alone starts over
    // with a RESET and a snapshot; west resumes.
    let west = id.split(',').find(|p| p.starts_with("west=")).unwrap();
    let mut sse = open(Some(&format!("east=1,{west}")), "east,west").await;
    let mut again = Merged::resuming_only("west");
    again.follow(&mut sse, &env, &clusters).await;
    again.assert_reset_alone(&env, "east");
    drop(sse);

    // Bad input, each a Status saying what is wrong.
    for (path, id, status, says) in [
        ("/stream/pods?clusters=east,north", None, 404, "\"north\""),
        ("/stream/pods?clusters=", None, 400, "names no cluster"),
        (
            "/stream/pods?clusters=east",
            Some("5"),
            400,
            "not a merged stream's id",
        ),
        (
            "/stream/pods?clusters=east",
            Some("east=5,west=6"),
            400,
            "does not ask for",
        ),
        (
            "/stream/pods?clusters=east&resourceVersion=east%3Dx",
            None,
            400,
            "not a resourceVersion",
        ),
        (
            "/clusters/east/stream/pods?clusters=east",
            None,
            400,
            "root paths",
        ),
    ] {
        let mut req = env.http.get(format!("{}{path}", env.base));
        if let Some(id) = id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = tokio::time::timeout(WAIT, req.send())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status().as_u16(), status, "{path} {id:?}");
        let body: Value = resp.json().await.unwrap();
        validate_status(&body);
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }
    env.stop().await;
}

/// Each part of a merged stream is narrowed by its own cluster's RBAC;
/// `*` leaves out a cluster that refuses and says so, a named one that
/// refuses is 403 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_streams_parts_are_each_clusters_grant() {
    let sims = team_clusters(
        &["east", "west", "north"],
        |_| vec![SimUser::new("dana-token", "dana", &["team"])],
        &[("east", "dana", "web"), ("west", "dana", "batch")],
    );
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    let env = serve(sims, cfg).await;
    env.rbac_loaded().await;

    let resp = env.get("/stream/pods?clusters=*", Some("dana-token")).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let first = sse.next().await.unwrap();
    assert_eq!(
        (first.event.as_str(), first.data["cluster"].as_str()),
        ("CLUSTER", Some("north"))
    );
    assert_eq!(first.data["object"]["code"], 403, "{:?}", first.data);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east", "west"]).await;
    assert_eq!(
        namespaces(&merged.views["east"]),
        BTreeSet::from(["web".to_string()])
    );
    assert_eq!(
        namespaces(&merged.views["west"]),
        BTreeSet::from(["batch".to_string()])
    );
    assert!(!merged.views.contains_key("north"));

    // Each part follows its own cluster's RBAC on the open stream: a
    // grant in east reaches east's part alone; west's last binding gone
    // ends west's part (its ERROR naming west), and east's goes on.
    env.sim("east")
        .create(ROLE_BINDINGS, binding("dana-batch", "batch", "dana"))
        .unwrap();
    merged
        .until(&mut sse, |m| namespaces(&m.views["east"]).len() == 2)
        .await;
    assert_eq!(
        namespaces(&merged.views["west"]),
        BTreeSet::from(["batch".to_string()])
    );
    env.sim("west")
        .delete(ROLE_BINDINGS, Some("batch"), "dana-batch")
        .unwrap();
    merged.until(&mut sse, |m| !m.ended.is_empty()).await;
    assert_eq!(merged.ended, [("west".to_string(), 403)]);
    env.sim("east")
        .create("pods", pod("after").ns("batch").build())
        .unwrap();
    merged
        .until(&mut sse, |m| names(&m.views["east"]).contains("after"))
        .await;
    assert!(merged.views.values().all(|v| v.resets.is_empty()));

    let (status, body) = env
        .json("/stream/pods?clusters=east,north", Some("dana-token"))
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cluster \"north\""),
        "{body}"
    );
    env.stop().await;
}

/// One cluster's API server killed and restarted mid-churn: the other
/// cluster's part of a merged stream and its own viewers see every change
/// with no reset; the restarted cluster's part resumes (kubefan's watch
/// resumes from its resourceVersion) and ends equal to its truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restarted_mid_churn_leaves_the_others_without_a_gap() {
    let mut env = east_west(test_config(&["pods"])).await;
    let clusters = ["east", "west"];
    let resp = env.get("/stream/pods?clusters=east,west", None).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.follow(&mut sse, &env, &clusters).await;
    // The same merged stream as a `/ws` subscription.
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/ws").await;
    ws.subscribe(
        serde_json::json!({"op": "subscribe", "id": "m", "resource": "pods", "clusters": "*"}),
    )
    .await;
    let mut on_ws = Merged::default();
    on_ws.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    let (mut east_view, mut east_sse) = env.snapshot("/clusters/east/stream/pods", None).await;

    let stop = tokio_util::sync::CancellationToken::new();
    let churn = |name: &str| {
        kubefan_sim::spawn_churn(
            env.sim(name).clone(),
            kubefan_sim::ChurnConfig {
                rate: 100.0,
                pods: 8,
                seed: Some(3),
                ..Default::default()
            },
            stop.clone(),
        )
    };
    let churners = [churn("east"), churn("west")];
    let addr = env.kill("west").await;
    // The merged stream says west is gone, rather than going quiet.
    merged.until_announced(&mut sse, "west", 503).await;
    on_ws
        .until_announced(&mut Sub(&mut ws, "m"), "west", 503)
        .await;
    // West changes while its API server is away from kubefan; east goes on.
    for i in 0..20 {
        for cluster in clusters {
            env.sim(cluster)
                .create("pods", pod(&format!("during-{i}")).ns("batch").build())
                .unwrap();
        }
    }
    let rv = env.sim("east").stats().resource_version;
    tokio::time::timeout(WAIT, east_view.follow(&mut east_sse, rv))
        .await
        .expect("east's viewers follow while west is down");
    env.restart("west", addr).await;
    merged.until_announced(&mut sse, "west", 200).await;
    on_ws
        .until_announced(&mut Sub(&mut ws, "m"), "west", 200)
        .await;
    for announced in [&merged.announced, &on_ws.announced] {
        assert!(!announced.iter().any(|(c, _)| c == "east"), "{announced:?}");
    }
    stop.cancel();
    for churner in churners {
        churner.await.unwrap();
    }
    merged.follow(&mut sse, &env, &clusters).await;
    on_ws.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    let east_rv = env.sim("east").stats().resource_version;
    tokio::time::timeout(WAIT, east_view.follow(&mut east_sse, east_rv))
        .await
        .expect("east's viewer in time");
    east_view.assert_matches(&env.sim("east").list("pods").0);
    assert!(east_view.resets.is_empty());
    for cluster in clusters {
        for merged in [&merged, &on_ws] {
            merged.views[cluster].assert_matches(&env.sim(cluster).list("pods").0);
            assert!(merged.views[cluster].resets.is_empty(), "{cluster}");
        }
        assert_eq!(env.sim(cluster).stats().resource("pods").open_watches, 1);
    }
    env.stop().await;
}

/// A cluster whose API server forbids kubefan to read a resource: that
/// cluster says so (its readiness, its paths, its part of a merged
/// stream), and the others are served as if it were not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_forbids_kubefan_leaves_the_others_served() {
    let west = Sim::new(kubefan_sim::SimConfig {
        authorization: kubefan_sim::AuthorizationMode::Rbac,
        ..crate::support::sim_config()
    });
    west.create("pods", pod("only-west").ns("web").build())
        .unwrap();
    // kubefan's ServiceAccount, bound to nothing.
    west.set_users(vec![SimUser::service_account(
        "kubefan-sa-token",
        "kubefan",
        "kubefan",
    )]);
    let env = serve_as(
        vec![
            ("east", cluster_sim("east"), None),
            ("west", west, Some("kubefan-sa-token")),
        ],
        test_config(&["pods"]),
    )
    .await;

    // Ready (`any`) once east is; west never is.
    let east = env.app.clusters().get("east").unwrap().clone();
    tokio::time::timeout(WAIT, east.informers().ready())
        .await
        .expect("east ready in time");
    let (status, body) = env.json("/readyz", None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = env.json("/clusters/west/readyz", None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["resources"][0]["ready"], false, "{body}");
    let (status, body) = env.json("/clusters/east/readyz", None).await;
    assert_eq!(status, 200, "{body}");

    let (view, _) = env.snapshot("/clusters/east/stream/pods", None).await;
    view.assert_matches(&env.sim("east").list("pods").0);
    let (status, body) = env.json("/clusters/west/stream/pods", None).await;
    assert_eq!(status, 403, "{body}");
    validate_status(&body);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("list, watch pods"),
        "{body}"
    );

    // Merged: `*` leaves west out and says why; named, west fails it.
    let resp = env.get("/stream/pods?clusters=*", None).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east"]).await;
    assert_eq!(merged.announced, [("west".to_string(), 403)]);
    merged.views["east"].assert_matches(&env.sim("east").list("pods").0);
    let (status, body) = env.json("/stream/pods?clusters=east,west", None).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cluster \"west\""),
        "{body}"
    );
    assert_eq!(env.sim("west").stats().resource("pods").list_requests, 0);
    env.stop().await;
}

/// A merged stream over a resource one cluster has not listed yet (its
/// API server down since before the stream): the others stream at once,
/// not after `--sync-timeout-secs`; the late part joins when its cluster
/// lists it, with its snapshot of that cluster alone. A part that cannot
/// join in time is said to (`CLUSTER` 503), on SSE and on `/ws`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_not_yet_listed_holds_up_no_other_part_of_a_merged_stream() {
    use crate::lifecycle::config_map;
    let clusters = ["east", "west"];
    let with_sync_timeout = |timeout| {
        let mut cfg = test_config(&["pods"]);
        cfg.stream.sync_timeout = timeout;
        east_west(cfg)
    };
    // Longer than a test waits: a stream held up for it fails.
    let mut env = with_sync_timeout(Duration::from_secs(60)).await;
    for cluster in clusters {
        for i in 0..3 {
            env.sim(cluster)
                .create("configmaps", config_map(&format!("{cluster}-{i}"), "x"))
                .unwrap();
        }
    }
    let addr = env.kill("west").await;
    let resp = env.get("/stream/configmaps?clusters=east,west", None).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east"]).await;
    merged.views["east"].assert_matches(&env.sim("east").list("configmaps").0);
    assert!(!merged.views.contains_key("west"));
    env.restart("west", addr).await;
    merged.follow(&mut sse, &env, &clusters).await;
    for cluster in clusters {
        merged.views[cluster].assert_matches(&env.sim(cluster).list("configmaps").0);
        assert_eq!(merged.views[cluster].snapshots, 1);
    }
    env.stop().await;

    // A part that cannot join within the sync timeout is left out, and
    // said so, whether its cluster was named or asked as `*`.
    let mut env = with_sync_timeout(Duration::from_millis(300)).await;
    env.kill("west").await;
    let resp = env.get("/stream/configmaps?clusters=east,west", None).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until(&mut sse, |m| !m.announced.is_empty()).await;
    assert_eq!(merged.announced, [("west".to_string(), 503)]);
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/ws").await;
    ws.subscribe(serde_json::json!({"op": "subscribe", "id": "m", "resource": "configmaps", "clusters": "*"}))
        .await;
    let mut on_ws = Merged::default();
    on_ws
        .until(&mut Sub(&mut ws, "m"), |m| {
            !m.announced.is_empty() && m.views.get("east").is_some_and(|v| v.snapshots > 0)
        })
        .await;
    assert_eq!(on_ws.announced, [("west".to_string(), 503)]);
    env.stop().await;
}

/// A gateway of east and west (`cfg`), west's API server down since
/// before the stream: a merged SSE stream of configmaps over `clusters`,
/// read until east's snapshot.
async fn with_west_away(cfg: Config, clusters: &str) -> (Env, SseClient, Merged) {
    let mut env = east_west(cfg).await;
    env.kill("west").await;
    let path = format!("/stream/configmaps?clusters={clusters}");
    let resp = env.get(&path, None).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east"]).await;
    (env, sse, merged)
}

/// A merged SSE stream is kept alive while idle, by whichever part is:
/// with its first cluster away (never listed, so its part has not joined)
/// the comments still come, one per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_stream_is_kept_alive_while_its_first_cluster_is_away() {
    let mut cfg = test_config(&["pods"]);
    cfg.stream.sync_timeout = Duration::from_secs(60);
    cfg.stream.keepalive = Duration::from_millis(100);
    let (env, mut sse, _) = with_west_away(cfg, "west,east").await;
    for _ in 0..3 {
        sse.next_comment().await;
    }
    env.stop().await;
}

/// Every byte a merged SSE stream's client reads is counted as sent, in
/// its clusters' `kubefan_bytes_sent_total`: its parts' events and what it
/// sends of its own (the retry hint, a `CLUSTER` announcement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_a_merged_stream_sends_is_counted() {
    let mut cfg = test_config(&["pods"]);
    cfg.stream.sync_timeout = Duration::from_millis(300);
    let (env, mut sse, mut merged) = with_west_away(cfg, "east,west").await;
    merged.until(&mut sse, |m| !m.announced.is_empty()).await;
    let metrics = env.get("/metrics", None).await.text().await.unwrap();
    let counted: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("kubefan_bytes_sent_total{")
                && l.contains(r#"resource="configmaps""#)
                && l.contains(r#"transport="Sse""#)
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, sse.received, "{metrics}");
    env.stop().await;
}

/// The API server's warnings about a resource (the simulator's, as
/// kube-apiserver v1.36's, deprecate `endpoints`) reach a merged stream's
/// client from a part that joins after the response began: as a
/// `WARNING` naming its cluster, on SSE as on `/ws` (the clients validate
/// every message by the schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_that_joins_later_sends_its_warnings() {
    const DEPRECATED: &str =
        "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice";
    let env = east_west(test_config(&["pods"])).await;
    // Not among the resources listed at start: every part joins later.
    let resp = env.get("/stream/endpoints?clusters=east,west", None).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("warning").is_none());
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east", "west"]).await;
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/ws").await;
    ws.subscribe(serde_json::json!({"op": "subscribe", "id": "m", "resource": "endpoints", "clusters": "east,west"}))
        .await;
    let mut on_ws = Merged::default();
    on_ws
        .until_synced(&mut Sub(&mut ws, "m"), &["east", "west"])
        .await;
    for merged in [merged, on_ws] {
        let mut warned = merged.warned.clone();
        warned.sort();
        assert_eq!(
            warned,
            [
                ("east".into(), DEPRECATED.into()),
                ("west".into(), DEPRECATED.into())
            ]
        );
    }
    env.stop().await;
}

/// A cluster whose RBAC objects are not loaded yet (its API server slow
/// to list): `/clusters` lists it without waiting for them, and a merged
/// stream streams the other clusters at once, that cluster's part
/// authorizing on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_rbac_is_not_loaded_holds_up_no_other() {
    let sims = team_clusters(
        &["east", "west"],
        |_| vec![SimUser::new("dana-token", "dana", &["team"])],
        &[("east", "dana", "web"), ("west", "dana", "batch")],
    );
    sims[1].1.delay_lists(Duration::from_secs(60));
    sims[1].1.stall_watches(true);
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    // Longer than a test waits: a request held up for it fails.
    cfg.stream.sync_timeout = Duration::from_secs(60);
    let env = serve(sims, cfg).await;
    let west = env.app.clusters().get("west").unwrap().clone();
    assert!(!west.authorizer().loaded());

    let (status, body) = env.json("/clusters", Some("dana-token")).await;
    let listed: Vec<&str> = body["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!((status, listed), (200, vec!["east", "west"]), "{body}");

    let resp = env
        .get("/stream/pods?clusters=east,west", Some("dana-token"))
        .await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let mut merged = Merged::default();
    merged.until_synced(&mut sse, &["east"]).await;
    assert_eq!(
        namespaces(&merged.views["east"]),
        BTreeSet::from(["web".to_string()])
    );
    assert!(!merged.views.contains_key("west"));
    assert!(!west.authorizer().loaded(), "west's part still waits");
    drop(sse);
    env.stop().await;
}

/// A leaf of a tier whose root serves several clusters: one `--cluster`
/// per root cluster, each upstream URL the root's `/clusters/NAME`
/// (kube's client keeps a server URL's path). Its viewers see each
/// cluster's objects, and each API server still sees one watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_serves_a_multi_cluster_root_through_its_per_cluster_paths() {
    let root = east_west(test_config(&["pods"])).await;
    let upstreams = ["east", "west"]
        .into_iter()
        .map(|name| {
            let url = format!("{}/clusters/{name}", root.base);
            let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
            Upstream {
                name: Some(name.to_string()),
                client: client.clone(),
                reviews: client,
                url: Some(url),
            }
        })
        .collect();
    let mut cfg = test_config(&["pods"]);
    cfg.clusters.default = Some("east".into());
    let leaf = App::build_clusters(cfg, upstreams)
        .await
        .expect("the leaf starts");
    let leaf_env = Env {
        sims: Vec::new(),
        base: format!("http://{}", leaf.local_addr()),
        app: leaf,
        http: reqwest::Client::new(),
    };
    let mut streams = Vec::new();
    for cluster in ["east", "west"] {
        for _ in 0..3 {
            let (view, sse) = leaf_env
                .snapshot(&format!("/clusters/{cluster}/stream/pods"), None)
                .await;
            view.assert_matches(&root.sim(cluster).list("pods").0);
            streams.push(sse);
        }
    }
    let (merged, _) = leaf_env.snapshot("/stream/pods", None).await;
    assert!(
        names(&merged).contains("only-east"),
        "the default cluster at the root paths"
    );
    for cluster in ["east", "west"] {
        assert_eq!(root.sim(cluster).stats().resource("pods").open_watches, 1);
    }
    drop(streams);
    leaf_env.stop().await;
    root.stop().await;
}

/// One `/ws` socket carrying subscriptions in several clusters: a
/// subscribe message's `cluster` picks one, every message of it names
/// it; an unknown one is refused for that subscription alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_socket_subscribes_in_several_clusters() {
    let env = east_west(test_config(&["pods"])).await;
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/clusters/east/ws").await;
    for (id, cluster) in [("e", None), ("w", Some("west"))] {
        let mut msg = serde_json::json!({"op": "subscribe", "id": id, "resource": "pods"});
        if let Some(cluster) = cluster {
            msg["cluster"] = cluster.into();
        }
        ws.send_json(msg).await;
    }
    ws.send_json(
        serde_json::json!({"op": "subscribe", "id": "n", "resource": "pods", "cluster": "north"}),
    )
    .await;
    let mut views: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut ended = BTreeSet::new();
    let mut refused = None;
    tokio::time::timeout(WAIT, async {
        while ended.len() < 2 || refused.is_none() {
            let msg = ws.next().await;
            let sub = msg["sub"].as_str().unwrap().to_string();
            match (sub.as_str(), msg["type"].as_str().unwrap()) {
                ("n", "ERROR") => refused = Some(msg["object"].clone()),
                ("w", _) => assert_eq!(msg["cluster"], "west", "{msg}"),
                ("e", _) => assert!(msg.get("cluster").is_none(), "the socket's own: {msg}"),
                _ => panic!("{msg}"),
            }
            match msg["type"].as_str().unwrap() {
                "ADDED" => {
                    views
                        .entry(sub)
                        .or_default()
                        .insert(msg["object"]["metadata"]["name"].as_str().unwrap().into());
                }
                "BOOKMARK" => {
                    ended.insert(sub);
                }
                _ => {}
            }
        }
    })
    .await
    .expect("both snapshots and the refusal in time");
    assert!(views["e"].contains("only-east") && !views["e"].contains("only-west"));
    assert!(views["w"].contains("only-west") && !views["w"].contains("only-east"));
    let refused = refused.unwrap();
    assert_eq!(refused["code"], 404);
    assert!(
        refused["message"].as_str().unwrap().contains("\"north\""),
        "{refused}"
    );
    env.stop().await;
}

/// The next message of subscription `sub` (others' are skipped).
async fn next_of(ws: &mut crate::ws::WsClient, sub: &str) -> Value {
    tokio::time::timeout(WAIT, async {
        loop {
            let msg = ws.next().await;
            if msg["sub"] == sub {
                return msg;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a message of {sub:?} in time"))
}

/// One `/ws` subscription across clusters (`clusters`): one id, every
/// message naming its cluster and carrying the subscription's compound
/// id, each part its cluster's truth; resumed from a compound id, a part
/// whose position is gone starts over alone; 409, unsubscribe and the end
/// treat it as one subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ws_subscription_merges_clusters_and_resumes_each_part_alone() {
    let env = east_west(test_config(&["pods"])).await;
    let clusters = ["east", "west"];
    let subscribe = |clusters: Value, resume: Option<&str>| {
        let mut msg = serde_json::json!({"op": "subscribe", "id": "m", "resource": "pods", "clusters": clusters});
        if let Some(resume) = resume {
            msg["resourceVersion"] = resume.into();
        }
        msg
    };
    // At `/ws` of a gateway with no default cluster the socket has none
    // of its own: a subscription names one, or several.
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/ws").await;
    ws.subscribe(serde_json::json!({"op": "subscribe", "id": "x", "resource": "pods"}))
        .await;
    let refused = next_of(&mut ws, "x").await;
    assert_eq!(
        (refused["type"].as_str(), refused["object"]["code"].as_u64()),
        (Some("ERROR"), Some(400))
    );
    assert!(
        refused["object"]["message"]
            .as_str()
            .unwrap()
            .contains("no cluster of its own"),
        "{refused}"
    );

    ws.subscribe(subscribe(serde_json::json!(["east", "west"]), None))
        .await;
    let mut merged = Merged::default();
    merged.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    env.change_both();
    merged.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    for cluster in clusters {
        merged.views[cluster].assert_matches(&env.sim(cluster).list("pods").0);
        assert!(merged.views[cluster].resets.is_empty());
        assert_eq!(env.sim(cluster).stats().resource("pods").open_watches, 1);
    }
    let id = merged.last_id.clone().expect("a compound id");
    assert!(id.starts_with("east=") && id.contains(",west="), "{id}");

    // One subscription: its id is taken while it streams, and
    // unsubscribing ends every part, nothing of it following the reply.
    ws.subscribe(subscribe("*".into(), None)).await;
    let conflict = next_of(&mut ws, "m").await;
    assert_eq!(conflict["object"]["code"], 409, "{conflict}");
    ws.send_json(serde_json::json!({"op": "unsubscribe", "id": "m"}))
        .await;
    assert_eq!(next_of(&mut ws, "m").await["type"], "UNSUBSCRIBED");
    env.change_while_away();
    ws.subscribe(
        serde_json::json!({"op": "subscribe", "id": "e", "resource": "pods", "cluster": "east"}),
    )
    .await;
    let mut east = ClientView::new();
    let rv = env.sim("east").stats().resource_version;
    tokio::time::timeout(WAIT, async {
        while !east.settled(rv) {
            let msg = ws.next().await;
            assert_eq!(msg["sub"], "e", "nothing of m after UNSUBSCRIBED: {msg}");
            east.apply(&crate::ws::event(&msg));
        }
    })
    .await
    .expect("e's snapshot in time");

    // Resumed from the compound id: each part from its own position, no
    // snapshot, no reset, every change made while away.
    merged.resuming();
    ws.subscribe(subscribe("east,west".into(), Some(&id))).await;
    merged.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    merged.assert_resumed(&env, &clusters);
    ws.send_json(serde_json::json!({"op": "unsubscribe", "id": "m"}))
        .await;
    assert_eq!(next_of(&mut ws, "m").await["type"], "UNSUBSCRIBED");

    // East's position is long gone: east alone starts over.
    let west = id.split(',').find(|p| p.starts_with("west=")).unwrap();
    ws.subscribe(subscribe(
        "east,west".into(),
        Some(&format!("east=1,{west}")),
    ))
    .await;
    let mut again = Merged::resuming_only("west");
    again.follow(&mut Sub(&mut ws, "m"), &env, &clusters).await;
    again.assert_reset_alone(&env, "east");

    // Bad input: that subscription's ERROR, saying what is wrong.
    for (msg, code, says) in [
        (
            serde_json::json!({"clusters": "east,north"}),
            404,
            "\"north\"",
        ),
        (
            serde_json::json!({"clusters": "east", "resourceVersion": "east=5,west=6"}),
            400,
            "does not ask for",
        ),
        (
            serde_json::json!({"clusters": "east", "resourceVersion": "5"}),
            400,
            "not a merged stream's id",
        ),
        (
            serde_json::json!({"clusters": "east", "cluster": "east"}),
            400,
            "not both",
        ),
        (
            serde_json::json!({"clusters": "east,North"}),
            400,
            "lowercase",
        ),
    ] {
        let mut sent = serde_json::json!({"op": "subscribe", "id": "bad", "resource": "pods"});
        for (k, v) in msg.as_object().unwrap() {
            sent[k] = v.clone();
        }
        ws.send_json(sent.clone()).await;
        let refused = next_of(&mut ws, "bad").await;
        assert_eq!(refused["type"], "ERROR", "{sent}: {refused}");
        validate_status(&refused["object"]);
        assert_eq!(refused["object"]["code"], code, "{sent}: {refused}");
        assert!(
            refused["object"]["message"]
                .as_str()
                .unwrap()
                .contains(says),
            "{sent}: {refused}"
        );
    }

    // At shutdown each part ends with its ERROR, naming its cluster, and
    // the subscription with one naming none.
    let Env { app, sims, .. } = env;
    let stopping = tokio::spawn(async move { app.stop().await });
    let mut ended = BTreeSet::new();
    let last = tokio::time::timeout(WAIT, async {
        loop {
            let msg = next_of(&mut ws, "m").await;
            assert_eq!(msg["type"], "ERROR", "{msg}");
            match msg["cluster"].as_str() {
                Some(cluster) => assert!(ended.insert(cluster.to_string()), "{msg}"),
                None => return msg,
            }
        }
    })
    .await
    .expect("the subscription's end in time");
    assert_eq!(
        ended,
        BTreeSet::from(["east".to_string(), "west".to_string()])
    );
    assert_eq!(last["object"]["code"], 503, "{last}");
    assert!(
        last["object"]["message"]
            .as_str()
            .unwrap()
            .contains("every cluster's part"),
        "{last}"
    );
    stopping.await.unwrap();
    for (_, _, server) in sims {
        if let Some(server) = server {
            server.stop().await;
        }
    }
}

/// A merged subscription starts a stream and a snapshot in each of its
/// clusters: it spends one of the socket's `--ws-subscribes-per-minute`
/// per cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_subscription_spends_the_socket_ration_once_per_cluster() {
    let mut cfg = test_config(&["pods"]);
    cfg.stream.subscribes_per_minute = 3;
    let env = east_west(cfg).await;
    let mut ws = crate::ws::WsClient::connect_to(env.app.local_addr(), "/ws").await;
    let subscribe = |id: &str, at: (&str, &str)| {
        let mut msg = serde_json::json!({"op": "subscribe", "id": id, "resource": "pods"});
        msg[at.0] = at.1.into();
        msg
    };
    // Two of three for east and west, one for east alone: all spent.
    ws.subscribe(subscribe("m", ("clusters", "east,west")))
        .await;
    ws.subscribe(subscribe("e", ("cluster", "east"))).await;
    ws.subscribe(subscribe("w", ("cluster", "west"))).await;
    // The admitted ones stream: each of m's clusters, and east for e.
    let mut subs: BTreeMap<String, Merged> = BTreeMap::new();
    let mut refused = None;
    let synced = |subs: &BTreeMap<String, Merged>, id: &str, clusters: &[&str]| {
        subs.get(id).is_some_and(|m| {
            clusters
                .iter()
                .all(|c| m.views.get(*c).is_some_and(|v| v.snapshots > 0))
        })
    };
    tokio::time::timeout(WAIT, async {
        while refused.is_none()
            || !(synced(&subs, "m", &["east", "west"]) && synced(&subs, "e", &["east"]))
        {
            let msg = ws.next().await;
            match msg["sub"].as_str().unwrap() {
                "w" => refused = Some(msg),
                id => subs
                    .entry(id.to_string())
                    .or_default()
                    .apply(&crate::ws::event(&msg)),
            }
        }
    })
    .await
    .expect("m's and e's snapshots, and w's refusal, in time");
    let refused = refused.unwrap();
    assert_eq!(
        (refused["type"].as_str(), refused["object"]["code"].as_u64()),
        (Some("ERROR"), Some(429)),
        "{refused}"
    );
    env.stop().await;
}

/// `--state-dir` keeps each cluster's positions apart, under
/// `clusters/NAME/`, each for its own API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cluster_keeps_its_positions_under_its_name() {
    let dir = std::env::temp_dir().join(format!("kubefan-state-{}", uuid::Uuid::new_v4()));
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.positions = Some(kubefan::upstream::PositionsConfig {
        dir: dir.clone(),
        upstream: String::new(),
    });
    let env = east_west(cfg).await;
    let (_, _) = env.snapshot("/clusters/east/stream/pods", None).await;
    let (_, _) = env.snapshot("/clusters/west/stream/pods", None).await;
    let urls: Vec<(String, String, u64)> = env
        .sims
        .iter()
        .map(|(name, sim, server)| {
            let url = server.as_ref().unwrap().url();
            (name.to_string(), url, sim.stats().resource_version)
        })
        .collect();
    // Saved at the latest when the gateway stops.
    env.stop().await;
    for (name, url, rv) in urls {
        let file = dir.join("clusters").join(&name).join("positions.json");
        let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(saved["upstream"], url, "{name}");
        assert_eq!(saved["resources"]["pods"], rv, "{name}");
    }
    assert!(
        !dir.join("positions.json").exists(),
        "no unnamed cluster's file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
