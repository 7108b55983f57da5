//! Streams whose views pin a value (node agents, `spec.nodeName=NODE`):
//! a change is written to the streams it reaches, and only those are
//! visited; the others keep their place in the log without being
//! stepped, and leave, tick and resume from exactly where they are.

use super::*;
use crate::selector::{FieldSelector, LabelSelector, selectable_fields};

const NODES: usize = 50;

fn on_node(node: &str) -> Filter {
    Filter {
        namespaces: vec![],
        labels: LabelSelector::default(),
        fields: FieldSelector::parse_any(&format!("spec.nodeName={node}")).unwrap(),
    }
}

/// A pod `name` on `node` at `rv`, with the selectable fields the
/// informer's ingest gives it.
fn pod(name: &str, node: Option<&str>, rv: u64) -> Obj {
    let spec = node.map_or(String::new(), |n| {
        format!(r#","spec":{{"nodeName":"{n}"}}"#)
    });
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{rv}"}}{spec}}}"#
    );
    let fields = selectable_fields("", "pods");
    let values = fields.iter().map(|f| {
        (*f == "spec.nodeName")
            .then(|| node.map(String::from))
            .flatten()
    });
    Obj::new(Some("default"), name, rv, json.as_bytes()).with_selectors([], fields, values)
}

/// What an SSE stream of `filter` is sent for the event at `rv` (the
/// hub's last), read as its own subscription would read it.
fn framed_for(hub: &Arc<Hub>, filter: &Filter, cursor: u64) -> Vec<u8> {
    let view = hub.view(ViewSpec::new(filter.clone()));
    let step = Step::read(hub, &view, cursor).unwrap();
    step.deliveries
        .iter()
        .flat_map(|d| d.frame().sse().to_vec())
        .collect()
}

impl Setup {
    /// A parked stream of node `node`'s pods.
    async fn agent(&self, node: &str) -> Arc<Socket> {
        let (fake, socket) = self.stream_of(on_node(node), None).await;
        self.batches.park(fake);
        socket
    }

    /// Applies `kind` of pod `name` on `node`: the bytes each agent of
    /// `agents` (by node) is sent for it.
    fn change(
        &mut self,
        kind: EventType,
        name: &str,
        node: Option<&str>,
        agents: &[&str],
    ) -> Vec<Vec<u8>> {
        self.rv += 1;
        let cursor = self.hub.head();
        assert!(self.hub.apply(kind, pod(name, node, self.rv)), "applied");
        agents
            .iter()
            .map(|a| framed_for(&self.hub, &on_node(a), cursor))
            .collect()
    }

    fn visited(&self) -> u64 {
        self.metrics.streams_visited().get()
    }
}

fn node(i: usize) -> String {
    format!("node-{i}")
}

#[tokio::test(start_paused = true)]
async fn a_change_visits_and_writes_only_the_streams_of_its_nodes() {
    let mut s = Setup::new(LogLimits::default());
    let mut agents = Vec::new();
    for i in 0..NODES {
        agents.push(s.agent(&node(i)).await);
    }
    // One stream that pins nothing: every pass visits it.
    let all = s.parked().await;
    run_until("all parked", || s.parked_now() == NODES as i64 + 1).await;
    let start = s.hub.head();
    // The agents came in dirty: a first change visits them once each.
    let first = s.change(EventType::Added, "p", Some("node-3"), &["node-3"]);
    run_until("node-3 written", || agents[3].wrote() == first[0]).await;
    run_a_while().await;
    let before = s.visited();

    let mut expected = first[0].clone();
    for _ in 0..20 {
        let sent = s.change(EventType::Modified, "p", Some("node-3"), &["node-3"]);
        expected.extend(&sent[0]);
    }
    run_until("node-3 written", || agents[3].wrote() == expected).await;
    run_a_while().await;
    let visits = s.visited() - before;
    // Each pass visits node-3's stream and the unpinned one: at most two
    // per change, where every stream was 51.
    assert!(
        (2..=2 * 20).contains(&visits),
        "{visits} visits for 20 changes on one node"
    );
    for (i, agent) in agents.iter().enumerate() {
        if i != 3 {
            assert!(
                agent.wrote().is_empty(),
                "node-{i} was sent another node's pod"
            );
        }
    }
    assert_eq!(
        all.wrote(),
        framed_for(&s.hub, &Filter::default(), start),
        "the stream that pins nothing got every change"
    );
    assert_eq!(s.unparked_total(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_pod_rescheduled_is_deleted_for_the_old_node_and_added_for_the_new() {
    let mut s = Setup::new(LogLimits::default());
    let (a, b, c) = (s.agent("a").await, s.agent("b").await, s.agent("c").await);
    run_until("parked", || s.parked_now() == 3).await;
    let added = s.change(EventType::Added, "p", Some("a"), &["a"]);
    run_until("a has it", || a.wrote() == added[0]).await;
    let moved = s.change(EventType::Modified, "p", Some("b"), &["a", "b"]);
    assert!(
        String::from_utf8_lossy(&moved[0]).starts_with("event: DELETED"),
        "the old node's agent loses it"
    );
    assert!(
        String::from_utf8_lossy(&moved[1]).starts_with("event: ADDED"),
        "the new node's gains it"
    );
    run_until("both written", || {
        a.wrote() == [&added[0][..], &moved[0]].concat() && b.wrote() == moved[1]
    })
    .await;
    let gone = s.change(EventType::Deleted, "p", Some("b"), &["b"]);
    run_until("b has the delete", || {
        b.wrote() == [&moved[1][..], &gone[0]].concat()
    })
    .await;
    run_a_while().await;
    assert!(c.wrote().is_empty(), "c was reached by nothing");
    assert_eq!(
        a.wrote(),
        [&added[0][..], &moved[0]].concat(),
        "a got nothing after"
    );
}

/// A stream no change reached leaves the writer where the writer's scan
/// is: its own task goes on from there, with nothing skipped that was
/// its and nothing twice.
#[tokio::test(start_paused = true)]
async fn a_stream_skipped_over_leaves_at_the_head_with_nothing_missed() {
    let mut s = Setup::new(LogLimits::default());
    let (a, other) = (s.agent("a").await, s.agent("b").await);
    run_until("parked", || s.parked_now() == 2).await;
    let mine = s.change(EventType::Added, "mine", Some("a"), &["a"]);
    run_until("a written", || a.wrote() == mine[0]).await;
    for i in 0..30 {
        s.change(EventType::Added, &format!("q{i}"), Some("b"), &[]);
    }
    run_until("b written", || {
        other.wrote().matches_count(b"event: ADDED") == 30
    })
    .await;
    // a leaves (input on its socket): its task takes over.
    *lock(&a.input) = true;
    lock(&a.input_waker).clone().unwrap().wake_by_ref();
    run_until("a's task ran", || lock(&a.returned).is_some()).await;
    assert_eq!(s.unparked("Input"), 1);
    let mut framed = lock(&a.returned).take().unwrap();
    // Its next item is the next change of its node, not a reset nor one
    // of b's, nor its own first pod again.
    let next = s.change(EventType::Modified, "mine", Some("a"), &["a"]);
    let item = tokio::time::timeout(Duration::from_secs(5), framed.subscription_mut().next())
        .await
        .expect("an item");
    match item {
        Some(Item::Events(events)) => {
            let bytes: Vec<u8> = events
                .iter()
                .flat_map(|d| d.frame().sse().to_vec())
                .collect();
            assert_eq!(bytes, next[0]);
        }
        other => panic!("not its next change: {other:?}"),
    }
}

/// A tick tells a stream no change reached the position it is at: the
/// writer's scan, past every change it was not shown.
#[tokio::test(start_paused = true)]
async fn a_tick_tells_a_skipped_stream_the_position_the_log_reached() {
    let mut s = Setup::new(LogLimits::default());
    let (a, b) = (s.agent("a").await, s.agent("b").await);
    run_until("parked", || s.parked_now() == 2).await;
    // The tick after the snapshot owes nothing.
    s.lifecycle.tick();
    run_a_while().await;
    for i in 0..5 {
        s.change(EventType::Added, &format!("q{i}"), Some("b"), &[]);
    }
    run_until("b written", || !b.wrote().is_empty()).await;
    run_a_while().await;
    s.lifecycle.tick();
    let rv = s.rv;
    run_until("a told its position", || !a.wrote().is_empty()).await;
    let told = String::from_utf8(a.wrote()).unwrap();
    assert!(
        told.contains(&format!("\"{rv}\"")) || told.contains(&format!("id: {rv}")),
        "a progress mark at {rv}, the last change's: {told:?}"
    );
    assert_eq!(s.unparked_total(), 0);
}

/// Changes that reach a stream but fall off the log before its writer
/// reads them are never skipped silently: the stream is lapped, reset.
#[tokio::test(start_paused = true)]
async fn a_change_that_reached_a_stream_and_left_the_log_unread_resets_it() {
    let mut s = Setup::new(LogLimits {
        max_events: 3,
        max_bytes: 1 << 20,
    });
    let a = s.agent("a").await;
    run_until("parked", || s.parked_now() == 1).await;
    let first = s.change(EventType::Added, "mine", Some("a"), &["a"]);
    run_until("a written", || a.wrote() == first[0]).await;
    // The writer does not run between these: a's change leaves the log.
    s.change(EventType::Modified, "mine", Some("a"), &[]);
    for i in 0..5 {
        s.change(EventType::Added, &format!("q{i}"), Some("b"), &[]);
    }
    run_until("a unparked", || a.unparked().is_some()).await;
    assert_eq!(s.unparked("Lapped"), 1);
    assert_eq!(a.wrote(), first[0], "nothing after the gap");
    run_until("a's task ran", || lock(&a.returned).is_some()).await;
    let mut framed = lock(&a.returned).take().unwrap();
    let item = tokio::time::timeout(Duration::from_secs(5), framed.subscription_mut().next())
        .await
        .unwrap();
    assert!(matches!(item, Some(Item::Reset(ResetReason::Lapped))));
}

trait Count {
    fn matches_count(&self, needle: &[u8]) -> usize;
}

impl Count for Vec<u8> {
    fn matches_count(&self, needle: &[u8]) -> usize {
        self.windows(needle.len()).filter(|w| *w == needle).count()
    }
}

/// An upstream bookmark moves the hub's position with no event: a stream
/// no change reached is told it too, as a stream stepped over it is.
#[tokio::test(start_paused = true)]
async fn a_bookmark_moves_a_skipped_streams_position() {
    let mut s = Setup::new(LogLimits::default());
    let a = s.agent("a").await;
    run_until("parked", || s.parked_now() == 1).await;
    let mine = s.change(EventType::Added, "mine", Some("a"), &["a"]);
    run_until("a written", || a.wrote() == mine[0]).await;
    // Past the tick that owes nothing (a was told a position since).
    s.lifecycle.tick();
    run_a_while().await;
    let at = s.rv + 100;
    s.hub.bookmark(at);
    run_a_while().await;
    s.lifecycle.tick();
    run_until("a told", || a.wrote().len() > mine[0].len()).await;
    let told = String::from_utf8(a.wrote()[mine[0].len()..].to_vec()).unwrap();
    assert!(
        told.contains(&format!("id: {at}")),
        "a progress mark at the bookmark's {at}: {told:?}"
    );
}

/// Everything a stream of `filter` reads from `cursor` to the head.
fn framed_all(hub: &Arc<Hub>, filter: &Filter, mut cursor: u64) -> Vec<u8> {
    let view = hub.view(ViewSpec::new(filter.clone()));
    let mut out = Vec::new();
    loop {
        let step = Step::read(hub, &view, cursor).unwrap();
        for d in &step.deliveries {
            out.extend_from_slice(d.frame().sse());
        }
        cursor = step.advance.cursor;
        if step.advance.caught_up.is_some() {
            return out;
        }
    }
}

/// Random creates, moves, deletes and relists (whose diffs carry the
/// same transitions), with the writer running now and then between them:
/// every agent is written exactly what its view reads from where it
/// joined, whether a pass visited it for each change, or it stayed clean
/// over many and was made dirty by a relist's event.
#[tokio::test(start_paused = true)]
async fn random_changes_and_relists_reach_each_agent_as_its_view_reads_them() {
    use rand::{RngExt, SeedableRng};
    const AGENT_NODES: usize = 8;
    for seed in 0..20u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut s = Setup::new(LogLimits::default());
        let mut agents = Vec::new();
        for i in 0..AGENT_NODES {
            agents.push(s.agent(&node(i)).await);
        }
        run_until("parked", || s.parked_now() == AGENT_NODES as i64).await;
        let start = s.hub.head();
        // name → node (None: not scheduled); one node more than the
        // agents watch, and unscheduled pods.
        let mut pods: std::collections::BTreeMap<String, Option<String>> = Default::default();
        let pick_node = |rng: &mut rand::rngs::StdRng| -> Option<String> {
            let i = rng.random_range(0..=AGENT_NODES + 1);
            (i <= AGENT_NODES).then(|| node(i))
        };
        let mut next_name = 0;
        for _ in 0..200 {
            let op = rng.random_range(0..100);
            let names: Vec<String> = pods.keys().cloned().collect();
            if op < 5 {
                // A relist: some pods gone, some moved, some new.
                s.rv += 1;
                let mut fresh = pods.clone();
                for name in &names {
                    match rng.random_range(0..10) {
                        0 => {
                            fresh.remove(name);
                        }
                        1 => {
                            fresh.insert(name.clone(), pick_node(&mut rng));
                        }
                        _ => {}
                    }
                }
                for _ in 0..rng.random_range(0..3) {
                    next_name += 1;
                    fresh.insert(format!("p{next_name}"), pick_node(&mut rng));
                }
                // What changed takes the list's rv; the rest keeps its
                // object (same rv) in the hub's cache.
                let rv = s.rv;
                let cache: std::collections::HashMap<String, u64> = s
                    .hub
                    .objects()
                    .0
                    .into_iter()
                    .map(|o| (o.name().to_string(), o.resource_version()))
                    .collect();
                let objects = fresh
                    .iter()
                    .map(|(name, node)| {
                        let same = pods.get(name) == Some(node);
                        let at = if same { cache[name] } else { rv };
                        pod(name, node.as_deref(), at)
                    })
                    .collect();
                s.hub.relist(objects, rv);
                pods = fresh;
            } else if op < 40 || names.is_empty() {
                next_name += 1;
                let name = format!("p{next_name}");
                let at = pick_node(&mut rng);
                s.change(EventType::Added, &name, at.as_deref(), &[]);
                pods.insert(name, at);
            } else if op < 80 {
                let name = &names[rng.random_range(0..names.len())];
                let at = if rng.random_bool(0.5) {
                    pods[name].clone()
                } else {
                    pick_node(&mut rng)
                };
                s.change(EventType::Modified, name, at.as_deref(), &[]);
                pods.insert(name.clone(), at);
            } else {
                let name = names[rng.random_range(0..names.len())].clone();
                let at = pods.remove(&name).unwrap();
                s.change(EventType::Deleted, &name, at.as_deref(), &[]);
            }
            if rng.random_bool(0.3) {
                run_a_while().await;
            }
        }
        for (i, agent) in agents.iter().enumerate() {
            let expected = framed_all(&s.hub, &on_node(&node(i)), start);
            run_until("every agent written", || {
                agent.wrote().len() >= expected.len()
            })
            .await;
            assert!(
                agent.wrote() == expected,
                "seed {seed}, node-{i}: written\n{}\nwhere its view reads\n{}",
                String::from_utf8_lossy(&agent.wrote()),
                String::from_utf8_lossy(&expected)
            );
        }
    }
}
