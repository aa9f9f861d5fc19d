//! Static memory planning: every intermediate buffer gets a fixed offset in one arena
//! whose size is known at compile time. Buffers whose lifetimes do not overlap share
//! memory.
//!
//! First, an elementwise kernel writes in place over an input it reads only at the
//! element it writes, when nothing reads that input afterwards (`x = x + y` for a
//! residual). Then offsets are planned.
//!
//! A buffer lives from the first step that writes it to the last step that reads it.
//! Offsets are assigned largest buffer first, each at the lowest aligned offset that
//! overlaps no buffer already placed with an overlapping lifetime (greedy best-fit by
//! size, as TFLite Micro and others do). `peak_live` is the largest total size of
//! buffers live at one step: no assignment can use less.

use crate::error::{Error, Result};
use crate::lower::*;

pub fn run(p: &mut Program) -> Result<()> {
    in_place(p);
    p.sweep_buffers();
    plan(p)
}

/// Makes each `Map` that may write over one of its inputs do so.
fn in_place(p: &mut Program) {
    for k in 0..p.steps.len() {
        let Kernel::Map { out, expr } = &p.steps[k].kernel else { continue };
        if !matches!(p.buffers[out.buf.0].storage, Storage::Arena { .. }) || !p.is_whole(out) {
            continue;
        }
        let mut read = Vec::new();
        expr_bufs(expr, &mut read);
        let reused = read.iter().copied().find(|&x| {
            let loads = identity_loads(p, expr, x, &out.shape);
            x != out.buf
                && matches!(p.buffers[x.0].storage, Storage::Arena { .. })
                && p.buffers[x.0].dtype == p.buffers[out.buf.0].dtype
                && p.buffers[x.0].len == p.buffers[out.buf.0].len
                && loads == Some(read.iter().filter(|&&b| b == x).count())
                && p.steps[k + 1..].iter().all(|s| !kernel_reads(&s.kernel).contains(&x))
        });
        if let Some(x) = reused {
            let o = out.buf;
            p.rename_buffer(o, x);
        }
    }
}

/// How many loads of `x` the expression makes, all whole and at the element being
/// written; `None` when some load (or a gather) reads elsewhere.
fn identity_loads(p: &Program, e: &Expr, x: BufId, shape: &[u64]) -> Option<usize> {
    let mut n = 0;
    let mut ok = true;
    e.walk(&mut |e| match e {
        Expr::Load { view, vars } if view.buf == x => {
            if p.is_identity_load(view, vars, shape) {
                n += 1;
            } else {
                ok = false;
            }
        }
        Expr::Gather { view, .. } if view.buf == x => ok = false,
        _ => {}
    });
    ok.then_some(n)
}

/// Plans the arena of `p`: sets every arena buffer's offset, `arena_size` and
/// `peak_live`.
pub fn plan(p: &mut Program) -> Result<()> {
    let n = p.buffers.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, step) in p.steps.iter().enumerate() {
        let w = kernel_writes(&step.kernel).0;
        first[w] = first[w].min(i);
        last[w] = last[w].max(i);
        for r in kernel_reads(&step.kernel) {
            first[r.0] = first[r.0].min(i);
            last[r.0] = last[r.0].max(i);
        }
    }
    let arena: Vec<usize> =
        (0..n).filter(|&b| matches!(p.buffers[b].storage, Storage::Arena { .. }) && first[b] != usize::MAX).collect();
    let sizes: Vec<u64> = p.buffers.iter().map(|b| align(b.bytes())).collect();
    let size = |b: usize| sizes[b];
    // Peak of simultaneously live bytes, the lower bound of any plan.
    let mut peak = 0u64;
    for step in 0..p.steps.len() {
        let live: u64 = arena.iter().filter(|&&b| first[b] <= step && step <= last[b]).map(|&b| size(b)).sum();
        peak = peak.max(live);
    }
    let mut order = arena.clone();
    order.sort_by_key(|&b| (std::cmp::Reverse(size(b)), b));
    let mut placed: Vec<(u64, u64, usize)> = Vec::new(); // (offset, end, buffer)
    let mut arena_size = 0u64;
    for b in order {
        let mut conflicts: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&(_, _, o)| first[o] <= last[b] && first[b] <= last[o])
            .map(|&(s, e, _)| (s, e))
            .collect();
        conflicts.sort();
        let mut offset = 0u64;
        for (s, e) in conflicts {
            if offset + size(b) <= s {
                break;
            }
            offset = offset.max(e);
        }
        let end = offset.checked_add(size(b)).ok_or_else(|| Error::user("the arena size overflows".to_string()))?;
        placed.push((offset, end, b));
        arena_size = arena_size.max(end);
        p.buffers[b].storage = Storage::Arena { offset };
    }
    p.arena_size = arena_size;
    p.peak_live = peak;
    Ok(())
}
