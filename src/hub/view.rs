//! Views: what one kind of subscription sees of a hub, encoded once.
//!
//! A view is a filter, a projection and a delta mode. Every subscription
//! with the same view on the same hub shares one [`View`], and the view
//! caches its encodings of events (by log `seq`) and of snapshot objects
//! (by key and resourceVersion): a thousand identical dashboards cost one
//! projection, one diff and one serialisation per event, and one per
//! object for their snapshots. The encodings serve every wire format (SSE,
//! WebSocket, NDJSON are slices of one buffer, or written around one
//! object), so the format is not part of the key.
//!
//! A view of full objects whose filter is decided without their JSON
//! (namespaces, labels, the resource's selectable fields) needs no work and
//! keeps no cache: it hands out the hub's own encodings, retyped where a
//! change enters or leaves the filter (`Filter::deliver`). Caching those
//! cost more than making them: with 1,000 such views, the cache's lookups
//! were half of the views' CPU and its entries most of their memory
//! (`loadtest/RESULTS.md`, 2026-11-27).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;

use super::projection::{Projection, merge_diff};
use super::transition::{Transition, restamp, transition};
use super::{Delivery, Event, EventType, Filter, Frame, Obj, ObjKey, Pin};
use crate::table::{Clock, MetaVersion, TableView, partial_object};

/// Event encodings a view keeps (subscribers of a view read within a few
/// batches of each other; one further behind recomputes).
const EVENT_CACHE: usize = 4096;

/// How MODIFIED events carry the object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Delta {
    /// The whole (projected) object.
    #[default]
    Full,
    /// An RFC 7386 merge patch against the previous version sent.
    MergePatch,
}

/// How a view encodes each object it shows: as itself, or converted as
/// kube-apiserver converts for the Kubernetes face's `Accept:
/// ...;as=Table` and `as=PartialObjectMetadata` (`crate::table`). A
/// converted shape is encoded once per object version and view like any
/// other frame; it is not combined with a projection or merge patches
/// (the Kubernetes face has neither).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Shape {
    #[default]
    Object,
    /// Each object as a one-row `Table` without column definitions (the
    /// stream's first event adds them).
    Table(TableView),
    /// Each object as `PartialObjectMetadata`.
    PartialMetadata(MetaVersion),
}

/// What a subscription asks to see. A hub keys its views by the
/// [`ViewSpec::normalized`] spec: specs equal after normalising share one
/// view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ViewSpec {
    pub filter: Filter,
    pub projection: Option<Projection>,
    pub delta: Delta,
    pub shape: Shape,
}

impl ViewSpec {
    pub fn new(filter: Filter) -> ViewSpec {
        ViewSpec {
            filter,
            ..ViewSpec::default()
        }
    }

    /// The same spec in one canonical form, which identifies the view:
    /// what can be written in any order (namespaces, selector
    /// requirements, set values; a projection's paths already are) is
    /// sorted and without repeats, so specs that differ only in spelling
    /// are equal.
    pub fn normalized(self) -> ViewSpec {
        ViewSpec {
            filter: self.filter.normalized(),
            ..self
        }
    }
}

pub struct View {
    spec: ViewSpec,
    /// The resource's selectable fields (read from objects, not JSON).
    precomputed: &'static [&'static str],
    needs_json: bool,
    /// Full objects, a filter decided without their JSON: the hub's frames
    /// as they are, retyped by the filter; no cache.
    passthrough: bool,
    /// What every object it shows has (`hub::pin`): its hub's writers
    /// dispatch events to its streams by it.
    pin: Option<Pin>,
    cache: Mutex<Cache>,
    encodings: Counter,
    live_views: Gauge,
}

#[derive(Default)]
struct Cache {
    events: BTreeMap<u64, Option<Delivery>>,
    /// key → (resourceVersion, the object as shown if it matches).
    objects: HashMap<ObjKey, (u64, Option<Bytes>)>,
}

impl View {
    pub(super) fn new(
        spec: ViewSpec,
        precomputed: &'static [&'static str],
        encodings: Counter,
        live_views: Gauge,
    ) -> View {
        let needs_json = spec.projection.is_some()
            || spec.delta == Delta::MergePatch
            || spec.shape != Shape::Object
            || spec.filter.needs_json(precomputed);
        let passthrough = !spec.filter.needs_json(precomputed)
            && spec.projection.is_none()
            && spec.delta == Delta::Full
            && spec.shape == Shape::Object;
        live_views.inc();
        View {
            pin: spec.filter.pin(precomputed),
            spec,
            precomputed,
            needs_json,
            passthrough,
            cache: Mutex::new(Cache::default()),
            encodings,
            live_views,
        }
    }

    pub fn spec(&self) -> &ViewSpec {
        &self.spec
    }

    /// The value one field has on every object this view shows, if its
    /// filter pins one: an event whose old and new versions both lack it
    /// reaches none of its subscribers.
    pub fn pin(&self) -> Option<&Pin> {
        self.pin.as_ref()
    }

    /// The part of the filter decidable cheaply, used under the hub's lock
    /// when taking a snapshot; [`View::snapshot`] finishes the job.
    pub fn prefilter(&self, obj: &Obj) -> bool {
        self.spec.filter.matches_labels(obj)
    }

    /// The objects this view shows of `objects`, as it shows them: a
    /// snapshot (each is sent as an id-less ADDED).
    pub fn snapshot(&self, objects: &[Arc<Obj>]) -> Vec<Bytes> {
        if self.passthrough {
            return objects
                .iter()
                .filter(|o| self.spec.filter.matches(o))
                .map(|o| o.json())
                .collect();
        }
        let mut cache = self.lock();
        if cache.objects.len() > 2 * objects.len().max(EVENT_CACHE) {
            // Entries of deleted objects accumulate; start over.
            cache.objects.clear();
        }
        let mut out = Vec::with_capacity(objects.len());
        for obj in objects {
            let key = obj.key();
            let rv = obj.resource_version();
            // A table row holds the object's age: printed now, not kept.
            let keep = !matches!(self.spec.shape, Shape::Table(_));
            let shown = match cache.objects.get(&key) {
                Some((cached_rv, shown)) if *cached_rv == rv && keep => shown.clone(),
                _ => {
                    let shown = self.encode_object(obj);
                    if keep {
                        cache.objects.insert(key, (rv, shown.clone()));
                    }
                    shown
                }
            };
            out.extend(shown);
        }
        out
    }

    fn encode_object(&self, obj: &Obj) -> Option<Bytes> {
        let json = self.parse(obj);
        if !self
            .spec
            .filter
            .matches_full(obj, json.as_ref(), self.precomputed)
        {
            return None;
        }
        if self.spec.projection.is_none() && self.spec.shape == Shape::Object {
            // Shown whole: the hub's own encoding, shared.
            return Some(obj.json());
        }
        self.encodings.inc();
        let shown = self.shown(obj, json.as_ref());
        let mut shaped = self.shaped(json.as_ref(), shown);
        shaped.shrink_to_fit();
        Some(Bytes::from(shaped))
    }

    /// `shown` (the object as this view shows it, `json` parsed) in the
    /// view's [`Shape`].
    fn shaped(&self, json: Option<&Value>, shown: Vec<u8>) -> Vec<u8> {
        match (&self.spec.shape, json) {
            (Shape::Object, _) | (_, None) => shown,
            (Shape::Table(table), Some(json)) => {
                let row = table.row(json, &shown, &Clock::new(std::time::SystemTime::now()));
                table.single(&row, false).to_vec()
            }
            (Shape::PartialMetadata(version), Some(json)) => {
                partial_object(*version, json).to_vec()
            }
        }
    }

    /// What this view's subscribers receive for `events` (in order).
    pub fn deliver(&self, events: Vec<Arc<Event>>) -> Vec<Delivery> {
        if self.passthrough {
            return events
                .iter()
                .filter_map(|ev| {
                    let delivery = self.spec.filter.deliver(ev)?;
                    if matches!(delivery, Delivery::Retyped { .. }) {
                        self.encodings.inc();
                    }
                    Some(delivery)
                })
                .collect();
        }
        let mut cache = self.lock();
        let mut out = Vec::with_capacity(events.len());
        for ev in &events {
            let delivery = match cache.events.get(&ev.seq) {
                Some(d) => d.clone(),
                None => {
                    let d = self.encode_event(ev);
                    cache.events.insert(ev.seq, d.clone());
                    while cache.events.len() > EVENT_CACHE {
                        cache.events.pop_first();
                    }
                    d
                }
            };
            out.extend(delivery);
        }
        out
    }

    fn encode_event(&self, ev: &Arc<Event>) -> Option<Delivery> {
        let filter = &self.spec.filter;
        // Namespaces and labels rule most events out without parsing JSON.
        if !filter.matches_labels(&ev.obj)
            && !ev.prev.as_deref().is_some_and(|p| filter.matches_labels(p))
        {
            return None;
        }
        let cur_json = self.parse(&ev.obj);
        let now = filter.matches_full(&ev.obj, cur_json.as_ref(), self.precomputed);
        let prev_json = ev.prev.as_deref().and_then(|p| self.parse(p));
        let before = ev
            .prev
            .as_deref()
            .is_some_and(|p| filter.matches_full(p, prev_json.as_ref(), self.precomputed));
        let whole = self.spec.projection.is_none()
            && self.spec.delta == Delta::Full
            && self.spec.shape == Shape::Object;
        let (kind, object, patch) = match transition(ev.kind, before, now)? {
            // Shown as the hub encoded it.
            Transition::AsIs if whole => return Some(Delivery::Shared(ev.clone())),
            Transition::AsIs if ev.kind == EventType::Modified => {
                let prev = ev.prev.as_deref()?;
                let (old, new) = (
                    self.shown_value(prev, prev_json.as_ref()),
                    self.shown_value(&ev.obj, cur_json.as_ref()),
                );
                let mut old_without_rv = old.clone();
                let mut new_without_rv = new.clone();
                for v in [&mut old_without_rv, &mut new_without_rv] {
                    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("resourceVersion");
                    }
                }
                if self.spec.projection.is_some() && old_without_rv == new_without_rv {
                    // Nothing this view shows changed: not sent (the
                    // subscription's position still advances).
                    return None;
                }
                match self.spec.delta {
                    Delta::MergePatch => {
                        (EventType::Modified, to_vec(&merge_diff(&old, &new)?), true)
                    }
                    Delta::Full => (
                        EventType::Modified,
                        self.shaped(Some(&new), to_vec(&new)),
                        false,
                    ),
                }
            }
            Transition::AsIs => (
                ev.kind,
                self.shaped(cur_json.as_ref(), self.shown(&ev.obj, cur_json.as_ref())),
                false,
            ),
            Transition::Added => (
                EventType::Added,
                self.shaped(cur_json.as_ref(), self.shown(&ev.obj, cur_json.as_ref())),
                false,
            ),
            Transition::Deleted => {
                let prev = ev.prev.as_deref()?;
                let mut shown = self.shown_value(prev, prev_json.as_ref());
                restamp(&mut shown, ev.rv);
                (
                    EventType::Deleted,
                    self.shaped(Some(&shown), to_vec(&shown)),
                    false,
                )
            }
        };
        self.encodings.inc();
        let kind_name = kind.as_str();
        let id = ev.has_id.then_some(ev.rv);
        let frame = if patch {
            Frame::encode_with(kind_name, kind_name, id, &object, br#","patch":"merge""#)
        } else {
            Frame::encode(kind_name, kind_name, id, &object)
        };
        Some(Delivery::Retyped {
            kind,
            rv: ev.rv,
            has_id: ev.has_id,
            frame,
        })
    }

    fn parse(&self, obj: &Obj) -> Option<Value> {
        // The hub only holds JSON it encoded itself; a failure means no
        // JSON-based matching or projection for that object.
        self.needs_json
            .then(|| serde_json::from_slice(&obj.json()).ok())
            .flatten()
    }

    /// The object as this view shows it, encoded.
    fn shown(&self, obj: &Obj, json: Option<&Value>) -> Vec<u8> {
        match (&self.spec.projection, json) {
            (Some(p), Some(json)) => to_vec(&p.apply(json)),
            _ => obj.json().to_vec(),
        }
    }

    fn shown_value(&self, obj: &Obj, json: Option<&Value>) -> Value {
        match (&self.spec.projection, json) {
            (Some(p), Some(json)) => p.apply(json),
            (None, Some(json)) => json.clone(),
            _ => serde_json::from_slice(&obj.json()).unwrap_or(Value::Null),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.live_views.dec();
    }
}

fn to_vec(v: &Value) -> Vec<u8> {
    // Serialising a Value cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}
