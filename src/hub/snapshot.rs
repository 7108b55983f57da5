//! A snapshot of a hub's cache as it was when taken: what a joiner sends
//! before the log's events, and what a LIST pages through.
//!
//! Taking one under the hub's lock costs O(log n) whatever the cache
//! holds: it is a clone of the cache's copy-on-write tree (or of one
//! indexed value's, or ranges of it: `hub::cache`), not a copy of its
//! objects. Read after, in chunks, under no lock. What it keeps alive
//! while read is the tree as it was: the paths that changed since are
//! the hub's copies, the rest is shared; so a reader of 150,000 pods
//! holds the versions changed while it reads, not a second cache.

use std::ops::Bound;
use std::sync::Arc;

use super::Obj;
use super::ObjKey;
use super::cache::Objects;

/// Objects examined per chunk at most, so that a filter that keeps few of
/// them still hands back control (an empty chunk) now and then.
const EXAMINED_PER_CHUNK: usize = 4096;

/// One part of a snapshot: a tree and the range of keys read from it.
pub(super) struct Segment {
    objects: Objects,
    from: Bound<ObjKey>,
    to: Bound<ObjKey>,
}

impl Segment {
    pub(super) fn all(objects: Objects) -> Segment {
        Segment {
            objects,
            from: Bound::Unbounded,
            to: Bound::Unbounded,
        }
    }

    pub(super) fn range(objects: Objects, from: Bound<ObjKey>, to: Bound<ObjKey>) -> Segment {
        Segment { objects, from, to }
    }

    /// The object of one key, if the tree has it.
    pub(super) fn one(objects: Objects, key: ObjKey) -> Segment {
        Segment {
            objects,
            from: Bound::Included(key.clone()),
            to: Bound::Included(key),
        }
    }
}

/// The objects a joiner or a LIST reads, in key order when its segments
/// are (every snapshot the hub takes is: `Cache::snapshot`).
pub struct Snapshot {
    segments: Vec<Segment>,
    /// The segment being read, and the last key read in it.
    at: usize,
    after: Option<ObjKey>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("segments", &self.segments.len())
            .field("at", &self.at)
            .field("after", &self.after)
            .finish()
    }
}

impl Snapshot {
    pub(super) fn new(segments: Vec<Segment>) -> Snapshot {
        Snapshot {
            segments,
            at: 0,
            after: None,
        }
    }

    /// A snapshot of nothing.
    pub fn empty() -> Snapshot {
        Snapshot::new(Vec::new())
    }

    /// Whether every object has been read.
    pub fn is_done(&self) -> bool {
        self.at >= self.segments.len()
    }

    /// The next objects `keep` accepts: at most `max` of them and about
    /// `max_bytes` of their JSON, after examining at most a few thousand;
    /// empty once [`Snapshot::is_done`], and sometimes before (when few
    /// objects were kept: call again).
    pub fn next_chunk(
        &mut self,
        max: usize,
        max_bytes: usize,
        keep: &dyn Fn(&Obj) -> bool,
    ) -> Vec<Arc<Obj>> {
        let mut chunk = Vec::new();
        let (mut bytes, mut examined) = (0, 0);
        while let Some(segment) = self.segments.get(self.at) {
            let from = match &self.after {
                Some(key) => Bound::Excluded(key),
                None => segment.from.as_ref(),
            };
            for (key, obj) in segment
                .objects
                .range::<_, ObjKey>((from, segment.to.as_ref()))
            {
                examined += 1;
                if keep(obj) {
                    bytes += obj.json_len();
                    chunk.push(obj.clone());
                }
                if chunk.len() >= max || bytes >= max_bytes || examined >= EXAMINED_PER_CHUNK {
                    self.after = Some(key.clone());
                    return chunk;
                }
            }
            self.at += 1;
            self.after = None;
        }
        chunk
    }

    /// Every object `keep` accepts, at once (a LIST's pages are cut from it).
    pub fn collect(mut self, keep: &dyn Fn(&Obj) -> bool) -> Vec<Arc<Obj>> {
        let mut all = Vec::new();
        while !self.is_done() {
            all.extend(self.next_chunk(usize::MAX, usize::MAX, keep));
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imbl::OrdMap;

    fn objects(names: &[&str]) -> Objects {
        names
            .iter()
            .map(|n| {
                let obj = Arc::new(Obj::new(Some("ns"), n, 1, b"{\"x\":1}"));
                (obj.key(), obj)
            })
            .collect::<OrdMap<_, _>>()
    }

    fn names(chunk: &[Arc<Obj>]) -> Vec<&str> {
        chunk.iter().map(|o| o.name()).collect()
    }

    #[test]
    fn chunks_resume_after_the_last_key_read_across_segments() {
        let tree = objects(&["a", "b", "c", "d", "e"]);
        let mut snapshot = Snapshot::new(vec![
            Segment::one(tree.clone(), ObjKey::new(Some("ns"), "b")),
            Segment::range(
                tree.clone(),
                Bound::Included(ObjKey::new(Some("ns"), "c")),
                Bound::Excluded(ObjKey::new(Some("ns"), "e")),
            ),
            Segment::one(tree.clone(), ObjKey::new(Some("ns"), "zz")),
            Segment::all(objects(&["y"])),
        ]);
        let mut got = Vec::new();
        // One object per chunk: each resumes right after the last.
        loop {
            let chunk = snapshot.next_chunk(1, usize::MAX, &|_| true);
            if chunk.is_empty() {
                break;
            }
            got.extend(names(&chunk).into_iter().map(String::from));
        }
        assert!(snapshot.is_done());
        assert_eq!(got, ["b", "c", "d", "y"]);
    }

    #[test]
    fn a_chunk_is_bounded_by_bytes_and_by_what_it_examines() {
        let tree = objects(&["a", "b", "c"]);
        let mut snapshot = Snapshot::new(vec![Segment::all(tree)]);
        // Each object is 7 bytes of JSON: the chunk ends past 10.
        assert_eq!(names(&snapshot.next_chunk(10, 10, &|_| true)), ["a", "b"]);
        assert_eq!(names(&snapshot.next_chunk(10, 10, &|_| true)), ["c"]);
        assert!(snapshot.is_done());

        let many: Vec<String> = (0..EXAMINED_PER_CHUNK + 10)
            .map(|i| format!("p{i:05}"))
            .collect();
        let tree = objects(&many.iter().map(String::as_str).collect::<Vec<_>>());
        let mut snapshot = Snapshot::new(vec![Segment::all(tree)]);
        let last = many.last().unwrap().clone();
        let keep = move |o: &Obj| o.name() == last;
        assert!(snapshot.next_chunk(10, usize::MAX, &keep).is_empty());
        assert!(!snapshot.is_done(), "stopped after examining its share");
        assert_eq!(snapshot.next_chunk(10, usize::MAX, &keep).len(), 1);
        assert!(snapshot.next_chunk(10, usize::MAX, &keep).is_empty());
        assert!(snapshot.is_done());
    }
}
