//! `--gemm cublaslt`: the matrix products cuBLASLt may run, and with which epilogue.
//!
//! cuBLASLt's epilogues compute `act(alpha * A B + bias[j] + R[i, j])`: a scale, a bias
//! per column of the product, a residual added as its `C` with `beta = 1`, then ReLU or
//! the tanh approximation of GELU. A product whose fused epilogue is of that form gets
//! a call of `mr_cuda_sgemm_lt` (`runtime-cuda/mr_cublaslt.h`), which runs it on cuBLASLt
//! where the library loads and takes the shape, and on the built-in kernels with the
//! same epilogue otherwise. Any other epilogue keeps the built-in kernels alone.

use crate::ir::{BinaryOp, Composite, Dtype, UnaryOp};
use crate::lower::{BufId, Expr, Kernel, Program, View};

/// The device memory cuBLASLt may use, from the model's arena: what NVIDIA's cuBLAS
/// guide recommends for Hopper (32 MiB; 4 MiB suffices before it, and a smaller
/// workspace only narrows the algorithms cuBLASLt may pick).
pub const WORKSPACE_BYTES: u64 = 32 << 20;

/// The activation of a cuBLASLt epilogue (`enum mr_lt_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    /// cuBLASLt's GELU is the tanh approximation, so exact GELU stays built in.
    GeluTanh,
}

impl Act {
    /// The runtime's constant.
    pub fn constant(self) -> &'static str {
        match self {
            Act::None => "MR_LT_ACT_NONE",
            Act::Relu => "MR_LT_ACT_RELU",
            Act::GeluTanh => "MR_LT_ACT_GELU_TANH",
        }
    }
}

/// A product's epilogue as cuBLASLt computes it. Its operands are what the epilogue
/// loads, as views over the product's index space.
#[derive(Debug, Clone, PartialEq)]
pub struct Epilogue {
    pub act: Act,
    pub alpha: f64,
    /// `bias[j]`: unit stride along the product's columns and 0 along every other
    /// dimension.
    pub bias: Option<View>,
    /// `R[.., i, j]`: unit stride along the product's columns, in another buffer than
    /// the product's.
    pub res: Option<View>,
}

impl Epilogue {
    /// In words, for the report: `bias, gelu_tanh`, `residual`, `none`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.alpha != 1.0 {
            parts.push(format!("scale {}", self.alpha));
        }
        if self.bias.is_some() {
            parts.push("bias".to_string());
        }
        if self.res.is_some() {
            parts.push("residual".to_string());
        }
        match self.act {
            Act::None => {}
            Act::Relu => parts.push("relu".to_string()),
            Act::GeluTanh => parts.push("gelu_tanh".to_string()),
        }
        if parts.is_empty() { "none".to_string() } else { parts.join(", ") }
    }
}

/// Each matrix product of `p` (its step) with its cuBLASLt epilogue, or `None` where it
/// stays built in: what `--report` says of `--gemm cublaslt`.
pub fn choices(p: &Program) -> Vec<(usize, Option<Epilogue>)> {
    p.steps.iter().enumerate().filter(|(_, s)| matches!(s.kernel, Kernel::Gemm { .. })).map(|(i, s)| (i, epilogue(p, &s.kernel))).collect()
}

/// [`choices`] as `--report` prints them.
pub fn report_text(title: &str, p: &Program) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{title} on cuBLASLt where it loads and takes the shape (else the built-in kernels), {} MiB of workspace past the arena:\n", WORKSPACE_BYTES >> 20);
    for (i, e) in choices(p) {
        let _ = match e {
            Some(e) => writeln!(s, "  step {i}: epilogue {}", e.describe()),
            None => writeln!(s, "  step {i}: built in (an epilogue cuBLASLt does not compute)"),
        };
    }
    s
}

/// [`choices`] for `--report=json`: a row per product, its epilogue `null` where it stays
/// built in.
pub fn report_json(p: &Program) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = choices(p).into_iter().map(|(i, e)| serde_json::json!({"step": i, "epilogue": e.map(|e| e.describe())})).collect();
    serde_json::json!({"workspace_bytes": WORKSPACE_BYTES, "products": rows})
}

/// The cuBLASLt epilogue of `p`'s f32 matrix product `k`, if its fused epilogue has one
/// (no epilogue: the plain product).
pub fn epilogue(p: &Program, k: &Kernel) -> Option<Epilogue> {
    classify(k, &|b| p.buffers[b.0].dtype)
}

/// [`epilogue`] with each buffer's element type from `dtype`: every buffer the epilogue
/// reads must hold f32 (an f32 addition may read an integer by promotion, which the
/// built-in functor converts and cuBLASLt would not).
fn classify(k: &Kernel, dtype: &dyn Fn(BufId) -> Dtype) -> Option<Epilogue> {
    let Kernel::Gemm { c, epilogue, .. } = k else { return None };
    let Some(e) = epilogue else { return Some(Epilogue { act: Act::None, alpha: 1.0, bias: None, res: None }) };
    let (act, sum) = match e {
        Expr::Unary(UnaryOp::Relu, x, Dtype::F32) => (Act::Relu, &**x),
        Expr::Unary(UnaryOp::Composite(Composite::GeluTanh), x, Dtype::F32) => (Act::GeluTanh, &**x),
        e => (Act::None, e),
    };
    let mut terms = Vec::new();
    flatten_sum(sum, &mut terms)?;
    let mut out = Epilogue { act, alpha: 1.0, bias: None, res: None };
    let mut product = false;
    let rank = c.shape.len();
    // Strides along the product's dimensions that are more than 1 (the others index 0).
    let wide = |v: &View, d: usize| if c.shape[d] > 1 { v.strides[d] } else { 0 };
    for t in terms {
        let (scaled, alpha) = match t {
            Expr::Binary(BinaryOp::Mul, a, b, Dtype::F32) => match (&**a, &**b) {
                // alpha 0: BLAS may skip the product, where 0 * inf is NaN.
                (Expr::Const(x, Dtype::F32), p) | (p, Expr::Const(x, Dtype::F32)) if x.is_finite() && *x != 0.0 => (p, *x),
                _ => return None,
            },
            t => (t, 1.0),
        };
        let v = load(scaled, c).filter(|v| dtype(v.buf) == Dtype::F32)?;
        let same = |v: &View| (0..rank).all(|d| wide(v, d) == wide(c, d));
        if v.buf == c.buf {
            // The product itself, once; any other read of its buffer is not.
            if product || v.offset != c.offset || !same(&v) {
                return None;
            }
            (product, out.alpha) = (true, alpha);
        } else if alpha != 1.0 || wide(&v, rank - 1) != i64::from(c.shape[rank - 1] > 1) {
            return None;
        } else if (0..rank - 1).all(|d| wide(&v, d) == 0) {
            if out.bias.replace(v).is_some() {
                return None;
            }
        } else if out.res.replace(v).is_some() {
            return None;
        }
    }
    product.then_some(out)
}

/// The terms of a tree of f32 additions (`None` if it adds anything but f32).
fn flatten_sum<'a>(e: &'a Expr, terms: &mut Vec<&'a Expr>) -> Option<()> {
    match e {
        Expr::Binary(BinaryOp::Add, a, b, Dtype::F32) => {
            flatten_sum(a, terms)?;
            flatten_sum(b, terms)
        }
        Expr::Binary(BinaryOp::Add, ..) => None,
        e => {
            terms.push(e);
            Some(())
        }
    }
}

/// What `e` loads, if it is a load of f32, as a view over the product `c`'s index space:
/// each dimension's stride the sum of the strides of the view's dimensions indexed by
/// its variable.
fn load(e: &Expr, c: &View) -> Option<View> {
    let Expr::Load { view, vars } = e else { return None };
    let mut strides = vec![0i64; c.shape.len()];
    for (d, &v) in vars.iter().enumerate() {
        if v == usize::MAX || view.shape[d] <= 1 {
            continue; // index 0
        }
        let s = strides.get_mut(v)?;
        *s = s.checked_add(view.strides[d])?;
    }
    Some(View { buf: view.buf, shape: c.shape.clone(), strides, offset: view.offset })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c() -> View {
        View::contiguous(BufId(0), &[4, 8])
    }
    fn bias() -> View {
        View { buf: BufId(1), shape: vec![4, 8], strides: vec![0, 1], offset: 0 }
    }
    fn res() -> View {
        View::contiguous(BufId(2), &[4, 8])
    }
    fn ld(v: View) -> Expr {
        Expr::Load { view: v, vars: vec![0, 1] }
    }
    fn add(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinaryOp::Add, Box::new(a), Box::new(b), Dtype::F32)
    }
    fn f32s(_: BufId) -> Dtype {
        Dtype::F32
    }
    fn gemm(e: Option<Expr>) -> Kernel {
        let (a, b) = (View::contiguous(BufId(3), &[4, 16]), View::contiguous(BufId(4), &[16, 8]));
        Kernel::Gemm { a, b, c: c(), epilogue: e, scratch: None }
    }

    #[test]
    fn bias_residual_and_activations_are_taken() {
        let k = gemm(None);
        assert_eq!(classify(&k, &f32s).unwrap().describe(), "none");
        // gpt_block's projections: residual + (product + bias), in either order.
        let k = gemm(Some(add(ld(res()), add(ld(c()), ld(bias())))));
        let e = classify(&k, &f32s).unwrap();
        assert_eq!((e.bias, e.res, e.act), (Some(bias()), Some(res()), Act::None));
        // As lowering writes them: a bias of its own rank at the column variable, a
        // residual's unit dimension at index 0 (`_`).
        let bias1 = Expr::Load { view: View::contiguous(BufId(1), &[8]), vars: vec![1] };
        let res3 = Expr::Load { view: View::contiguous(BufId(2), &[1, 4, 8]), vars: vec![usize::MAX, 0, 1] };
        let e = classify(&gemm(Some(add(res3, add(ld(c()), bias1)))), &f32s).unwrap();
        assert_eq!((e.bias, e.res), (Some(bias()), Some(res())));
        let k = gemm(Some(Expr::Unary(UnaryOp::Composite(Composite::GeluTanh), Box::new(add(ld(bias()), ld(c()))), Dtype::F32)));
        assert_eq!(classify(&k, &f32s).unwrap().describe(), "bias, gelu_tanh");
        let scaled = Expr::Binary(BinaryOp::Mul, Box::new(Expr::Const(0.5, Dtype::F32)), Box::new(ld(c())), Dtype::F32);
        let k = gemm(Some(Expr::Unary(UnaryOp::Relu, Box::new(scaled), Dtype::F32)));
        assert_eq!(classify(&k, &f32s).unwrap().describe(), "scale 0.5, relu");
    }

    #[test]
    fn what_cublaslt_cannot_compute_is_refused() {
        let gelu = |x| Expr::Unary(UnaryOp::Composite(Composite::Gelu), Box::new(x), Dtype::F32);
        let relu = |x| Expr::Unary(UnaryOp::Relu, Box::new(x), Dtype::F32);
        let row_bias = View { buf: BufId(1), shape: vec![4, 8], strides: vec![1, 0], offset: 0 };
        let strided_res = View { buf: BufId(2), shape: vec![4, 8], strides: vec![1, 4], offset: 0 };
        let refused = [
            // exact GELU: cuBLASLt's is the tanh approximation
            gelu(add(ld(c()), ld(bias()))),
            // the residual after the activation
            add(relu(add(ld(c()), ld(bias()))), ld(res())),
            // a bias per row, a residual without a unit column stride, two biases
            add(ld(c()), ld(row_bias)),
            add(ld(c()), ld(strided_res)),
            add(add(ld(c()), ld(bias())), ld(bias())),
            // the product twice, or not at all; the product's own buffer as the residual
            add(ld(c()), ld(c())),
            add(ld(bias()), ld(res())),
            // a product read at another index
            add(Expr::Load { view: c(), vars: vec![1, 0] }, ld(bias())),
        ];
        for e in refused {
            let k = gemm(Some(e.clone()));
            assert_eq!(classify(&k, &f32s), None, "{e:?}");
        }
        // An integer bias, added to the f32 product by promotion; a scale of 0.
        let k = gemm(Some(add(ld(c()), ld(bias()))));
        assert_eq!(classify(&k, &|b| if b == BufId(1) { Dtype::I32 } else { Dtype::F32 }), None);
        let zero = Expr::Binary(BinaryOp::Mul, Box::new(Expr::Const(0.0, Dtype::F32)), Box::new(ld(c())), Dtype::F32);
        assert_eq!(classify(&gemm(Some(zero)), &f32s), None);
    }
}
