//! Reads the text form of the IR back (what [`super::print`] writes), so passes can be
//! tested on small hand-written graphs: `tests/passes/*.ir`.
//!
//! This file reads the lines; each op and its attributes are read by [`Op::parse`], made
//! from the op table as the printer is. Constants must be written with their values
//! (`{value = [..]}`); the `// ...` comments are read back as names (`"name"`) and
//! origins (`from ...`).

use super::*;
use crate::error::{Error, Result};

/// Parses a whole `graph NAME { ... }`.
pub fn parse(text: &str) -> Result<Graph> {
    // Numbered before comments and blank lines are dropped: errors name the text's line.
    let mut lines = text.lines().map(str::trim).enumerate().filter(|(_, l)| !l.is_empty() && !l.starts_with("//"));
    let err = |n: usize, msg: String| Error::user(format!("IR line {}: {msg}", n + 1));
    let (n0, head) = lines.next().ok_or_else(|| Error::user("empty IR text".to_string()))?;
    let name = head
        .strip_prefix("graph ")
        .and_then(|h| h.strip_suffix('{'))
        .map(str::trim)
        .ok_or_else(|| err(n0, format!("expected `graph NAME {{`, got `{head}`")))?;
    let mut g = Graph::new(name);
    for (n, line) in lines {
        if line == "}" {
            return Ok(g);
        }
        let loss = line.starts_with("loss ");
        if let Some(rest) = line.strip_prefix("output ").or_else(|| line.strip_prefix("loss ")) {
            let (out_name, value) = rest.split_once(" = ").ok_or_else(|| err(n, "expected `output \"NAME\" = %N` or `loss \"NAME\" = %N`".into()))?;
            let out_name: String = serde_json::from_str(out_name).map_err(|e| err(n, format!("output name: {e}")))?;
            let value = value_id(value).ok_or_else(|| err(n, format!("bad value `{value}`")))?;
            g.outputs.push(Output { name: out_name, value, loss });
            continue;
        }
        node(&mut g, line).map_err(|m| err(n, m))?;
    }
    Err(Error::user("IR text ends without `}`".to_string()))
}

fn value_id(s: &str) -> Option<ValueId> {
    s.trim().trim_end_matches(',').strip_prefix('%')?.parse().ok().map(ValueId)
}

fn node(g: &mut Graph, line: &str) -> Result<(), String> {
    let (code, comment) = match line.split_once("  // ") {
        Some((c, m)) => (c.trim(), Some(m)),
        None => (line, None),
    };
    let (lhs, rhs) = code.split_once(" = ").ok_or("expected `%N = op ...`")?;
    let id = value_id(lhs).ok_or(format!("bad value `{lhs}`"))?;
    if id.index() != g.nodes.len() {
        return Err(format!("values must be numbered in order: expected %{}, got %{}", g.nodes.len(), id.0));
    }
    let (body, ty) = rhs.rsplit_once(" : ").ok_or("expected ` : TYPE` at the end")?;
    let ty = parse_type(ty)?;
    let (before_attrs, attrs) = match body.find(" {") {
        Some(i) => (&body[..i], body[i + 2..].strip_suffix('}').ok_or("unclosed `{`")?),
        None => (body, ""),
    };
    let mut words = before_attrs.splitn(2, ' ');
    let opname = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim();
    let mut name = None;
    let args: Vec<ValueId> = if matches!(opname, "input" | "param") {
        name = Some(serde_json::from_str::<String>(rest).map_err(|e| format!("name: {e}"))?);
        Vec::new()
    } else if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(", ").map(|a| value_id(a).ok_or(format!("bad argument `{a}`"))).collect::<Result<_, _>>()?
    };
    let op = Op::parse(&mut ParseCx { op: opname, attrs, ty: &ty, graph: g })?;
    let v = g.push(op, args, ty);
    let n = &mut g.nodes[v.index()];
    n.name = name;
    // `// "name", from origin`, `// "name"` or `// from origin`.
    if let Some(c) = comment {
        let (named, origin) = match c.strip_prefix("from ") {
            Some(o) => (None, Some(o)),
            None => match c.find("\", from ") {
                Some(i) => (Some(&c[..=i]), Some(&c[i + 8..])),
                None => (Some(c), None),
            },
        };
        if let Some(nm) = named {
            n.name = Some(serde_json::from_str(nm).map_err(|e| format!("name in comment: {e}"))?);
        }
        n.origin = origin.map(str::to_string);
    }
    Ok(())
}

/// `key = value` inside `{...}`; values may hold brackets with commas.
pub(crate) fn find_attr<'a>(attrs: &'a str, key: &str) -> Option<&'a str> {
    let mut depth = 0;
    let mut start = 0;
    let bytes = attrs.as_bytes();
    for i in 0..=attrs.len() {
        let end = i == attrs.len();
        let c = if end { b',' } else { bytes[i] };
        match c {
            b'[' | b'(' => depth += 1,
            b']' | b')' => depth -= 1,
            b',' if depth == 0 => {
                let item = attrs[start..i].trim();
                if let Some((k, v)) = item.split_once(" = ") {
                    if k == key {
                        return Some(v.trim());
                    }
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

pub(super) fn items(s: &str) -> Result<Vec<&str>, String> {
    let inner = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')).ok_or(format!("expected a list, got `{s}`"))?;
    Ok(if inner.trim().is_empty() { Vec::new() } else { split_top(inner) })
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out
}

// The program's text form (`lower::parse`) writes these lists as the IR does.
pub(crate) fn list_f64(s: &str) -> Result<Vec<f64>, String> {
    Attr::parse(s)
}

pub(crate) fn list_u64(s: &str) -> Result<Vec<u64>, String> {
    Attr::parse(s)
}

pub(crate) fn pairs(s: &str) -> Result<Vec<(u64, u64)>, String> {
    Attr::parse(s)
}

/// `f32[2, B, 4]`.
pub fn parse_type(s: &str) -> Result<TensorType, String> {
    let s = s.trim();
    let open = s.find('[').ok_or(format!("bad type `{s}`"))?;
    let dtype = Dtype::from_name(&s[..open]).ok_or(format!("bad element type in `{s}`"))?;
    let dims = items(&s[open..])?.into_iter().map(|d| Dim::parse(&d)).collect::<Result<_, _>>()?;
    Ok(TensorType::new(dtype, Shape(dims)))
}
