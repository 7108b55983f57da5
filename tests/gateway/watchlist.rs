//! The informer's state through a streaming list (`sendInitialEvents=true`,
//! KEP-3157), the paged LIST where the upstream does not serve it, and no
//! relist loop when a LIST ends older than the upstream's watch history.
//!
//! Upstreams that refuse, ignore or cut a streaming list are the simulator
//! behind [`Proxy`], a small HTTP proxy that changes only watch lists.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use kubefan::app::App;
use kubefan::config::Config;
use kubefan::hub::Hub;
use kubefan::upstream::ListMode;
use kubefan_sim::{ChurnConfig, Sim, SimConfig, pod, seed_cluster, spawn_churn};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sse::{pods_of, seeded, subscribed};
use crate::support::{TestEnv, WAIT, key_of, rv_of, sim_config, spawn, test_config};

/// What [`Proxy`] does to a watch list; everything else it passes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 422, as kube-apiserver v1.27 to v1.31 with the `WatchList` gate off.
    Refuse,
    /// Drops `sendInitialEvents` and `resourceVersionMatch`: a plain watch
    /// from now, as a server that does not know them serves it.
    Ignore,
    /// Passes on the first one's first N lines, then ends it; later ones
    /// wait for [`Proxy::release`], then pass.
    CutFirst(usize),
}

struct ProxyState {
    upstream: String,
    answer: Answer,
    http: reqwest::Client,
    watch_lists: AtomicUsize,
    /// Names of the objects the cut watch list passed on.
    passed: Mutex<Vec<String>>,
    released: tokio::sync::watch::Sender<bool>,
}

struct Proxy {
    url: String,
    state: web::Data<ProxyState>,
    handle: actix_web::dev::ServerHandle,
}

impl Proxy {
    async fn start(upstream: String, answer: Answer) -> Proxy {
        let state = web::Data::new(ProxyState {
            upstream,
            answer,
            http: reqwest::Client::new(),
            watch_lists: AtomicUsize::new(0),
            passed: Mutex::new(Vec::new()),
            released: tokio::sync::watch::Sender::new(false),
        });
        let data = state.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(data.clone())
                .default_service(web::to(forward))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let url = format!("http://{}", server.addrs()[0]);
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Proxy { url, state, handle }
    }

    fn watch_lists(&self) -> usize {
        self.state.watch_lists.load(Ordering::SeqCst)
    }

    /// Waits until the proxy has seen `n` watch lists.
    async fn seen(&self, n: usize) {
        tokio::time::timeout(WAIT, async {
            while self.watch_lists() < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} watch lists, not {n}", self.watch_lists()));
    }

    fn release(&self) {
        self.state.released.send_replace(true);
    }

    fn passed(&self) -> Vec<String> {
        self.state.passed.lock().unwrap().clone()
    }
}

async fn forward(req: HttpRequest, body: web::Bytes, state: web::Data<ProxyState>) -> HttpResponse {
    let query = req.query_string();
    let watch_list = query.split('&').any(|p| p == "sendInitialEvents=true");
    let mut query = query.to_string();
    let mut cut = None;
    if watch_list {
        let n = state.watch_lists.fetch_add(1, Ordering::SeqCst);
        match state.answer {
            Answer::Refuse => {
                return HttpResponse::UnprocessableEntity()
                    .content_type("application/json")
                    .body(
                        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#,
                    );
            }
            Answer::Ignore => {
                query = query
                    .split('&')
                    .filter(|p| {
                        !p.starts_with("sendInitialEvents=")
                            && !p.starts_with("resourceVersionMatch=")
                    })
                    .collect::<Vec<_>>()
                    .join("&");
            }
            Answer::CutFirst(lines) if n == 0 => cut = Some(lines),
            Answer::CutFirst(_) => {
                let mut released = state.released.subscribe();
                let _ = released.wait_for(|r| *r).await;
            }
        }
    }
    let url = format!("{}{}?{query}", state.upstream, req.path());
    let mut out = state
        .http
        .request(req.method().as_str().parse().unwrap(), url)
        .body(body);
    for name in ["accept", "content-type", "authorization"] {
        if let Some(v) = req.headers().get(name) {
            out = out.header(name, v.as_bytes());
        }
    }
    let resp = out.send().await.unwrap();
    let mut answer =
        HttpResponse::build(actix_web::http::StatusCode::from_u16(resp.status().as_u16()).unwrap());
    for (name, value) in resp.headers() {
        if name == "content-type" || name == "warning" {
            answer.append_header((name.as_str(), value.as_bytes()));
        }
    }
    let chunks = resp.bytes_stream();
    match cut {
        None => answer.streaming(chunks),
        Some(lines) => answer.streaming(first_lines(chunks, lines, state.into_inner())),
    }
}

/// The first `n` lines of a body, each passed on whole; the names of
/// their objects kept.
fn first_lines(
    chunks: impl futures::Stream<Item = reqwest::Result<Bytes>> + Unpin + 'static,
    n: usize,
    state: Arc<ProxyState>,
) -> impl futures::Stream<Item = reqwest::Result<Bytes>> {
    futures::stream::unfold(
        (chunks, BytesMut::new(), 0usize),
        move |(mut chunks, mut buf, sent)| {
            let state = state.clone();
            async move {
                if sent == n {
                    return None;
                }
                loop {
                    if let Some(at) = buf.iter().position(|b| *b == b'\n') {
                        let line = buf.split_to(at + 1).freeze();
                        let event: Value = serde_json::from_slice(&line).unwrap();
                        let name = event["object"]["metadata"]["name"].as_str().unwrap_or("");
                        state.passed.lock().unwrap().push(name.to_string());
                        return Some((Ok(line), (chunks, buf, sent + 1)));
                    }
                    buf.extend_from_slice(&chunks.next().await?.ok()?);
                }
            }
        },
    )
}

/// The gateway against the simulator behind `proxy`.
async fn spawn_behind(sim: Sim, answer: Answer, cfg: Config) -> (TestEnv, Proxy) {
    let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let proxy = Proxy::start(server.url(), answer).await;
    let client = kube::Client::try_from(kube::Config::new(proxy.url.parse().unwrap())).unwrap();
    let app = App::build(cfg, client).await.unwrap();
    let base = format!("http://{}", app.local_addr());
    let env = TestEnv {
        sim,
        server,
        app,
        base,
        http: reqwest::Client::new(),
    };
    (env, proxy)
}

async fn stop_behind(env: TestEnv, proxy: Proxy) {
    proxy.release();
    env.stop().await;
    proxy.handle.stop(true).await;
}

async fn hub(env: &TestEnv, resource: &str) -> Arc<Hub> {
    env.app.informers().hub(resource).await.unwrap()
}

/// The hub holds exactly the simulator's objects, each at its version.
async fn holds_the_upstreams_objects(env: &TestEnv, resource: &str) {
    let hub = hub(env, resource).await;
    let (objects, rv) = env.sim.list(resource);
    assert!(hub.wait_for_rv(rv, WAIT).await, "caught up with {rv}");
    let want: BTreeMap<String, u64> = objects.iter().map(|o| (key_of(o), rv_of(o))).collect();
    let got: BTreeMap<String, u64> = hub
        .objects()
        .0
        .iter()
        .map(|o| {
            let key = match o.namespace() {
                Some(ns) => format!("{ns}/{}", o.name()),
                None => o.name().to_string(),
            };
            (key, o.resource_version())
        })
        .collect();
    assert_eq!(got, want);
}

/// The value of a metric series, 0 when absent.
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn lists(metrics: &str, kind: &str) -> u64 {
    counter(
        metrics,
        &format!("kubefan_upstream_lists_total{{resource=\"pods\",kind=\"{kind}\"}}"),
    )
}

/// The simulator answers a streaming list; the gateway's state comes
/// through it, with no LIST request at all, and the same watch goes on
/// with the changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_informer_syncs_through_a_streaming_list_and_sends_no_list() {
    let env = spawn(seeded(40), test_config(&["pods"])).await;
    env.synced("pods").await;
    holds_the_upstreams_objects(&env, "pods").await;
    env.sim
        .create("pods", pod("later").ns("web").build())
        .unwrap();
    holds_the_upstreams_objects(&env, "pods").await;
    let stats = env.sim.stats().resource("pods");
    assert_eq!(
        (
            stats.list_requests,
            stats.watch_requests,
            stats.open_watches
        ),
        (0, 1, 1),
        "{stats:?}"
    );
    let metrics = env.metrics().await;
    assert_eq!(
        (lists(&metrics, "streaming"), lists(&metrics, "paged")),
        (1, 0),
        "{metrics}"
    );
    env.stop().await;
}

/// A streaming list cut before its end bookmark is not the state: the
/// informer starts over (backed off) and the hub syncs once, with what
/// the upstream holds by then, none of the objects the cut list passed on
/// and the upstream deleted meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_cut_midway_starts_over_and_syncs_the_right_state() {
    let (env, proxy) = spawn_behind(seeded(30), Answer::CutFirst(10), test_config(&["pods"])).await;
    // Cut, then started over: the second waits for the proxy's release.
    proxy.seen(2).await;
    let passed = proxy.passed();
    assert_eq!(passed.len(), 10, "{passed:?}");
    let hub = hub(&env, "pods").await;
    assert!(!hub.is_synced(), "a cut list is not the state");
    // Meanwhile, upstream: the objects it passed on are deleted.
    for (ns, name) in env.sim.names("pods") {
        if passed.contains(&name) {
            env.sim.delete("pods", Some(&ns), &name).unwrap();
        }
    }
    env.sim
        .create("pods", pod("born-meanwhile").ns("web").build())
        .unwrap();
    proxy.release();
    env.synced("pods").await;
    holds_the_upstreams_objects(&env, "pods").await;
    // One state: no synthetic events from a partial one.
    assert_eq!(hub.stats().log_events, 0, "{:?}", hub.stats());
    let metrics = env.metrics().await;
    assert_eq!(lists(&metrics, "streaming"), 2, "{metrics}");
    assert_eq!(
        counter(
            &metrics,
            "kubefan_upstream_errors_total{resource=\"pods\",reason=\"watch_list\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(env.sim.stats().resource("pods").list_requests, 0);
    stop_behind(env, proxy).await;
}

/// An upstream that refuses the streaming list (422), or ignores
/// `sendInitialEvents` (a plain watch: its bookmarks are not annotated),
/// gets a paged LIST instead, as client-go falls back; a relist after a
/// 410 tries the streaming list again first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_without_streaming_lists_gets_paged_lists() {
    for answer in [Answer::Refuse, Answer::Ignore] {
        let mut cfg = test_config(&["pods"]);
        cfg.upstream.informer.page_size = 7;
        let (env, proxy) = spawn_behind(seeded(20), answer, cfg).await;
        env.synced("pods").await;
        holds_the_upstreams_objects(&env, "pods").await;
        assert_eq!(
            env.sim.stats().resource("pods").list_requests,
            3,
            "{answer:?}: 20 pods in pages of 7"
        );
        // The watch after the LIST delivers (so its later 410 is not the
        // LIST's doing).
        env.sim
            .create("pods", pod("seen").ns("web").build())
            .unwrap();
        holds_the_upstreams_objects(&env, "pods").await;
        let metrics = env.metrics().await;
        assert_eq!(
            (lists(&metrics, "streaming"), lists(&metrics, "paged")),
            (1, 1),
            "{answer:?}: {metrics}"
        );
        assert_eq!(
            counter(
                &metrics,
                "kubefan_upstream_errors_total{resource=\"pods\",reason=\"watch_list_refused\"}"
            ),
            1,
            "{answer:?}: {metrics}"
        );

        // A 410: the relist tries the streaming list again, then pages.
        env.sim.stall_watches(true);
        env.sim
            .create("pods", pod("unseen").ns("web").build())
            .unwrap();
        env.sim.compact();
        env.sim.end_watches();
        env.sim.stall_watches(false);
        holds_the_upstreams_objects(&env, "pods").await;
        let metrics = env.metrics().await;
        assert_eq!(
            (lists(&metrics, "streaming"), lists(&metrics, "paged")),
            (2, 2),
            "{answer:?}: {metrics}"
        );
        assert_eq!(proxy.watch_lists(), 2, "{answer:?}");
        stop_behind(env, proxy).await;
    }
}

/// client-go's rule: a watch list that fails with an error it cannot
/// retry (here a 500) is followed by a LIST at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_streaming_list_is_followed_by_a_list() {
    let sim = seeded(5);
    sim.fail_next(1);
    let env = spawn(sim, test_config(&["pods"])).await;
    env.synced("pods").await;
    holds_the_upstreams_objects(&env, "pods").await;
    let metrics = env.metrics().await;
    assert_eq!(
        (lists(&metrics, "streaming"), lists(&metrics, "paged")),
        (1, 1),
        "{metrics}"
    );
    env.stop().await;
}

/// `--upstream-list paged` never sends a streaming list; `streaming`
/// never lists, and retries a refused one, backed off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_forces_either_way() {
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.informer.list = ListMode::Paged;
    let (env, proxy) = spawn_behind(seeded(5), Answer::Refuse, cfg).await;
    env.synced("pods").await;
    holds_the_upstreams_objects(&env, "pods").await;
    assert_eq!(proxy.watch_lists(), 0);
    let metrics = env.metrics().await;
    assert_eq!(
        (lists(&metrics, "streaming"), lists(&metrics, "paged")),
        (0, 1),
        "{metrics}"
    );
    stop_behind(env, proxy).await;

    let mut cfg = test_config(&["pods"]);
    cfg.upstream.informer.list = ListMode::Streaming;
    let (env, proxy) = spawn_behind(seeded(5), Answer::Refuse, cfg).await;
    proxy.seen(3).await;
    assert!(!hub(&env, "pods").await.is_synced());
    assert_eq!(env.sim.stats().resource("pods").list_requests, 0);
    let (status, body) = env.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    stop_behind(env, proxy).await;
}

/// A paged LIST slower than the upstream's history (pages delayed, churn
/// beyond a tiny history meanwhile) ends older than anything a watch can
/// resume from: the watch after it is 410 at once. The informer counts it,
/// backs off, and lists next with `resourceVersion=0` (one response, not
/// paged: at a resourceVersion the watch has), instead of relisting in
/// pages for ever. Behind an upstream without streaming lists (auto), the
/// next list tries the streaming list first, then the same LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_older_than_the_upstreams_history_is_not_relisted_in_a_loop() {
    for mode in [ListMode::Paged, ListMode::Auto] {
        let sim = Sim::new(SimConfig {
            history: 100,
            ..sim_config()
        });
        let churn = ChurnConfig {
            rate: 200.0,
            pods: 200,
            nodes: 3,
            seed: Some(3),
            // Pods without managedFields (~3.5 KB, not ~6.5): the cached
            // list at the end must come and its watch open within the
            // 0.5 s the 100 events of history last at 200 changes/s, in a
            // debug build.
            managed_fields: false,
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &churn);
        // 20 pages of 100 ms: the first page's resourceVersion is ~2 s,
        // ~400 changes, old when the last arrives.
        sim.delay_lists(Duration::from_millis(100));
        let stop_churn = CancellationToken::new();
        let churning = spawn_churn(sim.clone(), churn, stop_churn.clone());
        let mut cfg = test_config(&["pods"]);
        cfg.upstream.informer.list = mode;
        cfg.upstream.informer.page_size = 10;
        let (env, proxy) = spawn_behind(sim, Answer::Refuse, cfg).await;
        env.synced("pods").await;
        env.caught_up("pods", env.sim.resource_version()).await;
        // Churn goes on for ~3 s more: a relist loop would list again and
        // again meanwhile; the watch takes it all in instead.
        env.caught_up("pods", env.sim.resource_version() + 600)
            .await;
        stop_churn.cancel();
        churning.await.unwrap();
        holds_the_upstreams_objects(&env, "pods").await;

        let metrics = env.metrics().await;
        let outran = counter(
            &metrics,
            "kubefan_upstream_relists_total{resource=\"pods\",reason=\"list_outran_history\"}",
        );
        assert_eq!(outran, 1, "{mode:?}: {metrics}");
        assert_eq!(
            (lists(&metrics, "paged"), lists(&metrics, "cached")),
            (1, 1),
            "{mode:?}: {metrics}"
        );
        // One paged list (about 20 pages: churn moves the count), then one
        // request without a limit; a relist loop lists page after page.
        let stats = env.sim.stats();
        let (requests, pages) = (
            stats.resource("pods").list_requests,
            stats.lists("pods").limited,
        );
        assert!((18..=22).contains(&pages), "{mode:?}: {pages} pages");
        assert_eq!(requests, pages + 1, "{mode:?}: {pages} pages");
        let streaming = if mode == ListMode::Auto { 2 } else { 0 };
        assert_eq!(proxy.watch_lists(), streaming, "{mode:?}");
        stop_behind(env, proxy).await;
    }
}

/// A tier: a leaf kubefan whose upstream is a root kubefan gets its state
/// through the root's streaming list (the root's Kubernetes face ends the
/// initial events with the annotated bookmark), and holds what the
/// simulator holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_syncs_through_its_roots_streaming_list() {
    let root = spawn(seeded(25), test_config(&["pods"])).await;
    root.synced("pods").await;
    let leaf_app = App::build(test_config(&["pods"]), root.kube_client(None).await)
        .await
        .unwrap();
    let leaf = TestEnv {
        sim: root.sim.clone(),
        server: Sim::new(Default::default())
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap(),
        base: format!("http://{}", leaf_app.local_addr()),
        app: leaf_app,
        http: reqwest::Client::new(),
    };
    leaf.synced("pods").await;
    holds_the_upstreams_objects(&leaf, "pods").await;
    root.sim
        .create("pods", pod("after").ns("web").build())
        .unwrap();
    holds_the_upstreams_objects(&leaf, "pods").await;
    let (sse, view) = subscribed(&leaf, "/stream/pods").await;
    view.assert_matches(&pods_of(&root.sim).0);

    let metrics = leaf.metrics().await;
    assert_eq!(
        (lists(&metrics, "streaming"), lists(&metrics, "paged")),
        (1, 0),
        "the leaf never fell back: {metrics}"
    );
    assert_eq!(
        counter(
            &metrics,
            "kubefan_upstream_errors_total{resource=\"pods\",reason=\"watch_list_refused\"}"
        ),
        0
    );
    // The root served it as one watch, and the simulator saw the root's
    // one watch and no LIST but resourceVersion probes.
    let root_metrics = root.metrics().await;
    assert!(
        root_metrics.contains("kubefan_subscribers{resource=\"pods\",transport=\"KubeWatch\"} 1"),
        "{root_metrics}"
    );
    let stats = root.sim.stats();
    assert_eq!(
        (
            stats.resource("pods").list_requests - stats.lists("pods").probes,
            stats.resource("pods").watch_requests
        ),
        (0, 1),
        "{stats:?}"
    );
    drop(sse);
    leaf.stop().await;
    root.stop().await;
}

/// A relist keeps a watch beside it (`upstream::informer`, "A relist
/// beside its watch"): a change made while the list is still coming
/// reaches a stream then, not when the list is in; the list's own changes
/// (the gap's) follow, and the stream ends equal to the upstream, without
/// a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_a_relist_lists_reaches_streams_before_the_list_ends() {
    // The first streaming list passes whole; later ones wait for release.
    let (env, proxy) = spawn_behind(
        seeded(20),
        Answer::CutFirst(usize::MAX),
        test_config(&["pods"]),
    )
    .await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    view.follow(&mut sse, env.sim.resource_version()).await;
    // A change the gateway cannot see, then compaction: its watch resumes
    // into a 410, and it relists.
    env.sim.stall_watches(true);
    let (existing, _) = pods_of(&env.sim);
    let gap = &existing[0]["metadata"];
    env.sim
        .delete(
            "pods",
            gap["namespace"].as_str(),
            gap["name"].as_str().unwrap(),
        )
        .unwrap();
    env.sim.compact();
    env.sim.end_watches();
    env.sim.stall_watches(false);
    // The relist's streaming list is held; its watch beside was opened
    // before it.
    proxy.seen(2).await;
    let live = env
        .sim
        .create("pods", pod("made-while-listing").ns("web").build())
        .unwrap();
    view.follow(&mut sse, rv_of(&live)).await;
    assert!(
        view.objects.contains_key("web/made-while-listing"),
        "the change came while the list was held: {:?}",
        view.objects.keys()
    );
    assert_eq!(proxy.watch_lists(), 2, "the list is still held");
    proxy.release();
    // The gap's deletion comes once the list is in, at the next upstream
    // event or bookmark.
    let gap_key = format!(
        "{}/{}",
        gap["namespace"].as_str().unwrap(),
        gap["name"].as_str().unwrap()
    );
    tokio::time::timeout(WAIT, async {
        while view.objects.contains_key(&gap_key) {
            let ev = sse.next().await.expect("the stream goes on");
            view.apply(&ev);
        }
    })
    .await
    .expect("the gap's deletion");
    env.sim
        .create("pods", pod("after-the-list").ns("web").build())
        .unwrap();
    let (objects, rv) = pods_of(&env.sim);
    view.follow(&mut sse, rv).await;
    view.assert_matches(&objects);
    assert!(view.resets.is_empty(), "no reset: {:?}", view.resets);
    let metrics = env.metrics().await;
    assert_eq!(
        counter(
            &metrics,
            "kubefan_upstream_relists_total{resource=\"pods\",reason=\"expired\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(
        env.sim.stats().resource("pods").list_requests,
        1,
        "the one-item LIST that gave the watch beside its resourceVersion"
    );
    stop_behind(env, proxy).await;
}
