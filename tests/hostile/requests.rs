//! Requests whose numbers are out of every range: a `Status` saying which,
//! never a panic (a `timeoutSeconds` past `Instant`'s range once took a
//! worker thread down with its connection, and answered nothing).

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
