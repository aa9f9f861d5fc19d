//! One [`Program`] as C: its constants, a context struct, each loop kernel as a task
//! the caller's threads can split, the runtime's kernels as calls
//! ([`super::library`]), and the entry function that runs them in order.

use std::fmt::Write as _;

use super::{ERROR_INDEX, ERROR_SIZE};
use super::dialect::C;
use super::library::{call_buffers, epilogue_fn, gemm, one_call_per_batch, runtime_call};
use crate::codegen::cstyle::kernel::{buffers_of, gather_checks, loop_kernel, product};
use crate::codegen::cstyle::{pad, Dialect, Renderer};
use crate::codegen::names::{comment_safe, dim_params, identifier};
use crate::error::Result;
use crate::ir::Dtype;
use crate::lower::{Kernel, Layout, Program, Storage, Stored, View};

/// One program as C: constants, one function per loop kernel (a task over a range of
/// its outermost non-trivial dimension, so the caller's threads can split it), and the
/// function `entry` (and `entry`_threaded) that runs the kernels in order. File-scope
/// names start with `name`.
pub fn program_c(p: &Program, name: &str, entry: &str, s: &mut String) -> Result<()> {
    let names: Vec<String> = p.buffers.iter().enumerate().map(|(i, b)| format!("b{i}_{}", identifier(&b.name))).collect();
    let r = Renderer { p, d: &C, names: &names, loads: None };
    // Weights, by buffer, with their layout and stored form (looked up at each matmul
    // and convolution).
    let mut weights = vec![None; p.buffers.len()];
    for w in &p.weights {
        weights[w.buf.0] = Some((w.layout, w.stored));
    }
    narrowed_comment(p, s);
    for (i, t) in p.consts.iter().enumerate() {
        let ty = C.storage(t.dtype());
        let _ = write!(s, "static const {ty} {name}_const{i}[{}] = ", t.numel().max(1));
        r.initializer(t, s);
    }
    let _ = writeln!(s, "\n/* What every kernel reads its buffers from. */");
    let dims_field = if p.symbols.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = p.symbols.iter().map(|(n, _)| comment_safe(n)).collect();
        format!("    int64_t dims[{}]; /* run-time sizes: {} */\n", p.symbols.len(), names.join(", "))
    };
    let _ = writeln!(
        s,
        "struct {name}_ctx {{\n    const unsigned char *w;\n    unsigned char *a;\n    const void *const *inputs;\n    void *const *outputs;\n    const mr_threads *threads;\n{dims_field}}};"
    );
    // Loop kernels as tasks.
    let mut calls: Vec<String> = Vec::new();
    for (k, step) in p.steps.iter().enumerate() {
        let comment = format!("/* kernel {k}: {} */", comment_safe(&step.origins.join("; ")));
        if index_checks(&r, name, k, step, s) {
            calls.push(format!("\n    if ({name}_check{k}(&ctx) != 0) {{\n        return {ERROR_INDEX};\n    }}"));
        }
        match &step.kernel {
            Kernel::Map { out, .. } | Kernel::Reduce { out, .. } | Kernel::ArgReduce { out, .. } => {
                let ext = extents(step, &p.symbols, "ctx->");
                // Tasks split the outermost loop that can run more than once.
                let split = ext[..out.shape.len()].iter().position(|e| e != "1");
                let extent = split.map_or("1".to_string(), |d| extents(step, &p.symbols, "ctx.")[d].clone());
                let _ = writeln!(s, "\n{comment}\n{}\n{{", C.kernel_signature(&format!("{name}_k{k}"), &[]));
                let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
                declare(s, p, &names, &buffers_of(p, &step.kernel), "ctx->", name);
                if split.is_none() {
                    s.push_str("    (void)begin;\n    (void)end;\n");
                }
                loop_kernel(&r, &step.kernel, &ext, s)?;
                s.push_str("}\n");
                let cost = out.shape.iter().product::<u64>() * work_per_element(&step.kernel);
                calls.push(format!("\n    {comment}\n    mr_run(threads, {name}_k{k}, &ctx, {extent}, {cost}.0);"));
            }
            Kernel::Gemm { a, b, c, scratch, .. } if c.shape.len() > 2 && !one_call_per_batch(b, c, &weights) => {
                // Batched: a task over the flattened batch, split across threads when it
                // pays; a task that gets the whole batch splits each product instead.
                let has_ep = epilogue_fn(&r, name, k, &step.kernel, s)?;
                let rank = c.shape.len();
                let ext = extents(step, &p.symbols, "ctx->");
                let count = product(&ext[..rank - 2]);
                let _ = writeln!(s, "\n{comment}\n{}\n{{", C.kernel_signature(&format!("{name}_k{k}"), &[]));
                let _ = writeln!(s, "    const struct {name}_ctx *ctx = (const struct {name}_ctx *)vctx;");
                let _ = writeln!(s, "    const mr_threads *threads = begin == 0 && end == {count} ? ctx->threads : NULL;");
                declare(s, p, &names, &call_buffers(&step.kernel), "ctx->", name);
                s.push_str("    (void)threads;\n");
                if has_ep {
                    let _ = writeln!(s, "    mr_epilogue ep;\n    ep.fn = {name}_e{k};\n    ep.ctx = ctx;\n    ep.n = 0;");
                }
                s.push_str("    for (int64_t bi = begin; bi < end; ++bi) {\n");
                for d in 0..rank - 2 {
                    let _ = writeln!(s, "        const int64_t i{d} = bi / {} % {};\n        (void)i{d};", product(&ext[d + 1..rank - 2]), ext[d]);
                }
                gemm(&r, [a, b, c], scratch.as_ref(), &ext, has_ep.then_some("&ep"), false, &weights, s)?;
                s.push_str("    }\n}\n");
                let cost = step.kernel.domain().iter().product::<u64>() * 2;
                let total = product(&extents(step, &p.symbols, "ctx.")[..rank - 2]);
                calls.push(format!("\n    {comment}\n    mr_run(threads, {name}_k{k}, &ctx, {total}, {cost}.0);"));
            }
            other => {
                let mut body = String::new();
                let ep = if epilogue_fn(&r, name, k, other, s)? {
                    let _ = writeln!(body, "        mr_epilogue ep;\n        ep.fn = {name}_e{k};\n        ep.ctx = &ctx;\n        ep.n = 0;");
                    Some("&ep")
                } else {
                    None
                };
                runtime_call(&r, other, &extents(step, &p.symbols, "ctx."), ep, &weights, &mut body)?;
                calls.push(format!("\n    {comment}\n    {{\n{body}    }}"));
            }
        }
    }
    // Symbolic dimensions are trailing arguments, checked against their maxima.
    let params = dim_params(p);
    let decl: String = params.iter().map(|n| format!(", int64_t {n}")).collect();
    let args: String = params.iter().map(|n| format!(", {n}")).collect();
    let _ = writeln!(s, "\nint {entry}(const void *weights, const void *const inputs[], void *const outputs[], void *arena{decl})\n{{");
    let _ = writeln!(s, "    return {entry}_threaded(weights, inputs, outputs, arena, NULL{args});\n}}");
    let _ = writeln!(
        s,
        "\nint {entry}_threaded(const void *weights, const void *const inputs[], void *const outputs[], void *arena,\n    const mr_threads *threads{decl})\n{{"
    );
    let _ = writeln!(s, "    struct {name}_ctx ctx;");
    for (i, (param, (_, max))) in params.iter().zip(&p.symbols).enumerate() {
        let _ = writeln!(s, "    if ({param} < 1 || {param} > {max}) {{\n        return {ERROR_SIZE};\n    }}\n    ctx.dims[{i}] = {param};");
    }
    let _ = writeln!(s, "    ctx.w = (const unsigned char *)weights;\n    ctx.a = (unsigned char *)arena;");
    let _ = writeln!(s, "    ctx.inputs = inputs;\n    ctx.outputs = outputs;\n    ctx.threads = threads;");
    // Buffers the runtime calls use directly (a batched product is a task of its own).
    let mut direct = Vec::new();
    for step in &p.steps {
        match &step.kernel {
            Kernel::Gemm { b, c, .. } if c.shape.len() > 2 && !one_call_per_batch(b, c, &weights) => {}
            Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } => {}
            call => direct.extend(call_buffers(call)),
        }
    }
    direct.sort();
    direct.dedup();
    declare(s, p, &names, &direct, "ctx.", name);
    for c in calls {
        s.push_str(&c);
        s.push('\n');
    }
    s.push_str("    return 0;\n}\n");
    Ok(())
}


/// For a kernel that gathers, `name_check<k>`: checks every index it will use before it
/// runs (the kernel itself then wraps negative indices and never reads out of bounds),
/// evaluating each index expression over the loop variables it depends on. Returns
/// whether there is one.
fn index_checks(r: &Renderer<C>, name: &str, k: usize, step: &crate::lower::Step, s: &mut String) -> bool {
    let gathers = gather_checks(&step.kernel);
    if gathers.is_empty() {
        return false;
    }
    let ext = extents(step, &r.p.symbols, "ctx->");
    let _ = writeln!(s, "\n/* kernel {k}'s gather indices, each in [-n, n) for an axis of size n: {} */", comment_safe(&step.origins.join("; ")));
    let _ = writeln!(s, "static int {name}_check{k}(const struct {name}_ctx *ctx)\n{{");
    let mut bufs = Vec::new();
    for g in &gathers {
        crate::lower::expr_bufs(&g.index, &mut bufs);
    }
    bufs.sort();
    bufs.dedup();
    declare(s, r.p, r.names, &bufs, "ctx->", name);
    s.push_str("    (void)ctx;\n");
    for g in gathers {
        // A check with no loop (a constant index) gets a block, so that two of them
        // do not both declare `j` in one scope.
        let block = g.vars.is_empty();
        if block {
            s.push_str("    {\n");
        }
        let mut depth = 1 + usize::from(block);
        for &v in &g.vars {
            let _ = writeln!(s, "{}for (int64_t i{v} = 0; i{v} < {}; ++i{v}) {{", pad(depth), ext[v]);
            depth += 1;
        }
        let n = g.n;
        let _ = writeln!(s, "{}const int64_t j = {};", pad(depth), r.as_type(&g.index, Dtype::I64));
        let _ = writeln!(s, "{}if (j < -INT64_C({n}) || j >= INT64_C({n})) {{\n{}return 1;\n{}}}", pad(depth), pad(depth + 1), pad(depth));
        for d in (1..depth).rev() {
            let _ = writeln!(s, "{}}}", pad(d));
        }
    }
    s.push_str("    return 0;\n}\n");
    true
}

/// The extents of a step's loops, a symbol's run-time value read through `via`
/// (`ctx->` or `ctx.`).
fn extents(step: &crate::lower::Step, symbols: &[(String, u64)], via: &str) -> Vec<String> {
    crate::codegen::cstyle::kernel::extents(step, symbols, |s| format!("{via}dims[{s}]"))
}

/// A comment listing the weights stored narrow (`--quantize`), and how each is read.
fn narrowed_comment(p: &Program, s: &mut String) {
    let narrowed: Vec<String> = p
        .weights
        .iter()
        .filter(|w| w.stored != Stored::F32)
        .map(|w| {
            let widened = p.steps.iter().any(|s| matches!(&s.kernel, Kernel::Dequantize { w: v, .. } if v.buf == w.buf));
            let how = match w.layout {
                _ if widened => "widened by mr_dequantize before use",
                Layout::Panels if w.stored == Stored::Int8 => "multiplied in int8 by mr_gemm_i8_mt",
                Layout::Panels => "read by mr_sgemm_panels_q",
                Layout::Winograd => "read by mr_conv2d_winograd_q_mt",
                Layout::ConvPanels => "multiplied in int8 by mr_conv2d_i8_mt",
                Layout::RowMajor | Layout::Transposed => "read by mr_conv2d_q_mt",
            };
            let bytes = w.stored_bytes(p.buffers[w.buf.0].len, Dtype::F32).unwrap_or(0);
            format!("\n * {}: {}, {bytes} bytes, {how}", comment_safe(&w.name), w.stored.name())
        })
        .collect();
    if !narrowed.is_empty() {
        let int8 = if p.weights.iter().any(|w| w.stored == Stored::Int8) { " (int8's: multiplied in int8)" } else { "" };
        let _ = writeln!(s, "\n/* Weights stored narrow (--quantize), computed with in f32{int8}:{} */", narrowed.concat());
    }
}

/// Typed pointers to `bufs`, from a filled context through `via` (`ctx->` or `ctx.`); a
/// weight stored narrow is untyped (`const void *`: only runtime calls read it).
pub fn declare(s: &mut String, p: &Program, names: &[String], bufs: &[crate::lower::BufId], via: &str, prefix: &str) {
    for b in bufs {
        let buf = &p.buffers[b.0];
        let narrow = p.weights.iter().any(|w| w.buf == *b && w.stored != Stored::F32);
        let ty = if narrow { "void" } else { C.storage(buf.dtype) };
        let n = &names[b.0];
        let _ = match buf.storage {
            Storage::Input(k) => writeln!(s, "    const {ty} *{n} = (const {ty} *){via}inputs[{k}];"),
            Storage::Output(k) => writeln!(s, "    {ty} *{n} = ({ty} *){via}outputs[{k}];"),
            Storage::Weight { offset } => writeln!(s, "    const {ty} *{n} = (const {ty} *)(const void *)({via}w + {offset});"),
            Storage::Arena { offset } => writeln!(s, "    {ty} *{n} = ({ty} *)(void *)({via}a + {offset});"),
            Storage::Const(k) => writeln!(s, "    const {ty} *{n} = {prefix}_const{k};"),
            // no memory, so no pointer: only its kernel names it, in its own way
            Storage::Local => Ok(()),
        };
    }
}

/// A rough count of operations per output element, for the threading threshold.
pub(crate) fn work_per_element(k: &Kernel) -> u64 {
    match k {
        Kernel::Reduce { reduced, .. } => reduced.iter().product::<u64>().max(1),
        Kernel::ArgReduce { reduced, .. } => (*reduced).max(1),
        _ => 4,
    }
}

/// `ptr + offset` for a view's first element.
pub fn base(r: &Renderer<C>, v: &View) -> String {
    if v.offset == 0 {
        r.names[v.buf.0].clone()
    } else {
        format!("({} + {})", r.names[v.buf.0], v.offset)
    }
}
