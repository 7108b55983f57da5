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

/// A selector that does not parse, with the reason (answered with 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

type SimError = Error;

#[derive(Debug, Clone, PartialEq)]
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

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

fn bad(sel: &str, why: &str) -> SimError {
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

fn parse_set(sel: &str, rest: &str) -> Result<Vec<String>, SimError> {
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
    pub fn parse(sel: &str) -> Result<Self, SimError> {
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

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    /// The dotted field path, as written.
    field: String,
    /// JSON pointer to the field.
    pointer: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<FieldRequirement>);

impl FieldSelector {
    /// Parses `sel`, accepting only `metadata.name`, `metadata.namespace` and
    /// the given extra fields, like the real server's per-resource field labels.
    pub fn parse(sel: &str, extra_fields: &[String]) -> Result<Self, SimError> {
        if sel.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut reqs = Vec::new();
        for part in sel.split(',') {
            let part = part.trim();
            let (field, value, equal) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(Error(format!("invalid field selector: {part:?}")));
            };
            let field = field.trim();
            let known = field == "metadata.name"
                || field == "metadata.namespace"
                || extra_fields.iter().any(|f| f == field);
            if !known {
                return Err(Error(format!("field label not supported: {field}")));
            }
            reqs.push(FieldRequirement {
                field: field.to_owned(),
                pointer: format!("/{}", field.replace('.', "/")),
                value: value.trim().to_owned(),
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

    /// Matches fields read through `field(dotted_path)`; a missing field
    /// reads as the empty string, as in Kubernetes.
    pub fn matches_with<'a>(&self, field: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0
            .iter()
            .all(|r| (field(&r.field).unwrap_or("") == r.value) == r.equal)
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
        ("", "events") | ("events.k8s.io", "events") => &[
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
}
