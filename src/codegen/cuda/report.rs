//! `compile --target cuda --report`: every launch of the model on a named GPU, as the
//! kernel library's plans make them ([`launches`], no GPU or nvcc needed), and once built
//! what ptxas says of every kernel at sm_90 (registers, shared memory, spills), from
//! nvcc's `-Xptxas -v`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use super::plan::{self, Call, Gpu};
use super::Cuda;
use crate::backend::Precision;
use crate::codegen::cstyle::kernel::{buffers_of, warp_reduce, warp_rows};
use crate::codegen::c::library::Window2d;
use crate::codegen::cstyle::Renderer;
use crate::error::{Error, ErrorKind, Result};
use crate::lower::{Kernel, Program};

/// One launch as the report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The step's index in its program (`kernel 3` in the generated source).
    pub step: usize,
    /// What runs: `matmul 128x768x3072`, `conv 64<-64 3x3 on 1x32x32`, `loop`, ...
    pub what: String,
    /// The library kernel's plan (matrix products, convolutions, pooling, softmax,
    /// attention).
    pub plan: Option<plan::Plan>,
    /// Blocks and threads a block.
    pub blocks: Option<i64>,
    pub threads: Option<i64>,
    pub flops: f64,
    pub bytes: f64,
}

impl Launch {
    /// Blocks over the GPU's SMs: below 1, SMs idle.
    pub fn waves(&self, gpu: &Gpu) -> Option<f64> {
        self.blocks.map(|b| b as f64 / f64::from(gpu.sms))
    }
    /// The roofline's time in microseconds on `gpu`, and whether compute bounds it.
    pub fn roofline(&self, gpu: &Gpu) -> (f64, bool) {
        let compute = self.flops / (gpu.f32_tflops * 1e6);
        let memory = self.bytes / (gpu.dram_tb_s * 1e6);
        (compute.max(memory), compute >= memory)
    }
}

/// Every launch of `p` with its symbols at their maxima, as the kernel library plans
/// them on `gpu` (`precision`: the tensor-core kernels where it is not f32), split-K's
/// partial sums within `scratch` floats.
pub fn launches(p: &Program, gpu: &Gpu, precision: Precision, scratch: i64) -> Vec<Launch> {
    let names: Vec<String> = p.buffers.iter().map(|b| b.name.clone()).collect();
    let r = Renderer { p, d: &Cuda::F32, names: &names, loads: None };
    let at_max = |s: &str| p.symbols.iter().find(|(n, _)| n == s).map(|(_, m)| *m);
    let mut out = Vec::new();
    for (i, step) in p.steps.iter().enumerate() {
        let bytes = buffers_of(p, &step.kernel).iter().map(|b| p.buffers[b.0].bytes() as f64).sum::<f64>();
        let ext = plan::extents(step, &at_max);
        let launch = |what: String, blocks: Option<i64>, threads: Option<i64>| Launch { step: i, what, plan: None, blocks, threads, flops: 0.0, bytes };
        if let Some(call) = Call::of(step, &at_max) {
            let pl = call.plan(precision != Precision::F32, gpu.sms, plan::all_kernels(), scratch);
            let what = match call {
                Call::Gemm { m, n, k, nbatch, .. } if nbatch > 1 => format!("matmul {nbatch}x {m}x{n}x{k}"),
                Call::Gemm { m, n, k, .. } => format!("matmul {m}x{n}x{k}"),
                Call::Conv { n, c, h, w, o, kh, kw, .. } => format!("conv {c}->{o} {kh}x{kw} on {n}x{h}x{w}"),
            };
            out.push(Launch { plan: Some(pl), blocks: Some(pl.blocks), threads: Some(i64::from(pl.threads)), flops: call.flops(), bytes, ..launch(what, None, None) });
            continue;
        }
        let count = |dims: usize| ext[..dims].iter().product::<u64>() as i64;
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let library = |what: String, pl: plan::Plan, flops: f64| Launch { plan: Some(pl), blocks: Some(pl.blocks), threads: Some(i64::from(pl.threads)), flops, ..launch(what, None, None) };
        out.push(match &step.kernel {
            Kernel::Reduce { out, .. } if warp_reduce(&r, &step.kernel).is_some() => {
                launch("reduction, a warp an output".to_string(), Some(plan::stride_blocks(count(out.shape.len()), plan::threads() / 32)), Some(plan::threads()))
            }
            Kernel::Rows { out, cols, stats, .. } => {
                let rows = count(out.shape.len() - cols);
                let what = format!("rows, {} statistic(s) then a map", stats.len());
                match warp_rows(&r, &step.kernel) {
                    Some(_) => launch(format!("{what}, a warp a row"), Some(plan::stride_blocks(rows, plan::threads() / 32)), Some(plan::threads())),
                    None => launch(format!("{what}, a thread a row"), Some(plan::stride_blocks(rows, plan::threads())), Some(plan::threads())),
                }
            }
            Kernel::Map { out, .. } | Kernel::Reduce { out, .. } | Kernel::ArgReduce { out, .. } => {
                let what = if matches!(step.kernel, Kernel::Map { .. }) { "elementwise" } else { "reduction, a thread an output" };
                launch(what.to_string(), Some(plan::stride_blocks(count(out.shape.len()), plan::threads())), Some(plan::threads()))
            }
            Kernel::Pool { x, out, attrs } => {
                let win = Window2d::new(&attrs.stride, &attrs.padding, &attrs.dilation);
                let (oh, ow) = win.spatial(out);
                library("pooling".to_string(), plan::pool(count(x.shape.len() - attrs.kernel.len()), i(oh), i(ow)), 0.0)
            }
            Kernel::Softmax { x, axis, .. } => {
                let (n, inner) = (x.shape[*axis], x.shape[axis + 1..].iter().product::<u64>());
                library(format!("softmax over {n}"), plan::softmax(count(*axis), i(n), i(inner)), 0.0)
            }
            Kernel::Attention { .. } => {
                let [m, n, d, e, nbatch] = plan::attention_sizes(step, &at_max).expect("an attention step");
                let pl = plan::attention(m, n, d, e, nbatch, precision != Precision::F32, gpu.sms, plan::all_attention());
                library(format!("attention {nbatch}x {m}x{n}, d {d} e {e}"), pl, 2.0 * (m * n) as f64 * ((d + e) * nbatch) as f64)
            }
            Kernel::Gemm { .. } | Kernel::Conv { .. } | Kernel::Dequantize { .. } => launch("library".to_string(), None, None),
        });
    }
    out
}

/// [`launches`] for `--report=json`: the GPU, and a row per launch.
pub fn launches_json(p: &Program, gpu: &Gpu, precision: Precision, scratch: i64) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = launches(p, gpu, precision, scratch)
        .iter()
        .map(|l| {
            let (us, compute) = l.roofline(gpu);
            serde_json::json!({
                "step": l.step,
                "what": l.what,
                "kernel": l.plan.map(|pl| pl.describe()),
                "product": l.plan.is_some_and(|pl| pl.is_product()),
                "blocks": l.blocks,
                "threads": l.threads,
                "waves": l.waves(gpu),
                "flops": l.flops,
                "bytes": l.bytes,
                "bound": if compute { "compute" } else { "memory" },
                "roofline_us": us,
            })
        })
        .collect();
    serde_json::json!({"gpu": gpu.name, "sms": gpu.sms, "launches": rows})
}

/// [`launches`] as `--report` prints them.
pub fn launches_text(title: &str, p: &Program, gpu: &Gpu, precision: Precision, scratch: i64) -> String {
    let mut s = format!("{title} on an {} ({} SMs, {} TFLOP/s f32, {} TB/s), symbols at their maxima:\n", gpu.model, gpu.sms, gpu.f32_tflops, gpu.dram_tb_s);
    let _ = writeln!(s, "  {:>4}  {:<34} {:<36} {:>7} {:>6} {:>6} {:>9} {:>10}  {:<8} {:>8}", "step", "what", "kernel", "blocks", "thr", "waves", "GFLOP", "MB", "bound", "est. us");
    let (mut total, mut under) = (0.0, 0);
    for l in launches(p, gpu, precision, scratch) {
        let kernel = l.plan.map_or(String::new(), |pl| pl.describe());
        let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
        let waves = l.waves(gpu).map_or("-".to_string(), |w| format!("{w:.2}"));
        let (us, compute) = l.roofline(gpu);
        total += us;
        if l.plan.is_some_and(|pl| pl.is_product()) && l.waves(gpu).is_some_and(|w| w < FULL) {
            under += 1;
        }
        let flops = if l.flops > 0.0 { format!("{:.3}", l.flops / 1e9) } else { "-".to_string() };
        let _ = writeln!(
            s,
            "  {:>4}  {:<34} {:<36} {:>7} {:>6} {:>6} {:>9} {:>10.3}  {:<8} {:>8.2}",
            l.step,
            l.what,
            kernel,
            opt(l.blocks),
            opt(l.threads),
            waves,
            flops,
            l.bytes / 1e6,
            if compute { "compute" } else { "memory" },
            us
        );
    }
    let _ = writeln!(s, "  roofline total {total:.1} us; {under} matrix product(s) or convolution(s) fill under {:.0}% of the SMs", FULL * 100.0);
    s
}

/// The waves from which a launch counts as filling the GPU, "about one wave": 85% of the
/// SMs busy (a plan may rightly take 120 blocks on 132 SMs over two waves of 144).
pub const FULL: f64 = 0.85;

/// One kernel as ptxas compiled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u64,
    pub shared_bytes: u64,
    pub spill_stores: u64,
    pub spill_loads: u64,
}

/// Compiles `<name>.cu` in `dir` for sm_90 with ptxas's report on, and returns the
/// report's lines for `--report`.
pub fn ptxas_report(dir: &Path, name: &str) -> Result<String> {
    let nvcc = crate::build::nvcc()?;
    let out = Command::new(&nvcc)
        .current_dir(dir)
        .args(["-cubin", "-std=c++17", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-o", "/dev/null"])
        .arg(format!("{name}.cu"))
        .output()
        .map_err(|e| Error::new(ErrorKind::Toolchain, format!("cannot run {}: {e}", nvcc.display())))?;
    if !out.status.success() {
        return Err(Error::new(ErrorKind::Toolchain, format!("nvcc -Xptxas -v failed: {}", String::from_utf8_lossy(&out.stderr))));
    }
    let kernels = parse(&String::from_utf8_lossy(&out.stderr));
    let mut s = String::from("kernels at sm_90 (ptxas): registers, shared memory, spills\n");
    for k in &kernels {
        let spills = if k.spill_stores + k.spill_loads == 0 { "no spills".to_string() } else { format!("spills {} B stored, {} B loaded", k.spill_stores, k.spill_loads) };
        s.push_str(&format!("  {}: {} registers, {} B shared, {spills}\n", demangle(&k.name), k.registers, k.shared_bytes));
    }
    Ok(s)
}

/// The kernels of ptxas's `-v` output, in its order.
pub fn parse(text: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    let number_before = |line: &str, unit: &str| -> u64 {
        line.find(unit).and_then(|at| line[..at].split_whitespace().last()).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources { name, registers: 0, shared_bytes: 0, spill_stores: 0, spill_loads: 0 });
        } else if let Some(k) = out.last_mut() {
            if line.contains("spill stores") {
                k.spill_stores = number_before(line, "bytes spill stores");
                k.spill_loads = number_before(line, "bytes spill loads");
            } else if line.contains("Used ") && line.contains("registers") {
                k.registers = number_before(line, "registers");
                k.shared_bytes = number_before(line, "bytes smem");
            }
        }
    }
    out
}

/// A kernel's name as its source spells it: `c++filt`'s reading of a mangled C++ name
/// (templates), the name itself when it is not mangled or c++filt is missing.
fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    match Command::new("c++filt").arg(name).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_verbose_output_is_read_per_kernel() {
        let text = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_' for 'sm_90'
ptxas info    : Function properties for _Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 127 registers, used 1 barriers, 24576 bytes smem
ptxas info    : Compile time = 114.841 ms
ptxas info    : Compiling entry function 'linear_k1' for 'sm_90'
ptxas info    : Function properties for linear_k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 380 bytes cmem[0]
";
        let got = parse(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], KernelResources { name: "_Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_".into(), registers: 127, shared_bytes: 24576, spill_stores: 8, spill_loads: 12 });
        assert_eq!(got[1], KernelResources { name: "linear_k1".into(), registers: 10, shared_bytes: 0, spill_stores: 0, spill_loads: 0 });
    }
}
