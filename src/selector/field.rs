//! Field selectors: `=`, `==`, `!=` on declared fields, with
//! apimachinery's escaping, and their normal form.

use std::borrow::Cow;

use serde_json::Value;

use super::{Error, check_len, field_text, valid_path};

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

    /// The value `field` must equal for anything to match, if the
    /// selector requires one (its first `field=VALUE` term), as
    /// apimachinery's `Selector.RequiresExactMatch` reads it.
    pub fn requires_exact(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equal && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// A field every match must have equal to one value, among those
    /// `readable` accepts: the first such `field=value` term, as
    /// (field, value). A missing field reads as "" (see
    /// [`FieldSelector::matches_with`]), so a pin on "" holds for
    /// objects without the field.
    pub fn pinned(&self, readable: impl Fn(&str) -> bool) -> Option<(&str, &str)> {
        self.0
            .iter()
            .find(|r| r.equal && readable(&r.field))
            .map(|r| (r.field.as_str(), r.value.as_str()))
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
