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
fn merge_identical(p: &mut Program) {
    let mut k = 0;
    while k < p.steps.len() {
        let out = kernel_writes(&p.steps[k].kernel);
        let same = arena(p, out)
            .then(|| {
                (0..k).find(|&e| {
                    let earlier = kernel_writes(&p.steps[e].kernel);
                    let mut renamed = p.steps[e].kernel.clone();
                    retarget(&mut renamed, out);
                    arena(p, earlier)
                        && p.buffers[earlier.0].len == p.buffers[out.0].len
                        && p.buffers[earlier.0].dtype == p.buffers[out.0].dtype
                        && renamed == p.steps[k].kernel
                        && p.steps[e].dims == p.steps[k].dims
                })
            })
            .flatten();
        match same {
            Some(e) => {
                let step = p.steps.remove(k);
                let earlier = kernel_writes(&p.steps[e].kernel);
                p.rename_buffer(out, earlier);
                p.steps[e].origins.extend(step.origins);
            }
            None => k += 1,
        }
    }
}

/// How many loads of each buffer all kernels make (a runtime operand counts as one).
fn read_counts(p: &Program) -> Vec<usize> {
    let mut n = vec![0usize; p.buffers.len()];
    for step in &p.steps {
        for b in kernel_read_uses(&step.kernel) {
            n[b.0] += 1;
        }
    }
    n
}

fn writer(p: &Program, buf: BufId) -> Option<usize> {
    p.steps.iter().position(|s| kernel_writes(&s.kernel) == buf)
}

fn arena(p: &Program, b: BufId) -> bool {
    matches!(p.buffers[b.0].storage, Storage::Arena { .. })
}

fn inline_maps(p: &mut Program) {
    let mut k = 0;
    while k < p.steps.len() {
        let reads = read_counts(p);
        let candidate = kernel_loads(&p.steps[k].kernel).into_iter().find_map(|(view, vars)| {
            let buf = view.buf;
            if !arena(p, buf) || reads[buf.0] != 1 {
                return None;
            }
            let w = writer(p, buf).filter(|&w| w < k)?;
            let Kernel::Map { out, expr } = &p.steps[w].kernel else { return None };
            if out.offset != 0 || !out.is_contiguous() {
                return None;
            }
            let map = index_map(&view, &vars, &out.shape)?;
            // Every point of the consumer's loops reads a different element: no
            // recomputation.
            // recomputation, unless the value reads no memory (an iota mask).
            let used: Vec<usize> = map.iter().flatten().copied().collect();
            let broadcast = p.steps[k].kernel.domain().iter().enumerate().any(|(v, &n)| n > 1 && !used.contains(&v));
            let mut reads = Vec::new();
            expr_bufs(expr, &mut reads);
            if broadcast && (!reads.is_empty() || expr_size(expr) > 8) {
                return None;
            }
            let size: usize = kernel_exprs(&p.steps[k].kernel).iter().map(|e| expr_size(e)).sum();
            (size + expr_size(expr) <= MAX_EXPR).then_some((w, buf, map))
        });
        let Some((w, buf, map)) = candidate else {
            k += 1;
            continue;
        };
        let producer = p.steps.remove(w);
        let Kernel::Map { expr, .. } = producer.kernel else { unreachable!("checked above") };
        let dtype = p.buffers[buf.0].dtype;
        let value = if p.expr_dtype(&expr) == dtype { expr } else { Expr::Cast(Box::new(expr), dtype) };
        let consumer = &mut p.steps[k - 1];
        replace_loads(&mut consumer.kernel, buf, &|_| reindex(&value, &map));
        let mut origins = producer.origins;
        origins.append(&mut consumer.origins);
        consumer.origins = origins;
        k -= 1; // the consumer moved up one place; look at it again
    }
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
        Expr::Const(..) => e.clone(),
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

/// The `Map` that is a matmul's or convolution's epilogue, made part of that kernel.
fn epilogues(p: &mut Program) {
    let mut g = 0;
    while g < p.steps.len() {
        if let Some((m, hoist)) = epilogue_of(p, g) {
            // Lowering's one-writer invariant makes moving them earlier safe.
            for (moved, &h) in hoist.iter().enumerate() {
                let step = p.steps.remove(h);
                p.steps.insert(g + moved, step);
            }
            g += hoist.len();
            let step = p.steps.remove(m);
            let Kernel::Map { out, mut expr } = step.kernel else { unreachable!("checked by epilogue_of") };
            let result = kernel_writes(&p.steps[g].kernel);
            // The epilogue reads the product where the kernel now writes it.
            let own = Expr::Load { view: out.clone(), vars: (0..out.shape.len()).collect() };
            replace_expr_loads(&mut expr, result, &|_| own.clone());
            let kernel = &mut p.steps[g].kernel;
            retarget(kernel, out.buf);
            if let Kernel::Gemm { epilogue, .. } | Kernel::Conv { epilogue, .. } = kernel {
                *epilogue = Some(expr);
            }
            p.steps[g].origins.extend(step.origins);
        }
        g += 1;
    }
}

/// The index of the `Map` that can become kernel `g`'s epilogue, and those of the
/// kernels between them that must move before `g` for that.
fn epilogue_of(p: &Program, g: usize) -> Option<(usize, Vec<usize>)> {
    let out = match &p.steps[g].kernel {
        Kernel::Gemm { c, epilogue: None, .. } => c,
        Kernel::Conv { out, epilogue: None, .. } => out,
        _ => return None,
    };
    let result = out.buf;
    if !arena(p, result) || !p.is_whole(out) || read_counts(p)[result.0] != 1 {
        return None;
    }
    let m = p.steps.iter().position(|s| kernel_reads(&s.kernel).contains(&result))?;
    let Kernel::Map { out: mout, expr } = &p.steps[m].kernel else { return None };
    let dtype = p.buffers[result.0].dtype;
    if mout.shape != out.shape || !p.is_whole(mout) || p.buffers[mout.buf.0].dtype != dtype || p.expr_dtype(expr) != dtype {
        return None;
    }
    // The product is read at the element the map writes.
    let at_same = kernel_loads(&p.steps[m].kernel).iter().filter(|(v, _)| v.buf == result).all(|(v, vars)| p.is_identity_load(v, vars, &out.shape));
    // Everything else it reads exists before kernel g runs, or is computed by a kernel
    // between g and m that can run before g (it reads only what exists before g).
    let before_g = |b: BufId| writer(p, b).is_none_or(|w| w < g);
    let mut hoist = Vec::new();
    for b in kernel_reads(&p.steps[m].kernel) {
        if b == result || before_g(b) {
            continue;
        }
        let w = writer(p, b)?;
        if !kernel_reads(&p.steps[w].kernel).into_iter().all(before_g) {
            return None;
        }
        hoist.push(w);
    }
    hoist.sort();
    at_same.then_some((m, hoist))
}

/// Drops `out = copy of t` when `t` has no other reader: `t`'s kernel writes `out`.
fn write_outputs_directly(p: &mut Program) {
    let mut i = 0;
    while i < p.steps.len() {
        let reads = read_counts(p);
        let copy = match &p.steps[i].kernel {
            Kernel::Map { out, expr: Expr::Load { view, vars } }
                if matches!(p.buffers[out.buf.0].storage, Storage::Output(_))
                    && p.is_whole(out)
                    && p.is_identity_load(view, vars, &out.shape)
                    && arena(p, view.buf)
                    && reads[view.buf.0] == 1
                    && p.buffers[view.buf.0].dtype == p.buffers[out.buf.0].dtype =>
            {
                Some((view.buf, out.buf))
            }
            _ => None,
        };
        match copy {
            Some((from, to)) if writer(p, from).is_some() => {
                let step = p.steps.remove(i);
                p.rename_buffer(from, to);
                let w = writer(p, to).expect("renamed writer");
                p.steps[w].origins.extend(step.origins);
            }
            _ => i += 1,
        }
    }
}
