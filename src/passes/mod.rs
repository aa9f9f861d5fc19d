//! Passes. Each pass is one function in its own file, and each pipeline is a plain
//! list. Graph passes (`&mut Graph -> Result<()>`) run first, with the verifier after
//! each; the graph is then lowered to a [`Program`] (one kernel per op), and program
//! passes fuse its kernels and plan its memory, the program verifier
//! (`lower::verify`) after lowering and after each. Fusion and planning work on the
//! program because they decide about buffers and views, which only exist there.

pub mod attention;
pub mod autodiff;
pub mod decompose;
pub mod fuse;
pub mod memory;
pub mod rows;
pub mod shape;
pub mod simplify;


use crate::error::Result;
use crate::ir::{verify::verify, Graph};
use crate::lower::Program;

/// What the graph passes are asked to do beyond their fixed job (most take nothing).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The gradients `autodiff` appends (none by default).
    pub grad: autodiff::Wrt,
}

/// A named pass, as listed by `--print-after`.
pub type Pass = (&'static str, fn(&mut Graph, &Options) -> Result<()>);

/// The passes run after the frontend, in order. `autodiff` runs on checked shapes, and
/// the backward graph it appends is simplified with the forward one.
pub const PIPELINE: &[Pass] = &[
    ("shape", |g, _| shape::run(g)),
    ("autodiff", |g, o| autodiff::run(g, &o.grad)),
    ("simplify", |g, _| simplify::run(g)),
];

/// The graph pass that runs once per target, after [`PIPELINE`], on the graphs it is
/// handed (`pipeline::emit`): [`decompose`], with the composites the target claims.
pub const DECOMPOSE: &str = "decompose";

/// Runs `passes` in order, verifying the graph after each; `after` sees the graph
/// after every pass (for `--print-after`).
pub fn run_pipeline(graph: &mut Graph, passes: &[Pass], options: &Options, mut after: impl FnMut(&str, &Graph)) -> Result<()> {
    verify(graph)?;
    for (name, pass) in passes {
        pass(graph, options)?;
        verify(graph)?;
        after(name, graph);
    }
    Ok(())
}

/// What a compiled library is built from: the model's graph and, with gradients, the
/// same graph with its backward pass appended. Both are after the pass pipeline.
#[derive(Clone)]
pub struct Graphs {
    pub forward: Graph,
    pub backward: Option<Graph>,
}

impl Graphs {
    /// The graph that computes everything asked for: the backward graph when there is
    /// one (it computes the outputs too).
    pub fn main(&self) -> &Graph {
        self.backward.as_ref().unwrap_or(&self.forward)
    }

    /// The two pipelines over one frontend graph; `after` sees the passes of the
    /// backward graph when there is one, else of the forward graph.
    pub fn new(graph: Graph, grad: &autodiff::Wrt, mut after: impl FnMut(&str, &Graph)) -> Result<Graphs> {
        let none = Options::default();
        if *grad == autodiff::Wrt::None {
            let mut forward = graph;
            run_pipeline(&mut forward, PIPELINE, &none, &mut after)?;
            return Ok(Graphs { forward, backward: None });
        }
        let mut forward = graph.clone();
        run_pipeline(&mut forward, PIPELINE, &none, |_, _| {})?;
        let mut backward = graph;
        run_pipeline(&mut backward, PIPELINE, &Options { grad: grad.clone() }, after)?;
        Ok(Graphs { forward, backward: Some(backward) })
    }
}

/// A named pass over a lowered program, given the options it was lowered with (what
/// the target's library computes, how its weights are stored).
pub type ProgramPass = (&'static str, fn(&mut Program, &crate::lower::Options) -> Result<()>);

/// The passes run after lowering and the target's program passes, in order.
pub const PROGRAM_PIPELINE: &[ProgramPass] = &[("fuse", |p, _| fuse::run(p)), ("attention", |p, o| attention::run(p, &o.library)), ("rows", |p, o| rows::run(p, &o.library)), ("memory", |p, _| memory::run(p))];

/// Every pass name, in the order they run (for `--print-after`), with a target's
/// program passes.
pub fn names(target_passes: &[ProgramPass]) -> Vec<&'static str> {
    let graph = PIPELINE.iter().map(|(n, _)| *n).chain([DECOMPOSE]);
    graph.chain(target_passes.iter().chain(PROGRAM_PIPELINE).map(|(n, _)| *n)).collect()
}

/// Lowers a graph (for the target's library, in `opts`), runs the target's program
/// passes (laying the program out for its library), then [`PROGRAM_PIPELINE`],
/// verifying the program after lowering and after each pass; `after` sees the program
/// after every pass.
pub fn compile(graph: &Graph, opts: &crate::lower::Options, target_passes: &[ProgramPass], mut after: impl FnMut(&str, &Program)) -> Result<Program> {
    let mut p = crate::lower::lower(graph, opts)?;
    crate::lower::verify::verify(&p, false)?;
    let mut planned = false;
    for (name, pass) in target_passes.iter().chain(PROGRAM_PIPELINE) {
        run_program_pass(&mut p, (name, *pass), opts, &mut planned)?;
        after(name, &p);
    }
    Ok(p)
}

/// Runs one program pass with the options the program was lowered with, and verifies
/// its result; `planned` records that the arena has been planned (by `memory`), from
/// which point the plan is verified too.
pub fn run_program_pass(p: &mut Program, (name, pass): ProgramPass, opts: &crate::lower::Options, planned: &mut bool) -> Result<()> {
    pass(p, opts)?;
    *planned |= name == "memory";
    crate::lower::verify::verify(p, *planned)
}
