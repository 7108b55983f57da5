//! Kubernetes JSONPath, as `additionalPrinterColumns` use it: a port of
//! client-go `util/jsonpath` (`parser.go`, `jsonpath.go`) with missing keys
//! allowed, as apiextensions-apiserver's table convertor sets.
//!
//! Why not a JSONPath crate: Kubernetes' dialect is not RFC 9535, which
//! `jsonpath-rust` (already in the tree through kube-client) implements.
//! Paths have no `$` root and sit in `{}` templates; field names run to
//! the next `.`, `[`, space, … so `.metadata.labels.app-name` and
//! `.a\.b` (an escaped dot) are fields; filters are split on their
//! operator by a regular expression and compare with Go template rules
//! (an integer never equals a float); results print as Go prints them. A
//! translation to RFC 9535 would need this parser anyway, and would still
//! differ on those rules; the port is small and tested with client-go's
//! own cases.
//!
//! Not supported: `range`/`end` (meaningful only for multi-line output,
//! not a column): a path that uses them evaluates to an error, so its cell
//! is empty.

use std::borrow::Cow;

use serde_json::Value;

use eval::walk;
use parse::{MAX_TEMPLATE, Parser};

mod eval;
mod parse;

/// A parse or evaluation error (the cell becomes empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

pub(super) fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    List(Vec<Node>),
    Text(String),
    Field(String),
    Wildcard,
    Array([Param; 3]),
    Filter {
        left: Vec<Node>,
        op: String,
        right: Vec<Node>,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

/// A parsed template such as `{.status.conditions[?(@.type=="Ready")].status}`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    root: Vec<Node>,
}

impl JsonPath {
    /// Parses a template (`jsonpath.Parse`).
    pub fn parse(template: &str) -> Result<JsonPath, Error> {
        if template.len() > MAX_TEMPLATE {
            return err(format!(
                "a JSONPath template of more than {MAX_TEMPLATE} bytes"
            ));
        }
        let mut p = Parser {
            input: template,
            pos: 0,
            start: 0,
            width: 0,
            depth: 0,
        };
        Ok(JsonPath {
            root: p.parse_text()?,
        })
    }

    /// The results of each top-level node (`FindResults`), with missing
    /// keys allowed.
    pub fn find<'a>(&self, data: &'a Value) -> Result<Vec<Vec<Cow<'a, Value>>>, Error> {
        self.root
            .iter()
            .map(|node| walk(vec![Cow::Borrowed(data)], node))
            .collect()
    }

    /// The first result of the first node, as the CRD table convertor
    /// reads a column: `None` for an error or no result.
    pub fn first<'a>(&self, data: &'a Value) -> Option<Cow<'a, Value>> {
        let mut results = self.find(data).ok()?;
        if results.is_empty() || results[0].is_empty() {
            return None;
        }
        Some(results.swap_remove(0).swap_remove(0))
    }
}

/// `PrintResults` of one value: maps and lists as Go's `json.Marshal`,
/// anything else as `fmt.Print` (`<no value>` for null).
pub fn print_value(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => super::cell::go_json(v),
        Value::Null => "<no value>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => match n.as_u64() {
                Some(u) => u.to_string(),
                None => super::cell::go_print_float(n.as_f64().unwrap_or(0.0)),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn first(path: &str, data: &Value) -> Option<Value> {
        JsonPath::parse(&format!("{{{path}}}"))
            .expect("parses")
            .first(data)
            .map(Cow::into_owned)
    }

    fn store() -> Value {
        // client-go jsonpath_test.go's store data.
        json!({
            "Name": "jsonpath",
            "Book": [
                {"Category": "reference", "Author": "Nigel Rees", "Title": "Sayings of the Centurey", "Price": 8.95},
                {"Category": "fiction", "Author": "Evelyn Waugh", "Title": "Sword of Honour", "Price": 12.99},
                {"Category": "fiction", "Author": "Herman Melville", "Title": "Moby Dick", "Price": 8.99}
            ],
            "Bicycle": [
                {"Color": "red", "Price": 19.95, "IsNew": true},
                {"Color": "green", "Price": 20.01, "IsNew": false}
            ],
            "Labels": {"engineer": 10, "web/html": 15, "k8s-app": 20},
            "Employees": {"jason": "manager", "dan": "clerk"}
        })
    }

    #[test]
    fn fields_indexes_and_slices_follow_client_go() {
        let s = store();
        assert_eq!(first(".Name", &s), Some(json!("jsonpath")));
        assert_eq!(first(".Book[0].Author", &s), Some(json!("Nigel Rees")));
        assert_eq!(
            first(".Book[-1].Author", &s),
            Some(json!("Herman Melville"))
        );
        assert_eq!(first(".Book[1:].Author", &s), Some(json!("Evelyn Waugh")));
        assert_eq!(first(".Book[*].Author", &s), Some(json!("Nigel Rees")));
        assert_eq!(first(".Labels.web/html", &s), Some(json!(15)));
        assert_eq!(first(".Labels.k8s-app", &s), Some(json!(20)));
        assert_eq!(first(".Labels['web/html']", &s), Some(json!(15)));
        assert_eq!(first(".Book[2:][0].Title", &s), None, "index of a non-list");
        assert_eq!(first(".missing.deeper", &s), None);
        assert_eq!(first(".Book[7]", &s), None, "out of bounds is an error");
    }

    #[test]
    fn filters_compare_with_go_template_rules() {
        let s = store();
        assert_eq!(
            first(".Book[?(@.Price<9.0)].Title", &s),
            Some(json!("Sayings of the Centurey"))
        );
        assert_eq!(
            first(".Book[?(@.Category==\"fiction\")].Author", &s),
            Some(json!("Evelyn Waugh"))
        );
        assert_eq!(
            first(".Bicycle[?(@.IsNew==true)].Color", &s),
            Some(json!("red"))
        );
        assert_eq!(
            first(".Bicycle[?(@.IsNew)].Color", &s),
            Some(json!("red")),
            "existence"
        );
        // An integer never equals a float in Go templates: an error, no result.
        assert_eq!(first(".Labels[?(@.engineer==10.0)]", &s), None);
        let conditions = json!({"status": {"conditions": [
            {"type": "Synced", "status": "False"},
            {"type": "Ready", "status": "True"}
        ]}});
        assert_eq!(
            first(".status.conditions[?(@.type=='Ready')].status", &conditions),
            Some(json!("True"))
        );
        assert_eq!(
            first(
                ".status.conditions[?(@.type == \"Ready\")].status",
                &conditions
            ),
            Some(json!("True"))
        );
    }

    #[test]
    fn recursive_descent_unions_and_escapes_work() {
        let s = store();
        assert_eq!(first("..Author", &s), Some(json!("Nigel Rees")));
        let union = JsonPath::parse("{.Book[0,2].Author}").unwrap();
        let found = union.find(&s).unwrap();
        assert_eq!(
            found[0]
                .iter()
                .map(|v| v.as_ref().clone())
                .collect::<Vec<_>>(),
            [json!("Nigel Rees"), json!("Herman Melville")]
        );
        let dotted = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"}}});
        assert_eq!(
            first(r".metadata.labels.app\.kubernetes\.io/name", &dotted),
            Some(json!("web"))
        );
    }

    #[test]
    fn bad_paths_fail_to_parse() {
        for bad in [
            "{.a",
            "{.a[0}",
            "{.a[?(@.b==1}",
            "{.a[x]}",
            "{.a..  ..b}",
            "{#}",
        ] {
            assert!(JsonPath::parse(bad).is_err(), "{bad} should not parse");
        }
        assert!(JsonPath::parse("{.spec.replicas}").is_ok());
    }

    #[test]
    fn huge_paths_are_refused() {
        let long = format!("{{{}}}", ".a".repeat(3000));
        assert!(JsonPath::parse(&long).is_err());
        assert!(JsonPath::parse("{.a[?(@.c==1)].d}").is_ok());
    }

    #[test]
    fn range_is_not_a_column_and_gives_no_result() {
        let p = JsonPath::parse("{range .items[*]}{.name}{end}").unwrap();
        assert!(p.first(&json!({"items": [{"name": "a"}]})).is_none());
    }

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(print_value(&json!("x")), "x");
        assert_eq!(print_value(&json!(3)), "3");
        assert_eq!(print_value(&json!(1.5)), "1.5");
        assert_eq!(print_value(&json!(true)), "true");
        assert_eq!(print_value(&Value::Null), "<no value>");
        assert_eq!(
            print_value(&json!({"b": 1, "a": [2]})),
            r#"{"a":[2],"b":1}"#
        );
    }
}
