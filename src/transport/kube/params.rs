//! Query parameters of the Kubernetes face, validated like kube-apiserver
//! validates them. Unknown parameters are refused, so a client relying on
//! something kubefan does not implement learns it at once.
//!
//! Every number a client sends is read here and bounded before anything
//! uses it: `limit` and `timeoutSeconds` as kube-apiserver decodes them
//! (a value that is not an integer of their type is 400), `resourceVersion`
//! as decimal digits, and a watch's timeout capped at
//! [`MAX_WATCH_TIMEOUT`], so no deadline computed from it can overflow.
//! [`KubeQuery::plan`] is everything a LIST or WATCH decides from its query
//! before it touches a hub; `kubefan::fuzzing` runs it on arbitrary input.

use std::time::Duration;

use actix_web::web;

use super::list::Token;
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

#[derive(Debug, Default, PartialEq)]
pub struct KubeQuery {
    pub watch: bool,
    pub resource_version: Option<String>,
    /// As sent (non-empty); [`KubeQuery::plan`] checks its value.
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

/// What a LIST or WATCH asks for, decided from its query alone: the
/// selectors, the position, the `continue` token and, for a watch, how
/// long it lasts. Nothing here has touched a hub yet.
#[derive(Debug)]
pub struct Plan {
    /// The query, checked.
    pub query: KubeQuery,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `resourceVersion` as a number; `None` for unset, empty, and 0.
    pub resource_version: Option<u64>,
    /// A LIST's `continue` token (a watch ignores it, as kube-apiserver's
    /// does).
    pub continued: Option<Token>,
    /// How long a WATCH lasts (never more than [`MAX_WATCH_TIMEOUT`]).
    pub timeout: Duration,
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

/// One `field.Error` of apimachinery, as its `Error()` prints it.
fn forbidden(field: &str, detail: &str) -> String {
    format!("{field}: Forbidden: {detail}")
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> String {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "{field}: Unsupported value: {value:?}: supported values: {}",
        supported.join(", ")
    )
}

/// 422 `Invalid` with every violation, as `field.ErrorList.ToAggregate()`
/// prints them: the one message, or `[first, second]`.
fn invalid(errs: Vec<String>) -> Result<(), ApiError> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(ApiError::Status(422, "Invalid", errs.concat())),
        _ => Err(ApiError::Status(
            422,
            "Invalid",
            format!("[{}]", errs.join(", ")),
        )),
    }
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
                "resourceVersionMatch" => {
                    q.resource_version_match = Some(value).filter(|v| !v.is_empty())
                }
                // An int64, as `metav1.ListOptions.Limit`; zero or less is no
                // limit, as kube-apiserver's storage reads it (`GetList` in
                // `k8s.io/apiserver/pkg/storage/etcd3/store.go`: `paging :=
                // opts.Predicate.Limit > 0`).
                "limit" => {
                    let limit = number::<i64>(&key, &value, "a 64-bit integer")?;
                    q.limit = (limit > 0).then(|| usize::try_from(limit).unwrap_or(usize::MAX));
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

    /// What a request for `name` (a single object, when set) asks for:
    /// the selectors (400 when they do not parse; a watch of one object
    /// by its path is narrowed to its name), then, for a LIST or WATCH,
    /// the options checked as kube-apiserver checks them (422), the
    /// position and the `continue` token (400).
    pub fn plan(mut self, name: Option<&str>, selectable: &[&str]) -> Result<Plan, ApiError> {
        if let (Some(name), true) = (name, self.watch) {
            self.select_name(name)?;
        }
        let labels = self.label_selector()?;
        let fields = self.field_selector(selectable)?;
        // A GET of one object reads GetOptions, which have none of these.
        let collection = name.is_none() || self.watch;
        if collection {
            self.validate()?;
        }
        let continued = match &self.continue_token {
            Some(token) if collection && !self.watch => Some(Token::parse(token)?),
            _ => None,
        };
        let resource_version = self.resource_version_number()?;
        // A continued list is read at its first page's position: asking
        // for another is refused, as kube-apiserver's storage refuses it
        // (`k8s.io/apiserver/pkg/storage/etcd3/store.go`, `GetList`; "0"
        // and empty are unset, as there).
        if continued.is_some() && resource_version.is_some() {
            return Err(ApiError::BadRequest(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        Ok(Plan {
            labels,
            fields,
            resource_version,
            continued,
            timeout: self.watch_timeout(),
            query: self,
        })
    }

    /// kube-apiserver's `ValidateListOptions`
    /// (`staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go`):
    /// 422 `Invalid` with every violation. For a watch, `sendInitialEvents`
    /// counts as given only when true (kubefan serves `false` as an
    /// ordinary watch), and `allowWatchBookmarks` is required with it, as
    /// kube-apiserver's watch cache requires it once the options are
    /// valid.
    fn validate(&self) -> Result<(), ApiError> {
        const MATCH: &str = "resourceVersionMatch";
        let mut errs = Vec::new();
        let matching = self.resource_version_match.as_deref();
        if self.watch {
            let initial = self.send_initial_events == Some(true);
            if initial && matching != Some("NotOlderThan") {
                errs.push(forbidden(
                    MATCH,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = matching {
                if !initial {
                    errs.push(forbidden(
                        MATCH,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    errs.push(not_supported(MATCH, m, &["NotOlderThan"]));
                }
                if self.continue_token.is_some() {
                    errs.push(forbidden(
                        MATCH,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            invalid(errs)?;
            if initial && !self.allow_bookmarks {
                return invalid(vec![forbidden(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                )]);
            }
            return Ok(());
        }
        if let Some(m) = matching {
            if self.resource_version.is_none() {
                errs.push(forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if self.continue_token.is_some() {
                errs.push(forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(not_supported(MATCH, m, &["Exact", "NotOlderThan", ""]));
            }
            if m == "Exact" && self.resource_version.as_deref() == Some("0") {
                errs.push(forbidden(
                    MATCH,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        invalid(errs)
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

    /// The object a list or watch names, as kube-apiserver's `RequestInfo`
    /// reads it for authorization: its field selector requires
    /// `metadata.name=NAME`, and NAME could be a path segment
    /// (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`:
    /// `RequiresExactMatch("metadata.name")`, `IsPathSegmentName`). `None`
    /// when the selector does not parse: the request is authorized as a
    /// collection, then refused with 400.
    pub fn selected_name(&self, selectable: &[&str]) -> Option<String> {
        let selector = self.field_selector(selectable).ok()?;
        let name = selector.requires_exact("metadata.name")?;
        let segment = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']);
        segment.then(|| name.to_owned())
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

    /// This query as the key/value pairs it was parsed from, spelled so
    /// that they parse back to it (parameters that change nothing left
    /// out).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs: Vec<(&'static str, String)> = Vec::new();
        if self.watch {
            pairs.push(("watch", "true".into()));
        }
        let optional = [
            ("resourceVersion", &self.resource_version),
            ("resourceVersionMatch", &self.resource_version_match),
            ("continue", &self.continue_token),
            ("includeObject", &self.include_object),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                pairs.push((key, v.clone()));
            }
        }
        if let Some(limit) = self.limit {
            pairs.push(("limit", limit.to_string()));
        }
        if !self.label_selector.is_empty() {
            pairs.push(("labelSelector", self.label_selector.clone()));
        }
        if !self.field_selector.is_empty() {
            pairs.push(("fieldSelector", self.field_selector.clone()));
        }
        if self.allow_bookmarks {
            pairs.push(("allowWatchBookmarks", "true".into()));
        }
        if let Some(send) = self.send_initial_events {
            pairs.push(("sendInitialEvents", send.to_string()));
        }
        if let Some(t) = self.timeout_seconds {
            pairs.push(("timeoutSeconds", t.to_string()));
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::query_string;

    fn invalid_message(query: &str) -> String {
        match KubeQuery::parse(query).and_then(|q| q.plan(None, &[])) {
            Err(ApiError::Status(422, "Invalid", message)) => message,
            other => panic!("{query}: {other:?}"),
        }
    }

    #[test]
    fn parses_what_kube_clients_send() {
        let q = KubeQuery::parse(
            "watch=1&resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=290&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1",
        )
        .unwrap();
        assert!(q.watch && q.allow_bookmarks);
        assert_eq!(q.resource_version_number().unwrap(), Some(42));
        assert_eq!(q.timeout_seconds, Some(290));
        assert_eq!(q.watch_timeout(), Duration::from_secs(290));
        assert!(q.label_selector().is_ok());
        assert!(q.field_selector(&["spec.nodeName"]).is_ok());
        assert!(
            q.field_selector(&[]).is_err(),
            "spec.nodeName is not selectable everywhere"
        );
        let q = KubeQuery::parse("limit=500&continue=abc&pretty=true").unwrap();
        assert_eq!(q.limit, Some(500));
        // Zero or less is no limit, as kube-apiserver reads it.
        for none in ["limit=0", "limit=-1", "limit=-9223372036854775808"] {
            assert_eq!(KubeQuery::parse(none).unwrap().limit, None, "{none}");
        }
        assert_eq!(q.continue_token.as_deref(), Some("abc"));
    }

    #[test]
    fn refuses_what_it_does_not_implement() {
        for bad in [
            "watch=maybe",
            "limit=ten",
            "resourceVersionMatch=Newest&resourceVersion=1",
            "dryRun=All",
            "labelSelector=a%20b",
        ] {
            let err = KubeQuery::parse(bad)
                .and_then(|q| q.plan(None, &[]))
                .unwrap_err();
            assert!(
                matches!(err, ApiError::BadRequest(_) | ApiError::Status(422, ..)),
                "{bad}: {err}"
            );
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

    #[test]
    fn list_options_are_validated_like_kube_apiserver() {
        for send in ["true", "false"] {
            assert_eq!(
                invalid_message(&format!("sendInitialEvents={send}")),
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
            );
        }
        assert_eq!(
            invalid_message("resourceVersionMatch=NotOlderThan"),
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        assert_eq!(
            invalid_message("resourceVersionMatch=Exact&resourceVersion=0"),
            "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
        );
        assert_eq!(
            invalid_message("resourceVersionMatch=Newest&resourceVersion=3"),
            "resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        );
        // Every violation, as apimachinery aggregates them.
        assert_eq!(
            invalid_message("resourceVersionMatch=Exact&continue=x&sendInitialEvents=1"),
            "[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, \
             resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, \
             sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
        );
        // A GET of one object does not read list options.
        let get = KubeQuery::parse("sendInitialEvents=true").unwrap();
        assert!(get.plan(Some("a"), &[]).is_ok());
    }

    #[test]
    fn watch_options_are_validated_like_kube_apiserver() {
        assert_eq!(
            invalid_message("watch=1&sendInitialEvents=true&allowWatchBookmarks=1"),
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        );
        assert_eq!(
            invalid_message("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
            "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"
        );
        assert_eq!(
            invalid_message("watch=1&resourceVersionMatch=Exact"),
            "[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided, \
             resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]"
        );
        let q = KubeQuery::parse(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1&continue=x",
        )
        .unwrap();
        assert!(matches!(q.plan(None, &[]), Err(ApiError::Status(422, ..))));
        let q = KubeQuery::parse(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=1",
        )
        .unwrap();
        assert!(q.plan(None, &[]).is_ok());
    }

    #[test]
    fn a_continued_list_takes_no_resource_version_but_zero() {
        let token = format!("{}.1", "ab".repeat(16));
        let plan = |rv: &str| {
            KubeQuery::parse(&format!("limit=1&continue={token}{rv}"))
                .unwrap()
                .plan(None, &[])
        };
        match plan("&resourceVersion=5") {
            Err(ApiError::BadRequest(m)) => assert_eq!(
                m,
                "specifying resource version is not allowed when using continue"
            ),
            other => panic!("{other:?}"),
        }
        for unset in ["", "&resourceVersion=0", "&resourceVersion="] {
            assert!(plan(unset).unwrap().continued.is_some(), "{unset:?}");
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
    fn a_query_s_pairs_parse_back_to_it() {
        let q = KubeQuery::parse(
            "watch=1&resourceVersion=7&resourceVersionMatch=NotOlderThan&limit=3&continue=a%2Bb&labelSelector=a%20in%20(x)&fieldSelector=metadata.name%3Dn&allowWatchBookmarks=1&sendInitialEvents=false&timeoutSeconds=-4&includeObject=None",
        )
        .unwrap();
        assert_eq!(KubeQuery::parse(&query_string(&q.pairs())).unwrap(), q);
    }
}
