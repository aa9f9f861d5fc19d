//! Every composite op (`ir::Composite`) on every target whose tools are here: one graph
//! with an output per composite, compiled and run by each target (CUDA and Metal under
//! emulation), where each composite is either the target's own function (what it
//! claims) or the `decompose` pass's primitives, and compared with the interpreter. A
//! new composite is covered without a line here.

use std::collections::BTreeMap;
use std::path::Path;

use mithrilc::backend::{Backend, BuildConfig};
use mithrilc::codegen::TARGETS;
use mithrilc::ir::{Composite, Dtype};
use mithrilc::tensor::Tensor;

use crate::common;

/// Values where the forms differ most: zero, tiny, moderate and large of both signs.
const X: [f64; 15] = [-30.0, -8.0, -3.0, -1.0, -0.5, -1e-3, -1e-7, 0.0, 1e-7, 1e-3, 0.5, 1.0, 3.0, 8.0, 30.0];

/// The graph: input `x` and each composite of it as an output named after it.
fn graph() -> mithrilc::ir::Graph {
    let n = X.len();
    let mut text = format!("graph composites {{\n  %0 = input \"x\" : f32[{n}]\n");
    for (i, c) in Composite::ALL.iter().enumerate() {
        text.push_str(&format!("  %{} = {} %0 : f32[{n}]\n", i + 1, c.name()));
    }
    for (i, c) in Composite::ALL.iter().enumerate() {
        text.push_str(&format!("  output \"{}\" = %{}\n", c.name(), i + 1));
    }
    text.push_str("}\n");
    mithrilc::ir::parse::parse(&text).unwrap()
}

/// How `target` builds here, or why it cannot.
fn build(target: &dyn Backend) -> Result<BuildConfig, String> {
    let plain = BuildConfig::default();
    let emulated = BuildConfig { emulate: true, ..Default::default() };
    let make = |cc: &str| if common::have(cc) && common::have("make") { Ok(()) } else { Err(format!("make and {cc} are needed")) };
    match target.name() {
        _ if target.capabilities().in_process.is_some() => Ok(plain),
        "c" => make("cc").map(|_| plain),
        "cuda" | "metal" => make("c++").map(|_| emulated),
        "ggml" => mithrilc::build::ggml().map(|_| plain).map_err(|e| e.to_string()),
        "xla" => mithrilc::codegen::xla::toolchain::python().map(|_| plain).map_err(|e| e.to_string()),
        other => Err(format!("no way to run the {other} target in this test")),
    }
}

#[test]
fn every_composite_matches_the_interpreter_on_every_target() {
    let g = graph();
    let feeds: BTreeMap<String, Tensor> = [("x".to_string(), Tensor::new(Dtype::F32, vec![X.len() as u64], X.to_vec()))].into_iter().collect();
    let want = mithrilc::interp::run(&g, &feeds).unwrap();
    let graphs = mithrilc::pipeline::Graphs { forward: g, backward: None };
    let mut bad = Vec::new();
    for &target in TARGETS {
        let build = match build(target) {
            Ok(b) => b,
            Err(why) => {
                common::skip(&format!("the {} target: {}", target.name(), why.replace('\n', " ")));
                continue;
            }
        };
        let got = match mithrilc::exec::run_once(target, &graphs, &feeds, Path::new("composites.ir"), &build, Default::default()) {
            Ok(got) => got,
            Err(e) => {
                bad.push(format!("{}: {e}", target.name()));
                continue;
            }
        };
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            for ((x, a), b) in X.iter().zip(&g.data).zip(&w.data) {
                // f32 functions of the targets' libraries against the interpreter's f64
                // kernel rounded: a few units in the last place, or 1e-6 near zero.
                if !((a - b).abs() <= 1e-6 + 1e-5 * b.abs()) {
                    bad.push(format!("{} {name}({x}): {a:e}, the interpreter {b:e}", target.name()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
