//! Reads the text form of a [`Program`] back (what [`super::print`] writes), so program
//! passes can be tested on small hand-written programs (`tests/passes/*.prog`) and every
//! printed program can be checked to read back as itself. Errors name the line.
//!
//! Lines before `program NAME {` and comments other than a kernel's origins and the
//! sizes after `}` are ignored. The parser builds what the text says; whether that is
//! a valid program is for [`super::verify`] to say.

use crate::ir::parse::{find_attr, list_f64, list_u64, pairs};
use crate::ir::{ArgKind, BinaryOp, ConvAttrs, Dtype, Op, PoolAttrs, PoolKind, ReduceKind, UnaryOp};

use super::*;

/// Parses a whole `program NAME { ... }`.
pub fn parse(text: &str) -> Result<Program> {
    let mut lines = text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())).filter(|(_, l)| !l.is_empty());
    let err = |n: usize, msg: String| Error::user(format!("program line {n}: {msg}"));
    let (n0, head) = lines.find(|(_, l)| !l.starts_with("//")).ok_or_else(|| Error::user("no `program NAME {` in the text".to_string()))?;
    let head = head.strip_prefix("program ").and_then(|h| h.strip_suffix('{')).map(str::trim).ok_or_else(|| err(n0, format!("expected `program NAME {{`, got `{head}`")))?;
    let mut p = Program { name: head.to_string(), ..Default::default() };
    if let Some((name, symbols)) = head.strip_suffix(')').and_then(|h| h.split_once(" (")) {
        p.name = name.to_string();
        for s in symbols.split(", ") {
            let (sym, max) = s.split_once(" <= ").ok_or_else(|| err(n0, format!("expected `NAME <= MAX`, got `{s}`")))?;
            p.symbols.push((sym.to_string(), max.parse().map_err(|_| err(n0, format!("bad maximum `{max}`")))?));
        }
    }
    let mut closed = false;
    for (n, line) in lines {
        if closed {
            footer(&mut p, line).map_err(|m| err(n, m))?;
        } else if line == "}" {
            closed = true;
        } else if !line.starts_with("//") {
            body_line(&mut p, line).map_err(|m| err(n, m))?;
        }
    }
    if !closed {
        return Err(Error::user("the program text ends without `}`".to_string()));
    }
    Ok(p)
}

/// `// weights N bytes` and `// arena N bytes, peak live M bytes`.
fn footer(p: &mut Program, line: &str) -> Result<(), String> {
    let bytes = |s: &str| s.strip_suffix(" bytes").and_then(|s| s.parse().ok()).ok_or(format!("bad size in `{line}`"));
    if let Some(w) = line.strip_prefix("// weights ") {
        p.weights_size = bytes(w)?;
    } else if let Some((arena, peak)) = line.strip_prefix("// arena ").and_then(|a| a.split_once(", peak live ")) {
        p.arena_size = bytes(arena)?;
        p.peak_live = bytes(peak)?;
    } else if !line.starts_with("//") {
        return Err(format!("unexpected `{line}` after `}}`"));
    }
    Ok(())
}

fn body_line(p: &mut Program, line: &str) -> Result<(), String> {
    if line.starts_with("%b") {
        buffer(p, line)
    } else if line.starts_with('k') && line.contains(": ") {
        step(p, line)
    } else if let Some(rest) = line.strip_prefix("const ") {
        constant(p, rest)
    } else if let Some((kind, rest)) = line.split_once(' ').filter(|(k, _)| matches!(*k, "input" | "param" | "output" | "loss")) {
        port(p, kind, rest)
    } else {
        Err(format!("expected a buffer, constant, kernel or port, got `{line}`"))
    }
}

/// A quoted name at the start of `s` (as `{:?}` prints it) and the rest of `s`.
fn quoted(s: &str) -> Result<(String, &str), String> {
    let bytes = s.as_bytes();
    if bytes.first() != Some(&b'"') {
        return Err(format!("expected a quoted name at `{s}`"));
    }
    let mut i = 1;
    while i < bytes.len() && bytes[i] != b'"' {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    let name = s.get(..=i).ok_or(format!("unterminated name `{s}`"))?;
    let name = serde_json::from_str(name).map_err(|e| format!("name {name}: {e}"))?;
    Ok((name, &s[i + 1..]))
}

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("bad {what} `{s}`"))
}

/// `%bN = STORAGE "name" : dtype[len]`.
fn buffer(p: &mut Program, line: &str) -> Result<(), String> {
    let (id, rest) = line.split_once(" = ").ok_or("expected `%bN = STORAGE \"NAME\" : TYPE[LEN]`")?;
    if id != format!("%b{}", p.buffers.len()) {
        return Err(format!("buffers must be numbered in order: expected %b{}, got {id}", p.buffers.len()));
    }
    let quote = rest.find('"').ok_or("expected a quoted buffer name")?;
    let (storage, named) = rest.split_at(quote);
    let (name, ty) = quoted(named)?;
    let ty = ty.strip_prefix(" : ").ok_or("expected ` : TYPE[LEN]` after the name")?;
    let (dtype, len) = ty.strip_suffix(']').and_then(|t| t.split_once('[')).ok_or(format!("bad type `{ty}`"))?;
    let dtype = Dtype::from_name(dtype).ok_or(format!("bad element type `{dtype}`"))?;
    let words: Vec<&str> = storage.split_whitespace().collect();
    let at = |w: &str| w.strip_prefix('@').ok_or(format!("expected `@OFFSET`, got `{w}`")).and_then(|o| number(o, "offset"));
    let storage = match words.as_slice() {
        ["input", k] => Storage::Input(number(k, "input index")?),
        ["output", k] => Storage::Output(number(k, "output index")?),
        ["const", k] => Storage::Const(number(k, "constant index")?),
        // The layout and stored form are read from the parameter's port.
        ["weight", o, ..] => Storage::Weight { offset: at(o)? },
        ["arena", o] => Storage::Arena { offset: at(o)? },
        ["arena"] => Storage::Arena { offset: 0 },
        ["local"] => Storage::Local,
        _ => return Err(format!("bad storage `{}`", storage.trim())),
    };
    p.buffers.push(Buffer { name, dtype, len: number(len, "length")?, storage });
    Ok(())
}

/// `const K = dtype[shape] [values]`.
fn constant(p: &mut Program, rest: &str) -> Result<(), String> {
    let (k, rest) = rest.split_once(" = ").ok_or("expected `const K = TYPE[SHAPE] [VALUES]`")?;
    if number::<usize>(k, "constant index")? != p.consts.len() {
        return Err(format!("constants must be numbered in order: expected {}, got {k}", p.consts.len()));
    }
    let (ty, values) = rest.split_once("] ").ok_or("expected `TYPE[SHAPE] [VALUES]`")?;
    let (dtype, shape) = ty.split_once('[').ok_or(format!("bad type `{ty}]`"))?;
    let dtype = Dtype::from_name(dtype).ok_or(format!("bad element type `{dtype}`"))?;
    let shape = list_u64(&format!("[{shape}]"))?;
    let values = list_f64(values)?;
    if Some(values.len() as u64) != shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)) {
        return Err(format!("{} values for shape {shape:?}", values.len()));
    }
    p.consts.push(crate::tensor::Constant::from_values(dtype, shape, values.into_iter()));
    Ok(())
}

/// `input "x" = %b0 [B, 4]`, `param "w" = %b1 [3, 4] panels`, `output`/`loss` likewise.
fn port(p: &mut Program, kind: &str, rest: &str) -> Result<(), String> {
    let (name, rest) = quoted(rest)?;
    let rest = rest.strip_prefix(" = %b").ok_or("expected ` = %bN [SHAPE]` after the name")?;
    let (buf, rest) = rest.split_once(" [").ok_or("expected ` [SHAPE]` after the buffer")?;
    let (dims, layout) = rest.split_once(']').ok_or("unclosed shape")?;
    let (mut shape, mut syms) = (Vec::new(), Vec::new());
    for d in dims.split(", ").filter(|d| !d.is_empty()) {
        match d.parse::<u64>() {
            Ok(n) => {
                shape.push(n);
                syms.push(None);
            }
            Err(_) => {
                let s = p.symbols.iter().position(|(n, _)| n == d).ok_or(format!("unknown symbol `{d}`"))?;
                shape.push(p.symbols[s].1);
                syms.push(Some(s));
            }
        }
    }
    // `[LAYOUT] [STORED]`, each optional.
    let mut words: Vec<&str> = layout.split_whitespace().collect();
    let stored = match words.last().and_then(|w| Stored::ALL.into_iter().find(|s| s.name() == *w)) {
        Some(stored) => {
            words.pop();
            stored
        }
        None => Stored::F32,
    };
    let layout = match words.as_slice() {
        [] => Layout::RowMajor,
        ["transposed"] => Layout::Transposed,
        ["panels"] => Layout::Panels,
        ["winograd"] => Layout::Winograd,
        ["conv-panels"] => Layout::ConvPanels,
        _ => return Err(format!("bad layout `{}`", layout.trim())),
    };
    let port = Port { name, buf: BufId(number(buf, "buffer")?), shape, dims: syms, layout, stored };
    match kind {
        "input" => p.inputs.push(port),
        "param" => p.weights.push(port),
        _ => {
            if kind == "loss" {
                p.loss = Some(p.outputs.len());
            }
            p.outputs.push(port);
        }
    }
    Ok(())
}

/// `kN: KERNEL [d0=B]  // origins`.
fn step(p: &mut Program, line: &str) -> Result<(), String> {
    let (code, origins) = match line.split_once("  //") {
        Some((c, o)) => (c, o.strip_prefix(' ').unwrap_or(o)),
        None => (line, ""),
    };
    let (id, code) = code.split_once(": ").ok_or("expected `kN: KERNEL`")?;
    if id != format!("k{}", p.steps.len()) {
        return Err(format!("kernels must be numbered in order: expected k{}, got {id}", p.steps.len()));
    }
    let (code, dynamic) = match code.rfind(" [d") {
        Some(i) if code.ends_with(']') => (&code[..i], &code[i + 2..code.len() - 1]),
        _ => (code, ""),
    };
    let kernel = {
        let mut c = Cursor { p, s: code.trim_end(), at: 0 };
        let k = c.kernel()?;
        c.end()?;
        k
    };
    if matches!(&kernel, Kernel::Gemm { a, .. } if a.shape.is_empty()) {
        return Err("a gemm's operands are matrices".to_string());
    }
    let mut dims = vec![None; kernel.domain().len()];
    for d in dynamic.split(", ").filter(|d| !d.is_empty()) {
        let (dim, extent) = d.strip_prefix('d').and_then(|d| d.split_once('=')).ok_or(format!("expected `dN=EXTENT`, got `{d}`"))?;
        let dim: usize = number(dim, "dimension")?;
        let slot = dims.get_mut(dim).ok_or(format!("d{dim} of a domain of rank {}", kernel.domain().len()))?;
        *slot = Some(crate::ir::Dim::parse(extent)?);
    }
    let origins = if origins.is_empty() { Vec::new() } else { origins.split("; ").map(str::to_string).collect() };
    p.steps.push(Step { kernel, origins, dims });
    Ok(())
}

/// A position in one kernel's text.
struct Cursor<'a> {
    p: &'a Program,
    s: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.s[self.at..]
    }

    fn eat(&mut self, token: &str) -> bool {
        let found = self.rest().starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        if self.eat(token) { Ok(()) } else { Err(format!("expected `{token}` at `{}`", self.rest())) }
    }

    fn end(&self) -> Result<(), String> {
        if self.rest().is_empty() { Ok(()) } else { Err(format!("unexpected `{}`", self.rest())) }
    }

    /// The longest run of characters that `ok` accepts.
    fn token(&mut self, ok: impl Fn(char) -> bool) -> &str {
        let len = self.rest().find(|c: char| !ok(c)).unwrap_or(self.rest().len());
        let t = &self.s[self.at..self.at + len];
        self.at += len;
        t
    }

    fn int<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, String> {
        let start = self.at;
        self.eat("-");
        self.token(|c| c.is_ascii_digit());
        number(&self.s[start..self.at], what)
    }

    /// A bracketed attribute block `{...}`.
    fn attrs(&mut self) -> Result<&str, String> {
        self.expect(" {")?;
        let end = self.rest().find('}').ok_or("unclosed `{`")?;
        let a = &self.s[self.at..self.at + end];
        self.at += end + 1;
        Ok(a)
    }

    fn kernel(&mut self) -> Result<Kernel, String> {
        let out = self.view()?;
        self.expect(" = ")?;
        let op = self.token(|c| c.is_ascii_alphanumeric() || c == '_').to_string();
        self.expect(" ")?;
        let attr = |attrs: &str, key: &str| find_attr(attrs, key).map(str::to_string).ok_or(format!("{op} needs `{key} = ...`"));
        Ok(match op.as_str() {
            "map" => Kernel::Map { out, expr: self.expr()? },
            "argmax" | "argmin" => {
                self.expect("over [")?;
                let reduced = self.int("extent")?;
                self.expect("] ")?;
                let kind = if op == "argmax" { ArgKind::ArgMax } else { ArgKind::ArgMin };
                Kernel::ArgReduce { out, reduced, kind, expr: self.expr()? }
            }
            "gemm" => {
                let a = self.view()?;
                self.expect(", ")?;
                let b = self.view()?;
                let scratch = if self.eat(" int8, scratch ") { Some(self.view()?) } else { None };
                Kernel::Gemm { a, b, c: out, epilogue: self.epilogue()?, scratch }
            }
            "conv" => {
                let x = self.view()?;
                self.expect(", ")?;
                let w = self.view()?;
                let a = self.attrs()?.to_string();
                let attrs = ConvAttrs {
                    stride: list_u64(&attr(&a, "stride")?)?,
                    padding: pairs(&attr(&a, "padding")?)?,
                    dilation: list_u64(&attr(&a, "dilation")?)?,
                    groups: number(&attr(&a, "groups")?, "groups")?,
                };
                let scratch = if self.eat(" winograd, scratch ") { Some(self.view()?) } else { None };
                Kernel::Conv { x, w, out, attrs, epilogue: self.epilogue()?, scratch }
            }
            "max_pool" | "avg_pool" => {
                let x = self.view()?;
                let a = self.attrs()?.to_string();
                let attrs = PoolAttrs {
                    kind: if op == "max_pool" { PoolKind::Max } else { PoolKind::Avg },
                    kernel: list_u64(&attr(&a, "kernel")?)?,
                    stride: list_u64(&attr(&a, "stride")?)?,
                    padding: pairs(&attr(&a, "padding")?)?,
                    dilation: list_u64(&attr(&a, "dilation")?)?,
                };
                Kernel::Pool { x, out, attrs }
            }
            "dequantize" => {
                let name = self.token(|c| c.is_ascii_alphanumeric() || c == '_').to_string();
                let stored = Stored::ALL.into_iter().find(|s| s.name() == name).ok_or(format!("unknown stored form `{name}`"))?;
                self.expect(" ")?;
                Kernel::Dequantize { w: self.view()?, out, stored }
            }
            "softmax" => {
                let x = self.view()?;
                let a = self.attrs()?.to_string();
                Kernel::Softmax { x, out, axis: number(&attr(&a, "axis")?, "axis")? }
            }
            "attention" => {
                let q = self.view()?;
                self.expect(", ")?;
                let k = self.view()?;
                self.expect(", ")?;
                let v = self.view()?;
                self.expect(", scores ")?;
                let scores = self.view()?;
                Kernel::Attention { q, k, v, out, scores, score: self.epilogue()? }
            }
            "rows" => {
                let extents = self.extents()?;
                let cols = extents.len();
                if cols > out.shape.len() || extents[..] != out.shape[out.shape.len() - cols..] {
                    return Err(format!("rows over {extents:?} of an output shaped {:?}", out.shape));
                }
                let mut stats = Vec::new();
                while !self.eat("map ") {
                    let view = self.view()?;
                    self.expect(" = ")?;
                    let kind = self.reduce_kind()?;
                    self.expect(" ")?;
                    let expr = self.expr()?;
                    let scale = if self.eat(" * ") { Some(self.float()?) } else { None };
                    let then = self.epilogue()?;
                    self.expect("; ")?;
                    stats.push(RowStat { view, kind, expr, scale, then });
                }
                Kernel::Rows { out, cols, stats, expr: self.expr()? }
            }
            reduce => {
                let kind = ReduceKind::ALL.into_iter().find(|k| k.name() == reduce).ok_or(format!("unknown kernel `{reduce}`"))?;
                let reduced = self.extents()?;
                let expr = self.expr()?;
                let scale = if self.eat(" * ") { Some(self.float()?) } else { None };
                Kernel::Reduce { out, reduced, kind, expr, scale }
            }
        })
    }

    /// `over [4x8] `: a reduction's extents.
    fn extents(&mut self) -> Result<Vec<u64>, String> {
        self.expect("over [")?;
        let extents = self.token(|c| c.is_ascii_digit() || c == 'x').split('x').filter(|d| !d.is_empty()).map(|d| number(d, "extent")).collect::<Result<_, _>>()?;
        self.expect("] ")?;
        Ok(extents)
    }

    /// `reduce_sum`, ...
    fn reduce_kind(&mut self) -> Result<ReduceKind, String> {
        let name = self.token(|c| c.is_ascii_alphanumeric() || c == '_');
        ReduceKind::ALL.into_iter().find(|k| k.name() == name).ok_or(format!("unknown reduction `{name}`"))
    }

    fn epilogue(&mut self) -> Result<Option<Expr>, String> {
        if self.eat(" then ") { Ok(Some(self.expr()?)) } else { Ok(None) }
    }

    /// `%bN`, `%bN<4x8>` or `%bN<4x8:8,1+16>`.
    fn view(&mut self) -> Result<View, String> {
        self.expect("%b")?;
        let buf: usize = self.int("buffer")?;
        let len = self.p.buffers.get(buf).ok_or(format!("%b{buf} is not declared"))?.len;
        if !self.eat("<") {
            return Ok(View::contiguous(BufId(buf), &[len]));
        }
        let shape: Vec<u64> = self.token(|c| c.is_ascii_digit() || c == 'x').split('x').filter(|d| !d.is_empty()).map(|d| number(d, "extent")).collect::<Result<_, _>>()?;
        let (mut strides, mut offset) = (contiguous_strides(&shape), 0);
        if self.eat(":") {
            for (d, s) in strides.iter_mut().enumerate() {
                if d > 0 {
                    self.expect(",")?;
                }
                *s = self.int("stride")?;
            }
            if self.eat("+") || self.rest().starts_with('-') {
                offset = self.int("offset")?;
            }
        }
        self.expect(">")?;
        Ok(View { buf: BufId(buf), shape, strides, offset })
    }

    /// `i3` or `_`.
    fn var(&mut self) -> Result<usize, String> {
        if self.eat("_") {
            return Ok(usize::MAX);
        }
        self.expect("i")?;
        self.int("loop variable")
    }

    fn expr(&mut self) -> Result<Expr, String> {
        if self.rest().starts_with("%b") {
            let view = self.view()?;
            self.expect("[")?;
            let mut vars = Vec::new();
            while !self.eat("]") {
                if !vars.is_empty() {
                    self.expect(", ")?;
                }
                vars.push(self.var()?);
            }
            return Ok(Expr::Load { view, vars });
        }
        if self.eat("gather<") {
            let axis: usize = self.int("axis")?;
            self.expect("> ")?;
            let view = self.view()?;
            self.expect("[")?;
            let (mut vars, mut index) = (Vec::new(), None);
            for d in 0..view.shape.len() {
                if d > 0 {
                    self.expect(", ")?;
                }
                if d == axis {
                    index = Some(self.expr()?);
                    vars.push(usize::MAX);
                } else {
                    vars.push(self.var()?);
                }
            }
            self.expect("]")?;
            let index = Box::new(index.ok_or(format!("gather along axis {axis} of a view of rank {}", view.shape.len()))?);
            return Ok(Expr::Gather { view, vars, axis, index });
        }
        if self.eat("extent<") {
            let d = self.token(|c| c != '>').to_string();
            self.expect(">")?;
            return Ok(Expr::Extent(crate::ir::Dim::parse(&d)?));
        }
        if self.eat("cast<") {
            let d = self.token(|c| c.is_ascii_alphanumeric());
            let d = Dtype::from_name(d).ok_or(format!("bad element type `{d}`"))?;
            self.expect(">(")?;
            let a = self.expr()?;
            self.expect(")")?;
            return Ok(Expr::Cast(Box::new(a), d));
        }
        let start = self.at;
        let word = self.token(|c| c.is_ascii_alphanumeric() || c == '_').to_string();
        if !self.rest().starts_with('(') {
            if let Some(v) = word.strip_prefix('i').filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())) {
                return Ok(Expr::Index(number(v, "loop variable")?));
            }
            self.at = start;
            return self.constant();
        }
        self.expect("(")?;
        let mut args = vec![self.expr()?];
        while self.eat(", ") {
            args.push(self.expr()?);
        }
        self.expect(")")?;
        // Each node's type is what the graph's rule gives its operands'.
        let types: Vec<Dtype> = args.iter().map(|a| self.p.expr_dtype(a)).collect();
        let ty = |op: &Op| super::verify::scalar_type(op, &types).map_err(|e| format!("{word}: {e}"));
        let mut args = args.into_iter().map(Box::new);
        let mut next = || args.next().expect("counted");
        Ok(match (word.as_str(), types.len()) {
            ("select", 3) => Expr::Select(next(), next(), next(), ty(&Op::Where)?),
            ("where", 3) => Expr::Where(next(), next(), next(), ty(&Op::Where)?),
            (name, 1) => {
                let u = UnaryOp::ALL.into_iter().find(|u| u.name() == name).ok_or(format!("unknown unary op `{name}`"))?;
                Expr::Unary(u, next(), ty(&Op::Unary(u))?)
            }
            (name, 2) => {
                let b = BinaryOp::ALL.into_iter().find(|b| b.name() == name).ok_or(format!("unknown binary op `{name}`"))?;
                Expr::Binary(b, next(), next(), ty(&Op::Binary(b))?)
            }
            (name, n) => return Err(format!("`{name}` does not take {n} operands")),
        })
    }

    /// A number as `{:?}` prints an f64 (`1.0`, `-inf`, `NaN`, `1e-5`).
    fn float(&mut self) -> Result<f64, String> {
        let t = self.token(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
        list_f64(&format!("[{t}]"))?.pop().ok_or(format!("bad number `{t}`"))
    }

    /// `1.5f32`: the value then its element type.
    fn constant(&mut self) -> Result<Expr, String> {
        let t = self.token(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')).to_string();
        for d in Dtype::ALL {
            if let Some(x) = t.strip_suffix(d.name()).and_then(|x| list_f64(&format!("[{x}]")).ok()).and_then(|mut x| x.pop()) {
                return Ok(Expr::Const(x, d));
            }
        }
        Err(format!("expected an expression, got `{t}`"))
    }
}
