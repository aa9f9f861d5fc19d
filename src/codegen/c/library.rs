//! Kernels the C runtime computes (`mithril_runtime.h`): matrix products, convolutions,
//! pooling and softmax as calls, with their epilogues as callbacks over finished blocks.

use std::fmt::Write as _;

use super::dialect::C;
use super::program::{base, declare};
use crate::codegen::cstyle::kernel::product;
use crate::codegen::cstyle::{pad, Renderer};
use crate::error::{Error, Result};
use crate::ir::{Dtype, PoolKind};
use crate::lower::{Kernel, Layout, Stored, View};

/// Kernel `k`'s epilogue as an `mr_epilogue_fn` named `<name>_e<k>` that rewrites a
/// block of the result (see `mithril_runtime.h`); false when the kernel has none.
pub fn epilogue_fn(r: &Renderer<C>, name: &str, k: usize, kernel: &Kernel, s: &mut String) -> Result<bool> {
    let (out, expr, conv) = match kernel {
        Kernel::Gemm { c, epilogue: Some(e), .. } => (c, e, false),
        Kernel::Conv { out, epilogue: Some(e), .. } => (out, e, true),
        _ => return Ok(false),
    };
    let rank = out.shape.len();
    let _ = writeln!(s, "\n/* the epilogue of kernel {k} */");
    let _ = writeln!(s, "static MR_CLONES void {name}_e{k}(const void *vctx, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1)\n{{");
    let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
    let mut bufs = crate::lower::kernel_exprs(kernel).iter().flat_map(|e| {
        let mut v = Vec::new();
        crate::lower::expr_bufs(e, &mut v);
        v
    }).collect::<Vec<_>>();
    bufs.push(out.buf);
    bufs.sort();
    bufs.dedup();
    declare(s, r.p, r.names, &bufs, "ctx->", name);
    // Rows, columns and n in the runtime's coordinates become the loop variables.
    let (row, lead) = if conv { (1, 1) } else { (rank - 2, rank - 2) };
    if conv {
        s.push_str("    const int64_t i0 = n;\n    (void)i0;\n");
    } else {
        let mut inner = 1u64;
        for d in (0..lead).rev() {
            let _ = writeln!(s, "    const int64_t i{d} = n / {inner} % {};\n    (void)i{d};", out.shape[d]);
            inner *= out.shape[d];
        }
        if lead == 0 {
            s.push_str("    (void)n;\n");
        }
    }
    let _ = writeln!(s, "    for (int64_t i{row} = r0; i{row} < r1; ++i{row}) {{");
    // A 2-d convolution's output positions are [c0, c1) flattened: one loop over them
    // when every load can be indexed by the flat position (i3), else rows of them.
    let flat = match (conv, rank) {
        (true, 4) => flatten_spatial(&crate::lower::Expr::Load { view: out.clone(), vars: (0..4).collect() }, out.shape[3])
            .zip(flatten_spatial(expr, out.shape[3])),
        _ => None,
    };
    let depth = match (conv, rank, &flat) {
        (true, 4, Some(_)) => {
            let _ = writeln!(s, "        for (int64_t i3 = c0; i3 < c1; ++i3) {{");
            3
        }
        (true, 4, None) => {
            // Flattened positions [c0, c1) as rows of the output image.
            let ow = out.shape[3];
            let _ = writeln!(s, "        for (int64_t i2 = c0 / {ow}; i2 * {ow} < c1; ++i2) {{");
            let _ = writeln!(s, "            const int64_t lo = c0 > i2 * {ow} ? c0 - i2 * {ow} : 0;");
            let _ = writeln!(s, "            const int64_t hi = c1 < (i2 + 1) * {ow} ? c1 - i2 * {ow} : {ow};");
            let _ = writeln!(s, "            for (int64_t i3 = lo; i3 < hi; ++i3) {{");
            4
        }
        _ => {
            let col = row + 1;
            let _ = writeln!(s, "        for (int64_t i{col} = c0; i{col} < c1; ++i{col}) {{");
            3
        }
    };
    let t = r.p.buffers[out.buf.0].dtype;
    let (target, expr) = match flat {
        Some((target, e)) => (target, e),
        None => (crate::lower::Expr::Load { view: out.clone(), vars: (0..rank).collect() }, expr.clone()),
    };
    let value = r.expr(&crate::lower::Expr::Cast(Box::new(expr), t));
    let _ = writeln!(s, "{}{} = {value};", pad(depth), r.expr(&target));
    r.close_loops(s, depth - 1, 1);
    s.push_str("}\n");
    Ok(true)
}

/// The expression with loop variable 3 running over flattened positions `i2 * ow + i3`
/// of the last two dimensions (and 2 unused), when every load reads them that way: its
/// strides for the two are `(ow * s, s)` (or both 0) and nothing else uses i2 or i3.
pub(crate) fn flatten_spatial(e: &crate::lower::Expr, ow: u64) -> Option<crate::lower::Expr> {
    use crate::lower::Expr;
    let mut ok = true;
    let mut out = e.clone();
    out.walk_mut(&mut |e| match e {
        Expr::Index(2 | 3) => ok = false,
        Expr::Load { view, vars } | Expr::Gather { view, vars, .. } => {
            let at = |v: usize| vars.iter().position(|&x| x == v);
            match (at(2), at(3)) {
                (None, None) => {}
                (Some(d2), Some(d3)) if view.strides[d2] == view.strides[d3] * ow as i64 => {
                    view.strides[d2] = 0;
                    vars[d2] = usize::MAX;
                    view.shape[d3] *= view.shape[d2];
                }
                _ => ok = false,
            }
        }
        _ => {}
    });
    ok.then_some(out)
}

/// A kernel that calls the runtime, inline in the forward function; `ext` are the
/// extents of its domain, `ep` the address of its `mr_epilogue`, if it has one;
/// `weights` gives the weights' layouts and stored forms, by buffer.
pub fn runtime_call(r: &Renderer<C>, k: &Kernel, ext: &[String], ep: Option<&str>, weights: &[Option<(Layout, Stored)>], s: &mut String) -> Result<()> {
    let ep_arg = ep.unwrap_or("NULL");
    match k {
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => {
            return Err(Error::internal("loop kernels are tasks, not runtime calls".to_string()))
        }
        Kernel::Attention { .. } => return Err(Error::internal("the C runtime has no attention kernel (`LIBRARY`)".to_string())),
        Kernel::Rows { .. } => return Err(Error::internal("the C target renders no row kernels (`LIBRARY`)".to_string())),
        Kernel::Gemm { a, b, c, scratch, .. } => gemm(r, [a, b, c], scratch.as_ref(), ext, ep, true, weights, s)?,
        Kernel::Conv { x, w, out, attrs, scratch, .. } => {
            require_f32(r, &[x, w, out], "convolution")?;
            let (n, ch) = (&ext[0], x.shape[1]);
            let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
            let ((h, wd), (kh, kw), (oh, ow)) = (win.spatial(x), win.spatial(w), win.spatial(out));
            if let (Some((Layout::ConvPanels, Stored::Int8)), Some(scratch)) = (weights[w.buf.0], scratch) {
                let _ = writeln!(
                    s,
                    "        mr_conv2d_i8_mt(threads, {}, {}, {}, {n}, {ch}, {h}, {wd}, {}, {kh}, {kw}, {oh}, {ow}, {}, {}, {ep_arg});",
                    base(r, x),
                    base(r, w),
                    base(r, out),
                    w.shape[0],
                    win.args(),
                    base(r, scratch)
                );
                return Ok(());
            }
            // A narrow weight is widened as the convolution packs it.
            let (q, wtype) = match weights[w.buf.0].map_or(Stored::F32, |(_, stored)| stored) {
                Stored::F32 => ("f32", String::new()),
                narrow => ("q", format!(", {}", super::runtime_type(narrow))),
            };
            if let Some(scratch) = scratch {
                let _ = writeln!(
                    s,
                    "        mr_conv2d_winograd_{q}_mt(threads, {}, {}{wtype}, {}, {n}, {ch}, {h}, {wd}, {}, {oh}, {ow}, {}, {}, {}, {ep_arg});",
                    base(r, x),
                    base(r, w),
                    base(r, out),
                    w.shape[0],
                    attrs.padding[0].0,
                    attrs.padding[1].0,
                    base(r, scratch)
                );
                return Ok(());
            }
            let _ = writeln!(
                s,
                "        mr_conv2d_{q}_mt(threads, {}, {}{wtype}, {}, {n}, {ch}, {h}, {wd}, {}, {kh}, {kw}, {oh}, {ow}, {}, {}, {ep_arg});",
                base(r, x),
                base(r, w),
                base(r, out),
                w.shape[0],
                win.args(),
                attrs.groups
            );
        }
        Kernel::Pool { x, out, attrs } => {
            require_f32(r, &[x, out], "pooling")?;
            let lead = product(&ext[..x.shape.len() - attrs.kernel.len()]);
            let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
            let ((h, wd), (oh, ow), (kh, kw)) = (win.spatial(x), win.spatial(out), win.pair(&attrs.kernel, 1));
            let _ = writeln!(
                s,
                "        mr_pool2d_f32_mt(threads, {}, {}, 1, {lead}, {h}, {wd}, {kh}, {kw}, {oh}, {ow}, {}, {});",
                base(r, x),
                base(r, out),
                win.args(),
                i32::from(attrs.kind == PoolKind::Max)
            );
        }
        Kernel::Dequantize { w, out, stored } => {
            let _ = writeln!(s, "        mr_dequantize({}, {}, {}, {});", super::runtime_type(*stored), base(r, w), w.numel(), base(r, out));
        }
        Kernel::Softmax { x, out, axis } => {
            require_f32(r, &[x, out], "softmax")?;
            let outer = product(&ext[..*axis]);
            let inner: u64 = x.shape[axis + 1..].iter().product();
            let _ = writeln!(s, "        mr_softmax_f32_mt(threads, {}, {}, {outer}, {}, {inner});", base(r, x), base(r, out), x.shape[*axis]);
        }
    }
    Ok(())
}

/// A 1-d or 2-d window (convolution, pooling) in the runtime's 2-d terms: a 1-d window
/// is one of height 1. (The CUDA runtime's kernels take the same arguments.)
pub(crate) struct Window2d {
    two: bool,
    pub(crate) stride: (u64, u64),
    /// Top and left padding (the bottom and right follow from the output size).
    pub(crate) pad: (u64, u64),
    pub(crate) dilation: (u64, u64),
}

impl Window2d {
    pub(crate) fn new(stride: &[u64], padding: &[(u64, u64)], dilation: &[u64]) -> Window2d {
        let two = stride.len() == 2;
        let w = Window2d { two, stride: (0, 0), pad: (0, 0), dilation: (0, 0) };
        let before: Vec<u64> = padding.iter().map(|p| p.0).collect();
        Window2d { stride: w.pair(stride, 1), pad: w.pair(&before, 0), dilation: w.pair(dilation, 1), ..w }
    }

    /// (height, width) of a per-dimension parameter; a 1-d window's height is `one`.
    pub(crate) fn pair(&self, v: &[u64], one: u64) -> (u64, u64) {
        if self.two {
            (v[0], v[1])
        } else {
            (one, v[0])
        }
    }

    /// The runtime's `stride_h, stride_w, pad_top, pad_left, dil_h, dil_w` arguments.
    pub(crate) fn args(&self) -> String {
        let (s, p, d) = (self.stride, self.pad, self.dilation);
        format!("{}, {}, {}, {}, {}, {}", s.0, s.1, p.0, p.1, d.0, d.1)
    }

    /// (height, width) of a view's trailing spatial dimensions.
    pub(crate) fn spatial(&self, v: &View) -> (u64, u64) {
        let n = v.shape.len();
        self.pair(&v.shape[n - 1 - usize::from(self.two)..], 1)
    }
}

fn require_f32(r: &Renderer<C>, views: &[&View], what: &str) -> Result<()> {
    for v in views {
        let d = r.p.buffers[v.buf.0].dtype;
        if d != Dtype::F32 {
            // (lowering gives other element types loops: `LIBRARY`)
            return Err(Error::internal(format!("the runtime's {what} is f32, given {d}")));
        }
    }
    Ok(())
}

/// The buffers a kernel that calls the runtime names where it makes the call: the
/// call's operands.
pub fn call_buffers(k: &Kernel) -> Vec<crate::lower::BufId> {
    let mut bufs = match k {
        Kernel::Gemm { a, b, c, scratch, .. } => [a.buf, b.buf, c.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf)).collect(),
        Kernel::Conv { x, w, out, scratch, .. } => [x.buf, w.buf, out.buf].into_iter().chain(scratch.as_ref().map(|s| s.buf)).collect(),
        Kernel::Pool { x, out, .. } | Kernel::Softmax { x, out, .. } => vec![x.buf, out.buf],
        Kernel::Dequantize { w, out, .. } => vec![w.buf, out.buf],
        // (not the scores: they have no memory)
        Kernel::Attention { q, k, v, out, .. } => vec![q.buf, k.buf, v.buf, out.buf],
        Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } | Kernel::Rows { .. } => vec![],
    };
    bufs.sort();
    bufs.dedup();
    bufs
}

/// Whether a batched product `c = a b` is one runtime call for its whole batch: an int8
/// product (its weight in panels, stored as int8) of one batch dimension. Other batched
/// products are a task over their batch indices (`program`).
pub fn one_call_per_batch(b: &View, c: &View, weights: &[Option<(Layout, Stored)>]) -> bool {
    c.shape.len() == 3 && weights[b.buf.0] == Some((Layout::Panels, Stored::Int8))
}

/// A matrix product `c = a b`: one `mr_sgemm_mt` per batch index (f32; lowering gives
/// other element types loops: `LIBRARY`); `at` is the address of the `mr_epilogue` that
/// runs its epilogue. With `batch_loops`, loops over the batch dimensions come first;
/// without, the caller has set the batch loop variables. `weights` gives the weights'
/// layouts and stored forms, by buffer (those in column panels are read so; int8 ones
/// by `mr_gemm_i8_mt`, with the kernel's `scratch`: one call for a whole batch of one
/// dimension, whose rows it multiplies as one product, so the weight streams once;
/// else a part of the scratch per batch index).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    r: &Renderer<C>,
    [a, b, c]: [&View; 3],
    scratch: Option<&View>,
    ext: &[String],
    at: Option<&str>,
    batch_loops: bool,
    weights: &[Option<(Layout, Stored)>],
    s: &mut String,
) -> Result<()> {
    let rank = c.shape.len();
    let (m, n, k) = (&ext[rank - 2], &ext[rank - 1], &ext[rank]);
    if matches!(weights[b.buf.0], Some((Layout::Panels, _))) && (b.offset != 0 || b.strides[..rank - 2].iter().any(|&st| st != 0)) {
        // (lowering stores a weight in panels only when every use is its whole [K, N]
        // matrix, the same for every batch index)
        return Err(Error::internal(format!("a weight in panels is used as {b:?}")));
    }
    if let (true, Some(scratch), true) = (one_call_per_batch(b, c, weights), scratch, batch_loops) {
        require_f32(r, &[a, b, c], "matrix product")?;
        let (pa, pc, w, sc) = (&r.names[a.buf.0], &r.names[c.buf.0], &r.names[b.buf.0], &r.names[scratch.buf.0]);
        let (ao, cbs, cs) = (a.offset, c.strides[0], &c.strides[1..]);
        let _ = writeln!(
            s,
            "    mr_gemm_i8_mt(threads, {}, {m}, {n}, {k}, 1.0f, {pa} + {ao}, {}, {}, {}, {w}, 0.0f, {pc} + {}, {cbs}, {}, {}, {sc}, {});",
            ext[0],
            a.strides[0],
            a.strides[1],
            a.strides[2],
            c.offset,
            cs[0],
            cs[1],
            at.unwrap_or("NULL")
        );
        return Ok(());
    }
    let depth = if batch_loops { r.open_loops(s, &ext[..rank - 2], 0, 2) } else { 2 };
    // The flattened batch index (for the maximal shape, as an epilogue unflattens it).
    let strides = crate::lower::contiguous_strides(&c.shape[..rank - 2]);
    let terms: Vec<String> = strides.iter().enumerate().map(|(d, st)| format!("i{d} * {st}")).collect();
    let flat = if terms.is_empty() { "0".to_string() } else { terms.join(" + ") };
    if at.is_some() && rank > 2 {
        let _ = writeln!(s, "{}ep.n = {flat};", pad(depth));
    }
    // An operand as (pointer + batch offset, row stride, column stride).
    let operand = |v: &View| {
        let mut terms = vec![v.offset.to_string()];
        for (d, st) in v.strides[..rank - 2].iter().enumerate() {
            if *st != 0 {
                terms.push(format!("i{d} * {st}"));
            }
        }
        (format!("{} + {}", r.names[v.buf.0], terms.join(" + ")), v.strides[rank - 2], v.strides[rank - 1])
    };
    let ((pa, ra, ca), (pb, rb, cb), (pc, rc, cc)) = (operand(a), operand(b), operand(c));
    require_f32(r, &[a, b, c], "matrix product")?;
    if let Some((Layout::Panels, stored)) = weights[b.buf.0] {
        // Narrow panels are widened as the GEMM reads them; int8 ones multiplied in int8.
        let (call, btype) = match stored {
            Stored::F32 => ("mr_sgemm_panels_mt", String::new()),
            Stored::Int8 => {
                let scratch = scratch.ok_or_else(|| Error::internal("an int8 product without its scratch".to_string()))?;
                // MR_I8_SCRATCH_BYTES of the maximal rows, in floats, per batch index
                let per = crate::lower::int8_scratch_bytes(c.shape[rank - 2], a.shape[rank - 1]).map(|n| n / 4);
                let per = per.ok_or_else(|| Error::internal("an int8 product's scratch overflows".to_string()))?;
                ("mr_gemm_i8_mt", format!(", {} + ({flat}) * {per}", r.names[scratch.buf.0]))
            }
            narrow => ("mr_sgemm_panels_q_mt", format!(", {}", super::runtime_type(narrow))),
        };
        // (int8: one matrix of a batch of 1, no batch strides, the scratch last)
        let (batch, bs, bargs, cargs) = if stored == Stored::Int8 { ("1, ", "0, ", String::new(), btype) } else { ("", "", btype, String::new()) };
        let _ = writeln!(
            s,
            "{}{call}(threads, {batch}{m}, {n}, {k}, 1.0f, {pa}, {bs}{ra}, {ca}, {}{bargs}, 0.0f, {pc}, {bs}{rc}, {cc}{cargs}, {});",
            pad(depth),
            r.names[b.buf.0],
            at.unwrap_or("NULL")
        );
    } else {
        let _ = writeln!(
            s,
            "{}mr_sgemm_mt(threads, {m}, {n}, {k}, 1.0f, {pa}, {ra}, {ca}, {pb}, {rb}, {cb}, 0.0f, {pc}, {rc}, {cc}, {});",
            pad(depth),
            at.unwrap_or("NULL")
        );
    }
    if batch_loops {
        r.close_loops(s, rank - 2, 2);
    }
    Ok(())
}
