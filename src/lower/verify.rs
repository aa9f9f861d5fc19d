//! The program verifier: every invariant of a [`Program`] that a program pass could
//! break, checked after lowering and after every program pass (`passes::compile`), as
//! `ir::verify` checks graphs. A failure is a bug in mithrilc, never in the user's
//! model; its message names the kernel (`k3`) and the buffer (`%b5`).
//!
//! What it checks:
//! - ports, buffers and storage agree: `inputs[i]` is the buffer stored as `input i`
//!   (likewise outputs and constants), parameters are weight buffers, aligned, their
//!   stored elements inside `weights_size`; kernels write only arena and output buffers;
//! - every view a kernel passes to the runtime stays inside its buffer (its lowest and
//!   highest element, in checked arithmetic), and every load and gather reads inside
//!   its buffer at every point of the kernel's domain where it is evaluated: a load
//!   under a `Select` is bounded by what the guard says about the loop variables
//!   (padding, concatenation and window guards are comparisons of affine forms of
//!   loop variables with constants, and those are read);
//! - loads name one loop variable of the domain ([`Kernel::domain`]) per view
//!   dimension (`_` for none; a gather's axis is `_`), and every expression has the type
//!   the graph's rule gives its operands ([`scalar_type`]: promotion, comparisons give
//!   bool), a gather's index is an integer;
//! - output views are contiguous where [`Kernel`] says so, and a kernel reads the
//!   buffer it writes only as `memory` lets it: a `Map` or an epilogue, at the very
//!   element it writes;
//! - a kernel reads an arena or output buffer only after an earlier kernel wrote it;
//! - a local buffer is the scores of one attention kernel or a statistic of one row
//!   kernel, and used by no other; a row kernel reads a statistic only at its row, and
//!   only after computing it;
//! - [`Step::dims`] has one entry per domain dimension, each symbol in `symbols`;
//! - once the arena is planned, every arena buffer is aligned and inside `arena_size`,
//!   and no two buffers live at the same step overlap (a buffer lives from the first
//!   step that uses it to the last, as `memory::plan` computes it).

use std::collections::BTreeMap;

use super::*;

/// Verifies `p`; `planned` says the arena has been planned (after `memory`), which is
/// also assumed when `arena_size` is set.
pub fn verify(p: &Program, planned: bool) -> Result<()> {
    ports(p)?;
    let mut written = vec![false; p.buffers.len()];
    // The kernel each local buffer belongs to.
    let mut owner: BTreeMap<BufId, usize> = BTreeMap::new();
    for (k, step) in p.steps.iter().enumerate() {
        let fail = |msg: String| Error::internal(format!("program verifier: k{k}: {msg}"));
        kernel(p, step, &written).map_err(fail)?;
        written[kernel_writes(&step.kernel).0] = true;
        for local in local_buffers(&step.kernel) {
            if let Some(other) = owner.insert(local, k) {
                return Err(fail(format!("the local buffer %b{} is also k{other}'s", local.0)));
            }
        }
    }
    if planned || p.arena_size > 0 {
        arena(p)?;
    }
    Ok(())
}

/// The local buffers a kernel owns: an attention's scores, a row kernel's statistics.
fn local_buffers(k: &Kernel) -> Vec<BufId> {
    match k {
        Kernel::Attention { scores, .. } => vec![scores.buf],
        Kernel::Rows { stats, .. } => stats.iter().map(|st| st.view.buf).collect(),
        _ => vec![],
    }
}

fn fail(msg: String) -> Error {
    Error::internal(format!("program verifier: {msg}"))
}

fn ports(p: &Program) -> Result<()> {
    if let Some(l) = p.loss {
        if l >= p.outputs.len() {
            return Err(fail(format!("the loss is output {l} of {}", p.outputs.len())));
        }
    }
    let kinds: [(&str, &[Port]); 3] = [("input", &p.inputs), ("output", &p.outputs), ("weight", &p.weights)];
    for (kind, list) in kinds {
        for (i, port) in list.iter().enumerate() {
            let b = p.buffers.get(port.buf.0).ok_or_else(|| fail(format!("{kind} {i} {:?} is buffer %b{} of {}", port.name, port.buf.0, p.buffers.len())))?;
            let right = match (kind, &b.storage) {
                ("input", Storage::Input(j)) | ("output", Storage::Output(j)) => *j == i,
                ("weight", Storage::Weight { .. }) => true,
                _ => false,
            };
            if !right {
                return Err(fail(format!("{kind} {i} {:?} is %b{}, stored as {:?}", port.name, port.buf.0, b.storage)));
            }
            if port.dims.len() != port.shape.len() || port.dims.iter().flatten().any(|&s| s >= p.symbols.len()) {
                return Err(fail(format!("{kind} {i} {:?}: dims {:?} for shape {:?} and {} symbols", port.name, port.dims, port.shape, p.symbols.len())));
            }
            // A weight in a target's own layout (panels, Winograd's transform) takes what
            // the target's pass sized its buffer for; others their elements.
            let elements = port.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(|| fail(format!("{kind} {i} {:?}: shape {:?} overflows", port.name, port.shape)))?;
            let stored = match (kind, port.layout) {
                ("weight", Layout::Panels | Layout::Winograd | Layout::ConvPanels) if elements > 0 => b.len,
                _ => elements,
            };
            if stored > b.len {
                return Err(fail(format!("{kind} {i} {:?} takes {stored} elements, more than %b{}'s {}", port.name, port.buf.0, b.len)));
            }
            // A parameter takes its stored elements of the blob (none for an empty one,
            // whose buffer still has one element).
            if port.stored != Stored::F32 && (kind != "weight" || b.dtype != Dtype::F32) {
                return Err(fail(format!("{kind} {i} {:?} of {} is stored as {}", port.name, b.dtype.name(), port.stored.name())));
            }
            if let Storage::Weight { offset } = b.storage {
                let end = port.stored_bytes(stored, b.dtype).and_then(|n| n.checked_add(offset));
                if offset % ALIGN != 0 || end.is_none_or(|end| end > p.weights_size) {
                    return Err(fail(format!("weight {i} {:?} at offset {offset} ({stored} elements) is unaligned or outside the {}-byte weights", port.name, p.weights_size)));
                }
            }
        }
    }
    // A weight stored narrow is read only through a conversion: a dequantization, or a
    // kernel that widens it as it reads (`Port::read_as_stored`).
    for (i, step) in p.steps.iter().enumerate() {
        for w in p.weights.iter().filter(|w| w.stored != Stored::F32) {
            let widened = match &step.kernel {
                Kernel::Dequantize { w: v, .. } => v.buf == w.buf,
                k => w.read_as_stored(k, p.buffers[w.buf.0].len),
            };
            if !widened && kernel_read_uses(&step.kernel).contains(&w.buf) {
                return Err(fail(format!("kernel {i} reads weight {:?}, stored as {}, without widening it", w.name, w.stored.name())));
            }
        }
    }
    let params: std::collections::HashSet<usize> = p.weights.iter().map(|w| w.buf.0).collect();
    for (i, b) in p.buffers.iter().enumerate() {
        let bad = match &b.storage {
            Storage::Input(j) => p.inputs.get(*j).is_none_or(|port| port.buf.0 != i),
            Storage::Output(j) => p.outputs.get(*j).is_none_or(|port| port.buf.0 != i),
            Storage::Const(j) => p.consts.get(*j).is_none_or(|c| c.dtype() != b.dtype || c.numel().max(1) as u64 != b.len),
            Storage::Weight { .. } => !params.contains(&i),
            Storage::Arena { .. } | Storage::Local => false,
        };
        if bad {
            return Err(fail(format!("%b{i} {:?} ({}[{}]) stored as {:?} matches no port or constant", b.name, b.dtype.name(), b.len, b.storage)));
        }
    }
    Ok(())
}

/// Where a kernel's expression may read the buffer the kernel writes.
#[derive(Clone, Copy, PartialEq)]
enum OwnReads {
    /// Nowhere.
    Never,
    /// Only at the element being written (an in-place `Map`, an epilogue).
    AtElement,
}

fn kernel(p: &Program, step: &Step, written: &[bool]) -> Result<(), String> {
    let k = &step.kernel;
    let mut views = Vec::new();
    let mut k2 = k.clone();
    visit_views(&mut k2, &mut |v| views.push(v.clone()));
    for v in &views {
        if v.buf.0 >= p.buffers.len() {
            return Err(format!("view of %b{}, of {} buffers", v.buf.0, p.buffers.len()));
        }
        if v.shape.len() != v.strides.len() {
            return Err(format!("view of %b{} has shape {:?} and strides {:?}", v.buf.0, v.shape, v.strides));
        }
    }
    let out = kernel_writes(k);
    if !matches!(p.buffers[out.0].storage, Storage::Arena { .. } | Storage::Output(_)) {
        return Err(format!("writes %b{}, stored as {:?}", out.0, p.buffers[out.0].storage));
    }
    // A convolution's or a product's scratch is its own to fill.
    let scratch = match k {
        Kernel::Conv { scratch: Some(s), .. } | Kernel::Gemm { scratch: Some(s), .. } => Some(s.buf),
        _ => None,
    };
    for r in kernel_reads(k) {
        if r != out && Some(r) != scratch && matches!(p.buffers[r.0].storage, Storage::Arena { .. } | Storage::Output(_)) && !written[r.0] {
            return Err(format!("reads %b{} before any kernel writes it", r.0));
        }
    }
    if let Kernel::Gemm { a, b, c, .. } = k {
        if a.shape.len() < 2 || b.shape.len() < 2 || c.shape.len() < 2 {
            return Err(format!("gemm of {:?} by {:?} into {:?}", a.shape, b.shape, c.shape));
        }
    }
    let domain = k.domain();
    if step.dims.len() != domain.len() {
        return Err(format!("dims {:?} for a domain of rank {}", step.dims, domain.len()));
    }
    let mut names = Vec::new();
    for e in step.dims.iter().flatten() {
        e.symbols(&mut names);
    }
    if let Some(s) = names.iter().find(|s| !p.symbols.iter().any(|(n, _)| n == *s)) {
        return Err(format!("dims name the symbol {s}, which the program does not list"));
    }
    let contiguous = |what: &str, v: &View| if v.is_contiguous() { Ok(()) } else { Err(format!("{what} %b{} is not contiguous: {}", v.buf.0, print::view(p, v))) };
    let whole = |what: &str, v: &View| within(p, v, &full(v)).map_err(|e| format!("{what} {e}"));
    // A library call's scratch: a whole arena buffer.
    let arena_scratch = |s: Option<&View>| match s {
        Some(s) if !matches!(p.buffers[s.buf.0].storage, Storage::Arena { .. }) => Err(format!("scratch %b{} is stored as {:?}", s.buf.0, p.buffers[s.buf.0].storage)),
        Some(s) => whole("the scratch", s),
        None => Ok(()),
    };
    let out_dtype = p.buffers[out.0].dtype;
    match k {
        Kernel::Map { out: o, expr } => {
            contiguous("the output", o)?;
            whole("the output", o)?;
            let d = body(p, expr, &domain, o, OwnReads::AtElement)?;
            same_dtype("the body", d, out_dtype)?;
        }
        Kernel::Reduce { out: o, expr, kind, .. } => {
            contiguous("the output", o)?;
            whole("the output", o)?;
            let d = body(p, expr, &domain, o, OwnReads::Never)?;
            // A sum of f16 or bf16 products may multiply in f32 (`lower::product_dtype`).
            let exact_products = *kind == crate::ir::ReduceKind::Sum && d == crate::lower::product_dtype(out_dtype);
            if !exact_products {
                same_dtype("the body", d, out_dtype)?;
            }
        }
        Kernel::ArgReduce { out: o, expr, .. } => {
            contiguous("the output", o)?;
            whole("the output", o)?;
            body(p, expr, &domain, o, OwnReads::Never)?;
            if !out_dtype.is_int() {
                return Err(format!("writes indices into %b{}, a {} buffer", out.0, out_dtype.name()));
            }
        }
        Kernel::Gemm { a, b, c, epilogue, scratch } => {
            let r = c.shape.len();
            let fits = r >= 2 && a.shape.len() == r && b.shape.len() == r && a.shape[..r - 1] == c.shape[..r - 1] && b.shape[..r - 2] == c.shape[..r - 2] && b.shape[r - 1] == c.shape[r - 1] && b.shape[r - 2] == a.shape[r - 1];
            if !fits {
                return Err(format!("gemm of {:?} by {:?} into {:?}", a.shape, b.shape, c.shape));
            }
            contiguous("the output", c)?;
            for (what, v) in [("operand a", a), ("operand b", b), ("the output", c)] {
                whole(what, v)?;
            }
            arena_scratch(scratch.as_ref())?;
            // an int8 weight's product quantizes its rows into the scratch
            if p.weights.iter().any(|w| w.buf == b.buf && w.stored == Stored::Int8) {
                let rows = c.shape[..r - 1].iter().product::<u64>();
                let need = crate::lower::int8_scratch_bytes(rows, a.shape[r - 1]);
                let have = scratch.as_ref().map(|s| s.numel() * p.buffers[s.buf.0].dtype.size() as u64);
                if need.is_none() || have < need {
                    return Err(format!("an int8 product of {:?} by %b{} has {have:?} bytes of scratch, not {need:?}", a.shape, b.buf.0));
                }
            }
            for v in [Some(a), Some(b), scratch.as_ref()].into_iter().flatten() {
                if v.buf == out {
                    return Err(format!("gemm reads its output %b{}", out.0));
                }
            }
            if let Some(e) = epilogue {
                same_dtype("the epilogue", body(p, e, &c.shape, c, OwnReads::AtElement)?, out_dtype)?;
            }
        }
        Kernel::Conv { x, w, out: o, attrs, epilogue, scratch } => {
            for (what, v) in [("the input", x), ("the weight", w), ("the output", o)] {
                contiguous(what, v)?;
                whole(what, v)?;
            }
            arena_scratch(scratch.as_ref())?;
            // an int8 weight's convolution (2-d, one group, the whole weight in its panels, of
            // a depth its sums hold) quantizes its images into the scratch
            if let Some(port) = p.weights.iter().find(|wt| wt.buf == w.buf && wt.stored == Stored::Int8) {
                let pair = |v: &[u64]| (v.len() == 2).then(|| (v[0], v[1]));
                let depth = w.shape.iter().skip(1).try_fold(1u64, |n, &d| n.checked_mul(d));
                let fits = [x, w, o].iter().all(|v| v.shape.len() == 4)
                    && attrs.groups == 1
                    && port.layout == Layout::ConvPanels
                    && w.shape == port.shape
                    && x.shape[1] == w.shape[1]
                    && depth.is_some_and(|k| k <= crate::lower::INT8_MAX_K);
                if !fits {
                    return Err(format!("an int8 convolution of {:?} by %b{} {:?} stored {:?} is not one mr_conv2d_i8_mt takes", x.shape, w.buf.0, w.shape, port.layout));
                }
                let need = pair(&attrs.stride)
                    .zip(pair(&attrs.dilation))
                    .and_then(|(stride, dilation)| crate::lower::int8_conv_scratch_bytes(o.shape[0], x.shape[1], (w.shape[2], w.shape[3]), (o.shape[2], o.shape[3]), stride, dilation));
                let have = scratch.as_ref().map(|s| s.numel() * p.buffers[s.buf.0].dtype.size() as u64);
                if need.is_none() || have < need {
                    return Err(format!("an int8 convolution of {:?} by %b{} has {have:?} bytes of scratch, not {need:?}", x.shape, w.buf.0));
                }
            }
            if [Some(x), Some(w), scratch.as_ref()].into_iter().flatten().any(|v| v.buf == out) {
                return Err(format!("convolution reads its output %b{}", out.0));
            }
            if let Some(e) = epilogue {
                same_dtype("the epilogue", body(p, e, &o.shape, o, OwnReads::AtElement)?, out_dtype)?;
            }
        }
        Kernel::Pool { x, out: o, .. } | Kernel::Softmax { x, out: o, .. } => {
            for (what, v) in [("the input", x), ("the output", o)] {
                contiguous(what, v)?;
                whole(what, v)?;
            }
            if x.buf == out {
                return Err(format!("reads its output %b{}", out.0));
            }
        }
        Kernel::Attention { q, k: kt, v, out: o, scores, score } => {
            let r = o.shape.len();
            let batch = |x: &View| x.shape.len() == r && x.shape[..r - 2] == o.shape[..r - 2];
            let fits = r >= 2
                && [q, kt, v, scores].into_iter().all(batch)
                && q.shape[r - 2] == o.shape[r - 2]
                && scores.shape[r - 2..] == [q.shape[r - 2], kt.shape[r - 1]]
                && kt.shape[r - 2] == q.shape[r - 1]
                && v.shape[r - 2..] == [kt.shape[r - 1], o.shape[r - 1]];
            if !fits {
                return Err(format!("attention of {:?}, {:?}, {:?} with scores {:?} into {:?}", q.shape, kt.shape, v.shape, scores.shape, o.shape));
            }
            if !o.is_dense() {
                return Err(format!("the output %b{} is not dense: {}", o.buf.0, print::view(p, o)));
            }
            contiguous("the scores", scores)?;
            for (what, x) in [("q", q), ("k", kt), ("v", v), ("the output", o), ("the scores", scores)] {
                whole(what, x)?;
            }
            if [q, kt, v].into_iter().any(|x| x.buf == out) {
                return Err(format!("attention reads its output %b{}", out.0));
            }
            if p.buffers[scores.buf.0].storage != Storage::Local {
                return Err(format!("the scores %b{} are stored as {:?}, not local", scores.buf.0, p.buffers[scores.buf.0].storage));
            }
            if let Some(e) = score {
                let mut read = Vec::new();
                expr_bufs(e, &mut read);
                if read.contains(&out) {
                    return Err(format!("the score reads the output %b{}", out.0));
                }
                same_dtype("the score", body(p, e, &scores.shape, scores, OwnReads::AtElement)?, p.buffers[scores.buf.0].dtype)?;
            }
        }
        Kernel::Rows { out: o, cols, stats, expr } => {
            contiguous("the output", o)?;
            whole("the output", o)?;
            let rows = o.shape.len().checked_sub(*cols).filter(|_| *cols > 0).ok_or_else(|| format!("rows of {cols} columns in an output of rank {}", o.shape.len()))?;
            for (i, st) in stats.iter().enumerate() {
                let b = st.view.buf;
                if p.buffers[b.0].storage != Storage::Local || !p.is_whole(&st.view) || st.view.shape != o.shape[..rows] {
                    return Err(format!("statistic {i}, %b{} ({}), is not the whole of a local buffer shaped as the rows {:?}", b.0, print::view(p, &st.view), &o.shape[..rows]));
                }
                // A statistic reads the earlier ones, and its `then` itself too.
                row_reads(p, &st.expr, stats, i, &format!("statistic {i}"))?;
                let t = p.buffers[b.0].dtype;
                let d = body(p, &st.expr, &domain, o, OwnReads::Never)?;
                let exact_products = st.kind == crate::ir::ReduceKind::Sum && d == crate::lower::product_dtype(t);
                if !exact_products {
                    same_dtype(&format!("statistic {i}"), d, t)?;
                }
                if let Some(e) = &st.then {
                    row_reads(p, e, stats, i + 1, &format!("statistic {i}'s map"))?;
                    let mut read = Vec::new();
                    expr_bufs(e, &mut read);
                    if read.iter().any(|r| !stats.iter().any(|s| s.view.buf == *r)) {
                        return Err(format!("statistic {i}'s map reads a buffer that is not a statistic"));
                    }
                    // (over the rows alone: it runs once a row, outside the row's loops)
                    same_dtype(&format!("statistic {i}'s map"), body(p, e, &domain[..rows], o, OwnReads::Never)?, t)?;
                }
            }
            row_reads(p, expr, stats, stats.len(), "the map")?;
            same_dtype("the map", body(p, expr, &domain, o, OwnReads::Never)?, out_dtype)?;
        }
        Kernel::Dequantize { w, out: o, stored } => {
            for (what, v) in [("the weight", w), ("the output", o)] {
                contiguous(what, v)?;
                whole(what, v)?;
            }
            let port = p.weights.iter().find(|port| port.buf == w.buf).ok_or_else(|| format!("dequantizes %b{}, which is not a weight", w.buf.0))?;
            let (wb, ob) = (&p.buffers[w.buf.0], &p.buffers[o.buf.0]);
            if port.stored != *stored || matches!(*stored, Stored::F32 | Stored::Int8) || w.numel() != wb.len || o.numel() != wb.len || wb.dtype != Dtype::F32 || ob.dtype != Dtype::F32 {
                return Err(format!("dequantizes %b{} ({} {}[{}]) as {} into {}[{}]", w.buf.0, port.stored.name(), wb.dtype.name(), wb.len, stored.name(), ob.dtype.name(), o.numel()));
            }
        }
    }
    // A local buffer is an attention's scores or a row kernel's statistic, used only
    // by that kernel.
    let own = local_buffers(k);
    for x in &views {
        if p.buffers[x.buf.0].storage == Storage::Local && !own.contains(&x.buf) {
            return Err(format!("uses %b{}, a local buffer that is not its own", x.buf.0));
        }
    }
    Ok(())
}

/// Checks that `e`, an expression of a row kernel, reads statistics only through their
/// load at the row ([`RowStat::load`]), and only the first `seen` of them.
fn row_reads(p: &Program, e: &Expr, stats: &[RowStat], seen: usize, what: &str) -> Result<(), String> {
    let mut bad = None;
    e.walk(&mut |e| {
        if let Expr::Load { view, .. } | Expr::Gather { view, .. } = e {
            if let Some(i) = stats.iter().position(|st| st.view.buf == view.buf) {
                if i >= seen || *e != stats[i].load() {
                    bad.get_or_insert(format!("{what} reads statistic {i} as {}", print::view(p, view)));
                }
            }
        }
    });
    bad.map_or(Ok(()), Err)
}

fn same_dtype(what: &str, got: Dtype, want: Dtype) -> Result<(), String> {
    if got == want { Ok(()) } else { Err(format!("{what} is {} but the output is {}", got.name(), want.name())) }
}

/// An inclusive range of a loop variable or an affine form.
type Range = (i128, i128);

/// Every index of every dimension of `v`.
fn full(v: &View) -> Vec<(i128, Range)> {
    v.shape.iter().zip(&v.strides).map(|(&n, &s)| (s as i128, (0, n as i128 - 1))).collect()
}

/// Checks that `offset + Σ stride·i`, each `i` in its range, stays inside `v`'s buffer
/// (nothing is read when a range is empty).
fn within(p: &Program, v: &View, terms: &[(i128, Range)]) -> Result<(), String> {
    let (lo, hi) = span(v.offset as i128, terms).ok_or_else(|| format!("%b{}: {}'s element range overflows", v.buf.0, print::view(p, v)))?;
    let len = p.buffers[v.buf.0].len as i128;
    if lo > hi || (lo >= 0 && hi < len) {
        return Ok(());
    }
    Err(format!("%b{}: {} reaches elements {lo} to {hi} of {len}", v.buf.0, print::view(p, v)))
}

/// The lowest and highest value of `base + Σ coef·x`, `x` in its range; `(1, 0)` when
/// some range is empty.
fn span(base: i128, terms: &[(i128, Range)]) -> Option<Range> {
    let (mut lo, mut hi) = (base, base);
    for &(c, (a, b)) in terms {
        if a > b {
            return Some((1, 0));
        }
        let (x, y) = (c.checked_mul(a)?, c.checked_mul(b)?);
        lo = lo.checked_add(x.min(y))?;
        hi = hi.checked_add(x.max(y))?;
    }
    Some((lo, hi))
}

/// `Σ coef·i_v + constant` over loop variables.
#[derive(Clone, Default)]
struct Affine {
    terms: BTreeMap<usize, i128>,
    constant: i128,
}

impl Affine {
    fn of(e: &Expr) -> Option<Affine> {
        Some(match e {
            Expr::Index(v) => Affine { terms: BTreeMap::from([(*v, 1)]), constant: 0 },
            Expr::Const(x, d) if d.is_int() && x.fract() == 0.0 && x.abs() < 1e18 => Affine { terms: BTreeMap::new(), constant: *x as i128 },
            Expr::Binary(BinaryOp::Add, a, b, _) => Affine::of(a)?.plus(&Affine::of(b)?, 1)?,
            Expr::Binary(BinaryOp::Sub, a, b, _) => Affine::of(a)?.plus(&Affine::of(b)?, -1)?,
            Expr::Binary(BinaryOp::Mul, a, b, _) => {
                let (a, b) = (Affine::of(a)?, Affine::of(b)?);
                let (c, f) = if a.terms.is_empty() { (a.constant, b) } else if b.terms.is_empty() { (b.constant, a) } else { return None };
                Affine { terms: f.terms.iter().map(|(&v, &x)| Some((v, x.checked_mul(c)?))).collect::<Option<_>>()?, constant: f.constant.checked_mul(c)? }
            }
            _ => return None,
        })
    }

    fn plus(mut self, o: &Affine, sign: i128) -> Option<Affine> {
        for (&v, &x) in &o.terms {
            let t = self.terms.entry(v).or_insert(0);
            *t = t.checked_add(x.checked_mul(sign)?)?;
        }
        self.terms.retain(|_, x| *x != 0);
        self.constant = self.constant.checked_add(o.constant.checked_mul(sign)?)?;
        Some(self)
    }
}

/// What a guard says: the loop-variable terms of a form lie in a range.
type Fact = (BTreeMap<usize, i128>, Range);

/// The facts `cond` (or its negation) implies; only what can be read for sure.
fn facts(cond: &Expr, holds: bool, out: &mut Vec<Fact>) {
    match cond {
        Expr::Binary(BinaryOp::And, a, b, _) if holds => {
            facts(a, true, out);
            facts(b, true, out);
        }
        Expr::Binary(op @ (BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge), l, r, _) => {
            let Some(f) = Affine::of(l).and_then(|l| l.plus(&Affine::of(r)?, -1)) else { return };
            // f = l - r; the comparison, negated when it fails, as a range of f.
            let op = match (op, holds) {
                (op, true) => *op,
                (BinaryOp::Lt, false) => BinaryOp::Ge,
                (BinaryOp::Le, false) => BinaryOp::Gt,
                (BinaryOp::Gt, false) => BinaryOp::Le,
                (_, false) => BinaryOp::Lt,
            };
            let range = match op {
                BinaryOp::Lt => (i128::MIN / 4, -1),
                BinaryOp::Le => (i128::MIN / 4, 0),
                BinaryOp::Gt => (1, i128::MAX / 4),
                _ => (0, i128::MAX / 4),
            };
            out.push((f.terms, (range.0 - f.constant, range.1 - f.constant)));
        }
        _ => {}
    }
}

/// Checks an expression over `domain` and returns its type. `out` is the view the
/// kernel writes; `own` says where the expression may read its buffer.
fn body(p: &Program, e: &Expr, domain: &[u64], out: &View, own: OwnReads) -> Result<Dtype, String> {
    let ranges: Vec<Range> = domain.iter().map(|&n| (0, n as i128 - 1)).collect();
    let mut guards = Vec::new();
    expr(p, e, &ranges, &mut guards, out, own)
}

fn expr(p: &Program, e: &Expr, ranges: &[Range], guards: &mut Vec<Fact>, out: &View, own: OwnReads) -> Result<Dtype, String> {
    let var_ok = |v: usize| v == usize::MAX || v < ranges.len();
    Ok(match e {
        Expr::Const(_, d) => *d,
        Expr::Index(v) => {
            if *v >= ranges.len() {
                return Err(format!("index i{v} of a domain of rank {}", ranges.len()));
            }
            Dtype::I64
        }
        Expr::Extent(d) => {
            let mut names = Vec::new();
            d.symbols(&mut names);
            if let Some(n) = names.iter().find(|n| !p.symbols.iter().any(|(s, _)| s == *n)) {
                return Err(format!("extent {d} of a symbol {n} the program does not take"));
            }
            Dtype::I64
        }
        Expr::Load { view, vars } | Expr::Gather { view, vars, .. } => {
            if vars.len() != view.shape.len() || !vars.iter().all(|&v| var_ok(v)) {
                return Err(format!("load of %b{} with vars {} for a view of rank {} in a domain of rank {}", view.buf.0, vars_text(vars), view.shape.len(), ranges.len()));
            }
            // Each loop variable's stride, summed where one indexes several dimensions.
            let mut coefs: BTreeMap<usize, i128> = BTreeMap::new();
            let mut fixed = Vec::new();
            for (d, &v) in vars.iter().enumerate() {
                if v != usize::MAX {
                    *coefs.entry(v).or_insert(0) += view.strides[d] as i128;
                }
            }
            if let Expr::Gather { axis, index, .. } = e {
                if *axis >= vars.len() || vars[*axis] != usize::MAX {
                    return Err(format!("gather of %b{} along axis {axis} with vars {}", view.buf.0, vars_text(vars)));
                }
                let d = expr(p, index, ranges, guards, out, own)?;
                if !d.is_int() {
                    return Err(format!("gather of %b{} by a {} index", view.buf.0, d.name()));
                }
                // Any index of the axis (a negative one counts from the end).
                fixed.push((view.strides[*axis] as i128, (0, view.shape[*axis] as i128 - 1)));
            }
            let mut terms = fixed;
            // A guard fixes the range of a form; a load that reads through a multiple of
            // it is bounded by that range.
            let mut merged: BTreeMap<&BTreeMap<usize, i128>, Range> = BTreeMap::new();
            for (form, (lo, hi)) in guards.iter() {
                let r = merged.entry(form).or_insert((*lo, *hi));
                *r = (r.0.max(*lo), r.1.min(*hi));
            }
            for (form, range) in merged {
                let Some((&v0, &f0)) = form.iter().next() else { continue };
                let Some(&c0) = coefs.get(&v0) else { continue };
                if c0 % f0 != 0 {
                    continue;
                }
                let k = c0 / f0;
                if form.iter().all(|(v, &f)| coefs.get(v) == Some(&(k * f))) {
                    let own: Vec<(i128, Range)> = form.iter().map(|(&v, &f)| (f, ranges[v])).collect();
                    let (lo, hi) = span(0, &own).ok_or("a guard's range overflows")?;
                    terms.push((k, (lo.max(range.0), hi.min(range.1))));
                    for v in form.keys() {
                        coefs.remove(v);
                    }
                }
            }
            terms.extend(coefs.iter().map(|(&v, &c)| (c, ranges[v])));
            within(p, view, &terms).map_err(|e| format!("load {e}"))?;
            if view.buf == out.buf {
                let at_element = matches!(e, Expr::Load { .. })
                    && view.offset == out.offset
                    && view.shape == out.shape
                    && (0..vars.len()).all(|d| view.shape[d] == 1 || (vars[d] == d && view.strides[d] == out.strides[d]));
                if own == OwnReads::Never || !at_element {
                    return Err(format!("reads the buffer %b{} it writes other than at the element it writes", out.buf.0));
                }
            }
            p.buffers[view.buf.0].dtype
        }
        Expr::Unary(u, a, d) => {
            let a = expr(p, a, ranges, guards, out, own)?;
            typed(&Op::Unary(*u), &[a], *d)?
        }
        Expr::Binary(b, l, r, d) => {
            let (l, r) = (expr(p, l, ranges, guards, out, own)?, expr(p, r, ranges, guards, out, own)?);
            typed(&Op::Binary(*b), &[l, r], *d)?
        }
        Expr::Select(c, a, b, d) => {
            let c_type = expr(p, c, ranges, guards, out, own)?;
            let n = guards.len();
            facts(c, true, guards);
            let a = expr(p, a, ranges, guards, out, own);
            guards.truncate(n);
            facts(c, false, guards);
            let b = expr(p, b, ranges, guards, out, own);
            guards.truncate(n);
            typed(&Op::Where, &[c_type, a?, b?], *d)?
        }
        Expr::Where(c, a, b, d) => {
            let c = expr(p, c, ranges, guards, out, own)?;
            typed(&Op::Where, &[c, expr(p, a, ranges, guards, out, own)?, expr(p, b, ranges, guards, out, own)?], *d)?
        }
        Expr::Cast(a, d) => {
            expr(p, a, ranges, guards, out, own)?;
            *d
        }
    })
}

/// The element type of a scalar op on operands of the given types, by the graph's own
/// rule (`passes::shape::infer`: promotion, comparisons give bool, a float function of
/// an integer gives f32); a `Select` types as a `where`.
pub fn scalar_type(op: &Op, args: &[Dtype]) -> Result<Dtype, String> {
    let types: Vec<TensorType> = args.iter().map(|&d| TensorType::new(d, Shape(Vec::new()))).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let declared = TensorType::new(Dtype::Bool, Shape(Vec::new()));
    crate::passes::shape::infer(op, &refs, &declared, &[]).map(|t| t.dtype)
}

/// Checks that an expression node typed `d` is what the rule gives its operands.
fn typed(op: &Op, args: &[Dtype], d: Dtype) -> Result<Dtype, String> {
    let names: Vec<&str> = args.iter().map(|a| a.name()).collect();
    match scalar_type(op, args) {
        Ok(want) if want == d => Ok(d),
        Ok(want) => Err(format!("{} of {} typed {}, not {}", op.name(), names.join(" and "), d.name(), want.name())),
        Err(e) => Err(format!("{} of {} typed {}: {e}", op.name(), names.join(" and "), d.name())),
    }
}

fn vars_text(vars: &[usize]) -> String {
    let v: Vec<String> = vars.iter().map(|&v| if v == usize::MAX { "_".to_string() } else { format!("i{v}") }).collect();
    format!("[{}]", v.join(", "))
}

/// Planned arena buffers are aligned, inside the arena, and apart from every buffer
/// live at the same step.
fn arena(p: &Program) -> Result<()> {
    let n = p.buffers.len();
    let (mut first, mut last) = (vec![usize::MAX; n], vec![0usize; n]);
    for (i, step) in p.steps.iter().enumerate() {
        for b in kernel_reads(&step.kernel).into_iter().chain([kernel_writes(&step.kernel)]) {
            first[b.0] = first[b.0].min(i);
            last[b.0] = last[b.0].max(i);
        }
    }
    let mut starting: Vec<Vec<usize>> = vec![Vec::new(); p.steps.len()];
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); p.steps.len()];
    for (b, buf) in p.buffers.iter().enumerate() {
        let Storage::Arena { offset } = buf.storage else { continue };
        if first[b] == usize::MAX || buf.bytes() == 0 {
            continue;
        }
        if offset % ALIGN != 0 || offset.checked_add(buf.bytes()).is_none_or(|end| end > p.arena_size) {
            return Err(fail(format!("%b{b} {:?} at arena offset {offset} ({} bytes) is unaligned or outside the {}-byte arena", buf.name, buf.bytes(), p.arena_size)));
        }
        starting[first[b]].push(b);
        ending[last[b]].push(b);
    }
    // The live buffers by offset: each new one must end before the next and start
    // after the previous (those live are apart, so neighbours are enough).
    let mut live: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for (k, start) in starting.iter().enumerate() {
        for &b in start {
            let Storage::Arena { offset } = p.buffers[b].storage else { continue };
            let end = offset + p.buffers[b].bytes();
            let below = live.range(..=offset).next_back().filter(|(_, &(e, _))| e > offset);
            let above = live.range(offset..end).next();
            if let Some((_, &(_, other))) = below.or(above) {
                return Err(fail(format!("k{k}: %b{b} {:?} overlaps %b{other} {:?} in the arena while both are live", p.buffers[b].name, p.buffers[other].name)));
            }
            live.insert(offset, (end, b));
        }
        for &b in &ending[k] {
            if let Storage::Arena { offset } = p.buffers[b].storage {
                live.remove(&offset);
            }
        }
    }
    Ok(())
}
