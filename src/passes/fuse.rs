//! Fusion: merges the one-kernel-per-op [`Program`] that lowering makes into fewer
//! kernels, so intermediate values stay in registers instead of memory.
//!
//! 1. **Elementwise chains.** A `Map` whose buffer is read by exactly one load, in a
//!    later kernel's expression, is substituted into that expression: the value is
//!    computed where it is used. The load may see the buffer through a transpose, a
//!    slice from the start or a reshape that only adds or drops size-1 dimensions. A
//!    load that broadcasts (which would compute each element many times, unless the
//!    value reads no memory, like an attention mask made from iotas) or reads at an
//!    offset is left alone.
//! 2. **Epilogues.** A `Map` that reads a matmul's or convolution's result once, at the
//!    same element it writes, becomes the kernel's epilogue (bias + ReLU run on each
//!    output tile while it is in cache), if what else it reads is computed before that
//!    kernel or can be (its kernel moves up).
//! 3. **Outputs.** A copy of a buffer into a model output is dropped, and the kernel
//!    that computed the buffer writes the output directly.
//!
//! First, a kernel that computes exactly what an earlier one computed (LayerNorm's mean
//! and its variance's mean) is dropped, its readers reading the earlier result.
//!
//! Relies on lowering's invariant that each arena buffer has one writer.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::*;

/// Expressions stop growing at this many nodes (a bound on code size and on
/// recomputation in registers).
const MAX_EXPR: usize = 64;

pub fn run(p: &mut Program) -> Result<()> {
    merge_identical(p);
    inline_maps(p);
    epilogues(p);
    write_outputs_directly(p);
    p.sweep_buffers();
    Ok(())
}

/// Drops kernels identical to an earlier one but for the arena buffer they write.
///
/// Earlier kernels are found through a hash of what must be equal (the kernel with its
/// output buffer blanked, its symbolic dimensions, and its output's length and type),
/// then confirmed with `==`, so this is linear in the program. A dropped kernel's
/// readers come later, so its buffer is renamed in each kernel as the walk reaches it.
fn merge_identical(p: &mut Program) {
    let mut alias: Vec<BufId> = (0..p.buffers.len()).map(BufId).collect();
    let mut kept: Vec<Step> = Vec::with_capacity(p.steps.len());
    let mut seen: HashMap<u64, Vec<usize>> = HashMap::new(); // hash -> indices in `kept`
    for mut step in std::mem::take(&mut p.steps) {
        visit_views(&mut step.kernel, &mut |v| v.buf = alias[v.buf.0]);
        let out = kernel_writes(&step.kernel);
        if !arena(p, out) {
            kept.push(step);
            continue;
        }
        let key = identity_hash(p, &step);
        let same = seen.get(&key).and_then(|candidates| {
            candidates.iter().copied().find(|&e| {
                let earlier = kernel_writes(&kept[e].kernel);
                let mut renamed = kept[e].kernel.clone();
                retarget(&mut renamed, out);
                p.buffers[earlier.0].len == p.buffers[out.0].len
                    && p.buffers[earlier.0].dtype == p.buffers[out.0].dtype
                    && renamed == step.kernel
                    && kept[e].dims == step.dims
            })
        });
        match same {
            Some(e) => {
                alias[out.0] = kernel_writes(&kept[e].kernel);
                kept[e].origins.extend(step.origins);
            }
            None => {
                seen.entry(key).or_default().push(kept.len());
                kept.push(step);
            }
        }
    }
    p.steps = kept;
}

/// The hash `merge_identical` buckets kernels by.
fn identity_hash(p: &Program, step: &Step) -> u64 {
    let mut blank = step.kernel.clone();
    retarget(&mut blank, BufId(usize::MAX));
    let out = &p.buffers[kernel_writes(&step.kernel).0];
    let mut h = DefaultHasher::new();
    blank.hash(&mut h);
    step.dims.hash(&mut h);
    (out.len, out.dtype).hash(&mut h);
    h.finish()
}

/// How many loads of each buffer all kernels make (a runtime operand counts as one).
fn read_counts<'s>(p: &Program, steps: impl Iterator<Item = &'s Step>) -> Vec<usize> {
    let mut n = vec![0usize; p.buffers.len()];
    for step in steps {
        for b in kernel_read_uses(&step.kernel) {
            n[b.0] += 1;
        }
    }
    n
}

/// The step (by index into `steps`) that writes each buffer.
fn writers(p: &Program, steps: &[Option<Step>]) -> Vec<Option<usize>> {
    let mut w = vec![None; p.buffers.len()];
    for (i, s) in steps.iter().enumerate().rev() {
        if let Some(s) = s {
            w[kernel_writes(&s.kernel).0] = Some(i);
        }
    }
    w
}

fn arena(p: &Program, b: BufId) -> bool {
    matches!(p.buffers[b.0].storage, Storage::Arena { .. })
}

/// Substitutes each `Map` read by exactly one load into the kernel that loads it.
///
/// Steps keep their index while others are removed (a removed step leaves `None`), so
/// each step's writer and each buffer's read count are kept up to date instead of
/// being recomputed after every substitution: substituting a producer moves each of
/// its loads into the consumer, so only the substituted buffer's count changes (to 0).
fn inline_maps(p: &mut Program) {
    let mut steps: Vec<Option<Step>> = std::mem::take(&mut p.steps).into_iter().map(Some).collect();
    let mut reads = read_counts(p, steps.iter().flatten());
    let mut writer = writers(p, &steps);
    let mut k = 0;
    while k < steps.len() {
        let Some(consumer) = &steps[k] else {
            k += 1;
            continue;
        };
        let mut loads: Vec<(&View, &[usize])> = Vec::new();
        for e in kernel_exprs(&consumer.kernel) {
            e.walk(&mut |e| {
                if let Expr::Load { view, vars } = e {
                    loads.push((view, vars));
                }
            });
        }
        let size: usize = kernel_exprs(&consumer.kernel).iter().map(|e| expr_size(e)).sum();
        let domain = consumer.kernel.domain();
        let candidate = loads.into_iter().find_map(|(view, vars)| {
            let buf = view.buf;
            if !arena(p, buf) || reads[buf.0] != 1 {
                return None;
            }
            let w = writer[buf.0].filter(|&w| w < k)?;
            let Kernel::Map { out, expr } = &steps[w].as_ref()?.kernel else { return None };
            if out.offset != 0 || !out.is_contiguous() {
                return None;
            }
            let map = index_map(view, vars, &out.shape)?;
            // Every point of the consumer's loops reads a different element: no
            // recomputation, unless the value reads no memory (an iota mask).
            let used: Vec<usize> = map.iter().flatten().copied().collect();
            let broadcast = domain.iter().enumerate().any(|(v, &n)| n > 1 && !used.contains(&v));
            let mut loaded = Vec::new();
            expr_bufs(expr, &mut loaded);
            if broadcast && (!loaded.is_empty() || expr_size(expr) > 8) {
                return None;
            }
            (size + expr_size(expr) <= MAX_EXPR).then_some((w, buf, map))
        });
        let Some((w, buf, map)) = candidate else {
            k += 1;
            continue;
        };
        let Some(Step { kernel: Kernel::Map { expr, .. }, origins: mut producer_origins, .. }) = steps[w].take() else {
            unreachable!("checked above")
        };
        let dtype = p.buffers[buf.0].dtype;
        let value = if p.expr_dtype(&expr) == dtype { expr } else { Expr::Cast(Box::new(expr), dtype) };
        let Some(consumer) = steps[k].as_mut() else { unreachable!("the consumer is step k") };
        replace_loads(&mut consumer.kernel, buf, &|_| reindex(&value, &map));
        producer_origins.append(&mut consumer.origins);
        consumer.origins = producer_origins;
        reads[buf.0] = 0;
        writer[buf.0] = None;
        // look at the consumer again: the substituted expression brought new loads
    }
    p.steps = steps.into_iter().flatten().collect();
}

/// For a load of a buffer computed row-major with `shape`, through `view` at loop
/// variables `vars`: the consumer's loop variable indexing each producer dimension
/// (`None`: index 0). `None` when the view is not such a renaming of dimensions.
fn index_map(view: &View, vars: &[usize], shape: &[u64]) -> Option<Vec<Option<usize>>> {
    if view.offset != 0 {
        return None;
    }
    let strides = contiguous_strides(shape);
    let mut map = vec![None; shape.len()];
    for ((&n, &stride), &var) in view.shape.iter().zip(&view.strides).zip(vars) {
        if n == 1 {
            continue;
        }
        if stride == 0 || var == usize::MAX {
            return None; // a broadcast
        }
        let q = (0..shape.len()).find(|&q| shape[q] > 1 && strides[q] == stride)?;
        if map[q].is_some() || n > shape[q] {
            return None;
        }
        map[q] = Some(var);
    }
    Some(map)
}

/// The producer's expression with its loop variables renamed by `map`.
fn reindex(e: &Expr, map: &[Option<usize>]) -> Expr {
    let var = |v: usize| if v == usize::MAX { None } else { map[v] };
    let rec = |x: &Expr| Box::new(reindex(x, map));
    // A dimension whose index is fixed at 0 no longer needs a loop variable.
    let remap = |view: &View, vars: &[usize], keep: Option<usize>| {
        let mut view = view.clone();
        let mut out = Vec::new();
        for (d, &v) in vars.iter().enumerate() {
            if Some(d) == keep {
                out.push(v);
                continue;
            }
            match var(v) {
                Some(nv) => out.push(nv),
                None => {
                    view.strides[d] = 0;
                    out.push(usize::MAX);
                }
            }
        }
        (view, out)
    };
    match e {
        Expr::Const(..) | Expr::Extent(_) => e.clone(),
        Expr::Index(v) => var(*v).map_or(Expr::Const(0.0, Dtype::I64), Expr::Index),
        Expr::Load { view, vars } => {
            let (view, vars) = remap(view, vars, None);
            Expr::Load { view, vars }
        }
        Expr::Gather { view, vars, axis, index } => {
            let (view, vars) = remap(view, vars, Some(*axis));
            Expr::Gather { view, vars, axis: *axis, index: rec(index) }
        }
        Expr::Unary(u, a, d) => Expr::Unary(*u, rec(a), *d),
        Expr::Binary(b, l, r, d) => Expr::Binary(*b, rec(l), rec(r), *d),
        Expr::Select(c, a, b, d) => Expr::Select(rec(c), rec(a), rec(b), *d),
        Expr::Where(c, a, b, d) => Expr::Where(rec(c), rec(a), rec(b), *d),
        Expr::Cast(a, d) => Expr::Cast(rec(a), *d),
    }
}

/// The loads in a kernel's expressions: view and loop variables.
fn kernel_loads(k: &Kernel) -> Vec<(View, Vec<usize>)> {
    let mut out = Vec::new();
    for e in kernel_exprs(k) {
        e.walk(&mut |e| {
            if let Expr::Load { view, vars } = e {
                out.push((view.clone(), vars.clone()));
            }
        });
    }
    out
}

/// Replaces every load of `buf` in the kernel's expressions by `with(load)`.
fn replace_loads(k: &mut Kernel, buf: BufId, with: &dyn Fn(&Expr) -> Expr) {
    match k {
        Kernel::Map { expr, .. } | Kernel::Reduce { expr, .. } | Kernel::ArgReduce { expr, .. } => replace_expr_loads(expr, buf, with),
        Kernel::Gemm { epilogue: Some(e), .. } | Kernel::Conv { epilogue: Some(e), .. } => replace_expr_loads(e, buf, with),
        _ => {}
    }
}

fn replace_expr_loads(e: &mut Expr, buf: BufId, with: &dyn Fn(&Expr) -> Expr) {
    e.walk_mut(&mut |e| {
        if matches!(e, Expr::Load { view, .. } if view.buf == buf) {
            *e = with(e);
        }
    });
}

/// What the epilogue and output passes look up as they move and merge steps, kept up
/// to date instead of recomputed (steps are named by their index in the pass's input).
struct Index {
    /// Loads of each buffer ([`read_counts`]).
    reads: Vec<usize>,
    /// The step that writes each buffer.
    writer: Vec<Option<usize>>,
    /// A step that reads each buffer: the only one where `reads` is 1.
    reader: Vec<Option<usize>>,
}

impl Index {
    fn new(p: &Program, steps: &[Option<Step>]) -> Index {
        let mut reader = vec![None; p.buffers.len()];
        for (i, s) in steps.iter().enumerate() {
            if let Some(s) = s {
                for b in kernel_reads(&s.kernel) {
                    reader[b.0] = Some(i);
                }
            }
        }
        Index { reads: read_counts(p, steps.iter().flatten()), writer: writers(p, steps), reader }
    }
}

/// The `Map` that is a matmul's or convolution's epilogue, made part of that kernel.
///
/// Steps are moved to the output list in order; a step is "before g" exactly when it
/// is already there, so moving the kernels an epilogue needs ahead of `g` is a push,
/// not a shift of every later step.
fn epilogues(p: &mut Program) {
    let mut steps: Vec<Option<Step>> = std::mem::take(&mut p.steps).into_iter().map(Some).collect();
    let mut ix = Index::new(p, &steps);
    let mut placed = vec![false; steps.len()];
    let mut out: Vec<Step> = Vec::with_capacity(steps.len());
    for g in 0..steps.len() {
        if steps[g].is_none() {
            continue; // moved ahead of an earlier kernel, or merged into one
        }
        if let Some((m, hoist)) = epilogue_of(p, &steps, &ix, &placed, g) {
            // Lowering's one-writer invariant makes moving them earlier safe.
            for h in hoist {
                if let Some(step) = steps[h].take() {
                    placed[h] = true;
                    out.push(step);
                }
            }
            let Some(Step { kernel: Kernel::Map { out: mout, mut expr }, origins, .. }) = steps[m].take() else {
                unreachable!("checked by epilogue_of")
            };
            let Some(host) = steps[g].as_mut() else { unreachable!("step g is present") };
            let result = kernel_writes(&host.kernel);
            // The epilogue reads the product where the kernel now writes it.
            let own = Expr::Load { view: mout.clone(), vars: (0..mout.shape.len()).collect() };
            replace_expr_loads(&mut expr, result, &|_| own.clone());
            let mut moved = Vec::new();
            expr_bufs(&expr, &mut moved);
            for b in moved {
                ix.reader[b.0] = Some(g);
            }
            ix.reads[result.0] = 0;
            ix.reads[mout.buf.0] += 1;
            ix.writer[result.0] = None;
            ix.writer[mout.buf.0] = Some(g);
            retarget(&mut host.kernel, mout.buf);
            if let Kernel::Gemm { epilogue, .. } | Kernel::Conv { epilogue, .. } = &mut host.kernel {
                *epilogue = Some(expr);
            }
            host.origins.extend(origins);
        }
        if let Some(step) = steps[g].take() {
            placed[g] = true;
            out.push(step);
        }
    }
    p.steps = out;
}

/// The index of the `Map` that can become kernel `g`'s epilogue, and those of the
/// kernels between them that must move before `g` for that (in order). `placed`: the
/// steps already before `g`.
fn epilogue_of(p: &Program, steps: &[Option<Step>], ix: &Index, placed: &[bool], g: usize) -> Option<(usize, Vec<usize>)> {
    let out = match &steps[g].as_ref()?.kernel {
        Kernel::Gemm { c, epilogue: None, .. } => c,
        Kernel::Conv { out, epilogue: None, .. } => out,
        _ => return None,
    };
    let result = out.buf;
    if !arena(p, result) || !p.is_whole(out) || ix.reads[result.0] != 1 {
        return None;
    }
    let m = ix.reader[result.0]?;
    let Kernel::Map { out: mout, expr } = &steps[m].as_ref()?.kernel else { return None };
    let dtype = p.buffers[result.0].dtype;
    if mout.shape != out.shape || !p.is_whole(mout) || p.buffers[mout.buf.0].dtype != dtype || p.expr_dtype(expr) != dtype {
        return None;
    }
    let map_kernel = &steps[m].as_ref()?.kernel;
    // The product is read at the element the map writes.
    let at_same = kernel_loads(map_kernel).iter().filter(|(v, _)| v.buf == result).all(|(v, vars)| p.is_identity_load(v, vars, &out.shape));
    // Everything else it reads exists before kernel g runs, or is computed by a kernel
    // between g and m that can run before g (it reads only what exists before g).
    let before_g = |b: BufId| ix.writer[b.0].is_none_or(|w| placed[w]);
    let mut hoist = Vec::new();
    for b in kernel_reads(map_kernel) {
        if b == result || before_g(b) {
            continue;
        }
        let w = ix.writer[b.0]?;
        if !kernel_reads(&steps[w].as_ref()?.kernel).into_iter().all(before_g) {
            return None;
        }
        hoist.push(w);
    }
    hoist.sort();
    at_same.then_some((m, hoist))
}

/// Drops `out = copy of t` when `t` has no other reader: `t`'s kernel writes `out`.
/// The copy was `t`'s only reader, so renaming `t` touches only its writer.
fn write_outputs_directly(p: &mut Program) {
    let mut steps: Vec<Option<Step>> = std::mem::take(&mut p.steps).into_iter().map(Some).collect();
    let mut ix = Index::new(p, &steps);
    for i in 0..steps.len() {
        let Some(step) = &steps[i] else { continue };
        let copy = match &step.kernel {
            Kernel::Map { out, expr: Expr::Load { view, vars } }
                if matches!(p.buffers[out.buf.0].storage, Storage::Output(_))
                    && p.is_whole(out)
                    && p.is_identity_load(view, vars, &out.shape)
                    && arena(p, view.buf)
                    && ix.reads[view.buf.0] == 1
                    && p.buffers[view.buf.0].dtype == p.buffers[out.buf.0].dtype =>
            {
                Some((view.buf, out.buf))
            }
            _ => None,
        };
        let Some((from, to)) = copy else { continue };
        let Some(w) = ix.writer[from.0].filter(|&w| steps[w].is_some()) else { continue };
        let Some(copy) = steps[i].take() else { continue };
        if let Some(writer) = steps[w].as_mut() {
            visit_views(&mut writer.kernel, &mut |v| {
                if v.buf == from {
                    v.buf = to;
                }
            });
            writer.origins.extend(copy.origins);
        }
        ix.reads[from.0] = 0;
        ix.writer[from.0] = None;
        ix.writer[to.0] = Some(w);
    }
    p.steps = steps.into_iter().flatten().collect();
}
