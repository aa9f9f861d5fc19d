//! The stable text form of the IR, used by `mithrilc inspect`, `--print-after` and tests.
//!
//! One node per line: `%id = op args {attributes} : type`, then a `//` comment with the
//! value's name and the model node it came from. Output is deterministic.

use std::fmt::Write;

use super::*;

/// Renders the whole graph.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "graph {} {{", graph.name);
    for v in graph.ids() {
        out.push_str("  ");
        out.push_str(&print_node(graph, v));
        out.push('\n');
    }
    for o in &graph.outputs {
        let _ = writeln!(out, "  {} {:?} = %{}", if o.loss { "loss" } else { "output" }, o.name, o.value.0);
    }
    out.push_str("}\n");
    out
}

/// Renders one node, without indentation or newline.
pub fn print_node(graph: &Graph, v: ValueId) -> String {
    let node = graph.node(v);
    let mut s = format!("%{} = {}", v.0, node.op.name());
    match node.op {
        Op::Input | Op::Param => {
            let _ = write!(s, " {:?}", node.name.as_deref().unwrap_or(""));
        }
        _ => {
            for (i, a) in node.args.iter().enumerate() {
                let _ = write!(s, "{}%{}", if i == 0 { " " } else { ", " }, a.0);
            }
        }
    }
    let attrs = node.op.attributes(graph);
    if !attrs.is_empty() {
        let _ = write!(s, " {{{}}}", attrs.join(", "));
    }
    let _ = write!(s, " : {}", node.ty);
    let named = !matches!(node.op, Op::Input | Op::Param);
    let comment: Vec<String> = [
        node.name.as_ref().filter(|_| named).map(|n| format!("{n:?}")),
        node.origin.as_ref().map(|o| format!("from {o}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !comment.is_empty() {
        let _ = write!(s, "  // {}", comment.join(", "));
    }
    s
}

/// A constant's elements as `[1.0, 2.5]`, each the shortest text that reads back as the
/// same value of the constant's dtype (the program's text form prints them too).
pub fn constant_values(t: &crate::tensor::Constant) -> String {
    let items: Vec<String> = t
        .values()
        .map(|x| match t.dtype() {
            Dtype::F64 => format!("{x:?}"),
            d if d.is_float() => format!("{:?}", x as f32),
            _ => format!("{x}"),
        })
        .collect();
    format!("[{}]", items.join(", "))
}
