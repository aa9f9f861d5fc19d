//! A loop kernel's body (Map, Reduce, ArgReduce) in any dialect: the dialect opens the
//! loops over the output as its threads run them ([`Dialect::open_outer`]), this file
//! writes what each output element computes (reduced loops stay sequential in one
//! thread).

use std::fmt::Write as _;

use super::{pad, Dialect, Renderer};
use crate::error::{Error, Result};
use crate::ir::{Dtype, ReduceKind};
use crate::lower::{Expr, Kernel, Step};

/// The extents of a step's loops ([`Kernel::domain`]): static sizes, or the run-time
/// value of symbol `s` as `dim(s)` spells it.
pub fn extents(step: &Step, dim: impl Fn(usize) -> String) -> Vec<String> {
    let domain = step.kernel.domain();
    domain.iter().enumerate().map(|(d, n)| step.dims.get(d).copied().flatten().map_or(n.to_string(), &dim)).collect()
}

/// `a * b * ...` for extents (`1` for none).
pub fn product(ext: &[String]) -> String {
    let factors: Vec<&str> = ext.iter().map(String::as_str).filter(|e| *e != "1").collect();
    match factors.len() {
        0 => "1".to_string(),
        1 => factors[0].to_string(),
        _ => format!("({})", factors.join(" * ")),
    }
}

/// The buffers a kernel touches.
pub fn buffers_of(k: &Kernel) -> Vec<crate::lower::BufId> {
    let mut v = crate::lower::kernel_reads(k);
    v.push(crate::lower::kernel_writes(k));
    v.sort();
    v.dedup();
    v
}

/// A loop kernel's body; `ext` are the extents of its domain.
pub fn loop_kernel<D: Dialect + ?Sized>(r: &Renderer<D>, k: &Kernel, ext: &[String], s: &mut String) -> Result<()> {
    let d = r.d;
    match k {
        Kernel::Map { out, expr } => {
            let outer = &ext[..out.shape.len()];
            let depth = d.open_outer(s, outer);
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let t = r.p.buffers[out.buf.0].dtype;
            let value = r.expr(&Expr::Cast(Box::new(expr.clone()), t));
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            d.close_outer(s, outer);
        }
        Kernel::Reduce { out, reduced, kind, expr, scale } => {
            let t = r.p.buffers[out.buf.0].dtype;
            let acc_ty = r.acc_type(*kind, t);
            let outer = &ext[..out.shape.len()];
            let depth = d.open_outer(s, outer);
            let (init, step) = r.reduce_parts(*kind, acc_ty);
            let v = r.expr(&Expr::Cast(Box::new(expr.clone()), acc_ty));
            let rv = out.shape.len(); // the first reduced loop variable
            // one static reduced extent, long enough for partial sums
            let long = match &ext[rv..] {
                [n] => n.parse::<usize>().ok().filter(|&n| n >= 2 * SUM_LANES && d.partial_sums()),
                _ => None,
            };
            match long {
                Some(n) if acc_ty.is_float() && *kind == ReduceKind::Sum => lane_sum(r, s, n, rv, &v, acc_ty, depth),
                _ => {
                    let _ = writeln!(s, "{}{} acc = {init};", pad(depth), d.ty(acc_ty));
                    let inner = r.open_loops(s, &ext[rv..], rv, depth);
                    let _ = writeln!(s, "{}{} v = {v};", pad(inner), d.ty(acc_ty));
                    let _ = writeln!(s, "{}acc = {step};", pad(inner));
                    r.close_loops(s, reduced.len(), depth);
                }
            }
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            // A mean's scale is a literal of the widest float the dialect has.
            let value = match scale {
                Some(f) => format!("({}) (acc * {})", d.ty(t), r.literal(*f, d.accumulator())),
                None => format!("({}) acc", d.ty(t)),
            };
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            d.close_outer(s, outer);
        }
        Kernel::ArgReduce { out, kind, expr, .. } => {
            let t = r.dtype(expr);
            let outer = &ext[..out.shape.len()];
            let depth = d.open_outer(s, outer);
            let idx = d.ty(Dtype::I64);
            let _ = writeln!(s, "{}{} best = 0;\n{}{idx} at = -1;", pad(depth), d.ty(t), pad(depth));
            let r_var = out.shape.len();
            let inner = r.open_loops(s, &ext[r_var..], r_var, depth);
            let _ = writeln!(s, "{}{} v = {};", pad(inner), d.ty(t), r.expr(expr));
            let _ = writeln!(s, "{}if (at < 0 || {}) {{ best = v; at = i{r_var}; }}", pad(inner), r.arg_better(*kind, t));
            r.close_loops(s, 1, depth);
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let _ = writeln!(s, "{}{}[{}] = at;", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            d.close_outer(s, outer);
        }
        other => return Err(Error::internal(format!("not a loop kernel: {other:?}"))),
    }
    Ok(())
}

/// Partial sums of a long reduction: see [`lane_sum`].
const SUM_LANES: usize = 8;

/// `acc = sum of v over i<rv> in [0, n)` (n static, at least 2 * SUM_LANES) in
/// SUM_LANES interleaved partial sums added pairwise at the end, for dialects whose
/// [`Dialect::partial_sums`] says so. A single running sum waits on each addition's
/// latency; the lanes' loop vectorizes (gpt_block's LayerNorm mean and variance over
/// 768 in C: 65 -> 15 us each), and its rounding errors are smaller.
fn lane_sum<D: Dialect + ?Sized>(r: &Renderer<D>, s: &mut String, n: usize, rv: usize, v: &str, acc_ty: Dtype, depth: usize) {
    let (p, q, l) = (pad(depth), pad(depth + 1), pad(depth + 2));
    let (ty, idx) = (r.d.ty(acc_ty), r.d.ty(Dtype::I64));
    let zeros = ["0"; SUM_LANES].join(", ");
    let body = n - n % SUM_LANES;
    let _ = writeln!(s, "{p}{ty} part[{SUM_LANES}] = {{{zeros}}};\n{p}{idx} i{rv};");
    let _ = writeln!(s, "{p}for ({idx} base = 0; base < {body}; base += {SUM_LANES}) {{");
    let _ = writeln!(s, "{q}for (i{rv} = base; i{rv} < base + {SUM_LANES}; ++i{rv}) {{\n{l}{ty} v = {v};\n{l}part[i{rv} - base] += v;\n{q}}}\n{p}}}");
    if body < n {
        let _ = writeln!(s, "{p}for (i{rv} = {body}; i{rv} < {n}; ++i{rv}) {{\n{q}{ty} v = {v};\n{q}part[i{rv} - {body}] += v;\n{p}}}");
    }
    let mut terms: Vec<String> = (0..SUM_LANES).map(|i| format!("part[{i}]")).collect();
    while terms.len() > 1 {
        terms = terms.chunks(2).map(|c| format!("({} + {})", c[0], c[1])).collect();
    }
    let _ = writeln!(s, "{p}{ty} acc = {};", terms[0]);
}
