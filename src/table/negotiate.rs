//! Content negotiation of the Kubernetes face: what an `Accept` header and
//! `includeObject` ask for, decided as kube-apiserver decides it.
//!
//! Ported from k8s.io/apiserver `pkg/endpoints/handlers/negotiation`
//! (`NegotiateMediaTypeOptions`, `acceptMediaTypeOptions`), the request
//! scope's `AllowsMediaTypeTransform` (`handlers/rest.go`), and
//! `optionsForTransform` (`handlers/response.go`), with `Accept` parsed as
//! github.com/munnerz/goautoneg `ParseAccept` parses it:
//!
//! - clauses are tried by quality, then specificity (`*/*` last), in the
//!   header's order otherwise; the first one kubefan can serve wins;
//! - kubefan serves `application/json` only, so `application/json`,
//!   `application/*` and `*/*` match, with their parameters: `as`, `g`,
//!   `v` ask for a conversion, `stream` must be `watch`, `sv` must be `v1`,
//!   `pretty=1` asks for indentation, others are ignored;
//! - a conversion is served only to `Table`, `PartialObjectMetadata` or
//!   `PartialObjectMetadataList` of `meta.k8s.io/v1` or `v1beta1`; a clause
//!   asking for anything else is skipped like an unknown media type;
//! - when no clause can be served: 406 `NotAcceptable`, "only the
//!   following media types are accepted: application/json" (the list is
//!   what kubefan serves; kube-apiserver names its own serializers).
//!
//! kubectl sends `application/json;as=Table;v=v1;g=meta.k8s.io,
//! application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json`,
//! so a Table of an unknown version still falls back to plain JSON there.
//!
//! One deliberate difference: a header with no parsable clause at all
//! (`Accept: garbage`) is served JSON, as if it were absent, where
//! kube-apiserver answers 406. Only the first 64 clauses are read (the
//! sort is quadratic, as goautoneg's is for short headers).

use super::Error;
use super::cell::go_json;

/// The group version of a converted output (`meta.k8s.io/v1` or `v1beta1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    /// The `apiVersion` of objects in this version.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// What a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// The resource's own JSON: the list, the object, or watch events of
    /// objects.
    Json,
    /// A `Table` (`kubectl get`).
    Table(MetaVersion),
    /// Each object as `PartialObjectMetadata` (client-go's metadata
    /// informers ask for this on watches).
    PartialObjectMetadata(MetaVersion),
    /// A list as `PartialObjectMetadataList` (metadata informers' lists).
    PartialObjectMetadataList(MetaVersion),
}

impl Output {
    /// Checks the output fits the request: `PartialObjectMetadata` of a
    /// list, or `PartialObjectMetadataList` of one object, is 406 as in
    /// apiserver `handlers/response.go` (`asPartialObjectMetadata`,
    /// `asPartialObjectMetadataList`; kubefan's message leaves out the Go
    /// type name upstream appends).
    pub fn check(self, is_list: bool) -> Result<Output, Error> {
        match self {
            Output::PartialObjectMetadata(_) if is_list => Err(Error::NotAcceptable(
                "you requested PartialObjectMetadata, but the requested object is a list"
                    .to_string(),
            )),
            Output::PartialObjectMetadataList(_) if !is_list => Err(Error::NotAcceptable(
                "you requested PartialObjectMetadataList, but the requested object is not a list"
                    .to_string(),
            )),
            other => Ok(other),
        }
    }

    /// What each event of a watch carries: objects cannot become a
    /// `PartialObjectMetadataList`, and kube-apiserver then sends them
    /// unconverted (`watchEmbeddedEncoder.doEncode` logs the failed
    /// transform and encodes the object).
    pub fn for_watch_events(self) -> Output {
        match self {
            Output::PartialObjectMetadataList(_) => Output::Json,
            other => other,
        }
    }
}

/// The negotiated response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub output: Output,
    /// `pretty=1` on the chosen clause.
    pub pretty: bool,
}

/// The only media type kubefan serves.
const ACCEPTED: &str = "application/json";
/// Clauses read from one header.
const MAX_CLAUSES: usize = 64;

/// One clause of `Accept`, as goautoneg parses it.
#[derive(Debug, Clone, PartialEq)]
struct Clause<'a> {
    kind: &'a str,
    sub: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

/// goautoneg `ParseAccept`: clauses with a `type/subtype` (or `*`), their
/// quality and parameters, sorted.
fn parse_accept(header: &str) -> Vec<Clause<'_>> {
    let mut clauses = Vec::new();
    for part in header.split(',').take(MAX_CLAUSES) {
        let part = part.trim_matches(' ');
        let mut pieces = part.split(';');
        let range = pieces.next().unwrap_or("");
        let sp: Vec<&str> = range.split('/').collect();
        let kind = sp[0].trim_matches(' ');
        let sub = match sp.len() {
            1 if kind == "*" => "*",
            2 => sp[1].trim_matches(' '),
            _ => continue,
        };
        let mut clause = Clause {
            kind,
            sub,
            q: 1.0,
            params: Vec::new(),
        };
        for param in pieces {
            let Some((token, value)) = param.split_once('=') else {
                continue;
            };
            let token = token.trim_matches(' ');
            if token == "q" {
                // strconv.ParseFloat(v, 32); an error gives 0.
                clause.q = value.parse::<f32>().map_or(0.0, f64::from);
            } else {
                clause.params.push((token, value.trim_matches(' ')));
            }
        }
        clauses.push(clause);
    }
    // sort.Sort is an insertion sort for short slices: replicate it with
    // goautoneg's Less so equal clauses keep the header's order.
    let less = |a: &Clause, b: &Clause| {
        a.q > b.q || (a.kind != "*" && b.kind == "*") || (a.sub != "*" && b.sub == "*")
    };
    for i in 1..clauses.len() {
        let mut j = i;
        while j > 0 && less(&clauses[j], &clauses[j - 1]) {
            clauses.swap(j, j - 1);
            j -= 1;
        }
    }
    clauses
}

/// `acceptMediaTypeOptions` for kubefan's one serializer, then
/// `AllowsMediaTypeTransform`: the output, or `None` to skip the clause.
fn accept_options(params: &[(&str, &str)]) -> Option<Negotiated> {
    let (mut kind, mut group, mut version) = (None, "", "");
    let mut pretty = false;
    for (k, v) in params {
        match *k {
            "as" => kind = Some(*v),
            "g" => group = v,
            "v" => version = v,
            "stream" if !v.is_empty() && *v != "watch" => return None,
            "sv" if !v.is_empty() && *v != "v1" => return None,
            "pretty" => pretty = *v == "1",
            _ => {}
        }
    }
    // Any of as/g/v asks for a conversion, even with the others missing.
    let converts = kind.is_some() || params.iter().any(|(k, _)| *k == "g" || *k == "v");
    if !converts {
        return Some(Negotiated {
            output: Output::Json,
            pretty,
        });
    }
    let version = match (group, version) {
        ("meta.k8s.io", "v1") => MetaVersion::V1,
        ("meta.k8s.io", "v1beta1") => MetaVersion::V1beta1,
        _ => return None,
    };
    let output = match kind.unwrap_or("") {
        "Table" => Output::Table(version),
        "PartialObjectMetadata" => Output::PartialObjectMetadata(version),
        "PartialObjectMetadataList" => Output::PartialObjectMetadataList(version),
        _ => return None,
    };
    Some(Negotiated { output, pretty })
}

/// Negotiates the response to a request with this `Accept` header.
pub fn negotiate(accept: Option<&str>) -> Result<Negotiated, Error> {
    let json = Negotiated {
        output: Output::Json,
        pretty: false,
    };
    let header = match accept {
        None | Some("") => return Ok(json),
        Some(h) => h,
    };
    let clauses = parse_accept(header);
    if clauses.is_empty() {
        // Nothing parsable: served as if absent (see the module docs).
        return Ok(json);
    }
    for c in &clauses {
        let matches = (c.kind == "application" && (c.sub == "json" || c.sub == "*"))
            || (c.kind == "*" && c.sub == "*");
        if matches && let Some(n) = accept_options(&c.params) {
            return Ok(n);
        }
    }
    Err(Error::NotAcceptable(format!(
        "only the following media types are accepted: {ACCEPTED}"
    )))
}

/// `includeObject`: what a table row's `object` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IncludeObject {
    /// `null`.
    None,
    /// The object's metadata as `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (its first value), as
    /// `optionsForTransform` validates it: anything but `None`, `Metadata`,
    /// `Object` or empty is 400.
    pub fn parse(value: Option<&str>) -> Result<IncludeObject, Error> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(Error::BadRequest(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {}: must be 'Metadata', 'Object', 'None', or empty",
                go_json(&serde_json::Value::String(other.to_string()))
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECTL: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    fn output(accept: &str) -> Result<Output, Error> {
        negotiate(Some(accept)).map(|n| n.output)
    }

    #[test]
    fn kubectl_gets_a_v1_table() {
        assert_eq!(output(KUBECTL), Ok(Output::Table(MetaVersion::V1)));
    }

    #[test]
    fn table_versions_and_plain_json_negotiate() {
        assert_eq!(negotiate(None).unwrap().output, Output::Json);
        assert_eq!(output(""), Ok(Output::Json));
        assert_eq!(output("application/json"), Ok(Output::Json));
        assert_eq!(output("*/*"), Ok(Output::Json));
        assert_eq!(output("application/*"), Ok(Output::Json));
        assert_eq!(
            output("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
            Ok(Output::Table(MetaVersion::V1beta1))
        );
        assert_eq!(
            output("application/json;g=meta.k8s.io;v=v1;as=Table"),
            Ok(Output::Table(MetaVersion::V1)),
            "parameter order does not matter"
        );
        assert_eq!(
            output("*/*;as=Table;v=v1;g=meta.k8s.io"),
            Ok(Output::Table(MetaVersion::V1))
        );
    }

    #[test]
    fn unknown_table_version_or_group_is_not_acceptable() {
        let want = Err(Error::NotAcceptable(
            "only the following media types are accepted: application/json".to_string(),
        ));
        assert_eq!(output("application/json;as=Table;v=v2;g=meta.k8s.io"), want);
        assert_eq!(output("application/json;as=Table;v=v1;g=example.com"), want);
        assert_eq!(output("application/json;as=Table"), want);
        assert_eq!(output("application/json;as=Pod;v=v1;g=meta.k8s.io"), want);
        assert_eq!(output("application/yaml"), want);
        assert_eq!(output("application/vnd.kubernetes.protobuf"), want);
        assert_eq!(output("application/json;stream=other"), want);
        let e = want.clone().unwrap_err();
        assert_eq!((e.code(), e.reason()), (406, "NotAcceptable"));
    }

    #[test]
    fn unknown_table_version_falls_back_to_a_later_clause() {
        assert_eq!(
            output("application/json;as=Table;v=v2;g=meta.k8s.io,application/json"),
            Ok(Output::Json)
        );
        assert_eq!(
            output("application/vnd.kubernetes.protobuf,application/json"),
            Ok(Output::Json)
        );
    }

    #[test]
    fn unparsable_accept_falls_back_to_json() {
        assert_eq!(output("garbage"), Ok(Output::Json));
        assert_eq!(output(",,;;"), Ok(Output::Json));
        assert_eq!(output("a/b/c"), Ok(Output::Json));
    }

    #[test]
    fn quality_and_specificity_order_clauses() {
        assert_eq!(
            output("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io"),
            Ok(Output::Table(MetaVersion::V1))
        );
        assert_eq!(
            output("*/*;as=Table;v=v1;g=meta.k8s.io,application/json"),
            Ok(Output::Json),
            "*/* sorts after a specific type"
        );
        assert!(negotiate(Some("application/json;pretty=1")).unwrap().pretty);
    }

    #[test]
    fn partial_object_metadata_negotiates_and_checks_the_request() {
        let list = output(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
        )
        .unwrap();
        assert_eq!(list, Output::PartialObjectMetadataList(MetaVersion::V1));
        assert!(list.check(true).is_ok());
        assert!(matches!(list.check(false), Err(Error::NotAcceptable(_))));
        assert_eq!(list.for_watch_events(), Output::Json);
        let one = output("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").unwrap();
        assert!(matches!(one.check(true), Err(Error::NotAcceptable(_))));
        assert_eq!(one.check(false), Ok(one));
    }

    #[test]
    fn include_object_defaults_to_metadata_and_refuses_unknown_values() {
        assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("")), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Ok(IncludeObject::Object)
        );
        let e = IncludeObject::parse(Some("All")).unwrap_err();
        assert_eq!(
            e,
            Error::BadRequest(
                "Unable to convert to Table as requested: includeObject: Invalid value: \"All\": must be 'Metadata', 'Object', 'None', or empty"
                    .to_string()
            )
        );
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"));
    }
}
