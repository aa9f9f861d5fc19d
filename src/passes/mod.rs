//! Passes over the IR. Each pass is a function `&mut Graph -> Result<()>` in its own
//! file; the pipeline is a plain list, and the verifier runs after each pass.

pub mod shape;
pub mod simplify;

use crate::error::Result;
use crate::ir::{verify::verify, Graph};

/// A named pass, as listed by `--print-after`.
pub type Pass = (&'static str, fn(&mut Graph) -> Result<()>);

/// The passes run after the frontend, in order.
pub const PIPELINE: &[Pass] = &[("shape", shape::run), ("simplify", simplify::run)];

/// Runs `passes` in order, verifying the graph after each; `after` sees the graph
/// after every pass (for `--print-after`).
pub fn run_pipeline(graph: &mut Graph, passes: &[Pass], mut after: impl FnMut(&str, &Graph)) -> Result<()> {
    verify(graph)?;
    for (name, pass) in passes {
        pass(graph)?;
        verify(graph)?;
        after(name, graph);
    }
    Ok(())
}
