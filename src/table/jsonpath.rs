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

use serde_json::{Number, Value};

/// A parse or evaluation error (the cell becomes empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

fn err<T>(msg: impl Into<String>) -> Result<T, Error> {
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

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    width: usize,
    /// Nesting of filters and unions, each parsed as its own action.
    depth: usize,
}

/// Longest template parsed: column paths are short, and this bounds the
/// work one CRD can cause.
const MAX_TEMPLATE: usize = 4096;
/// Deepest nesting of filters and unions: parsing recurses per level.
const MAX_DEPTH: usize = 16;

const EOF: Option<char> = None;

impl<'a> Parser<'a> {
    fn consume_text(&mut self) -> &'a str {
        let value = &self.input[self.start..self.pos];
        self.start = self.pos;
        value
    }

    fn next(&mut self) -> Option<char> {
        match self.input[self.pos..].chars().next() {
            None => {
                self.width = 0;
                EOF
            }
            Some(c) => {
                self.width = c.len_utf8();
                self.pos += self.width;
                Some(c)
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        let r = self.next();
        self.backup();
        r
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    /// The byte two before `pos` (the one before the rune just read).
    fn escaped(&self) -> bool {
        self.pos >= 2 && self.input.as_bytes()[self.pos - 2] == b'\\'
    }

    fn parse_text(&mut self) -> Result<Vec<Node>, Error> {
        let mut root = Vec::new();
        loop {
            if self.input[self.pos..].starts_with('{') {
                if self.pos > self.start {
                    root.push(Node::Text(self.consume_text().to_string()));
                }
                // parseLeftDelim
                self.pos += 1;
                self.consume_text();
                let mut action = Vec::new();
                self.parse_inside_action(&mut action)?;
                root.push(Node::List(action));
                continue;
            }
            if self.next() == EOF {
                break;
            }
        }
        if self.pos > self.start {
            root.push(Node::Text(self.consume_text().to_string()));
        }
        Ok(root)
    }

    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            let rest = &self.input[self.pos..];
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume_text();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                self.parse_recursive(cur)?;
                continue;
            }
            match self.next() {
                None | Some('\r') | Some('\n') => return err("unclosed action"),
                Some(' ') | Some('@') | Some('$') => {
                    self.consume_text();
                }
                Some('[') => self.parse_array(cur)?,
                Some(q @ ('"' | '\'')) => self.parse_quote(cur, q)?,
                Some('.') => self.parse_field(cur),
                Some(c) if c == '+' || c == '-' || c.is_ascii_digit() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                Some(c) if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(cur);
                }
                Some(c) => {
                    return err(format!(
                        "unrecognized character in action: U+{:04X} {c:?}",
                        c as u32
                    ));
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) {
        loop {
            let r = self.next();
            if is_terminator(r) {
                self.backup();
                break;
            }
        }
        match self.consume_text() {
            "true" => cur.push(Node::Bool(true)),
            "false" => cur.push(Node::Bool(false)),
            other => cur.push(Node::Identifier(other.to_string())),
        }
    }

    fn parse_recursive(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        if matches!(cur.last(), Some(Node::Recursive)) {
            return err("invalid multiple recursive descent");
        }
        self.pos += 2;
        self.consume_text();
        cur.push(Node::Recursive);
        if self.peek().is_some_and(is_alphanumeric) {
            self.parse_field(cur);
        }
        Ok(())
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        loop {
            match self.next() {
                Some(c) if c == '.' || c.is_ascii_digit() => {}
                _ => {
                    self.backup();
                    break;
                }
            }
        }
        let value = self.consume_text();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
        } else if let Ok(f) = value.parse::<f64>() {
            cur.push(Node::Float(f));
        } else {
            return err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated array"),
                Some(']') => break,
                _ => {}
            }
        }
        let text = self.consume_text();
        let mut text = &text[1..text.len() - 1];
        if text == "*" {
            text = ":";
        }
        // union operator
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let union = parts
                .iter()
                .map(|part| parse_action(&format!("[{}]", part.trim_matches(' ')), self.depth))
                .collect::<Result<Vec<_>, _>>()?;
            cur.push(Node::Union(union));
            return Ok(());
        }
        // dict key: ['name']
        if text.len() >= 2
            && text.starts_with('\'')
            && text.ends_with('\'')
            && !text[1..text.len() - 1].contains('\'')
        {
            cur.extend(parse_action(
                &format!(".{}", &text[1..text.len() - 1]),
                self.depth,
            )?);
            return Ok(());
        }
        cur.push(Node::Array(slice_params(text)?));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), Error> {
        self.pos += 3;
        self.consume_text();
        let mut begin = false;
        let mut end = false;
        let mut pair = '\0';
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated filter"),
                Some(q @ ('"' | '\'')) => {
                    if !begin {
                        begin = true;
                        pair = q;
                        continue;
                    }
                    if !self.escaped() && q == pair {
                        end = true;
                    }
                }
                Some(')') if begin == end => break,
                _ => {}
            }
        }
        if self.next() != Some(']') {
            return err("unclosed array expect ]");
        }
        let text = self.consume_text();
        let text = &text[..text.len() - 2];
        match split_filter(text) {
            None => cur.push(Node::Filter {
                left: parse_action(text, self.depth)?,
                op: "exists".to_string(),
                right: Vec::new(),
            }),
            Some((left, op, right)) => cur.push(Node::Filter {
                left: parse_action(left, self.depth)?,
                op: op.to_string(),
                right: parse_action(right, self.depth)?,
            }),
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), Error> {
        loop {
            match self.next() {
                None | Some('\n') => return err("unterminated quoted string"),
                Some(c) if c == end && !self.escaped() => break,
                _ => {}
            }
        }
        let value = self.consume_text();
        let s = unquote(value).ok_or_else(|| Error(format!("unquote string {value} error")))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume_text();
        while self.advance() {}
        let value = self.consume_text();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }

    /// Scans to the next non-escaped terminator.
    fn advance(&mut self) -> bool {
        let r = self.next();
        if r == Some('\\') {
            self.next();
        } else if is_terminator(r) {
            self.backup();
            return false;
        }
        true
    }
}

/// `parseAction`: the nodes of `{text}`.
fn parse_action(text: &str, depth: usize) -> Result<Vec<Node>, Error> {
    if depth >= MAX_DEPTH {
        return err(format!(
            "filters or unions nested more than {MAX_DEPTH} deep"
        ));
    }
    let mut p = Parser {
        input: &format!("{{{text}}}"),
        pos: 0,
        start: 0,
        width: 0,
        depth: depth + 1,
    }
    .parse_text()?;
    match p.first_mut() {
        Some(Node::List(nodes)) => Ok(std::mem::take(nodes)),
        _ => err(format!("invalid action {text}")),
    }
}

/// The regular expression `^([^!<>=]+)([!<>=]+)(.+?)$` on a filter.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let op_len = text[op_start..]
        .find(|c: char| !is_op(c))
        .unwrap_or(text.len() - op_start);
    let right = &text[op_start + op_len..];
    if right.is_empty() || right.contains('\n') {
        return None;
    }
    Some((&text[..op_start], &text[op_start..op_start + op_len], right))
}

/// The slice operator `^(-?\d*)(:-?\d*)?(:-?\d*)?$` and its parameters.
fn slice_params(text: &str) -> Result<[Param; 3], Error> {
    let invalid = || Error(format!("invalid array index {text}"));
    let mut groups = text.splitn(3, ':');
    let first = groups.next().unwrap_or("");
    let values: [Option<&str>; 3] = [Some(first), groups.next(), groups.next()];
    let number_like = |s: &str| {
        let digits = s.strip_prefix('-').unwrap_or(s);
        digits.bytes().all(|b| b.is_ascii_digit())
    };
    if !values.iter().flatten().all(|s| number_like(s)) {
        return Err(invalid());
    }
    let mut params = [Param {
        value: 0,
        known: false,
        derived: false,
    }; 3];
    for i in 0..3 {
        // Group 1 is always present (maybe empty); groups 2 and 3 exist
        // when their colon does (then without it).
        match values[i] {
            Some(v) if !(i == 0 && v.is_empty()) => {
                if i > 0 && v.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = v
                        .parse()
                        .map_err(|_| Error(format!("array index {v} is not a number")))?;
                }
            }
            _ => {
                if i == 1 {
                    params[1] = Param {
                        value: params[0].value + 1,
                        known: true,
                        derived: true,
                    };
                }
            }
        }
    }
    Ok(params)
}

/// `UnquoteExtend`: Go's string unquoting, for single quotes too.
fn unquote(s: &str) -> Option<String> {
    let quote = s.chars().next()?;
    if s.len() < 2 || !s.ends_with(quote) || !matches!(quote, '"' | '\'') {
        return None;
    }
    let body = &s[1..s.len() - 1];
    if !body.contains('\\') && !body.contains(quote) {
        return Some(body.to_string());
    }
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = (0..n).filter_map(|_| chars.next()).collect();
                if hex.len() != n {
                    return None;
                }
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            '0'..='7' => {
                let mut v = e.to_digit(8)?;
                for _ in 0..2 {
                    v = v * 8 + chars.next()?.to_digit(8)?;
                }
                if v > 255 {
                    return None;
                }
                out.push(char::from_u32(v)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn is_terminator(r: Option<char>) -> bool {
    match r {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

// Evaluation (jsonpath.go `walk` and the `eval*` functions).

type Values<'a> = Vec<Cow<'a, Value>>;

fn walk<'a>(input: Values<'a>, node: &Node) -> Result<Values<'a>, Error> {
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
