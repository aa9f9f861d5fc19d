//! The functions the JIT compiles for one program: each loop kernel (Map, Reduce,
//! ArgReduce) as an `mr_task` over a range of its outermost non-trivial dimension, as
//! the C target's tasks are; each epilogue of a matrix product or convolution as an
//! `mr_epilogue_fn`; and each kernel's gather-index check. They read the buffers'
//! addresses and the symbols' values from a [`Ctx`](super::program::Ctx).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{FuncId, Module};

use super::expr::{compute, Body};
use super::module::Builder;
use crate::codegen::cstyle::kernel::{buffers_of, gather_checks};
use crate::error::{Error, Result};
use crate::ir::{ArgKind, Dtype, ReduceKind};
use crate::lower::{BufId, Expr, Kernel, Program, Step};

/// Partial sums of a long reduction, as the C target's `lane_sum`.
const SUM_LANES: usize = 8;

/// The type sums and products of floats accumulate in: the C target's (f64, as the
/// interpreter's).
fn acc_type(kind: ReduceKind, t: Dtype) -> Dtype {
    if t.is_float() && matches!(kind, ReduceKind::Sum | ReduceKind::Prod) { Dtype::F64 } else { t }
}

/// Opens a function of `params` (after the context pointer) and gives its body the
/// buffers `bufs` and the symbols; returns the parameters.
fn open(body: &mut Body, bufs: &[BufId]) -> Vec<Value> {
    let entry = body.b.create_block();
    body.b.append_block_params_for_function_params(entry);
    body.b.switch_to_block(entry);
    let params = body.b.block_params(entry).to_vec();
    let ptr = body.m.ptr();
    let flags = MemFlagsData::new().with_notrap();
    let table = body.b.ins().load(ptr, flags, params[0], 0);
    let dims = body.b.ins().load(ptr, flags, params[0], 8);
    body.m.pointers.extend([params[0], table, dims]);
    body.load_bases(table, dims, bufs);
    params
}

fn close(mut body: Body, m_ret: Option<Value>) {
    match m_ret {
        Some(v) => body.b.ins().return_(&[v]),
        None => body.b.ins().return_(&[]),
    };
    body.b.seal_all_blocks();
    let config = body.m.module.target_config();
    body.b.finalize(config);
}

/// What kernel `k` is, for errors and the CLIF listing.
pub fn describe(k: usize, step: &Step) -> String {
    format!("kernel {k} ({})", step.origins.join("; "))
}

/// Kernel `k`, a loop kernel, as task `<prefix>k<k>(ctx, begin, end)`.
pub fn task(m: &mut Builder, p: &Program, prefix: &str, k: usize, step: &Step) -> Result<FuncId> {
    let ptr = m.ptr();
    let sig = m.signature(&[ptr, types::I64, types::I64], &[]);
    m.define(&format!("{prefix}k{k}"), sig, &describe(k, step), |m, func, fctx| {
        let mut body = Body::new(FunctionBuilder::new(func, fctx), m, p);
        let params = open(&mut body, &buffers_of(p, &step.kernel));
        let ext = body.extents(step)?;
        loop_kernel(&mut body, step, &ext, params[1], params[2])?;
        close(body, None);
        Ok(())
    })
}

/// The loops over a kernel's output: the first dimension that can run more than once
/// over `[begin, end)`, those before it (of extent 1) at 0, those after it whole.
fn outer(body: &mut Body, step: &Step, rank: usize, ext: &[Value], (begin, end): (Value, Value), inner: &mut dyn FnMut(&mut Body) -> Result<()>) -> Result<()> {
    let domain = step.kernel.domain();
    let split = (0..rank).position(|d| domain[d] != 1 || step.dims.get(d).is_some_and(Option::is_some));
    let zero = body.iconst(types::I64, 0);
    match split {
        None => {
            for d in 0..rank {
                body.set_var(d, zero);
            }
            inner(body)
        }
        Some(s) => {
            for d in 0..s {
                body.set_var(d, zero);
            }
            let rest: Vec<usize> = (s + 1..rank).collect();
            body.for_range(s, begin, end, &mut |b| b.nest(&rest, &ext[s + 1..rank], inner))
        }
    }
}

fn loop_kernel(body: &mut Body, step: &Step, ext: &[Value], begin: Value, end: Value) -> Result<()> {
    let p = body.p;
    match &step.kernel {
        Kernel::Map { out, expr } => {
            let rank = out.shape.len();
            let t = p.buffers[out.buf.0].dtype;
            let vars: Vec<usize> = (0..rank).collect();
            let domain = step.kernel.domain();
            let split = (0..rank).position(|d| domain[d] != 1 || step.dims.get(d).is_some_and(Option::is_some));
            let zero = body.iconst(types::I64, 0);
            let Some(s) = split else {
                for d in 0..rank {
                    body.set_var(d, zero);
                }
                let v = body.as_type(expr, t)?;
                let at = body.address(out, &vars, None)?;
                return body.store(at, v, t);
            };
            for d in 0..s {
                body.set_var(d, zero);
            }
            // The task's range, the loops inside it, and the innermost one by vectors.
            let last = rank - 1;
            let mut innermost = |b: &mut Body| {
                let range = if last == s { (begin, end) } else { (zero, ext[last]) };
                b.store_loop(last, range, out, &vars, expr, t)
            };
            if last == s {
                innermost(body)
            } else {
                let middle: Vec<usize> = (s + 1..last).collect();
                body.for_range(s, begin, end, &mut |b| b.nest(&middle, &ext[s + 1..last], &mut innermost))
            }
        }
        Kernel::Reduce { out, reduced, kind, expr, scale } => {
            let rank = out.shape.len();
            let t = p.buffers[out.buf.0].dtype;
            let acc_ty = acc_type(*kind, t);
            let at_ty = compute(acc_ty)?;
            let vars: Vec<usize> = (0..rank).collect();
            let rvars: Vec<usize> = (rank..rank + reduced.len()).collect();
            // One static reduced extent, long enough for partial sums.
            let lanes = match (reduced.as_slice(), step.dims.get(rank).and_then(Option::as_ref)) {
                ([n], None) if *n as usize >= 2 * SUM_LANES && acc_ty.is_float() && *kind == ReduceKind::Sum => Some(*n as usize),
                _ => None,
            };
            outer(body, step, rank, ext, (begin, end), &mut |b| {
                let acc = match lanes {
                    Some(n) => lane_sum(b, n, rank, expr, acc_ty)?,
                    None => {
                        let init = reduce_init(b, *kind, acc_ty)?;
                        let acc = b.local(at_ty, init);
                        b.nest(&rvars, &ext[rank..], &mut |b| {
                            let v = b.as_type(expr, acc_ty)?;
                            let a = b.b.use_var(acc);
                            let next = reduce_step(b, *kind, acc_ty, a, v);
                            b.b.def_var(acc, next);
                            Ok(())
                        })?;
                        b.b.use_var(acc)
                    }
                };
                // (t)(acc * scale), the product in f64 as C's double literal makes it.
                let value = match scale {
                    Some(f) => {
                        let wide = b.convert(acc, acc_ty, Dtype::F64)?;
                        let s = b.b.ins().f64const(*f);
                        let x = b.b.ins().fmul(wide, s);
                        b.convert(x, Dtype::F64, t)?
                    }
                    None => b.convert(acc, acc_ty, t)?,
                };
                let at = b.address(out, &vars, None)?;
                b.store(at, value, t)
            })
        }
        Kernel::ArgReduce { out, kind, expr, .. } => {
            let rank = out.shape.len();
            let t = body.dtype(expr);
            let ct = compute(t)?;
            let o = p.buffers[out.buf.0].dtype;
            let vars: Vec<usize> = (0..rank).collect();
            outer(body, step, rank, ext, (begin, end), &mut |b| {
                let zero = b.constant(0.0, t)?;
                let best = b.local(ct, zero);
                let minus = b.iconst(types::I64, -1);
                let at = b.local(types::I64, minus);
                b.nest(&[rank], &ext[rank..rank + 1], &mut |b| {
                    let v = b.expr(expr)?;
                    let (cur, i) = (b.b.use_var(best), b.b.use_var(at));
                    let first = b.b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
                    let better = arg_better(b, *kind, t, v, cur);
                    let take = b.b.ins().bor(first, better);
                    let idx = b.vars[rank].expect("the reduced loop's variable");
                    let nb = b.b.ins().select(take, v, cur);
                    let ni = b.b.ins().select(take, idx, i);
                    b.b.def_var(best, nb);
                    b.b.def_var(at, ni);
                    Ok(())
                })?;
                let i = b.b.use_var(at);
                let v = b.convert(i, Dtype::I64, o)?;
                let addr = b.address(out, &vars, None)?;
                b.store(addr, v, o)
            })
        }
        other => Err(Error::internal(format!("jit: not a loop kernel: {other:?}"))),
    }
}

/// The sum of `expr` over loop variable `rv` in `[0, n)` in [`SUM_LANES`] interleaved
/// partial sums added pairwise, in the C target's order (`lane_sum`), so the two
/// round alike.
fn lane_sum(b: &mut Body, n: usize, rv: usize, expr: &Expr, acc_ty: Dtype) -> Result<Value> {
    let t = compute(acc_ty)?;
    let zero = b.constant(0.0, acc_ty)?;
    let parts: Vec<_> = (0..SUM_LANES).map(|_| b.local(t, zero)).collect();
    let whole = n - n % SUM_LANES;
    let add = |b: &mut Body, lane: usize, i: Value| -> Result<()> {
        b.set_var(rv, i);
        let v = b.as_type(expr, acc_ty)?;
        let p = b.b.use_var(parts[lane]);
        let sum = b.b.ins().fadd(p, v);
        b.b.def_var(parts[lane], sum);
        Ok(())
    };
    // One trip per SUM_LANES elements, unrolled: part[l] += v at i = SUM_LANES * trip + l.
    let (from, to) = (b.iconst(types::I64, 0), b.iconst(types::I64, (whole / SUM_LANES) as i64));
    b.for_range(rv, from, to, &mut |b| {
        let trip = b.vars[rv].expect("the trip counter");
        let base = b.b.ins().imul_imm_s(trip, SUM_LANES as i64);
        for lane in 0..SUM_LANES {
            let i = b.b.ins().iadd_imm_s(base, lane as i64);
            add(b, lane, i)?;
        }
        Ok(())
    })?;
    for lane in 0..n - whole {
        let i = b.iconst(types::I64, (whole + lane) as i64);
        add(b, lane, i)?;
    }
    let mut terms: Vec<Value> = parts.iter().map(|&p| b.b.use_var(p)).collect();
    while terms.len() > 1 {
        terms = terms.chunks(2).map(|c| b.b.ins().fadd(c[0], c[1])).collect();
    }
    Ok(terms[0])
}

fn reduce_init(b: &mut Body, kind: ReduceKind, t: Dtype) -> Result<Value> {
    let ct = compute(t)?;
    Ok(match kind {
        ReduceKind::Sum | ReduceKind::Max if t == Dtype::Bool => b.iconst(ct, 0),
        ReduceKind::Prod | ReduceKind::Min if t == Dtype::Bool => b.iconst(ct, 1),
        ReduceKind::Sum | ReduceKind::Mean => b.constant(0.0, t)?,
        ReduceKind::Prod => b.constant(1.0, t)?,
        ReduceKind::Max if t.is_float() => b.constant(f64::NEG_INFINITY, t)?,
        ReduceKind::Min if t.is_float() => b.constant(f64::INFINITY, t)?,
        ReduceKind::Max => int_limit(b, t, false),
        ReduceKind::Min => int_limit(b, t, true),
    })
}

/// The smallest (or largest) value of integer type `t`.
fn int_limit(b: &mut Body, t: Dtype, largest: bool) -> Value {
    let ct = compute(t).expect("an integer type");
    let bits = ct.bits();
    let v = match (t.is_signed_int(), largest) {
        (true, false) => i64::MIN >> (64 - bits),
        (true, true) => i64::MAX >> (64 - bits),
        (false, false) => 0,
        (false, true) => -1,
    };
    b.iconst(ct, v)
}

fn reduce_step(b: &mut Body, kind: ReduceKind, t: Dtype, acc: Value, v: Value) -> Value {
    let float = t.is_float();
    let s = t.is_signed_int();
    match kind {
        ReduceKind::Sum | ReduceKind::Max if t == Dtype::Bool => b.b.ins().bor(acc, v),
        ReduceKind::Prod | ReduceKind::Min if t == Dtype::Bool => b.b.ins().band(acc, v),
        ReduceKind::Sum | ReduceKind::Mean if float => b.b.ins().fadd(acc, v),
        ReduceKind::Sum | ReduceKind::Mean => b.b.ins().iadd(acc, v),
        ReduceKind::Prod if float => b.b.ins().fmul(acc, v),
        ReduceKind::Prod => b.b.ins().imul(acc, v),
        ReduceKind::Max if float => b.fmax_nan(acc, v, true),
        ReduceKind::Min if float => b.fmax_nan(acc, v, false),
        ReduceKind::Max => {
            let gt = b.b.ins().icmp(if s { IntCC::SignedGreaterThan } else { IntCC::UnsignedGreaterThan }, v, acc);
            b.b.ins().select(gt, v, acc)
        }
        ReduceKind::Min => {
            let lt = b.b.ins().icmp(if s { IntCC::SignedLessThan } else { IntCC::UnsignedLessThan }, v, acc);
            b.b.ins().select(lt, v, acc)
        }
    }
}

/// `v better than best` for an arg-reduction (NaN counts as the extreme).
fn arg_better(b: &mut Body, kind: ArgKind, t: Dtype, v: Value, best: Value) -> Value {
    use cranelift_codegen::ir::condcodes::FloatCC;
    if t.is_float() {
        let cc = if kind == ArgKind::ArgMax { FloatCC::GreaterThan } else { FloatCC::LessThan };
        let better = b.b.ins().fcmp(cc, v, best);
        let v_nan = b.b.ins().fcmp(FloatCC::Unordered, v, v);
        let best_num = b.b.ins().fcmp(FloatCC::Ordered, best, best);
        let nan_wins = b.b.ins().band(v_nan, best_num);
        b.b.ins().bor(better, nan_wins)
    } else {
        let s = t.is_signed_int();
        let cc = match (kind, s) {
            (ArgKind::ArgMax, true) => IntCC::SignedGreaterThan,
            (ArgKind::ArgMax, false) => IntCC::UnsignedGreaterThan,
            (ArgKind::ArgMin, true) => IntCC::SignedLessThan,
            (ArgKind::ArgMin, false) => IntCC::UnsignedLessThan,
        };
        b.b.ins().icmp(cc, v, best)
    }
}

/// Kernel `k`'s epilogue, when it has one, as `e<k>(ctx, n, r0, r1, c0, c1)`: rewrites
/// rows `[r0, r1)` and columns `[c0, c1)` of the result as the C target's `_e<k>` does
/// (`mithril_runtime.h`'s `mr_epilogue_fn`).
pub fn epilogue(m: &mut Builder, p: &Program, prefix: &str, k: usize, step: &Step) -> Result<Option<FuncId>> {
    let (out, expr, conv) = match &step.kernel {
        Kernel::Gemm { c, epilogue: Some(e), .. } => (c, e, false),
        Kernel::Conv { out, epilogue: Some(e), .. } => (out, e, true),
        _ => return Ok(None),
    };
    let ptr = m.ptr();
    let sig = m.signature(&[ptr, types::I64, types::I64, types::I64, types::I64, types::I64], &[]);
    let mut bufs = Vec::new();
    crate::lower::expr_bufs(expr, &mut bufs);
    bufs.push(out.buf);
    bufs.sort();
    bufs.dedup();
    let id = m.define(&format!("{prefix}e{k}"), sig, &format!("the epilogue of {}", describe(k, step)), |m, func, fctx| {
        let mut body = Body::new(FunctionBuilder::new(func, fctx), m, p);
        let params = open(&mut body, &bufs);
        let (n, r0, r1, c0, c1) = (params[1], params[2], params[3], params[4], params[5]);
        let rank = out.shape.len();
        let t = p.buffers[out.buf.0].dtype;
        // Rows, columns and n in the runtime's coordinates become the loop variables.
        let row = if conv {
            body.set_var(0, n);
            1
        } else {
            let mut inner = 1i64;
            for d in (0..rank - 2).rev() {
                let q = body.iconst(types::I64, inner);
                let q = body.b.ins().sdiv(n, q);
                let size = body.iconst(types::I64, out.shape[d] as i64);
                let i = body.b.ins().srem(q, size);
                body.set_var(d, i);
                inner *= out.shape[d] as i64;
            }
            rank - 2
        };
        let whole = Expr::Load { view: out.clone(), vars: (0..rank).collect() };
        // A 2-d convolution's output positions are [c0, c1) flattened: one loop over
        // them when every load can be indexed by the flat position, else rows of them.
        let flat = match (conv, rank) {
            (true, 4) => crate::codegen::c::library::flatten_spatial(&whole, out.shape[3]).zip(crate::codegen::c::library::flatten_spatial(expr, out.shape[3])),
            _ => None,
        };
        let (target, value) = flat.clone().unwrap_or((whole, expr.clone()));
        let Expr::Load { view: tv, vars: tvars } = &target else { unreachable!("a load") };
        let rewrite = |b: &mut Body, var: usize, range: (Value, Value)| b.store_loop(var, range, tv, tvars, &value, t);
        body.for_range(row, r0, r1, &mut |b| match (conv, rank, flat.is_some()) {
            (true, 4, true) => rewrite(b, 3, (c0, c1)),
            (true, 4, false) => {
                // Flattened positions [c0, c1) as rows of the output image.
                let ow = out.shape[3] as i64;
                let owv = b.iconst(types::I64, ow);
                let first = b.b.ins().sdiv(c0, owv);
                let past = b.b.ins().iadd_imm_s(c1, ow - 1);
                let past = b.b.ins().sdiv(past, owv);
                b.for_range(2, first, past, &mut |b| {
                    let start = b.b.ins().imul(b.vars[2].expect("i2"), owv);
                    let lo = b.b.ins().isub(c0, start);
                    let zero = b.iconst(types::I64, 0);
                    let lo = b.b.ins().smax(lo, zero);
                    let hi = b.b.ins().isub(c1, start);
                    let hi = b.b.ins().smin(hi, owv);
                    rewrite(b, 3, (lo, hi))
                })
            }
            _ => rewrite(b, row + 1, (c0, c1)),
        })?;
        close(body, None);
        Ok(())
    })?;
    Ok(Some(id))
}

/// Kernel `k`'s gather-index check, when it gathers, as `check<k>(ctx) -> int`: 1 when
/// an index it will use lies outside `[-n, n)` for its axis of size n (the run is
/// then refused: `ERROR_INDEX`), else 0; as the C target's `_check<k>`.
pub fn check(m: &mut Builder, p: &Program, prefix: &str, k: usize, step: &Step) -> Result<Option<FuncId>> {
    let gathers = gather_checks(&step.kernel);
    if gathers.is_empty() {
        return Ok(None);
    }
    let ptr = m.ptr();
    let sig = m.signature(&[ptr], &[types::I32]);
    let mut bufs = Vec::new();
    for g in &gathers {
        crate::lower::expr_bufs(&g.index, &mut bufs);
    }
    bufs.sort();
    bufs.dedup();
    let id = m.define(&format!("{prefix}check{k}"), sig, &format!("the index check of {}", describe(k, step)), |m, func, fctx| {
        let mut body = Body::new(FunctionBuilder::new(func, fctx), m, p);
        open(&mut body, &bufs);
        let ext = body.extents(step)?;
        let fail = body.b.create_block();
        for g in &gathers {
            let n = g.n as i64;
            let sizes: Vec<Value> = g.vars.iter().map(|&v| ext[v]).collect();
            body.nest(&g.vars, &sizes, &mut |b| {
                let j = b.as_type(&g.index, Dtype::I64)?;
                let low = b.b.ins().icmp_imm_s(IntCC::SignedLessThan, j, -n);
                let high = b.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, j, n);
                let bad = b.b.ins().bor(low, high);
                let next = b.b.create_block();
                b.b.ins().brif(bad, fail, &[], next, &[]);
                b.b.switch_to_block(next);
                Ok(())
            })?;
        }
        let ok = body.iconst(types::I32, 0);
        body.b.ins().return_(&[ok]);
        body.b.switch_to_block(fail);
        let one = body.iconst(types::I32, 1);
        close(body, Some(one));
        Ok(())
    })?;
    Ok(Some(id))
}
