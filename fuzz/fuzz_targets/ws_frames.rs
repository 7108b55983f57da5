//! The WebSocket frame reader on arbitrary client bytes, arriving in
//! reads of arbitrary sizes, on a `/ws` socket or a single-stream one.
//! Nothing may panic; no message passes the size limit (a control frame
//! 125 bytes); a refusal is one of the Close codes PROTOCOL.md gives; and
//! the reader never holds more than one message's limit, a frame header
//! and a control frame, whatever the frame headers declare.

#![no_main]

use kubefan::fuzzing::{self, WS_LIMITS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let read = usize::from(split & 0x7F) * 32 + 1;
    let got = fuzzing::ws_frames(bytes, read, split & 0x80 == 0);
    for &(control, len) in &got.messages {
        let limit = if control { 125 } else { WS_LIMITS.max_message };
        assert!(len <= limit, "a message of {len} bytes: {got:?}");
    }
    assert!(
        got.most_held <= WS_LIMITS.max_message + 14 + 125,
        "{} bytes held",
        got.most_held
    );
    if let Some(code) = got.refused {
        assert!(matches!(code, 1002 | 1007 | 1008 | 1009), "closed with {code}");
    }
});
