//! Ops that rearrange values: reshape, transpose, slice and broadcast become views of
//! their operand's buffer (no kernel; a reshape copies only what no view can express),
//! padding, concatenation and gather become `Map` kernels reading through guarded or
//! indexed loads.

use super::*;

impl Lowerer<'_> {
    /// The same value; only differentiation tells them apart.
    pub(super) fn stop_gradient(&mut self, v: ValueId) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        match self.scalars.get(&arg(0)) {
        Some(&c) => {
            self.scalars.insert(v, c);
        }
        None => {
            let view = self.view_of(arg(0))?;
            self.views.insert(v, view);
        }
        }
        Ok(())
    }

    pub(super) fn reshape(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        let in_shape = self.shape(arg(0))?;
        let (from, to) = (self.graph.ty(arg(0)).shape.clone(), self.graph.ty(v).shape.clone());
        if !keeps_layout(from.dims(), &in_shape, to.dims(), &shape) {
            // Each element read where the layout for the maxima holds it.
            let src = self.view_of(arg(0))?;
            let (from, to) = (self.extent_exprs(arg(0))?, self.extent_exprs(v)?);
            let expr = relayout(&src, self.p.buffers[src.buf.0].len, &from, &to);
            return self.map(v, expr);
        }
        let src = self.view_of(arg(0))?;
        let view = match reshape_view(&src, &shape) {
            Some(view) => view,
            None => {
                let src = self.contiguous(arg(0))?;
                View { buf: src.buf, shape: shape.clone(), strides: contiguous_strides(&shape), offset: src.offset }
            }
        };
        self.views.insert(v, view);
        Ok(())
    }

    pub(super) fn transpose(&mut self, v: ValueId, shape: Vec<u64>, perm: &[usize]) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        let src = self.view_of(arg(0))?;
        let strides = perm.iter().map(|&p| src.strides[p]).collect();
        self.views.insert(v, View { buf: src.buf, shape, strides, offset: src.offset });
        Ok(())
    }

    pub(super) fn broadcast(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        let src = self.view_of(arg(0))?;
        self.views.insert(v, broadcast_view(&src, &shape));
        Ok(())
    }

    pub(super) fn slice(&mut self, v: ValueId, shape: Vec<u64>, ranges: &[SliceRange]) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        let src = self.view_of(arg(0))?;
        let dims = self.dims(arg(0))?;
        let mut offset = src.offset;
        let mut strides = Vec::new();
        for (d, r) in ranges.iter().enumerate() {
            let (start, step, len) = r.resolve(src.shape[d]).map_err(Error::internal)?;
            if dims[d].is_some() && (start, step, len) != (0, 1, src.shape[d]) {
                return Err(self.unsupported_symbolic(v, "slicing along a symbolic dimension"));
            }
            // A huge stride (a pooling VJP's strided slice) must not wrap.
            let too_large = || Error::user(format!("{}: a slice's strides do not fit in 64 bits", self.origin(v)));
            offset = start.checked_mul(src.strides[d]).and_then(|o| offset.checked_add(o)).ok_or_else(too_large)?;
            strides.push(step.checked_mul(src.strides[d]).ok_or_else(too_large)?);
        }
        self.views.insert(v, View { buf: src.buf, shape, strides, offset });
        Ok(())
    }

    pub(super) fn pad(&mut self, v: ValueId, shape: Vec<u64>, pads: &[(u64, u64)], value: &f64) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let dims = self.dims(arg(0))?;
        if dims.iter().zip(pads).any(|(d, &p)| d.is_some() && p != (0, 0)) {
            return Err(self.unsupported_symbolic(v, "padding along a symbolic dimension"));
        }
        let src = self.view_of(arg(0))?;
        let e = padded(src, pads, &shape, *value, dtype);
        self.map(v, e)?;
        Ok(())
    }

    pub(super) fn concat(&mut self, v: ValueId, shape: Vec<u64>, axis: &usize) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        // Piecewise: out[.., i, ..] = i < n0 ? a[.., i, ..] : i < n0 + n1 ? b[.., i - n0, ..] : ...
        if self.dims(v)?[*axis].is_some() {
            return Err(self.unsupported_symbolic(v, "concatenating along a symbolic dimension"));
        }
        let mut pieces = Vec::new();
        let mut start = 0u64;
        for &a in &node.args {
            let mut view = self.view_of(a)?;
            let n = view.shape[*axis];
            view.offset -= start as i64 * view.strides[*axis];
            view.shape = shape.clone();
            pieces.push((start + n, Expr::Load { view, vars: (0..shape.len()).collect() }));
            start += n;
        }
        let (_, mut e) = pieces.pop().ok_or_else(|| Error::internal("concat of nothing"))?;
        while let Some((end, piece)) = pieces.pop() {
            let c = Expr::Binary(BinaryOp::Lt, Box::new(Expr::Index(*axis)), Box::new(Expr::Const(end as f64, Dtype::I64)), Dtype::Bool);
            e = Expr::Select(Box::new(c), Box::new(piece), Box::new(e), dtype);
        }
        self.map(v, e)?;
        Ok(())
    }

    pub(super) fn gather(&mut self, v: ValueId, axis: &usize) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        // out[pre..., idx..., post...] = data[pre..., indices[idx...], post...]
        let data = self.view_of(arg(0))?;
        let idx_rank = self.graph.ty(arg(1)).rank();
        let index_vars: Vec<usize> = (*axis..axis + idx_rank).collect();
        let idx_view = self.view_of(arg(1))?;
        let mut index = Expr::Load { view: idx_view, vars: index_vars };
        if let Some(n) = self.dims(arg(0))?[*axis].clone() {
            // The gather checks its indices against the axis's maximum: one wrapped and
            // checked against the run-time size here, and one out of range replaced by
            // the maximum, which fails that check.
            let (n, max) = (Expr::Extent(n), Expr::Const(data.shape[*axis] as f64, Dtype::I64));
            let zero = Expr::Const(0.0, Dtype::I64);
            let i = Expr::Cast(Box::new(index), Dtype::I64);
            let cmp = |op, a: &Expr, b: &Expr| Expr::Binary(op, Box::new(a.clone()), Box::new(b.clone()), Dtype::Bool);
            let wrapped = Expr::Where(Box::new(cmp(BinaryOp::Lt, &i, &zero)), Box::new(int_op(BinaryOp::Add, i.clone(), n.clone())), Box::new(i), Dtype::I64);
            let inside = Expr::Binary(BinaryOp::And, Box::new(cmp(BinaryOp::Ge, &wrapped, &zero)), Box::new(cmp(BinaryOp::Lt, &wrapped, &n)), Dtype::Bool);
            index = Expr::Where(Box::new(inside), Box::new(wrapped), Box::new(max), Dtype::I64);
        }
        let mut vars = Vec::new();
        for d in 0..data.shape.len() {
            vars.push(if d < *axis { d } else if d == *axis { usize::MAX } else { d - 1 + idx_rank });
        }
        self.map(v, Expr::Gather { view: data, vars, axis: *axis, index: Box::new(index) })?;
        Ok(())
    }
}

/// `out[i] = all(lo_d <= i_d < lo_d + n_d) ? src[i - lo] : value` over the padded
/// `shape`: `src` padded by `pads` (`(lo, hi)` per dimension).
pub fn padded(src: View, pads: &[(u64, u64)], shape: &[u64], value: f64, dtype: Dtype) -> Expr {
    let mut cond: Option<Expr> = None;
    let mut shifted = src.clone();
    for (d, &(lo, hi)) in pads.iter().enumerate() {
        shifted.offset -= lo as i64 * src.strides[d];
        if (lo, hi) == (0, 0) {
            continue;
        }
        let i = Expr::Index(d);
        let ge = Expr::Binary(BinaryOp::Ge, Box::new(i.clone()), Box::new(Expr::Const(lo as f64, Dtype::I64)), Dtype::Bool);
        let lt = Expr::Binary(BinaryOp::Lt, Box::new(i), Box::new(Expr::Const((lo + src.shape[d]) as f64, Dtype::I64)), Dtype::Bool);
        let both = Expr::Binary(BinaryOp::And, Box::new(ge), Box::new(lt), Dtype::Bool);
        cond = Some(match cond {
            None => both,
            Some(c) => Expr::Binary(BinaryOp::And, Box::new(c), Box::new(both), Dtype::Bool),
        });
    }
    shifted.shape = shape.to_vec();
    let load = Expr::Load { view: shifted, vars: (0..shape.len()).collect() };
    match cond {
        None => load,
        Some(c) => Expr::Select(Box::new(c), Box::new(load), Box::new(Expr::Const(value, dtype)), dtype),
    }
}

/// The view reshaped to `shape` without a copy, when its elements are laid out so
/// that is possible: each group of old dimensions that multiplies out to a group of new
/// ones must be contiguous within itself (NumPy's rule for reshape without a copy).
pub(super) fn reshape_view(src: &View, shape: &[u64]) -> Option<View> {
    if src.is_contiguous() || src.numel() == 0 {
        return Some(View { buf: src.buf, shape: shape.to_vec(), strides: contiguous_strides(shape), offset: src.offset });
    }
    // Size-1 dimensions do not constrain anything; they get stride 0.
    let old: Vec<(u64, i64)> = src.shape.iter().zip(&src.strides).filter(|(&n, _)| n != 1).map(|(&n, &s)| (n, s)).collect();
    let new: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let sizes: Vec<u64> = new.iter().map(|&d| shape[d]).collect();
    let mut strides = vec![0i64; shape.len()];
    for (o, n) in reshape_groups(&old.iter().map(|&(n, _)| n).collect::<Vec<_>>(), &sizes)? {
        // The old group must be one strided run...
        if (o.start..o.end - 1).any(|k| old[k].1 != old[k + 1].1 * old[k + 1].0 as i64) {
            return None;
        }
        // ...which the new group splits row-major.
        let mut stride = old[o.end - 1].1;
        for k in n.rev() {
            strides[new[k]] = stride;
            stride *= sizes[k] as i64;
        }
    }
    Some(View { buf: src.buf, shape: shape.to_vec(), strides, offset: src.offset })
}

/// How a reshape from sizes `old` to sizes `new` (both without their 1s) groups them:
/// consecutive ranges of each whose products are equal, the smallest such groups
/// (NumPy's rule for reshape without a copy); `None` when the sizes do not divide so.
fn reshape_groups(old: &[u64], new: &[u64]) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    let mut groups = Vec::new();
    let (mut oi, mut ni) = (0, 0);
    while oi < old.len() && ni < new.len() {
        let (mut oj, mut nj) = (oi + 1, ni + 1);
        let (mut op, mut np) = (old[oi], new[ni]);
        while op != np {
            if op < np {
                op = op.saturating_mul(*old.get(oj)?);
                oj += 1;
            } else {
                np = np.saturating_mul(*new.get(nj)?);
                nj += 1;
            }
        }
        groups.push((oi..oj, ni..nj));
        oi = oj;
        ni = nj;
    }
    (oi == old.len() && ni == new.len()).then_some(groups)
}

/// Whether a reshape from dimensions `from` (`from_max` at the symbols' maxima) to
/// `to` leaves every element where the layout for the maxima holds it, so that it is
/// a view. The dimensions larger than 1 fall into groups of equal products, as NumPy
/// reshapes without a copy; that holds when the products are equal for every value of
/// the symbols and only the first dimension of each group on either side is symbolic
/// (`[B, S, H] -> [B, S, h, H/h]` or `[S, 4] -> [4 S]`, not `[B, S] -> [B S]`).
pub(super) fn keeps_layout(from: &[Dim], from_max: &[u64], to: &[Dim], to_max: &[u64]) -> bool {
    let old: Vec<usize> = (0..from.len()).filter(|&d| from_max[d] != 1).collect();
    let new: Vec<usize> = (0..to.len()).filter(|&d| to_max[d] != 1).collect();
    let sizes = |at: &[usize], max: &[u64]| at.iter().map(|&d| max[d]).collect::<Vec<_>>();
    let group = |dims: &[Dim], at: &[usize]| -> Option<Dim> {
        if at[1..].iter().any(|&d| !matches!(dims[d], Dim::Known(_))) {
            return None;
        }
        Dim::product(at.iter().map(|&d| &dims[d])).ok()
    };
    let Some(groups) = reshape_groups(&sizes(&old, from_max), &sizes(&new, to_max)) else { return false };
    groups.into_iter().all(|(o, n)| matches!((group(from, &old[o]), group(to, &new[n])), (Some(a), Some(b)) if a == b))
}

/// A view broadcast to `shape` (NumPy alignment; broadcast dims get stride 0).
pub(super) fn broadcast_view(src: &View, shape: &[u64]) -> View {
    let shift = shape.len() - src.shape.len();
    let mut strides = vec![0i64; shape.len()];
    for (d, &n) in src.shape.iter().enumerate() {
        strides[d + shift] = if n == 1 { 0 } else { src.strides[d] };
    }
    View { buf: src.buf, shape: shape.to_vec(), strides, offset: src.offset }
}
