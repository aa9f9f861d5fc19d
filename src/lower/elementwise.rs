//! Elementwise ops (unary, binary, `where`, casts, iota): each a `Map` kernel whose
//! expression reads its operands broadcast to the result's shape.

use super::*;

impl Lowerer<'_> {
    pub(super) fn unary(&mut self, v: ValueId, shape: Vec<u64>, u: &UnaryOp) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let x = self.expr_at(arg(0), &shape)?;
        self.map(v, Expr::Unary(*u, Box::new(x), dtype))?;
        Ok(())
    }

    pub(super) fn binary(&mut self, v: ValueId, shape: Vec<u64>, b: &BinaryOp) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let l = self.expr_at(arg(0), &shape)?;
        let r = self.expr_at(arg(1), &shape)?;
        self.map(v, Expr::Binary(*b, Box::new(l), Box::new(r), dtype))?;
        Ok(())
    }

    pub(super) fn where_(&mut self, v: ValueId, shape: Vec<u64>) -> Result<()> {
        let node = self.graph.node(v);
        let dtype = node.ty.dtype;
        let arg = |i: usize| node.args[i];
        let c = self.expr_at(arg(0), &shape)?;
        let a = self.expr_at(arg(1), &shape)?;
        let b = self.expr_at(arg(2), &shape)?;
        self.map(v, Expr::Where(Box::new(c), Box::new(a), Box::new(b), dtype))?;
        Ok(())
    }

    pub(super) fn cast(&mut self, v: ValueId, shape: Vec<u64>, to: &Dtype) -> Result<()> {
        let node = self.graph.node(v);
        let arg = |i: usize| node.args[i];
        let x = self.expr_at(arg(0), &shape)?;
        self.map(v, Expr::Cast(Box::new(x), *to))?;
        Ok(())
    }

    pub(super) fn iota(&mut self, v: ValueId, axis: &usize, dtype: &Dtype) -> Result<()> {
        self.map(v, Expr::Cast(Box::new(Expr::Index(*axis)), *dtype))?;
        Ok(())
    }
}
