//! Reductions: sum, mean, max, min, product and variance (two passes, as the
//! interpreter) as `Reduce` kernels, argmax and argmin as `ArgReduce` kernels.

use super::*;

impl Lowerer<'_> {
    /// keepdim only changes the value's shape, not the memory the kernel writes.
    pub(super) fn reduce(&mut self, v: ValueId, shape: Vec<u64>, kind: &ReduceKind, axes: &[usize]) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let in_shape = self.shape(arg(0))?;
        let dims = self.reduce_dims(arg(0), axes, false)?;
        let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
        // A mean over a symbolic dimension divides the sum by its run-time count.
        let counted = self.graph.ty(arg(0)).shape.dims().iter().enumerate().filter(|(d, _)| axes.contains(d)).map(|(_, d)| d).collect::<Vec<_>>();
        let count = Dim::product(counted).map_err(|e| Error::user(format!("{}: {e}", self.origin(v))))?;
        let mean = *kind == ReduceKind::Mean;
        let scale = (mean && count.known().is_some()).then(|| 1.0 / reduced.iter().product::<u64>() as f64);
        let kind = if mean { ReduceKind::Sum } else { *kind };
        let buf = self.arena(v, dtype, &shape);
        let kept: Vec<u64> = kept_shape(&in_shape, axes);
        let out = View::contiguous(buf, &kept);
        self.step(Kernel::Reduce { out, reduced, kind, expr, scale }, vec![self.origin(v)], dims);
        self.views.insert(v, View::contiguous(buf, &shape));
        if mean && count.known().is_none() {
            let sum = Expr::Load { view: View::contiguous(buf, &shape), vars: (0..shape.len()).collect() };
            let n = Expr::Cast(Box::new(Expr::Extent(count)), dtype);
            self.map(v, Expr::Binary(BinaryOp::Div, Box::new(sum), Box::new(n), dtype))?;
        }
        Ok(())
    }

    pub(super) fn arg_reduce(&mut self, v: ValueId, shape: Vec<u64>, kind: &ArgKind, axis: &Option<usize>) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let in_shape = self.shape(arg(0))?;
        let axes: Vec<usize> = match axis {
            Some(a) => vec![*a],
            None => (0..in_shape.len()).collect(),
        };
        let mut dims = self.reduce_dims(arg(0), &axes, false)?;
        if axis.is_none() {
            if dims.iter().any(Option::is_some) {
                return Err(self.unsupported_symbolic(arg(0), "the flattened argmax/argmin of a symbolic shape"));
            }
            dims = vec![None];
        }
        // Over the flattened tensor, the index is the row-major position.
        let (expr, reduced) = if axis.is_none() {
            let flat = self.contiguous(arg(0))?;
            let n: u64 = in_shape.iter().product();
            let view = View { buf: flat.buf, shape: vec![n], strides: vec![1], offset: flat.offset };
            (Expr::Load { view, vars: vec![0] }, vec![n])
        } else {
            self.reduction_input(arg(0), &in_shape, &axes)?
        };
        let buf = self.arena(v, dtype, &shape);
        let kept = if axis.is_none() { vec![] } else { kept_shape(&in_shape, &axes) };
        let out = View::contiguous(buf, &kept);
        self.step(Kernel::ArgReduce { out, reduced: reduced[0], kind: *kind, expr }, vec![self.origin(v)], dims);
        self.views.insert(v, View::contiguous(buf, &shape));
        Ok(())
    }

    pub(super) fn variance(&mut self, v: ValueId, shape: Vec<u64>, axes: &[usize], correction: &f64) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        // Two passes, as the interpreter: mean, then Σ(x - mean)² / (n - correction).
        let in_shape = self.shape(arg(0))?;
        let dims = self.reduce_dims(arg(0), axes, true)?;
        let (expr, reduced) = self.reduction_input(arg(0), &in_shape, axes)?;
        let n: u64 = reduced.iter().product();
        let kept = kept_shape(&in_shape, axes);
        let mean_buf = self.arena(v, dtype, &kept);
        let mean = View::contiguous(mean_buf, &kept);
        self.step(
            Kernel::Reduce { out: mean.clone(), reduced: reduced.clone(), kind: ReduceKind::Sum, expr: expr.clone(), scale: Some(1.0 / n as f64) },
            vec![format!("mean for {}", self.origin(v))],
            dims.clone(),
        );
        let mean_vars: Vec<usize> = (0..kept.len()).collect();
        let centered = Expr::Binary(BinaryOp::Sub, Box::new(expr), Box::new(Expr::Load { view: mean, vars: mean_vars }), dtype);
        let sq = Expr::Binary(BinaryOp::Mul, Box::new(centered.clone()), Box::new(centered), dtype);
        let buf = self.arena(v, dtype, &shape);
        let out = View::contiguous(buf, &kept);
        let denom = (n as f64 - correction).max(0.0);
        self.step(Kernel::Reduce { out, reduced, kind: ReduceKind::Sum, expr: sq, scale: Some(1.0 / denom) }, vec![self.origin(v)], dims);
        self.views.insert(v, View::contiguous(buf, &shape));
        Ok(())
    }

    /// The domain symbols of a reduction of `x` over `axes`: kept dimensions, then
    /// reduced ones. A mean's count must be static.
    fn reduce_dims(&mut self, x: ValueId, axes: &[usize], mean: bool) -> Result<Vec<Option<Dim>>> {
        let dims = self.dims(x)?;
        let reduced: Vec<Option<Dim>> = axes.iter().map(|&a| dims[a].clone()).collect();
        if mean && reduced.iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(x, "a mean or variance over a symbolic dimension"));
        }
        let mut out: Vec<Option<Dim>> = (0..dims.len()).filter(|d| !axes.contains(d)).map(|d| dims[d].clone()).collect();
        out.extend(reduced);
        Ok(out)
    }

    /// The input of a reduction as an expression over (kept dims..., reduced dims...).
    fn reduction_input(&mut self, x: ValueId, in_shape: &[u64], axes: &[usize]) -> Result<(Expr, Vec<u64>)> {
        let view = self.view_of(x)?;
        let kept = in_shape.len() - axes.len();
        let mut vars = Vec::new();
        let (mut k, mut r) = (0usize, kept);
        for d in 0..in_shape.len() {
            if axes.contains(&d) {
                vars.push(r);
                r += 1;
            } else {
                vars.push(k);
                k += 1;
            }
        }
        let reduced = axes.iter().map(|&a| in_shape[a]).collect();
        Ok((Expr::Load { view, vars }, reduced))
    }
}

pub(super) fn kept_shape(shape: &[u64], axes: &[usize]) -> Vec<u64> {
    shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
}
