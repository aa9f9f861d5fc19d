//! What the program targets (C, CUDA, Metal) share as `Backend`s: lowering the
//! forward and backward programs with the target's library and passes, what a node
//! they cannot compile lacks, a GPU target's `emit`, and the `--report` sizes of a
//! program.

use crate::backend::{group, EmitOptions, Emitted, Entry, Precision};
use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::lower::Program;
use crate::passes::{self, Graphs};

/// The programs of a program target: the forward pass and, with `--grad`, the backward
/// pass, each lowered with `lower` (the target's library) and run through
/// `target_passes` and the shared program passes, printed after those named in
/// `print_after`.
pub fn lower_programs(
    graphs: &Graphs,
    lower: &crate::lower::Options,
    target_passes: &[passes::ProgramPass],
    print_after: &[String],
) -> Result<(Program, Option<Program>)> {
    let one = |g: &Graph| {
        passes::compile(g, lower, target_passes, |name, p| {
            if print_after.iter().any(|n| n == name) {
                eprint!("// after {name}\n{}", crate::lower::print::print(p));
            }
        })
    };
    Ok((one(&graphs.forward)?, graphs.backward.as_ref().map(one).transpose()?))
}

/// Why a program target whose kernels compute in the element types `supports` accepts
/// cannot compile node `v` (its [`Backend::lacks`]).
pub fn program_target_lacks(graph: &Graph, v: ValueId, supports: impl Fn(crate::ir::Dtype) -> bool) -> Option<String> {
    let dtype = graph.ty(v).dtype;
    if !supports(dtype) {
        return Some(format!("no {dtype} arithmetic"));
    }
    crate::lower::lacking(graph, v)
}

/// What a GPU target writes, as files by name: the forward (and backward) program,
/// given the target's kernel library and its renderer.
pub type DeviceEmit = fn(&Program, Option<&Program>, &super::c::Options, Precision) -> Result<Vec<(String, Vec<u8>)>>;

/// A GPU target's [`Backend::emit`]: the programs lowered with the target's `library`
/// (every weight row-major: its kernels read any strides) and rendered by `emit`.
pub fn emit_device(graphs: &Graphs, opts: &EmitOptions, library: crate::lower::Library, emit: DeviceEmit) -> Result<Emitted> {
    let (forward, backward) = device_programs(graphs, opts, library)?;
    let c = super::c::Options::of(opts);
    let files = emit(&forward, backward.as_ref(), &c, opts.precision)?;
    Ok(program_emitted(files, &forward, backward.as_ref()))
}

/// The programs a GPU target's [`emit_device`] renders, lowered with its `library`.
pub fn device_programs(graphs: &Graphs, opts: &EmitOptions, library: crate::lower::Library) -> Result<(Program, Option<Program>)> {
    let lower = crate::lower::Options { max: opts.max.clone(), library, ..Default::default() };
    lower_programs(graphs, &lower, &[], &opts.print_after)
}

/// What a program target's `emit` returns for the programs it wrote as `files`: the
/// memory report of each, and the entry its demo runs (the backward pass when there is
/// one).
pub fn program_emitted(files: Vec<(String, Vec<u8>)>, forward: &Program, backward: Option<&Program>) -> Emitted {
    let mut report = memory_report(forward);
    let mut sizes = memory_sizes(forward);
    if let Some(b) = backward {
        report.push_str("backward pass:\n");
        report.push_str(&memory_report(b));
        sizes["backward"] = memory_sizes(b);
    }
    let program = backward.unwrap_or(forward);
    let ports = |ports: &[crate::lower::Port]| ports.iter().map(|p| p.name.clone()).collect();
    let output_types = program.outputs.iter().map(|p| program.buffers[p.buf.0].dtype).collect();
    let entry = Entry { name: super::names::identifier(&program.name), inputs: ports(&program.inputs), outputs: ports(&program.outputs), output_types };
    Emitted { files, entry, report, sizes }
}

/// [`memory_report`]'s sizes as JSON (`--report=json`), in bytes; with weights stored
/// narrow, also what they would take in f32 (`weights_f32_bytes`).
pub fn memory_sizes(p: &Program) -> serde_json::Value {
    let mut sizes = serde_json::json!({"kernels": p.steps.len(), "weights_bytes": p.weights_size, "arena_bytes": p.arena_size, "peak_live_bytes": p.peak_live});
    if let Some(wide) = f32_weights_size(p) {
        sizes["weights_f32_bytes"] = wide.into();
    }
    sizes
}

/// `kernels`, `weights`, `arena` lines of `--report` for one program (the weights'
/// f32 size beside theirs when some are stored narrow).
pub fn memory_report(p: &Program) -> String {
    let ratio = if p.peak_live == 0 { 1.0 } else { p.arena_size as f64 / p.peak_live as f64 };
    let narrowed: Vec<&str> = p.weights.iter().filter(|w| w.stored != crate::lower::Stored::F32).map(|w| w.stored.name()).collect();
    let wide = match (f32_weights_size(p), narrowed.first()) {
        (Some(wide), Some(name)) => format!(" ({} of them as {name}; {} bytes in f32)", narrowed.len(), group(wide)),
        _ => String::new(),
    };
    format!(
        "kernels: {}\nweights: {} bytes{wide}\narena: {} bytes (peak live {} bytes, ratio {ratio:.3})\n",
        p.steps.len(),
        group(p.weights_size),
        group(p.arena_size),
        group(p.peak_live)
    )
}

/// The bytes the weights blob would take with every weight in f32 (in the same
/// layouts), when some weight is stored narrow.
fn f32_weights_size(p: &Program) -> Option<u64> {
    if p.weights.iter().all(|w| w.stored == crate::lower::Stored::F32) {
        return None;
    }
    p.weights.iter().try_fold(0u64, |offset, w| {
        let b = &p.buffers[w.buf.0];
        let n = if w.shape.iter().product::<u64>() == 0 { 0 } else { b.len };
        Some(crate::lower::align(offset.checked_add(n.checked_mul(b.dtype.size() as u64)?)?))
    })
}

