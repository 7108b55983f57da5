//! A batch writer's frames as a `/ws` subscription sends them: framed
//! once for every stream at a cursor (each message's `{` first, as a
//! single-stream socket's), then written with the subscription's
//! `{"sub":ID,` prefix spliced into each text message, as slices of one
//! `sendmsg` (`write_spliced`) or copied into one buffer (`spliced`, for
//! what waits in the outbox).

use std::io::{self, IoSlice};

use bytes::{BufMut, Bytes, BytesMut};

use crate::transport::takeover::{DirectSocket, Opcode, frame_header};

/// Frames of a direct write per `sendmsg` (three slices each).
const FRAMES_PER_SEND: usize = 64;

/// The whole frames in `frames`: each one's opcode, header length and
/// payload length. Our own framing, so well formed; anything else ends the
/// walk.
fn frames_of(frames: &[u8]) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let (b0, b1) = (*frames.get(at)?, *frames.get(at + 1)? & 0x7f);
        let (head, len) = match b1 {
            126 => (
                4,
                u16::from_be_bytes(frames.get(at + 2..at + 4)?.try_into().ok()?) as usize,
            ),
            127 => (
                10,
                usize::try_from(u64::from_be_bytes(
                    frames.get(at + 2..at + 10)?.try_into().ok()?,
                ))
                .ok()?,
            ),
            n => (2, n as usize),
        };
        let end = at.checked_add(head)?.checked_add(len)?;
        if end > frames.len() {
            return None;
        }
        let frame = (b0 & 0x0f, head, len);
        at = end;
        Some(frame)
    })
}

/// Whether a frame's payload gets the subscription's prefix: a text
/// message, a JSON object (the batch framing's only kind of message).
fn spliced_frame(opcode: u8, payload: &[u8]) -> bool {
    opcode == Opcode::Text as u8 && payload.first() == Some(&b'{')
}

/// `frames` as a `/ws` subscription sends them: each text message's `{`
/// replaced by its `prefix` (`{"sub":ID,`), under a header of the new
/// length; other frames as they are. Written in parts by
/// [`write_spliced`], copied by [`spliced`].
fn for_each_spliced(prefix: &[u8], frames: &[u8], mut each: impl FnMut(&[u8], &[&[u8]])) {
    let mut at = 0;
    for (opcode, head, len) in frames_of(frames) {
        let payload = &frames[at + head..at + head + len];
        if spliced_frame(opcode, payload) {
            let mut header = [0u8; 10];
            let header = frame_header(&mut header, Opcode::Text, len - 1 + prefix.len());
            each(header, &[prefix, &payload[1..]]);
        } else {
            each(&frames[at..at + head], &[payload]);
        }
        at += head + len;
    }
}

/// The length of `frames` spliced with `prefix`.
pub(super) fn spliced_len(prefix: &[u8], frames: &[u8]) -> usize {
    let mut len = 0;
    for_each_spliced(prefix, frames, |header, parts| {
        len += header.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    });
    len
}

/// `frames` spliced with `prefix`, copied into one buffer.
pub(super) fn spliced(prefix: &[u8], frames: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(spliced_len(prefix, frames));
    for_each_spliced(prefix, frames, |header, parts| {
        out.put_slice(header);
        parts.iter().for_each(|p| out.put_slice(p));
    });
    out.freeze()
}

/// How many bytes `frames` spliced with `prefix` count as sent: their
/// messages', without headers.
pub(super) fn spliced_payloads(prefix: &[u8], frames: &[u8]) -> u64 {
    let mut len = 0;
    for_each_spliced(prefix, frames, |_, parts| {
        len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
    });
    len
}

/// A group of frames for one `sendmsg`: each one's header (in
/// `headers`, this long) and its payload in two parts.
type Group<'a> = Vec<(usize, &'a [u8], &'a [u8])>;

/// What [`write_spliced`] wrote.
pub(super) enum Written {
    All,
    /// This many bytes, then the socket took no more.
    Part(usize),
}

/// Writes `frames` spliced with `prefix` in parts, without a copy, a few
/// dozen frames per `sendmsg`, stopping at the first short write.
/// `WouldBlock` is nothing written.
pub(super) fn write_spliced(
    socket: &DirectSocket,
    prefix: &[u8],
    frames: &[u8],
) -> io::Result<Written> {
    let mut went = 0;
    let mut headers = [[0u8; 10]; FRAMES_PER_SEND];
    let mut group: Group<'_> = Vec::with_capacity(FRAMES_PER_SEND);
    let mut at = 0;
    for (opcode, head, len) in frames_of(frames) {
        let payload = &frames[at + head..at + head + len];
        let i = group.len();
        if spliced_frame(opcode, payload) {
            let header_len =
                frame_header(&mut headers[i], Opcode::Text, len - 1 + prefix.len()).len();
            group.push((header_len, prefix, &payload[1..]));
        } else {
            headers[i][..head].copy_from_slice(&frames[at..at + head]);
            group.push((head, &[], payload));
        }
        at += head + len;
        if group.len() == FRAMES_PER_SEND {
            let (sent, all) = send_group(socket, &headers, &mut group)?;
            went += sent;
            if sent < all {
                return Ok(Written::Part(went));
            }
        }
    }
    if !group.is_empty() {
        let (sent, all) = send_group(socket, &headers, &mut group)?;
        if sent < all {
            return Ok(Written::Part(went + sent));
        }
    }
    Ok(Written::All)
}

/// One `sendmsg` of `group` (emptied): how many bytes went, of how many.
fn send_group(
    socket: &DirectSocket,
    headers: &[[u8; 10]; FRAMES_PER_SEND],
    group: &mut Group<'_>,
) -> io::Result<(usize, usize)> {
    let mut slices = [IoSlice::new(&[]); 3 * FRAMES_PER_SEND];
    let (mut n, mut all) = (0, 0);
    for (i, (head, start, rest)) in group.drain(..).enumerate() {
        for part in [&headers[i][..head], start, rest] {
            slices[n] = IoSlice::new(part);
            n += 1;
            all += part.len();
        }
    }
    match socket.send_now(&slices[..n]) {
        Ok(sent) => Ok((sent, all)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok((0, all)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::stream::Framing;
    use crate::transport::ws::message::WsFraming;
    use crate::transport::ws::message::{Id, Outgoing, message, sub_prefix};

    #[test]
    fn a_batch_writers_frames_spliced_are_the_messages_a_subscription_sends() {
        let big = format!(
            r#"{{"type":"ADDED","object":{{"a":"{}"}}}}"#,
            "x".repeat(70_000)
        );
        let msgs = vec![
            Outgoing::event(
                Bytes::from_static(br#"{"type":"ADDED","object":{}}"#),
                Id::Rv(7),
            ),
            Outgoing::event(Bytes::from(big.clone()), Id::Rv(8)),
            Outgoing::event(
                Bytes::from(format!(
                    r#"{{"type":"MODIFIED","object":{{"b":"{}"}}}}"#,
                    "y".repeat(200)
                )),
                Id::Tagged(9, *b"0a1b2c3d"),
            ),
        ];
        let (frames, _) = WsFraming::batched(msgs.clone()).unwrap();
        // And a ping, as a single stream's tick adds (never spliced).
        let mut with_ping = BytesMut::from(&frames[..]);
        with_ping.put_slice(&[0x89, 0x00]);
        let frames = with_ping.freeze();
        let prefix = sub_prefix("pods-1");
        let mut expected = BytesMut::new();
        let mut payloads = 0;
        for msg in &msgs {
            let text = message(Some(&prefix), msg);
            let mut header = [0u8; 10];
            expected.put_slice(frame_header(&mut header, Opcode::Text, text.len()));
            expected.put_slice(text.as_bytes());
            payloads += text.len() as u64;
        }
        expected.put_slice(&[0x89, 0x00]);
        assert_eq!(spliced(&prefix, &frames), expected.freeze());
        assert_eq!(
            spliced_len(&prefix, &frames),
            spliced(&prefix, &frames).len()
        );
        assert_eq!(spliced_payloads(&prefix, &frames), payloads);
    }

    #[test]
    fn a_truncated_frame_ends_the_walk_instead_of_reading_past_it() {
        let frames = [0x81, 126, 0x01];
        assert_eq!(frames_of(&frames).count(), 0);
        let frames = [0x81, 5, b'{', b'}'];
        assert_eq!(frames_of(&frames).count(), 0);
        assert_eq!(spliced(b"{\"sub\":1,", &frames).len(), 0);
    }
}
