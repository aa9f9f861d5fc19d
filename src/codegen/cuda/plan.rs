//! The launch plans of the CUDA kernel library's matrix products and convolutions.
//!
//! `runtime-cuda/mr_cuda_plan.h` decides, for one call and a GPU's SM count, which
//! kernel runs, with which tile and how many K slices (split-K), on how many blocks. The
//! generated code calls it at run time with the device's SM count; build.rs compiles the
//! same functions into mithrilc (`plan.c`), and here they decide at compile time:
//! - which tile kernels a model instantiates ([`Needs::mask`]): the tiles its products'
//!   plans choose on the GPUs of [`GPUS`] at the sizes its symbols may take. A GPU not in
//!   the table runs the best of those;
//! - how much scratch split-K's partial sums need ([`Needs::scratch`]), which the model's
//!   arena holds past its buffers;
//! - what `--report` prints for a named GPU ([`super::report::launches`]).

use crate::codegen::c::library::Window2d;
use crate::ir::Dim;
use crate::lower::{Kernel, Program, Step};

/// `mr_plan`: one call's launch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub kind: i32,
    pub tile: i32,
    pub threads: i32,
    pub rows: i32,
    pub split: i64,
    pub kslice: i64,
    pub grid: [i64; 3],
    pub blocks: i64,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub nbatch: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct TileShape {
    bm: i32,
    bn: i32,
    tm: i32,
    tn: i32,
    rate: i32,
}

extern "C" {
    fn mithrilc_cuda_plan_gemm(m: i64, n: i64, k: i64, nbatch: i64, b_rs: i64, b_cs: i64, tensor: i32, sms: i32, mask: u32, scratch: i64) -> Plan;
    fn mithrilc_cuda_plan_conv(n: i64, c: i64, h: i64, w: i64, o: i64, kh: i64, kw: i64, oh: i64, ow: i64, sh: i64, sw: i64, ph: i64, pw: i64, groups: i64, tensor: i32, sms: i32, mask: u32, scratch: i64) -> Plan;
    fn mithrilc_cuda_plan_pool(planes: i64, oh: i64, ow: i64) -> Plan;
    fn mithrilc_cuda_plan_softmax(outer: i64, n: i64, inner: i64) -> Plan;
    fn mithrilc_cuda_plan_attention(m: i64, n: i64, d: i64, e: i64, nbatch: i64, tensor: i32, sms: i32, mask: u32) -> Plan;
    fn mithrilc_cuda_attention_all() -> u32;
    fn mithrilc_cuda_attention_tc() -> u32;
    fn mithrilc_cuda_tile(t: i32) -> TileShape;
    fn mithrilc_cuda_plan_bits(p: Plan) -> u32;
    fn mithrilc_cuda_plan_all() -> u32;
    fn mithrilc_cuda_plan_layout(a_rs: i64, a_cs: i64, b_rs: i64, b_cs: i64) -> u32;
    fn mithrilc_cuda_stride_blocks(n: i64, per: i64) -> i64;
    fn mithrilc_cuda_threads() -> i32;
}

/// What a plan launches (`enum mr_plan_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    None,
    GemvWarp,
    GemvThread,
    Tiled,
    Tensor,
    ConvDirect,
    Pool,
    SoftmaxCols,
    SoftmaxWarp,
    SoftmaxBlock,
    Attention,
}

impl Plan {
    pub fn kind(&self) -> Kind {
        match self.kind {
            1 => Kind::GemvWarp,
            2 => Kind::GemvThread,
            3 => Kind::Tiled,
            4 => Kind::Tensor,
            5 => Kind::ConvDirect,
            6 => Kind::Pool,
            7 => Kind::SoftmaxCols,
            8 => Kind::SoftmaxWarp,
            9 => Kind::SoftmaxBlock,
            10 => Kind::Attention,
            _ => Kind::None,
        }
    }

    /// The `MASK` bits its kernels need instantiated (`mr_plan_bits`).
    pub fn bits(&self) -> u32 {
        // SAFETY: a pure function of its argument (plan.c).
        unsafe { mithrilc_cuda_plan_bits(*self) }
    }

    /// Whether it runs a matrix product or a convolution.
    pub fn is_product(&self) -> bool {
        matches!(self.kind(), Kind::GemvWarp | Kind::GemvThread | Kind::Tiled | Kind::Tensor | Kind::ConvDirect)
    }

    /// The kernel and its tile, in words: `tile 128x64, K in 11 slices of 288`.
    pub fn describe(&self) -> String {
        match self.kind() {
            Kind::None => "nothing to compute".to_string(),
            Kind::GemvWarp => "GEMV, a warp a column".to_string(),
            Kind::GemvThread => "GEMV, a thread a column".to_string(),
            Kind::ConvDirect => "direct convolution, a thread an output".to_string(),
            Kind::Tensor => "tensor cores, tile 128x64".to_string(),
            Kind::Pool => "a thread an output".to_string(),
            Kind::SoftmaxCols => "a thread a row".to_string(),
            Kind::SoftmaxWarp => format!("a warp a row, {} values a lane", self.tile),
            Kind::SoftmaxBlock => "a block a row".to_string(),
            Kind::Attention if self.bits() & attention_tc() != 0 => format!("tensor cores, query tiles of {}, heads up to {} wide", self.rows, self.tile),
            Kind::Attention => format!("query tiles of {}, heads up to {} wide", self.rows, self.tile),
            Kind::Tiled => {
                let (bm, bn) = tile(self.tile);
                if self.split > 1 {
                    format!("tile {bm}x{bn}, K in {} slices of {}", self.split, self.kslice)
                } else {
                    format!("tile {bm}x{bn}")
                }
            }
        }
    }
}

/// Pooling of `planes` planes into `oh` x `ow` outputs (`mr_plan_pool`).
pub fn pool(planes: i64, oh: i64, ow: i64) -> Plan {
    // SAFETY: a pure function of its arguments (plan.c).
    unsafe { mithrilc_cuda_plan_pool(planes, oh, ow) }
}

/// Softmax over `n` elements of stride `inner`, `outer` x `inner` rows (`mr_plan_softmax`).
pub fn softmax(outer: i64, n: i64, inner: i64) -> Plan {
    // SAFETY: a pure function of its arguments (plan.c).
    unsafe { mithrilc_cuda_plan_softmax(outer, n, inner) }
}

/// Attention of `m` queries, `n` keys, head dimensions `d` and `e`, `nbatch` heads on
/// `sms` SMs among the kernels `mask` allows (`mr_plan_attention`); `tensor`:
/// `--precision`'s tensor-core kernel where it fills the SMs.
pub fn attention(m: i64, n: i64, d: i64, e: i64, nbatch: i64, tensor: bool, sms: i32, mask: u32) -> Plan {
    // SAFETY: a pure function of its arguments (plan.c).
    unsafe { mithrilc_cuda_plan_attention(m, n, d, e, nbatch, i32::from(tensor), sms, mask) }
}

/// The tensor-core attention kernel's `MASK` bit (`MR_ATTN_TC`).
pub fn attention_tc() -> u32 {
    // SAFETY: a constant (plan.c).
    unsafe { mithrilc_cuda_attention_tc() }
}

/// Every attention kernel (`MR_ATTN_ALL`).
pub fn all_attention() -> u32 {
    // SAFETY: a constant (plan.c).
    unsafe { mithrilc_cuda_attention_all() }
}

/// An attention step's sizes at `value`: (m, n, d, e, nbatch).
pub fn attention_sizes(step: &Step, value: &dyn Fn(&str) -> Option<u64>) -> Option<[i64; 5]> {
    let Kernel::Attention { out, .. } = &step.kernel else { return None };
    let ext = extents(step, value);
    let rank = out.shape.len();
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Some([i(ext[rank - 2]), i(ext[rank - 1]), i(ext[rank]), i(ext[rank + 1]), i(ext[..rank - 2].iter().product())])
}

/// The `MASK` of an attention step: [`attention_bits`] at every size of [`samples`]
/// (`None`: not an attention).
pub fn attention_mask(step: &Step, symbols: &[(String, u64)], tensor: bool) -> Option<u32> {
    let mut mask = 0;
    for binding in samples(symbols) {
        let value = |s: &str| binding.iter().find(|(n, _)| n == s).map(|(_, v)| *v);
        let [m, n, d, e, nbatch] = attention_sizes(step, &value)?;
        mask |= attention_bits(m, n, d, e, nbatch, tensor);
    }
    Some(mask)
}

/// The attention kernels an attention of these sizes needs instantiated: its head
/// width's, with the row tiles the exact kernel's plans choose on the GPUs of [`GPUS`]
/// and, with `tensor`, the tensor-core kernel where their plans take it. The exact tiles
/// are there even where every named GPU takes the tensor-core kernel: on a GPU that the
/// 64-row tiles do not fill, or one older than sm_80, the plan falls back to them.
pub fn attention_bits(m: i64, n: i64, d: i64, e: i64, nbatch: i64, tensor: bool) -> u32 {
    let mut mask = 0;
    for g in GPUS {
        mask |= attention(m, n, d, e, nbatch, false, g.sms, all_attention()).bits();
        if tensor {
            mask |= attention(m, n, d, e, nbatch, true, g.sms, all_attention()).bits();
        }
    }
    mask
}

/// Tile `t`'s rows and columns.
pub fn tile(t: i32) -> (i64, i64) {
    // SAFETY: a pure function of its argument (plan.c).
    let s = unsafe { mithrilc_cuda_tile(t) };
    (i64::from(s.bm), i64::from(s.bn))
}

/// Blocks of a grid-stride loop over `n` items, `per` a block (`mr_blocks`: `per` is the
/// block's threads; `mr_warp_blocks`: its warps).
pub fn stride_blocks(n: i64, per: i64) -> i64 {
    // SAFETY: a pure function of its arguments (plan.c).
    unsafe { mithrilc_cuda_stride_blocks(n, per) }
}

/// The threads of a loop kernel's block (`MR_THREADS`).
pub fn threads() -> i64 {
    // SAFETY: a constant (plan.c).
    i64::from(unsafe { mithrilc_cuda_threads() })
}

/// A GPU the plans are made for: its SMs, and for the report's roofline its f32 FMA
/// throughput (not tensor cores) and memory bandwidth, as NVIDIA's data sheets give them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    pub name: &'static str,
    pub model: &'static str,
    pub sms: i32,
    pub f32_tflops: f64,
    pub dram_tb_s: f64,
}

/// The GPUs `--gpu` names; a model instantiates the tiles that its plans choose on any
/// of them. h100 first: the report's default.
pub const GPUS: &[Gpu] = &[
    Gpu { name: "h100", model: "NVIDIA H100 SXM5", sms: 132, f32_tflops: 66.9, dram_tb_s: 3.35 },
    Gpu { name: "h200", model: "NVIDIA H200 SXM", sms: 132, f32_tflops: 66.9, dram_tb_s: 4.8 },
    Gpu { name: "a100", model: "NVIDIA A100 SXM4 80GB", sms: 108, f32_tflops: 19.5, dram_tb_s: 2.04 },
    Gpu { name: "l4", model: "NVIDIA L4", sms: 58, f32_tflops: 30.3, dram_tb_s: 0.3 },
    Gpu { name: "rtx4090", model: "NVIDIA GeForce RTX 4090", sms: 128, f32_tflops: 82.6, dram_tb_s: 1.008 },
];

/// The GPU of [`GPUS`] called `name`.
pub fn gpu(name: &str) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.name == name)
}

/// One matrix product or convolution as the kernel library is called for it, at given
/// sizes of the program's symbols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Gemm { m: i64, n: i64, k: i64, nbatch: i64, a_rs: i64, a_cs: i64, b_rs: i64, b_cs: i64 },
    Conv { n: i64, c: i64, h: i64, w: i64, o: i64, kh: i64, kw: i64, oh: i64, ow: i64, sh: i64, sw: i64, ph: i64, pw: i64, groups: i64 },
}

impl Call {
    /// The call of a step's matrix product or convolution (`None` for other kernels),
    /// its symbols at `value`.
    pub fn of(step: &Step, value: &dyn Fn(&str) -> Option<u64>) -> Option<Call> {
        let ext = extents(step, value);
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        match &step.kernel {
            Kernel::Gemm { a, b, c, .. } => {
                let rank = c.shape.len();
                let nbatch = ext[..rank - 2].iter().product::<u64>();
                let (m, n, k) = (i(ext[rank - 2]), i(ext[rank - 1]), i(ext[rank]));
                Some(Call::Gemm { m, n, k, nbatch: i(nbatch), a_rs: a.strides[rank - 2], a_cs: a.strides[rank - 1], b_rs: b.strides[rank - 2], b_cs: b.strides[rank - 1] })
            }
            Kernel::Conv { x, w, out, attrs, .. } => {
                let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
                let ((h, wd), (kh, kw), (oh, ow)) = (win.spatial(x), win.spatial(w), win.spatial(out));
                let (n, c, o) = (ext[0], x.shape[1], w.shape[0]);
                Some(Call::Conv {
                    n: i(n),
                    c: i(c),
                    h: i(h),
                    w: i(wd),
                    o: i(o),
                    kh: i(kh),
                    kw: i(kw),
                    oh: i(oh),
                    ow: i(ow),
                    sh: i(win.stride.0),
                    sw: i(win.stride.1),
                    ph: i(win.pad.0),
                    pw: i(win.pad.1),
                    groups: i(attrs.groups),
                })
            }
            _ => None,
        }
    }

    /// The plan on a GPU of `sms` SMs among the kernels `mask` allows, split-K's partial
    /// sums within `scratch` floats; `tensor`: `--precision`'s tensor-core kernels.
    pub fn plan(&self, tensor: bool, sms: i32, mask: u32, scratch: i64) -> Plan {
        let t = i32::from(tensor);
        // SAFETY: pure functions of their arguments (plan.c).
        unsafe {
            match *self {
                Call::Gemm { m, n, k, nbatch, b_rs, b_cs, .. } => mithrilc_cuda_plan_gemm(m, n, k, nbatch, b_rs, b_cs, t, sms, mask, scratch),
                Call::Conv { n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, groups } => mithrilc_cuda_plan_conv(n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, groups, t, sms, mask, scratch),
            }
        }
    }

    /// The mask bits that fix its operands' layouts (`mr_plan_layout`; a convolution's
    /// are those of the GEMM a 1x1 one is).
    pub fn layout(&self) -> u32 {
        // SAFETY: a pure function of its arguments (plan.c).
        unsafe {
            match *self {
                Call::Gemm { a_rs, a_cs, b_rs, b_cs, .. } => mithrilc_cuda_plan_layout(a_rs, a_cs, b_rs, b_cs),
                Call::Conv { c, oh, ow, .. } => mithrilc_cuda_plan_layout(c, 1, oh * ow, 1),
            }
        }
    }

    /// Its floating-point operations (two a multiply-add; a convolution's padding taps
    /// counted, as the kernels compute them).
    pub fn flops(&self) -> f64 {
        match *self {
            Call::Gemm { m, n, k, nbatch, .. } => 2.0 * (m * n) as f64 * (k * nbatch) as f64,
            Call::Conv { n, c, o, kh, kw, oh, ow, groups, .. } => 2.0 * (n * o * oh * ow) as f64 * ((c / groups.max(1)) * kh * kw) as f64,
        }
    }

    /// The bytes its operands and result take (f32), each read or written once.
    pub fn bytes(&self) -> f64 {
        4.0 * match *self {
            Call::Gemm { m, n, k, nbatch, .. } => ((m * k + k * n + m * n) * nbatch) as f64,
            Call::Conv { n, c, h, w, o, kh, kw, oh, ow, groups, .. } => (n * c * h * w + o * (c / groups.max(1)) * kh * kw + n * o * oh * ow) as f64,
        }
    }
}

/// A step's domain extents with its symbols at `value` (their maxima where unbound).
pub fn extents(step: &Step, value: &dyn Fn(&str) -> Option<u64>) -> Vec<u64> {
    let domain = step.kernel.domain();
    domain.iter().enumerate().map(|(d, &max)| step.dims.get(d).and_then(Option::as_ref).and_then(|e: &Dim| e.eval(value)).unwrap_or(max)).collect()
}

/// Every tile kernel and split-K: what a hand-written caller of the library gets.
pub fn all_kernels() -> u32 {
    // SAFETY: a constant (plan.c).
    unsafe { mithrilc_cuda_plan_all() }
}

/// The most scratch a model's split-K may use: 64 MiB of partial sums. (A plan only
/// splits products of fewer tiles than the GPU has SMs, so real needs are a few MiB.)
const MAX_SCRATCH: i64 = 16 << 20;

/// What a model's products and convolutions need of the kernel library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// The `MASK` of each call: the tiles, and split-K, that its plans may choose.
    pub mask: u32,
    /// Floats of split-K scratch its plans use at most.
    pub scratch: i64,
}

/// The sizes a program's symbols are planned at: 1, the powers of two below the
/// largest maximum, and each symbol's maximum (each symbol at min(size, its maximum)).
pub fn samples(symbols: &[(String, u64)]) -> Vec<Vec<(String, u64)>> {
    let top = symbols.iter().map(|(_, m)| *m).max().unwrap_or(1);
    let mut sizes: Vec<u64> = std::iter::successors(Some(1u64), |v| v.checked_mul(2)).take_while(|v| *v < top).collect();
    sizes.push(top);
    sizes.extend(symbols.iter().map(|(_, m)| *m));
    sizes.sort_unstable();
    sizes.dedup();
    sizes.into_iter().map(|v| symbols.iter().map(|(s, m)| (s.clone(), v.min(*m))).collect()).collect()
}

/// What `step` needs (`None`: it is no matrix product or convolution): the tiles and
/// splits its exact plans choose on every GPU of [`GPUS`] at every size of
/// [`samples`]. Under `--precision` the products run on tensor cores where the device
/// has them; the exact kernels planned here are their fallback.
pub fn needs(step: &Step, symbols: &[(String, u64)]) -> Option<Needs> {
    let mut needs = Needs::default();
    for binding in samples(symbols) {
        let value = |s: &str| binding.iter().find(|(n, _)| n == s).map(|(_, v)| *v);
        let call = Call::of(step, &value)?;
        needs.mask |= call.layout();
        for g in GPUS {
            let p = call.plan(false, g.sms, all_kernels(), MAX_SCRATCH);
            needs.mask |= p.bits();
            if p.split > 1 {
                needs.scratch = needs.scratch.max(p.split * p.m * p.n * p.nbatch);
            }
        }
    }
    Some(needs)
}

/// The split-K scratch a model's arena holds: the most any of its products' plans use.
pub fn scratch_floats(forward: &Program, backward: Option<&Program>) -> i64 {
    std::iter::once(forward).chain(backward).flat_map(|p| p.steps.iter().filter_map(|s| needs(s, &p.symbols))).map(|n| n.scratch).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planner_fills_an_h100_with_gpt_blocks_long_projection() {
        // gpt_block at batch 1: [128, 3072] x [3072, 768]; one 128 x 64 tile a block
        // gave 12 blocks for 132 SMs.
        let call = Call::Gemm { m: 128, n: 768, k: 3072, nbatch: 1, a_rs: 3072, a_cs: 1, b_rs: 768, b_cs: 1 };
        let p = call.plan(false, 132, all_kernels(), MAX_SCRATCH);
        assert_eq!(p.kind(), Kind::Tiled);
        assert!(p.split > 1 && p.blocks >= 119, "{p:?}");
        assert_eq!(p.blocks, p.grid.iter().product::<i64>());
        // without scratch it cannot split
        let q = call.plan(false, 132, all_kernels(), 0);
        assert_eq!(q.split, 1);
        // a small GPU gets fewer slices
        let r = call.plan(false, 20, all_kernels(), MAX_SCRATCH);
        assert!(r.split < p.split, "{r:?}");
    }

    #[test]
    fn small_products_are_gemvs_and_tensor_plans_keep_their_tile() {
        let gemv = Call::Gemm { m: 1, n: 10, k: 784, nbatch: 1, a_rs: 784, a_cs: 1, b_rs: 10, b_cs: 1 }.plan(false, 132, all_kernels(), 0);
        assert_eq!(gemv.kind(), Kind::GemvWarp);
        let tc = Call::Gemm { m: 512, n: 512, k: 512, nbatch: 1, a_rs: 512, a_cs: 1, b_rs: 512, b_cs: 1 }.plan(true, 132, all_kernels(), 0);
        assert_eq!((tc.kind(), tc.grid), (Kind::Tensor, [8, 4, 1]));
        assert_eq!(tc.describe(), "tensor cores, tile 128x64");
    }

    #[test]
    fn a_depthwise_convolution_is_direct_and_a_1x1_one_a_batched_gemm() {
        let conv = |k: i64, groups: i64, o: i64| Call::Conv { n: 2, c: 8, h: 9, w: 9, o, kh: k, kw: k, oh: 9, ow: 9, sh: 1, sw: 1, ph: k / 2, pw: k / 2, groups };
        assert_eq!(conv(3, 8, 8).plan(false, 132, all_kernels(), 0).kind(), Kind::ConvDirect);
        let p = conv(1, 1, 64).plan(false, 132, all_kernels(), 0);
        assert_eq!((p.kind(), p.m, p.n, p.k, p.nbatch), (Kind::Tiled, 64, 81, 8, 2));
    }

    #[test]
    fn softmax_pooling_and_attention_are_planned_as_the_library_launches_them() {
        assert_eq!((softmax(10, 33, 1).kind(), softmax(10, 33, 1).tile), (Kind::SoftmaxWarp, 2));
        assert_eq!(softmax(10, 1024, 1).tile, 32);
        assert_eq!(softmax(10, 1025, 1).kind(), Kind::SoftmaxBlock);
        assert_eq!(softmax(4096, 100, 3).kind(), Kind::SoftmaxCols);
        assert_eq!(softmax(0, 100, 3).kind(), Kind::None);
        assert_eq!((pool(3, 10, 10).blocks, pool(3, 10, 10).threads), (2, 256));
        // gpt_block's at batch 1 on an H100: 32-row tiles gave 48 blocks; 8 rows fill it
        let a = attention(128, 128, 64, 64, 12, false, 132, all_attention());
        assert_eq!((a.kind(), a.tile, a.rows, a.blocks, a.threads), (Kind::Attention, 64, 8, 192, 128));
        assert_eq!(attention(128, 128, 64, 64, 96, false, 132, all_attention()).rows, 32); // at batch 8
        assert_eq!(attention(128, 128, 96, 64, 1, false, 1, all_attention()).rows, 16); // no 32 rows past 64 wide
        assert_eq!(attention(128, 128, 64, 64, 12, false, 132, 0x2 | 0x40).rows, 32); // the mask's one tile
        assert_eq!(attention(1, 1, 129, 1, 1, false, 132, all_attention()).kind(), Kind::None);
        // tensor cores: 64-row tiles where they fill the SMs (batch 8), heads up to 64 wide
        let tc = attention(128, 128, 64, 64, 96, true, 132, all_attention());
        assert_eq!((tc.rows, tc.blocks, tc.describe().as_str()), (64, 192, "tensor cores, query tiles of 64, heads up to 64 wide"));
        assert_eq!(attention(128, 128, 64, 64, 12, true, 132, all_attention()).rows, 8); // batch 1: 24 tiles of 64
        assert_eq!(attention(128, 128, 96, 64, 96, true, 1, all_attention()).rows, 16); // 96 wide: exact
        assert_eq!(attention(128, 128, 64, 64, 96, true, 132, 0x2 | 0x40).rows, 32); // not in the mask
        assert_eq!(tc.bits(), 0x2 | 0x80);
    }

    /// Whatever the device's SM count, the plan the library makes at run time is among
    /// the kernels the model's MASK instantiated (else the call would fail): with and
    /// without tensor cores (a GPU before sm_80 plans without), for sizes whose 64-row
    /// tiles fill every named GPU (140 and 192 of them), none (24) or some.
    #[test]
    fn every_runtime_attention_plan_is_in_the_mask() {
        for (m, nbatch) in [(128, 12), (128, 96), (128, 70), (1000, 8), (64, 140)] {
            for tensor in [false, true] {
                let mask = attention_bits(m, 128, 64, 64, nbatch, tensor);
                for sms in 1..=400 {
                    for runtime_tensor in [false, tensor] {
                        let p = attention(m, 128, 64, 64, nbatch, runtime_tensor, sms, mask);
                        assert_eq!(p.kind(), Kind::Attention);
                        assert_eq!(p.bits() & !mask, 0, "m {m} x {nbatch} heads, tensor {tensor}, {sms} SMs: plan bits {:#x}, mask {mask:#x}", p.bits());
                    }
                }
            }
        }
    }

    #[test]
    fn a_model_fixes_its_operands_layouts() {
        let gemm = |a_rs, a_cs, b_rs, b_cs| Call::Gemm { m: 64, n: 64, k: 64, nbatch: 1, a_rs, a_cs, b_rs, b_cs }.layout();
        let (fixed, a, b) = (0x200, 0x400, 0x800);
        assert_eq!(gemm(64, 1, 64, 1), fixed | a); // A row-major: along K; B row-major: along n
        assert_eq!(gemm(1, 64, 1, 64), fixed | b); // both transposed
        // a convolution's 1x1 GEMM: weights [o, c] row-major, the image [c, h*w]
        let conv = Call::Conv { n: 1, c: 8, h: 4, w: 4, o: 16, kh: 1, kw: 1, oh: 4, ow: 4, sh: 1, sw: 1, ph: 0, pw: 0, groups: 1 };
        assert_eq!(conv.layout(), fixed | a);
    }

    #[test]
    fn symbols_are_planned_at_powers_of_two_and_their_maxima() {
        let s = samples(&[("B".to_string(), 20), ("T".to_string(), 3)]);
        let b: Vec<u64> = s.iter().map(|v| v[0].1).collect();
        let t: Vec<u64> = s.iter().map(|v| v[1].1).collect();
        assert_eq!(b, [1, 2, 3, 4, 8, 16, 20]);
        assert_eq!(t, [1, 2, 3, 3, 3, 3, 3]);
        assert_eq!(samples(&[]), vec![Vec::<(String, u64)>::new()]);
    }
}
