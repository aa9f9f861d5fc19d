//! The text form of a [`Program`], printed by `--print-after fuse|memory`, compared by
//! the filetests in `tests/passes/` and read back by [`super::parse`]: the text is
//! complete, `parse(print(p)) == p`. One line per buffer, per constant, per kernel and
//! per port:
//!
//! ```text
//! program mlp (B <= 8) {
//!   %b0 = input 0 "x" : f32[32]
//!   %b1 = weight @0 panels "w" : f32[96]
//!   %b2 = arena @0 "t3" : f32[24]
//!   %b3 = const 0 "const0" : f32[3]
//!   const 0 = f32[3] [1.0, 2.0, 3.0]
//!   k0: %b2<8x3> = gemm %b0<8x4>, %b1<4x3:1,4> then max(%b2<8x3>[i0, i1], 0.0f32) [d0=B]  // matmul (m (Linear)); relu
//!   input "x" = %b0 [B, 4]
//!   param "w" = %b1 [3, 4] panels
//!   output "y" = %b2 [B, 3]
//! }
//! // weights 512 bytes
//! // arena 128 bytes, peak live 128 bytes
//! ```
//!
//! A view prints as its buffer when it is the whole buffer in one dimension, as
//! `%bN<shape>` when it is row-major from the start, and otherwise as
//! `%bN<shape:strides+offset>`; a load prints the loop variable of each view dimension
//! (`_` for none), a gather `gather<AXIS>` with its index expression in the axis's
//! place. An expression's type is what the graph's rule gives its operands'
//! (`verify::scalar_type`); constants carry theirs (`0.0f32`). Symbolic dimensions
//! print at their maxima; `[d0=B]` after a kernel says which loops run to a symbol's
//! run-time value, and a port's dimension prints as its symbol. The `//` comment of a
//! kernel lists the model ops it came from; those after `}` give the weights' and the
//! arena's sizes.

use std::fmt::Write;

use super::*;

pub fn print(p: &Program) -> String {
    let mut s = String::new();
    let symbols: Vec<String> = p.symbols.iter().map(|(n, max)| format!("{n} <= {max}")).collect();
    let symbols = if symbols.is_empty() { String::new() } else { format!(" ({})", symbols.join(", ")) };
    let _ = writeln!(s, "program {}{symbols} {{", p.name);
    let mut layouts: HashMap<BufId, (Layout, Stored)> = HashMap::new();
    for w in &p.weights {
        layouts.entry(w.buf).or_insert((w.layout, w.stored));
    }
    for (i, b) in p.buffers.iter().enumerate() {
        let storage = match &b.storage {
            Storage::Input(k) => format!("input {k}"),
            Storage::Output(k) => format!("output {k}"),
            Storage::Weight { offset } => {
                let (layout, stored) = layouts.get(&BufId(i)).copied().unwrap_or((Layout::RowMajor, Stored::F32));
                format!("weight @{offset}{}", layout_words(layout, stored))
            }
            Storage::Const(k) => format!("const {k}"),
            // Offsets exist once `memory` has planned the arena.
            Storage::Arena { offset } if p.arena_size > 0 => format!("arena @{offset}"),
            Storage::Arena { .. } => "arena".to_string(),
            Storage::Local => "local".to_string(),
        };
        let _ = writeln!(s, "  %b{i} = {storage} {:?} : {}[{}]", b.name, b.dtype.name(), b.len);
    }
    for (i, c) in p.consts.iter().enumerate() {
        let shape: Vec<String> = c.shape().iter().map(u64::to_string).collect();
        let _ = writeln!(s, "  const {i} = {}[{}] {}", c.dtype().name(), shape.join(", "), crate::ir::print::constant_values(c));
    }
    for (i, step) in p.steps.iter().enumerate() {
        // Loops whose extent is a symbol's run-time value.
        let dynamic: Vec<String> =
            step.dims.iter().enumerate().filter_map(|(d, sym)| sym.as_ref().map(|e| format!("d{d}={e}"))).collect();
        let dynamic = if dynamic.is_empty() { String::new() } else { format!(" [{}]", dynamic.join(", ")) };
        let _ = writeln!(s, "  k{i}: {}{dynamic}  // {}", kernel(p, &step.kernel), step.origins.join("; "));
    }
    let ports: [(&str, &[Port]); 3] = [("input", &p.inputs), ("param", &p.weights), ("output", &p.outputs)];
    for (kind, list) in ports {
        for (i, port) in list.iter().enumerate() {
            let kind = if kind == "output" && p.loss == Some(i) { "loss" } else { kind };
            let dims: Vec<String> = port.shape.iter().zip(&port.dims).map(|(n, d)| d.map_or(n.to_string(), |x| p.symbols[x].0.clone())).collect();
            let _ = writeln!(s, "  {kind} {:?} = %b{} [{}]{}", port.name, port.buf.0, dims.join(", "), layout_words(port.layout, port.stored));
        }
    }
    let _ = writeln!(s, "}}");
    if p.weights_size > 0 {
        let _ = writeln!(s, "// weights {} bytes", p.weights_size);
    }
    if p.arena_size > 0 || p.peak_live > 0 {
        let _ = writeln!(s, "// arena {} bytes, peak live {} bytes", p.arena_size, p.peak_live);
    }
    s
}

/// A weight's layout and stored form as the words after it (` panels q8_0`), none for
/// row-major f32.
fn layout_words(layout: Layout, stored: Stored) -> String {
    let layout = match layout {
        Layout::RowMajor => "",
        Layout::Transposed => " transposed",
        Layout::Panels => " panels",
        Layout::Winograd => " winograd",
        Layout::ConvPanels => " conv-panels",
    };
    let stored = if stored == Stored::F32 { String::new() } else { format!(" {}", stored.name()) };
    format!("{layout}{stored}")
}

fn dims(v: &[u64]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
}

pub fn view(p: &Program, v: &View) -> String {
    if v.offset == 0 && v.strides == contiguous_strides(&v.shape) {
        if v.shape.len() == 1 && p.buffers.get(v.buf.0).is_some_and(|b| b.len == v.shape[0]) {
            return format!("%b{}", v.buf.0);
        }
        return format!("%b{}<{}>", v.buf.0, dims(&v.shape));
    }
    let strides = v.strides.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    let offset = if v.offset == 0 { String::new() } else { format!("{:+}", v.offset) };
    format!("%b{}<{}:{strides}{offset}>", v.buf.0, dims(&v.shape))
}

fn var(v: usize) -> String {
    if v == usize::MAX { "_".into() } else { format!("i{v}") }
}

pub fn expr(p: &Program, e: &Expr) -> String {
    match e {
        Expr::Const(x, d) => format!("{x:?}{}", d.name()),
        Expr::Load { view: v, vars } => format!("{}[{}]", view(p, v), vars.iter().map(|&v| var(v)).collect::<Vec<_>>().join(", ")),
        Expr::Index(v) => var(*v),
        Expr::Extent(d) => format!("extent<{d}>"),
        Expr::Unary(u, a, _) => format!("{}({})", u.name(), expr(p, a)),
        Expr::Binary(b, l, r, _) => format!("{}({}, {})", b.name(), expr(p, l), expr(p, r)),
        Expr::Select(c, a, b, _) => format!("select({}, {}, {})", expr(p, c), expr(p, a), expr(p, b)),
        Expr::Where(c, a, b, _) => format!("where({}, {}, {})", expr(p, c), expr(p, a), expr(p, b)),
        Expr::Cast(a, d) => format!("cast<{}>({})", d.name(), expr(p, a)),
        Expr::Gather { view: v, vars, axis, index } => {
            let vars: Vec<String> = vars.iter().enumerate().map(|(d, &x)| if d == *axis { expr(p, index) } else { var(x) }).collect();
            format!("gather<{axis}> {}[{}]", view(p, v), vars.join(", "))
        }
    }
}

fn epilogue(p: &Program, e: &Option<Expr>) -> String {
    e.as_ref().map_or(String::new(), |e| format!(" then {}", expr(p, e)))
}

pub fn kernel(p: &Program, k: &Kernel) -> String {
    match k {
        Kernel::Map { out, expr: e } => format!("{} = map {}", view(p, out), expr(p, e)),
        Kernel::Reduce { out, reduced, kind, expr: e, scale } => {
            let scale = scale.map_or(String::new(), |f| format!(" * {f:?}"));
            format!("{} = {} over [{}] {}{scale}", view(p, out), kind.name(), dims(reduced), expr(p, e))
        }
        Kernel::ArgReduce { out, reduced, kind, expr: e } => format!("{} = {} over [{reduced}] {}", view(p, out), kind.name(), expr(p, e)),
        Kernel::Gemm { a, b, c, epilogue: ep, scratch } => format!(
            "{} = gemm {}, {}{}{}",
            view(p, c),
            view(p, a),
            view(p, b),
            scratch.as_ref().map_or(String::new(), |s| format!(" int8, scratch {}", view(p, s))),
            epilogue(p, ep)
        ),
        Kernel::Conv { x, w, out, attrs, epilogue: ep, scratch } => format!(
            "{} = conv {}, {} {{stride = {:?}, padding = {:?}, dilation = {:?}, groups = {}}}{}{}",
            view(p, out),
            view(p, x),
            view(p, w),
            attrs.stride,
            attrs.padding,
            attrs.dilation,
            attrs.groups,
            scratch.as_ref().map_or(String::new(), |b| format!(" winograd, scratch {}", view(p, b))),
            epilogue(p, ep)
        ),
        Kernel::Pool { x, out, attrs } => format!(
            "{} = {} {} {{kernel = {:?}, stride = {:?}, padding = {:?}, dilation = {:?}}}",
            view(p, out),
            attrs.kind.name(),
            view(p, x),
            attrs.kernel,
            attrs.stride,
            attrs.padding,
            attrs.dilation
        ),
        Kernel::Softmax { x, out, axis } => format!("{} = softmax {} {{axis = {axis}}}", view(p, out), view(p, x)),
        Kernel::Attention { q, k, v, out, scores, score } => {
            format!("{} = attention {}, {}, {}, scores {}{}", view(p, out), view(p, q), view(p, k), view(p, v), view(p, scores), epilogue(p, score))
        }
        Kernel::Dequantize { w, out, stored } => format!("{} = dequantize {} {}", view(p, out), stored.name(), view(p, w)),
        Kernel::Rows { out, cols, stats, expr: e } => {
            let stats: String = stats
                .iter()
                .map(|st| {
                    let scale = st.scale.map_or(String::new(), |f| format!(" * {f:?}"));
                    format!("{} = {} {}{scale}{}; ", view(p, &st.view), st.kind.name(), expr(p, &st.expr), epilogue(p, &st.then))
                })
                .collect();
            format!("{} = rows over [{}] {stats}map {}", view(p, out), dims(&out.shape[out.shape.len().saturating_sub(*cols)..]), expr(p, e))
        }
    }
}
