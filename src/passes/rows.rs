//! Rows: a chain of reductions over the last dimensions of a tensor and the map that
//! reads their results at each element of the row becomes one [`Kernel::Rows`], for a
//! target whose renderer runs one ([`Library::rows`]). LayerNorm was four kernels
//! (the mean, the variance, `sqrt(variance + eps)` and the normalisation), each a trip
//! through memory and a launch; it becomes one, whose statistics never leave the
//! threads that compute a row. RMSNorm and a softmax written as ops fuse the same way.
//!
//! The chain is consecutive steps: one or more `Reduce` over the same trailing
//! dimensions (each a statistic), `Map`s of one statistic alone, in place or into a
//! row-shaped buffer of their own that then holds the statistic (its `then`), and last
//! a `Map` over the whole row domain. A statistic must be an arena buffer that only
//! the chain reads, and every read of it must be at the row being computed. Anything
//! else is left alone: the old kernels compute the same values.
//!
//! Runs after `fuse` (which has folded LayerNorm's subtract, divide, scale and shift
//! into the last map, and made the duplicated mean one) and before `memory`.

use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::*;

pub fn run(p: &mut Program, library: &Library) -> Result<()> {
    if library.rows.is_empty() {
        return Ok(());
    }
    let mut at = 0;
    while at < p.steps.len() {
        if let Some(end) = chain(p, at, library.rows) {
            fuse(p, at, end);
        }
        at += 1;
    }
    p.sweep_buffers();
    Ok(())
}

/// When a chain starts at step `first`, the index of its last step (the map).
fn chain(p: &Program, first: usize, dtypes: &[Dtype]) -> Option<usize> {
    let Kernel::Reduce { out, reduced, .. } = &p.steps[first].kernel else { return None };
    let domain = p.steps[first].kernel.domain();
    let dims = &p.steps[first].dims;
    let rows = out.shape.len();
    let cols = reduced.len();
    // The statistics' buffers as the chain goes, every buffer that held one, and whether
    // a step read each statistic since its value was last set.
    let mut stats: Vec<BufId> = Vec::new();
    let mut held: Vec<BufId> = Vec::new();
    let mut read_since: Vec<bool> = Vec::new();
    let stat_buffer = |b: &View| p.is_whole(b) && arena(p, b.buf) && dtypes.contains(&p.buffers[b.buf.0].dtype);
    let mark_reads = |e: &Expr, stats: &[BufId], read_since: &mut Vec<bool>| {
        let mut read = Vec::new();
        expr_bufs(e, &mut read);
        for (i, b) in stats.iter().enumerate() {
            read_since[i] |= read.contains(b);
        }
    };
    for at in first..p.steps.len() {
        let step = &p.steps[at];
        match &step.kernel {
            Kernel::Reduce { out, reduced, expr, .. } => {
                let fits = reduced.len() == cols && step.kernel.domain() == domain && step.dims == *dims && stat_buffer(out) && !held.contains(&out.buf);
                if !fits || !reads_rows(p, expr, &stats, &domain, rows) {
                    return None;
                }
                mark_reads(expr, &stats, &mut read_since);
                stats.push(out.buf);
                held.push(out.buf);
                read_since.push(false);
            }
            // the row's map
            Kernel::Map { out, expr } if step.kernel.domain() == domain => {
                let fits = step.dims == *dims && out.is_contiguous() && !held.contains(&out.buf) && dtypes.contains(&p.buffers[out.buf.0].dtype);
                // (the chain's reductions read their inputs while the map writes its output)
                let overwrites = p.steps[first..at].iter().any(|s| kernel_reads(&s.kernel).contains(&out.buf));
                if !fits || overwrites || !reads_rows(p, expr, &stats, &domain, rows) {
                    return None;
                }
                // Only the chain reads the statistics.
                let outside = p.steps.iter().enumerate().filter(|&(s, _)| s < first || s > at).any(|(_, s)| kernel_reads(&s.kernel).iter().any(|b| held.contains(b)));
                return (!outside).then_some(at);
            }
            // A statistic rewritten from itself alone, in place or into a buffer of its own of
            // its type, before any other step reads it: the fused kernel applies the map as
            // soon as the statistic is reduced.
            Kernel::Map { out, expr } => {
                let md = step.kernel.domain();
                let row_shaped = md.len() >= rows && md[..rows] == domain[..rows] && md[rows..].iter().all(|&n| n == 1) && step.dims[..rows] == dims[..rows];
                let read = rewritten(expr, &stats)?;
                let i = stats.iter().position(|&b| b == read).expect("read is a statistic");
                let later = p.steps[at + 1..].iter().any(|s| kernel_reads(&s.kernel).contains(&read));
                let same_type = p.buffers[out.buf.0].dtype == p.buffers[read.0].dtype;
                let into = out.buf == read || (stat_buffer(out) && same_type && !held.contains(&out.buf) && !later);
                if !row_shaped || !into || read_since[i] || !reads_rows(p, expr, &stats, &md, rows) || has_index(expr) {
                    return None;
                }
                stats[i] = out.buf;
                held.push(out.buf);
            }
            _ => return None,
        }
    }
    None
}

/// The one statistic a map of statistics reads, when it reads nothing else.
fn rewritten(e: &Expr, stats: &[BufId]) -> Option<BufId> {
    let mut read = Vec::new();
    expr_bufs(e, &mut read);
    read.sort();
    read.dedup();
    match read[..] {
        [b] if stats.contains(&b) => Some(b),
        _ => None,
    }
}

fn arena(p: &Program, b: BufId) -> bool {
    matches!(p.buffers[b.0].storage, Storage::Arena { .. })
}

fn has_index(e: &Expr) -> bool {
    let mut found = false;
    e.walk(&mut |e| found |= matches!(e, Expr::Index(_)));
    found
}

/// Whether every read of a statistic in `e`, over a loop domain `domain` whose first
/// `rows` dimensions are the rows, is a plain load of it at the row being computed (not
/// a gather, nor in a gather's index).
fn reads_rows(p: &Program, e: &Expr, stats: &[BufId], domain: &[u64], rows: usize) -> bool {
    let mut ok = true;
    e.walk(&mut |e| match e {
        // (a gather's index is checked by a kernel of its own, which the statistic's
        // registers do not reach)
        Expr::Gather { view, index, .. } => {
            let mut read = Vec::new();
            expr_bufs(index, &mut read);
            ok &= !stats.contains(&view.buf) && !read.iter().any(|b| stats.contains(b));
        }
        Expr::Load { view, vars } if stats.contains(&view.buf) => ok &= at_row(p, view, vars, domain, rows),
        _ => {}
    });
    ok
}

/// Whether a load of a statistic (through `view` at `vars`) reads, at every point of
/// `domain`, the element of the row that point lies in: its buffer is the rows
/// row-major, so each row variable must step through it by the rows' row-major
/// stride and every other variable not at all.
fn at_row(p: &Program, view: &View, vars: &[usize], domain: &[u64], rows: usize) -> bool {
    let row_strides = contiguous_strides(&domain[..rows]);
    let mut step = vec![0i64; domain.len()];
    for (d, &v) in vars.iter().enumerate() {
        if v == usize::MAX || view.shape[d] == 1 {
            continue;
        }
        let Some(s) = step.get_mut(v) else { return false };
        *s += view.strides[d];
    }
    let rows_len: u64 = domain[..rows].iter().product();
    view.offset == 0 && p.buffers[view.buf.0].len == rows_len && (0..domain.len()).all(|v| domain[v] == 1 || step[v] == if v < rows { row_strides[v] } else { 0 })
}

/// Replaces steps `first..=last` (a [`chain`]) with one `Rows` kernel at `first`.
fn fuse(p: &mut Program, first: usize, last: usize) {
    let Kernel::Map { out, expr } = p.steps[last].kernel.clone() else { unreachable!("a chain ends in a map") };
    let rows = match &p.steps[first].kernel {
        Kernel::Reduce { out, .. } => out.shape.len(),
        _ => unreachable!("a chain starts with a reduction"),
    };
    let row_shape = out.shape[..rows].to_vec();
    let mut stats: Vec<RowStat> = Vec::new();
    for step in &p.steps[first..last] {
        match &step.kernel {
            Kernel::Reduce { out: o, kind, expr, scale, .. } => {
                stats.push(RowStat { view: View::contiguous(o.buf, &row_shape), kind: *kind, expr: expr.clone(), scale: *scale, then: None });
            }
            Kernel::Map { out: o, expr } => {
                let read = rewritten(expr, &stats.iter().map(|st| st.view.buf).collect::<Vec<_>>()).expect("checked by `chain`");
                let st = stats.iter_mut().find(|st| st.view.buf == read).expect("checked by `chain`");
                // The statistic moves to the map's buffer, where its load is the reduced
                // value; the map reads the value an earlier map made of it, if any.
                st.view.buf = o.buf;
                let raw = st.load();
                let before = st.then.take().map_or(raw.clone(), |mut e| {
                    substitute(&mut e, read, &raw);
                    e
                });
                let mut e = expr.clone();
                substitute(&mut e, read, &before);
                st.then = Some(e);
            }
            _ => unreachable!("a chain holds reductions and maps"),
        }
    }
    for st in &stats {
        p.buffers[st.view.buf.0].storage = Storage::Local;
    }
    // Every read of a statistic becomes the canonical load at the row.
    let bufs: Vec<(BufId, Expr)> = stats.iter().map(|st| (st.view.buf, st.load())).collect();
    let canon = |e: &mut Expr| {
        e.walk_mut(&mut |e| {
            if let Expr::Load { view, .. } = e {
                if let Some((_, load)) = bufs.iter().find(|(b, _)| *b == view.buf) {
                    *e = load.clone();
                }
            }
        })
    };
    for st in &mut stats {
        canon(&mut st.expr);
        if let Some(t) = &mut st.then {
            canon(t);
        }
    }
    let mut expr = expr;
    canon(&mut expr);
    let origins = p.steps[first..=last].iter().flat_map(|s| s.origins.clone()).collect();
    let dims = p.steps[last].dims.clone();
    let cols = out.shape.len() - rows;
    p.steps[first] = Step { kernel: Kernel::Rows { out, cols, stats, expr }, origins, dims };
    p.steps.drain(first + 1..=last);
}

/// Replaces each load of `buf` in `e` with `with` (which may itself load `buf`).
fn substitute(e: &mut Expr, buf: BufId, with: &Expr) {
    match e {
        Expr::Load { view, .. } if view.buf == buf => *e = with.clone(),
        Expr::Const(..) | Expr::Load { .. } | Expr::Index(_) | Expr::Extent(_) => {}
        Expr::Gather { index: a, .. } | Expr::Unary(_, a, _) | Expr::Cast(a, _) => substitute(a, buf, with),
        Expr::Binary(_, a, b, _) => {
            substitute(a, buf, with);
            substitute(b, buf, with);
        }
        Expr::Select(c, a, b, _) | Expr::Where(c, a, b, _) => {
            for x in [c, a, b] {
                substitute(x, buf, with);
            }
        }
    }
}
