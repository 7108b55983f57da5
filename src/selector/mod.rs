//! Kubernetes label and field selectors: parsed once, matched many times.
//!
//! Label syntax is the full Kubernetes one: `a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, comma = AND. Field
//! selectors support `=`, `==`, `!=` on `metadata.name`, `metadata.namespace`
//! and the fields a resource declares selectable. Matching goes through
//! accessors, so callers match JSON objects (the simulator) or labels and
//! fields extracted once at ingest (the hub) alike. No maintained crate
//! implements this grammar, hence this module.

use serde_json::Value;

mod field;
mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;

/// Longest selector accepted, in bytes: selectors are parsed per request
/// and matched per event, so their size is bounded.
pub const MAX_SELECTOR_LEN: usize = 4096;

fn check_len(sel: &str) -> Result<(), Error> {
    if sel.len() > MAX_SELECTOR_LEN {
        return Err(Error(format!(
            "selector is {} bytes long; the limit is {MAX_SELECTOR_LEN}",
            sel.len()
        )));
    }
    Ok(())
}

/// A dotted path into an object (`spec.nodeName`): non-empty segments of
/// letters, digits, `-` and `_`.
pub fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 256
        && path.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A selector that does not parse, with the reason (answered with 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

/// A field's value as a field selector compares it: strings as they are,
/// other scalars in their JSON form, absent or null as "".
pub fn field_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// Fields Kubernetes lets a resource be selected by, besides
/// `metadata.name` and `metadata.namespace` (the field labels kube-apiserver
/// registers for built-in types). kubefan extracts exactly these at ingest.
pub fn selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("", "replicationcontrollers") | ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        // events.k8s.io/v1 names the same fields after its own schema
        // (kubernetes pkg/apis/events/v1/conversion.go,
        // AddFieldLabelConversionsForEvent); they are read at those paths.
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn selectors_print_in_a_spelling_that_parses_back_to_them() {
        let fields = vec!["spec.nodeName".to_string()];
        for text in [
            "",
            "a=b, c == d,e!=f",
            "x in (a, b,c),y notin (z),k,!m,n>-3,o<+4",
            "example.com/app=web,in,notin in (,x)",
        ] {
            let sel = LabelSelector::parse(text).unwrap();
            assert_eq!(
                LabelSelector::parse(&sel.to_string()).unwrap(),
                sel,
                "{text}"
            );
        }
        for text in [
            r"metadata.name=a\,b\=c\\d, spec.nodeName != x",
            "metadata.name==a!b,metadata.namespace=",
            r"metadata.name=\=x",
        ] {
            let sel = FieldSelector::parse(text, &fields).unwrap();
            assert_eq!(
                FieldSelector::parse(&sel.to_string(), &fields).unwrap(),
                sel,
                "{text}: {sel}"
            );
        }
    }

    #[test]
    fn field_selector_values_unescape_as_apimachinery_does() {
        let fields = vec!["spec.nodeName".to_string()];
        let sel =
            FieldSelector::parse(r"metadata.name=a\,b\=c\\d,spec.nodeName!=x", &fields).unwrap();
        assert!(sel.matches(
            &serde_json::json!({"metadata": {"name": "a,b=c\\d"}, "spec": {"nodeName": "y"}})
        ));
        assert!(
            !sel.matches(
                &serde_json::json!({"metadata": {"name": "a"}, "spec": {"nodeName": "y"}})
            )
        );
        // `!` needs no escape; the first unescaped operator splits a term.
        let bang = FieldSelector::parse("metadata.name==a!b", &fields).unwrap();
        assert!(bang.matches(&serde_json::json!({"metadata": {"name": "a!b"}})));
        for bad in [
            r"metadata.name=a\x",
            r"metadata.name=a\",
            "metadata.name=a=b",
            r"metadata.name\=a",
        ] {
            assert!(FieldSelector::parse(bad, &fields).is_err(), "{bad}");
        }
    }

    #[test]
    fn events_k8s_io_events_select_by_their_regarding_fields() {
        let fields: Vec<String> = crate::selector::selectable_fields("events.k8s.io", "events")
            .iter()
            .map(|f| f.to_string())
            .collect();
        let sel = FieldSelector::parse(
            "regarding.kind=Pod,regarding.name=web-1,reportingController=kubelet",
            &fields,
        )
        .unwrap();
        let event = serde_json::json!({"regarding": {"kind": "Pod", "name": "web-1"}, "reportingController": "kubelet"});
        assert!(sel.matches(&event));
        assert!(
            FieldSelector::parse("involvedObject.kind=Pod", &fields).is_err(),
            "core names are not events.k8s.io's"
        );
    }

    use serde_json::json;

    use super::{FieldSelector, LabelSelector};

    fn labeled(labels: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {}})
    }

    fn matches(sel: &str, labels: serde_json::Value) -> bool {
        LabelSelector::parse(sel).unwrap().matches(&labeled(labels))
    }

    #[test]
    fn label_selector_operators_follow_kubernetes_semantics() {
        let l = json!({"app": "web", "tier": "front", "n": "5"});
        assert!(matches("", l.clone()));
        assert!(matches("app=web", l.clone()));
        assert!(matches("app==web,tier=front", l.clone()));
        assert!(!matches("app=web,tier=back", l.clone()));
        assert!(matches("app!=db", l.clone()));
        assert!(matches("missing!=x", l.clone()));
        assert!(matches("app in (db, web)", l.clone()));
        assert!(!matches("app in (db)", l.clone()));
        assert!(matches("app notin (db),missing notin (x)", l.clone()));
        assert!(matches("app", l.clone()));
        assert!(!matches("!app", l.clone()));
        assert!(matches("!missing", l.clone()));
        assert!(matches("n>4,n<6", l.clone()));
        assert!(matches("example.com/role!=x", l.clone()));
    }

    #[test]
    fn bad_label_selectors_are_rejected() {
        for sel in [
            "app=(",
            "=x",
            "app in x",
            "app in ()",
            "a b",
            "app=web!",
            "app~x",
            "n>x",
        ] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel} should not parse");
        }
    }

    #[test]
    fn field_selector_matches_name_namespace_and_declared_fields() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {}});
        let extra = vec!["spec.nodeName".to_owned()];
        let sel = |s: &str| FieldSelector::parse(s, &extra).unwrap().matches(&obj);
        assert!(sel("metadata.name=a"));
        assert!(sel("metadata.name==a,metadata.namespace!=other"));
        assert!(!sel("metadata.namespace=other"));
        assert!(sel("spec.nodeName="));
        assert!(!sel("spec.nodeName!="));
        assert!(FieldSelector::parse("spec.other=x", &extra).is_err());
        assert!(FieldSelector::parse("metadata.name", &extra).is_err());
    }

    #[test]
    fn a_name_is_required_only_by_an_equality_on_metadata_name() {
        let exact = |s: &str| {
            FieldSelector::parse(s, &[])
                .unwrap()
                .requires_exact("metadata.name")
                .map(str::to_owned)
        };
        assert_eq!(exact("metadata.name=a").as_deref(), Some("a"));
        assert_eq!(
            exact("metadata.namespace=ns,metadata.name==b").as_deref(),
            Some("b")
        );
        assert_eq!(exact("metadata.name!=a"), None);
        assert_eq!(exact("metadata.namespace=a"), None);
        assert_eq!(exact(""), None);
        // The first of two, as apimachinery's andTerm answers.
        assert_eq!(
            exact("metadata.name=a,metadata.name=b").as_deref(),
            Some("a")
        );
    }

    /// A reference model of one requirement, rendered with random spacing
    /// and evaluated directly, against which the parser is checked.
    #[derive(Debug, Clone)]
    enum Model {
        Eq(String, String, &'static str),
        NotEq(String, String),
        In(String, Vec<String>),
        NotIn(String, Vec<String>),
        Exists(String),
        NotExists(String),
    }

    const KEYS: &[&str] = &["app", "tier", "example.com/role", "a.b-c_d", "k8s.io/x"];
    const VALUES: &[&str] = &["web", "db", "v1.2", "a_b-c", "x"];

    fn pick<'a>(rng: &mut impl rand::RngExt, xs: &[&'a str]) -> &'a str {
        xs[rng.random_range(0..xs.len())]
    }

    fn space(rng: &mut impl rand::RngExt) -> &'static str {
        ["", " ", "  ", "\t"][rng.random_range(0..4)]
    }

    impl Model {
        fn random(rng: &mut impl rand::RngExt) -> Model {
            let k = pick(rng, KEYS).to_string();
            let set = |rng: &mut dyn rand::Rng| -> Vec<String> {
                let n = 1 + (rng.next_u32() % 3) as usize;
                (0..n)
                    .map(|_| VALUES[(rng.next_u32() as usize) % VALUES.len()].to_string())
                    .collect()
            };
            match rng.random_range(0..6) {
                0 => Model::Eq(
                    k,
                    pick(rng, VALUES).into(),
                    ["=", "=="][rng.random_range(0..2)],
                ),
                1 => Model::NotEq(k, pick(rng, VALUES).into()),
                2 => Model::In(k, set(rng)),
                3 => Model::NotIn(k, set(rng)),
                4 => Model::Exists(k),
                _ => Model::NotExists(k),
            }
        }

        fn render(&self, rng: &mut impl rand::Rng) -> String {
            let (a, b) = (space(rng), space(rng));
            match self {
                Model::Eq(k, v, op) => format!("{a}{k}{b}{op}{a}{v}{b}"),
                Model::NotEq(k, v) => format!("{a}{k}{b}!={a}{v}{b}"),
                Model::In(k, vs) => format!("{a}{k} in {b}({}){a}", vs.join(&format!("{b},{a}"))),
                Model::NotIn(k, vs) => format!("{a}{k} notin{b}({}){a}", vs.join(",")),
                Model::Exists(k) => format!("{a}{k}{b}"),
                Model::NotExists(k) => format!("{a}!{k}{b}"),
            }
        }

        fn eval(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
            match self {
                Model::Eq(k, v, _) => labels.get(k) == Some(v),
                Model::NotEq(k, v) => labels.get(k) != Some(v),
                Model::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
                Model::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
                Model::Exists(k) => labels.contains_key(k),
                Model::NotExists(k) => !labels.contains_key(k),
            }
        }
    }

    #[test]
    fn random_selectors_match_the_reference_model() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e1ec7);
        for _ in 0..2000 {
            let reqs: Vec<Model> = (0..rng.random_range(0..4))
                .map(|_| Model::random(&mut rng))
                .collect();
            let text = reqs
                .iter()
                .map(|r| r.render(&mut rng))
                .collect::<Vec<_>>()
                .join(",");
            let parsed = LabelSelector::parse(&text)
                .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"));
            for _ in 0..8 {
                let mut labels = std::collections::BTreeMap::new();
                for k in KEYS {
                    if rng.random_bool(0.5) {
                        labels.insert(k.to_string(), pick(&mut rng, VALUES).to_string());
                    }
                }
                let want = reqs.iter().all(|r| r.eval(&labels));
                let got = parsed.matches_with(|k| labels.get(k).map(String::as_str));
                assert_eq!(got, want, "selector {text:?} on {labels:?}");
                let normal = parsed.clone().normalized();
                let got = normal.matches_with(|k| labels.get(k).map(String::as_str));
                assert_eq!(got, want, "normalised {normal} of {text:?} on {labels:?}");
            }
        }
    }

    #[test]
    fn selectors_that_mean_the_same_normalise_to_equal_selectors() {
        let labels = |s: &str| LabelSelector::parse(s).unwrap().normalized();
        for (a, b) in [
            ("app=web,tier!=db", "tier!=db,app==web"),
            ("app in (x,y),k", "k,app in (y, x)"),
            ("app in (x,y,x)", "app in (y,x)"),
            ("app notin (y,x),!m", "!m,app notin (x,y,y)"),
            ("app=web,app=web", "app=web"),
            ("app in (x)", "app=x"),
            ("app notin (x,x)", "app!=x"),
            ("n>1,n<5", "n<5,n>1"),
        ] {
            assert_eq!(labels(a), labels(b), "{a:?} and {b:?}");
        }
        for (a, b) in [
            ("app in (x,y)", "app in (x)"),
            ("app in (x,y)", "app notin (x,y)"),
            ("app=x", "app!=x"),
            ("app", "!app"),
            ("app=x,tier=y", "app=y,tier=x"),
            ("n>1", "n<1"),
        ] {
            assert_ne!(labels(a), labels(b), "{a:?} and {b:?}");
        }
        let extra = ["spec.nodeName".to_string()];
        let fields = |s: &str| FieldSelector::parse(s, &extra).unwrap().normalized();
        assert_eq!(
            fields("metadata.name=a,spec.nodeName!=n"),
            fields("spec.nodeName!=n,metadata.name==a,metadata.name=a")
        );
        assert_ne!(
            fields("metadata.name=a,spec.nodeName!=n"),
            fields("metadata.name!=a,spec.nodeName=n")
        );
        assert_ne!(fields("metadata.name=a"), fields("metadata.name=b"));
    }

    #[test]
    fn edge_cases_of_the_grammar() {
        let none = std::collections::BTreeMap::<String, String>::new();
        for empty in ["", " ", "\t"] {
            let s = LabelSelector::parse(empty).unwrap();
            assert!(
                s.is_empty() && s.matches_with(|k| none.get(k).map(String::as_str)),
                "{empty:?}"
            );
        }
        for bad in [
            ",",
            "app=web,",
            ",app",
            "!",
            "!app=web",
            "app=web=x",
            "app notin",
            "-app",
            "app/",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} must not parse");
        }
        // Empty values are valid, as in Kubernetes.
        let labels: std::collections::BTreeMap<String, String> =
            [("app".to_string(), String::new())].into();
        for ok in ["app==", "app in (a,,b)", "app="] {
            let s = LabelSelector::parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert!(
                s.matches_with(|k| labels.get(k).map(String::as_str)),
                "{ok:?}"
            );
        }
        assert!(
            FieldSelector::parse_any("metadata.labels.tier!=backend, spec.nodeName=n-1.x").is_ok()
        );
        assert!(FieldSelector::parse_any("spec nodeName=x").is_err());
        assert!(
            FieldSelector::parse("spec.nodeName=x", &[]).is_err(),
            "Kubernetes rules refuse unknown fields"
        );
    }
}
