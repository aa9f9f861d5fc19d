//! Large models compile, and compile the same way as before: tens of thousands of
//! nodes in a chain, side by side, or as Linear layers with their gradients. No time
//! limit is asserted (the machines are shared); a pass that is quadratic again makes
//! this test take minutes instead of about a second, and `benches/compile_time.rs`
//! measures the slope.

#[path = "../benches/common/models.rs"]
mod models;

use mithrilc::cli;
use mithrilc::passes::autodiff::Wrt;
use models::Kind;

/// Compiles `n` nodes of `kind` to C source; returns `--report`'s text and the model's
/// C source.
fn compile(kind: Kind, n: usize, grad: bool) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("big.json");
    std::fs::write(&model, models::model(kind, n)).unwrap();
    let args = cli::CompileArgs {
        model: cli::ModelArgs {
            model,
            shapes: vec![models::INPUT_SHAPE.to_string()],
            grad: if grad { Wrt::AllParams } else { Wrt::None },
            ..Default::default()
        },
        out: Some(dir.path().join("out")),
        emit: mithrilc::cli::Emit::Source,
        report: true,
        ..Default::default()
    };
    let report = cli::compile(&args).unwrap();
    let source = std::fs::read_to_string(dir.path().join("out/big.c")).unwrap();
    (report.replace(&dir.path().display().to_string(), "DIR"), source)
}

#[test]
fn a_chain_of_20000_elementwise_nodes_compiles_into_fused_kernels_in_place() {
    let (report, source) = compile(Kind::Chain, 20_000, false);
    // At most 64 expression nodes per kernel: 20,000 ops (and the input's loads) fuse
    // into 488 loops, each writing over the last one's buffer.
    assert_eq!(report, "wrote DIR/out (24 files)\nkernels: 488\nweights: 0 bytes\narena: 128 bytes (peak live 128 bytes, ratio 1.000)\n");
    assert!(source.contains("submodels.m_19999 (Multiply)"));
}

#[test]
fn ten_thousand_products_summed_pairwise_compile_with_the_arena_at_the_bound() {
    let (report, _) = compile(Kind::Wide, 20_000, false);
    assert_eq!(report, "wrote DIR/out (24 files)\nkernels: 646\nweights: 0 bytes\narena: 8,064 bytes (peak live 8,064 bytes, ratio 1.000)\n");
}

#[test]
fn a_backward_pass_through_2000_linear_layers_keeps_its_arena_at_the_bound() {
    // Every activation is live until its gradient, all of them at once: the plan that
    // had to look at each live buffer for each placement.
    let (report, source) = compile(Kind::Linear, 4_000, true);
    assert!(source.contains("big_backward("), "no backward pass");
    assert_eq!(
        report,
        "wrote DIR/out (24 files)\nkernels: 2000\nweights: 640,000 bytes\narena: 256 bytes (peak live 256 bytes, ratio 1.000)\n\
         backward pass:\nkernels: 10001\nweights: 640,000 bytes\narena: 512,256 bytes (peak live 512,256 bytes, ratio 1.000)\n"
    );
}
