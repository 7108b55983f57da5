//! JSON merge patch (RFC 7386), the semantics the simulator gives both
//! `application/merge-patch+json` and `application/strategic-merge-patch+json`.
//! One implementation serves the gateway (deltas) and the simulator: it
//! lives in `hub::projection`; this module keeps the RFC's own examples.

/// Applies `patch` to `target` in place: `null` deletes a member, objects merge
/// recursively, anything else (arrays included) replaces.
pub use crate::hub::projection::merge_apply as merge_patch;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge_patch;

    #[test]
    fn rfc7386_examples_hold() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut target, patch, want) in cases {
            merge_patch(&mut target, &patch);
            assert_eq!(target, want, "patch {patch}");
        }
    }
}
