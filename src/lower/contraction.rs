//! Matrix products and convolutions: library kernels (`Kernel::Gemm`,
//! `Kernel::Conv`) where the target's library computes them, else loops (a `Reduce`
//! over the contracted dimension; convolution in `loops.rs`). A convolution's bias is
//! an elementwise add that `fuse` makes its epilogue.

use super::views::broadcast_view;
use super::*;

impl Lowerer<'_> {
    /// Convolution `v` as a library call; returns the output's view.
    fn conv_call(&mut self, v: ValueId, attrs: &ConvAttrs, shape: &[u64]) -> Result<View> {
        let arg = |i: usize| self.graph.node(v).args[i];
        let dims = self.dims(v)?;
        let x = self.contiguous(arg(0))?;
        let w = self.contiguous(arg(1))?;
        let buf = self.arena(v, self.graph.ty(v).dtype, shape);
        let out = View::contiguous(buf, shape);
        self.step(Kernel::Conv { x, w, out: out.clone(), attrs: attrs.clone(), epilogue: None, scratch: None }, vec![self.origin(v)], dims);
        Ok(out)
    }

    pub(super) fn matmul(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let mut a = self.view_of(arg(0))?;
        let mut b = self.view_of(arg(1))?;
        // NumPy's rank-1 promotion: [k] is [1, k] on the left, [k, 1] on the right.
        if a.shape.len() == 1 {
            a = View { buf: a.buf, shape: vec![1, a.shape[0]], strides: vec![0, a.strides[0]], offset: a.offset };
        }
        if b.shape.len() == 1 {
            b = View { buf: b.buf, shape: vec![b.shape[0], 1], strides: vec![b.strides[0], 0], offset: b.offset };
        }
        let (m, n, full_k) = (a.shape[a.shape.len() - 2], b.shape[b.shape.len() - 1], a.shape[a.shape.len() - 1]);
        let batch: Vec<u64> = shape[..shape.len() - (self.graph.ty(arg(0)).rank().min(2) + self.graph.ty(arg(1)).rank().min(2) - 2)]
            .to_vec();
        let mut full = batch.clone();
        full.extend([m, n]);
        let a = batch_view(&a, &batch);
        let b = batch_view(&b, &batch);
        // The domain [batch..., m, n, k], with rank-1 operands promoted as above.
        let (mut da, mut db) = (self.dims(arg(0))?, self.dims(arg(1))?);
        if da.len() == 1 {
            da.insert(0, None);
        }
        if db.len() == 1 {
            db.push(None);
        }
        let mut dims = self.dims(v)?[..batch.len()].to_vec();
        dims.extend([da[da.len() - 2].clone(), db[db.len() - 1].clone(), da[da.len() - 1].clone()]);
        let buf = self.arena(v, dtype, &shape);
        let c = View::contiguous(buf, &full);
        let by_library = self.library.gemm.contains(&dtype) && [arg(0), arg(1)].iter().all(|&x| self.graph.ty(x).dtype == dtype);
        let kernel = if by_library {
            Kernel::Gemm { a, b, c, epilogue: None, scratch: None }
        } else {
            // c[batch..., i, j] = Σ_l a[batch..., i, l] * b[batch..., l, j], as loops
            // over [batch..., i, j, l] (the domain a `Gemm` has).
            let nb = batch.len();
            let at = |view: View, rows: usize, cols: usize| Expr::Load { view, vars: (0..nb).chain([rows, cols]).collect() };
            let (pd, x, y) = (super::product_dtype(dtype), at(a, nb, nb + 2), at(b, nb + 2, nb + 1));
            let (x, y) = if pd == dtype { (x, y) } else { (Expr::Cast(Box::new(x), pd), Expr::Cast(Box::new(y), pd)) };
            let expr = Expr::Binary(BinaryOp::Mul, Box::new(x), Box::new(y), pd);
            Kernel::Reduce { out: c, reduced: vec![full_k], kind: ReduceKind::Sum, expr, scale: None }
        };
        self.step(kernel, vec![self.origin(v)], dims);
        self.views.insert(v, View::contiguous(buf, &shape));
        Ok(())
    }

    pub(super) fn conv(&mut self, v: ValueId, shape: Vec<u64>, attrs: &ConvAttrs) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        if self.dims(arg(0))?[1..].iter().any(Option::is_some) {
            return Err(self.unsupported_symbolic(arg(0), "a convolution with symbolic channels or spatial size"));
        }
        let out = if self.library.window(self.library.conv, self.graph.ty(arg(0)).dtype, dtype, attrs.stride.len()) {
            self.conv_call(v, attrs, &shape)?
        } else {
            self.conv_loops(v, attrs, &shape)?
        };
        self.views.insert(v, out.clone());
        if let Some(&bias) = node.args.get(2) {
            // out + bias (broadcast), which `fuse` makes the convolution's epilogue.
            let b = self.expr_at(bias, &shape)?;
            let load = Expr::Load { view: out, vars: (0..shape.len()).collect() };
            self.map(v, Expr::Binary(BinaryOp::Add, Box::new(load), Box::new(b), dtype))?;
            let origin = format!("bias of {}", self.origin(v));
            if let Some(step) = self.p.steps.last_mut() {
                step.origins = vec![origin];
            }
        }
        Ok(())
    }
}

/// A matmul operand with its batch dimensions broadcast to `batch`.
pub(super) fn batch_view(x: &View, batch: &[u64]) -> View {
    let mat = &x.shape[x.shape.len() - 2..];
    let mut shape = batch.to_vec();
    shape.extend_from_slice(mat);
    broadcast_view(x, &shape)
}
