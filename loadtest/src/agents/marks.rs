//! The marker changes one agent is to get, and how late each came.
//!
//! Change SEQ patches the marker pod of node SEQ mod M (M markers, one per
//! watched node), so agent k (node `node-k`) is to get the changes SEQ ≡ k
//! (mod M), and an all-pods viewer every change. Only those slots are
//! kept: at 5,000 agents, a slot per change per agent would be most of
//! the generator's memory.

use crate::subscriber::{now_nanos, parse_sent};

/// One agent's marker changes: slot `s` is change `offset + s * stride`.
#[derive(Debug, Clone)]
pub struct Marks {
    stride: usize,
    offset: usize,
    /// µs to when the generator read it (`u32::MAX`: not seen).
    pub latency_us: Vec<u32>,
    /// µs to when its bytes reached the socket.
    pub arrival_us: Vec<u32>,
    pub duplicates: u64,
    /// Marks of changes not the agent's (another node's marker).
    pub foreign: u64,
}

impl Marks {
    /// The changes `offset`, `offset + stride`, ... below `changes`.
    pub fn new(changes: usize, stride: usize, offset: usize) -> Marks {
        let stride = stride.max(1);
        let slots = changes.saturating_sub(offset).div_ceil(stride);
        Marks {
            stride,
            offset,
            latency_us: vec![u32::MAX; slots],
            arrival_us: vec![u32::MAX; slots],
            duplicates: 0,
            foreign: 0,
        }
    }

    /// The change a slot stands for.
    pub fn seq(&self, slot: usize) -> usize {
        self.offset + slot * self.stride
    }

    pub fn expected(&self) -> u64 {
        self.latency_us.len() as u64
    }

    #[cfg(test)]
    pub fn delivered(&self) -> u64 {
        self.latency_us.iter().filter(|l| **l != u32::MAX).count() as u64
    }

    /// Records the mark in `payload`, if there is one, which arrived at
    /// `arrived` (ns since the epoch).
    pub fn record(&mut self, payload: &[u8], arrived: Option<u64>) {
        let Some((seq, sent)) = parse_sent(payload) else {
            return;
        };
        let seq = seq as usize;
        if seq < self.offset || !(seq - self.offset).is_multiple_of(self.stride) {
            self.foreign += 1;
            return;
        }
        let slot = (seq - self.offset) / self.stride;
        let Some(latency) = self.latency_us.get_mut(slot) else {
            // A mark of another run (a marker left from before).
            return;
        };
        if *latency != u32::MAX {
            self.duplicates += 1;
            return;
        }
        let now = now_nanos();
        let us = |at: u64| (at.saturating_sub(sent) / 1000).min(u32::MAX as u64 - 1) as u32;
        *latency = us(now);
        self.arrival_us[slot] = us(arrived.unwrap_or(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_keeps_only_its_nodes_changes() {
        // 10 changes over 4 markers; agent 1 gets changes 1, 5 and 9.
        let mut marks = Marks::new(10, 4, 1);
        assert_eq!(marks.expected(), 3);
        assert_eq!((0..3).map(|s| marks.seq(s)).collect::<Vec<_>>(), [1, 5, 9]);
        let now = now_nanos();
        let mark = |seq: usize| format!(r#"{{"loadtest/sent":"{seq}:{now}"}}"#);
        marks.record(mark(5).as_bytes(), None);
        marks.record(mark(5).as_bytes(), None);
        marks.record(mark(2).as_bytes(), None);
        marks.record(mark(13).as_bytes(), None);
        marks.record(b"no mark", None);
        assert_eq!(
            (marks.delivered(), marks.duplicates, marks.foreign),
            (1, 1, 1)
        );
        assert_ne!(marks.latency_us[1], u32::MAX);
        // A viewer gets every change; fewer changes than markers leave
        // some agents none.
        assert_eq!(Marks::new(10, 1, 0).expected(), 10);
        assert_eq!(Marks::new(3, 5, 4).expected(), 0);
        assert_eq!(Marks::new(0, 0, 0).expected(), 0);
    }
}
