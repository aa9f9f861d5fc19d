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
//! buffers live at one step: no assignment can use less. Placed buffers are indexed by
//! lifetime, so placing one costs a logarithm plus the number of buffers live beside
//! it, not a scan of every buffer placed before.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::lower::*;

pub fn run(p: &mut Program) -> Result<()> {
    in_place(p);
    p.sweep_buffers();
    plan(p)
}

/// Makes each `Map` that may write over one of its inputs do so.
///
/// Renaming a kernel's output to the input it overwrites also renames it in the later
/// kernels that read it; each kernel is renamed when the walk reaches it, so the pass
/// stays linear. Likewise "nothing reads the input later" is a comparison with the
/// last step that reads it, which a renaming carries over.
fn in_place(p: &mut Program) {
    let mut last_read = vec![0usize; p.buffers.len()];
    for (i, step) in p.steps.iter().enumerate() {
        for r in kernel_reads(&step.kernel) {
            last_read[r.0] = i;
        }
    }
    let mut alias: Vec<BufId> = (0..p.buffers.len()).map(BufId).collect();
    for k in 0..p.steps.len() {
        visit_views(&mut p.steps[k].kernel, &mut |v| v.buf = alias[v.buf.0]);
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
                && last_read[x.0] <= k
        });
        if let Some(x) = reused {
            let o = out.buf;
            alias[o.0] = x;
            last_read[x.0] = last_read[o.0].max(k);
            visit_views(&mut p.steps[k].kernel, &mut |v| {
                if v.buf == o {
                    v.buf = x;
                }
            });
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
    let lives: Vec<Life> = arena.iter().map(|&b| Life { size: align(p.buffers[b].bytes()), first: first[b], last: last[b] }).collect();
    let placement = place(&lives, p.steps.len())?;
    for (&b, &offset) in arena.iter().zip(&placement.offsets) {
        p.buffers[b].storage = Storage::Arena { offset };
    }
    p.arena_size = placement.size;
    p.peak_live = placement.peak_live;
    Ok(())
}

/// A buffer to place: its size in bytes and its lifetime, from step `first` to step
/// `last` inclusive.
#[derive(Debug, Clone, Copy)]
struct Life {
    size: u64,
    first: usize,
    last: usize,
}

struct Placement {
    /// The offset of each buffer, in the order given.
    offsets: Vec<u64>,
    /// The arena size the offsets need.
    size: u64,
    /// The largest total size of the buffers live at one step.
    peak_live: u64,
}

/// Places buffers largest first (ties in the order given), each at the lowest offset
/// where it overlaps no buffer already placed whose lifetime overlaps its own.
fn place(lives: &[Life], steps: usize) -> Result<Placement> {
    // Peak of simultaneously live bytes, the lower bound of any plan: a sweep over the
    // steps, each buffer added where it starts and dropped after its last step.
    let mut starting = vec![0u64; steps + 1];
    let mut ending = vec![0u64; steps + 1];
    for l in lives {
        starting[l.first] = starting[l.first].saturating_add(l.size);
        ending[l.last] = ending[l.last].saturating_add(l.size);
    }
    let (mut peak_live, mut live) = (0u64, 0u64);
    for step in 0..steps {
        live = live.saturating_add(starting[step]);
        peak_live = peak_live.max(live);
        live = live.saturating_sub(ending[step]);
    }
    let mut order: Vec<usize> = (0..lives.len()).collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(lives[b].size), b));
    let mut placed = Lifetimes::new(steps);
    let mut offsets = vec![0u64; lives.len()];
    let mut size = 0u64;
    for b in order {
        let Life { size: bytes, first, last } = lives[b];
        let mut conflicts: Vec<(u64, u64)> = placed.overlapping(first, last).map(|o| (offsets[o], offsets[o] + lives[o].size)).collect();
        conflicts.sort();
        let mut offset = 0u64;
        for (s, e) in conflicts {
            if offset + bytes <= s {
                break;
            }
            offset = offset.max(e);
        }
        let end = offset.checked_add(bytes).ok_or_else(|| Error::user("the arena size overflows".to_string()))?;
        offsets[b] = offset;
        placed.insert(b, first, last);
        size = size.max(end);
    }
    Ok(Placement { offsets, size, peak_live })
}

/// Placed buffers by lifetime (inclusive step ranges), so that finding those whose
/// lifetime overlaps a new one costs a logarithm plus the number found, not a scan of
/// every placed buffer: a buffer overlaps `[first, last]` when it is live at `first`
/// (a stabbing query down a segment tree over the steps) or starts in
/// `(first, last]` (a range of the buffers listed by their first step).
struct Lifetimes {
    /// Leaves from `leaves`: node `i` covers a range of steps and lists the buffers
    /// whose lifetime covers that range and not its parent's.
    tree: Vec<Vec<usize>>,
    leaves: usize,
    by_start: Vec<Vec<usize>>,
    /// The steps at which some placed buffer starts.
    starts: BTreeSet<usize>,
}

impl Lifetimes {
    fn new(steps: usize) -> Lifetimes {
        let leaves = steps.max(1).next_power_of_two();
        Lifetimes { tree: vec![Vec::new(); 2 * leaves], leaves, by_start: vec![Vec::new(); steps.max(1)], starts: BTreeSet::new() }
    }

    fn insert(&mut self, b: usize, first: usize, last: usize) {
        let (mut lo, mut hi) = (first + self.leaves, last + self.leaves + 1);
        while lo < hi {
            if lo & 1 == 1 {
                self.tree[lo].push(b);
                lo += 1;
            }
            if hi & 1 == 1 {
                hi -= 1;
                self.tree[hi].push(b);
            }
            lo >>= 1;
            hi >>= 1;
        }
        self.by_start[first].push(b);
        self.starts.insert(first);
    }

    /// Every placed buffer live at some step of `[first, last]`, each once.
    fn overlapping(&self, first: usize, last: usize) -> impl Iterator<Item = usize> + '_ {
        let path = std::iter::successors(Some(first + self.leaves), |&i| (i > 1).then_some(i / 2));
        let live_at_first = path.flat_map(|i| self.tree[i].iter().copied());
        // (an empty range when the lifetime is one step; `range` refuses start > end)
        let later = self.starts.range(first + 1..last.max(first) + 1).flat_map(|&s| self.by_start[s].iter().copied());
        live_at_first.chain(later)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The placement as first written: every placed buffer checked against each new one.
    fn place_by_scanning(lives: &[Life], steps: usize) -> Placement {
        let mut peak_live = 0;
        for step in 0..steps {
            peak_live = peak_live.max(lives.iter().filter(|l| l.first <= step && step <= l.last).map(|l| l.size).sum());
        }
        let mut order: Vec<usize> = (0..lives.len()).collect();
        order.sort_by_key(|&b| (std::cmp::Reverse(lives[b].size), b));
        let mut offsets = vec![0u64; lives.len()];
        let mut placed: Vec<usize> = Vec::new();
        let mut size = 0;
        for b in order {
            let l = lives[b];
            let mut conflicts: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&o| lives[o].first <= l.last && l.first <= lives[o].last)
                .map(|&o| (offsets[o], offsets[o] + lives[o].size))
                .collect();
            conflicts.sort();
            let mut offset = 0;
            for (s, e) in conflicts {
                if offset + l.size <= s {
                    break;
                }
                offset = offset.max(e);
            }
            offsets[b] = offset;
            placed.push(b);
            size = size.max(offset + l.size);
        }
        Placement { offsets, size, peak_live }
    }

    #[test]
    fn interval_placement_matches_scanning_every_placed_buffer() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for case in 0..200 {
            let steps = 1 + next(40) as usize;
            let count = next(60) as usize;
            let lives: Vec<Life> = (0..count)
                .map(|_| {
                    let first = next(steps as u64) as usize;
                    // Mostly short lifetimes, some spanning most of the program.
                    let span = if next(5) == 0 { steps } else { 3 };
                    let last = (first + next(span as u64) as usize).min(steps - 1);
                    Life { size: 64 * (1 + next(8)), first, last }
                })
                .collect();
            let got = place(&lives, steps).expect("sizes are small");
            let want = place_by_scanning(&lives, steps);
            assert_eq!(got.offsets, want.offsets, "case {case}: {lives:?}");
            assert_eq!((got.size, got.peak_live), (want.size, want.peak_live), "case {case}");
        }
    }
}
