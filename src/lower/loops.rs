//! Pooling and softmax, as library kernels (`Kernel::Pool`, `Kernel::Softmax`) where
//! the target's library computes them, else (and convolution where the library has
//! none: `contraction.rs`) as loop kernels (`Reduce` and `Map`). These loops compute what the interpreter computes,
//! in the same order of operations within each output element (sums in double), so an
//! f64 model gives the interpreter's numbers to rounding.
//!
//! A window (convolution, pooling) reads its input through one view with two
//! dimensions per spatial axis, the output position's (stride `stride * s`) and the
//! tap's (`dilation * s`); a tap in the padding is guarded by a condition on the loop
//! indices (`Expr::Select`), as padding is, and reads as `pad_value`.

use super::reduce::kept_shape;
use super::*;

/// The geometry of a sliding window over the trailing `stride.len()` dimensions.
struct Window<'a> {
    stride: &'a [u64],
    padding: &'a [(u64, u64)],
    dilation: &'a [u64],
}

impl Window<'_> {
    /// `x` (of rank `lead + d`) as a view over `[lead..., (out_s, tap_s) for each s]`,
    /// indexed by the loop variables `lead_vars`, then `out_var + s` and `tap_var + s`,
    /// with taps in the padding reading `pad_value`. `out` and `taps` are the output's
    /// and the kernel's spatial sizes.
    #[allow(clippy::too_many_arguments)]
    fn load(&self, x: &View, lead_vars: &[usize], out: &[u64], taps: &[u64], out_var: usize, tap_var: usize, pad_value: f64, dtype: Dtype) -> Expr {
        let lead = lead_vars.len();
        let mut view = View { buf: x.buf, shape: x.shape[..lead].to_vec(), strides: x.strides[..lead].to_vec(), offset: x.offset };
        let mut vars = lead_vars.to_vec();
        let mut cond: Option<Expr> = None;
        for s in 0..self.stride.len() {
            let (size, step) = (x.shape[lead + s], x.strides[lead + s]);
            let (lo, _) = self.padding[s];
            view.shape.extend([out[s], taps[s]]);
            view.strides.extend([self.stride[s] as i64 * step, self.dilation[s] as i64 * step]);
            view.offset -= lo as i64 * step;
            vars.extend([out_var + s, tap_var + s]);
            // The position in the padded input, out * stride + tap * dilation; the
            // guard is left out on a side no tap reaches.
            let last = (out[s].max(1) - 1) * self.stride[s] + (taps[s].max(1) - 1) * self.dilation[s];
            let i64c = |n: u64| Box::new(Expr::Const(n as f64, Dtype::I64));
            let scaled = |v: usize, by: u64| Box::new(Expr::Binary(BinaryOp::Mul, Box::new(Expr::Index(v)), i64c(by), Dtype::I64));
            let at = || Box::new(Expr::Binary(BinaryOp::Add, scaled(out_var + s, self.stride[s]), scaled(tap_var + s, self.dilation[s]), Dtype::I64));
            let mut checks = Vec::new();
            if lo > 0 {
                checks.push(Expr::Binary(BinaryOp::Ge, at(), i64c(lo), Dtype::Bool));
            }
            if last >= lo + size {
                checks.push(Expr::Binary(BinaryOp::Lt, at(), i64c(lo + size), Dtype::Bool));
            }
            for c in checks {
                cond = Some(match cond {
                    None => c,
                    Some(prev) => Expr::Binary(BinaryOp::And, Box::new(prev), Box::new(c), Dtype::Bool),
                });
            }
        }
        let load = Expr::Cast(Box::new(Expr::Load { view, vars }), dtype);
        match cond {
            None => load,
            Some(c) => Expr::Select(Box::new(c), Box::new(load), Box::new(Expr::Const(pad_value, dtype)), dtype),
        }
    }
}

impl Lowerer<'_> {
    pub(super) fn pool(&mut self, v: ValueId, shape: Vec<u64>, attrs: &PoolAttrs) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let dims = self.dims(v)?;
        if dims[dims.len() - attrs.kernel.len()..].iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(v, "pooling over a symbolic spatial size"));
        }
        // The runtime flattens the leading dimensions, which must then be row-major.
        let library = self.library.window(self.library.pool, self.graph.ty(arg(0)).dtype, dtype, attrs.kernel.len());
        let out = if library && !padded_inside(&dims, &shape) {
            let x = self.contiguous(arg(0))?;
            let out = View::contiguous(self.arena(v, dtype, &shape), &shape);
            self.step(Kernel::Pool { x, out: out.clone(), attrs: attrs.clone() }, vec![self.origin(v)], dims);
            out
        } else {
            self.pool_loops(v, attrs, &shape)?
        };
        self.views.insert(v, out);
        Ok(())
    }

    pub(super) fn softmax(&mut self, v: ValueId, shape: Vec<u64>, axis: &usize) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        // The runtime flattens the dimensions before the axis, and takes static rows.
        let dims = self.dims(v)?;
        let rows_static = dims[*axis..].iter().all(Option::is_none) && !padded_inside(&dims, &shape);
        if self.graph.ty(arg(0)).dtype == dtype && self.library.softmax.contains(&dtype) && rows_static {
            let x = self.contiguous(arg(0))?;
            let out = View::contiguous(self.arena(v, dtype, &shape), &shape);
            self.step(Kernel::Softmax { x, out: out.clone(), axis: *axis }, vec![self.origin(v)], dims);
            self.views.insert(v, out);
        } else {
            let out = self.softmax_loops(v, *axis, &shape)?;
            self.views.insert(v, out);
        }
        Ok(())
    }

    /// Convolution `v` as one `Reduce` over (input channel, taps...) per output element,
    /// with the output's channels split as `[groups, channels per group]` so each
    /// group's input channels are an affine index; returns the output's view.
    pub(super) fn conv_loops(&mut self, v: ValueId, attrs: &ConvAttrs, shape: &[u64]) -> Result<View> {
        let (x_value, w_value) = (self.graph.node(v).args[0], self.graph.node(v).args[1]);
        let (x, w) = (self.view_of(x_value)?, self.view_of(w_value)?);
        let dtype = super::product_dtype(self.graph.ty(v).dtype);
        let d = shape.len() - 2;
        let (groups, cg) = (attrs.groups, w.shape[1]);
        let og = shape[1] / groups;
        // Loop variables: n, g, o, out_s... (the output), then c, tap_s... (reduced).
        let (out_var, c_var) = (3, 3 + d);
        let tap_var = c_var + 1;
        let x_lead = View {
            buf: x.buf,
            shape: [x.shape[0], groups, cg].into_iter().chain(x.shape[2..].iter().copied()).collect(),
            strides: [x.strides[0], cg as i64 * x.strides[1], x.strides[1]].into_iter().chain(x.strides[2..].iter().copied()).collect(),
            offset: x.offset,
        };
        let window = Window { stride: &attrs.stride, padding: &attrs.padding, dilation: &attrs.dilation };
        let xs = window.load(&x_lead, &[0, 1, c_var], &shape[2..], &w.shape[2..], out_var, tap_var, 0.0, dtype);
        let w_view = View {
            buf: w.buf,
            shape: [groups, og].into_iter().chain(w.shape[1..].iter().copied()).collect(),
            strides: [og as i64 * w.strides[0]].into_iter().chain(w.strides.iter().copied()).collect(),
            offset: w.offset,
        };
        let w_vars = [1, 2, c_var].into_iter().chain(tap_var..tap_var + d).collect();
        let ws = Expr::Cast(Box::new(Expr::Load { view: w_view, vars: w_vars }), dtype);
        let expr = Expr::Binary(BinaryOp::Mul, Box::new(xs), Box::new(ws), dtype);
        let kept: Vec<u64> = [shape[0], groups, og].into_iter().chain(shape[2..].iter().copied()).collect();
        let mut dims = self.dims(v)?;
        dims.splice(1..2, [None, None]);
        dims.extend(vec![None; d + 1]);
        let reduced = w.shape[1..].to_vec();
        let out = self.reduce_into(v, &kept, reduced, (ReduceKind::Sum, expr, None), dims);
        Ok(View::contiguous(out.buf, shape))
    }

    /// Pooling `v` as one `Reduce` over the taps per output element (padding reads as
    /// -infinity for max, never winning, and as zeros for the average, which divides
    /// by the whole kernel size as the interpreter does).
    pub(super) fn pool_loops(&mut self, v: ValueId, attrs: &PoolAttrs, shape: &[u64]) -> Result<View> {
        let x = self.view_of(self.graph.node(v).args[0])?;
        let dtype = self.graph.ty(v).dtype;
        let (d, lead) = (attrs.kernel.len(), shape.len() - attrs.kernel.len());
        let window = Window { stride: &attrs.stride, padding: &attrs.padding, dilation: &attrs.dilation };
        let lead_vars: Vec<usize> = (0..lead).collect();
        let (kind, pad_value, scale) = match attrs.kind {
            PoolKind::Max => (ReduceKind::Max, f64::NEG_INFINITY, None),
            PoolKind::Avg => (ReduceKind::Sum, 0.0, Some(1.0 / attrs.kernel.iter().product::<u64>() as f64)),
        };
        let expr = window.load(&x, &lead_vars, &shape[lead..], &attrs.kernel, lead, lead + d, pad_value, dtype);
        let mut dims = self.dims(v)?;
        dims.extend(vec![None; d]);
        Ok(self.reduce_into(v, shape, attrs.kernel.clone(), (kind, expr, scale), dims))
    }

    /// Softmax `v` along `axis` as the interpreter computes it: the maximum, each
    /// `exp(x - max)`, their sum, then each exponential over the sum.
    pub(super) fn softmax_loops(&mut self, v: ValueId, axis: usize, shape: &[u64]) -> Result<View> {
        let x = self.view_of(self.graph.node(v).args[0])?;
        let dtype = self.graph.ty(v).dtype;
        let rank = shape.len();
        // The reductions' loop variables: the kept dimensions, then the axis.
        let along: Vec<usize> = (0..rank).map(|d| if d == axis { rank - 1 } else { d - usize::from(d > axis) }).collect();
        let x_at = |vars: Vec<usize>| Expr::Cast(Box::new(Expr::Load { view: x.clone(), vars }), dtype);
        let (kept, reduced) = (kept_shape(shape, &[axis]), vec![shape[axis]]);
        let mut dims = self.dims(v)?;
        let axis_dim = dims.remove(axis);
        dims.push(axis_dim);
        // A value over the kept dimensions, read at every element of `shape`.
        let across = |view: View| Expr::Load { view, vars: (0..rank).filter(|&d| d != axis).collect() };
        let max = self.reduce_into(v, &kept, reduced.clone(), (ReduceKind::Max, x_at(along.clone()), None), dims.clone());
        let centered = Expr::Binary(BinaryOp::Sub, Box::new(x_at((0..rank).collect())), Box::new(across(max)), dtype);
        self.map(v, Expr::Unary(UnaryOp::Exp, Box::new(centered), dtype))?;
        let exp = self.view_of(v)?;
        let sum = self.reduce_into(v, &kept, reduced, (ReduceKind::Sum, Expr::Load { view: exp.clone(), vars: along }, None), dims);
        let load = Expr::Load { view: exp, vars: (0..rank).collect() };
        self.map(v, Expr::Binary(BinaryOp::Div, Box::new(load), Box::new(across(sum)), dtype))?;
        self.view_of(v)
    }

    /// Adds a `Reduce` kernel for value `v` (its kind, expression and scale) into a new
    /// arena buffer of the `kept` shape; returns the buffer's view.
    fn reduce_into(&mut self, v: ValueId, kept: &[u64], reduced: Vec<u64>, (kind, expr, scale): (ReduceKind, Expr, Option<f64>), dims: Vec<Option<Dim>>) -> View {
        let out = View::contiguous(self.arena(v, self.graph.ty(v).dtype, kept), kept);
        self.step(Kernel::Reduce { out: out.clone(), reduced, kind, expr, scale }, vec![self.origin(v)], dims);
        out
    }
}
