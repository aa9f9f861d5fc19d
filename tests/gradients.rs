//! The autodiff pass against central finite differences: every differentiable
//! primitive, at random shapes (broadcasting and size-1 dimensions included), in f64.
//! For y = op(params) and a random cotangent r, the gradient of sum(r * y) that the
//! backward graph computes must match (f(p + h) - f(p - h)) / 2h, with f evaluated by
//! the interpreter.

use std::collections::BTreeMap;

use mithrilc::interp;
use mithrilc::ir::*;
use mithrilc::passes::autodiff::{self, grad_name, output_grad_name, Wrt};
use mithrilc::passes::shape::infer;
use mithrilc::tensor::Tensor;

use crate::common;

/// Deterministic cases, from xorshift64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        common::xorshift64(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    /// A shape of rank `rank` with sizes 1..=max (size 1 one time in four).
    fn shape(&mut self, rank: usize, max: u64) -> Vec<u64> {
        (0..rank).map(|_| if self.below(4) == 0 { 1 } else { 1 + self.below(max) }).collect()
    }
    /// `shape` with some dimensions set to 1 and some leading ones dropped: a shape
    /// that broadcasts to it.
    fn broadcastable(&mut self, shape: &[u64]) -> Vec<u64> {
        let drop = self.below(shape.len() as u64 + 1) as usize;
        shape[drop..].iter().map(|&d| if self.below(3) == 0 { 1 } else { d }).collect()
    }
}

/// A one-op model under construction: its parameters' values, and data inputs'.
struct Case {
    g: Graph,
    values: BTreeMap<String, Tensor>,
    rng: Rng,
}

impl Case {
    fn new(seed: u64) -> Case {
        Case { g: Graph::new("case"), values: BTreeMap::new(), rng: Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1) }
    }

    /// A parameter with values in [lo, hi).
    fn param(&mut self, shape: &[u64], lo: f64, hi: f64) -> ValueId {
        let name = format!("p{}", self.g.params().count());
        let data = (0..shape.iter().product::<u64>()).map(|_| self.rng.uniform(lo, hi)).collect();
        self.values.insert(name.clone(), Tensor::new(Dtype::F64, shape.to_vec(), data));
        let v = self.g.push(Op::Param, vec![], TensorType::new(Dtype::F64, Shape::known(shape)));
        self.g.nodes[v.index()].name = Some(name);
        v
    }

    /// A data input (no gradient) of `dtype` with the given values.
    fn data(&mut self, dtype: Dtype, shape: &[u64], data: Vec<f64>) -> ValueId {
        let name = format!("d{}", self.g.inputs().count());
        self.values.insert(name.clone(), Tensor::new(dtype, shape.to_vec(), data));
        let v = self.g.push(Op::Input, vec![], TensorType::new(dtype, Shape::known(shape)));
        self.g.nodes[v.index()].name = Some(name);
        v
    }

    fn op(&mut self, op: Op, args: Vec<ValueId>) -> ValueId {
        let tys: Vec<&TensorType> = args.iter().map(|&a| self.g.ty(a)).collect();
        let ty = infer(&op, &tys, &TensorType::new(Dtype::F64, Shape::scalar()), &self.g.consts)
            .unwrap_or_else(|e| panic!("{} on {:?}: {e}", op.name(), tys.iter().map(|t| t.to_string()).collect::<Vec<_>>()));
        self.g.push(op, args, ty)
    }
}

/// Checks the gradients of `sum(r * y)` for the case's output `y`.
fn check(label: &str, mut case: Case, y: ValueId) {
    case.g.outputs.push(Output { name: "y".into(), value: y, loss: false });
    let shape = case.g.ty(y).shape.as_known().unwrap();
    let r: Vec<f64> = (0..shape.iter().product::<u64>()).map(|_| case.rng.uniform(-1.0, 1.0)).collect();
    let forward = case.g.clone();
    let mut backward = case.g;
    autodiff::run(&mut backward, &Wrt::AllParams).unwrap_or_else(|e| panic!("{label}: {e}"));
    verify::verify(&backward).unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut feeds = case.values.clone();
    feeds.insert(output_grad_name("y"), Tensor::new(Dtype::F64, shape.clone(), r.clone()));
    let outs: BTreeMap<String, Tensor> = interp::run(&backward, &feeds).unwrap_or_else(|e| panic!("{label}: {e}")).into_iter().collect();
    let f = |values: &BTreeMap<String, Tensor>| -> f64 {
        let y = &interp::run(&forward, values).unwrap()[0].1;
        y.data.iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let h = 1e-6;
    for p in forward.params() {
        let name = forward.node(p).name.clone().unwrap();
        let grad = &outs[&grad_name(&name)];
        for i in 0..case.values[&name].data.len() {
            let mut plus = case.values.clone();
            plus.get_mut(&name).unwrap().data[i] += h;
            let mut minus = case.values.clone();
            minus.get_mut(&name).unwrap().data[i] -= h;
            let fd = (f(&plus) - f(&minus)) / (2.0 * h);
            let got = grad.data[i];
            assert!(
                (got - fd).abs() <= 1e-6 + 1e-5 * fd.abs(),
                "{label}: d/d{name}[{i}]: autodiff {got}, finite differences {fd}\n{}",
                print::print(&backward)
            );
        }
    }
}

const CASES: u64 = 12;

#[test]
fn unary_ops() {
    use UnaryOp::*;
    // Every composite (through its own VJP or its decomposition's) on [-3, 3].
    let composites = mithrilc::ir::Composite::ALL.map(|c| (UnaryOp::Composite(c), -3.0, 3.0));
    let primitives = [
        (Neg, -2.0, 2.0),
        (Abs, -2.0, 2.0),
        (Exp, -2.0, 2.0),
        (Log, 0.2, 3.0),
        (Sqrt, 0.2, 3.0),
        (Sin, -3.0, 3.0),
        (Cos, -3.0, 3.0),
        (Tanh, -2.0, 2.0),
        (Relu, -2.0, 2.0),
        (Erf, -2.0, 2.0),
        (Atan, -3.0, 3.0),
    ];
    for (u, lo, hi) in primitives.into_iter().chain(composites) {
        for seed in 0..CASES {
            let mut c = Case::new(seed);
            let rank = c.rng.below(4) as usize;
            let shape = c.rng.shape(rank, 4);
            let x = c.param(&shape, lo, hi);
            let y = c.op(Op::Unary(u), vec![x]);
            check(&format!("{u:?} {shape:?}"), c, y);
        }
    }
}

#[test]
fn float_casts() {
    for seed in 0..CASES {
        let mut c = Case::new(seed);
        let shape = c.rng.shape(2, 4);
        let x = c.param(&shape, -2.0, 2.0);
        let y = c.op(Op::Cast { to: Dtype::F64 }, vec![x]);
        check(&format!("cast {shape:?}"), c, y);
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    use BinaryOp::*;
    // Ranges keep away from poles and branch cuts: positive denominators and bases.
    for (b, (llo, lhi), (rlo, rhi)) in [
        (Add, (-2.0, 2.0), (-2.0, 2.0)),
        (Sub, (-2.0, 2.0), (-2.0, 2.0)),
        (Mul, (-2.0, 2.0), (-2.0, 2.0)),
        (Div, (-2.0, 2.0), (0.5, 2.0)),
        (Pow, (0.5, 2.0), (-1.5, 1.5)),
        (Max, (-2.0, 2.0), (-2.0, 2.0)),
        (Min, (-2.0, 2.0), (-2.0, 2.0)),
    ] {
        for seed in 0..CASES {
            let mut c = Case::new(seed);
            let rank = c.rng.below(4) as usize;
            let full = c.rng.shape(rank, 3);
            let other = c.rng.broadcastable(&full);
            let (ls, rs) = if c.rng.coin() { (full.clone(), other) } else { (other, full.clone()) };
            let l = c.param(&ls, llo, lhi);
            let r = c.param(&rs, rlo, rhi);
            let y = c.op(Op::Binary(b), vec![l, r]);
            check(&format!("{b:?} {ls:?} {rs:?}"), c, y);
        }
    }
}

#[test]
fn where_selects_by_a_data_condition() {
    for seed in 0..CASES {
        let mut c = Case::new(seed);
        let shape = c.rng.shape(2, 4);
        let n = shape.iter().product::<u64>();
        let bits: Vec<f64> = (0..n).map(|_| c.rng.below(2) as f64).collect();
        let cond = c.data(Dtype::Bool, &shape, bits);
        let a = c.param(&shape, -1.0, 1.0);
        let b_shape = c.rng.broadcastable(&shape);
        let b = c.param(&b_shape, -1.0, 1.0);
        let y = c.op(Op::Where, vec![cond, a, b]);
        check(&format!("where {shape:?} {b_shape:?}"), c, y);
    }
}

#[test]
fn matmul_with_vectors_and_batches() {
    for seed in 0..CASES * 2 {
        let mut c = Case::new(seed);
        let (m, k, n) = (1 + c.rng.below(3), 1 + c.rng.below(4), 1 + c.rng.below(3));
        let rank = c.rng.below(3) as usize;
        let batch = c.rng.shape(rank, 2);
        let mut ls: Vec<u64> = batch.clone();
        ls.extend([m, k]);
        let mut rs = c.rng.broadcastable(&batch);
        rs.extend([k, n]);
        match c.rng.below(4) {
            0 => ls = vec![k], // vector @ matrix
            1 => rs = vec![k], // matrix @ vector
            _ => {}
        }
        let a = c.param(&ls, -1.0, 1.0);
        let b = c.param(&rs, -1.0, 1.0);
        let y = c.op(Op::MatMul, vec![a, b]);
        check(&format!("matmul {ls:?} {rs:?}"), c, y);
    }
}

#[test]
fn convolutions() {
    for seed in 0..CASES * 2 {
        let mut c = Case::new(seed);
        let spatial = 1 + c.rng.below(2) as usize;
        // One case in three grouped, with these channels per group (in, out): depthwise,
        // and groups that mix channels (where a wrong regrouping shows).
        let (groups, per_group) = if seed % 3 == 0 {
            (2 + c.rng.below(2), [(1, 1), (2, 2), (1, 2), (2, 3)][(seed / 3 % 4) as usize])
        } else {
            (1, (1 + c.rng.below(2), 1 + c.rng.below(3)))
        };
        let (n, ci, co) = (1 + c.rng.below(2), groups * per_group.0, groups * per_group.1);
        let kernel: Vec<u64> = (0..spatial).map(|_| 1 + c.rng.below(3)).collect();
        let stride: Vec<u64> = (0..spatial).map(|_| 1 + c.rng.below(2)).collect();
        let dilation: Vec<u64> = (0..spatial).map(|_| 1 + c.rng.below(2)).collect();
        let padding: Vec<(u64, u64)> = (0..spatial).map(|_| (c.rng.below(2), c.rng.below(2))).collect();
        let size: Vec<u64> = kernel.iter().zip(&dilation).map(|(k, d)| (k - 1) * d + 1 + c.rng.below(4)).collect();
        let mut xs = vec![n, ci];
        xs.extend(&size);
        let mut ws = vec![co, ci / groups];
        ws.extend(&kernel);
        let x = c.param(&xs, -1.0, 1.0);
        let w = c.param(&ws, -1.0, 1.0);
        let attrs = ConvAttrs { stride, padding, dilation, groups };
        let label = format!("conv {xs:?} {ws:?} {attrs:?}");
        let y = c.op(Op::Conv(attrs), vec![x, w]);
        check(&label, c, y);
    }
}

#[test]
fn pooling() {
    for kind in [PoolKind::Max, PoolKind::Avg] {
        for seed in 0..CASES * 2 {
            let mut c = Case::new(seed);
            let spatial = 1 + c.rng.below(2) as usize;
            let kernel: Vec<u64> = (0..spatial).map(|_| 1 + c.rng.below(3)).collect();
            // Half the cases tile the input (stride = kernel); the rest overlap or
            // skip, with padding of at most half a window (a window wholly in the
            // padding has no maximum) and dilation.
            let tiling = c.rng.coin();
            let stride: Vec<u64> = if tiling { kernel.clone() } else { kernel.iter().map(|_| 1 + c.rng.below(3)).collect() };
            let padding: Vec<(u64, u64)> = kernel.iter().map(|&k| if tiling { (0, 0) } else { (c.rng.below(k / 2 + 1), c.rng.below(k / 2 + 1)) }).collect();
            let dilation: Vec<u64> = kernel.iter().map(|_| if tiling { 1 } else { 1 + c.rng.below(2) }).collect();
            let mut xs = vec![1 + c.rng.below(2); 3 - spatial];
            xs.extend(kernel.iter().zip(&dilation).map(|(k, d)| (k - 1) * d + 1 + c.rng.below(5)));
            let x = c.param(&xs, -1.0, 1.0);
            let attrs = PoolAttrs { kind, kernel, stride, padding, dilation };
            let label = format!("pool {xs:?} {attrs:?}");
            let y = c.op(Op::Pool(attrs), vec![x]);
            check(&label, c, y);
        }
    }
}

/// Random distinct axes of a rank-`rank` shape (at least one).
fn some_axes(rng: &mut Rng, rank: usize) -> Vec<usize> {
    let axes: Vec<usize> = (0..rank).filter(|_| rng.coin()).collect();
    if axes.is_empty() {
        vec![rng.below(rank as u64) as usize]
    } else {
        axes
    }
}

#[test]
fn reductions_variance_and_softmax() {
    for seed in 0..CASES * 2 {
        let mut c = Case::new(seed);
        let rank = 1 + c.rng.below(3) as usize;
        let shape = c.rng.shape(rank, 4);
        let axes = some_axes(&mut c.rng, rank);
        let keepdim = c.rng.coin();
        let op = match seed % 7 {
            0 => Op::Reduce { kind: ReduceKind::Sum, axes, keepdim },
            1 => Op::Reduce { kind: ReduceKind::Mean, axes, keepdim },
            2 => Op::Reduce { kind: ReduceKind::Max, axes, keepdim },
            3 => Op::Reduce { kind: ReduceKind::Min, axes, keepdim },
            4 => Op::Reduce { kind: ReduceKind::Prod, axes, keepdim },
            5 => Op::Variance { axes, keepdim, correction: c.rng.below(2) as f64 },
            _ => Op::Softmax { axis: c.rng.below(rank as u64) as usize },
        };
        let x = c.param(&shape, 0.5, 2.0);
        let label = format!("{op:?} {shape:?}");
        let y = c.op(op, vec![x]);
        check(&label, c, y);
    }
}

#[test]
fn data_movement() {
    for seed in 0..CASES * 6 {
        let mut c = Case::new(seed);
        let rank = 1 + c.rng.below(3) as usize;
        let shape = c.rng.shape(rank, 4);
        let x = c.param(&shape, -1.0, 1.0);
        let (label, y) = match seed % 7 {
            0 => {
                let n: u64 = shape.iter().product();
                let to = Shape::known(&[n]);
                (format!("reshape {shape:?}"), c.op(Op::Reshape { shape: to }, vec![x]))
            }
            1 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, c.rng.below(i as u64 + 1) as usize);
                }
                (format!("transpose {shape:?} {perm:?}"), c.op(Op::Transpose { perm }, vec![x]))
            }
            2 => {
                // Broadcast a size-1-ridden shape up to a larger one.
                let small = c.rng.broadcastable(&shape);
                let x = c.param(&small, -1.0, 1.0);
                let to = Shape::known(&shape);
                (format!("broadcast {small:?} -> {shape:?}"), c.op(Op::BroadcastTo { shape: to }, vec![x]))
            }
            3 => {
                let axis = c.rng.below(rank as u64) as usize;
                let mut other = shape.clone();
                other[axis] = 1 + c.rng.below(3);
                let z = c.param(&other, -1.0, 1.0);
                (format!("concat {shape:?} {other:?} axis {axis}"), c.op(Op::Concat { axis }, vec![x, z]))
            }
            4 => {
                let pads: Vec<(u64, u64)> = (0..rank).map(|_| (c.rng.below(2), c.rng.below(3))).collect();
                (format!("pad {shape:?} {pads:?}"), c.op(Op::Pad { pads, value: 0.5 }, vec![x]))
            }
            5 => {
                // Steps from -3 to 3, open ends included; some axes take nothing.
                let ranges: Vec<SliceRange> = shape
                    .iter()
                    .map(|&d| {
                        let step = [1, 1, 2, 3, -1, -2][c.rng.below(6) as usize];
                        let mut bound = || if c.rng.below(4) == 0 { None } else { Some(c.rng.below(d + 1) as i64 - c.rng.below(2) as i64 * d as i64) };
                        SliceRange { start: bound(), stop: bound(), step }
                    })
                    .collect();
                (format!("slice {shape:?} {ranges:?}"), c.op(Op::Slice { ranges }, vec![x]))
            }
            _ => {
                // Gather along any axis, with 1-d or 2-d indices, repeats included.
                let axis = c.rng.below(rank as u64) as usize;
                let irank = 1 + c.rng.below(2) as usize;
                let ishape = c.rng.shape(irank, 3);
                let idx: Vec<f64> = (0..ishape.iter().product::<u64>()).map(|_| c.rng.below(shape[axis]) as f64).collect();
                let i = c.data(Dtype::I32, &ishape, idx);
                (format!("gather {shape:?} axis {axis} indices {ishape:?}"), c.op(Op::Gather { axis }, vec![x, i]))
            }
        };
        check(&label, c, y);
    }
}

/// Every op the docs call differentiable is exercised above: a new VJP needs a case here
/// (every composite has one in `unary_ops`).
#[test]
fn every_differentiable_op_has_a_case() {
    let covered = [
        "neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "relu", "erf", "atan", "add", "sub",
        "mul", "div", "pow", "max", "min", "where", "matmul", "conv", "max_pool", "avg_pool", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
        "reduce_prod", "variance", "softmax", "reshape", "transpose", "broadcast_to", "concat", "pad", "slice", "gather",
        "cast",
    ];
    for op in Op::catalogue() {
        let composite = matches!(op, Op::Unary(UnaryOp::Composite(_)));
        if autodiff::support(&op).starts_with("yes") {
            assert!(composite || covered.contains(&op.name()), "{} has a VJP but no finite-difference case", op.name());
        }
    }
}
