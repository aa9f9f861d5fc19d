//! A loop kernel's body (Map, Reduce, ArgReduce, Rows) in any dialect: the dialect opens the
//! loops over the output as its threads run them ([`Dialect::open_outer`]), this file
//! writes what each output element computes (reduced loops stay sequential in one
//! thread).

use std::fmt::Write as _;

use super::{pad, Dialect, Renderer, Warp};
use crate::error::{Error, Result};
use crate::ir::{Atom, Dim, Dtype, Poly, ReduceKind};
use crate::lower::{Expr, Kernel, Program, Step, Storage, View};

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

/// The buffers in memory a kernel touches (not its [`Storage::Local`] ones, which only
/// it names, in its own way).
pub fn buffers_of(p: &Program, k: &Kernel) -> Vec<crate::lower::BufId> {
    let mut v = crate::lower::kernel_reads(k);
    v.push(crate::lower::kernel_writes(k));
    v.retain(|b| p.buffers[b.0].storage != Storage::Local);
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
        Kernel::Reduce { out, kind, expr, scale, .. } => {
            let t = r.p.buffers[out.buf.0].dtype;
            let acc_ty = r.acc_type(*kind, t);
            let outer = &ext[..out.shape.len()];
            let (init, step) = r.reduce_parts(*kind, acc_ty);
            let v = r.expr(&Expr::Cast(Box::new(expr.clone()), acc_ty));
            let rv = out.shape.len(); // the first reduced loop variable
            let value = r.store(reduced_value(r, *scale, t, acc_ty), t);
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
                _ => serial_sum(r, s, &ext[rv..], rv, &v, acc_ty, (&init, &step), depth),
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
        Kernel::Rows { .. } => rows_kernel(r, k, ext, s),
        other => return Err(Error::internal(format!("not a loop kernel: {other:?}"))),
    }
    Ok(())
}

/// A reduction's result of type `t` from its accumulator `acc` (of `acc_ty`), times
/// `scale` (a mean's 1/n) if it has one.
fn reduced_value<D: Dialect + ?Sized>(r: &Renderer<D>, scale: Option<f64>, t: Dtype, acc_ty: Dtype) -> String {
    let ty = r.d.ty(t);
    match scale {
        Some(f) => format!("({ty}) (acc * {})", r.literal(f, if acc_ty.is_float() { acc_ty } else { r.d.accumulator() })),
        None => format!("({ty}) acc"),
    }
}

/// `acc` (declared here, at `depth`) = `step` over every `v` of the loops of extents
/// `inner` (loop variables from `rv`), in one thread.
#[allow(clippy::too_many_arguments)]
fn serial_sum<D: Dialect + ?Sized>(r: &Renderer<D>, s: &mut String, inner: &[String], rv: usize, v: &str, acc_ty: Dtype, (init, step): (&str, &str), depth: usize) {
    let ty = r.d.ty(acc_ty);
    let _ = writeln!(s, "{}{ty} acc = {init};", pad(depth));
    let body = r.open_loops(s, inner, rv, depth);
    let _ = writeln!(s, "{}{ty} v = {v};\n{}acc = {step};", pad(body), pad(body));
    r.close_loops(s, inner.len(), depth);
}

/// Whether reduction `k` runs by warps in `r`'s dialect, and its spellings: when the
/// dialect has warps ([`Dialect::warp`]), the reduced domain (at its maximal size) has
/// at least an element per lane, and the accumulator is a type the lanes can shuffle.
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
/// need); each lane accumulates a strided share of the flattened reduced domain
/// ([`lane_share`]), the shuffles combine the lanes, and lane 0 stores. `step`
/// combines `acc` and `v`, which reads the loop variables `read`.
#[allow(clippy::too_many_arguments)]
fn warp_sum<D: Dialect + ?Sized>(r: &Renderer<D>, w: &Warp, s: &mut String, ext: &[String], rv: usize, (v, read): (&str, &[usize]), acc_ty: Dtype, (init, step): (&str, &str), blocked: bool, store: &str) {
    let idx = r.d.ty(Dtype::I64);
    let (outer, inner) = ext.split_at(rv);
    let _ = writeln!(s, "{}for ({idx} gid = {}; gid < {}; gid += {}) {{", pad(1), w.first, product(outer), w.count);
    super::device::grid_indices(r.d, s, outer, 2);
    let _ = writeln!(s, "{}const {idx} lane = {};", pad(2), w.lane);
    lane_share(r, w, s, inner, rv, (v, read), acc_ty, (init, step), blocked, 2);
    combine_lanes(r, w.shuffle_down, w.lanes, s, acc_ty, step, 2);
    let _ = writeln!(s, "{}if (lane == 0) {{\n{}{store}\n{}}}\n{}}}", pad(2), pad(3), pad(2), pad(1));
}

/// A lane's share of a reduction by warps, at `depth`: `acc` (declared here) over the
/// elements `lane, lane + lanes, ...` of the flattened domain `inner` (loop variables
/// from `rv`), `v` reading the variables `read`.
///
/// `blocked` (an f32 sum): the lane sums its share in blocks of [`SUM_BLOCK`] and adds
/// each block's sum to its total, so a sum of n elements is off by at most about
/// (SUM_BLOCK + n / (lanes * SUM_BLOCK) + log2 lanes) units of f32 rounding times the
/// sum of the magnitudes, where one running sum a lane would be off by n / lanes.
#[allow(clippy::too_many_arguments)]
fn lane_share<D: Dialect + ?Sized>(r: &Renderer<D>, w: &Warp, s: &mut String, inner: &[String], rv: usize, (v, read): (&str, &[usize]), acc_ty: Dtype, (init, step): (&str, &str), blocked: bool, depth: usize) {
    let (idx, ty) = (r.d.ty(Dtype::I64), r.d.ty(acc_ty));
    let (p, q, l) = (pad(depth), pad(depth + 1), pad(depth + 2));
    // (a static length of at most a block a lane needs no blocks)
    let blocked = blocked && product(inner).parse::<usize>().map_or(true, |n| n > w.lanes as usize * SUM_BLOCK);
    let _ = writeln!(s, "{p}{ty} acc = {init};");
    if blocked {
        let _ = writeln!(s, "{p}{ty} block = {init};\n{p}int in_block = 0;");
    }
    let _ = writeln!(s, "{p}for ({idx} rid = lane; rid < {}; rid += {}) {{", product(inner), w.lanes);
    let vars: Vec<usize> = (rv..rv + inner.len()).collect();
    super::device::unflatten(r.d, s, "rid", &vars, inner, depth + 1);
    // A sum of a value broadcast along a reduced dimension does not read its variable.
    for (&var, n) in vars.iter().zip(inner) {
        if n != "1" && !read.contains(&var) {
            let _ = writeln!(s, "{q}(void)i{var};");
        }
    }
    if blocked {
        let _ = writeln!(s, "{q}{ty} v = {v};\n{q}block += v;");
        let _ = writeln!(s, "{q}if (++in_block == {SUM_BLOCK}) {{\n{l}acc += block;\n{l}block = {init};\n{l}in_block = 0;\n{q}}}\n{p}}}");
        let _ = writeln!(s, "{p}acc += block;");
    } else {
        let _ = writeln!(s, "{q}{ty} v = {v};\n{q}acc = {step};\n{p}}}");
    }
}

/// Combines the lanes' `acc` by `step`, halving the distance each time, through
/// `shuffle` (a [`Warp`] spelling of `{v}` from `{off}` lanes away): with
/// `shuffle_down` lane 0 ends with the whole; with `shuffle_xor` every lane does, and
/// the same bits (each combines the same two values at every level).
fn combine_lanes<D: Dialect + ?Sized>(r: &Renderer<D>, shuffle: &str, lanes: u32, s: &mut String, acc_ty: Dtype, step: &str, depth: usize) {
    let (p, q) = (pad(depth), pad(depth + 1));
    let ty = r.d.ty(acc_ty);
    let mut off = lanes / 2;
    while off > 0 {
        let shuffled = shuffle.replace("{v}", "acc").replace("{off}", &off.to_string());
        let _ = writeln!(s, "{p}{{\n{q}{ty} v = {shuffled};\n{q}acc = {step};\n{p}}}");
        off /= 2;
    }
}

/// Whether row kernel `k` runs by warps in `r`'s dialect: a warp per row, as
/// [`warp_reduce`] runs a reduction, when its rows (at their maximal size) have at
/// least an element per lane and the lanes can shuffle every statistic's accumulator.
/// A target's host code launches it with a warp per row.
pub fn warp_rows<D: Dialect + ?Sized>(r: &Renderer<D>, k: &Kernel) -> Option<&'static Warp> {
    let Kernel::Rows { out, cols, stats, .. } = k else { return None };
    let w = r.d.warp()?;
    let long = out.shape[out.shape.len() - cols..].iter().product::<u64>() >= u64::from(w.lanes);
    let shuffles = stats.iter().all(|st| w.types.contains(&r.acc_type(st.kind, r.p.buffers[st.view.buf.0].dtype)));
    (long && shuffles).then_some(w)
}

/// A row kernel ([`Kernel::Rows`]; `ext` are its domain's extents): for each row, each
/// statistic into a variable `st<i>` (which the later expressions' loads of it read),
/// then the row's elements. By warps ([`warp_rows`]) each statistic is a lane's share
/// ([`lane_share`]) combined by butterfly shuffles, so every lane holds it, and the
/// lanes store the row's elements in turn; otherwise one thread computes a row.
fn rows_kernel<D: Dialect + ?Sized>(r: &Renderer<D>, k: &Kernel, ext: &[String], s: &mut String) {
    let Kernel::Rows { out, cols, stats, expr } = k else { unreachable!("a row kernel") };
    let d = r.d;
    let rows = out.shape.len() - cols;
    let spell = |v: &View, _: &[usize]| stats.iter().position(|st| st.view.buf == v.buf).map(|i| format!("st{i}"));
    let r = &Renderer { loads: Some(&spell), ..*r };
    let (outer, inner) = ext.split_at(rows);
    let idx = d.ty(Dtype::I64);
    let warp = warp_rows(r, k);
    let depth = match warp {
        Some(w) => {
            let _ = writeln!(s, "{}for ({idx} gid = {}; gid < {}; gid += {}) {{", pad(1), w.first, product(outer), w.count);
            super::device::grid_indices(d, s, outer, 2);
            let _ = writeln!(s, "{}const {idx} lane = {};", pad(2), w.lane);
            2
        }
        None => d.open_outer(s, outer),
    };
    let (p, q) = (pad(depth), pad(depth + 1));
    for (i, st) in stats.iter().enumerate() {
        let t = r.p.buffers[st.view.buf.0].dtype;
        let acc_ty = r.acc_type(st.kind, t);
        let (init, step) = r.reduce_parts(st.kind, acc_ty);
        let v = r.expr(&Expr::Cast(Box::new(st.expr.clone()), acc_ty));
        let _ = writeln!(s, "{p}{} st{i};\n{p}{{", d.ty(t));
        match warp {
            Some(w) => {
                let mut read = Vec::new();
                crate::lower::expr_vars(&st.expr, &mut read);
                let blocked = acc_ty == Dtype::F32 && st.kind == ReduceKind::Sum;
                lane_share(r, w, s, inner, rows, (&v, &read), acc_ty, (&init, &step), blocked, depth + 1);
                combine_lanes(r, w.shuffle_xor, w.lanes, s, acc_ty, &step, depth + 1);
            }
            None => serial_sum(r, s, inner, rows, &v, acc_ty, (&init, &step), depth + 1),
        }
        let _ = writeln!(s, "{q}st{i} = {};", reduced_value(r, st.scale, t, acc_ty));
        if let Some(e) = &st.then {
            let _ = writeln!(s, "{q}st{i} = {};", r.expr(&Expr::Cast(Box::new(e.clone()), t)));
        }
        let _ = writeln!(s, "{p}}}");
    }
    let t = r.p.buffers[out.buf.0].dtype;
    let value = r.store(r.expr(&Expr::Cast(Box::new(expr.clone()), t)), t);
    let all: Vec<usize> = (0..out.shape.len()).collect();
    let store = format!("{}[{}] = {value};", r.names[out.buf.0], r.index(out, &all));
    let vars: Vec<usize> = (rows..out.shape.len()).collect();
    match warp {
        Some(w) => {
            let _ = writeln!(s, "{p}for ({idx} rid = lane; rid < {}; rid += {}) {{", product(inner), w.lanes);
            super::device::unflatten(d, s, "rid", &vars, inner, depth + 1);
            let _ = writeln!(s, "{q}{store}\n{p}}}\n{}}}", pad(1));
        }
        None => {
            let body = r.open_loops(s, inner, rows, depth);
            let _ = writeln!(s, "{}{store}", pad(body));
            r.close_loops(s, inner.len(), depth);
            d.close_outer(s, outer);
        }
    }
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
