//! Hub append and fan-out cost with 1, 100 and 10,000 cursors.
//!
//! Each iteration appends one ~1 KB event and lets every cursor read it
//! (what each subscriber task does when woken), so the figure is the hub's
//! cost per event including fan-out to N cursors. Run:
//! `cargo bench --bench hub`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kubefan::hub::projection::Projection;
use kubefan::hub::{EventType, Filter, Hub, LogLimits, Obj, ResourceMeta, ViewSpec};
use kubefan::metrics::Metrics;
use kubefan::selector::LabelSelector;

fn pod(i: u64, rv: u64) -> Obj {
    let labels: String = (0..20)
        .map(|l| format!("\"label-{l}\":\"value-{l}-xxxxxxxx\","))
        .collect();
    let json = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"pod-{i}\",\"namespace\":\"default\",\"resourceVersion\":\"{rv}\",\"labels\":{{{}}}}},\"spec\":{{\"nodeName\":\"node-1\"}},\"status\":{{\"phase\":\"Running\"}}}}",
        labels.trim_end_matches(',')
    );
    let labels = (0..20).map(|l| (format!("label-{l}"), format!("value-{l}-xxxxxxxx")));
    Obj::new(Some("default"), &format!("pod-{i}"), rv, json.as_bytes()).with_selectors(
        labels.chain([("app".to_string(), format!("app-{}", i % 10))]),
        &[],
        [],
    )
}

fn hub() -> Arc<Hub> {
    let hub = Hub::new(
        ResourceMeta::new("pods", "v1", "Pod"),
        LogLimits::default(),
        Arc::new(Metrics::new()),
    );
    hub.relist((0..1000).map(|i| pod(i, 1)).collect(), 1);
    hub
}

fn append_and_fan_out(c: &mut Criterion) {
    let mut group = c.benchmark_group("hub_append_fan_out");
    for cursors in [1usize, 100, 10_000] {
        group.throughput(Throughput::Elements(cursors as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(cursors),
            &cursors,
            |b, &cursors| {
                let hub = hub();
                let mut positions = vec![hub.head(); cursors];
                let mut rv = 1;
                let mut out = Vec::with_capacity(4);
                let next = move || {
                    rv += 1;
                    pod(rv % 1000, rv)
                };
                b.iter_batched(
                    next,
                    |obj| {
                        hub.apply(EventType::Modified, obj);
                        let mut delivered = 0;
                        for cursor in positions.iter_mut() {
                            out.clear();
                            // A lapped cursor would re-snapshot; with the default log
                            // (10k events) and one append per iteration it is
                            // re-positioned instead so the measurement stays steady.
                            if hub.read(cursor, 16, &mut out).is_err() {
                                *cursor = hub.head();
                            }
                            delivered += out.len();
                        }
                        black_box(delivered)
                    },
                    BatchSize::SmallInput,
                );
            },
        );
    }
    group.finish();
}

fn append_only(c: &mut Criterion) {
    c.bench_function("hub_append_1kb_event", |b| {
        let hub = hub();
        let mut rv = 1;
        let next = move || {
            rv += 1;
            pod(rv % 1000, rv)
        };
        b.iter_batched(
            next,
            |obj| black_box(hub.apply(EventType::Modified, obj)),
            BatchSize::SmallInput,
        );
    });
}

/// 1,000 subscriptions over 10 distinct views (a label selector and a
/// projection each): per event, the hub appends once, each view filters,
/// projects and encodes once, and every cursor picks up its view's bytes.
fn views_fan_out(c: &mut Criterion) {
    c.bench_function("views_1000_subscriptions_10_views", |b| {
        let hub = hub();
        let views: Vec<_> = (0..10)
            .map(|v| {
                hub.view(ViewSpec {
                    filter: Filter {
                        labels: LabelSelector::parse(&format!(
                            "app in (app-{v},app-{})",
                            (v + 1) % 10
                        ))
                        .unwrap(),
                        ..Filter::default()
                    },
                    projection: Some(Projection::parse("spec.nodeName,status.phase").unwrap()),
                    ..ViewSpec::default()
                })
            })
            .collect();
        let mut cursors: Vec<(usize, u64)> = (0..1000).map(|i| (i % 10, hub.head())).collect();
        let mut rv = 1;
        let next = move || {
            rv += 1;
            pod(rv % 1000, rv)
        };
        b.iter_batched(
            next,
            |obj| {
                hub.apply(EventType::Modified, obj);
                let mut delivered = 0;
                for (view, cursor) in cursors.iter_mut() {
                    let mut out = Vec::with_capacity(4);
                    if hub.read(cursor, 16, &mut out).is_err() {
                        *cursor = hub.head();
                    }
                    delivered += views[*view].deliver(out).len();
                }
                black_box(delivered)
            },
            BatchSize::SmallInput,
        );
    });
}

criterion_group!(benches, append_only, append_and_fan_out, views_fan_out);
criterion_main!(benches);
