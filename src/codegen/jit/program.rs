//! Running a compiled program: the driver walks the program's steps in order, as the
//! C target's entry function does, running each loop kernel's task through
//! `mr_run` (the caller's threads split it), calling runtime-c for the library kernels
//! (products, convolutions, pooling, softmax, dequantization) with the JIT's epilogues,
//! and refusing a run whose gather indices are out of range before the kernel runs.
//! The driver is Rust, and the same for every code generator: only the kernels are
//! compiled.

use std::ffi::c_void;

use super::runtime::{self, MrEpilogue, MrEpilogueFn, MrTask, MrThreads};
use crate::codegen::c::library::Window2d;
use crate::codegen::c::{ERROR_INDEX, ERROR_SIZE};
use crate::error::{Error, Result};
use crate::ir::PoolKind;
use crate::lower::{Kernel, Layout, Program, Step, Storage, Stored, View};

/// What the JIT's functions read: the address of each buffer of the program (by
/// buffer index) and the symbols' run-time values.
#[repr(C)]
pub struct Ctx {
    pub bufs: *const *mut u8,
    pub dims: *const i64,
}

/// `check<k>(ctx)`: nonzero when a gather index is out of range.
pub type CheckFn = unsafe extern "C" fn(*const Ctx) -> i32;

/// One step's compiled functions.
#[derive(Default, Clone, Copy)]
pub struct StepCode {
    pub task: Option<MrTask>,
    pub epilogue: Option<MrEpilogueFn>,
    pub check: Option<CheckFn>,
}

/// A program with its compiled functions and its constants.
pub struct Runner {
    pub p: Program,
    pub steps: Vec<StepCode>,
    consts: Vec<Aligned>,
    /// Each buffer's layout and stored form, where it is a weight.
    weights: Vec<Option<(Layout, Stored)>>,
}

impl Runner {
    pub fn new(p: Program, steps: Vec<StepCode>) -> Result<Runner> {
        let consts = p
            .consts
            .iter()
            .map(|c| {
                let mut a = Aligned::zeroed(c.numel() as u64 * c.dtype().size() as u64)?;
                crate::tensor::write_elements(c.values(), c.dtype(), a.bytes_mut());
                Ok(a)
            })
            .collect::<Result<_>>()?;
        let mut weights = vec![None; p.buffers.len()];
        for w in &p.weights {
            weights[w.buf.0] = Some((w.layout, w.stored));
        }
        Ok(Runner { p, steps, consts, weights })
    }

    /// Runs the program on the caller's buffers: `weights` (the blob), `inputs` and
    /// `outputs` (row-major at the run-time sizes), `arena` (`arena_size` bytes), the
    /// symbols' values `dims`, the threads `threads` (or NULL). Returns 0, or
    /// [`ERROR_SIZE`] for a symbol's value outside 1 to its maximum, [`ERROR_INDEX`] for
    /// a gather index out of range (kernels before it have run).
    ///
    /// # Safety
    /// Every pointer must be valid for the program's sizes at these `dims`, and
    /// 64-byte aligned where the program lays out buffers in it.
    pub unsafe fn run(&self, weights: *const u8, inputs: &[*const u8], outputs: &[*mut u8], arena: *mut u8, dims: &[i64], threads: *const MrThreads) -> i32 {
        let p = &self.p;
        if dims.len() != p.symbols.len() || dims.iter().zip(&p.symbols).any(|(&d, (_, max))| d < 1 || d as u64 > *max) {
            return ERROR_SIZE;
        }
        let bases: Vec<*mut u8> = p
            .buffers
            .iter()
            .map(|b| match b.storage {
                Storage::Input(k) => inputs[k] as *mut u8,
                Storage::Output(k) => outputs[k],
                // SAFETY (all three): offsets within the blob and the arena (by the caller's contract).
                Storage::Weight { offset } => unsafe { weights.add(offset as usize) as *mut u8 },
                Storage::Arena { offset } => unsafe { arena.add(offset as usize) },
                Storage::Const(k) => self.consts[k].ptr,
                Storage::Local => std::ptr::null_mut(),
            })
            .collect();
        let ctx = Ctx { bufs: bases.as_ptr(), dims: dims.as_ptr() };
        let value = |s: &str| p.symbols.iter().position(|(n, _)| n == s).map(|i| dims[i] as u64);
        for (step, code) in p.steps.iter().zip(&self.steps) {
            if let Some(check) = code.check {
                // SAFETY: the check reads the buffers the context points at.
                if unsafe { check(&ctx) } != 0 {
                    return ERROR_INDEX;
                }
            }
            let ext = extents(step, &value);
            let call = Call { r: self, step, ext: &ext, bases: &bases, ctx: &ctx, threads, code: *code };
            // SAFETY: as this function's.
            unsafe { call.run() };
        }
        0
    }
}

/// The extents of a step's domain at the symbols' run-time values.
fn extents(step: &Step, value: &dyn Fn(&str) -> Option<u64>) -> Vec<i64> {
    let domain = step.kernel.domain();
    (0..domain.len()).map(|d| step.dims.get(d).and_then(Option::as_ref).and_then(|e| e.eval(value)).unwrap_or(domain[d]) as i64).collect()
}

/// One step being run.
struct Call<'a> {
    r: &'a Runner,
    step: &'a Step,
    ext: &'a [i64],
    bases: &'a [*mut u8],
    ctx: &'a Ctx,
    threads: *const MrThreads,
    code: StepCode,
}

impl Call<'_> {
    /// The address of element `at` of `v`'s buffer, an f32 buffer (the runtime's).
    fn f32_at(&self, v: &View, at: i64) -> *mut f32 {
        (self.bases[v.buf.0] as *mut f32).wrapping_offset((v.offset + at) as isize)
    }

    fn epilogue(&self, n: i64) -> Option<MrEpilogue> {
        self.code.epilogue.map(|func| MrEpilogue { func, ctx: self.ctx as *const Ctx as *const c_void, n })
    }

    unsafe fn run(&self) {
        let ep = self.epilogue(0);
        let ep_ptr = ep.as_ref().map_or(std::ptr::null(), |e| e as *const MrEpilogue);
        let ext = self.ext;
        match &self.step.kernel {
            Kernel::Map { out, .. } | Kernel::Reduce { out, .. } | Kernel::ArgReduce { out, .. } => {
                let task = self.code.task.expect("a loop kernel's task");
                let domain = self.step.kernel.domain();
                let rank = out.shape.len();
                let split = (0..rank).find(|&d| domain[d] != 1 || self.step.dims.get(d).is_some_and(Option::is_some));
                let extent = split.map_or(1, |d| ext[d]);
                let cost = out.shape.iter().product::<u64>() * crate::codegen::c::program::work_per_element(&self.step.kernel);
                // SAFETY: the task reads the context's buffers, in bounds for these extents.
                unsafe { runtime::mr_run(self.threads, task, self.ctx as *const Ctx as *mut c_void, extent, cost as f64) };
            }
            Kernel::Gemm { c, .. } if c.shape.len() > 2 => {
                // A task over the flattened batch, split across threads when it pays; a
                // task that gets the whole batch splits each product instead.
                let rank = c.shape.len();
                let count: i64 = ext[..rank - 2].iter().product();
                let cost = self.step.kernel.domain().iter().product::<u64>() * 2;
                // SAFETY: `batch` reads this call, alive until mr_run returns.
                unsafe { runtime::mr_run(self.threads, batch, self as *const Call as *mut c_void, count, cost as f64) };
            }
            Kernel::Gemm { .. } => unsafe { self.gemm(&[], ep_ptr, self.threads) },
            Kernel::Conv { x, w, out, attrs, scratch, .. } => {
                let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
                let ((h, wd), (kh, kw), (oh, ow)) = (win.spatial(x), win.spatial(w), win.spatial(out));
                let wtype = self.r.weights[w.buf.0].map_or(Stored::F32, |(_, s)| s) as i32;
                let wp = self.bases[w.buf.0].wrapping_offset(w.offset as isize * 4) as *const c_void;
                let (xp, yp) = (self.f32_at(x, 0), self.f32_at(out, 0));
                let (n, ch, o) = (ext[0], x.shape[1] as i64, w.shape[0] as i64);
                let i = |v: u64| v as i64;
                match scratch {
                    Some(s) if self.r.weights[w.buf.0] == Some((Layout::ConvPanels, Stored::Int8)) => unsafe {
                        runtime::mr_conv2d_i8_mt(
                            self.threads, xp, wp, yp, n, ch, i(h), i(wd), o, i(kh), i(kw), i(oh), i(ow), i(win.stride.0), i(win.stride.1),
                            i(win.pad.0), i(win.pad.1), i(win.dilation.0), i(win.dilation.1), self.f32_at(s, 0) as *mut c_void, ep_ptr,
                        )
                    },
                    Some(s) => unsafe {
                        runtime::mr_conv2d_winograd_q_mt(self.threads, xp, wp, wtype, yp, n, ch, i(h), i(wd), o, i(oh), i(ow), i(win.pad.0), i(win.pad.1), self.f32_at(s, 0), ep_ptr)
                    },
                    None => unsafe {
                        runtime::mr_conv2d_q_mt(
                            self.threads, xp, wp, wtype, yp, n, ch, i(h), i(wd), o, i(kh), i(kw), i(oh), i(ow),
                            i(win.stride.0), i(win.stride.1), i(win.pad.0), i(win.pad.1), i(win.dilation.0), i(win.dilation.1), attrs.groups as i64, ep_ptr,
                        )
                    },
                }
            }
            Kernel::Pool { x, out, attrs } => {
                let lead: i64 = ext[..x.shape.len() - attrs.kernel.len()].iter().product();
                let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
                let ((h, wd), (oh, ow), (kh, kw)) = (win.spatial(x), win.spatial(out), win.pair(&attrs.kernel, 1));
                let i = |v: u64| v as i64;
                unsafe {
                    runtime::mr_pool2d_f32_mt(
                        self.threads, self.f32_at(x, 0), self.f32_at(out, 0), 1, lead, i(h), i(wd), i(kh), i(kw), i(oh), i(ow),
                        i(win.stride.0), i(win.stride.1), i(win.pad.0), i(win.pad.1), i(win.dilation.0), i(win.dilation.1), i32::from(attrs.kind == PoolKind::Max),
                    )
                }
            }
            Kernel::Softmax { x, out, axis } => {
                let outer: i64 = ext[..*axis].iter().product();
                let inner: u64 = x.shape[axis + 1..].iter().product();
                unsafe { runtime::mr_softmax_f32_mt(self.threads, self.f32_at(x, 0), self.f32_at(out, 0), outer, x.shape[*axis] as i64, inner as i64) }
            }
            Kernel::Dequantize { w, out, stored } => {
                let src = self.bases[w.buf.0] as *const c_void;
                unsafe { runtime::mr_dequantize(*stored as i32, src, w.numel() as i64, self.f32_at(out, 0)) }
            }
            // (lowering forms attention only for a library that has it: the C one has none)
            Kernel::Attention { .. } => unreachable!("the jit's library has no attention kernel"),
            Kernel::Rows { .. } => unreachable!("the jit renders no row kernels"),
        }
    }

    /// A matrix product at batch indices `at` (none for a 2-d one): `mr_sgemm_mt`, or
    /// the panels' kind for a weight stored in column panels (int8 ones `mr_gemm_i8_mt`,
    /// with the part of the scratch for this batch index; where the C target makes one
    /// call for a whole batch, the same bits).
    unsafe fn gemm(&self, at: &[i64], ep: *const MrEpilogue, threads: *const MrThreads) {
        let Kernel::Gemm { a, b, c, scratch, .. } = &self.step.kernel else { unreachable!("a product") };
        let rank = c.shape.len();
        let ext = self.ext;
        let (m, n, k) = (ext[rank - 2], ext[rank - 1], ext[rank]);
        let operand = |v: &View| {
            let off: i64 = at.iter().zip(&v.strides).map(|(i, s)| i * s).sum();
            (self.f32_at(v, off), v.strides[rank - 2], v.strides[rank - 1])
        };
        let ((pa, ra, ca), (pc, rc, cc)) = (operand(a), operand(c));
        match self.r.weights[b.buf.0] {
            Some((Layout::Panels, Stored::Int8)) => {
                let scratch = scratch.as_ref().expect("c-layout gives an int8 product its scratch");
                // the flattened batch index, at the maximal shape
                let flat: i64 = at.iter().zip(crate::lower::contiguous_strides(&c.shape[..rank - 2])).map(|(i, s)| i * s).sum();
                let per = crate::lower::int8_scratch_bytes(c.shape[rank - 2], a.shape[rank - 1]).expect("c-layout checked the scratch's size");
                let part = self.bases[scratch.buf.0].wrapping_offset(flat as isize * per as isize) as *mut c_void;
                unsafe { runtime::mr_gemm_i8_mt(threads, 1, m, n, k, 1.0, pa, 0, ra, ca, self.bases[b.buf.0] as *const c_void, 0.0, pc, 0, rc, cc, part, ep) }
            }
            Some((Layout::Panels, Stored::F32)) => unsafe {
                runtime::mr_sgemm_panels_mt(threads, m, n, k, 1.0, pa, ra, ca, self.bases[b.buf.0] as *const f32, 0.0, pc, rc, cc, ep)
            },
            Some((Layout::Panels, stored)) => unsafe {
                runtime::mr_sgemm_panels_q_mt(threads, m, n, k, 1.0, pa, ra, ca, self.bases[b.buf.0] as *const c_void, stored as i32, 0.0, pc, rc, cc, ep)
            },
            _ => {
                let (pb, rb, cb) = operand(b);
                unsafe { runtime::mr_sgemm_mt(threads, m, n, k, 1.0, pa, ra, ca, pb, rb, cb, 0.0, pc, rc, cc, ep) }
            }
        }
    }
}

/// A batched product's task over `[begin, end)` of its flattened batch (`ctx` is the
/// [`Call`]): one product per batch index, at the run-time batch extents; the
/// epilogue's n is the index in the batch at its maximal extents, as it unflattens it.
unsafe extern "C" fn batch(ctx: *mut c_void, begin: i64, end: i64) {
    // SAFETY: `ctx` is the Call that mr_run was given.
    let call = unsafe { &*(ctx as *const Call) };
    let Kernel::Gemm { c, .. } = &call.step.kernel else { return };
    let rank = c.shape.len();
    let lead = &call.ext[..rank - 2];
    let count: i64 = lead.iter().product();
    let threads = if begin == 0 && end == count { call.threads } else { std::ptr::null() };
    let strides = crate::lower::contiguous_strides(&c.shape[..rank - 2]);
    let mut at = vec![0i64; rank - 2];
    for bi in begin..end {
        let mut rest = bi;
        for d in (0..rank - 2).rev() {
            at[d] = rest % lead[d];
            rest /= lead[d];
        }
        let ep = call.epilogue(at.iter().zip(&strides).map(|(i, s)| i * s).sum());
        let ep_ptr = ep.as_ref().map_or(std::ptr::null(), |e| e as *const MrEpilogue);
        // SAFETY: as the caller's of mr_run.
        unsafe { call.gemm(&at, ep_ptr, threads) };
    }
}

/// Zeroed memory aligned to 64 bytes (the alignment the program's layouts assume).
pub struct Aligned {
    pub ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory, owned.
unsafe impl Send for Aligned {}
unsafe impl Sync for Aligned {}

impl Aligned {
    const ALIGN: usize = 64;

    /// `len` zero bytes, or a user error when this machine cannot allocate them.
    pub fn zeroed(len: u64) -> Result<Aligned> {
        let too_big = || Error::user(format!("the model needs {} bytes in one block, more than this machine can allocate", crate::backend::group(len)));
        let size = usize::try_from(len).map_err(|_| too_big())?.max(1);
        let layout = std::alloc::Layout::from_size_align(size, Self::ALIGN).map_err(|_| too_big())?;
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(too_big());
        }
        Ok(Aligned { ptr, len: len as usize })
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes from `ptr` are this buffer's.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as in bytes_mut.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), Self::ALIGN).expect("the layout it was allocated with");
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}
