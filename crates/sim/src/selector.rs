//! Label and field selectors, as the simulated API server reads them.
//!
//! Written from Kubernetes' documentation, independently of the gateway's
//! own parser, so that the two check each other:
//! - labels: <https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors>
//!   (equality `=`, `==`, `!=`; sets `in`, `notin`; existence `key`, `!key`;
//!   and `>`/`<` on integers, which `labels.Parse` in
//!   k8s.io/apimachinery/pkg/labels/selector.go also accepts), requirements
//!   joined by commas, all of which must hold. `!=` and `notin` hold for an
//!   object without the label.
//! - fields: <https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/>
//!   (`=`, `==`, `!=`, joined by commas), with the escapes of
//!   `fields.ParseSelector` (k8s.io/apimachinery/pkg/fields/selector.go):
//!   `\,` `\=` `\!` `\\`. A field a resource does not support is refused
//!   as kube-apiserver refuses it: "field label not supported".

use serde_json::Value;

use super::SimError;
use super::attrs::Attrs;
use super::resource::ResourceDef;

/// A label requirement's operator.
#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, LabelOp)>);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

fn invalid(what: &str, selector: &str, why: &str) -> SimError {
    SimError::BadRequest(format!(
        "unable to parse {what} selector {selector:?}: {why}"
    ))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 alphanumerics, `-`, `_`, `.`, starting and ending
/// alphanumeric.
fn valid_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    }) && !name.is_empty()
        && valid_value(name)
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`,
/// starting and ending alphanumeric.
fn valid_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.is_empty()
        || (v.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// Splits at commas outside parentheses.
fn requirements(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
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

impl LabelSelector {
    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`),
    /// as `metav1.LabelSelectorAsSelector` reads it: every requirement
    /// must hold, and an empty selector matches everything.
    pub fn from_object(selector: &Value) -> Result<LabelSelector, String> {
        let Some(obj) = selector.as_object() else {
            return Err("a label selector must be an object".into());
        };
        let mut reqs = Vec::new();
        if let Some(labels) = obj.get("matchLabels").filter(|v| !v.is_null()) {
            let labels = labels
                .as_object()
                .ok_or("matchLabels must map strings to strings")?;
            for (key, value) in labels {
                let value = value
                    .as_str()
                    .ok_or("matchLabels must map strings to strings")?;
                if !valid_key(key) || !valid_value(value) {
                    return Err(format!("invalid matchLabels entry {key}={value}"));
                }
                reqs.push((key.clone(), LabelOp::In(vec![value.to_owned()])));
            }
        }
        if let Some(exprs) = obj.get("matchExpressions").filter(|v| !v.is_null()) {
            let exprs = exprs.as_array().ok_or("matchExpressions must be a list")?;
            for expr in exprs {
                let key = expr["key"].as_str().unwrap_or("");
                if !valid_key(key) {
                    return Err(format!("invalid matchExpressions key {key:?}"));
                }
                let values: Vec<String> = match expr.get("values").filter(|v| !v.is_null()) {
                    None => Vec::new(),
                    Some(v) => v
                        .as_array()
                        .ok_or("matchExpressions values must be a list of strings")?
                        .iter()
                        .map(|x| x.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or("matchExpressions values must be a list of strings")?,
                };
                if let Some(v) = values.iter().find(|v| !valid_value(v)) {
                    return Err(format!("invalid matchExpressions value {v:?}"));
                }
                let op = match (expr["operator"].as_str().unwrap_or(""), values.is_empty()) {
                    ("In", false) => LabelOp::In(values),
                    ("NotIn", false) => LabelOp::NotIn(values),
                    ("Exists", true) => LabelOp::Exists,
                    ("DoesNotExist", true) => LabelOp::DoesNotExist,
                    ("In" | "NotIn", true) => {
                        return Err("values must be non-empty for In and NotIn".into());
                    }
                    ("Exists" | "DoesNotExist", false) => {
                        return Err("values must be empty for Exists and DoesNotExist".into());
                    }
                    (other, _) => {
                        return Err(format!("{other:?} is not a valid selector operator"));
                    }
                };
                reqs.push((key.to_owned(), op));
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn parse(selector: &str) -> Result<LabelSelector, SimError> {
        let bad = |why: &str| invalid("label", selector, why);
        if selector.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let mut reqs = Vec::new();
        for req in requirements(selector) {
            let req = req.trim();
            if req.is_empty() {
                return Err(bad("empty requirement"));
            }
            let (key, op) = if let Some(key) = req.strip_prefix('!') {
                (key.trim(), LabelOp::DoesNotExist)
            } else if let Some((key, value)) = req.split_once("!=") {
                (key.trim(), LabelOp::NotIn(vec![value.trim().to_string()]))
            } else if let Some((key, value)) = req.split_once("==").or_else(|| req.split_once('='))
            {
                (key.trim(), LabelOp::In(vec![value.trim().to_string()]))
            } else if let Some((key, n)) = req.split_once('>').or_else(|| req.split_once('<')) {
                let n: i64 = n
                    .trim()
                    .parse()
                    .map_err(|_| bad("> and < take an integer"))?;
                let op = if req.contains('>') {
                    LabelOp::Gt(n)
                } else {
                    LabelOp::Lt(n)
                };
                (key.trim(), op)
            } else if let Some((key, rest)) = req.split_once(char::is_whitespace) {
                let rest = rest.trim_start();
                let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
                    (true, set)
                } else if let Some(set) = rest.strip_prefix("in") {
                    (false, set)
                } else {
                    return Err(bad("expected an operator"));
                };
                let set = set
                    .trim()
                    .strip_prefix('(')
                    .and_then(|s| s.strip_suffix(')'))
                    .ok_or_else(|| bad("a set is written (a,b)"))?;
                let values: Vec<String> = set.split(',').map(|v| v.trim().to_string()).collect();
                if values.iter().all(String::is_empty) {
                    return Err(bad("a set needs at least one value"));
                }
                let op = if negated {
                    LabelOp::NotIn(values)
                } else {
                    LabelOp::In(values)
                };
                (key, op)
            } else {
                (req, LabelOp::Exists)
            };
            if !valid_key(key) {
                return Err(bad(&format!("invalid label key {key:?}")));
            }
            if let LabelOp::In(values) | LabelOp::NotIn(values) = &op
                && let Some(v) = values.iter().find(|v| !valid_value(v))
            {
                return Err(bad(&format!("invalid label value {v:?}")));
            }
            reqs.push((key.to_string(), op));
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, attrs: &Attrs) -> bool {
        self.0.iter().all(|(key, op)| {
            let value = attrs.label(key);
            match op {
                LabelOp::In(set) => value.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| set.iter().all(|s| s != v)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::Gt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

impl FieldSelector {
    /// Parses `selector`; the fields allowed are `def`'s selectable fields,
    /// any other is refused in `def`'s words.
    pub fn parse(selector: &str, def: &ResourceDef) -> Result<FieldSelector, SimError> {
        let bad = |why: &str| invalid("field", selector, why);
        let mut terms = Vec::new();
        if selector.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        // Split on unescaped commas, then on the first unescaped operator.
        let mut term = String::new();
        let mut parts: Vec<String> = Vec::new();
        let mut chars = selector.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let next = chars.next().ok_or_else(|| bad("a trailing backslash"))?;
                    if !matches!(next, ',' | '=' | '!' | '\\') {
                        return Err(bad(&format!("invalid escape \\{next}")));
                    }
                    // Kept escaped until the operator is found.
                    term.push('\\');
                    term.push(next);
                }
                ',' => parts.push(std::mem::take(&mut term)),
                c => term.push(c),
            }
        }
        parts.push(term);
        for part in parts {
            let (field, equal, value) =
                split_term(&part).ok_or_else(|| bad("expected field=value or field!=value"))?;
            let field = field.trim();
            if def.field(field).is_none() {
                return Err(SimError::BadRequest(def.unknown_field.message(field)));
            }
            terms.push((field.to_string(), equal, unescape(&value)));
        }
        Ok(FieldSelector(terms))
    }

    pub fn matches(&self, attrs: &Attrs) -> bool {
        self.0
            .iter()
            .all(|(field, equal, want)| (attrs.field(field).unwrap_or("") == want) == *equal)
    }
}

/// `field=value`, `field==value` or `field!=value`, at the first
/// unescaped operator; the value still escaped.
fn split_term(term: &str) -> Option<(String, bool, String)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'!' if b.get(i + 1) == Some(&b'=') => {
                return Some((term[..i].to_string(), false, term[i + 2..].to_string()));
            }
            b'=' => {
                let rest = if b.get(i + 1) == Some(&b'=') {
                    i + 2
                } else {
                    i + 1
                };
                return Some((term[..i].to_string(), true, term[rest..].to_string()));
            }
            _ => i += 1,
        }
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def() -> ResourceDef {
        ResourceDef::new("", "v1", "pods", "Pod", true)
            .with_selectable_fields(&["spec.nodeName", "status.phase"])
    }

    fn pod(labels: Value) -> Attrs {
        Attrs::of(
            &def(),
            &json!({"metadata": {"name": "a,b", "namespace": "web", "labels": labels},
                   "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
        )
    }

    #[test]
    fn label_selectors_follow_the_documented_grammar() {
        let p = pod(json!({"app": "web", "tier": "front", "rank": "3"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&p);
        assert!(m(""));
        assert!(m("app=web") && m("app==web") && m("app = web"));
        assert!(!m("app!=web") && m("missing!=x"));
        assert!(m("app in (web, db),tier") && !m("app notin (web)"));
        assert!(m("missing notin (a)") && !m("missing in (a)"));
        assert!(m("!missing") && !m("!app"));
        assert!(m("rank>2") && !m("rank<3"));
        for bad in [
            "app in web",
            "a b",
            "app in ()",
            "=x",
            "app=-x",
            "-a=b",
            "a,,b",
            "rank>x",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn selector_objects_read_as_label_selector_as_selector_does() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        let m = |v: Value| LabelSelector::from_object(&v).unwrap().matches(&p);
        assert!(m(json!({})), "an empty selector matches everything");
        assert!(m(json!({"matchLabels": {"app": "web"}})));
        assert!(!m(json!({"matchLabels": {"app": "web", "tier": "back"}})));
        assert!(m(json!({"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]},
            {"key": "missing", "operator": "DoesNotExist"}]})));
        assert!(!m(
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]})
        ));
        for bad in [
            json!([]),
            json!({"matchLabels": {"app": 1}}),
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        ] {
            assert!(LabelSelector::from_object(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_take_escapes_and_refuse_unsupported_fields() {
        let p = pod(json!({}));
        let supported = def();
        let m = |s: &str| FieldSelector::parse(s, &supported).unwrap().matches(&p);
        assert!(m("spec.nodeName=n1,status.phase!=Pending"));
        assert!(m("metadata.name=a\\,b") && !m("metadata.name==a"));
        assert!(m("spec.nodeName!=n2"));
        assert!(m("metadata.namespace=web"));
        let err = FieldSelector::parse("spec.bogus=x", &supported).unwrap_err();
        assert!(
            err.to_string()
                .contains("field label not supported: spec.bogus")
        );
        assert!(FieldSelector::parse("spec.nodeName", &supported).is_err());
        assert!(FieldSelector::parse("spec.nodeName=\\q", &supported).is_err());
    }
}
