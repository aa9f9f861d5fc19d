//! Matrix products: `MatMul` (NumPy's matmul, as the IR's) and `Gemm`.

use super::Cx;
use crate::frontend::onnx::node::{Node, Out};
use crate::ir::BinaryOp;

pub fn matmul(cx: &mut Cx, node: &Node) -> Out {
    Ok(vec![cx.b.matmul(node.input(0)?, node.input(1)?)?])
}

/// `alpha A' B' + beta C`, `A'` and `B'` transposed as `transA` and `transB` say. The
/// common case (`B` transposed, no scaling) is the shared linear layer, which the
/// passes know.
pub fn gemm(cx: &mut Cx, node: &Node) -> Out {
    let (a, b_in, c) = (node.input(0)?, node.input(1)?, node.opt(2));
    let (alpha, beta) = (node.float("alpha", 1.0)?, node.float("beta", 1.0)?);
    let (ta, tb) = (node.int("transA", 0)? != 0, node.int("transB", 0)? != 0);
    let a = if ta { cx.b.transpose(a, vec![1, 0])? } else { a };
    if tb && alpha == 1.0 && beta == 1.0 {
        return Ok(vec![cx.b.linear(a, b_in, c)?]);
    }
    let bm = if tb { cx.b.transpose(b_in, vec![1, 0])? } else { b_in };
    let mut y = cx.b.matmul(a, bm)?;
    let dtype = cx.b.dtype(y);
    if alpha != 1.0 {
        let s = cx.b.scalar(dtype, alpha);
        y = cx.b.binary(BinaryOp::Mul, y, s)?;
    }
    if let Some(c) = c {
        let c = if beta != 1.0 {
            let s = cx.b.scalar(dtype, beta);
            cx.b.binary(BinaryOp::Mul, c, s)?
        } else {
            c
        };
        y = cx.b.binary(BinaryOp::Add, y, c)?;
    }
    Ok(vec![y])
}
