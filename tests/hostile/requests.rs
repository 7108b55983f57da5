//! Requests whose numbers are out of every range: a `Status` saying which,
//! never a panic (a `timeoutSeconds` past `Instant`'s range once took a
//! worker thread down with its connection, and answered nothing).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Gateway, Scheme, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_out_of_range_are_refused_with_a_status_and_the_gateway_goes_on() {
    let gw = Gateway::start(Scheme::Plain).await;
    for query in [
        "watch=1&timeoutSeconds=9223372036854775808",
        "watch=1&timeoutSeconds=99999999999999999999999",
        "limit=18446744073709551616",
        "resourceVersion=18446744073709551616",
    ] {
        let (status, body) = tokio::time::timeout(WAIT, gw.get(&format!("/api/v1/pods?{query}")))
            .await
            .expect("answered");
        assert_eq!(status, 400, "{query}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["kind"], "Status", "{query}");
        // The message names the number it refused.
        let number = query.rsplit('=').next().unwrap();
        let message = status["message"].as_str().unwrap();
        assert!(message.contains(number), "{query}: {message}");
    }
    // A negative timeout is a deadline already past, as kube-apiserver's
    // context.WithTimeout makes it: the watch ends at once, empty.
    let (status, _) = tokio::time::timeout(WAIT, gw.get("/api/v1/pods?watch=1&timeoutSeconds=-1"))
        .await
        .expect("a negative timeout ends the watch at once");
    assert_eq!(status, 200);
    assert_eq!(gw.get("/readyz").await.0, 200);
}

/// How much of an endless chunked body a client may push before the
/// gateway stops reading: what loopback's socket buffers absorb, and
/// actix-http's 32 KiB payload buffer. Drained, it would take all of
/// [`ENDLESS_BODY`] at memory speed.
const BODY_ABSORBED: usize = 32 << 20;
/// The attack's bound: it stops here even if the gateway reads on.
const ENDLESS_BODY: usize = 512 << 20;

/// Sends `head` and then a chunked body that never ends (until
/// [`ENDLESS_BODY`]), reading the answer meanwhile. Returns the answer's
/// status and how many body bytes were written before the gateway
/// stopped taking them.
async fn endless_chunked_body(gw: &Gateway, head: &str) -> (u16, usize) {
    let conn = gw.connect(false).await;
    let (mut read, mut write) = tokio::io::split(conn);
    let reader = tokio::spawn(async move {
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        // Until the gateway closes (EOF, or a reset for the unread bytes).
        while let Ok(n @ 1..) = read.read(&mut buf).await {
            answer.extend_from_slice(&buf[..n]);
        }
        answer
    });
    let chunk = {
        let mut c = b"10000\r\n".to_vec();
        c.extend(std::iter::repeat_n(b'x', 0x10000));
        c.extend_from_slice(b"\r\n");
        c
    };
    write.write_all(head.as_bytes()).await.unwrap();
    let mut written = 0;
    while written < ENDLESS_BODY {
        match tokio::time::timeout(WAIT, write.write_all(&chunk)).await {
            Ok(Ok(())) => written += chunk.len(),
            // The gateway closed: what the test wants.
            Ok(Err(_)) => break,
            // Not read and not closed: the socket is full and stays so.
            Err(_) => panic!("{head:?}: the gateway neither read nor closed"),
        }
    }
    let answer = tokio::time::timeout(WAIT, reader)
        .await
        .unwrap_or_else(|_| panic!("{head:?}: the connection was not closed"))
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{head:?}: no answer: {text:?}"));
    (status, written)
}

/// No route reads a request body; a chunked one sent anyway is answered,
/// and then the connection ends (as for a `Content-Length` body), on an
/// authenticated stream route, a public path, a method not allowed and a
/// refused sign-in. actix-http would otherwise read it to its end and
/// throw it away, with no byte cap: 127 GB in 60 s on one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_chunked_body_is_answered_then_the_connection_ends() {
    let gw = Gateway::start(Scheme::Plain).await;
    let chunked = "Host: localhost\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (request, want) in [
        ("GET /api/v1/namespaces HTTP/1.1", 200),
        ("GET /healthz HTTP/1.1", 200),
        ("PUT /api/v1/pods HTTP/1.1", 405),
        ("POST /session HTTP/1.1", 400),
    ] {
        let head = format!("{request}\r\n{chunked}");
        let (status, written) = endless_chunked_body(&gw, &head).await;
        assert_eq!(status, want, "{request}");
        assert!(
            written < BODY_ABSORBED,
            "{request}: the gateway took {} MiB of a body no route reads",
            written >> 20
        );
    }
    assert_eq!(gw.get("/readyz").await.0, 200);
}

/// One address that opens connections and never sends its TLS
/// handshake holds at most `--max-pending-handshakes-per-address` (256 by
/// default) of them; beyond, each new one is closed at once and counted,
/// while another address is served as usual, and the address is served
/// again once its handshakes are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_tls_handshakes() {
    const DEFAULT: usize = 256;
    const EXTRA: usize = 40;
    let gw = Gateway::start(Scheme::Tls).await;
    let mut silent = Vec::new();
    for _ in 0..DEFAULT + EXTRA {
        silent.push(tokio::net::TcpStream::connect(gw.addr).await.unwrap());
    }
    // Those beyond the share are closed without a byte (EOF or a reset),
    // at once; the others wait for their handshake (10 s), well past the
    // second they are watched here.
    let closed = futures::future::join_all(silent.iter_mut().map(|conn| async move {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(std::time::Duration::from_secs(1), conn.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }))
    .await
    .into_iter()
    .filter(|closed| *closed)
    .count();
    assert!(
        (EXTRA..=EXTRA + 5).contains(&closed),
        "{closed} of {} silent connections closed",
        DEFAULT + EXTRA
    );
    // Another address is not held up.
    let mut other = gw.connect_from("127.0.0.2".parse().unwrap(), false).await;
    other
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, other.read_to_end(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(silent);
    // Counted, and the address served again once its handshakes went.
    let hits = gw
        .metric(r#"kubefan_limits_hit_total{kind="tls_handshakes"}"#)
        .await;
    assert!(hits >= EXTRA as f64, "{hits}");
}
