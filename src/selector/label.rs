//! Label selectors: the full Kubernetes grammar, and their normal form.

use serde_json::Value;

use super::{Error, check_len};

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

    /// A label every match must have, and the values it may take there:
    /// the first `key=value`, `key==value` or `key in (values)`
    /// requirement. An object without that label, or with another value,
    /// matches nothing (what the hub dispatches events by, `hub::pin`).
    pub fn pinned(&self) -> Option<(&str, Vec<&str>)> {
        self.0.iter().find_map(|r| match &r.op {
            Op::Eq(value) => Some((r.key.as_str(), vec![value.as_str()])),
            Op::In(set) if !set.is_empty() => {
                Some((r.key.as_str(), set.iter().map(String::as_str).collect()))
            }
            _ => None,
        })
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
/// stays within [`MAX_SELECTOR_LEN`](super::MAX_SELECTOR_LEN)).
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
