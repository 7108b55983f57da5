//! Decoding upstream pods into the hub's form, per pod: a WATCH line (as
//! the informer and the streaming list read them) and a LIST page (as a
//! paged list reads them), each pod as kube-apiserver stores one that a
//! ReplicaSet created, with managedFields (the simulator's `pod`, about
//! 6-7 KB), through ingest to an `Obj`. Run: `cargo bench --bench decode`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kube::api::WatchEvent;
use kube::core::ApiResource;
use kubefan::upstream::IngestOptions;
use kubefan::upstream::events::decode;
use kubefan::upstream::ingest::{Object, ingest};
use serde::Deserialize;
use serde_json::{Value, json};

const PODS: usize = 100;

fn pods() -> Vec<Value> {
    (0..PODS)
        .map(|i| {
            let mut pod = kubefan_sim::pod(&format!("web-7d9f8c6b5-{i:05}"))
                .ns("default")
                .node(&format!("node-{}", i % 50))
                .label("app", "web")
                .label("pod-template-hash", "7d9f8c6b5")
                .containers(1 + i % 3)
                .build();
            let meta = &mut pod["metadata"];
            meta["uid"] = json!(format!("3f0c5e1a-9b7d-4c2e-8f61-{i:012}"));
            meta["creationTimestamp"] = json!("2025-06-01T12:00:00Z");
            meta["resourceVersion"] = json!(format!("{}", 1_000_000 + i));
            pod
        })
        .collect()
}

fn api() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

fn watch_line(c: &mut Criterion) {
    let lines: Vec<Vec<u8>> = pods()
        .into_iter()
        .map(|pod| serde_json::to_vec(&json!({"type": "MODIFIED", "object": pod})).unwrap())
        .collect();
    let bytes: usize = lines.iter().map(Vec::len).sum();
    eprintln!(
        "watch lines: {PODS} pods, {} bytes each on average",
        bytes / PODS
    );
    let api = api();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(PODS as u64));
    group.bench_function("watch_line", |b| {
        b.iter(|| {
            for line in &lines {
                let Some(Ok(WatchEvent::Modified(o))) = decode(line) else {
                    unreachable!()
                };
                black_box(ingest(&o, &api, IngestOptions::default()).unwrap());
            }
        })
    });
    group.finish();
}

/// What `upstream::list` reads a page as (its `Page` is private).
#[derive(Deserialize)]
struct Page {
    items: Vec<Object>,
}

fn list_page(c: &mut Criterion) {
    let items: Vec<Value> = pods()
        .into_iter()
        .map(|mut pod| {
            // List items arrive without their types.
            let map = pod.as_object_mut().unwrap();
            map.remove("apiVersion");
            map.remove("kind");
            pod
        })
        .collect();
    let page = serde_json::to_vec(&json!({
        "kind": "PodList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "2000000", "continue": "next"},
        "items": items,
    }))
    .unwrap();
    let api = api();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(PODS as u64));
    group.bench_function("list_page", |b| {
        b.iter(|| {
            let page: Page = serde_json::from_slice(&page).unwrap();
            for item in page.items {
                black_box(ingest(&item, &api, IngestOptions::default()).unwrap());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, watch_line, list_page);
criterion_main!(benches);
