//! Table cells and their JSON, spelled as Go spells them.
//!
//! A cell is a string, an integer, a float, a boolean or null
//! (`metav1.TableRow.cells`). Floats go through Go's formatting rules, not
//! Rust's: `encoding/json` for cell values (`5` for 5.0, `1e+21`), and
//! `fmt.Print` (`%v`, `1e+06`) where a JSONPath result is printed as text.
//! The same module holds Go's `encoding/json` spelling of a whole value,
//! which a string column shows for a map or a list.

use serde_json::Value;

/// One cell of a table row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
}

impl From<String> for Cell {
    fn from(s: String) -> Cell {
        Cell::Str(s)
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Cell {
        Cell::Str(s.to_string())
    }
}

impl From<i64> for Cell {
    fn from(i: i64) -> Cell {
        Cell::Int(i)
    }
}

impl From<bool> for Cell {
    fn from(b: bool) -> Cell {
        Cell::Bool(b)
    }
}

impl Cell {
    /// Appends the cell as JSON.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Cell::Str(s) => write_json_string(s, out),
            Cell::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
            Cell::Float(f) => out.extend_from_slice(go_json_float(*f).as_bytes()),
            Cell::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Cell::Null => out.extend_from_slice(b"null"),
        }
    }

    /// The cell as a JSON value (for tests and callers that build values).
    pub fn to_value(&self) -> Value {
        let mut out = Vec::new();
        self.write_json(&mut out);
        // Every arm above writes one valid JSON value.
        serde_json::from_slice(&out).unwrap_or(Value::Null)
    }
}

/// A JSON string literal with serde_json's escaping.
pub(super) fn write_json_string(s: &str, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// The shortest decimal digits of `f` and its exponent: `f = 0.d1d2… × 10^(exp+1)`,
/// i.e. `d1.d2… × 10^exp`. `f` must be finite.
fn shortest_digits(f: f64) -> (bool, String, i32) {
    // `{:e}` gives the shortest round-tripping digits, as Go's
    // strconv.FormatFloat(f, _, -1, 64) does.
    let s = format!("{:e}", f.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    (
        f.is_sign_negative(),
        digits,
        exp.parse::<i32>().unwrap_or(0),
    )
}

/// `%e` with shortest digits: `d.ddde±XX` (at least two exponent digits).
fn go_e(neg: bool, digits: &str, exp: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    s
}

/// `%f` with shortest digits.
fn go_f(neg: bool, digits: &str, exp: i32) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        s.push_str(digits);
    } else if point as usize >= digits.len() {
        s.push_str(digits);
        s.extend(std::iter::repeat_n('0', point as usize - digits.len()));
    } else {
        s.push_str(&digits[..point as usize]);
        s.push('.');
        s.push_str(&digits[point as usize..]);
    }
    s
}

/// Go's `fmt.Print` of a float64 (`%v`: `%g` with the shortest digits,
/// exponent form when the decimal exponent is below -4 or at least 6).
pub(super) fn go_print_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    let (neg, digits, exp) = shortest_digits(f);
    // strconv's %g: "%e is used if the exponent from the conversion is
    // less than -4 or greater than or equal to the precision. if precision
    // was the shortest possible, use precision 6 for this decision."
    if (-4..6).contains(&exp) {
        go_f(neg, &digits, exp)
    } else {
        go_e(neg, &digits, exp)
    }
}

/// Go's `encoding/json` spelling of a float64: `%f` between 1e-6 and 1e21,
/// `%e` outside, with `e-07` shortened to `e-7`.
pub(super) fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        // encoding/json refuses these; JSON input cannot hold them.
        return "null".to_string();
    }
    let abs = f.abs();
    let (neg, digits, exp) = shortest_digits(f);
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = go_e(neg, &digits, exp);
        // "clean up e-09 to e-9"
        let n = s.len();
        let b = s.as_bytes();
        if n >= 4 && b[n - 4] == b'e' && b[n - 3] == b'-' && b[n - 2] == b'0' {
            return format!("{}{}", &s[..n - 2], &s[n - 1..]);
        }
        return s;
    }
    go_f(neg, &digits, exp)
}

/// Go's `json.Marshal` of an unstructured value: sorted keys, no spaces,
/// `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub(super) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    go_json_into(v, &mut out);
    out
}

fn go_json_into(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&go_json_float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_into(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                go_json_into(&map[k], out);
            }
            out.push('}');
        }
    }
}

fn go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (f, want) in [
            (0.0, "0"),
            (1.5, "1.5"),
            (100000.0, "100000"),
            (123456.0, "123456"),
            (1000000.0, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
        ] {
            assert_eq!(go_print_float(f), want, "{f}");
        }
    }

    #[test]
    fn floats_encode_as_go_json_encodes_them() {
        for (f, want) in [
            (5.0, "5"),
            (1.5, "1.5"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (-0.5, "-0.5"),
        ] {
            assert_eq!(go_json_float(f), want, "{f}");
        }
    }

    #[test]
    fn values_marshal_as_go_marshals_them() {
        let v = json!({"b": [1, 2.5, "x<y"], "a": {"z": null, "t": true}});
        assert_eq!(
            go_json(&v),
            r#"{"a":{"t":true,"z":null},"b":[1,2.5,"x\u003cy"]}"#
        );
    }

    #[test]
    fn cells_write_json() {
        let mut out = Vec::new();
        for cell in [
            Cell::from("a\"b"),
            Cell::Int(-3),
            Cell::Float(5.0),
            Cell::Bool(true),
            Cell::Null,
        ] {
            cell.write_json(&mut out);
            out.push(b' ');
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"a\\\"b\" -3 5 true null "
        );
    }
}
