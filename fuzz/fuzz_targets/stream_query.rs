//! The stream routes' options on arbitrary input: the first line is a
//! `Last-Event-ID` header's bytes, the rest the query string of
//! `/stream/{resource}`. Nothing may panic; a refusal is a 400; a position
//! is never 0 without a tag (that asks for a snapshot) and its id parses
//! back to it; namespaces are distinct RFC 1123 labels; and options written
//! out again parse back to the same options.

#![no_main]

use kubefan::fuzzing;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (header, query) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    match fuzzing::last_event_id(header) {
        Ok(Some(position)) => {
            assert!(position.rv != 0 || position.tag.is_some(), "{position:?}");
            let id = position.to_string();
            assert_eq!(fuzzing::last_event_id(id.as_bytes()), Ok(Some(position)));
        }
        Ok(None) => {}
        Err(refused) => assert_eq!(refused.code, 400, "{refused:?}"),
    }
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    match fuzzing::stream_query(query) {
        Ok(params) => {
            for (i, ns) in params.namespaces.iter().enumerate() {
                assert!(
                    (1..=63).contains(&ns.len())
                        && ns
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                    "{ns:?}"
                );
                assert!(!params.namespaces[..i].contains(ns), "{ns:?} twice");
            }
            if let Some(position) = &params.resume {
                assert!(position.rv != 0 || position.tag.is_some(), "{position:?}");
            }
            let again = fuzzing::stream_query_of(&params);
            assert_eq!(
                fuzzing::stream_query(&again),
                Ok(params),
                "{query:?} written again as {again:?}"
            );
        }
        Err(refused) => assert_eq!(refused.code, 400, "{query:?}: {refused:?}"),
    }
});
