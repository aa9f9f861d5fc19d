//! The HLO writer: one [`crate::ir::Graph`] as one HLO module's text, through
//! [`GraphWriter`]. Each node becomes one HLO instruction, or a short fixed sequence
//! where HLO has no single instruction with the interpreter's meaning (NumPy
//! broadcasting, softmax, floor division of integers, arg-max's tie rule); every
//! instruction of a node carries `metadata={op_name=...}` naming the model op it came
//! from. The node's value is the instruction `vN` (`%N` in the printed IR); the
//! sequence's intermediate steps are `vN.K`.
//!
//! The entry computation's parameters are the graph's inputs, then its parameters
//! (weights), each in graph order ([`HloWriter::parameters`]); its root is a tuple of
//! the graph's outputs. Reductions' combiners are small computations written before
//! the entry, each once.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::codegen::graph::GraphWriter;
use crate::error::{Error, Result};
use crate::ir::{ArgKind, BinaryOp, Composite, Dtype, Graph, Op, PoolKind, ReduceKind, UnaryOp, ValueId};

/// An entry parameter of the module: an input or a weight of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    /// A weight (a parameter of the model) rather than a data input.
    pub weight: bool,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

/// Where each entry parameter is split over a device mesh (`--mesh`): per parameter,
/// the HLO `sharding={...}` attribute it gets, if any.
pub type Shardings = BTreeMap<String, String>;

/// Writes one graph as an HLO module.
pub struct HloWriter {
    module: String,
    /// Metadata's `source_file`: the model file's name.
    source: String,
    /// The instruction that holds each value, by value index.
    names: Vec<String>,
    /// The entry computation's instructions.
    body: Vec<String>,
    /// Helper computations (combiners), by name.
    computations: BTreeMap<String, String>,
    parameters: Vec<Parameter>,
    /// The parameters' shardings over a device mesh (`--mesh`); every other
    /// parameter, and every output, is replicated. `None`: not partitioned.
    shardings: Option<Shardings>,
    /// The node being written: its index, metadata and the number of steps so far.
    node: usize,
    meta: String,
    steps: usize,
}

/// The HLO element type of `d`.
pub fn element_type(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "f32",
        Dtype::F64 => "f64",
        Dtype::F16 => "f16",
        Dtype::Bf16 => "bf16",
        Dtype::I32 => "s32",
        Dtype::I64 => "s64",
        Dtype::Bool => "pred",
        Dtype::I8 => "s8",
        Dtype::U8 => "u8",
        Dtype::I16 => "s16",
        Dtype::U16 => "u16",
        Dtype::U32 => "u32",
        Dtype::U64 => "u64",
        // (refused by `lacks`; HLO's names for them)
        Dtype::F8E4M3Fn => "f8e4m3fn",
        Dtype::F8E4M3Fnuz => "f8e4m3fnuz",
        Dtype::F8E5M2 => "f8e5m2",
        Dtype::F8E5M2Fnuz => "f8e5m2fnuz",
        Dtype::F4E2M1 => "f4e2m1fn",
        Dtype::I4 => "s4",
        Dtype::U4 => "u4",
        Dtype::I2 => "s2",
        Dtype::U2 => "u2",
    }
}

/// The HLO shape `f32[2,3]` (default layout).
fn shape(d: Dtype, dims: &[u64]) -> String {
    let dims: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("{}[{}]", element_type(d), dims.join(","))
}

/// A `{a,b,c}` list.
fn list(items: impl IntoIterator<Item = impl ToString>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("{{{}}}", items.join(","))
}

/// One element as an HLO literal spells it in type `d`.
fn scalar_literal(d: Dtype, x: f64) -> String {
    match d {
        Dtype::Bool => (if x != 0.0 { "true" } else { "false" }).to_string(),
        // Infinities (the initial values of max and min) saturate to the type's ends.
        Dtype::I32 => format!("{}", x.clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64),
        Dtype::I64 => format!("{}", x as i64),
        // (refused by `lacks`, but spelled as their own type's values)
        Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::U32 | Dtype::U64 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => {
            let (lo, hi) = d.int_range().unwrap_or((0.0, 0.0));
            format!("{}", x.clamp(lo, hi) as i128)
        }
        Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 if x.is_nan() => "nan".to_string(),
        Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 if x.is_infinite() => (if x > 0.0 { "inf" } else { "-inf" }).to_string(),
        // The shortest text that reads back as the same value of the type.
        Dtype::F32 => format!("{:?}", x as f32),
        Dtype::F64 | Dtype::F16 | Dtype::Bf16 => format!("{x:?}"),
        // (refused by `lacks`)
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => format!("{x:?}"),
    }
}

/// A whole literal of shape `dims`: nested braces, row-major.
fn literal(d: Dtype, dims: &[u64], data: &[f64]) -> String {
    fn nest(d: Dtype, dims: &[u64], data: &[f64], out: &mut String) {
        let Some((&n, rest)) = dims.split_first() else {
            out.push_str(&scalar_literal(d, data[0]));
            return;
        };
        let inner: usize = rest.iter().product::<u64>() as usize;
        out.push('{');
        for i in 0..n as usize {
            if i > 0 {
                out.push_str(", ");
            }
            nest(d, rest, &data[i * inner..(i + 1) * inner], out);
        }
        out.push('}');
    }
    let mut out = String::new();
    nest(d, dims, data, &mut out);
    out
}

/// Text from the model as it may stand inside an HLO string (metadata): printable
/// ASCII without quotes or backslashes.
fn hlo_string(s: &str) -> String {
    s.chars().map(|c| if (c.is_ascii_graphic() || c == ' ') && c != '"' && c != '\\' { c } else { '_' }).collect()
}

/// The static shape of value `v` (checked by [`HloWriter::lacks`]).
fn dims(graph: &Graph, v: ValueId) -> Result<Vec<u64>> {
    graph.ty(v).shape.as_known().ok_or_else(|| Error::internal(format!("xla: %{} has a symbolic shape", v.0)))
}

impl HloWriter {
    /// A writer of module `module` (an HLO identifier) for a model read from `source`,
    /// partitioned with `shardings` for the entry parameters named there.
    pub fn new(module: &str, source: &str, shardings: Option<Shardings>) -> HloWriter {
        HloWriter {
            module: module.to_string(),
            source: hlo_string(source),
            names: Vec::new(),
            body: Vec::new(),
            computations: BTreeMap::new(),
            parameters: Vec::new(),
            shardings,
            node: 0,
            meta: String::new(),
            steps: 0,
        }
    }

    /// The entry computation's parameters, in order.
    pub fn parameters(&self) -> &[Parameter] {
        &self.parameters
    }

    /// The module's text (after [`crate::codegen::graph::write_graph`]).
    pub fn text(&self) -> String {
        let mut out = format!("HloModule {}\n\n", self.module);
        for c in self.computations.values() {
            out.push_str(c);
            out.push('\n');
        }
        out.push_str("ENTRY main {\n");
        for line in &self.body {
            let _ = writeln!(out, "  {line}");
        }
        out.push_str("}\n");
        out
    }

    /// The entry's root: a tuple of `values` (of `types`), replicated when partitioned.
    fn root(&mut self, types: &[String], values: &[String]) {
        let sharding = match self.shardings {
            Some(_) => format!(", sharding={{{}}}", vec!["{replicated}"; types.len()].join(", ")),
            None => String::new(),
        };
        self.body.push(format!("ROOT outputs = ({}) tuple({}){sharding}", types.join(", "), values.join(", ")));
    }

    /// Emits one instruction of the current node: `ty op_text`, returning its name.
    fn emit(&mut self, ty: String, op: String) -> String {
        let name = format!("v{}.{}", self.node, self.steps);
        self.steps += 1;
        self.body.push(format!("{name} = {ty} {op}, {}", self.meta));
        name
    }

    /// The scalar constant `x` of type `d`.
    fn scalar(&mut self, d: Dtype, x: f64) -> String {
        self.emit(shape(d, &[]), format!("constant({})", scalar_literal(d, x)))
    }

    /// The constant `x` of type `d` broadcast to `dims`.
    fn splat(&mut self, d: Dtype, x: f64, dims: &[u64]) -> String {
        let s = self.scalar(d, x);
        if dims.is_empty() {
            return s;
        }
        self.emit(shape(d, dims), format!("broadcast({s}), dimensions={{}}"))
    }

    /// `x` (of type `from`) converted to `to`.
    fn convert(&mut self, x: &str, from: Dtype, to: Dtype, dims: &[u64]) -> String {
        if from == to {
            return x.to_string();
        }
        self.emit(shape(to, dims), format!("convert({x})"))
    }

    fn reshape(&mut self, x: &str, d: Dtype, from: &[u64], to: &[u64]) -> String {
        if from == to {
            return x.to_string();
        }
        self.emit(shape(d, to), format!("reshape({x})"))
    }

    /// NumPy's `broadcast_to(x, to)` for `x` of shape `from`: the size-1 dimensions
    /// that grow are reshaped away, then HLO's broadcast maps the rest.
    fn broadcast(&mut self, x: &str, d: Dtype, from: &[u64], to: &[u64]) -> String {
        if from == to {
            return x.to_string();
        }
        let lead = to.len() - from.len();
        let kept: Vec<usize> = (0..from.len()).filter(|&i| from[i] == to[lead + i]).collect();
        let kept_dims: Vec<u64> = kept.iter().map(|&i| from[i]).collect();
        let x = self.reshape(x, d, from, &kept_dims);
        self.emit(shape(d, to), format!("broadcast({x}), dimensions={}", list(kept.iter().map(|i| i + lead))))
    }

    /// Argument `i` of `node`, converted to `d` and broadcast to `to`.
    fn operand(&mut self, graph: &Graph, v: ValueId, i: usize, d: Dtype, to: &[u64]) -> Result<String> {
        let a = graph.node(v).args[i];
        let from = dims(graph, a)?;
        let name = self.names[a.index()].clone();
        let x = self.convert(&name, graph.ty(a).dtype, d, &from);
        Ok(self.broadcast(&x, d, &from, to))
    }

    fn binary(&mut self, op: &str, a: &str, b: &str, d: Dtype, dims: &[u64]) -> String {
        self.emit(shape(d, dims), format!("{op}({a}, {b})"))
    }

    fn unary(&mut self, op: &str, x: &str, d: Dtype, dims: &[u64]) -> String {
        self.emit(shape(d, dims), format!("{op}({x})"))
    }

    fn compare(&mut self, a: &str, b: &str, direction: &str, dims: &[u64]) -> String {
        self.emit(shape(Dtype::Bool, dims), format!("compare({a}, {b}), direction={direction}"))
    }

    fn select(&mut self, c: &str, a: &str, b: &str, d: Dtype, dims: &[u64]) -> String {
        self.emit(shape(d, dims), format!("select({c}, {a}, {b})"))
    }

    /// `x op c` for the constant `c`.
    fn with_constant(&mut self, op: &str, x: &str, c: f64, d: Dtype, dims: &[u64]) -> String {
        let k = self.splat(d, c, dims);
        self.binary(op, x, &k, d, dims)
    }

    /// The combiner computation `op` over scalars of `d`, written once. A float
    /// maximum or minimum keeps a NaN explicitly, as the interpreter's does: XLA's CPU
    /// reductions compute `maximum` without NaN propagation.
    fn combiner(&mut self, op: &str, d: Dtype) -> String {
        let name = format!("{}_{}", op.replace('-', "_"), element_type(d));
        let t = shape(d, &[]);
        let keeps_nan = d.is_float() && matches!(op, "maximum" | "minimum");
        self.computations.entry(name.clone()).or_insert_with(|| {
            if keeps_nan {
                format!(
                    "{name} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  m = {t} {op}(a, b)\n  \
                     a_nan = pred[] compare(a, a), direction=NE\n  b_nan = pred[] compare(b, b), direction=NE\n  \
                     mb = {t} select(b_nan, b, m)\n  ROOT r = {t} select(a_nan, a, mb)\n}}\n"
                )
            } else {
                format!("{name} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  ROOT r = {t} {op}(a, b)\n}}\n")
            }
        });
        name
    }

    /// HLO `reduce` of `x` (shape `from`, type `d`) over `axes` with combiner `op`
    /// and initial value `init`; the result has the reduced dimensions removed.
    fn reduce(&mut self, x: &str, d: Dtype, from: &[u64], axes: &[usize], op: &str, init: f64) -> String {
        let comb = self.combiner(op, d);
        let init = self.scalar(d, init);
        let kept: Vec<u64> = (0..from.len()).filter(|i| !axes.contains(i)).map(|i| from[i]).collect();
        self.emit(shape(d, &kept), format!("reduce({x}, {init}), dimensions={}, to_apply={comb}", list(axes)))
    }

    /// `reduce(x)` over `axis`, broadcast back onto `x`'s shape.
    fn reduce_back(&mut self, x: &str, d: Dtype, dims: &[u64], axis: usize, op: &str, init: f64) -> String {
        let r = self.reduce(x, d, dims, &[axis], op, init);
        let kept: Vec<usize> = (0..dims.len()).filter(|&i| i != axis).collect();
        self.emit(shape(d, dims), format!("broadcast({r}), dimensions={}", list(kept)))
    }

    /// The computation arg-max/arg-min reduces (value, index) pairs with: the better
    /// value wins (a NaN beats any number, as the interpreter's scan finds it), ties go
    /// to the lower index, so the result is the first best element however XLA orders
    /// the reduction.
    fn arg_combiner(&mut self, kind: ArgKind, d: Dtype, index: Dtype) -> String {
        let name = format!("{}_{}_{}", kind.name(), element_type(d), element_type(index));
        let (t, i) = (shape(d, &[]), shape(index, &[]));
        let dir = match kind {
            ArgKind::ArgMax => "GT",
            ArgKind::ArgMin => "LT",
        };
        self.computations.entry(name.clone()).or_insert_with(|| {
            format!(
                "{name} {{\n  a = {t} parameter(0)\n  ia = {i} parameter(1)\n  b = {t} parameter(2)\n  ib = {i} parameter(3)\n  \
                 better = pred[] compare(a, b), direction={dir}\n  a_nan = pred[] compare(a, a), direction=NE\n  \
                 b_nan = pred[] compare(b, b), direction=NE\n  b_num = pred[] not(b_nan)\n  nan_wins = pred[] and(a_nan, b_num)\n  \
                 a_wins = pred[] or(better, nan_wins)\n  same = pred[] compare(a, b), direction=EQ\n  both_nan = pred[] and(a_nan, b_nan)\n  \
                 tie = pred[] or(same, both_nan)\n  first = pred[] compare(ia, ib), direction=LT\n  tie_first = pred[] and(tie, first)\n  \
                 take_a = pred[] or(a_wins, tie_first)\n  v = {t} select(take_a, a, b)\n  k = {i} select(take_a, ia, ib)\n  \
                 ROOT r = ({t}, {i}) tuple(v, k)\n}}\n"
            )
        });
        name
    }

    /// Writes node `v`'s instructions; returns the instruction that holds its value.
    fn lower(&mut self, graph: &Graph, v: ValueId) -> Result<String> {
        let node = graph.node(v);
        let out_ty = graph.ty(v).dtype;
        let out = dims(graph, v)?;
        let name_of = |w: &HloWriter, i: usize| w.names[node.args[i].index()].clone();
        let arg_dims = |i: usize| dims(graph, node.args[i]);
        let arg_ty = |i: usize| graph.ty(node.args[i]).dtype;
        Ok(match &node.op {
            Op::Input | Op::Param => {
                let name = node.name.clone().ok_or_else(|| Error::internal(format!("xla: %{} has no name", v.0)))?;
                let index = self.parameters.len();
                let sharding = match &self.shardings {
                    Some(s) => format!(", sharding={}", s.get(&name).map_or("{replicated}", String::as_str)),
                    None => String::new(),
                };
                self.parameters.push(Parameter { name, weight: node.op == Op::Param, dtype: out_ty, shape: out.clone() });
                self.emit(shape(out_ty, &out), format!("parameter({index}){sharding}"))
            }
            Op::Constant(c) => {
                let t = graph.consts.get(c.0 as usize).ok_or_else(|| Error::internal(format!("xla: constant #{} does not exist", c.0)))?.to_tensor();
                self.emit(shape(out_ty, &out), format!("constant({})", literal(out_ty, &out, &t.data)))
            }
            Op::Unary(u) => {
                // Integers of a float function are converted first, as its type says;
                // isnan looks at the value itself.
                let compute = if *u == UnaryOp::IsNan { arg_ty(0) } else { out_ty };
                let x = self.operand(graph, v, 0, compute, &out)?;
                self.unary_op(*u, &x, compute, &out)?
            }
            Op::Binary(b) => {
                let compute = if b.is_comparison() { Dtype::promote(arg_ty(0), arg_ty(1)) } else { out_ty };
                let l = self.operand(graph, v, 0, compute, &out)?;
                let r = self.operand(graph, v, 1, compute, &out)?;
                self.binary_op(*b, &l, &r, compute, &out)
            }
            Op::Where => {
                let c = self.operand(graph, v, 0, Dtype::Bool, &out)?;
                let a = self.operand(graph, v, 1, out_ty, &out)?;
                let b = self.operand(graph, v, 2, out_ty, &out)?;
                self.select(&c, &a, &b, out_ty, &out)
            }
            Op::Cast { to } => {
                let x = name_of(self, 0);
                let from = arg_ty(0);
                if from.is_float() && *to == Dtype::Bool {
                    // NaN is true, as `x != 0` says.
                    let zero = self.splat(from, 0.0, &out);
                    self.compare(&x, &zero, "NE", &out)
                } else {
                    let c = self.convert(&x, from, *to, &out);
                    if c == x { self.unary("copy", &x, out_ty, &out) } else { c }
                }
            }
            Op::MatMul => self.matmul(graph, v, out_ty, &out)?,
            Op::Conv(a) => {
                let (x, w) = (self.operand(graph, v, 0, out_ty, &arg_dims(0)?)?, self.operand(graph, v, 1, out_ty, &arg_dims(1)?)?);
                let n = a.stride.len();
                let spatial: String = (0..n).map(|i| i.to_string()).collect();
                let x_ = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join("x");
                let kernel = &arg_dims(1)?[2..];
                let pad: Vec<String> = a.padding.iter().map(|(lo, hi)| format!("{lo}_{hi}")).collect();
                let window = format!("size={} stride={} pad={} rhs_dilate={}", x_(kernel), x_(&a.stride), pad.join("x"), x_(&a.dilation));
                let conv = self.emit(
                    shape(out_ty, &out),
                    format!(
                        "convolution({x}, {w}), window={{{window}}}, dim_labels=bf{spatial}_oi{spatial}->bf{spatial}, feature_group_count={}, operand_precision={{highest,highest}}",
                        a.groups
                    ),
                );
                if node.args.len() == 3 {
                    let b = self.operand(graph, v, 2, out_ty, &out)?;
                    self.binary("add", &conv, &b, out_ty, &out)
                } else {
                    conv
                }
            }
            Op::Pool(p) => {
                let x = name_of(self, 0);
                let from = arg_dims(0)?;
                let lead = from.len() - p.kernel.len();
                let ones = |v: &[u64]| std::iter::repeat_n(1u64, lead).chain(v.iter().copied()).map(|d| d.to_string()).collect::<Vec<_>>().join("x");
                let pad: Vec<String> = std::iter::repeat_n((0, 0), lead).chain(p.padding.iter().copied()).map(|(lo, hi)| format!("{lo}_{hi}")).collect();
                let window = format!("size={} stride={} pad={} rhs_dilate={}", ones(&p.kernel), ones(&p.stride), pad.join("x"), ones(&p.dilation));
                // The padding takes the initial value: -inf never wins a max, 0 adds
                // nothing to a sum (average pooling counts the padding, as the
                // interpreter does).
                let (op, init) = match p.kind {
                    PoolKind::Max => ("maximum", f64::NEG_INFINITY),
                    PoolKind::Avg => ("add", 0.0),
                };
                let comb = self.combiner(op, out_ty);
                let init = self.scalar(out_ty, init);
                let r = self.emit(shape(out_ty, &out), format!("reduce-window({x}, {init}), window={{{window}}}, to_apply={comb}"));
                match p.kind {
                    PoolKind::Max => r,
                    PoolKind::Avg => self.with_constant("divide", &r, p.kernel.iter().product::<u64>() as f64, out_ty, &out),
                }
            }
            Op::Reduce { kind, axes, .. } => {
                let from = arg_dims(0)?;
                let x = name_of(self, 0);
                let x = self.convert(&x, arg_ty(0), out_ty, &from);
                let boolean = out_ty == Dtype::Bool;
                // Over bools a sum is "any" and a product "all", as rounding to bool makes them.
                let (op, init) = match kind {
                    ReduceKind::Sum | ReduceKind::Mean if boolean => ("or", 0.0),
                    ReduceKind::Prod | ReduceKind::Min if boolean => ("and", 1.0),
                    ReduceKind::Max if boolean => ("or", 0.0),
                    ReduceKind::Sum | ReduceKind::Mean => ("add", 0.0),
                    ReduceKind::Prod => ("multiply", 1.0),
                    ReduceKind::Max => ("maximum", f64::NEG_INFINITY),
                    ReduceKind::Min => ("minimum", f64::INFINITY),
                };
                let r = self.reduce(&x, out_ty, &from, axes, op, init);
                let kept: Vec<u64> = (0..from.len()).filter(|i| !axes.contains(i)).map(|i| from[i]).collect();
                let r = if *kind == ReduceKind::Mean {
                    let count: u64 = axes.iter().map(|&a| from[a]).product();
                    self.with_constant("divide", &r, count as f64, out_ty, &kept)
                } else {
                    r
                };
                self.reshape(&r, out_ty, &kept, &out)
            }
            Op::ArgReduce { kind, axis, .. } => {
                let from = arg_dims(0)?;
                let d = arg_ty(0);
                let x = name_of(self, 0);
                let (x, from, axis) = match axis {
                    Some(a) => (x, from, *a),
                    None => {
                        let flat = vec![from.iter().product()];
                        (self.reshape(&x, d, &from, &flat), flat, 0)
                    }
                };
                let idx = self.emit(shape(out_ty, &from), format!("iota(), iota_dimension={axis}"));
                // The initial pair loses to every element: the worst value and the
                // largest index.
                let worst = match (kind, d) {
                    (ArgKind::ArgMax, Dtype::Bool) => 0.0,
                    (ArgKind::ArgMin, Dtype::Bool) => 1.0,
                    (ArgKind::ArgMax, _) => f64::NEG_INFINITY,
                    (ArgKind::ArgMin, _) => f64::INFINITY,
                };
                let init_v = self.scalar(d, worst);
                let init_i = self.scalar(out_ty, i64::MAX as f64);
                let comb = self.arg_combiner(*kind, d, out_ty);
                let kept: Vec<u64> = (0..from.len()).filter(|&i| i != axis).map(|i| from[i]).collect();
                let pair = self.emit(
                    format!("({}, {})", shape(d, &kept), shape(out_ty, &kept)),
                    format!("reduce({x}, {idx}, {init_v}, {init_i}), dimensions={{{axis}}}, to_apply={comb}"),
                );
                let k = self.emit(shape(out_ty, &kept), format!("get-tuple-element({pair}), index=1"));
                self.reshape(&k, out_ty, &kept, &out)
            }
            Op::Variance { axes, correction, .. } => {
                let from = arg_dims(0)?;
                let x = name_of(self, 0);
                let x = self.convert(&x, arg_ty(0), out_ty, &from);
                let count: u64 = axes.iter().map(|&a| from[a]).product();
                let kept_axes: Vec<usize> = (0..from.len()).filter(|i| !axes.contains(i)).collect();
                let kept: Vec<u64> = kept_axes.iter().map(|&i| from[i]).collect();
                let sum = self.reduce(&x, out_ty, &from, axes, "add", 0.0);
                let mean = self.with_constant("divide", &sum, count as f64, out_ty, &kept);
                let mean = self.emit(shape(out_ty, &from), format!("broadcast({mean}), dimensions={}", list(&kept_axes)));
                let dev = self.binary("subtract", &x, &mean, out_ty, &from);
                let sq = self.binary("multiply", &dev, &dev, out_ty, &from);
                let ss = self.reduce(&sq, out_ty, &from, axes, "add", 0.0);
                let divisor = (count as f64 - correction).max(0.0);
                let r = self.with_constant("divide", &ss, divisor, out_ty, &kept);
                self.reshape(&r, out_ty, &kept, &out)
            }
            Op::Softmax { axis } => {
                let x = self.operand(graph, v, 0, out_ty, &out)?;
                let max = self.reduce_back(&x, out_ty, &out, *axis, "maximum", f64::NEG_INFINITY);
                let shifted = self.binary("subtract", &x, &max, out_ty, &out);
                let e = self.unary("exponential", &shifted, out_ty, &out);
                let sum = self.reduce_back(&e, out_ty, &out, *axis, "add", 0.0);
                self.binary("divide", &e, &sum, out_ty, &out)
            }
            Op::Reshape { .. } => {
                let x = name_of(self, 0);
                self.emit(shape(out_ty, &out), format!("reshape({x})"))
            }
            Op::Transpose { perm } => {
                let x = name_of(self, 0);
                self.emit(shape(out_ty, &out), format!("transpose({x}), dimensions={}", list(perm)))
            }
            Op::BroadcastTo { .. } => {
                let x = name_of(self, 0);
                let b = self.broadcast(&x, out_ty, &arg_dims(0)?, &out);
                if b == x { self.unary("copy", &x, out_ty, &out) } else { b }
            }
            Op::Slice { ranges } => {
                let from = arg_dims(0)?;
                let mut x = name_of(self, 0);
                let mut specs = Vec::new();
                let mut reversed = Vec::new();
                for (d, r) in ranges.iter().enumerate() {
                    let (start, step, count) = r.resolve(from[d]).map_err(|e| Error::internal(format!("xla: slice: {e}")))?;
                    let (start, step) = if step < 0 {
                        // HLO slices step forward only: walk the reversed dimension.
                        reversed.push(d);
                        (from[d] as i64 - 1 - start, -step)
                    } else {
                        (start, step)
                    };
                    let (start, limit) = if count == 0 { (0, 0) } else { (start, start + (count as i64 - 1) * step + 1) };
                    specs.push(format!("[{start}:{limit}:{step}]"));
                }
                if !reversed.is_empty() {
                    x = self.emit(shape(out_ty, &from), format!("reverse({x}), dimensions={}", list(&reversed)));
                }
                self.emit(shape(out_ty, &out), format!("slice({x}), slice={{{}}}", specs.join(", ")))
            }
            Op::Concat { axis } => {
                let args: Vec<String> = (0..node.args.len()).map(|i| name_of(self, i)).collect();
                self.emit(shape(out_ty, &out), format!("concatenate({}), dimensions={{{axis}}}", args.join(", ")))
            }
            Op::Gather { axis } => {
                let data = name_of(self, 0);
                let data_dims = arg_dims(0)?;
                let (idx_ty, idx_dims) = (arg_ty(1), arg_dims(1)?);
                // Negative indices count from the end, as the interpreter's take does.
                let i = name_of(self, 1);
                let zero = self.splat(idx_ty, 0.0, &idx_dims);
                let negative = self.compare(&i, &zero, "LT", &idx_dims);
                let wrapped = self.with_constant("add", &i, data_dims[*axis] as f64, idx_ty, &idx_dims);
                let i = self.select(&negative, &wrapped, &i, idx_ty, &idx_dims);
                let mut vec_dims = idx_dims.clone();
                vec_dims.push(1);
                let i = self.reshape(&i, idx_ty, &idx_dims, &vec_dims);
                let rank = idx_dims.len();
                let offset: Vec<usize> = (0..*axis).chain(axis + rank..out.len()).collect();
                let mut sizes = data_dims.clone();
                sizes[*axis] = 1;
                self.emit(
                    shape(out_ty, &out),
                    format!(
                        "gather({data}, {i}), offset_dims={}, collapsed_slice_dims={{{axis}}}, start_index_map={{{axis}}}, index_vector_dim={rank}, slice_sizes={}",
                        list(offset),
                        list(sizes)
                    ),
                )
            }
            Op::Iota { axis, .. } => self.emit(shape(out_ty, &out), format!("iota(), iota_dimension={axis}")),
            Op::Pad { pads, value } => {
                let x = name_of(self, 0);
                let k = self.scalar(out_ty, *value);
                let spec: Vec<String> = pads.iter().map(|(lo, hi)| format!("{lo}_{hi}")).collect();
                self.emit(shape(out_ty, &out), format!("pad({x}, {k}), padding={}", spec.join("x")))
            }
            // The value itself: a gradient-only difference.
            Op::StopGradient => name_of(self, 0),
        })
    }

    /// One elementwise function of `x` (already of the result's type `d`).
    fn unary_op(&mut self, u: UnaryOp, x: &str, d: Dtype, dims: &[u64]) -> Result<String> {
        Ok(match u {
            UnaryOp::Neg => self.unary("negate", x, d, dims),
            UnaryOp::Abs => self.unary("abs", x, d, dims),
            UnaryOp::Sign => self.unary("sign", x, d, dims),
            UnaryOp::Exp => self.unary("exponential", x, d, dims),
            UnaryOp::Log => self.unary("log", x, d, dims),
            UnaryOp::Sqrt => self.unary("sqrt", x, d, dims),
            UnaryOp::Sin => self.unary("sine", x, d, dims),
            UnaryOp::Cos => self.unary("cosine", x, d, dims),
            UnaryOp::Tanh => self.unary("tanh", x, d, dims),
            // atan(x) = atan2(x, 1)
            UnaryOp::Atan => self.with_constant("atan2", x, 1.0, d, dims),
            // max(x, 0) keeps NaN, as the interpreter's max does.
            UnaryOp::Relu => self.with_constant("maximum", x, 0.0, d, dims),
            UnaryOp::Erf => self.unary("erf", x, d, dims),
            // The floor of an integer is itself.
            UnaryOp::Floor if !d.is_float() => x.to_string(),
            UnaryOp::Floor => self.unary("floor", x, d, dims),
            UnaryOp::Not => self.unary("not", x, d, dims),
            UnaryOp::IsNan if !d.is_float() => self.splat(Dtype::Bool, 0.0, dims),
            UnaryOp::IsNan => self.compare(x, x, "NE", dims),
            // Only the claimed composites reach the writer (`decompose`).
            UnaryOp::Composite(c) => match composite_instruction(c) {
                Some(op) => self.unary(op, x, d, dims),
                None => return Err(Error::internal(format!("xla: composite {} reached the writer", c.name()))),
            },
        })
    }

    /// One elementwise function of `l` and `r`, both of type `d` and shape `dims`.
    fn binary_op(&mut self, b: BinaryOp, l: &str, r: &str, d: Dtype, dims: &[u64]) -> String {
        match b {
            BinaryOp::Add => self.binary("add", l, r, d, dims),
            BinaryOp::Sub => self.binary("subtract", l, r, d, dims),
            BinaryOp::Mul => self.binary("multiply", l, r, d, dims),
            BinaryOp::Div => self.binary("divide", l, r, d, dims),
            BinaryOp::Pow => self.binary("power", l, r, d, dims),
            BinaryOp::Max => self.binary("maximum", l, r, d, dims),
            BinaryOp::Min => self.binary("minimum", l, r, d, dims),
            BinaryOp::FloorDiv if d.is_float() => {
                let q = self.binary("divide", l, r, d, dims);
                self.unary("floor", &q, d, dims)
            }
            BinaryOp::FloorDiv => {
                // Truncated quotient, one less where a remainder's sign differs from
                // the divisor's; 0 where the divisor is 0 (the interpreter's rule).
                let q = self.binary("divide", l, r, d, dims);
                let rem = self.binary("remainder", l, r, d, dims);
                let zero = self.splat(d, 0.0, dims);
                let inexact = self.compare(&rem, &zero, "NE", dims);
                let ln = self.compare(l, &zero, "LT", dims);
                let rn = self.compare(r, &zero, "LT", dims);
                let signs = self.binary("xor", &ln, &rn, Dtype::Bool, dims);
                let down = self.binary("and", &inexact, &signs, Dtype::Bool, dims);
                let one_less = self.with_constant("subtract", &q, 1.0, d, dims);
                let f = self.select(&down, &one_less, &q, d, dims);
                let by_zero = self.compare(r, &zero, "EQ", dims);
                self.select(&by_zero, &zero, &f, d, dims)
            }
            BinaryOp::Eq => self.compare(l, r, "EQ", dims),
            BinaryOp::Ne => self.compare(l, r, "NE", dims),
            BinaryOp::Lt => self.compare(l, r, "LT", dims),
            BinaryOp::Le => self.compare(l, r, "LE", dims),
            BinaryOp::Gt => self.compare(l, r, "GT", dims),
            BinaryOp::Ge => self.compare(l, r, "GE", dims),
            BinaryOp::And => self.binary("and", l, r, d, dims),
            BinaryOp::Or => self.binary("or", l, r, d, dims),
            BinaryOp::Xor => self.binary("xor", l, r, d, dims),
            // Out-of-range counts give 0, and sign bits to the right: HLO's rule and the
            // interpreter's.
            BinaryOp::Shl => self.binary("shift-left", l, r, d, dims),
            BinaryOp::Shr => self.binary("shift-right-arithmetic", l, r, d, dims),
        }
    }

    /// NumPy's matmul as one HLO dot: rank-1 operands promoted to matrices, the batch
    /// dimensions broadcast (a matrix right operand is not: it contracts with every
    /// batch as it is), the promoted dimension reshaped away at the end.
    fn matmul(&mut self, graph: &Graph, v: ValueId, d: Dtype, out: &[u64]) -> Result<String> {
        let node = graph.node(v);
        let (ld, rd) = (dims(graph, node.args[0])?, dims(graph, node.args[1])?);
        let l = self.operand(graph, v, 0, d, &ld)?;
        let r = self.operand(graph, v, 1, d, &rd)?;
        let lm: Vec<u64> = if ld.len() == 1 { vec![1, ld[0]] } else { ld.clone() };
        let rm: Vec<u64> = if rd.len() == 1 { vec![rd[0], 1] } else { rd.clone() };
        let l = self.reshape(&l, d, &ld, &lm);
        let r = self.reshape(&r, d, &rd, &rm);
        let (m, k, n) = (lm[lm.len() - 2], lm[lm.len() - 1], rm[rm.len() - 1]);
        let batch_rank = (lm.len() - 2).max(rm.len() - 2);
        // The batch dimensions as NumPy broadcasts them.
        let mut batch = vec![1u64; batch_rank];
        for (i, b) in batch.iter_mut().enumerate() {
            let at = |s: &[u64]| {
                let lead = batch_rank - (s.len() - 2);
                if i >= lead { s[i - lead] } else { 1 }
            };
            *b = at(&lm).max(at(&rm));
        }
        let full = |b: &[u64], x: u64, y: u64| b.iter().copied().chain([x, y]).collect::<Vec<u64>>();
        let mut product = full(&batch, m, n);
        let dot = if rm.len() == 2 {
            // [batch.., m, k] . [k, n]: the left operand's own batch, no broadcast.
            let lb: Vec<u64> = lm[..lm.len() - 2].to_vec();
            product = full(&lb, m, n);
            self.emit(
                shape(d, &product),
                format!("dot({l}, {r}), lhs_contracting_dims={{{}}}, rhs_contracting_dims={{0}}, operand_precision={{highest,highest}}", lm.len() - 1),
            )
        } else {
            let l = self.broadcast(&l, d, &lm, &full(&batch, m, k));
            let r = self.broadcast(&r, d, &rm, &full(&batch, k, n));
            let b = list(0..batch_rank);
            self.emit(
                shape(d, &product),
                format!(
                    "dot({l}, {r}), lhs_batch_dims={b}, lhs_contracting_dims={{{}}}, rhs_batch_dims={b}, rhs_contracting_dims={{{batch_rank}}}, operand_precision={{highest,highest}}",
                    batch_rank + 1
                ),
            )
        };
        Ok(self.reshape(&dot, d, &product, out))
    }
}

/// One trained parameter of a training step: its value and gradient in the backward
/// graph.
pub struct Trained {
    pub name: String,
    pub param: ValueId,
    pub grad: ValueId,
}

/// The training step's own entry parameters, after the backward graph's.
pub const TRAIN_LR: &str = "train/lr";
pub const TRAIN_MOMENTUM: &str = "train/momentum";

/// The velocity (optimizer state) of trained parameter `name`.
pub fn velocity_name(name: &str) -> String {
    format!("train/velocity/{name}")
}

impl HloWriter {
    /// Ends a training step after the backward graph's nodes (written with
    /// [`GraphWriter::node`]): SGD with momentum on each of `trained`, as the C target's
    /// step does (`v = momentum * v + grad; w -= lr * v`), with the learning rate, the
    /// momentum (scalars of the loss's type) and each velocity as further parameters.
    /// Its outputs: the loss (before the step), each new weight, each new velocity.
    pub fn train_step(&mut self, graph: &Graph, loss: ValueId, trained: &[Trained]) -> Result<()> {
        let scalar = graph.ty(loss).dtype;
        self.node = graph.nodes.len();
        self.steps = 0;
        self.meta = format!("metadata={{op_name=\"sgd step\" source_file=\"{}\"}}", self.source);
        let param = |w: &mut HloWriter, name: String, d: Dtype, dims: &[u64]| {
            let index = w.parameters.len();
            let sharding = if w.shardings.is_some() { ", sharding={replicated}" } else { "" };
            w.parameters.push(Parameter { name, weight: false, dtype: d, shape: dims.to_vec() });
            w.emit(shape(d, dims), format!("parameter({index}){sharding}"))
        };
        let lr = param(self, TRAIN_LR.to_string(), scalar, &[]);
        let momentum = param(self, TRAIN_MOMENTUM.to_string(), scalar, &[]);
        let mut types = vec![shape(scalar, &[])];
        let mut values = vec![self.names[loss.index()].clone()];
        let mut velocities = Vec::new();
        for t in trained {
            let (d, dims) = (graph.ty(t.param).dtype, dims(graph, t.param)?);
            let v = param(self, velocity_name(&t.name), d, &dims);
            let k = |w: &mut HloWriter, x: &str| {
                let c = w.convert(x, scalar, d, &[]);
                w.emit(shape(d, &dims), format!("broadcast({c}), dimensions={{}}"))
            };
            let g = self.names[t.grad.index()].clone();
            let m = k(self, &momentum);
            let mv = self.binary("multiply", &m, &v, d, &dims);
            let v2 = self.binary("add", &mv, &g, d, &dims);
            let l = k(self, &lr);
            let step = self.binary("multiply", &l, &v2, d, &dims);
            let w = self.names[t.param.index()].clone();
            let w2 = self.binary("subtract", &w, &step, d, &dims);
            types.push(shape(d, &dims));
            values.push(w2);
            velocities.push((shape(d, &dims), v2));
        }
        for (t, v) in velocities {
            types.push(t);
            values.push(v);
        }
        self.root(&types, &values);
        Ok(())
    }
}

/// The HLO instruction that computes composite `c` whole, if there is one: the
/// composites the XLA target claims.
pub fn composite_instruction(c: Composite) -> Option<&'static str> {
    match c {
        Composite::Sigmoid => Some("logistic"),
        #[allow(unreachable_patterns)] // the composites without an instruction of their own
        _ => None,
    }
}

impl GraphWriter for HloWriter {
    /// Symbolic dimensions (HLO's shapes are static) and arithmetic on bools that only
    /// rounding gives a meaning (HLO has no `add` of `pred`).
    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        let node = graph.node(v);
        if let Some(sym) = node.ty.shape.symbols().first() {
            return Some(format!("HLO shapes are static: give dimension {sym} a size (--shape)"));
        }
        // The runner's files (safetensors, .npy) and the interpreter agree on them, but
        // nothing here has run them through PJRT yet.
        if let ty @ (Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::U32 | Dtype::U64 | Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2) = node.ty.dtype {
            return Some(format!("no {ty} values in the XLA target yet (its integers are i32 and i64)"));
        }
        if node.ty.dtype.is_narrow_float() {
            return Some(format!("no {} values in the XLA target yet (its floats are f16, bf16, f32 and f64)", node.ty.dtype));
        }
        let bool_arith = match &node.op {
            Op::Binary(b) => !b.is_comparison() && !b.is_logical() && node.ty.dtype == Dtype::Bool,
            Op::MatMul | Op::Conv(_) | Op::Pool(_) | Op::Where | Op::Softmax { .. } | Op::Variance { .. } => node.ty.dtype == Dtype::Bool,
            _ => false,
        };
        bool_arith.then(|| format!("no {} of bool values in HLO", node.op.name()))
    }

    fn node(&mut self, graph: &Graph, v: ValueId) -> Result<()> {
        if let Some(why) = self.lacks(graph, v) {
            return Err(Error::internal(format!("xla: %{} reached the writer: {why}", v.0)));
        }
        let node = graph.node(v);
        let mut what = node.op.name().to_string();
        match (&node.origin, &node.name) {
            (Some(origin), _) => what = format!("{what} at {origin}"),
            (None, Some(name)) => what = format!("{what} {name}"),
            (None, None) => {}
        }
        self.meta = format!("metadata={{op_name=\"%{} = {}\" source_file=\"{}\"}}", v.0, hlo_string(&what), self.source);
        self.node = v.index();
        self.steps = 0;
        let first = self.body.len();
        let name = self.lower(graph, v)?;
        // The node's last instruction, when it holds the value, is called `vN`.
        let step = format!("v{}.{}", v.index(), self.steps.saturating_sub(1));
        let name = if self.body.len() > first && name == step {
            let short = format!("v{}", v.index());
            let last = self.body.last_mut().ok_or_else(|| Error::internal("xla: no instruction"))?;
            *last = format!("{short}{}", &last[step.len()..]);
            short
        } else {
            name
        };
        self.names.push(name);
        Ok(())
    }

    fn outputs(&mut self, graph: &Graph) -> Result<()> {
        let mut types = Vec::new();
        let mut values = Vec::new();
        for o in &graph.outputs {
            types.push(shape(graph.ty(o.value).dtype, &dims(graph, o.value)?));
            values.push(self.names[o.value.index()].clone());
        }
        self.root(&types, &values);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::graph::write_graph;
    use crate::ir::parse::parse;

    fn hlo(ir: &str) -> String {
        let g = parse(ir).unwrap();
        let mut w = HloWriter::new("tiny", "tiny.json", None);
        write_graph(&g, &mut w).unwrap();
        w.text()
    }

    #[test]
    fn literals_read_back_as_the_same_values() {
        assert_eq!(literal(Dtype::F32, &[2, 2], &[0.1, f64::NAN, f64::NEG_INFINITY, 1e-8]), "{{0.1, nan}, {-inf, 1e-8}}");
        assert_eq!(literal(Dtype::F64, &[], &[0.1]), "0.1");
        assert_eq!(literal(Dtype::I32, &[3], &[-3.0, f64::INFINITY, f64::NEG_INFINITY]), "{-3, 2147483647, -2147483648}");
        assert_eq!(literal(Dtype::I64, &[1], &[f64::NEG_INFINITY]), "{-9223372036854775808}");
        assert_eq!(literal(Dtype::Bool, &[2], &[1.0, 0.0]), "{true, false}");
        assert_eq!(literal(Dtype::F32, &[0, 2], &[]), "{}");
        assert_eq!(hlo_string("a \"b\"\\c\u{e9}"), "a _b__c_");
    }

    /// NumPy broadcasting: the growing size-1 dimensions are reshaped away, the rest
    /// mapped onto the trailing dimensions.
    #[test]
    fn broadcasts_map_the_kept_dimensions() {
        let mut w = HloWriter::new("b", "", None);
        assert_eq!(w.broadcast("x", Dtype::F32, &[3, 1], &[2, 3, 4]), "v0.1");
        assert_eq!(w.broadcast("y", Dtype::F32, &[2, 3, 4], &[2, 3, 4]), "y");
        let body: Vec<String> = w.body.iter().map(|l| l.replace(", ", ",")).collect();
        assert_eq!(body, ["v0.0 = f32[3] reshape(x),", "v0.1 = f32[2,3,4] broadcast(v0.0),dimensions={1},"]);
    }

    /// A tiny model's whole module: a product with a broadcast bias, softmax, arg-max.
    #[test]
    fn golden_module_of_a_tiny_model() {
        let text = hlo(
            "graph tiny {\n  %0 = input \"x\" : f32[2,3]\n  %1 = param \"w\" : f32[3,4]\n  %2 = param \"b\" : f32[4]\n  %3 = matmul %0, %1 : f32[2,4]\n  %4 = add %3, %2 : f32[2,4]\n  %5 = softmax %4 {axis = 1} : f32[2,4]\n  %6 = argmax %5 {axis = 1, keepdim = false} : i64[2]\n  output \"p\" = %5\n  output \"k\" = %6\n}\n",
        );
        // UPDATE_EXPECT=1 blesses a change (tests/xla_target.rs compiles the file with XLA).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/codegen/xla/testdata/tiny.hlo");
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        assert_eq!(text, std::fs::read_to_string(path).unwrap());
    }
}
