//! HTTP/2 attacks over TLS: frames that do nothing, sent without end on
//! a connection with a stream open.

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf};

use crate::harness::{Conn, Gateway, Scheme, again_and_again, withstands};
use crate::websocket::closed;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_HEADERS: u8 = 0x4;
/// GOAWAY's error code for a peer "exhibiting a behavior that might be
/// generating excessive load" (RFC 9113, section 7).
const ENHANCE_YOUR_CALM: u32 = 0xb;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// The preface, empty SETTINGS, and `GET path` on stream 1 with its
/// request left open (no END_STREAM): a stream that takes DATA.
fn opening(path: &str) -> Vec<u8> {
    // HPACK (RFC 7541): :method GET and :scheme https from the static
    // table, :path and :authority as literals with indexed names.
    let mut block = vec![0x82, 0x87, 0x44, path.len() as u8];
    block.extend(path.as_bytes());
    block.extend([0x41, 9]);
    block.extend(b"127.0.0.1");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS, 1, &block));
    out
}

/// Reads the server's frames until its GOAWAY: the error code in it.
/// `None` if the connection ends without one.
async fn goaway(read: &mut ReadHalf<Conn>) -> Option<u32> {
    let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    loop {
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            if buf[3] == GOAWAY && len >= 8 {
                return Some(u32::from_be_bytes(buf[13..17].try_into().unwrap()));
            }
            buf.drain(..9 + len);
        }
        match read.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One connection: a stream opened, then `flood` again and again until
/// the gateway ends the connection; its GOAWAY's code.
async fn attack(gw: &Gateway, flood: &[u8]) -> Option<u32> {
    let conn = gw.connect(true).await;
    let (mut read, mut write) = tokio::io::split(conn);
    let writing = async {
        if write.write_all(&opening("/stream/pods")).await.is_ok() {
            while write.write_all(flood).await.is_ok() {}
        }
    };
    // Until the GOAWAY comes (or the connection ends without one).
    let code = {
        let reading = goaway(&mut read);
        tokio::pin!(reading);
        tokio::select! {
            code = &mut reading => code,
            () = writing => reading.await,
        }
    };
    closed(read.unsplit(write)).await;
    code
}

/// `n` copies of a frame.
fn many(n: usize, frame: Vec<u8>) -> Vec<u8> {
    frame.repeat(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_data_frames_on_an_open_stream_are_cut_off_with_enhance_your_calm() {
    let gw = Gateway::start(Scheme::Tls).await;
    let empties = many(10_000, frame(DATA, 0, 1, &[]));
    withstands(&gw, "HTTP/2 empty DATA", async {
        again_and_again(|| async {
            assert_eq!(attack(&gw, &empties).await, Some(ENHANCE_YOUR_CALM));
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
async fn floods_of_control_frames_beyond_what_traffic_earns_are_cut_off() {
    let gw = Gateway::start(Scheme::Tls).await;
    let floods = [
        (
            "WINDOW_UPDATE",
            many(10_000, frame(WINDOW_UPDATE, 0, 0, &[0, 0, 0, 1])),
        ),
        (
            "PRIORITY",
            many(10_000, frame(PRIORITY, 0, 3, &[0, 0, 0, 1, 16])),
        ),
        (
            "RST_STREAM",
            many(10_000, frame(RST_STREAM, 0, 1, &[0, 0, 0, 8])),
        ),
        ("PING", many(10_000, frame(PING, 0, 0, &[7; 8]))),
        ("SETTINGS", many(10_000, frame(SETTINGS, 0, 0, &[]))),
    ];
    withstands(&gw, "HTTP/2 control frames", async {
        let mut next = floods.iter().cycle();
        again_and_again(|| {
            let (gw, (kind, flood)) = (&gw, next.next().unwrap());
            async move {
                assert_eq!(attack(gw, flood).await, Some(ENHANCE_YOUR_CALM), "{kind}");
            }
        })
        .await;
    })
    .await;
}
