//! Graph targets: ggml (one library call per node) and XLA HLO (one instruction per
//! node) write the shape-checked [`Graph`] itself, not a lowered `Program`: their
//! libraries fuse, schedule and plan memory, so the IR's whole ops (MatMul, Conv,
//! Softmax) are what they want. A graph target is a [`GraphWriter`] driven by
//! [`write_graph`], plus a `Backend` (in `crate::backend`) that checks support with the
//! writer's [`GraphWriter::lacks`], writes the weights in the target's own format
//! (GGUF, safetensors) and builds and runs the result.

use crate::error::Result;
use crate::ir::{Graph, ValueId};

/// What a graph target says about and writes for each node.
pub trait GraphWriter {
    /// Why the target has no translation for node `v`, if it has none (reported for
    /// every node at once, before anything is written: `backend::check_supported`).
    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String>;
    /// Writes node `v`; every node it takes as an argument has been written.
    fn node(&mut self, graph: &Graph, v: ValueId) -> Result<()>;
    /// Writes the model's outputs ([`Graph::outputs`]), once every node has been.
    fn outputs(&mut self, graph: &Graph) -> Result<()>;
}

/// For each model input that a gather reads as its indices, the fewest and the most
/// rows the gathers it feeds index. A graph target whose library does not check
/// indices (XLA clamps them, ggml aborts) checks these inputs against `[-rows, rows)`
/// before computing, as the interpreter and the C target refuse an index out of range.
pub fn gather_index_rows(graph: &Graph) -> std::collections::BTreeMap<ValueId, (u64, u64)> {
    let mut rows = std::collections::BTreeMap::new();
    for v in graph.ids() {
        let node = graph.node(v);
        let crate::ir::Op::Gather { axis } = node.op else { continue };
        if !matches!(graph.node(node.args[1]).op, crate::ir::Op::Input) {
            continue;
        }
        let Some(crate::ir::Dim::Known(n)) = graph.ty(node.args[0]).shape.dims().get(axis).cloned() else { continue };
        let r = rows.entry(node.args[1]).or_insert((n, n));
        *r = (r.0.min(n), r.1.max(n));
    }
    rows
}

/// Writes every node of `graph` in definition order (arguments first), then its
/// outputs.
pub fn write_graph(graph: &Graph, writer: &mut impl GraphWriter) -> Result<()> {
    for v in graph.ids() {
        writer.node(graph, v)?;
    }
    writer.outputs(graph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::ir::{parse::parse, Op};

    /// A writer of a tiny expression language that knows inputs and binary ops only.
    #[derive(Default)]
    struct Sexpr {
        text: Vec<String>,
    }

    impl GraphWriter for Sexpr {
        fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
            (!matches!(graph.node(v).op, Op::Input | Op::Binary(_))).then(|| "no such instruction".to_string())
        }
        fn node(&mut self, graph: &Graph, v: ValueId) -> Result<()> {
            let n = graph.node(v);
            let args: Vec<String> = n.args.iter().map(|a| format!("t{}", a.0)).collect();
            let what = match &n.op {
                Op::Input => format!("(input {:?})", n.name.clone().unwrap_or_default()),
                Op::Binary(_) => format!("({} {})", n.op.name(), args.join(" ")),
                _ => return Err(Error::internal(self.lacks(graph, v).unwrap_or_default())),
            };
            self.text.push(format!("(let t{} {what})", v.0));
            Ok(())
        }
        fn outputs(&mut self, graph: &Graph) -> Result<()> {
            let outs: Vec<String> = graph.outputs.iter().map(|o| format!("({:?} t{})", o.name, o.value.0)).collect();
            self.text.push(format!("(outputs {})", outs.join(" ")));
            Ok(())
        }
    }

    #[test]
    fn nodes_are_written_after_their_arguments_then_the_outputs() {
        let g = parse(
            "graph g {\n  %0 = input \"x\" : f32[2]\n  %1 = input \"y\" : f32[2]\n  %2 = mul %0, %1 : f32[2]\n  %3 = add %2, %0 : f32[2]\n  output \"z\" = %3\n}\n",
        )
        .unwrap();
        let mut w = Sexpr::default();
        write_graph(&g, &mut w).unwrap();
        assert_eq!(
            w.text.join("\n"),
            "(let t0 (input \"x\"))\n(let t1 (input \"y\"))\n(let t2 (mul t0 t1))\n(let t3 (add t2 t0))\n(outputs (\"z\" t3))"
        );
        let unary = parse("graph g {\n  %0 = input \"x\" : f32[2]\n  %1 = relu %0 : f32[2]\n  output \"z\" = %1\n}\n").unwrap();
        assert_eq!(w.lacks(&unary, ValueId(1)).as_deref(), Some("no such instruction"));
        assert!(write_graph(&unary, &mut Sexpr::default()).is_err());
    }
}
