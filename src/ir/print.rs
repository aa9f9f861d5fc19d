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
    let attrs = attributes(graph, &node.op);
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

fn attributes(graph: &Graph, op: &Op) -> Vec<String> {
    fn list<T: std::fmt::Display>(v: &[T]) -> String {
        let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        format!("[{}]", items.join(", "))
    }
    fn pairs(v: &[(u64, u64)]) -> String {
        let items: Vec<String> = v.iter().map(|(a, b)| format!("({a}, {b})")).collect();
        format!("[{}]", items.join(", "))
    }
    match op {
        Op::Input
        | Op::Param
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Where
        | Op::MatMul
        | Op::StopGradient => vec![],
        Op::Constant(c) => match graph.consts.get(c.0 as usize) {
            Some(t) if t.numel() <= 8 => vec![format!("value = {}", constant_values(t))],
            _ => vec![format!("id = {}", c.0)],
        },
        Op::Cast { to } => vec![format!("to = {to}")],
        Op::Conv(a) => vec![
            format!("stride = {}", list(&a.stride)),
            format!("padding = {}", pairs(&a.padding)),
            format!("dilation = {}", list(&a.dilation)),
            format!("groups = {}", a.groups),
        ],
        Op::Pool(a) => vec![
            format!("kernel = {}", list(&a.kernel)),
            format!("stride = {}", list(&a.stride)),
            format!("padding = {}", pairs(&a.padding)),
            format!("dilation = {}", list(&a.dilation)),
        ],
        Op::Reduce { axes, keepdim, .. } => vec![format!("axes = {}", list(axes)), format!("keepdim = {keepdim}")],
        Op::ArgReduce { axis, keepdim, .. } => vec![
            format!("axis = {}", axis.map_or("none".to_string(), |a| a.to_string())),
            format!("keepdim = {keepdim}"),
        ],
        Op::Variance { axes, keepdim, correction } => vec![
            format!("axes = {}", list(axes)),
            format!("keepdim = {keepdim}"),
            format!("correction = {correction}"),
        ],
        Op::Softmax { axis } | Op::Concat { axis } | Op::Gather { axis } => vec![format!("axis = {axis}")],
        Op::Reshape { .. } | Op::BroadcastTo { .. } => vec![],
        Op::Transpose { perm } => vec![format!("perm = {}", list(perm))],
        Op::Slice { ranges } => {
            let items: Vec<String> = ranges
                .iter()
                .map(|r| {
                    let o = |v: Option<i64>| v.map_or(String::new(), |x| x.to_string());
                    if r.step == 1 { format!("{}:{}", o(r.start), o(r.stop)) } else { format!("{}:{}:{}", o(r.start), o(r.stop), r.step) }
                })
                .collect();
            vec![format!("ranges = [{}]", items.join(", "))]
        }
        Op::Iota { axis, .. } => vec![format!("axis = {axis}")],
        Op::Pad { pads, value } => vec![format!("pads = {}", pairs(pads)), format!("value = {value}")],
    }
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
