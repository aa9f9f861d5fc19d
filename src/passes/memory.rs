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
//! lifetime and address ([`Placed`]), so placing one costs a few logarithms, not a
//! scan of the buffers placed before or of those live beside it.

use std::collections::BTreeMap;

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
    let mut placed = Placed::new(steps);
    let mut offsets = vec![0u64; lives.len()];
    let mut size = 0u64;
    for b in order {
        let Life { size: bytes, first, last } = lives[b];
        let offset = placed.lowest_fit(first, last, bytes);
        let end = offset.checked_add(bytes).ok_or_else(|| Error::user("the arena size overflows".to_string()))?;
        offsets[b] = offset;
        placed.insert(first, last, offset, end);
        size = size.max(end);
    }
    Ok(Placement { offsets, size, peak_live })
}

/// The buffers placed so far, indexed so that the lowest offset where a new one fits
/// costs a few logarithms, however many buffers live beside it (a backward pass keeps
/// every activation of the forward pass live at once).
///
/// A segment tree over the steps: a buffer's lifetime is the union of O(log steps)
/// nodes that cover it exactly; its address range is added to `own` of those nodes
/// and to `under` of them and every ancestor. The buffers whose lifetimes overlap
/// `[first, last]` are then those `under` the nodes that cover `[first, last]`
/// exactly, and those `own` to the nodes above them, a few sets of merged address
/// ranges. The lowest fit is the lowest offset none of them blocks, found by jumping
/// past each blocking range: the same offset as checking every overlapping buffer.
struct Placed {
    leaves: usize,
    own: Vec<Ranges>,
    under: Vec<Ranges>,
}

impl Placed {
    fn new(steps: usize) -> Placed {
        let leaves = steps.max(1).next_power_of_two();
        Placed { leaves, own: vec![Ranges::default(); 2 * leaves], under: vec![Ranges::default(); 2 * leaves] }
    }

    /// The nodes that cover `[first, last]` exactly, and the nodes above them (those
    /// on the paths from its two ends whose steps reach outside it).
    fn nodes(&self, first: usize, last: usize) -> (Vec<usize>, Vec<usize>) {
        let mut cover = Vec::new();
        let (mut lo, mut hi) = (first + self.leaves, last + self.leaves + 1);
        while lo < hi {
            if lo & 1 == 1 {
                cover.push(lo);
                lo += 1;
            }
            if hi & 1 == 1 {
                hi -= 1;
                cover.push(hi);
            }
            lo >>= 1;
            hi >>= 1;
        }
        let reaches_out = |i: usize| {
            let level = usize::BITS - 1 - i.leading_zeros();
            let width = self.leaves >> level;
            let start = (i - (1 << level)) * width;
            start < first || start + width - 1 > last
        };
        let mut above = Vec::new();
        let (mut a, mut b) = (first + self.leaves, last + self.leaves);
        while a >= 1 {
            for i in [a, b] {
                if reaches_out(i) && !above.contains(&i) {
                    above.push(i);
                }
            }
            a >>= 1;
            b >>= 1;
        }
        (cover, above)
    }

    /// The lowest offset where `size` bytes overlap no placed buffer whose lifetime
    /// overlaps `[first, last]`.
    fn lowest_fit(&self, first: usize, last: usize, size: u64) -> u64 {
        let (cover, above) = self.nodes(first, last);
        let sets: Vec<&Ranges> = cover.iter().map(|&c| &self.under[c]).chain(above.iter().map(|&a| &self.own[a])).collect();
        let mut offset = 0u64;
        // Every offset skipped is blocked, so the first one nothing blocks is the lowest.
        loop {
            let mut moved = false;
            for set in &sets {
                if let Some(end) = set.blocking(offset, size) {
                    offset = end;
                    moved = true;
                }
            }
            if !moved {
                return offset;
            }
        }
    }

    fn insert(&mut self, first: usize, last: usize, start: u64, end: u64) {
        if start == end {
            return;
        }
        let (cover, above) = self.nodes(first, last);
        for &c in &cover {
            self.own[c].add(start, end);
            self.under[c].add(start, end);
        }
        for &a in &above {
            self.under[a].add(start, end);
        }
    }
}

/// Disjoint address ranges `[start, end)`, merged with those they overlap or touch as
/// they are added.
#[derive(Debug, Clone, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn add(&mut self, mut start: u64, mut end: u64) {
        while let Some((&s, &e)) = self.0.range(..=end).next_back() {
            if e < start {
                break;
            }
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    /// The end of the range that overlaps `[at, at + size)`, if one does (the one that
    /// starts last below `at + size`: if any overlaps, it does).
    fn blocking(&self, at: u64, size: u64) -> Option<u64> {
        let (_, &end) = self.0.range(..at.saturating_add(size)).next_back()?;
        (end > at).then_some(end)
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
        for case in 0..400 {
            let steps = 1 + next(40) as usize;
            let count = next(60) as usize;
            let lives: Vec<Life> = (0..count)
                .map(|_| {
                    let first = next(steps as u64) as usize;
                    // Mostly short lifetimes, some spanning most of the program.
                    let span = if next(5) == 0 { steps } else { 3 };
                    let last = (first + next(span as u64) as usize).min(steps - 1);
                    // Aligned sizes as planned, and odd ones to try ranges that touch.
                    let size = if case % 2 == 0 { 64 * (1 + next(8)) } else { 1 + next(300) };
                    Life { size, first, last }
                })
                .collect();
            let got = place(&lives, steps).expect("sizes are small");
            let want = place_by_scanning(&lives, steps);
            assert_eq!(got.offsets, want.offsets, "case {case}: {lives:?}");
            assert_eq!((got.size, got.peak_live), (want.size, want.peak_live), "case {case}");
        }
    }

    #[test]
    fn nested_lifetimes_like_a_backward_pass_are_placed_as_by_scanning() {
        // Activation i lives from step i to step 2n - i, beside every other one; each
        // gradient lives two steps. Sizes repeat, so ties go by order.
        let n = 300;
        let mut lives = Vec::new();
        for i in 0..n {
            lives.push(Life { size: 64 * (1 + (i as u64 * 7) % 3), first: i, last: 2 * n - i });
            lives.push(Life { size: 128, first: 2 * n - i, last: (2 * n - i + 1).min(2 * n) });
        }
        let got = place(&lives, 2 * n + 1).expect("sizes are small");
        let want = place_by_scanning(&lives, 2 * n + 1);
        assert_eq!(got.offsets, want.offsets);
        assert_eq!((got.size, got.peak_live), (want.size, want.peak_live));
    }
}
