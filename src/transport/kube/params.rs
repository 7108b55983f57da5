//! Query parameters of the Kubernetes face, validated like kube-apiserver
//! validates them. Unknown parameters are refused, so a client relying on
//! something kubefan does not implement learns it at once.

use std::time::Duration;

use actix_web::web;

use crate::hub::scope::parse_rv;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;

/// Parameters accepted and ignored: they do not change what is returned.
const IGNORED: &[&str] = &["pretty", "timeout"];

/// A watch without `timeoutSeconds`, or with 0, ends after this long, as
/// kube-apiserver's `--min-request-timeout` (1800 s) bounds it.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// The longest a watch stays open, whatever its `timeoutSeconds`: a year.
/// Past it a client has long since reconnected for other reasons
/// (kube-apiserver's own clients ask for 5 to 10 minutes), and it keeps
/// every deadline computed from a client's number far inside what
/// `Instant` can represent.
pub const MAX_WATCH_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Default)]
pub struct KubeQuery {
    pub watch: bool,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    label_selector: String,
    field_selector: String,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    /// kube-apiserver's `ListOptions.TimeoutSeconds`, an int64; see
    /// [`KubeQuery::watch_timeout`].
    pub timeout_seconds: Option<i64>,
    /// What a table row's `object` holds (read only for `as=Table`).
    pub include_object: Option<String>,
}

fn boolean(key: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "" | "true" | "1" | "True" => Ok(true),
        "false" | "0" | "False" => Ok(false),
        _ => Err(ApiError::BadRequest(format!(
            "{key}={value:?} is not a boolean"
        ))),
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str, what: &str) -> Result<T, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("{key}={value:?} is not {what}")))
}

impl KubeQuery {
    pub fn parse(query: &str) -> Result<KubeQuery, ApiError> {
        let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?
            .into_inner();
        let mut q = KubeQuery::default();
        for (key, value) in pairs {
            match key.as_str() {
                "watch" => q.watch = boolean(&key, &value)?,
                "resourceVersion" => q.resource_version = Some(value).filter(|v| !v.is_empty()),
                "resourceVersionMatch" => match value.as_str() {
                    "" => {}
                    "NotOlderThan" | "Exact" => q.resource_version_match = Some(value),
                    other => {
                        return Err(ApiError::Status(
                            422,
                            "Invalid",
                            format!(
                                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                            ),
                        ));
                    }
                },
                "limit" => {
                    q.limit = Some(number::<usize>(&key, &value, "a non-negative integer")?)
                        .filter(|l| *l > 0)
                }
                "continue" => q.continue_token = Some(value).filter(|v| !v.is_empty()),
                "labelSelector" => q.label_selector = value,
                "fieldSelector" => q.field_selector = value,
                "allowWatchBookmarks" => q.allow_bookmarks = boolean(&key, &value)?,
                "sendInitialEvents" => q.send_initial_events = Some(boolean(&key, &value)?),
                "timeoutSeconds" => {
                    q.timeout_seconds = Some(number(&key, &value, "a 64-bit integer")?)
                }
                "includeObject" => q.include_object = Some(value),
                k if IGNORED.contains(&k) => {}
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "unsupported query parameter {other:?} on kubefan's read-only Kubernetes API"
                    )));
                }
            }
        }
        Ok(q)
    }

    /// How long a watch lasts, from `timeoutSeconds` as kube-apiserver
    /// reads it (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`,
    /// `ListResource`: `time.Duration(*opts.TimeoutSeconds) * time.Second`,
    /// 0 replaced by the default, then `context.WithTimeout`):
    /// - unset or 0: [`DEFAULT_WATCH_TIMEOUT`];
    /// - negative: zero, a deadline already passed: the watch ends at once,
    ///   a 200 with an empty body;
    /// - positive: that many seconds, capped at [`MAX_WATCH_TIMEOUT`].
    ///   (Go's multiplication wraps above 9,223,372,036 s, so upstream's
    ///   answer to such values is arbitrary; kubefan's is the cap.)
    pub fn watch_timeout(&self) -> Duration {
        match self.timeout_seconds {
            None | Some(0) => DEFAULT_WATCH_TIMEOUT,
            Some(s) if s < 0 => Duration::ZERO,
            Some(s) => Duration::from_secs(s.unsigned_abs()).min(MAX_WATCH_TIMEOUT),
        }
    }

    /// Adds `metadata.name=NAME` to the field selector (a watch of one
    /// object by its path).
    pub fn select_name(&mut self, name: &str) -> Result<(), ApiError> {
        // Object names never hold a selector's separators (DNS labels and
        // subdomains, path segments).
        if name.contains([',', '=', '!', '\\']) {
            return Err(ApiError::BadRequest(format!(
                "{name:?} is not a valid object name"
            )));
        }
        let name = format!("metadata.name={name}");
        self.field_selector = if self.field_selector.is_empty() {
            name
        } else {
            format!("{name},{}", self.field_selector)
        };
        Ok(())
    }

    pub fn label_selector(&self) -> Result<LabelSelector, ApiError> {
        LabelSelector::parse(&self.label_selector).map_err(|e| ApiError::BadRequest(e.0))
    }

    /// Parses `fieldSelector`, accepting the fields Kubernetes supports for
    /// the resource.
    pub fn field_selector(&self, selectable: &[&str]) -> Result<FieldSelector, ApiError> {
        let fields: Vec<String> = selectable.iter().map(|f| f.to_string()).collect();
        FieldSelector::parse(&self.field_selector, &fields).map_err(|e| ApiError::BadRequest(e.0))
    }

    /// `resourceVersion` as a number; `None` for unset, "" and 0 (`00`
    /// included, as kube-apiserver reads it as the number 0). Decimal
    /// digits only, as Go's `strconv.ParseUint` reads them.
    pub fn resource_version_number(&self) -> Result<Option<u64>, ApiError> {
        match self.resource_version.as_deref() {
            None => Ok(None),
            Some(v) => parse_rv(v)
                .map(|rv| Some(rv).filter(|rv| *rv != 0))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "resourceVersion {v:?} is not a valid resourceVersion"
                    ))
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_kube_clients_send() {
        let q = KubeQuery::parse(
            "watch=1&resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=290&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1",
        )
        .unwrap();
        assert!(q.watch && q.allow_bookmarks);
        assert_eq!(q.resource_version_number().unwrap(), Some(42));
        assert_eq!(q.timeout_seconds, Some(290));
        assert!(q.label_selector().is_ok());
        assert!(q.field_selector(&["spec.nodeName"]).is_ok());
        assert!(
            q.field_selector(&[]).is_err(),
            "spec.nodeName is not selectable everywhere"
        );
        let q = KubeQuery::parse("limit=500&continue=abc&pretty=true").unwrap();
        assert_eq!(q.limit, Some(500));
        assert_eq!(q.continue_token.as_deref(), Some("abc"));
    }

    #[test]
    fn refuses_what_it_does_not_implement() {
        for bad in [
            "watch=maybe",
            "limit=-1",
            "resourceVersionMatch=Newest",
            "dryRun=All",
            "labelSelector=a%20b",
        ] {
            let q = KubeQuery::parse(bad);
            let err = q.and_then(|q| q.label_selector().map(|_| ())).unwrap_err();
            assert!(
                matches!(err, ApiError::BadRequest(_) | ApiError::Status(422, ..)),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn resource_versions_are_decimal_digits_and_zero_in_any_spelling_is_unset() {
        let rv = |v: &str| {
            KubeQuery::parse(&format!("resourceVersion={v}"))
                .unwrap()
                .resource_version_number()
        };
        assert_eq!(rv("42").unwrap(), Some(42));
        assert_eq!(rv("0").unwrap(), None);
        assert_eq!(rv("000").unwrap(), None);
        assert_eq!(rv("18446744073709551615").unwrap(), Some(u64::MAX));
        // `+5`, ` 5` and an Arabic-Indic three, percent-encoded.
        for bad in [
            "%2B5",
            "-1",
            "%205",
            "18446744073709551616",
            "1e3",
            "%D9%A3",
        ] {
            assert!(matches!(rv(bad), Err(ApiError::BadRequest(_))), "{bad:?}");
        }
    }

    #[test]
    fn timeout_seconds_is_an_int64_and_a_watch_lasts_at_most_a_year() {
        let timeout = |query: &str| KubeQuery::parse(query).map(|q| q.watch_timeout());
        // The panic this once was: 2^63 seconds added to an Instant.
        assert!(matches!(
            timeout("timeoutSeconds=9223372036854775808"),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            timeout("timeoutSeconds=1.5"),
            Err(ApiError::BadRequest(_))
        ));
        let longest = timeout("timeoutSeconds=9223372036854775807").unwrap();
        assert_eq!(longest, MAX_WATCH_TIMEOUT);
        assert!(tokio::time::Instant::now().checked_add(longest).is_some());
        assert_eq!(
            timeout("timeoutSeconds=-9223372036854775808").unwrap(),
            Duration::ZERO,
            "a negative timeout has already passed"
        );
        assert_eq!(timeout("timeoutSeconds=-1").unwrap(), Duration::ZERO);
        assert_eq!(timeout("timeoutSeconds=0").unwrap(), DEFAULT_WATCH_TIMEOUT);
        assert_eq!(timeout("").unwrap(), DEFAULT_WATCH_TIMEOUT);
    }
}
