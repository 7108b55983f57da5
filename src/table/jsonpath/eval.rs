//! Evaluation: client-go `util/jsonpath/jsonpath.go` (`walk`, the
//! `eval*` functions) with missing keys allowed, and the comparisons of its
//! forked Go template package (`Equal`, `Less`).

use std::borrow::Cow;

use serde_json::{Number, Value};

use super::{Error, Node, Param, err};

type Values<'a> = Vec<Cow<'a, Value>>;

pub(super) fn walk<'a>(input: Values<'a>, node: &Node) -> Result<Values<'a>, Error> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(s) => Ok(vec![Cow::Owned(Value::String(s.clone()))]),
        Node::Field(name) => Ok(eval_field(input, name)),
        Node::Array(params) => eval_array(input, params),
        Node::Filter { left, op, right } => eval_filter(input, left, op, right),
        Node::Int(i) => Ok(input
            .iter()
            .map(|_| Cow::Owned(Value::Number((*i).into())))
            .collect()),
        Node::Float(f) => Ok(input
            .iter()
            .map(|_| Cow::Owned(Number::from_f64(*f).map_or(Value::Null, Value::Number)))
            .collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
        Node::Wildcard => Ok(eval_wildcard(input)),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(lists) => {
            let mut result = Vec::new();
            for list in lists {
                result.extend(eval_list(input.clone(), list)?);
            }
            Ok(result)
        }
        Node::Identifier(name) => err(format!("unsupported identifier {name}")),
    }
}

fn eval_list<'a>(input: Values<'a>, nodes: &[Node]) -> Result<Values<'a>, Error> {
    nodes.iter().try_fold(input, walk)
}

/// Go's `template.Indirect`: JSON null is nil.
fn is_nil(v: &Value) -> bool {
    v.is_null()
}

fn child<'a>(v: &Cow<'a, Value>, f: impl Fn(&Value) -> Option<&Value>) -> Option<Cow<'a, Value>> {
    match v {
        Cow::Borrowed(v) => f(v).map(Cow::Borrowed),
        Cow::Owned(v) => f(v).cloned().map(Cow::Owned),
    }
}

/// The elements of a container: object values, list items, string bytes.
fn children<'a>(v: &Cow<'a, Value>) -> Values<'a> {
    match v {
        Cow::Borrowed(v) => borrowed_children(v),
        Cow::Owned(v) => borrowed_children(v)
            .into_iter()
            .map(|c| Cow::Owned(c.into_owned()))
            .collect(),
    }
}

fn borrowed_children(v: &Value) -> Values<'_> {
    match v {
        Value::Object(map) => map.values().map(Cow::Borrowed).collect(),
        Value::Array(items) => items.iter().map(Cow::Borrowed).collect(),
        Value::String(s) => s
            .bytes()
            .map(|b| Cow::Owned(Value::Number(b.into())))
            .collect(),
        _ => Vec::new(),
    }
}

fn eval_field<'a>(input: Values<'a>, name: &str) -> Values<'a> {
    // With missing keys allowed, a field nobody has is no result.
    input
        .iter()
        .filter(|v| !is_nil(v))
        .filter_map(|v| child(v, |v| v.as_object()?.get(name)))
        .collect()
}

fn eval_array<'a>(input: Values<'a>, params: &[Param; 3]) -> Result<Values<'a>, Error> {
    let mut result = Vec::new();
    for value in &input {
        if is_nil(value) {
            continue;
        }
        let Some(items) = value.as_array() else {
            return err(format!("{value} is not array or slice"));
        };
        let len = items.len() as i64;
        let mut p = *params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            // "if you're requesting zero elements, allow it through"
            return Ok(result);
        }
        if p[0].value >= len || p[0].value < 0 {
            return err(format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            ));
        }
        if p[1].value > len || p[1].value < 0 {
            return err(format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            ));
        }
        if p[0].value > p[1].value {
            return err(format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            ));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return err("step must be > 0");
            }
            p[2].value as usize
        } else {
            1
        };
        for i in (p[0].value as usize..p[1].value as usize).step_by(step) {
            if let Some(item) = child(value, |v| v.as_array()?.get(i)) {
                result.push(item);
            }
        }
    }
    Ok(result)
}

fn eval_wildcard<'a>(input: Values<'a>) -> Values<'a> {
    input
        .iter()
        .filter(|v| !is_nil(v))
        .flat_map(children)
        .collect()
}

fn eval_recursive<'a>(input: Values<'a>) -> Values<'a> {
    let mut result = Vec::new();
    for value in input {
        if is_nil(&value) {
            continue;
        }
        let kids = children(&value);
        if !kids.is_empty() {
            result.push(value);
            result.extend(eval_recursive(kids));
        }
    }
    result
}

fn eval_filter<'a>(
    input: Values<'a>,
    left: &[Node],
    op: &str,
    right: &[Node],
) -> Result<Values<'a>, Error> {
    let mut results = Vec::new();
    for value in &input {
        if !value.is_array() {
            return err(format!(
                "{value} is not array or slice and cannot be filtered"
            ));
        }
        for item in children(value) {
            let lefts = eval_list(vec![item.clone()], left);
            if op == "exists" {
                if lefts.is_ok_and(|l| !l.is_empty()) {
                    results.push(item);
                }
                continue;
            }
            let lefts = lefts?;
            let left = match lefts.as_slice() {
                [] => continue,
                [one] => one,
                _ => return err("can only compare one element at a time"),
            };
            let rights = eval_list(vec![item.clone()], right)?;
            let right = match rights.as_slice() {
                [] => continue,
                [one] => one,
                _ => return err("can only compare one element at a time"),
            };
            let pass = match op {
                "<" => less(left, right)?,
                ">" => !less_equal(left, right)?,
                "==" => equal(left, right)?,
                "!=" => !equal(left, right)?,
                "<=" => less_equal(left, right)?,
                ">=" => !less(left, right)?,
                _ => return err(format!("unrecognized filter operator {op}")),
            };
            if pass {
                results.push(item);
            }
        }
    }
    Ok(results)
}

/// Go template's basic kinds of an unstructured value.
#[derive(Debug, PartialEq)]
enum Basic<'v> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'v str),
}

fn basic(v: &Value) -> Result<Basic<'_>, Error> {
    match v {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        // Unstructured JSON holds int64 where the number is one, else float64.
        Value::Number(n) => Ok(n
            .as_i64()
            .map_or_else(|| Basic::Float(n.as_f64().unwrap_or(0.0)), Basic::Int)),
        Value::String(s) => Ok(Basic::Str(s)),
        _ => err("invalid type for comparison"),
    }
}

/// `template.Equal`.
fn equal(a: &Value, b: &Value) -> Result<bool, Error> {
    match (basic(a)?, basic(b)?) {
        (Basic::Bool(x), Basic::Bool(y)) => Ok(x == y),
        (Basic::Int(x), Basic::Int(y)) => Ok(x == y),
        (Basic::Float(x), Basic::Float(y)) => Ok(x == y),
        (Basic::Str(x), Basic::Str(y)) => Ok(x == y),
        _ => err("incompatible types for comparison"),
    }
}

/// `template.Less`.
fn less(a: &Value, b: &Value) -> Result<bool, Error> {
    match (basic(a)?, basic(b)?) {
        (Basic::Int(x), Basic::Int(y)) => Ok(x < y),
        (Basic::Float(x), Basic::Float(y)) => Ok(x < y),
        (Basic::Str(x), Basic::Str(y)) => Ok(x < y),
        (Basic::Bool(_), Basic::Bool(_)) => err("invalid type for comparison"),
        _ => err("incompatible types for comparison"),
    }
}

/// `template.LessEqual`.
fn less_equal(a: &Value, b: &Value) -> Result<bool, Error> {
    if less(a, b)? {
        return Ok(true);
    }
    equal(a, b)
}
