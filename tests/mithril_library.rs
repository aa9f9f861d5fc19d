//! The classes of Mithril's model library and TrainModel regularizations against
//! Mithril's own numbers: cases copied from Mithril's `models_directed_test.json`
//! (a model, its outputs and gradients for given output cotangents) and
//! `integration_directed_test.json` (a TrainModel's `final_cost` and gradients;
//! the harness's `output_specs`/`regularizations` written as the TrainModel JSON that
//! `train_model_to_dict` gives), in `tests/mithril_library/cases.json`. All in f64,
//! compared at a relative tolerance of 1e-10.
//!
//! As in Mithril's harness, every entry of a case's `inputs` is a trainable parameter
//! (`static_keys` are data); `output_grads` are the cotangents of the outputs, and an
//! output without one gets a zero cotangent.

use std::collections::{BTreeMap, BTreeSet};

use mithrilc::frontend::mithril::{self, Options};
use mithrilc::interp;
use mithrilc::ir::{Dtype, Op, Shape, TensorType};
use mithrilc::passes::{self, autodiff::{grad_name, output_grad_name, Wrt}};
use mithrilc::tensor::Tensor;
use serde_json::Value;

fn cases() -> serde_json::Map<String, Value> {
    let text = include_str!("mithril_library/cases.json");
    serde_json::from_str(text).unwrap()
}

/// A nested JSON array (or a number) as shape and row-major elements.
fn flatten(v: &Value, shape: &mut Vec<u64>, data: &mut Vec<f64>, depth: usize) {
    match v {
        Value::Array(items) => {
            if shape.len() == depth {
                shape.push(items.len() as u64);
            }
            for it in items {
                flatten(it, shape, data, depth + 1);
            }
        }
        other => data.push(other.as_f64().unwrap_or_else(|| panic!("not a number: {other}"))),
    }
}

fn array(v: &Value) -> (Vec<u64>, Vec<f64>) {
    let (mut shape, mut data) = (Vec::new(), Vec::new());
    flatten(v, &mut shape, &mut data, 0);
    (shape, data)
}

fn close(label: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{label}: {got:?} against Mithril's {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-10 * w.abs().max(1.0), "{label}[{i}]: {g} against Mithril's {w}\n got {got:?}\nwant {want:?}");
    }
}

/// Runs case `name` and compares its outputs and gradients with Mithril's.
fn check(name: &str) {
    let all = cases();
    let case = &all[name];
    let model = serde_json::to_string(&case["model"]).unwrap();
    let empty = serde_json::Map::new();
    let trainable = case["inputs"].as_object().unwrap();
    let data = case.get("static_keys").and_then(Value::as_object).unwrap_or(&empty);
    let feeds: BTreeMap<String, (Vec<u64>, Vec<f64>)> = trainable.iter().chain(data).map(|(k, v)| (k.clone(), array(v))).collect();
    // The frontend's dtype of each input (integer class indices stay integers), then
    // floats as f64.
    let mut opts = Options::default();
    for (k, (shape, _)) in &feeds {
        opts.shapes.insert(k.clone(), Shape::known(shape));
    }
    let probe = mithril::load_str(&model, "case.json", "case", &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut dtypes = BTreeMap::new();
    for v in probe.inputs().chain(probe.params()) {
        let n = probe.node(v);
        let d = if n.ty.dtype.is_float() { Dtype::F64 } else { n.ty.dtype };
        dtypes.insert(n.name.clone().unwrap(), d);
    }
    for (k, (shape, _)) in &feeds {
        let dtype = dtypes.get(k).copied().unwrap_or(Dtype::F64);
        opts.known_types.insert(k.clone(), TensorType::new(dtype, Shape::known(shape)));
    }
    let mut graph = mithril::load_str(&model, "case.json", "case", &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    for node in &mut graph.nodes {
        if node.op == Op::Input && node.name.as_ref().is_some_and(|n| trainable.contains_key(n)) {
            node.op = Op::Param;
        }
    }
    let wanted = case["results"]["grad"].as_object().unwrap();
    let popts = passes::Options { grad: Wrt::Params(wanted.keys().cloned().collect()) };
    let outputs: Vec<(String, TensorType)> = graph.outputs.iter().map(|o| (o.name.clone(), graph.ty(o.value).clone())).collect();
    passes::run_pipeline(&mut graph, passes::PIPELINE, &popts, |_, _| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut inputs: BTreeMap<String, Tensor> =
        feeds.iter().map(|(k, (shape, data))| (k.clone(), Tensor::new(dtypes.get(k).copied().unwrap_or(Dtype::F64), shape.clone(), data.clone()))).collect();
    let cotangents = case.get("output_grads").and_then(Value::as_object).unwrap_or(&empty);
    for (out, ty) in &outputs {
        let shape = ty.shape.as_known().unwrap();
        let r = match cotangents.get(out) {
            Some(v) => array(v).1,
            None => vec![0.0; shape.iter().product::<u64>() as usize],
        };
        inputs.insert(output_grad_name(out), Tensor::new(ty.dtype, shape, r));
    }
    let have: Vec<String> = graph.inputs().filter_map(|v| graph.node(v).name.clone()).collect();
    inputs.retain(|k, _| have.contains(k) || graph.params().any(|p| graph.node(p).name.as_deref() == Some(k.as_str())));
    let results: BTreeMap<String, Tensor> = interp::run(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: {e}")).into_iter().collect();
    for (out, want) in case["results"]["eval"].as_object().unwrap() {
        let got = results.get(out).unwrap_or_else(|| panic!("{name}: no output {out} among {:?}", results.keys()));
        close(&format!("{name}: {out}"), &got.data, &array(want).1);
    }
    for (key, want) in wanted {
        let got = &results[&grad_name(key)];
        close(&format!("{name}: gradient of {key}"), &got.data, &array(want).1);
    }
}

macro_rules! cases {
    ($($test:ident => $case:literal;)*) => {
        $( #[test] fn $test() { check($case); } )*
    };
}

cases! {
    rbf_kernel => "models/test_RBFKernel_1";
    rbf_kernel_2 => "models/test_RBFKernel_2";
    polynomial_kernel => "models/test_PolynomialKernel";
    logistic_regression => "models/test_logistic_2_no_ignore";
    encoder_distance_matrix => "models/test_distance_matrix_1";
    encoder_distance_matrix_4 => "models/test_distance_matrix_4";
    polynomial_features => "models/test_poly_features_1";
    polynomial_features_3 => "models/test_poly_features_3";
    polynomial_features_4 => "models/test_poly_features_4";
    polynomial_regression => "models/test_polynomial_2D_Degree_2";
    rnn_cell => "models/test_rnn_cell_1";
    rnn_cell_2 => "models/test_rnn_cell_2";
    lstm_cell => "models/test_lstm_cell_1";
    mds_core => "models/test_mds_core_2";
    mds_core_norm_3 => "models/test_mds_core_3";
    mds_core_all_zero => "models/test_mds_core_4";
    mds_powered_distances => "models/test_mds_2";
    train_mds_points => "train/test_mds_1";
    norm_modifier => "models/test_norm_modifier_1";
    norm_modifier_falling => "models/test_norm_modifier_2";
    norm_modifier_negative => "models/test_norm_modifier_3";
    distance_matrix => "models/test_distance_matrix_1_as_DistanceMatrix";
    lstm_cell_body => "models/test_lstm_cell_1_as_LSTMCellBody";
    layer_norm_rank_2 => "models/test_layernorm_1";
    layer_norm_rank_2_three_features => "models/test_layernorm_2";
    train_mds_core_tiny_distances => "train/test_mds_base_7";
    train_mds_core_zero_predictions => "train/test_mds_base_2";
    train_polynomial_regression => "train/test_polynomial_1";
    l2_regularization => "train/test_linear_10";
    l2_regularization_by_pattern => "train/pattern_weight_or_bias";
    l1_regularization => "train/test_polynomial_9";
    l2_regularization_polynomial => "train/test_polynomial_10";
    quadratic_form_regularizer_kernelized_svm => "train/test_kernelizedSVM_1";
    quadratic_form_regularizer_polynomial_kernel => "train/test_kernelizedSVM_2";
    linear_svm_l2 => "train/test_linearSVM_1";
    logistic_regression_l1 => "train/test_logistic_6";
    two_regularizations => "train/test_linear_with_2_reg";
    two_regularized_keys => "train/test_linear_11_two_key_reg";
}

/// Every case of `cases.json` is run by a test above.
#[test]
fn every_case_runs() {
    let src = include_str!("mithril_library.rs");
    let missing: Vec<String> = cases().keys().filter(|k| !src.contains(&format!("=> \"{k}\";"))).cloned().collect();
    assert!(missing.is_empty(), "cases.json cases no test runs: {missing:?}");
}

/// The forms `dict_to_model` reads that `model_to_dict` does not write: a bare class
/// name for a child, lower-case class names, child ids other than `m_<i>`, a bare
/// string connection (a key name), and an IOKey's `differentiable`.
#[test]
fn dict_to_model_forms() {
    let model = r#"{"name": "Model",
        "submodels": {"m1": {"name": "linear", "args": {"dimension": 2}}, "m2": "Tanh"},
        "connections": {"m1": {"input": "x", "weight": {"key": {"name": "w", "differentiable": true}}, "output": "h"},
                        "m2": {"input": "h", "output": "y"}}}"#;
    let mut opts = Options::default();
    opts.known_types.insert("x".into(), TensorType::new(Dtype::F64, Shape::known(&[1, 3])));
    opts.known_types.insert("w".into(), TensorType::new(Dtype::F64, Shape::known(&[2, 3])));
    opts.known_types.insert("bias".into(), TensorType::new(Dtype::F64, Shape::known(&[2])));
    let graph = mithril::load_str(model, "forms.json", "forms", &opts).unwrap_or_else(|e| panic!("{e}"));
    let params: Vec<String> = graph.params().filter_map(|p| graph.node(p).name.clone()).collect();
    assert_eq!(params, ["w", "bias"]);
    let feeds = BTreeMap::from([
        ("x".to_string(), Tensor::new(Dtype::F64, vec![1, 3], vec![1.0, 2.0, 3.0])),
        ("w".to_string(), Tensor::new(Dtype::F64, vec![2, 3], vec![0.1, 0.2, 0.3, -0.3, 0.2, -0.1])),
        ("bias".to_string(), Tensor::new(Dtype::F64, vec![2], vec![0.5, -0.5])),
    ]);
    let outs: BTreeMap<String, Tensor> = interp::run(&graph, &feeds).unwrap().into_iter().collect();
    let want = [(1.4f64 + 0.5).tanh(), (-0.2f64 - 0.5).tanh()];
    close("y", &outs["y"].data, &want);
}

/// A class of Mithril's library that cannot be compiled is named as not supported,
/// with its node's path and the reason, never as unknown.
#[test]
fn unsupported_classes_give_their_reason() {
    let model = r#"{"name": "Model", "submodels": {"m_0": {"name": "TSNE"}, "m_1": {"name": "randn"}}, "connections": {"m_0": {}, "m_1": {}}}"#;
    let e = mithril::load_str(model, "t.json", "t", &Options::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.json: 2 model classes cannot be compiled:\n  \
         submodels.m_0 (TSNE): Mithril's TSNE is not supported: it needs TsnePJoint, whose binary search runs a data-dependent number of steps\n  \
         submodels.m_1 (Randn): Mithril's Randn is not supported: random numbers: the IR has no random source\n  \
         note: a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code"
    );
}

/// LayerNorm normalizes the last axis of a `[B, ..., d]` input (Mithril's own cases
/// run it on `[N, d]`); a rank-1 input, or a weight or bias other than `[d]`, is
/// refused against the node.
#[test]
fn layer_norm_shapes() {
    let load = |x: &[u64], w: &[u64], b: &[u64]| {
        let mut opts = Options::default();
        for (k, s) in [("input", x), ("weight", w), ("bias", b)] {
            opts.known_types.insert(k.into(), TensorType::new(Dtype::F64, Shape::known(s)));
        }
        mithril::load_str(r#"{"name": "LayerNorm"}"#, "ln.json", "ln", &opts).map(|_| ()).map_err(|e| e.to_string())
    };
    for x in [&[3u64, 2][..], &[4, 3, 2], &[2, 4, 3, 2]] {
        load(x, &[2], &[2]).unwrap_or_else(|e| panic!("{x:?}: {e}"));
    }
    assert_eq!(
        load(&[2], &[2], &[2]).unwrap_err(),
        "ln.json: top-level LayerNorm: `input` has shape [2], which does not match [B, C..., d] (rank 1 where 2 or more is needed)\n  \
         note: the shape of `input` comes from the data"
    );
    let e = load(&[3, 2], &[3], &[2]).unwrap_err();
    assert!(e.contains("top-level LayerNorm") && e.contains("`weight` has shape [3]"), "{e}");
    let e = load(&[3, 2], &[2], &[2, 1]).unwrap_err();
    assert!(e.contains("top-level LayerNorm") && e.contains("`bias` has shape [2, 1]"), "{e}");
}

/// Convolution2D's bias has primitives.py's template `[1, out_channels, 1, 1]`.
/// Mithril's `test_conv2d_4` feeds a `[1]` bias, which only its unchecked NumPy run
/// broadcasts (the shape of a trainable input is never checked at `evaluate`); a
/// compile that knows the shape refuses it, and so does mithrilc.
#[test]
fn convolution_2d_bias_template() {
    let load = |b: &[u64]| {
        let mut opts = Options::default();
        for (k, s) in [("input", &[1u64, 1, 5, 5][..]), ("weight", &[1, 1, 3, 3]), ("bias", b)] {
            opts.known_types.insert(k.into(), TensorType::new(Dtype::F64, Shape::known(s)));
        }
        let model = r#"{"name": "Convolution2D", "args": {"kernel_size": 3, "out_channels": 1}}"#;
        mithril::load_str(model, "conv.json", "conv", &opts).map(|_| ()).map_err(|e| e.to_string())
    };
    load(&[1, 1, 1, 1]).unwrap();
    let e = load(&[1]).unwrap_err();
    assert!(e.starts_with("conv.json: top-level Convolution2D: `bias` has shape [1], which does not match [1, 1, 1, 1]"), "{e}");
}

/// Runs `model` with `constants` (Mithril's `constant_keys`) and f64 `feeds`; its outputs.
fn run_with(model: &str, constants: &[(&str, Value)], feeds: &[(&str, Vec<u64>, Vec<f64>)]) -> BTreeMap<String, Tensor> {
    let mut opts = Options { constants: constants.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), ..Default::default() };
    for (k, shape, _) in feeds {
        opts.known_types.insert(k.to_string(), TensorType::new(Dtype::F64, Shape::known(shape)));
    }
    let graph = mithril::load_str(model, "m.json", "m", &opts).unwrap_or_else(|e| panic!("{e}"));
    let feeds = feeds.iter().map(|(k, shape, data)| (k.to_string(), Tensor::new(Dtype::F64, shape.clone(), data.clone()))).collect();
    interp::run(&graph, &feeds).unwrap_or_else(|e| panic!("{e}")).into_iter().collect()
}

/// EyeComplement's `ones_with_zero_diag`, with Mithril's `test_eye_complement_1`..`_3`
/// (`N` and `M` as constructor arguments or compile-time constants).
#[test]
fn eye_complement() {
    let out = run_with(r#"{"name": "EyeComplement", "args": {"N": 2, "M": 2}}"#, &[], &[]);
    assert_eq!(out["output"].shape, [2, 2]);
    close("2x2", &out["output"].data, &[0.0, 1.0, 1.0, 0.0]);
    let out = run_with(r#"{"name": "EyeComplement", "args": {"N": 3, "M": "TBD"}}"#, &[("M", serde_json::json!(4))], &[]);
    assert_eq!(out["output"].shape, [3, 4]);
    close("3x4", &out["output"].data, &[0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0]);
    let out = run_with(r#"{"name": "EyeComplement", "args": {"N": "TBD"}}"#, &[("N", serde_json::json!(3))], &[]);
    assert_eq!(out["output"].shape, [3, 3]);
    close("3x3", &out["output"].data, &[0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]);
}

/// TransposedDiagonal (`diag(input)[:, None]`), non-finite values off the diagonal
/// included, and its gradient, Mithril's `output_gradient * eye(N)`.
#[test]
fn transposed_diagonal() {
    let x = vec![1.0, f64::INFINITY, 3.0, 4.0, 5.0, f64::NAN, 7.0, 8.0, 9.0];
    let out = run_with(r#"{"name": "TransposedDiagonal"}"#, &[], &[("input", vec![3, 3], x.clone())]);
    assert_eq!(out["output"].shape, [3, 1]);
    close("diag", &out["output"].data, &[1.0, 5.0, 9.0]);
    let model = r#"{"name": "TransposedDiagonal", "assigned_differentiabilities": [["input", true]]}"#;
    let mut opts = Options::default();
    opts.known_types.insert("input".into(), TensorType::new(Dtype::F64, Shape::known(&[3, 3])));
    let mut graph = mithril::load_str(model, "m.json", "m", &opts).unwrap_or_else(|e| panic!("{e}"));
    for node in &mut graph.nodes {
        if node.op == Op::Input {
            node.op = Op::Param;
        }
    }
    let popts = passes::Options { grad: Wrt::Params(vec!["input".into()]) };
    passes::run_pipeline(&mut graph, passes::PIPELINE, &popts, |_, _| {}).unwrap();
    let feeds = BTreeMap::from([
        ("input".to_string(), Tensor::new(Dtype::F64, vec![3, 3], x)),
        (output_grad_name("output"), Tensor::new(Dtype::F64, vec![3, 1], vec![2.0, -1.0, 0.5])),
    ]);
    let out: BTreeMap<String, Tensor> = interp::run(&graph, &feeds).unwrap().into_iter().collect();
    close("gradient", &out[&grad_name("input")].data, &[2.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.5]);
}

/// Trapezoid (NumPy's `trapezoid(y, x)`), with Mithril's `test_trapezoid_*` values
/// (integer constants give a float, as NumPy's `/ 2.0` does).
#[test]
fn trapezoid() {
    let cases = [
        ([1, 2, 3], [0, 1, 2], 4.0),
        ([5, 5, 5], [0, 1, 2], 10.0),
        ([1, 4, 9], [0, 1, 3], 15.5),
    ];
    for (y, x, want) in cases {
        let consts = [("y", serde_json::json!(y)), ("x", serde_json::json!(x))];
        let out = run_with(r#"{"name": "Trapezoid"}"#, &consts, &[]);
        assert!(out["output"].dtype.is_float() && out["output"].shape.is_empty(), "{:?}", out["output"]);
        close("trapezoid", &out["output"].data, &[want]);
    }
    let out = run_with(r#"{"name": "Trapezoid"}"#, &[], &[("y", vec![4], vec![1.0, -2.0, 0.5, 3.0]), ("x", vec![4], vec![0.0, 0.5, 2.0, 2.25])]);
    close("floats", &out["output"].data, &[0.5 * (1.0 - 2.0) / 2.0 + 1.5 * (-2.0 + 0.5) / 2.0 + 0.25 * (0.5 + 3.0) / 2.0]);
}

/// `n` values in [-0.8, 0.8] from `seed`, for weights and data.
fn values(seed: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| (((seed * 31 + i * 37) % 17) as f64 - 8.0) / 10.0).collect()
}

/// The first `n` rows of `t` (`[rows, 1, d]`).
fn take_rows(t: &Tensor, n: u64) -> (Vec<u64>, Vec<f64>) {
    let row = (t.shape[1] * t.shape[2]) as usize;
    (vec![n, t.shape[1], t.shape[2]], t.data[..n as usize * row].to_vec())
}

/// OneToMany(RNNCell) unrolled over three steps against three runs of the RNNCell
/// model (itself checked against Mithril's numbers): step `i` reads the first
/// `target<i>.shape[0]` rows of the previous output (of `target<i-1>` with teacher
/// forcing) and the previous hidden state.
#[test]
fn one_to_many_unrolls_the_cell() {
    one_to_many(false);
    one_to_many(true);
}

fn one_to_many(teacher_forcing: bool) {
    let (d, h) = (2u64, 3u64);
    let weights: Vec<(&str, Vec<u64>, Vec<f64>)> = vec![
        ("w_ih", vec![h, d], values(1, 6)),
        ("w_hh", vec![h, h], values(2, 9)),
        ("w_ho", vec![d, h], values(3, 6)),
        ("bias_h", vec![h], values(4, 3)),
        ("bias_o", vec![d], values(5, 2)),
    ];
    let x = (vec![3, 1, d], values(6, 6));
    let h0 = (vec![3, 1, h], values(7, 9));
    let targets = [(vec![3u64, 1, d], values(8, 6)), (vec![2u64, 1, d], values(9, 4)), (vec![1, 1, d], values(10, 2))];
    let model = format!(
        r#"{{"name": "OneToMany", "args": {{"cell_type": {{"name": "RNNCell"}}, "max_sequence_length": 3, "teacher_forcing": {teacher_forcing}}}}}"#
    );
    let mut feeds = weights.clone();
    feeds.push(("input", x.0.clone(), x.1.clone()));
    feeds.push(("initial_hidden", h0.0.clone(), h0.1.clone()));
    for (name, t) in ["target0", "target1", "target2"].into_iter().zip(&targets) {
        if teacher_forcing || name != "target0" {
            feeds.push((name, t.0.clone(), t.1.clone()));
        }
    }
    let got = run_with(&model, &[], &feeds);
    let (mut input, mut hidden) = (x, h0);
    for step in 0..3 {
        let mut feeds = weights.clone();
        feeds.push(("input", input.0.clone(), input.1.clone()));
        feeds.push(("prev_hidden", hidden.0.clone(), hidden.1.clone()));
        let want = run_with(r#"{"name": "RNNCell"}"#, &[], &feeds);
        let out = &got[&format!("output{step}")];
        assert_eq!(out.shape, want["output"].shape, "output{step}");
        close(&format!("output{step}"), &out.data, &want["output"].data);
        if step < 2 {
            let previous = if teacher_forcing { Tensor::new(Dtype::F64, targets[step].0.clone(), targets[step].1.clone()) } else { want["output"].clone() };
            input = take_rows(&previous, targets[step + 1].0[0]);
            hidden = (want["hidden"].shape.clone(), want["hidden"].data.clone());
        }
    }
}

/// ManyToOne(LSTMCell) over three steps against three runs of the LSTMCell model:
/// both states pass on, and `hidden_concat` stacks step 1's `hidden_compl`, then the
/// last step's `hidden` and `hidden_compl`.
#[test]
fn many_to_one_unrolls_the_cell() {
    let (d, h, o) = (2u64, 3u64, 2u64);
    let mut weights: Vec<(&str, Vec<u64>, Vec<f64>)> = Vec::new();
    for (i, (w, b)) in [("w_i", "bias_i"), ("w_f", "bias_f"), ("w_c", "bias_c"), ("w_o", "bias_o")].into_iter().enumerate() {
        weights.push((w, vec![h, d + h], values(10 + i, (h * (d + h)) as usize)));
        weights.push((b, vec![h], values(20 + i, h as usize)));
    }
    weights.push(("w_out", vec![o, h], values(30, (o * h) as usize)));
    weights.push(("bias_out", vec![o], values(31, o as usize)));
    let inputs = [(vec![3u64, 1, d], values(40, 6)), (vec![2, 1, d], values(41, 4)), (vec![1, 1, d], values(42, 2))];
    let (h0, c0) = ((vec![3u64, 1, h], values(43, 9)), (vec![3u64, 1, h], values(44, 9)));
    let model = r#"{"name": "ManyToOne", "args": {"cell_type": "LSTMCell", "max_sequence_length": 3}}"#;
    let names = ["input0", "input1", "input2"];
    let mut feeds = weights.clone();
    for (n, (shape, data)) in names.iter().zip(&inputs) {
        feeds.push((n, shape.clone(), data.clone()));
    }
    feeds.push(("initial_hidden", h0.0.clone(), h0.1.clone()));
    feeds.push(("initial_cell", c0.0.clone(), c0.1.clone()));
    let got = run_with(model, &[], &feeds);
    let (mut hidden, mut cell) = (h0, c0);
    let mut concat = Vec::new();
    for (step, input) in inputs.iter().enumerate() {
        let mut feeds = weights.clone();
        feeds.push(("input", input.0.clone(), input.1.clone()));
        feeds.push(("prev_hidden", hidden.0.clone(), hidden.1.clone()));
        feeds.push(("prev_cell", cell.0.clone(), cell.1.clone()));
        let want = run_with(r#"{"name": "LSTMCell"}"#, &[], &feeds);
        close(&format!("output{step}"), &got[&format!("output{step}")].data, &want["output"].data);
        if step == 2 {
            concat.extend(&want["hidden"].data);
        }
        if step > 0 {
            concat.extend(&want["hidden_compl"].data);
        }
        hidden = (want["hidden"].shape.clone(), want["hidden"].data.clone());
        cell = (want["cell"].shape.clone(), want["cell"].data.clone());
    }
    assert_eq!(got["hidden_concat"].shape, [3, 1, h]);
    close("hidden_concat", &got["hidden_concat"].data, &concat);
}

/// PositionalEncoding (Mithril's Torch-only `positional_encoding`): the sines and
/// cosines of Torch's float32 table added to an f64 input (compared at float32's
/// precision); `max_len` bounds the sequence and `hidden_dim` must be even.
#[test]
fn positional_encoding() {
    let (b, l, h) = (2usize, 3usize, 4usize);
    let x = values(50, b * l * h);
    let model = r#"{"name": "PositionalEncoding", "args": {"hidden_dim": 4, "max_len": 5}}"#;
    let out = run_with(model, &[], &[("input", vec![b as u64, l as u64, h as u64], x.clone())]);
    let rate = -(10000f32.ln()) / h as f32;
    let mut want = x;
    for (i, v) in want.iter_mut().enumerate() {
        let (p, j) = ((i / h) % l, i % h);
        let angle = p as f32 * ((2 * (j / 2)) as f32 * rate).exp();
        *v += f64::from(if j % 2 == 0 { angle.sin() } else { angle.cos() });
    }
    assert_eq!(out["output"].shape, [2, 3, 4]);
    for (i, (g, w)) in out["output"].data.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-6, "[{i}]: {g} against {w}");
    }
    let load = |model: &str, x: &[u64]| {
        let mut opts = Options::default();
        opts.known_types.insert("input".into(), TensorType::new(Dtype::F64, Shape::known(x)));
        mithril::load_str(model, "pe.json", "pe", &opts).map(|_| ()).map_err(|e| e.to_string())
    };
    let e = load(r#"{"name": "PositionalEncoding", "args": {"hidden_dim": 4, "max_len": 2}}"#, &[2, 3, 4]).unwrap_err();
    assert!(e.contains("top-level PositionalEncoding") && e.contains("[1, 2, 4]"), "{e}");
    let e = load(r#"{"name": "PositionalEncoding", "args": {"hidden_dim": 3}}"#, &[2, 3, 3]).unwrap_err();
    assert!(e.contains("`hidden_dim` must be a positive even integer"), "{e}");
}

/// A `Model` of the metric classes, each as Mithril's `test_metrics_*` connects them
/// (`pred`, `label` and an output named after it), `args` shared by all.
fn metrics_model(args: &str, names: &[&str]) -> String {
    let mut subs = Vec::new();
    let mut conns = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (class, average) = match name.split_once('_') {
            Some((avg, class)) => (class, format!(r#", "average": "{}""#, avg.to_lowercase())),
            None => (*name, String::new()),
        };
        let class = match class {
            "Accuracy" => r#""name": "Accuracy""#,
            "Precision" => r#""name": "Precision""#,
            "Recall" => r#""name": "Recall""#,
            "F1" => r#""name": "F1""#,
            other => panic!("not a metric: {other}"),
        };
        subs.push(format!(r#""m_{i}": {{{class}, "args": {{{args}{average}}}}}"#));
        conns.push(format!(r#""m_{i}": {{"pred": "pred", "label": "label", "output": {{"key": {{"name": "{name}", "expose": true}}}}}}"#));
    }
    format!(r#"{{"name": "Model", "submodels": {{{}}}, "connections": {{{}}}}}"#, subs.join(", "), conns.join(", "))
}

/// Runs `model` on `pred` and `label` of the given dtypes; its outputs.
fn run_typed(model: &str, feeds: &[(&str, Dtype, Vec<u64>, Vec<f64>)]) -> BTreeMap<String, Tensor> {
    let mut opts = Options::default();
    for (k, dtype, shape, _) in feeds {
        opts.known_types.insert(k.to_string(), TensorType::new(*dtype, Shape::known(shape)));
    }
    let graph = mithril::load_str(model, "m.json", "m", &opts).unwrap_or_else(|e| panic!("{e}"));
    let feeds = feeds.iter().map(|(k, dtype, shape, data)| (k.to_string(), Tensor::new(*dtype, shape.clone(), data.clone()))).collect();
    interp::run(&graph, &feeds).unwrap_or_else(|e| panic!("{e}")).into_iter().collect()
}

const ALL_METRICS: [&str; 10] = [
    "Accuracy",
    "Micro_Precision",
    "Macro_Precision",
    "Weighted_Precision",
    "Micro_Recall",
    "Macro_Recall",
    "Weighted_Recall",
    "Micro_F1",
    "Macro_F1",
    "Weighted_F1",
];

/// Checks every metric of `ALL_METRICS` against `want` (in that order).
fn check_metrics(label: &str, out: &BTreeMap<String, Tensor>, want: [f64; 10]) {
    for (name, w) in ALL_METRICS.iter().zip(want) {
        close_metric(&format!("{label} {name}"), &out[*name], w);
    }
}

/// A metric (a float scalar) against Mithril's value: at 1e-10 in f64; a ratio of
/// integer counts is float32 (the IR's integer division, Torch's default dtype, which
/// Mithril's metric tests run on), compared at float32's precision.
fn close_metric(label: &str, got: &Tensor, want: f64) {
    assert!(got.shape.is_empty() && got.dtype.is_float(), "{label}: {got:?}");
    if got.dtype == Dtype::F64 {
        close(label, &got.data, &[want]);
    } else {
        assert!((got.data[0] - want).abs() <= 1e-6 * want.abs().max(1.0), "{label}: {} against Mithril's {want}", got.data[0]);
    }
}

/// Accuracy, Precision, Recall and F1 with one-hot predictions and class labels, on
/// Mithril's `test_metrics_1` .. `_5` (scikit-learn's numbers; `macro` divides by the
/// number of distinct labels, so the single class of `_2` gives 1, not 1/3).
#[test]
fn metrics_one_hot_predictions() {
    let model = metrics_model(r#""n_classes": 3, "is_label_one_hot": false, "is_pred_one_hot": true"#, &ALL_METRICS);
    let t = 2.0 / 3.0;
    let cases: [(&str, Vec<f64>, Vec<f64>, [f64; 10]); 5] = [
        (
            "test_metrics_1",
            vec![0.4, 0.4, 0.2, 0.1, 0.6, 0.3, 0.2, 0.4, 0.4, 0.6, 0.3, 0.1, 0.2, 0.7, 0.1, 0.1, 0.3, 0.6],
            vec![1.0, 1.0, 2.0, 0.0, 1.0, 2.0],
            [t, t, 0.7222222222222222, 0.75, t, 0.7222222222222222, t, t, t, t],
        ),
        ("test_metrics_2", vec![0.9, 0.05, 0.05, 0.8, 0.1, 0.1, 0.7, 0.2, 0.1, 0.6, 0.2, 0.2, 0.95, 0.03, 0.02], vec![0.0; 5], [1.0; 10]),
        (
            "test_metrics_3",
            vec![0.33; 15],
            vec![0.0, 1.0, 2.0, 0.0, 1.0],
            [0.4, 0.4, 0.13333333333333333, 0.16, 0.4, 0.3333333333333333, 0.4, 0.4, 0.19047619047619047, 0.22857142857142856],
        ),
        (
            "test_metrics_4",
            vec![0.9, 0.05, 0.05, 0.1, 0.85, 0.05, 0.1, 0.05, 0.85, 0.95, 0.03, 0.02, 0.05, 0.9, 0.05],
            vec![0.0, 1.0, 2.0, 0.0, 1.0],
            [1.0; 10],
        ),
        (
            "test_metrics_5",
            vec![0.05, 0.9, 0.05, 0.1, 0.05, 0.85, 0.85, 0.1, 0.05, 0.02, 0.95, 0.03, 0.05, 0.8, 0.15],
            vec![0.0, 1.0, 2.0, 0.0, 1.0],
            [0.2, 0.2, 0.1111111111111111, 0.13333333333333333, 0.2, 0.16666666666666666, 0.2, 0.2, 0.13333333333333333, 0.16],
        ),
    ];
    for (name, pred, label, want) in cases {
        let n = label.len() as u64;
        let out = run_typed(&model, &[("pred", Dtype::F64, vec![n, 3], pred), ("label", Dtype::I64, vec![n], label)]);
        check_metrics(name, &out, want);
    }
}

/// The metrics on class-index predictions and labels (`is_pred_one_hot=False`),
/// Mithril's `test_metrics_12` .. `_16`.
#[test]
fn metrics_class_predictions() {
    let model = metrics_model(r#""n_classes": 3, "is_label_one_hot": false, "is_pred_one_hot": false"#, &ALL_METRICS);
    let label = [0.0, 1.0, 0.0, 2.0, 0.0, 1.0, 0.0, 2.0];
    let cases: [(&str, [f64; 8], [f64; 10]); 5] = [
        (
            "test_metrics_12",
            [0.0, 0.0, 0.0, 2.0, 0.0, 2.0, 0.0, 0.0],
            [0.625, 0.625, 0.38888888888888884, 0.4583333333333333, 0.625, 0.5, 0.625, 0.625, 0.43333333333333335, 0.525],
        ),
        ("test_metrics_13", [1.0, 2.0, 0.0, 2.0, 1.0, 2.0, 2.0, 1.0], [0.25, 0.25, 0.4166666666666667, 0.5625, 0.25, 0.25, 0.25, 0.25, 0.24444444444444446, 0.2833333333333333]),
        (
            "test_metrics_14",
            [0.0; 8],
            [0.5, 0.5, 0.16666666666666666, 0.25, 0.5, 0.3333333333333333, 0.5, 0.5, 0.2222222222222222, 0.3333333333333333],
        ),
        ("test_metrics_15", label, [1.0; 10]),
        (
            "test_metrics_16",
            [0.0, 0.0, 0.0, 2.0, 0.0, 2.0, 0.0, 2.0],
            [0.75, 0.75, 0.48888888888888893, 0.5666666666666667, 0.75, 0.6666666666666666, 0.75, 0.75, 0.562962962962963, 0.6444444444444444],
        ),
    ];
    for (name, pred, want) in cases {
        for dtype in [Dtype::I64, Dtype::F64] {
            let out = run_typed(&model, &[("pred", dtype, vec![8], pred.to_vec()), ("label", dtype, vec![8], label.to_vec())]);
            check_metrics(&format!("{name} ({dtype:?})"), &out, want);
        }
    }
}

/// Metric's formatting of predictions and labels, through Accuracy and micro
/// Precision: `threshold` with `is_binary` (Mithril's `test_metrics_10`, `_11`: Metric
/// gives `[0, 0, -1]`, so 2 of 3 right) and one-hot labels and predictions
/// (`test_metrics_6`: `[0, 0, 1]`; `_7`: `[0, 1, -1]`). Variants models.py rejects are
/// refused with the argument named.
#[test]
fn metrics_format_predictions_and_labels() {
    let binary = r#""threshold": 0.3, "is_binary": true, "is_pred_one_hot": false"#;
    let pred = ("pred", Dtype::F64, vec![3], vec![0.5, 0.2, 0.1]);
    let labels = [
        (r#", "is_label_one_hot": false"#, ("label", Dtype::I64, vec![3], vec![1.0, 0.0, 1.0])),
        ("", ("label", Dtype::I64, vec![3, 2], vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0])),
    ];
    for (extra, label) in labels {
        let model = metrics_model(&format!("{binary}{extra}"), &["Accuracy", "Micro_Precision"]);
        let out = run_typed(&model, &[pred.clone(), label]);
        close_metric("binary accuracy", &out["Accuracy"], 2.0 / 3.0);
        close_metric("binary precision", &out["Micro_Precision"], 2.0 / 3.0);
    }
    let one_hot = metrics_model("", &["Accuracy"]);
    let label = ("label", Dtype::I64, vec![3, 3], vec![0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    for (pred, want) in [([0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0], 2.0 / 3.0), ([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0], 1.0 / 3.0)] {
        let out = run_typed(&one_hot, &[("pred", Dtype::F64, vec![3, 3], pred.to_vec()), label.clone()]);
        close_metric("one-hot accuracy", &out["Accuracy"], want);
    }
    let load = |args: &str| {
        let model = format!(r#"{{"name": "F1", "args": {{{args}}}}}"#);
        let mut opts = Options::default();
        opts.known_types.insert("pred".into(), TensorType::new(Dtype::F64, Shape::known(&[3, 2])));
        opts.known_types.insert("label".into(), TensorType::new(Dtype::F64, Shape::known(&[3, 2])));
        mithril::load_str(&model, "f1.json", "f1", &opts).map(|_| ()).map_err(|e| e.to_string())
    };
    load(r#""average": "macro", "n_classes": 2"#).unwrap();
    let e = load(r#""is_binary": true"#).unwrap_err();
    assert!(e.contains("top-level F1") && e.contains("`is_binary` needs a `threshold`"), "{e}");
    let e = load(r#""average": "weighted""#).unwrap_err();
    assert!(e.contains("`n_classes` must be given for average 'weighted'"), "{e}");
    let e = load(r#""average": "mean""#).unwrap_err();
    assert!(e.contains("`average` must be one of"), "{e}");
}

/// One RNNCell step by hand (models.py's formula): for rows `x` and the first
/// `x.len()` rows of `h`, `hidden = tanh(h w_hh^T + x w_ih^T + bias_h)` and
/// `output = hidden w_ho^T + bias_o`.
fn rnn_step(w: &BTreeMap<&str, Vec<f64>>, x: &[Vec<f64>], h: &[Vec<f64>]) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let affine = |m: &[f64], v: &[f64]| -> Vec<f64> { m.chunks(v.len()).map(|row| row.iter().zip(v).map(|(a, b)| a * b).sum()).collect() };
    let mut hidden = Vec::new();
    let mut output = Vec::new();
    for (xr, hr) in x.iter().zip(h) {
        let (a, b) = (affine(&w["w_hh"], hr), affine(&w["w_ih"], xr));
        let hn: Vec<f64> = a.iter().zip(&b).zip(&w["bias_h"]).map(|((a, b), c)| (a + b + c).tanh()).collect();
        output.push(affine(&w["w_ho"], &hn).iter().zip(&w["bias_o"]).map(|(a, b)| a + b).collect());
        hidden.push(hn);
    }
    (hidden, output)
}

/// EncoderDecoder(RNNCell) against a hand-written unrolling of models.py's graph: the
/// ManyToOne encoder over two steps (each step's batch the rows of `input<i>`, the
/// dropped rows passed on as `hidden_compl`), `hidden_concat` (step 1's `hidden`, then
/// its `hidden_compl`) permuted by `indices` into the OneToMany decoder's initial
/// state, whose step `i` reads the first `target<i>.shape[0]` rows of the previous
/// output (of `target<i-1>` with teacher forcing). The decoder's keys are `decoder_*`.
#[test]
fn encoder_decoder() {
    for teacher_forcing in [false, true] {
        let (d, h) = (2usize, 3usize);
        let names = ["w_ih", "w_hh", "w_ho", "bias_h", "bias_o"];
        let sizes = [h * d, h * h, d * h, h, d];
        let shapes = [vec![h as u64, d as u64], vec![h as u64, h as u64], vec![d as u64, h as u64], vec![h as u64], vec![d as u64]];
        let enc: BTreeMap<&str, Vec<f64>> = names.iter().zip(sizes).enumerate().map(|(i, (n, k))| (*n, values(60 + i, k))).collect();
        let dec: BTreeMap<&str, Vec<f64>> = names.iter().zip(sizes).enumerate().map(|(i, (n, k))| (*n, values(70 + i, k))).collect();
        let rows = |v: Vec<f64>, w: usize| -> Vec<Vec<f64>> { v.chunks(w).map(<[f64]>::to_vec).collect() };
        let inputs = [rows(values(80, 3 * d), d), rows(values(81, 2 * d), d)];
        let h0 = rows(values(82, 3 * h), h);
        let indices = [2.0, 0.0, 1.0];
        let dec_input = rows(values(83, 3 * d), d);
        let targets = [rows(values(84, 3 * d), d), rows(values(85, 2 * d), d), rows(values(86, d), d)];

        let mut feeds: Vec<(String, Dtype, Vec<u64>, Vec<f64>)> = Vec::new();
        let flat = |r: &[Vec<f64>]| -> (Vec<u64>, Vec<f64>) { (vec![r.len() as u64, 1, r[0].len() as u64], r.concat()) };
        for (i, n) in names.iter().enumerate() {
            feeds.push((n.to_string(), Dtype::F64, shapes[i].clone(), enc[n].clone()));
            feeds.push((format!("decoder_{n}"), Dtype::F64, shapes[i].clone(), dec[n].clone()));
        }
        for (name, r) in [("input0", &inputs[0]), ("input1", &inputs[1]), ("initial_hidden", &h0), ("decoder_input", &dec_input)] {
            let (shape, data) = flat(r);
            feeds.push((name.to_string(), Dtype::F64, shape, data));
        }
        for (i, t) in targets.iter().enumerate() {
            if teacher_forcing || i > 0 {
                let (shape, data) = flat(t);
                feeds.push((format!("target{i}"), Dtype::F64, shape, data));
            }
        }
        feeds.push(("indices".into(), Dtype::I64, vec![3], indices.to_vec()));
        let model = format!(
            r#"{{"name": "EncoderDecoder", "args": {{"cell_type": {{"name": "RNNCell"}}, "max_input_sequence_length": 2, "max_target_sequence_length": 3, "teacher_forcing": {teacher_forcing}}}}}"#
        );
        let feeds: Vec<(&str, Dtype, Vec<u64>, Vec<f64>)> = feeds.iter().map(|(k, t, s, d)| (k.as_str(), *t, s.clone(), d.clone())).collect();
        let got = run_typed(&model, &feeds);

        let (hidden0, _) = rnn_step(&enc, &inputs[0], &h0);
        let (hidden1, _) = rnn_step(&enc, &inputs[1], &hidden0);
        let mut concat = hidden1.clone();
        concat.extend(hidden0[inputs[1].len()..].iter().cloned());
        let mut state: Vec<Vec<f64>> = indices.iter().map(|&i| concat[i as usize].clone()).collect();
        let mut input = dec_input.clone();
        let mut keys: Vec<&String> = got.keys().collect();
        keys.sort();
        assert_eq!(keys, ["output0", "output1", "output2"], "teacher_forcing {teacher_forcing}");
        for step in 0..3 {
            let (hidden, output) = rnn_step(&dec, &input, &state);
            let (shape, want) = flat(&output);
            let out = &got[&format!("output{step}")];
            assert_eq!(out.shape, shape, "output{step}");
            close(&format!("teacher_forcing {teacher_forcing}: output{step}"), &out.data, &want);
            if step < 2 {
                let n = targets[step + 1].len();
                input = if teacher_forcing { targets[step][..n].to_vec() } else { output[..n].to_vec() };
                state = hidden;
            }
        }
    }
    let mut opts = Options::default();
    opts.known_types.insert("input0".into(), TensorType::new(Dtype::F64, Shape::known(&[1, 1, 2])));
    let e = mithril::load_str(r#"{"name": "EncoderDecoder", "args": {"cell_type": "RNNCell", "max_input_sequence_length": 2}}"#, "ed.json", "ed", &opts)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("top-level EncoderDecoder") && e.contains("`max_target_sequence_length`"), "{e}");
    // With LSTMCell both of the encoder's states are inputs; the decoder's cell state
    // is `decoder_initial_cell` (only its hidden state comes from the encoder).
    let (d, h) = (2u64, 3u64);
    let mut opts = Options::default();
    let mut typed = vec![("indices", Dtype::I64, vec![3]), ("decoder_input", Dtype::F64, vec![3, 1, d]), ("target1", Dtype::F64, vec![2, 1, d])];
    for (n, rows) in [("input0", 3), ("input1", 2)] {
        typed.push((n, Dtype::F64, vec![rows, 1, d]));
    }
    for n in ["initial_hidden", "initial_cell", "decoder_initial_cell"] {
        typed.push((n, Dtype::F64, vec![3, 1, h]));
    }
    for prefix in ["", "decoder_"] {
        for g in ["i", "f", "c", "o"] {
            opts.known_types.insert(format!("{prefix}w_{g}"), TensorType::new(Dtype::F64, Shape::known(&[h, d + h])));
            opts.known_types.insert(format!("{prefix}bias_{g}"), TensorType::new(Dtype::F64, Shape::known(&[h])));
        }
        opts.known_types.insert(format!("{prefix}w_out"), TensorType::new(Dtype::F64, Shape::known(&[d, h])));
        opts.known_types.insert(format!("{prefix}bias_out"), TensorType::new(Dtype::F64, Shape::known(&[d])));
    }
    for (n, dtype, shape) in typed {
        opts.known_types.insert(n.into(), TensorType::new(dtype, Shape::known(&shape)));
    }
    let model = r#"{"name": "EncoderDecoder", "args": {"cell_type": "LSTMCell", "max_input_sequence_length": 2, "max_target_sequence_length": 2}}"#;
    let graph = mithril::load_str(model, "ed.json", "ed", &opts).unwrap_or_else(|e| panic!("{e}"));
    let names: BTreeSet<String> = graph.inputs().chain(graph.params()).filter_map(|v| graph.node(v).name.clone()).collect();
    // (The encoder's own outputs, and so its `w_out`, feed nothing.)
    for n in ["initial_hidden", "initial_cell", "w_i", "decoder_initial_cell", "decoder_input", "indices", "decoder_w_out"] {
        assert!(names.contains(n), "{n} not among {names:?}");
    }
    assert!(!names.contains("decoder_initial_hidden"), "{names:?}");
    let outs: Vec<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outs, ["output0", "output1"]);
}

/// Metric itself (`pred - label` of the formatted class indices, which it exposes as
/// `pred_formatted` and `label_formatted`), with Mithril's `test_metrics_6` .. `_11`.
#[test]
fn metric_formats_predictions_and_labels() {
    let one_hot_pred = ("pred", vec![3, 3]);
    let class_pred = ("pred", vec![3]);
    let cases: [(&str, (&str, Vec<u64>), Vec<f64>, Vec<u64>, Vec<f64>, [f64; 3]); 6] = [
        ("", one_hot_pred.clone(), vec![0., 1., 0., 1., 0., 0., 0., 0., 1.], vec![3, 3], vec![0., 1., 0., 1., 0., 0., 0., 1., 0.], [0., 0., 1.]),
        ("", one_hot_pred.clone(), vec![0., 1., 0., 0., 1., 0., 1., 0., 0.], vec![3, 3], vec![0., 1., 0., 1., 0., 0., 0., 1., 0.], [0., 1., -1.]),
        (r#""is_label_one_hot": false"#, one_hot_pred, vec![0., 1., 0., 0., 1., 0., 1., 0., 0.], vec![3], vec![1., 0., 1.], [0., 1., -1.]),
        (r#""is_label_one_hot": false, "is_pred_one_hot": false"#, class_pred.clone(), vec![1., 1., 0.], vec![3], vec![1., 0., 1.], [0., 1., -1.]),
        (
            r#""threshold": 0.3, "is_binary": true, "is_label_one_hot": false, "is_pred_one_hot": false"#,
            class_pred.clone(),
            vec![0.5, 0.2, 0.1],
            vec![3],
            vec![1., 0., 1.],
            [0., 0., -1.],
        ),
        (
            r#""threshold": 0.3, "is_binary": true, "is_label_one_hot": true, "is_pred_one_hot": false"#,
            class_pred,
            vec![0.5, 0.2, 0.1],
            vec![3, 2],
            vec![0., 1., 1., 0., 0., 1.],
            [0., 0., -1.],
        ),
    ];
    for (i, (args, (pred, pred_shape), pred_data, label_shape, label_data, want)) in cases.into_iter().enumerate() {
        let model = format!(r#"{{"name": "Metric", "args": {{{args}}}}}"#);
        let binary = args.contains("threshold");
        let pred_dtype = if binary { Dtype::F64 } else { Dtype::I64 };
        let out = run_typed(&model, &[(pred, pred_dtype, pred_shape, pred_data), ("label", Dtype::I64, label_shape, label_data)]);
        let label = format!("test_metrics_{}", i + 6);
        assert!(!out["output"].dtype.is_float(), "{label}: {:?}", out["output"]);
        close(&label, &out["output"].data, &want);
        assert_eq!(out["pred_formatted"].shape, [3], "{label}");
        assert_eq!(out["label_formatted"].shape, [3], "{label}");
        let diff: Vec<f64> = out["pred_formatted"].data.iter().zip(&out["label_formatted"].data).map(|(p, l)| p - l).collect();
        close(&format!("{label}: formatted"), &diff, &want);
    }
}
