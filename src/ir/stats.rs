//! Summary numbers of a graph for `mithrilc inspect`: parameter count and FLOPs.

use super::*;

/// Total elements of all parameters (`None` if a parameter shape is symbolic).
pub fn param_count(graph: &Graph) -> Option<u64> {
    graph.params().try_fold(0u64, |acc, p| acc.checked_add(graph.ty(p).shape.numel()?))
}

/// FLOPs of one forward pass, counting 2 per multiply-add of matmuls and
/// convolutions (the convention of the benchmark manifests), with every symbolic
/// dimension replaced by `sym(name)`.
pub fn flops(graph: &Graph, sym: &dyn Fn(&str) -> u64) -> Option<u64> {
    // (an overflowing size makes the count overflow, so it is unknown)
    let size = |d: &Dim| d.eval(&|s| Some(sym(s))).unwrap_or(u64::MAX);
    let numel = |s: &Shape| s.0.iter().try_fold(1u64, |a, d| a.checked_mul(size(d)));
    let mut total = 0u64;
    for v in graph.ids() {
        let node = graph.node(v);
        let macs = match &node.op {
            Op::MatMul => {
                let l = &graph.ty(node.args[0]).shape;
                let k = l.0.last().map_or(1, size);
                numel(&node.ty.shape)?.checked_mul(k)?
            }
            Op::Conv(a) => {
                let w = &graph.ty(node.args[1]).shape;
                let per_out = w.0[1..].iter().try_fold(1u64, |acc, d| acc.checked_mul(size(d)))?;
                let _ = a;
                numel(&node.ty.shape)?.checked_mul(per_out)?
            }
            _ => 0,
        };
        total = total.checked_add(macs.checked_mul(2)?)?;
    }
    Some(total)
}
