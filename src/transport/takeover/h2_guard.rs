//! An HTTP/2 connection's frames that do nothing, rationed.
//!
//! h2 bounds what costs it memory (concurrent streams, header lists,
//! CONTINUATION, streams reset before they are accepted), but not frames
//! that cost only the time to parse them: empty DATA frames (the
//! CVE-2019-9518 class), WINDOW_UPDATE, PRIORITY, RST_STREAM on streams
//! long gone, PING and SETTINGS. One client can send millions a second
//! and hold a worker thread. [`Guarded`] sits between the TLS stream and
//! h2, reads the 9-byte header of every frame that passes either way
//! (payloads are skipped, never copied), and charges each inbound frame
//! that the connection's own traffic has not earned to its [`Ration`];
//! once that is spent the connection is cut: GOAWAY `ENHANCE_YOUR_CALM`
//! (`h2::serve`), counted in `kubefan_limits_hit_total{kind="idle_frames"}`.
//!
//! What traffic earns follows Envoy's defaults for the same attacks
//! (`max_inbound_priority_frames_per_stream` 100,
//! `max_inbound_window_update_frames_per_data_frame_sent` 10, with its
//! formula): PRIORITY up to 100 per stream opened and 100 more;
//! WINDOW_UPDATE up to 5 + 2 × (streams opened + 10 × DATA frames sent);
//! RST_STREAM up to one per stream opened; a PING or SETTINGS
//! acknowledgement per one kubefan sent; the client's first SETTINGS and
//! its first GOAWAY (h2 takes any number that do not raise the last stream
//! id, each walking the connection's streams under their lock, and keeps
//! a connection with an open stream going after one: a GOAWAY says only
//! that the client opens no more). HEADERS and CONTINUATION are h2's to
//! bound. kubefan reads no
//! request body (`h2::serve_request`), so a DATA frame earns nothing
//! unless it ends its stream: a client sending a body spends a frame of
//! its ration per frame but the last.

use std::cell::{Cell, RefCell};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::ration::Ration;

/// The client connection preface (RFC 9113, section 3.4), before its
/// first frame.
const PREFACE: usize = 24;
/// A frame header's length (RFC 9113, section 4.1).
const HEADER: usize = 9;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
/// END_STREAM on DATA, ACK on SETTINGS and PING.
const END_STREAM_OR_ACK: u8 = 0x1;

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    len: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl Head {
    fn parse(b: &[u8; HEADER]) -> Head {
        Head {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7FFF_FFFF,
        }
    }
}

/// Finds the frame headers in one direction's bytes, however they are
/// split between reads.
#[derive(Debug, Default)]
struct Scanner {
    /// Preface bytes still to pass.
    preface: usize,
    header: [u8; HEADER],
    /// Bytes of `header` filled.
    have: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
}

impl Scanner {
    fn after_preface() -> Scanner {
        Scanner {
            preface: PREFACE,
            ..Scanner::default()
        }
    }

    /// Calls `on_frame` with each frame header `bytes` completes.
    fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(Head)) {
        while !bytes.is_empty() {
            let n = if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                n
            } else if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                n
            } else {
                let n = (HEADER - self.have).min(bytes.len());
                self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                if self.have == HEADER {
                    self.have = 0;
                    let head = Head::parse(&self.header);
                    self.skip = head.len;
                    on_frame(head);
                }
                n
            };
            bytes = &bytes[n..];
        }
    }
}

/// What a connection's traffic has earned, and spent.
#[derive(Debug, Default)]
struct Tally {
    streams_opened: u64,
    /// The highest stream id the client opened.
    last_stream: u32,
    data_sent: u64,
    pings_sent: u64,
    settings_sent: u64,
    priorities: u64,
    window_updates: u64,
    resets: u64,
    ping_acks: u64,
    settings_acks: u64,
    settings: u64,
    goaways: u64,
}

impl Tally {
    /// Counts a frame kubefan sent.
    fn sent(&mut self, head: Head) {
        let ack = head.flags & END_STREAM_OR_ACK != 0;
        match head.kind {
            DATA => self.data_sent += 1,
            PING if !ack => self.pings_sent += 1,
            SETTINGS if !ack => self.settings_sent += 1,
            _ => {}
        }
    }

    /// Counts a frame the client sent; false if its traffic has not
    /// earned it (it is then the ration's to pay, and not counted here).
    fn received(&mut self, head: Head) -> bool {
        let ack = head.flags & END_STREAM_OR_ACK != 0;
        match head.kind {
            HEADERS => {
                if head.stream > self.last_stream {
                    self.last_stream = head.stream;
                    self.streams_opened += 1;
                }
                true
            }
            DATA => ack,
            PRIORITY => earn(&mut self.priorities, 100 * (1 + self.streams_opened)),
            RST_STREAM => earn(&mut self.resets, self.streams_opened),
            SETTINGS if ack => earn(&mut self.settings_acks, self.settings_sent),
            SETTINGS => earn(&mut self.settings, 1),
            PING if ack => earn(&mut self.ping_acks, self.pings_sent),
            WINDOW_UPDATE => earn(
                &mut self.window_updates,
                5 + 2 * (self.streams_opened + 10 * self.data_sent),
            ),
            GOAWAY => earn(&mut self.goaways, 1),
            // h2 ends the connection at a client's PUSH_PROMISE.
            CONTINUATION | PUSH_PROMISE => true,
            // A PING to answer, or a frame type no one here knows.
            _ => false,
        }
    }
}

/// Counts one more against `allowance`, if it is not used up.
fn earn(count: &mut u64, allowance: u64) -> bool {
    if *count < allowance {
        *count += 1;
        true
    } else {
        false
    }
}

/// A connection's I/O with its frames counted (see the module
/// documentation).
pub struct Guarded<T> {
    /// Shared with the connection's task, which takes it back from h2 to
    /// linger on it once h2 is done (`io::LINGER`).
    io: Rc<RefCell<Option<T>>>,
    inbound: Scanner,
    outbound: Scanner,
    tally: Tally,
    ration: Ration,
    cut: Cut,
}

/// Set once a connection spent its ration; its task then sends GOAWAY
/// and ends it.
#[derive(Debug, Clone, Default)]
pub struct Cut(Rc<Cell<bool>>);

impl Cut {
    pub fn is_cut(&self) -> bool {
        self.0.get()
    }
}

impl<T: Unpin> Guarded<T> {
    /// `io`, with `per_minute` frames that do nothing allowed at once and
    /// every minute.
    pub fn new(io: T, per_minute: u32) -> Guarded<T> {
        Guarded {
            io: Rc::new(RefCell::new(Some(io))),
            inbound: Scanner::after_preface(),
            outbound: Scanner::default(),
            tally: Tally::default(),
            ration: Ration::per_minute(per_minute),
            cut: Cut::default(),
        }
    }

    /// Set once the client has spent its ration.
    pub fn cut(&self) -> Cut {
        self.cut.clone()
    }

    /// A handle to take the I/O back with once h2 is done with it.
    pub fn handle(&self) -> IoHandle<T> {
        IoHandle(self.io.clone())
    }

    /// Calls `op` on the I/O, unless it was taken back.
    fn with_io<R>(
        &self,
        op: impl FnOnce(Pin<&mut T>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match self.io.borrow_mut().as_mut() {
            Some(io) => op(Pin::new(io)),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

/// The I/O under a [`Guarded`], to take back from h2.
pub struct IoHandle<T>(Rc<RefCell<Option<T>>>);

impl<T> IoHandle<T> {
    /// The I/O; h2 gets `NotConnected` from then on.
    pub fn take(&self) -> Option<T> {
        self.0.borrow_mut().take()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.cut.is_cut() {
            // Nothing more is read. The task is woken to see the cut
            // (its `h2::serve` loop), which stops h2 reading at all.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let before = buf.filled().len();
        ready!(this.with_io(|io| io.poll_read(cx, buf)))?;
        let (tally, ration) = (&mut this.tally, &mut this.ration);
        let mut now = None;
        let mut spent = false;
        this.inbound.feed(&buf.filled()[before..], |head| {
            if !tally.received(head) && !ration.spend(*now.get_or_insert_with(Instant::now)) {
                spent = true;
            }
        });
        if spent {
            this.cut.0.set(true);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(this.with_io(|io| io.poll_write(cx, buf)))?;
        let tally = &mut this.tally;
        this.outbound.feed(&buf[..n], |head| tally.sent(head));
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(this.with_io(|io| io.poll_write_vectored(cx, bufs)))?;
        let (tally, mut left) = (&mut this.tally, n);
        for buf in bufs {
            let take = left.min(buf.len());
            this.outbound.feed(&buf[..take], |head| tally.sent(head));
            left -= take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io
            .borrow()
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with_io(|io| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with_io(|io| io.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = len.to_be_bytes()[1..].to_vec();
        out.extend([kind, flags]);
        out.extend(stream.to_be_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn frame_headers_are_found_however_the_bytes_are_split() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[0; 12]));
        bytes.extend(frame(HEADERS, 0x5, 1, &[0x82; 20]));
        bytes.extend(frame(DATA, 0, 1, &[]));
        bytes.extend(frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
        let expected = [
            (SETTINGS, 12, 0),
            (HEADERS, 20, 1),
            (DATA, 0, 1),
            (WINDOW_UPDATE, 4, 0),
        ];
        for split in [1, 2, 5, 9, 10, 33, bytes.len()] {
            let mut scanner = Scanner::after_preface();
            let mut seen = Vec::new();
            for chunk in bytes.chunks(split) {
                scanner.feed(chunk, |h| seen.push((h.kind, h.len, h.stream)));
            }
            assert_eq!(seen, expected, "in chunks of {split}");
        }
    }

    fn head(kind: u8, flags: u8, stream: u32) -> Head {
        Head {
            len: 0,
            kind,
            flags,
            stream,
        }
    }

    #[test]
    fn traffic_earns_what_envoy_allows_and_no_more() {
        let mut tally = Tally::default();
        assert!(
            tally.received(head(SETTINGS, 0, 0)),
            "the client's first SETTINGS"
        );
        assert!(
            !tally.received(head(SETTINGS, 0, 0)),
            "a second one is not earned"
        );
        assert!(
            !tally.received(head(SETTINGS, 1, 0)),
            "an ACK of nothing sent"
        );
        tally.sent(head(SETTINGS, 0, 0));
        assert!(tally.received(head(SETTINGS, 1, 0)));
        // Empty DATA that does not end its stream earns nothing.
        assert!(!tally.received(head(DATA, 0, 1)));
        assert!(tally.received(head(DATA, END_STREAM_OR_ACK, 1)));
        // PINGs: only answers to kubefan's.
        assert!(!tally.received(head(PING, 0, 0)));
        assert!(!tally.received(head(PING, 1, 0)));
        tally.sent(head(PING, 0, 0));
        assert!(tally.received(head(PING, 1, 0)));
        // One stream: one reset, 200 PRIORITY, 7 WINDOW_UPDATE; a DATA
        // frame sent earns 20 more WINDOW_UPDATE.
        assert!(tally.received(head(HEADERS, 0, 1)));
        assert!(tally.received(head(HEADERS, 0, 1)), "trailers open nothing");
        assert!(tally.received(head(RST_STREAM, 0, 1)));
        assert!(!tally.received(head(RST_STREAM, 0, 1)));
        assert_eq!(
            (0..300)
                .filter(|_| tally.received(head(PRIORITY, 0, 3)))
                .count(),
            200
        );
        assert_eq!(
            (0..30)
                .filter(|_| tally.received(head(WINDOW_UPDATE, 0, 0)))
                .count(),
            7
        );
        tally.sent(head(DATA, 0, 1));
        assert_eq!(
            (0..30)
                .filter(|_| tally.received(head(WINDOW_UPDATE, 0, 0)))
                .count(),
            20
        );
        assert!(!tally.received(head(0xEE, 0, 0)), "an unknown type");
        assert!(tally.received(head(GOAWAY, 0, 0)), "the client's GOAWAY");
        assert!(
            !tally.received(head(GOAWAY, 0, 0)),
            "a second one is not earned"
        );
    }

    #[tokio::test]
    async fn a_flood_of_empty_data_frames_spends_the_ration_and_cuts_the_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(1 << 20);
        let mut guarded = Guarded::new(server, 10);
        let cut = guarded.cut();
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        flood.extend(frame(SETTINGS, 0, 0, &[]));
        flood.extend(frame(
            HEADERS,
            0x4,
            1,
            &[0x82, 0x84, 0x86, 0x41, 0x01, b'x'],
        ));
        for _ in 0..10 {
            flood.extend(frame(DATA, 0, 1, &[]));
        }
        client_write.write_all(&flood).await.unwrap();
        let mut got = vec![0u8; flood.len()];
        guarded.read_exact(&mut got).await.unwrap();
        assert!(!cut.is_cut(), "ten empty frames are within a ration of ten");
        client_write
            .write_all(&frame(DATA, 0, 1, &[]))
            .await
            .unwrap();
        let mut one = [0u8; HEADER];
        guarded.read_exact(&mut one).await.unwrap();
        assert!(cut.is_cut(), "the eleventh spends it");
        // Nothing more is read from a cut connection.
        client_write
            .write_all(&frame(DATA, 0, 1, &[]))
            .await
            .unwrap();
        let more = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            guarded.read_exact(&mut one),
        )
        .await;
        assert!(more.is_err(), "no read after the cut");
        // Writes still go (the GOAWAY).
        guarded
            .write_all(&frame(GOAWAY, 0, 0, &[0; 8]))
            .await
            .unwrap();
        let mut goaway = [0u8; HEADER + 8];
        client_read.read_exact(&mut goaway).await.unwrap();
        assert_eq!(goaway[3], GOAWAY);
    }
}
