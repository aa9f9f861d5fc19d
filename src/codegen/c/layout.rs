//! The C target's program pass (`c-layout`): what runtime-c needs of a program that
//! lowering, being neutral, does not decide. It runs after lowering and before `fuse`,
//! on the one-kernel-per-op program, and
//! - stores each f32 weight in the layout its kernels read best ([`Layout`]): a weight
//!   read only through its transpose is stored transposed, in column panels of
//!   [`PANEL`] (`mr_sgemm_panels`) when every read is the right operand of a matmul;
//!   a weight read only by convolutions that run by Winograd's F(4x4, 3x3)
//!   ([`winograd`]) is stored transformed, and those convolutions get a scratch buffer;
//!   the views of a re-laid weight are rewritten for its new layout;
//! - copies the input of a stride-1 convolution with padding (not run by Winograd) into
//!   a zero-padded buffer: runtime-c reads an unpadded stride-1 convolution's input in
//!   place (each depth row of a GEMM panel is a run of the input), where padding would
//!   need an im2col copy KH*KW times the input's size;
//! - with `--quantize` ([`Stored`] other than f32), stores narrow every f32 weight whose
//!   every read is a matmul's right operand or a convolution's weight: the elements of
//!   its layout, narrowed (`codegen::weights` writes them). With `int8`, a weight in
//!   panels is stored for int8 products ([`Stored::Int8`]), each product reading it
//!   given a scratch buffer for its quantized left operand (per batch index, so batches
//!   may run at once), and so is the weight of convolutions that multiply in int8
//!   ([`int8_conv`]: stored in [`Layout::ConvPanels`] instead of Winograd's or
//!   row-major, each convolution given its scratch); any other is stored as q8_0. A
//!   weight in panels is read so by the GEMM (`mr_sgemm_panels_q`), a convolution's
//!   whole weight (row-major or Winograd-transformed) by the convolution
//!   (`mr_conv2d_q_mt`, `mr_conv2d_winograd_q_mt`), which widen it as they pack it
//!   ([`crate::lower::Port::read_as_stored`]); any other (a matmul's right operand not in
//!   panels) is widened by a [`Kernel::Dequantize`] into an arena buffer before its
//!   first reader, which the readers read instead (planned by `memory` like any
//!   temporary). Everything else (biases, norms, embeddings) stays f32.
//!
//! [`stored_values`] writes a weight's values in its layout (the weights blob).
//! With [`run_row_major`] (training: a training step updates the weights in place with
//! gradients in that layout, and a forward and a backward program share one blob; or
//! `--weight-layout plain`) every weight stays row-major.

use crate::error::{Error, Result};
use crate::ir::{ConvAttrs, Dtype};
use crate::lower::{align, buffer_bytes, kernel_exprs, padded, visit_views, BufId, Buffer, Expr, Kernel, Layout, Program, Step, Storage, Stored, View};
use crate::tensor::RawTensor;

/// The width of a weight's column panels (`MR_PANEL` in the runtime).
pub use crate::lower::PANEL;

/// When a convolution runs by Winograd's F(4x4, 3x3) (`mr_conv2d_winograd_f32`), and
/// the floats of scratch it then needs: f32, 2-d, a 3x3 kernel at stride 1 and
/// dilation 1, one group, at least 16 input and output channels (with fewer, its 36
/// small GEMMs gain little over the direct product), and at least half the
/// multiply-adds of direct convolution saved (36 per tile of 4x4 outputs, the tiles
/// taken in whole blocks of `PANEL`, against 9 per output; small images lose to the
/// tiles that stick out). `x` and `w` are the input and weight shapes (the input
/// unpadded: the runtime reads padding as zeros), `out` the output's.
pub fn winograd(attrs: &ConvAttrs, x: &[u64], w: &[u64], out: &[u64]) -> Option<u64> {
    let fits = attrs.stride == [1, 1] && attrs.dilation == [1, 1] && attrs.groups == 1 && [x.len(), w.len(), out.len()] == [4; 3] && w[2..] == [3, 3] && x[1] >= 16 && w[0] >= 16;
    if !fits {
        return None;
    }
    // MR_WINOGRAD_SCRATCH(N, C, O, OH, OW)
    let (n, c, o) = (x[0], x[1], w[0]);
    let tiles = out[2].div_ceil(4).checked_mul(out[3].div_ceil(4))?.checked_mul(n)?;
    let blocks = tiles.div_ceil(PANEL);
    if blocks.checked_mul(PANEL * 8)? > n.checked_mul(out[2])?.checked_mul(out[3])? {
        return None;
    }
    let slot = c.checked_add(o)?.checked_add(2)?.checked_mul(36 * PANEL)?;
    blocks.min(WINOGRAD_SLOTS).checked_mul(slot)
}

/// Chunks of a Winograd convolution's blocks that threads run at once, each with its
/// own slot of scratch (`MR_WINOGRAD_SLOTS` in the runtime).
pub const WINOGRAD_SLOTS: u64 = 8;

/// When a convolution with an int8 weight multiplies in int8 (`mr_conv2d_i8_mt`), and
/// the bytes of scratch it then needs: 2-d, one group, a depth C*KH*KW of at least 128
/// (and at most [`crate::lower::INT8_MAX_K`]) and at least 32 output channels. Its cost
/// beyond the products grows with the input and output (each image quantized and laid
/// out channels last, each patch gathered, each output stored down a column), so it
/// pays where each output sums over enough products: on a Sapphire Rapids core
/// (runtime-c's bench_quant, one image) cnn's 64-channel 3x3 convolution takes 0.48x
/// Winograd's f32 time with AMX and 0.72x with VNNI alone (AVX-VNNI 0.65x), a 64 to 128
/// channel one 0.27x, but cnn's first (3 channels, depth 27) 1.9x the f32 one, lenet's
/// 16-channel one (depth 150) 1.36x, and a 1x1 of 64 channels 1.38x.
pub fn int8_conv(attrs: &ConvAttrs, x: &[u64], w: &[u64], out: &[u64]) -> Option<u64> {
    let pair = |v: &[u64]| (v.len() == 2).then(|| (v[0], v[1]));
    if attrs.groups != 1 || [x.len(), w.len(), out.len()] != [4; 3] || w[0] < 32 {
        return None;
    }
    let depth = w[1].checked_mul(w[2])?.checked_mul(w[3])?;
    if !(128..=crate::lower::INT8_MAX_K).contains(&depth) {
        return None;
    }
    crate::lower::int8_conv_scratch_bytes(out[0], x[1], (w[2], w[3]), (out[2], out[3]), pair(&attrs.stride)?, pair(&attrs.dilation)?)
}

/// The pass: weight layouts, narrowed weights (`quantize`), Winograd's scratch, padding
/// copies.
pub fn run(p: &mut Program, quantize: Stored) -> Result<()> {
    layout(p, false, quantize)
}

/// [`run`] with every weight row-major.
pub fn run_row_major(p: &mut Program, quantize: Stored) -> Result<()> {
    layout(p, true, quantize)
}

fn layout(p: &mut Program, row_major_weights: bool, quantize: Stored) -> Result<()> {
    let reads = weight_reads(p);
    if !row_major_weights {
        choose_layouts(p, &reads, quantize);
    }
    if quantize != Stored::F32 {
        for w in p.weights.iter_mut().filter(|w| reads[w.buf.0].is_some_and(|r| r.any && r.narrow)) {
            // int8 products read a weight in panels, of a depth their sums hold (int8
            // convolutions' weights are laid out for them); any other keeps 8 bits as q8_0
            let int8 = (w.layout == Layout::Panels && w.shape.get(1).is_some_and(|&k| k <= crate::lower::INT8_MAX_K)) || w.layout == Layout::ConvPanels;
            w.stored = if quantize == Stored::Int8 && !int8 { Stored::Q8_0 } else { quantize };
        }
    }
    place_weights(p)?;
    let mut by_winograd = vec![false; p.buffers.len()];
    let mut by_int8 = vec![false; p.buffers.len()];
    for w in &p.weights {
        by_winograd[w.buf.0] = w.layout == Layout::Winograd;
        by_int8[w.buf.0] = w.layout == Layout::ConvPanels;
    }
    let mut add = Additions::new(p);
    // An int8 weight's products (all its readers: it is in panels) get their scratch.
    let int8: Vec<BufId> = p.weights.iter().filter(|w| w.stored == Stored::Int8).map(|w| w.buf).collect();
    for (i, step) in p.steps.iter().enumerate() {
        let Kernel::Gemm { a, b, c, .. } = &step.kernel else { continue };
        if !int8.contains(&b.buf) {
            continue;
        }
        let r = c.shape.len();
        let rows = c.shape[..r - 1].iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let floats = rows.and_then(|m| crate::lower::int8_scratch_bytes(m, a.shape[r - 1])).map(|n| n.div_ceil(4)).filter(|&n| n * 4 <= crate::lower::MAX_BUFFER_BYTES);
        let floats = floats.ok_or_else(|| Error::user(format!("{}: the int8 product's scratch for {:?} is too large", step.origins.join("; "), a.shape)))?;
        let buf = add.buffer(c.buf.0 + 1, Buffer { name: "int8_scratch".into(), dtype: Dtype::F32, len: floats, storage: Storage::Arena { offset: 0 } });
        add.scratch.push((i, View::contiguous(buf, &[floats])));
    }
    // A narrowed weight that some reader cannot read as stored: widened before its
    // first reader, into an arena buffer its readers read instead.
    for w in p.weights.iter().filter(|w| !matches!(w.stored, Stored::F32 | Stored::Int8)) {
        let b = &p.buffers[w.buf.0];
        let readers: Vec<usize> = (0..p.steps.len()).filter(|&i| crate::lower::kernel_reads(&p.steps[i].kernel).contains(&w.buf)).collect();
        let Some(&first) = readers.first() else { continue };
        if readers.iter().all(|&i| w.read_as_stored(&p.steps[i].kernel, b.len)) {
            continue;
        }
        let wide = add.buffer(w.buf.0 + 1, Buffer { name: format!("{}_f32", b.name), dtype: Dtype::F32, len: b.len, storage: Storage::Arena { offset: 0 } });
        let kernel = Kernel::Dequantize { w: View::contiguous(w.buf, &[b.len]), out: View::contiguous(wide, &[b.len]), stored: w.stored };
        let origins = vec![format!("{} stored as {}, widened to f32", w.name, w.stored.name())];
        add.steps.push((first, Step { kernel, origins, dims: vec![None] }));
        add.renames.push((w.buf, wide));
    }
    for (i, step) in p.steps.iter().enumerate() {
        let Kernel::Conv { x, w, out, attrs, .. } = &step.kernel else { continue };
        if by_winograd[w.buf.0] {
            let floats = winograd(attrs, &x.shape, &w.shape, &out.shape)
                .ok_or_else(|| Error::internal(format!("{}: a Winograd weight on a convolution that cannot use it", step.origins.join("; "))))?;
            let buf = add.buffer(out.buf.0 + 1, Buffer { name: "winograd_scratch".into(), dtype: Dtype::F32, len: floats, storage: Storage::Arena { offset: 0 } });
            add.scratch.push((i, View::contiguous(buf, &[floats])));
        } else if by_int8[w.buf.0] {
            // (the convolution pads the input itself, with the codes of zeros)
            let floats = int8_conv(attrs, &x.shape, &w.shape, &out.shape)
                .map(|n| n.div_ceil(4).max(1))
                .filter(|&n| n * 4 <= crate::lower::MAX_BUFFER_BYTES)
                .ok_or_else(|| Error::user(format!("{}: the int8 convolution's scratch for {:?} is too large", step.origins.join("; "), x.shape)))?;
            let buf = add.buffer(out.buf.0 + 1, Buffer { name: "int8_scratch".into(), dtype: Dtype::F32, len: floats, storage: Storage::Arena { offset: 0 } });
            add.scratch.push((i, View::contiguous(buf, &[floats])));
        } else if let Some(full) = padded_shape(p, x, attrs) {
            // Where lowering copied the input before: ahead of a copy of the weight made
            // for this convolution, if there is one.
            let w_copy = i.checked_sub(1).filter(|&j| w.buf != x.buf && matches!(p.buffers[w.buf.0].storage, Storage::Arena { .. }) && crate::lower::kernel_writes(&p.steps[j].kernel) == w.buf);
            let dtype = p.buffers[x.buf.0].dtype;
            let name = p.buffers[x.buf.0].name.clone();
            let len = full.iter().product::<u64>().max(1);
            let buf = add.buffer(w_copy.map_or(out.buf.0, |_| w.buf.0), Buffer { name, dtype, len, storage: Storage::Arena { offset: 0 } });
            let pads: Vec<(u64, u64)> = [(0, 0), (0, 0)].into_iter().chain(attrs.padding.iter().copied()).collect();
            let out = View::contiguous(buf, &full);
            let expr = padded(x.clone(), &pads, &full, 0.0, dtype);
            let dims = step.dims.iter().take(1).cloned().chain(std::iter::repeat(None)).take(full.len()).collect();
            let origins = vec![format!("padding of {}", step.origins.join("; "))];
            add.steps.push((w_copy.unwrap_or(i), Step { kernel: Kernel::Map { out: out.clone(), expr }, origins, dims }));
            add.padded.push((i, out));
        }
    }
    add.apply(p);
    Ok(())
}

/// The shape of a stride-1 convolution's input with its padding, if it has padding and
/// the padded input is not too large.
fn padded_shape(p: &Program, x: &View, attrs: &ConvAttrs) -> Option<Vec<u64>> {
    if attrs.stride.iter().any(|&s| s != 1) || attrs.padding.iter().all(|&p| p == (0, 0)) {
        return None;
    }
    let pads = [(0, 0), (0, 0)].iter().chain(&attrs.padding);
    let full: Vec<u64> = x.shape.iter().zip(pads).map(|(&n, &(lo, hi))| n.checked_add(lo)?.checked_add(hi)).collect::<Option<_>>()?;
    buffer_bytes(&full, p.buffers[x.buf.0].dtype).map(|_| full)
}

/// Buffers and kernels the pass adds, each before an existing one, and the
/// convolutions it changes; applied at once, renumbering buffers in one sweep.
struct Additions {
    /// The number of buffers before the pass (added ones are numbered from it until
    /// [`Additions::apply`]).
    old: usize,
    /// Each added buffer and the index of the buffer it goes before.
    buffers: Vec<(usize, Buffer)>,
    /// Each added kernel and the index of the kernel it goes before.
    steps: Vec<(usize, Step)>,
    /// Convolutions (by kernel index) that read their input padded, and the padded copy.
    padded: Vec<(usize, View)>,
    /// Convolutions by Winograd's and int8 products (by kernel index), and their scratch.
    scratch: Vec<(usize, View)>,
    /// Buffers every existing kernel reads instead of another (a narrowed weight's
    /// widened copy instead of the weight).
    renames: Vec<(BufId, BufId)>,
}

impl Additions {
    fn new(p: &Program) -> Additions {
        Additions { old: p.buffers.len(), buffers: Vec::new(), steps: Vec::new(), padded: Vec::new(), scratch: Vec::new(), renames: Vec::new() }
    }

    /// Adds `b` before buffer `before`; returns its id until [`Additions::apply`].
    fn buffer(&mut self, before: usize, b: Buffer) -> BufId {
        self.buffers.push((before, b));
        BufId(self.old + self.buffers.len() - 1)
    }

    fn apply(self, p: &mut Program) {
        for (from, to) in self.renames {
            p.rename_buffer(from, to);
        }
        for (i, x) in self.padded {
            if let Kernel::Conv { x: input, attrs, .. } = &mut p.steps[i].kernel {
                *input = x;
                attrs.padding.iter_mut().for_each(|pad| *pad = (0, 0));
            }
        }
        for (i, s) in self.scratch {
            if let Kernel::Conv { scratch, .. } | Kernel::Gemm { scratch, .. } = &mut p.steps[i].kernel {
                *scratch = Some(s);
            }
        }
        if self.buffers.is_empty() {
            return;
        }
        // Buffers in their new order; `new_id` maps old and added ids to new ones.
        let mut order: Vec<(usize, usize)> = self.buffers.iter().enumerate().map(|(k, (before, _))| (*before, k)).collect();
        order.sort();
        let mut added: Vec<Option<Buffer>> = self.buffers.into_iter().map(|(_, b)| Some(b)).collect();
        let mut new_id = vec![BufId(usize::MAX); self.old + added.len()];
        let mut buffers = Vec::with_capacity(new_id.len());
        let mut next = order.into_iter().peekable();
        for (i, b) in std::mem::take(&mut p.buffers).into_iter().map(Some).chain([None]).enumerate() {
            while let Some((_, k)) = next.next_if(|&(before, _)| before == i) {
                new_id[self.old + k] = BufId(buffers.len());
                buffers.extend(added[k].take());
            }
            if let Some(b) = b {
                new_id[i] = BufId(buffers.len());
                buffers.push(b);
            }
        }
        p.buffers = buffers;
        let mut steps = self.steps;
        steps.sort_by_key(|(before, _)| *before);
        let mut added_steps = steps.into_iter().peekable();
        let mut all = Vec::with_capacity(p.steps.len() + added_steps.len());
        for (i, step) in std::mem::take(&mut p.steps).into_iter().enumerate() {
            all.extend(std::iter::from_fn(|| added_steps.next_if(|(before, _)| *before == i).map(|(_, s)| s)));
            all.push(step);
        }
        p.steps = all;
        p.renumber_buffers(&new_id);
    }
}

/// How a weight's kernels read it, so far (each flag: every read so far allows it).
#[derive(Clone, Copy)]
struct Reads {
    any: bool,
    /// Through transposed views only.
    transposed: bool,
    /// As the whole right operand, transposed, of f32 matrix products only.
    panels: bool,
    /// As the weight of convolutions that run by Winograd's only.
    winograd: bool,
    /// As the whole weight of convolutions that multiply in int8 ([`int8_conv`]) only.
    int8_conv: bool,
    /// As the right operand of matrix products or the weight of convolutions only: it
    /// may be stored narrow (`--quantize`).
    narrow: bool,
}

/// How a kernel reads a view of a weight.
enum Use {
    /// Through the view, at any element (a loop's load, a matmul's operand).
    View,
    /// As the right operand of a matrix product; `panels` when that product could read
    /// it in panels (f32, the left operand another buffer).
    GemmB { panels: bool },
    /// As a convolution's weight; `winograd` when the convolution could run by
    /// Winograd's, `int8` when it could multiply in int8 (reading the whole weight).
    ConvWeight { winograd: bool, int8: bool },
    /// Row-major, by a library call.
    RowMajor,
}

/// How the kernels read each nonempty f32 weight, by buffer (`None` for other buffers:
/// an empty weight stores nothing, in any layout or form, and stays as it is).
fn weight_reads(p: &Program) -> Vec<Option<Reads>> {
    let mut reads: Vec<Option<Reads>> = vec![None; p.buffers.len()];
    for w in p.weights.iter().filter(|w| p.buffers[w.buf.0].dtype == Dtype::F32 && w.shape.iter().all(|&d| d > 0)) {
        reads[w.buf.0] = Some(Reads { any: false, transposed: w.shape.len() == 2, panels: true, winograd: true, int8_conv: true, narrow: true });
    }
    let f32 = |views: &[&View]| views.iter().all(|v| p.buffers[v.buf.0].dtype == Dtype::F32);
    let mut shapes: Vec<Option<Vec<u64>>> = vec![None; p.buffers.len()];
    for w in &p.weights {
        shapes[w.buf.0] = Some(w.shape.clone());
    }
    let mut read = |v: &View, how: Use| {
        let (Some(r), Some(shape)) = (reads[v.buf.0].as_mut(), shapes[v.buf.0].as_ref()) else { return };
        r.any = true;
        let transposed = shape.len() == 2 && reads_transposed(v, shape[1]);
        match how {
            Use::View => {
                r.transposed &= transposed;
                r.panels = false;
                r.winograd = false;
                r.int8_conv = false;
                r.narrow = false;
            }
            Use::GemmB { panels } => {
                r.transposed &= transposed;
                let n = v.shape.len();
                r.panels &= panels && transposed && v.offset == 0 && v.shape[n - 2..] == [shape[1], shape[0]] && v.strides[..n - 2].iter().all(|&s| s == 0);
                r.winograd = false;
                r.int8_conv = false;
            }
            Use::ConvWeight { winograd, int8 } => {
                r.transposed = false;
                r.panels = false;
                r.winograd &= winograd;
                r.int8_conv &= int8 && v.offset == 0 && v.is_contiguous() && v.shape == *shape;
            }
            Use::RowMajor => *r = Reads { any: true, transposed: false, panels: false, winograd: false, int8_conv: false, narrow: false },
        }
    };
    for step in &p.steps {
        match &step.kernel {
            Kernel::Map { .. } | Kernel::Reduce { .. } | Kernel::ArgReduce { .. } | Kernel::Rows { .. } => {}
            Kernel::Gemm { a, b, c, .. } => {
                read(a, Use::View);
                read(b, Use::GemmB { panels: f32(&[a, b, c]) && a.buf != b.buf });
            }
            Kernel::Conv { x, w, out, attrs, .. } => {
                read(x, Use::RowMajor);
                let (f32, apart) = (f32(&[x, w, out]), x.buf != w.buf);
                let winograd = f32 && apart && winograd(attrs, &x.shape, &w.shape, &out.shape).is_some();
                let int8 = f32 && apart && int8_conv(attrs, &x.shape, &w.shape, &out.shape).is_some();
                read(w, Use::ConvWeight { winograd, int8 });
            }
            // (a weight widened already is read as it is stored)
            Kernel::Pool { x, .. } | Kernel::Softmax { x, .. } | Kernel::Dequantize { w: x, .. } => read(x, Use::RowMajor),
            Kernel::Attention { q, k, v, .. } => {
                for x in [q, k, v] {
                    read(x, Use::View);
                }
            }
        }
        for e in kernel_exprs(&step.kernel) {
            e.walk(&mut |e| {
                if let Expr::Load { view, .. } | Expr::Gather { view, .. } = e {
                    read(view, Use::View);
                }
            });
        }
    }
    reads
}

/// Gives each f32 weight its layout from how the kernels read it (`reads`) and the
/// form weights are stored in (`quantize`: int8 convolutions take their weight in
/// their own panels, before Winograd's), and rewrites the views of those stored
/// transposed; buffer lengths follow the layouts.
fn choose_layouts(p: &mut Program, reads: &[Option<Reads>], quantize: Stored) {
    for w in &mut p.weights {
        if let Some(r) = reads[w.buf.0].filter(|r| r.any) {
            w.layout = match (r.winograd, r.transposed, r.panels) {
                _ if quantize == Stored::Int8 && r.int8_conv && r.narrow => Layout::ConvPanels,
                (true, _, _) => Layout::Winograd,
                (false, true, true) => Layout::Panels,
                (false, true, false) => Layout::Transposed,
                (false, false, _) => Layout::RowMajor,
            };
        }
        p.buffers[w.buf.0].len = stored_len(&w.shape, w.layout).max(1);
    }
    // Views of a weight stored as its transpose, [K, N], address that.
    let relaid: Vec<Option<(u64, u64)>> = {
        let mut relaid = vec![None; p.buffers.len()];
        for w in p.weights.iter().filter(|w| matches!(w.layout, Layout::Transposed | Layout::Panels)) {
            relaid[w.buf.0] = Some((w.shape[0], w.shape[1]));
        }
        relaid
    };
    for step in &mut p.steps {
        visit_views(&mut step.kernel, &mut |v| {
            if let Some((n, k)) = relaid[v.buf.0] {
                if let Some(t) = transposed_view(v, n, k) {
                    *v = t;
                }
            }
        });
    }
}

/// Gives each weight its offset in the blob, in order, each taking the bytes of its
/// layout's elements in its stored form ([`Stored::bytes`]), aligned.
fn place_weights(p: &mut Program) -> Result<()> {
    let mut offset = 0u64;
    for w in &p.weights {
        let b = &mut p.buffers[w.buf.0];
        let bytes = w.stored_bytes(stored_len(&w.shape, w.layout), b.dtype);
        b.storage = Storage::Weight { offset };
        offset = bytes
            .and_then(|n| offset.checked_add(n))
            .filter(|&end| end <= crate::lower::MAX_BUFFER_BYTES)
            .map(align)
            .ok_or_else(|| Error::user(format!("the weights take more than {} bytes (at parameter `{}`)", crate::lower::MAX_BUFFER_BYTES, w.name)))?;
    }
    p.weights_size = offset;
    Ok(())
}

/// Whether a view of a row-major `[N, K]` matrix reads it down its columns: its last
/// dimension steps from row to row and the one before along a row (a transpose, or
/// part of one), and no step of it crosses a row.
fn reads_transposed(v: &View, k: u64) -> bool {
    let r = v.shape.len();
    let k = k as i64;
    r >= 2
        && transposed_view(v, 1, k as u64).is_some()
        && (v.shape[r - 1] == 1 || (v.strides[r - 1] != 0 && v.strides[r - 1] % k == 0))
        && (v.shape[r - 2] == 1 || v.strides[r - 2] % k != 0)
}

/// A view of a row-major `[n, k]` matrix as the same view of its transpose stored
/// row-major (`[k, n]`), when no step of it crosses a row: each dimension then steps
/// either from row to row (a multiple of `k`) or along a row.
fn transposed_view(v: &View, n: u64, k: u64) -> Option<View> {
    let (n, k) = (n as i64, k as i64);
    let (row, col) = (v.offset.div_euclid(k), v.offset.rem_euclid(k));
    let (mut lo, mut hi) = (col, col);
    let mut strides = Vec::with_capacity(v.strides.len());
    for (&len, &s) in v.shape.iter().zip(&v.strides) {
        if s % k == 0 {
            strides.push(s / k);
        } else {
            let reach = s * (len.max(1) as i64 - 1);
            lo += reach.min(0);
            hi += reach.max(0);
            strides.push(s * n);
        }
    }
    (lo >= 0 && hi < k).then(|| View { buf: v.buf, shape: v.shape.clone(), strides, offset: col * n + row })
}

/// Elements a parameter of `shape` takes in the weights blob in `layout`.
fn stored_len(shape: &[u64], layout: Layout) -> u64 {
    let n: u64 = shape.iter().product();
    match layout {
        Layout::RowMajor | Layout::Transposed => n,
        Layout::Panels => shape[0].div_ceil(PANEL) * PANEL * shape[1],
        Layout::Winograd => 36 * shape[0] * shape[1],
        Layout::ConvPanels => shape[0].div_ceil(PANEL) * PANEL * shape[1..].iter().product::<u64>(),
    }
}

/// A parameter's values in the order its layout stores them, one at a time (nothing is
/// copied: a transformed element is computed from the ones it reads when it is asked for).
pub fn stored_values(t: &RawTensor, layout: Layout) -> impl ExactSizeIterator<Item = f64> + '_ {
    const G: [[f64; 3]; 6] = [
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];
    let (n, k) = (t.shape.first().copied().unwrap_or(1) as usize, t.shape.get(1).copied().unwrap_or(1) as usize);
    let taps = t.shape.iter().skip(2).product::<u64>() as usize;
    let w = PANEL as usize;
    (0..stored_len(&t.shape, layout) as usize).map(move |x| match layout {
        Layout::RowMajor => t.get(x),
        // [N, K] as [K, N]: element (j, i) of the transpose is t[i, j].
        Layout::Transposed => t.get((x % n) * k + x / n),
        // [K, N] in column panels: panel q, row kk, lane l is column q*PANEL + l
        // (MR_PANEL_INDEX; runtime_facts checks that the runtime reads what this writes),
        // zero past the last column.
        Layout::Panels => {
            let (q, j, l) = (x / (k * w), x % (k * w) / w, x % w);
            let i = q * w + l;
            if i < n { t.get(i * k + j) } else { 0.0 }
        }
        // [O, C, 3, 3] as [36, O, C]: G g G^T for each (o, c), as mr_winograd_weights_f32
        // (bit for bit: runtime_facts).
        Layout::Winograd => {
            let (xi, oc) = (x / (n * k), x % (n * k));
            let (i, j) = (xi / 6, xi % 6);
            (0..9).map(|ab| G[i][ab / 3] * t.get(oc * 9 + ab) * G[j][ab % 3]).sum()
        }
        // [O, C, KH, KW] as the operand [KH*KW*C, O] in column panels: row r is tap
        // r / C of channel r % C (mr_conv2d_i8_mt's B), zero past the last column.
        Layout::ConvPanels => {
            let depth = taps * k;
            let (q, r, l) = (x / (depth * w), x % (depth * w) / w, x % w);
            let o = q * w + l;
            if o < n { t.get((o * k + r % k) * taps + r / k) } else { 0.0 }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ConvAttrs;

    #[test]
    fn int8_takes_one_group_convolutions_deep_and_wide_enough() {
        let attrs = |stride: u64, dilation: u64, groups: u64| ConvAttrs { stride: vec![stride; 2], padding: vec![(1, 1); 2], dilation: vec![dilation; 2], groups };
        // cnn's 64 -> 64 at 32x32, one image: 4 chunks of 256 positions, each a slot of
        // 256 rows of 576 codes and a scale and zero point; then the image's scale and
        // zero point, and its 34x34 padded positions of 64 codes
        let bytes = 4 * 256 * (576 + 8) + 8 + 34 * 34 * 64;
        assert_eq!(int8_conv(&attrs(1, 1, 1), &[1, 64, 32, 32], &[64, 64, 3, 3], &[1, 64, 32, 32]), Some(bytes));
        // 32 images: 128 chunks in 8 slots
        assert_eq!(int8_conv(&attrs(1, 1, 1), &[32, 64, 32, 32], &[64, 64, 3, 3], &[32, 64, 32, 32]), Some(8 * 256 * 584 + 32 * (8 + 34 * 34 * 64)));
        // stride 2, dilation 2: the padded positions read are 2*(16-1) + 2*2 + 1 = 35 a side
        assert_eq!(int8_conv(&attrs(2, 2, 1), &[1, 64, 33, 33], &[32, 64, 3, 3], &[1, 32, 16, 16]), Some(256 * 584 + 8 + 35 * 35 * 64));
        for (a, x, w, out) in [
            (attrs(1, 1, 1), [1, 3, 32, 32], [64, 3, 3, 3], [1, 64, 32, 32]),      // cnn's first: depth 27
            (attrs(1, 1, 1), [1, 6, 14, 14], [16, 6, 5, 5], [1, 16, 10, 10]),      // lenet's: 16 channels
            (attrs(1, 1, 1), [1, 64, 56, 56], [64, 64, 1, 1], [1, 64, 56, 56]),    // 1x1 of 64: depth 64
            (attrs(1, 1, 2), [1, 64, 32, 32], [64, 32, 3, 3], [1, 64, 32, 32]),    // two groups
            (attrs(1, 1, 1), [1, 8192, 4, 4], [32, 8192, 3, 3], [1, 32, 4, 4]),    // past INT8_MAX_K
        ] {
            assert_eq!(int8_conv(&a, &x, &w, &out), None, "{x:?} {w:?}");
        }
    }

    #[test]
    fn conv_panels_store_each_taps_channels_together_in_panels_of_output_channels() {
        // w[o, c, kh, kw] = 1000 o + 100 c + 10 kh + kw, 33 outputs: two panels
        let (o, c, kh, kw) = (33u64, 3u64, 2u64, 2u64);
        let values: Vec<f32> = (0..o * c * kh * kw).map(|e| (e / 12 * 1000 + e / 4 % 3 * 100 + e / 2 % 2 * 10 + e % 2) as f32).collect();
        let t = RawTensor::owned(Dtype::F32, vec![o, c, kh, kw], values.iter().flat_map(|v| v.to_le_bytes()).collect()).unwrap();
        let stored: Vec<f64> = stored_values(&t, Layout::ConvPanels).collect();
        assert_eq!(stored.len() as u64, stored_len(&t.shape, Layout::ConvPanels));
        assert_eq!(stored.len(), 2 * 32 * 12);
        let depth = 12;
        for row in 0..depth {
            let (tap, ch) = (row / 3, row % 3);
            for col in 0..64 {
                let got = stored[(col / 32 * depth + row) * 32 + col % 32];
                let want = if col < 33 { (col * 1000 + ch * 100 + tap / 2 * 10 + tap % 2) as f64 } else { 0.0 };
                assert_eq!(got, want, "row {row} column {col}");
            }
        }
    }

    #[test]
    fn winograd_takes_stride_1_3x3_convolutions_with_enough_channels_and_outputs() {
        let attrs = |stride: u64, dilation: u64, groups: u64| ConvAttrs { stride: vec![stride; 2], padding: vec![(1, 1); 2], dilation: vec![dilation; 2], groups };
        // cnn's: 64 -> 64 channels at 32x32, 64 tiles an image: 2 blocks, 2 slots
        let slot = 36 * 32 * (64 + 64 + 2);
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 64, 32, 32], &[64, 64, 3, 3], &[1, 64, 32, 32]), Some(2 * slot));
        // at batch 32, 64 blocks in at most 8 slots
        assert_eq!(winograd(&attrs(1, 1, 1), &[32, 64, 32, 32], &[64, 64, 3, 3], &[32, 64, 32, 32]), Some(8 * slot));
        // 4 tiles of 4x4 in one block of 32 columns: no, but 8 images of them fill it
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 64, 8, 8], &[64, 64, 3, 3], &[1, 64, 8, 8]), None);
        assert_eq!(winograd(&attrs(1, 1, 1), &[8, 64, 8, 8], &[64, 64, 3, 3], &[8, 64, 8, 8]), Some(36 * 32 * 130));
        // 16 x 17 outputs: 20 tiles, some sticking out
        assert_eq!(winograd(&attrs(1, 1, 1), &[1, 16, 18, 19], &[20, 16, 3, 3], &[1, 20, 16, 17]), Some(36 * 32 * (16 + 20 + 2)));
        for (a, x, w, out) in [
            (attrs(2, 1, 1), [1, 64, 32, 32], [64, 64, 3, 3], [1, 64, 16, 16]),
            (attrs(1, 2, 1), [1, 64, 32, 32], [64, 64, 3, 3], [1, 64, 30, 30]),
            (attrs(1, 1, 2), [1, 64, 32, 32], [64, 32, 3, 3], [1, 64, 32, 32]),
            (attrs(1, 1, 1), [1, 64, 32, 32], [64, 64, 5, 5], [1, 64, 30, 30]),
            (attrs(1, 1, 1), [1, 3, 32, 32], [64, 3, 3, 3], [1, 64, 32, 32]),
            (attrs(1, 1, 1), [1, 64, 32, 32], [8, 64, 3, 3], [1, 8, 32, 32]),
        ] {
            assert_eq!(winograd(&a, &x, &w, &out), None, "{a:?} {x:?} {w:?}");
        }
    }
}
