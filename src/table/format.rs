//! How kube-apiserver's printers spell values: ages, label maps, label
//! selectors, container lists, truncated lists.
//!
//! Each function ports one upstream helper and names it:
//! apimachinery `pkg/util/duration` (`HumanDuration`), `pkg/labels`
//! (`FormatLabels`, `Requirement.String`), `pkg/apis/meta/v1`
//! (`LabelSelectorAsSelector`, `FormatLabelSelector`), and the helpers of
//! kubernetes `pkg/printers/internalversion/printers.go`
//! (`translateTimestampSince`, `layoutContainerCells`, `listWithMoreString`).

use std::time::SystemTime;

use serde_json::Value;
use time::OffsetDateTime;

use super::read::{at, list_at, str_at, string_map};

/// The time a table is printed at. Ages and "ago" cells are relative to it.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    now: OffsetDateTime,
}

impl Clock {
    pub fn new(now: SystemTime) -> Clock {
        Clock { now: now.into() }
    }

    pub const fn at(now: OffsetDateTime) -> Clock {
        Clock { now }
    }

    pub(super) fn now(&self) -> OffsetDateTime {
        self.now
    }

    /// `translateTimestampSince`: `<unknown>` for the zero time, else the
    /// human duration since `t`.
    pub(super) fn since(&self, t: Option<OffsetDateTime>) -> String {
        match t {
            None => "<unknown>".to_string(),
            Some(t) => human_duration((self.now - t).whole_nanoseconds()),
        }
    }
}

const SECOND: i128 = 1_000_000_000;
const MINUTE: i128 = 60 * SECOND;
const HOUR: i128 = 60 * MINUTE;

/// apimachinery `duration.HumanDuration` of a Go duration in nanoseconds:
/// about two significant figures, `<invalid>` for more than a second in the
/// future (clock skew of up to 2 s counts as now).
pub(super) fn human_duration(nanos: i128) -> String {
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{}h", hours / 24, h);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{}d", hours / 24 / 365, dy);
    }
    format!("{}y", hours / 24 / 365)
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, comma-separated;
/// `<none>` when empty.
pub(super) fn format_labels(v: &Value, path: &[&str]) -> String {
    let mut pairs = string_map(v, path);
    if pairs.is_empty() {
        return "<none>".to_string();
    }
    pairs.sort_unstable();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What `metav1.LabelSelectorAsSelector` makes of a `LabelSelector`.
pub(super) enum Selector {
    /// A nil selector: `labels.Nothing()`, printed as `""`.
    Nothing,
    /// An empty one: `labels.Everything()`, printed as `""`.
    Everything,
    /// Requirements sorted by key, each already spelled.
    Requirements(Vec<(String, String)>),
}

impl Selector {
    /// `selector.String()`.
    pub(super) fn spell(&self) -> String {
        match self {
            Selector::Nothing | Selector::Everything => String::new(),
            Selector::Requirements(reqs) => reqs
                .iter()
                .map(|(_, s)| s.as_str())
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// `metav1.LabelSelectorAsSelector` of the selector at `path`; `Err` where
/// upstream returns an error (an unknown operator, a requirement
/// `labels.NewRequirement` refuses).
pub(super) fn label_selector(v: &Value, path: &[&str]) -> Result<Selector, ()> {
    let Some(sel) = at(v, path).filter(|s| s.is_object()) else {
        return Ok(Selector::Nothing);
    };
    let match_labels = string_map(sel, &["matchLabels"]);
    let exprs = list_at(sel, &["matchExpressions"]);
    if match_labels.is_empty() && exprs.is_empty() {
        return Ok(Selector::Everything);
    }
    let mut reqs = Vec::with_capacity(match_labels.len() + exprs.len());
    for (k, v) in match_labels {
        reqs.push((k.to_string(), requirement(k, "=", &[v])?));
    }
    for expr in exprs {
        let key = str_at(expr, &["key"]);
        let values: Vec<&str> = list_at(expr, &["values"])
            .iter()
            .map(|v| v.as_str().unwrap_or(""))
            .collect();
        let op = match str_at(expr, &["operator"]) {
            "In" => "in",
            "NotIn" => "notin",
            "Exists" => "exists",
            "DoesNotExist" => "!",
            _ => return Err(()),
        };
        reqs.push((key.to_string(), requirement(key, op, &values)?));
    }
    // internalSelector.Add sorts by key.
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Selector::Requirements(reqs))
}

/// `labels.NewRequirement` checks, then `Requirement.String`.
fn requirement(key: &str, op: &str, values: &[&str]) -> Result<String, ()> {
    if !valid_label_key(key) || !values.iter().all(|v| valid_label_value(v)) {
        return Err(());
    }
    match op {
        "=" if values.len() == 1 => Ok(format!("{key}={}", values[0])),
        "in" | "notin" if !values.is_empty() => {
            let mut sorted = values.to_vec();
            sorted.sort_unstable();
            Ok(format!("{key} {op} ({})", sorted.join(",")))
        }
        "exists" if values.is_empty() => Ok(key.to_string()),
        "!" if values.is_empty() => Ok(format!("!{key}")),
        _ => Err(()),
    }
}

/// `metav1.FormatLabelSelector`: `<error>` for a selector upstream cannot
/// convert, `<none>` when it prints empty.
pub(super) fn format_label_selector(v: &Value, path: &[&str]) -> String {
    match label_selector(v, path) {
        Err(()) => "<error>".to_string(),
        Ok(sel) => {
            let s = sel.spell();
            if s.is_empty() {
                "<none>".to_string()
            } else {
                s
            }
        }
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at
/// most 63 characters (apimachinery `validation.IsQualifiedName`).
fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && name.len() <= 63 && qualified_chars(name)
}

/// A label value: empty, or at most 63 characters of the name alphabet.
fn valid_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && qualified_chars(value))
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn qualified_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `layoutContainerCells`: container names and images, comma-separated.
pub(super) fn container_cells(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// `listWithMoreString`: the first entries, `+ N more...` past them, and
/// `<unset>` for none.
pub(super) fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", count - max);
    }
    if ret.is_empty() {
        return "<unset>".to_string();
    }
    ret
}

/// `printBoolPtr`: `True`, `False`, or `<unset>`.
pub(super) fn bool_ptr(b: Option<bool>) -> String {
    match b {
        Some(true) => "True".to_string(),
        Some(false) => "False".to_string(),
        None => "<unset>".to_string(),
    }
}

/// Go's `net.JoinHostPort`: brackets around hosts that contain a colon.
pub(super) fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const S: i128 = SECOND;

    // Cases of apimachinery duration_test.go TestHumanDuration and the
    // printers' TestTranslateTimestampSince.
    #[test]
    fn human_duration_matches_apimachinery() {
        let cases: &[(i128, &str)] = &[
            (-2_100_000_000, "<invalid>"),
            (-1_900_000_000, "0s"),
            (0, "0s"),
            (S, "1s"),
            (30 * S, "30s"),
            (119 * S, "119s"),
            (2 * MINUTE, "2m"),
            (2 * MINUTE + 30 * S, "2m30s"),
            (5 * MINUTE, "5m"),
            (9 * MINUTE + 59 * S, "9m59s"),
            (10 * MINUTE, "10m"),
            (100 * MINUTE, "100m"),
            (179 * MINUTE, "179m"),
            (3 * HOUR, "3h"),
            (7 * HOUR + 59 * MINUTE, "7h59m"),
            (8 * HOUR, "8h"),
            (47 * HOUR, "47h"),
            (48 * HOUR, "2d"),
            (48 * HOUR + HOUR, "2d1h"),
            (8 * 24 * HOUR, "8d"),
            (90 * 24 * HOUR, "90d"),
            (2 * 365 * 24 * HOUR, "2y"),
            (2 * 365 * 24 * HOUR + 24 * HOUR, "2y1d"),
            (8 * 365 * 24 * HOUR, "8y"),
            (10 * 365 * 24 * HOUR, "10y"),
        ];
        for (nanos, want) in cases {
            assert_eq!(human_duration(*nanos), *want, "{nanos}ns");
        }
    }

    #[test]
    fn labels_print_sorted_or_none() {
        let v = json!({"l": {"b": "2", "a": "1"}, "e": {}});
        assert_eq!(format_labels(&v, &["l"]), "a=1,b=2");
        assert_eq!(format_labels(&v, &["e"]), "<none>");
        assert_eq!(format_labels(&v, &["missing"]), "<none>");
    }

    #[test]
    fn label_selectors_print_as_selector_string() {
        let v = json!({"s": {
            "matchLabels": {"tier": "web", "app": "x"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "gone", "operator": "DoesNotExist"},
                {"key": "has", "operator": "Exists"},
                {"key": "zone", "operator": "NotIn", "values": ["b"]}
            ]
        }});
        assert_eq!(
            format_label_selector(&v, &["s"]),
            "app=x,env in (dev,prod),!gone,has,tier=web,zone notin (b)"
        );
        assert_eq!(format_label_selector(&v, &["none"]), "<none>");
        assert_eq!(format_label_selector(&json!({"s": {}}), &["s"]), "<none>");
        let bad = json!({"s": {"matchExpressions": [{"key": "k", "operator": "Near"}]}});
        assert_eq!(format_label_selector(&bad, &["s"]), "<error>");
        let empty_in = json!({"s": {"matchExpressions": [{"key": "k", "operator": "In"}]}});
        assert!(label_selector(&empty_in, &["s"]).is_err());
        let bad_key = json!({"s": {"matchLabels": {"-k": "v"}}});
        assert!(label_selector(&bad_key, &["s"]).is_err());
    }

    #[test]
    fn label_keys_follow_qualified_name_rules() {
        assert!(valid_label_key("app.kubernetes.io/name"));
        assert!(valid_label_key("a"));
        assert!(!valid_label_key("Bad_Prefix/name"));
        assert!(!valid_label_key("/name"));
        assert!(!valid_label_key(&"a".repeat(64)));
        assert!(valid_label_value(""));
        assert!(!valid_label_value("-x"));
    }

    #[test]
    fn host_ports_bracket_ipv6() {
        assert_eq!(join_host_port("1.2.3.4", 80), "1.2.3.4:80");
        assert_eq!(join_host_port("2001:db8::1", 443), "[2001:db8::1]:443");
    }
}
