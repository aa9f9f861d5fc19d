//! A loop kernel's body (Map, Reduce, ArgReduce) in any dialect: the dialect opens the
//! loops over the output as its threads run them ([`Dialect::open_outer`]), this file
//! writes what each output element computes (reduced loops stay sequential in one
//! thread).

use std::fmt::Write as _;

use super::{pad, Dialect, Renderer, Warp};
use crate::error::{Error, Result};
use crate::ir::{Atom, Dim, Dtype, Poly, ReduceKind};
use crate::lower::{Expr, Kernel, Step};

/// The extents of a step's loops ([`Kernel::domain`]): static sizes, or expressions of
/// the run-time value of symbol `s` of `symbols` ([`crate::lower::Program::symbols`])
/// as `dim(s)` spells it.
pub fn extents(step: &Step, symbols: &[(String, u64)], dim: impl Fn(usize) -> String) -> Vec<String> {
    let sym = |name: &str| dim(symbols.iter().position(|(s, _)| s == name).expect("the program lists every symbol its steps use"));
    let domain = step.kernel.domain();
    domain.iter().enumerate().map(|(d, n)| step.dims.get(d).and_then(Option::as_ref).map_or(n.to_string(), |e| extent(e, &sym))).collect()
}

/// A dimension as a C expression (`(4 * dims[0] + dims[1] / 2)`). Its parts are never
/// negative (the lowering sees to it), so C's division is the floor it stands for.
pub fn extent(d: &Dim, sym: &dyn Fn(&str) -> String) -> String {
    match d {
        Dim::Known(n) => n.to_string(),
        Dim::Sym(s) => sym(s),
        Dim::Expr(p) => poly(p, sym),
    }
}

fn poly(p: &Poly, sym: &dyn Fn(&str) -> String) -> String {
    let terms: Vec<String> = p
        .terms()
        .map(|(c, atoms)| {
            let mut factors: Vec<String> = atoms
                .iter()
                .map(|a| match a {
                    Atom::Sym(s) => sym(s),
                    Atom::Div(q, k) => format!("{} / {k}", poly(q, sym)),
                })
                .collect();
            if c != 1 || factors.is_empty() {
                factors.insert(0, c.to_string());
            }
            factors.join(" * ")
        })
        .collect();
    format!("({})", terms.join(" + "))
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
            let value = r.store(r.expr(&Expr::Cast(Box::new(expr.clone()), t)), t);
            let _ = writeln!(s, "{}{}[{}] = {value};", pad(depth), r.names[out.buf.0], r.index(out, &vars));
            d.close_outer(s, outer);
        }
        Kernel::Reduce { out, reduced, kind, expr, scale } => {
            let t = r.p.buffers[out.buf.0].dtype;
            let acc_ty = r.acc_type(*kind, t);
            let outer = &ext[..out.shape.len()];
            let (init, step) = r.reduce_parts(*kind, acc_ty);
            let v = r.expr(&Expr::Cast(Box::new(expr.clone()), acc_ty));
            let rv = out.shape.len(); // the first reduced loop variable
            let value = match scale {
                Some(f) => format!("({}) (acc * {})", d.ty(t), r.literal(*f, if acc_ty.is_float() { acc_ty } else { d.accumulator() })),
                None => format!("({}) acc", d.ty(t)),
            };
            let value = r.store(value, t);
            let vars: Vec<usize> = (0..out.shape.len()).collect();
            let store = format!("{}[{}] = {value};", r.names[out.buf.0], r.index(out, &vars));
            if let Some(w) = warp_reduce(r, k) {
                let mut read = Vec::new();
                crate::lower::expr_vars(expr, &mut read);
                let blocked = acc_ty == Dtype::F32 && *kind == ReduceKind::Sum;
                warp_sum(r, w, s, ext, rv, (&v, &read), acc_ty, (&init, &step), blocked, &store);
                return Ok(());
            }
            let depth = d.open_outer(s, outer);
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
            let _ = writeln!(s, "{}{store}", pad(depth));
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

/// Whether reduction `k` runs by warps in `r`'s dialect, and its spellings: when the
/// dialect has warps ([`Dialect::warp`]), the reduced domain (at its maximal size) has
/// at least a lane per element, and the accumulator is a type the lanes can shuffle.
/// A target's host code launches such a kernel with a warp per output.
pub fn warp_reduce<D: Dialect + ?Sized>(r: &Renderer<D>, k: &Kernel) -> Option<&'static Warp> {
    let Kernel::Reduce { out, reduced, kind, .. } = k else { return None };
    let w = r.d.warp()?;
    let acc = r.acc_type(*kind, r.p.buffers[out.buf.0].dtype);
    let long = reduced.iter().product::<u64>() >= u64::from(w.lanes);
    (long && w.types.contains(&acc)).then_some(w)
}

/// A reduction by warps ([`warp_reduce`]): a grid-stride loop over outputs with one
/// warp per output (so every lane of a warp takes the same trips, as its shuffles
/// need); each lane accumulates a strided share of the flattened reduced domain, the
/// shuffles combine the lanes, and lane 0 stores. `step` combines `acc` and `v`, which
/// reads the loop variables `read`.
///
/// `blocked` (an f32 sum): each lane sums its share in blocks of [`SUM_BLOCK`] and adds
/// each block's sum to its total, so a sum of n elements is off by at most about
/// (SUM_BLOCK + n / (lanes * SUM_BLOCK) + log2 lanes) units of f32 rounding times the
/// sum of the magnitudes, where one running sum a lane would be off by n / lanes.
#[allow(clippy::too_many_arguments)]
fn warp_sum<D: Dialect + ?Sized>(r: &Renderer<D>, w: &Warp, s: &mut String, ext: &[String], rv: usize, (v, read): (&str, &[usize]), acc_ty: Dtype, (init, step): (&str, &str), blocked: bool, store: &str) {
    let (idx, ty) = (r.d.ty(Dtype::I64), r.d.ty(acc_ty));
    let (outer, inner) = ext.split_at(rv);
    // (a static length of at most a block a lane needs no blocks)
    let blocked = blocked && product(inner).parse::<usize>().map_or(true, |n| n > w.lanes as usize * SUM_BLOCK);
    let _ = writeln!(s, "{}for ({idx} gid = {}; gid < {}; gid += {}) {{", pad(1), w.first, product(outer), w.count);
    super::device::grid_indices(r.d, s, outer, 2);
    let _ = writeln!(s, "{}const {idx} lane = {};", pad(2), w.lane);
    let _ = writeln!(s, "{}{ty} acc = {init};", pad(2));
    if blocked {
        let _ = writeln!(s, "{}{ty} block = {init};\n{}int in_block = 0;", pad(2), pad(2));
    }
    let _ = writeln!(s, "{}for ({idx} rid = lane; rid < {}; rid += {}) {{", pad(2), product(inner), w.lanes);
    let vars: Vec<usize> = (rv..rv + inner.len()).collect();
    super::device::unflatten(r.d, s, "rid", &vars, inner, 3);
    // A sum of a value broadcast along a reduced dimension does not read its variable.
    for (&var, n) in vars.iter().zip(inner) {
        if n != "1" && !read.contains(&var) {
            let _ = writeln!(s, "{}(void)i{var};", pad(3));
        }
    }
    if blocked {
        let _ = writeln!(s, "{}{ty} v = {v};\n{}block += v;", pad(3), pad(3));
        let _ = writeln!(s, "{}if (++in_block == {SUM_BLOCK}) {{\n{}acc += block;\n{}block = {init};\n{}in_block = 0;\n{}}}\n{}}}", pad(3), pad(4), pad(4), pad(4), pad(3), pad(2));
        let _ = writeln!(s, "{}acc += block;", pad(2));
    } else {
        let _ = writeln!(s, "{}{ty} v = {v};\n{}acc = {step};\n{}}}", pad(3), pad(3), pad(2));
    }
    let mut off = w.lanes / 2;
    while off > 0 {
        let shuffled = w.shuffle_down.replace("{v}", "acc").replace("{off}", &off.to_string());
        let _ = writeln!(s, "{}{{\n{}{ty} v = {shuffled};\n{}acc = {step};\n{}}}", pad(2), pad(3), pad(3), pad(2));
        off /= 2;
    }
    let _ = writeln!(s, "{}if (lane == 0) {{\n{}{store}\n{}}}\n{}}}", pad(2), pad(3), pad(2), pad(1));
}

/// The elements a lane of a blocked warp sum adds before it adds their sum to its total
/// ([`warp_sum`]).
pub const SUM_BLOCK: usize = 32;

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

/// A gather of a kernel, for the checks a target runs before the kernel: every index
/// `index` computes, over the loop variables `vars` it depends on, must lie in
/// `[-n, n)`.
pub struct GatherCheck {
    pub n: u64,
    pub index: Expr,
    pub vars: Vec<usize>,
}

/// The gathers of kernel `k`, in the order its expressions hold them.
pub fn gather_checks(k: &Kernel) -> Vec<GatherCheck> {
    let mut out = Vec::new();
    for e in crate::lower::kernel_exprs(k) {
        e.walk(&mut |e| {
            if let Expr::Gather { view, axis, index, .. } = e {
                let mut vars = Vec::new();
                crate::lower::expr_vars(index, &mut vars);
                vars.sort_unstable();
                vars.dedup();
                out.push(GatherCheck { n: view.shape[*axis], index: (**index).clone(), vars });
            }
        });
    }
    out
}
