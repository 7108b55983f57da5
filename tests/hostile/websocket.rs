//! WebSocket attacks, on `/ws` and on a single-stream socket: frames
//! declaring more than anyone may send, floods of frames that do nothing,
//! pings whose pongs are never read.

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};

use crate::harness::{ATTACK_FOR, Conn, Gateway, Scheme, WAIT, again_and_again, withstands};

const PATHS: [&str; 2] = ["/ws", "/stream/pods"];

/// A WebSocket opened by hand on `path`: the connection, and what
/// followed the `101` in its first read.
async fn open(gw: &Gateway, path: &str) -> (Conn, Vec<u8>) {
    let mut conn = gw.connect(false).await;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = tokio::time::timeout(WAIT, conn.read(&mut chunk))
            .await
            .expect("handshake answered")
            .unwrap();
        assert!(n > 0, "closed during the handshake");
        buf.extend_from_slice(&chunk[..n]);
    };
    assert!(buf.starts_with(b"HTTP/1.1 101"), "{path}");
    buf.drain(..end + 4);
    (conn, buf)
}

/// A masked client frame whose header declares `len` bytes of payload
/// (whatever `payload` holds).
fn frame(first: u8, len: u64, payload: &[u8]) -> Vec<u8> {
    let mask = [0x5a, 0xa5, 0x3c, 0xc3];
    let mut out = vec![first];
    match len {
        0..=125 => out.push(0x80 | len as u8),
        126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend((len as u16).to_be_bytes());
        }
        _ => {
            out.push(0x80 | 127);
            out.extend(len.to_be_bytes());
        }
    }
    out.extend(mask);
    out.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    out
}

/// Reads the server's frames (after `buf`) until its Close: the code in
/// it. `None` if the connection ends without one.
async fn close_code(read: &mut ReadHalf<Conn>, mut buf: Vec<u8>) -> Option<u16> {
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        // A whole frame at the front of `buf`?
        if buf.len() >= 2 {
            let (len, at) = match buf[1] & 0x7F {
                126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
                127 if buf.len() >= 10 => (
                    u64::from_be_bytes(buf[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                126 | 127 => (usize::MAX, 0),
                n => (n as usize, 2),
            };
            if len != usize::MAX && buf.len() >= at + len {
                if buf[0] & 0x0F == 0x8 {
                    return (len >= 2).then(|| u16::from_be_bytes([buf[at], buf[at + 1]]));
                }
                buf.drain(..at + len);
                continue;
            }
        }
        match read.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One attacking connection on `path`: `opening` once, then `flood`
/// again and again (reading what comes back only if `reads`) until the
/// gateway closes the connection; the Close code it sent.
async fn attack(
    gw: &Gateway,
    path: &str,
    opening: &[u8],
    flood: &[u8],
    reads: bool,
) -> Option<u16> {
    let (conn, rest) = open(gw, path).await;
    let (mut read, mut write) = tokio::io::split(conn);
    let writing = async {
        if write.write_all(opening).await.is_ok() && !flood.is_empty() {
            while write.write_all(flood).await.is_ok() {}
        }
    };
    let code = if reads {
        // Until the Close comes (or the connection ends without one).
        let reading = close_code(&mut read, rest);
        tokio::pin!(reading);
        tokio::select! {
            code = &mut reading => code,
            () = writing => reading.await,
        }
    } else {
        writing.await;
        close_code(&mut read, rest).await
    };
    closed(read.unsplit(write)).await;
    code
}

/// Closes the attacker's side and waits for the gateway to close its own.
pub async fn closed(mut conn: Conn) {
    let _ = conn.shutdown().await;
    let mut sink = vec![0u8; 64 << 10];
    while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_declaring_more_than_the_limit_is_refused_from_its_header() {
    let gw = Gateway::start(Scheme::Plain).await;
    let zeros = vec![0u8; 64 << 10];
    withstands(&gw, "huge frame headers", async {
        let mut lengths = [(1u64 << 63) - 1, 1 << 62, 1 << 32].into_iter().cycle();
        let mut paths = PATHS.into_iter().cycle();
        again_and_again(|| {
            let (path, len) = (paths.next().unwrap(), lengths.next().unwrap());
            let gw = &gw;
            let zeros = &zeros;
            async move {
                let header = frame(0x81, len, &[]);
                let code = attack(gw, path, &header, zeros, true).await;
                assert_eq!(code, Some(1009), "{path}, a frame of {len} bytes");
            }
        })
        .await;
    })
    .await;
    assert!(
        gw.metric(r#"kubefan_limits_hit_total{kind="ws_message_size"}"#)
            .await
            >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_empty_continuation_frames_are_cut_off() {
    let gw = Gateway::start(Scheme::Plain).await;
    let empties: Vec<u8> = (0..10_000).flat_map(|_| frame(0x00, 0, &[])).collect();
    let first = frame(0x01, 0, &[]);
    withstands(&gw, "empty continuations", async {
        let mut paths = PATHS.into_iter().cycle();
        again_and_again(|| {
            let (gw, path, first, empties) = (&gw, paths.next().unwrap(), &first, &empties);
            async move {
                // The message's fragment count runs out first (64 by
                // default; the ration of frames that do nothing is 100).
                let code = attack(gw, path, first, empties, true).await;
                assert_eq!(code, Some(1009), "{path}");
            }
        })
        .await;
    })
    .await;
    assert!(
        gw.metric(r#"kubefan_limits_hit_total{kind="ws_message_size"}"#)
            .await
            >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_whose_pongs_are_never_read_is_cut_off() {
    let gw = Gateway::start(Scheme::Plain).await;
    let pings: Vec<u8> = (0..10_000).flat_map(|_| frame(0x89, 4, b"ping")).collect();
    withstands(&gw, "ping flood, pongs unread", async {
        let mut paths = PATHS.into_iter().cycle();
        again_and_again(|| {
            let (gw, path, pings) = (&gw, paths.next().unwrap(), &pings);
            async move {
                // Nothing is read until the gateway has closed.
                let code = attack(gw, path, &[], pings, false).await;
                assert!(matches!(code, Some(1008) | None), "{path}: {code:?}");
            }
        })
        .await;
    })
    .await;
    assert!(
        gw.metric(r#"kubefan_limits_hit_total{kind="idle_frames"}"#)
            .await
            >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_with_a_reserved_bit_is_a_protocol_error() {
    let gw = Gateway::start(Scheme::Plain).await;
    for path in PATHS {
        // RSV1 (a compressed frame) without a negotiated extension:
        // RFC 6455 section 5.2 says fail the connection, 1002.
        let rsv1 = frame(0xC1, 2, b"{}");
        let code = tokio::time::timeout(WAIT, attack(&gw, path, &rsv1, &[], true))
            .await
            .expect("closed in time");
        assert_eq!(code, Some(1002), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_trickled_in_holds_its_socket_and_nothing_else() {
    let gw = Gateway::start(Scheme::Plain).await;
    let spent = withstands(&gw, "a frame's first byte, then nothing", async {
        let mut sockets = Vec::new();
        for path in PATHS {
            let (mut conn, _) = open(&gw, path).await;
            conn.write_all(&[0x81]).await.unwrap();
            sockets.push(conn);
        }
        // Held open, the rest of the frame never sent.
        tokio::time::sleep(ATTACK_FOR).await;
        for conn in sockets {
            closed(conn).await;
        }
    })
    .await;
    // Waiting for the rest of a frame costs nothing: a socket with half a
    // frame read is not handed between its task and its hub's writer.
    assert!(
        spent.cpu < spent.wall / 2,
        "{:?} of CPU in {:?}",
        spent.cpu,
        spent.wall
    );
}
