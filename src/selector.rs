//! Kubernetes label and field selectors: parsed once, matched many times.
//!
//! Label syntax is the full Kubernetes one: `a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, comma = AND. Field
//! selectors support `=`, `==`, `!=` on `metadata.name`, `metadata.namespace`
//! and the fields a resource declares selectable. Matching goes through
//! accessors, so callers match JSON objects (the simulator) or labels and
//! fields extracted once at ingest (the hub) alike. No maintained crate
//! implements this grammar, hence this module.

use std::borrow::Cow;

use serde_json::Value;

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

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed `labelSelector`; the empty selector matches everything.
/// Equality compares requirements as written (in their order); compare
/// [`LabelSelector::normalized`] forms to compare meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector(Vec<Requirement>);

fn bad(sel: &str, why: &str) -> Error {
    Error(format!(
        "unable to parse requirement: {why} in selector {sel:?}"
    ))
}

fn valid_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
    });
    name_ok && prefix_ok
}

fn valid_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(sel: &str, rest: &str) -> Result<Vec<String>, Error> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(sel, "expected a parenthesised set of values"))?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
    if vals.iter().any(|v| !valid_value(v)) || inner.trim().is_empty() {
        return Err(bad(sel, "invalid value in set"));
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(sel: &str) -> Result<Self, Error> {
        check_len(sel)?;
        if sel.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for part in split_top(sel) {
            let part = part.trim();
            if let Some(key) = part.strip_prefix('!') {
                let key = key.trim();
                if !valid_key(key) {
                    return Err(bad(sel, "invalid label key"));
                }
                reqs.push(Requirement {
                    key: key.to_owned(),
                    op: Op::NotExists,
                });
                continue;
            }
            let end = part
                .find(|c: char| c.is_whitespace() || "=!<>(),".contains(c))
                .unwrap_or(part.len());
            let (key, rest) = part.split_at(end);
            if !valid_key(key) {
                return Err(bad(sel, "invalid label key"));
            }
            let rest = rest.trim_start();
            let value = |v: &str| {
                let v = v.trim();
                if valid_value(v) {
                    Ok(v.to_owned())
                } else {
                    Err(bad(sel, "invalid label value"))
                }
            };
            let number = |v: &str| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| bad(sel, "expected an integer"))
            };
            let op = if rest.is_empty() {
                Op::Exists
            } else if let Some(v) = rest.strip_prefix("!=") {
                Op::NotEq(value(v)?)
            } else if let Some(v) = rest.strip_prefix("==") {
                Op::Eq(value(v)?)
            } else if let Some(v) = rest.strip_prefix('=') {
                Op::Eq(value(v)?)
            } else if let Some(v) = rest.strip_prefix('>') {
                Op::Gt(number(v)?)
            } else if let Some(v) = rest.strip_prefix('<') {
                Op::Lt(number(v)?)
            } else if let Some(v) = rest
                .strip_prefix("notin")
                .filter(|v| v.trim_start().starts_with('('))
            {
                Op::NotIn(parse_set(sel, v)?)
            } else if let Some(v) = rest
                .strip_prefix("in")
                .filter(|v| v.trim_start().starts_with('('))
            {
                Op::In(parse_set(sel, v)?)
            } else {
                return Err(bad(sel, "unknown operator"));
            };
            reqs.push(Requirement {
                key: key.to_owned(),
                op,
            });
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same selector in one canonical form: requirements are ANDed,
    /// so their order and repeats do not matter, nor do the order and
    /// repeats of a set's values; a one-value `in`/`notin` is `=`/`!=`
    /// (they match the same labels, a missing one included). Selectors
    /// that mean the same by these rules normalise to equal selectors.
    pub fn normalized(mut self) -> LabelSelector {
        for r in &mut self.0 {
            let set = match &mut r.op {
                Op::In(set) | Op::NotIn(set) => set,
                _ => continue,
            };
            set.sort();
            set.dedup();
            if let [one] = set.as_mut_slice() {
                let one = std::mem::take(one);
                r.op = match r.op {
                    Op::In(_) => Op::Eq(one),
                    _ => Op::NotEq(one),
                };
            }
        }
        self.0.sort();
        self.0.dedup();
        self
    }

    /// Matches labels read through `label(key)`.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| {
            let v = label(&r.key);
            match (&r.op, v) {
                (Op::Eq(want), Some(v)) => v == want,
                (Op::Eq(_), None) => false,
                (Op::NotEq(want), v) => v != Some(want.as_str()),
                (Op::In(set), Some(v)) => set.iter().any(|s| s == v),
                (Op::In(_), None) => false,
                (Op::NotIn(set), v) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
                (Op::Exists, v) => v.is_some(),
                (Op::NotExists, v) => v.is_none(),
                (Op::Gt(n), v) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                (Op::Lt(n), v) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

/// The selector in its shortest spelling (`=` for equality, no space but
/// the one before `in`/`notin`, sets in their order), which parses back
/// to an equal selector and is never longer than what was parsed (so it
/// stays within [`MAX_SELECTOR_LEN`]).
impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, Requirement { key, op }) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match op {
                Op::Eq(v) => write!(f, "{key}={v}"),
                Op::NotEq(v) => write!(f, "{key}!={v}"),
                Op::In(set) => write!(f, "{key} in({})", set.join(",")),
                Op::NotIn(set) => write!(f, "{key} notin({})", set.join(",")),
                Op::Exists => f.write_str(key),
                Op::NotExists => write!(f, "!{key}"),
                Op::Gt(n) => write!(f, "{key}>{n}"),
                Op::Lt(n) => write!(f, "{key}<{n}"),
            }?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct FieldRequirement {
    /// The dotted field path, as written.
    field: String,
    /// JSON pointer to the field.
    pointer: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`; the empty selector matches everything.
/// Equality compares requirements as written (in their order); compare
/// [`FieldSelector::normalized`] forms to compare meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector(Vec<FieldRequirement>);

/// `sel` split on the commas not escaped with a backslash (apimachinery
/// `fields.splitTerms`).
fn split_terms(sel: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in sel.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&sel[start..]);
    terms
}

/// A term at its first unescaped operator, tried in apimachinery's order
/// `!=`, `==`, `=` at each position (`fields.splitTerm`): the field,
/// whether it asks for equality, and the still-escaped value.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
            continue;
        }
        let rest = &term[i..];
        for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], equal, value));
            }
        }
    }
    None
}

/// A field selector value unescaped as apimachinery's
/// `fields.UnescapeValue` does: a backslash before a backslash, `,` or `=`
/// stands for that character; any other escape, a trailing backslash, and
/// an unescaped `,` or `=` are errors.
fn unescape_value(value: &str) -> Result<String, Error> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_owned());
    }
    let mut out = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        match c {
            '\\' | ',' | '=' if escaped => {
                out.push(c);
                escaped = false;
            }
            _ if escaped => {
                return Err(Error(format!(
                    "invalid field selector value {value:?}: invalid escape sequence \\{c}"
                )));
            }
            '\\' => escaped = true,
            ',' | '=' => {
                return Err(Error(format!(
                    "invalid field selector value {value:?}: unescaped {c:?} (write \\{c})"
                )));
            }
            _ => out.push(c),
        }
    }
    if escaped {
        return Err(Error(format!(
            "invalid field selector value {value:?}: invalid escape sequence \\"
        )));
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses `sel`, accepting only `metadata.name`, `metadata.namespace` and
    /// the given extra fields, like the real server's per-resource field labels.
    pub fn parse(sel: &str, extra_fields: &[String]) -> Result<Self, Error> {
        Self::parse_checked(sel, |field| {
            if field == "metadata.name"
                || field == "metadata.namespace"
                || extra_fields.iter().any(|f| f == field)
            {
                Ok(())
            } else {
                Err(Error(format!("field label not supported: {field}")))
            }
        })
    }

    /// Parses `sel` accepting any dotted path into the object, as kubefan's
    /// own transports (SSE, WebSocket) do.
    pub fn parse_any(sel: &str) -> Result<Self, Error> {
        Self::parse_checked(sel, |field| {
            if valid_path(field) {
                Ok(())
            } else {
                Err(Error(format!(
                    "invalid field path {field:?} in field selector: expected dotted names like spec.nodeName"
                )))
            }
        })
    }

    fn parse_checked(sel: &str, check: impl Fn(&str) -> Result<(), Error>) -> Result<Self, Error> {
        check_len(sel)?;
        if sel.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for part in split_terms(sel) {
            let part = part.trim();
            let Some((field, equal, value)) = split_term(part) else {
                return Err(Error(format!("invalid field selector: {part:?}")));
            };
            let field = field.trim();
            check(field)?;
            reqs.push(FieldRequirement {
                field: field.to_owned(),
                pointer: format!("/{}", field.replace('.', "/")),
                value: unescape_value(value.trim())?,
                equal,
            });
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let actual = field_text(obj.pointer(&r.pointer));
            (actual == r.value) == r.equal
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same selector in one canonical form: requirements are ANDed,
    /// so their order and repeats do not matter.
    pub fn normalized(mut self) -> FieldSelector {
        self.0.sort();
        self.0.dedup();
        self
    }

    /// Matches fields read through `field(dotted_path)`; a missing field
    /// reads as the empty string, as in Kubernetes.
    pub fn matches_with<'a>(&self, field: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0
            .iter()
            .all(|r| (field(&r.field).unwrap_or("") == r.value) == r.equal)
    }

    /// Matches fields read through `value(dotted_path, json_pointer)`,
    /// which returns the field's text ("" when absent).
    pub fn matches_by<'a>(&self, value: impl Fn(&str, &str) -> Cow<'a, str>) -> bool {
        self.0
            .iter()
            .all(|r| (value(&r.field, &r.pointer) == r.value) == r.equal)
    }

    /// The dotted paths this selector reads.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| r.field.as_str())
    }
}

/// The selector in its shortest spelling (`=` for equality, values
/// escaped as `fields.EscapeValue` escapes them), which parses back to an
/// equal selector and is never longer than what was parsed.
impl std::fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&r.field)?;
            f.write_str(if r.equal { "=" } else { "!=" })?;
            for c in r.value.chars() {
                if matches!(c, '\\' | ',' | '=') {
                    f.write_str("\\")?;
                }
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

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
