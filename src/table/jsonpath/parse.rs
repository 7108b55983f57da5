//! The parser: client-go `util/jsonpath/parser.go`, node for node.

use super::{Error, Node, Param, err};

pub(super) struct Parser<'a> {
    pub(super) input: &'a str,
    pub(super) pos: usize,
    pub(super) start: usize,
    pub(super) width: usize,
    /// Nesting of filters and unions, each parsed as its own action.
    pub(super) depth: usize,
}

/// Longest template parsed: column paths are short, and this bounds the
/// work one CRD can cause.
pub(super) const MAX_TEMPLATE: usize = 4096;
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

    pub(super) fn parse_text(&mut self) -> Result<Vec<Node>, Error> {
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
