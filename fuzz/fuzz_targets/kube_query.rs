//! The Kubernetes face's query on arbitrary input, decided as a LIST or
//! WATCH of pods decides it before touching a hub (`KubeQuery::plan`): the
//! first line is an object name (empty: the collection), the rest the
//! query string. Nothing may panic; a refusal is a 400 or a 422; a watch
//! lasts at most `MAX_WATCH_TIMEOUT`, a deadline `Instant` can hold; a
//! resourceVersion of 0 is no resourceVersion; the selectors' and the
//! token's spellings parse back to themselves; and the query written out
//! again is answered exactly as the original.

#![no_main]

use std::time::Instant;

use kubefan::fuzzing::{self, MAX_WATCH_TIMEOUT};
use kubefan::selector::{FieldSelector, LabelSelector, selectable_fields};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (name, query) = text.split_once('\n').unwrap_or(("", text));
    let name = Some(name).filter(|n| !n.is_empty());
    let answer = fuzzing::kube_query(query, name);
    match &answer {
        Ok(plan) => {
            assert!(plan.timeout <= MAX_WATCH_TIMEOUT, "{query:?}: {plan:?}");
            assert!(Instant::now().checked_add(plan.timeout).is_some());
            assert_ne!(plan.resource_version, Some(0), "{query:?}");
            let labels = LabelSelector::parse(&plan.labels).expect("its own spelling parses");
            assert_eq!(labels.to_string(), plan.labels, "{query:?}");
            let selectable: Vec<String> = selectable_fields("", "pods")
                .iter()
                .map(|f| f.to_string())
                .collect();
            let fields =
                FieldSelector::parse(&plan.fields, &selectable).expect("its own spelling parses");
            assert_eq!(fields.to_string(), plan.fields, "{query:?}");
            if let Some(token) = &plan.continue_token {
                let again = fuzzing::kube_query(&format!("continue={token}"), None)
                    .expect("a token kubefan writes parses");
                assert_eq!(again.continue_token.as_ref(), Some(token));
            }
        }
        Err(refused) => assert!(matches!(refused.code, 400 | 422), "{query:?}: {refused:?}"),
    }
    if let Some(again) = fuzzing::kube_query_again(query) {
        assert_eq!(
            fuzzing::kube_query(&again, name),
            answer,
            "{query:?} written again as {again:?}"
        );
    }
});
