//! `/ws` client messages on arbitrary input (`parse_op`). Nothing may
//! panic; a refusal is a 400, for the socket or for an id of 1 to 128
//! bytes; a message's id is 1 to 128 bytes (a `renew` names none); and a
//! message written out again as JSON parses back to the same message.

#![no_main]

use kubefan::fuzzing::{self, WsRefused};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match fuzzing::ws_op(text) {
        Ok(op) => {
            if let Some(id) = op.id() {
                assert!((1..=128).contains(&id.len()), "{op:?}");
            }
            let json = op.to_json();
            match fuzzing::ws_op(&json) {
                Ok(again) => assert_eq!(again, op, "{text:?} written again as {json}"),
                Err(refused) => panic!("{text:?} written again as {json}: {refused:?}"),
            }
        }
        Err(WsRefused { sub, refused }) => {
            assert_eq!(refused.code, 400, "{text:?}: {refused:?}");
            if let Some(id) = sub {
                assert!((1..=128).contains(&id.len()), "{id:?}");
            }
        }
    }
});
