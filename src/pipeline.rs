//! The compiler below its command line: load a model through [`frontend::load`], run
//! the graph passes for the forward and (with gradients) backward graphs
//! ([`Graphs`]), and hand them to a target ([`emit`]) or to something that runs them
//! ([`crate::exec`]). The CLI and any embedder call this; nothing here knows about
//! arguments or printing results.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::backend::{self, Backend, EmitOptions, Emitted, Quantize, WeightsMode};
use crate::error::{Error, Result};
use crate::frontend;
use crate::ir::{self, Graph};
use crate::passes::{self, autodiff::Wrt};
pub use crate::passes::Graphs;

/// A model to load: its file, what the frontend is told, the gradients asked for.
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    pub path: PathBuf,
    /// The model's Mithril JSON when it is held in memory rather than read from `path`
    /// (which then only names it: an embedder's model dict).
    pub text: Option<std::sync::Arc<str>>,
    pub frontend: frontend::Options,
    /// The gradients to derive (`--grad`).
    pub grad: Wrt,
    /// Passes after which the IR is printed to stderr (`--print-after`).
    pub print_after: Vec<String>,
}

/// A loaded model: its graphs after the passes, the parameter values the model file
/// carries (ONNX's initializers), and the frontend's warnings about it (those about
/// gradients only when gradients were asked for).
pub struct Loaded {
    pub graphs: Graphs,
    pub weights: indexmap::IndexMap<String, crate::tensor::RawTensor>,
    pub warnings: Vec<String>,
}

/// Reads the model and runs the graph passes.
pub fn load(spec: &ModelSpec) -> Result<Loaded> {
    check_pass_names(&spec.print_after)?;
    let frontend::Model { graph, weights } = match &spec.text {
        Some(text) => frontend::mithril::load_text(&spec.path, text, &spec.frontend)?,
        None => frontend::load(&spec.path, &spec.frontend)?,
    };
    let training = spec.grad != Wrt::None;
    let warnings = graph.warnings.iter().filter(|w| training || !w.gradient_only).map(|w| format!("{}: {}", spec.path.display(), w.message)).collect();
    let graphs = Graphs::new(graph, &spec.grad, |name, g| {
        if spec.print_after.iter().any(|p| p == name) {
            eprint!("// after {name}\n{}", ir::print::print(g));
        }
    })?;
    Ok(Loaded { graphs, weights, warnings })
}

/// Refuses a `--print-after` that names no pass.
fn check_pass_names(print_after: &[String]) -> Result<()> {
    let names = crate::codegen::pass_names();
    match print_after.iter().find(|p| !names.contains(&p.as_str())) {
        Some(p) => Err(Error::usage(format!("--print-after {p}: no such pass (passes: {})", names.join(", ")))),
        None => Ok(()),
    }
}

/// Hands the graphs to `target`: checks that it can compile every node and takes
/// every option asked for (asking its capabilities), then emits its files. `opts.source`
/// names the model in messages.
pub fn emit(target: &dyn Backend, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
    let graphs = for_target(target, graphs, &opts.print_after)?;
    check_target_graphs(target, &graphs, opts)?;
    target.emit(&graphs, opts).map_err(|e| e.context(&opts.source))
}

/// The graphs as `target` receives them: every composite it does not claim rewritten
/// into primitives by the `decompose` pass and simplified again (verified after), or the graphs
/// themselves when there is none. The main graph is printed after it when
/// `print_after` names it.
pub fn for_target<'g>(target: &dyn Backend, graphs: &'g Graphs, print_after: &[String]) -> Result<Cow<'g, Graphs>> {
    let claims = |c| target.claims(c);
    let needed = |g: &Graph| passes::decompose::needed(g, claims);
    let graphs = if needed(&graphs.forward) || graphs.backward.as_ref().is_some_and(needed) {
        let mut own = graphs.clone();
        for g in std::iter::once(&mut own.forward).chain(own.backward.as_mut()) {
            passes::decompose::run(g, claims)?;
            // The rules' scalars merged, and what their identities make of them.
            passes::simplify::run(g)?;
            ir::verify::verify(g)?;
        }
        Cow::Owned(own)
    } else {
        Cow::Borrowed(graphs)
    };
    if print_after.iter().any(|p| p == passes::DECOMPOSE) {
        eprint!("// after {}\n{}", passes::DECOMPOSE, ir::print::print(graphs.main()));
    }
    Ok(graphs)
}

/// The program whose offsets and layouts the target's `weights.bin` has, as [`emit`]
/// lowers it (after the same checks); `None` for a target that writes no
/// `weights.bin`.
pub fn weights_program(target: &dyn Backend, graphs: &Graphs, opts: &EmitOptions) -> Result<Option<crate::lower::Program>> {
    let graphs = for_target(target, graphs, &opts.print_after)?;
    check_target_graphs(target, &graphs, opts)?;
    target.weights_program(&graphs, opts).map_err(|e| e.context(&opts.source))
}

/// What [`emit`] checks before the target writes anything.
pub fn check(target: &dyn Backend, graphs: &Graphs, opts: &EmitOptions) -> Result<()> {
    check_target_graphs(target, &*for_target(target, graphs, &[])?, opts)
}

/// [`check`] of the graphs [`for_target`] made.
fn check_target_graphs(target: &dyn Backend, graphs: &Graphs, opts: &EmitOptions) -> Result<()> {
    check_max_symbols(&opts.max, graphs.main())?;
    backend::check_supported(target, graphs.main()).map_err(|e| e.context(&opts.source))?;
    let can = target.capabilities();
    backend::check_precision(target, opts.precision)?;
    backend::check_gemm(target, opts.gemm)?;
    backend::accumulator(target, opts.accumulate)?;
    backend::check_quantize(target, opts.quantize)?;
    backend::check_weights_mode(target, opts.weights_mode)?;
    if opts.quantize != Quantize::F32 && graphs.backward.is_some() {
        return Err(Error::usage(format!(
            "--quantize {} with --grad: gradients are taken of the f32 weights, which a training step updates in place",
            opts.quantize.name()
        ))
        .note("compile the trained model without --grad to store its weights narrow"));
    }
    if opts.quantize != Quantize::F32 && opts.weights_mode == WeightsMode::Safetensors {
        return Err(Error::usage(format!(
            "--quantize {} with --weights safetensors: the demo reads the parameters from the safetensors file at run time and does not narrow them",
            opts.quantize.name()
        ))
        .note("give --weights file (the default), embed or embed-c for a library with narrowed weights"));
    }
    if !opts.mesh.is_empty() && !can.shards {
        return Err(Error::usage(format!("--mesh partitions over several devices: the {} target runs on one (give --target xla)", target.name())));
    }
    if let Some(cpu) = &opts.cpu {
        if !can.picks_cpu {
            return Err(Error::usage(format!("--cpu is for the C target; the {} target's code does not depend on the host CPU's vector extensions", target.name())));
        }
        // It becomes a compiler flag in the Makefile: one word, nothing a shell reads.
        let word = cpu.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c)) && cpu.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !word {
            return Err(Error::usage(format!("--cpu wants a -march value such as native, haswell or x86-64-v3 (letters, digits and . _ + -), not {cpu:?}")));
        }
    }
    if opts.triple.is_some() && !can.cross_builds {
        return Err(Error::usage(format!("--triple is for the C target; the {} target builds for the host", target.name())));
    }
    Ok(())
}

/// Every `--max` names a symbolic dimension of the model.
fn check_max_symbols(max: &BTreeMap<String, u64>, graph: &Graph) -> Result<()> {
    let symbols: BTreeSet<&str> = graph.nodes.iter().flat_map(|n| n.ty.shape.symbols()).collect();
    for (name, n) in max {
        if !symbols.contains(name.as_str()) {
            let known = if symbols.is_empty() {
                "it has none; make one with --shape, e.g. --shape input=B,784".to_string()
            } else {
                format!("its symbols: {}", symbols.iter().copied().collect::<Vec<_>>().join(", "))
            };
            return Err(Error::usage(format!("--max {name}={n}: the model has no symbolic dimension {name} ({known})")));
        }
    }
    Ok(())
}

/// The IR of `graph`, then its counts of inputs, parameters and ops, and its FLOPs.
pub fn describe(graph: &Graph) -> String {
    let mut out = crate::ir::print::print(graph);
    out.push('\n');
    out.push_str(&summary(graph));
    out
}

fn summary(graph: &Graph) -> String {
    let mut s = String::new();
    use crate::backend::group;
    use crate::ir::Op;
    use std::fmt::Write;
    let count = |op: Op| graph.nodes.iter().filter(|n| n.op == op).count();
    let ops = graph.nodes.iter().filter(|n| !matches!(n.op, Op::Input | Op::Param | Op::Constant(_))).count();
    let _ = writeln!(s, "inputs: {}, parameters: {}, ops: {}, outputs: {}", count(Op::Input), count(Op::Param), ops, graph.outputs.len());
    let params = ir::stats::param_count(graph).map_or("symbolic".to_string(), group);
    let _ = writeln!(s, "parameter elements: {params}");
    let syms: Vec<String> = {
        let mut v: Vec<String> = graph.nodes.iter().flat_map(|n| n.ty.shape.symbols().into_iter().map(str::to_string)).collect();
        v.sort();
        v.dedup();
        v
    };
    let flops = match syms.as_slice() {
        [] => ir::stats::flops(graph, &|_| 1).map(group),
        [one] => {
            // Linear in the symbol (a batch size) when f(2) = 2 f(1).
            let f1 = ir::stats::flops(graph, &|_| 1);
            let f2 = ir::stats::flops(graph, &|_| 2);
            match (f1, f2) {
                (Some(a), Some(b)) if b == 2 * a => Some(format!("{} × {one}", group(a))),
                (Some(a), _) => Some(format!("{} at {one} = 1", group(a))),
                _ => None,
            }
        }
        many => ir::stats::flops(graph, &|_| 1).map(|a| format!("{} with {} = 1", group(a), many.join(" = "))),
    };
    let _ = writeln!(s, "FLOPs (2 per multiply-add of matmul/conv): {}", flops.unwrap_or_else(|| "overflow".into()));
    s
}
