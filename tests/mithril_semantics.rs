//! Mithril's own test cases (`tests/json_files/models_directed_test.json` at
//! `synnada-ai/mithril@cc5c80c8`, its NumPy backend's numbers in float64) through the
//! frontend, autodiff and the interpreter: forward values and gradients where the
//! semantics are easy to get subtly wrong (cross entropy's input types, ties of
//! max/min, the robust ops at zero and their thresholds, subgradients at kinks).
//!
//! A case builds a one-primitive model (`m_0` of class `model.name` with `args`);
//! `inputs` are parameters (differentiated), `static_keys` data; an output's
//! cotangent is `output_grads`; `results.eval`/`results.grad` (the `numpy` entry where
//! backends differ) must match to 1e-12 relative, or 1e-14 absolute, Mithril's own
//! bar (`tests/scripts/helper.py`): its reference for BCE with logits at -36.8 is
//! 2^-53 where its formula computes 0.

use std::collections::BTreeMap;

use mithrilc::frontend::mithril::{self, Options, PRIMITIVES};
use mithrilc::ir::{Dtype, Shape, TensorType};
use mithrilc::passes::autodiff::{grad_name, output_grad_name, Wrt};
use mithrilc::passes::{self};
use mithrilc::tensor::Tensor;
use serde_json::{json, Value};

const RTOL: f64 = 1e-12;
const ATOL: f64 = 1e-14;

/// A nested JSON array (or a number) as a tensor of `dtype`.
fn tensor(v: &Value, dtype: Dtype) -> Tensor {
    fn walk(v: &Value, depth: usize, shape: &mut Vec<u64>, data: &mut Vec<f64>) {
        match v {
            Value::Array(items) => {
                if shape.len() == depth {
                    shape.push(items.len() as u64);
                }
                for it in items {
                    walk(it, depth + 1, shape, data);
                }
            }
            Value::Bool(b) => data.push(f64::from(u8::from(*b))),
            n => data.push(n.as_f64().unwrap_or_else(|| panic!("not a number: {n}"))),
        }
    }
    let (mut shape, mut data) = (Vec::new(), Vec::new());
    walk(v, 0, &mut shape, &mut data);
    Tensor::new(dtype, shape, data)
}

/// The NumPy backend's entry where the case lists one per backend.
fn numpy(v: &Value) -> &Value {
    v.get("numpy").unwrap_or(v)
}

/// The dtype a static key takes: bools stay bools, class indices are integers, and
/// other numbers take the float inputs' dtype (NumPy promotes integer targets).
fn static_dtype(class: &str, args: &Value, key: &str, v: &Value) -> Dtype {
    fn first(v: &Value) -> &Value {
        match v {
            Value::Array(items) => items.first().map_or(v, first),
            _ => v,
        }
    }
    let categorical = class == "CrossEntropy" && args.get("categorical") != Some(&Value::Bool(false));
    if first(v).is_boolean() {
        Dtype::Bool
    } else if categorical && key == "target" {
        Dtype::I64
    } else {
        Dtype::F64
    }
}

/// Runs one case; returns the first mismatch.
fn run(name: &str, text: &str) -> Result<(), String> {
    let case: Value = serde_json::from_str(text).map_err(|e| format!("{name}: {e}"))?;
    let m = &case["model"];
    let class = m["name"].as_str().unwrap();
    let args = m.get("args").cloned().unwrap_or(json!({}));
    let spec = PRIMITIVES.iter().find(|p| p.class == class).unwrap_or_else(|| panic!("{name}: no primitive {class}"));
    let defaults: serde_json::Map<String, Value> = serde_json::from_str(spec.defaults).unwrap();
    // Mithril lists `output` and every input that carries a value as exposed.
    let mut exposed = vec!["output".to_string()];
    exposed.extend(spec.inputs.iter().filter(|k| defaults.contains_key(**k) || args.get(**k).is_some()).map(|k| k.to_string()));
    if args.get("robust") == Some(&Value::Bool(true)) && !exposed.iter().any(|k| k == "threshold") {
        exposed.push("threshold".into());
    }
    let mut feeds = BTreeMap::new();
    let mut conns = serde_json::Map::new();
    for (k, v) in case["inputs"].as_object().into_iter().flatten() {
        feeds.insert(k.clone(), tensor(v, Dtype::F64));
    }
    for (k, v) in case.get("static_keys").and_then(Value::as_object).into_iter().flatten() {
        feeds.insert(k.clone(), tensor(v, static_dtype(class, &args, k, v)));
    }
    for k in feeds.keys().chain(std::iter::once(&"output".to_string())) {
        conns.insert(k.clone(), json!({"key": {"name": k}}));
    }
    let child = json!({"name": class, "args": args, "exposed_keys": exposed,
        "assigned_differentiabilities": m.get("assigned_differentiabilities").cloned().unwrap_or(json!([]))});
    let model = json!({"name": "Model", "args": {}, "connections": {"m_0": conns}, "submodels": {"m_0": child}, "exposed_keys": []});
    let mut opts = Options::default();
    for (k, t) in &feeds {
        opts.known_types.insert(k.clone(), TensorType::new(t.dtype, Shape::known(&t.shape)));
    }
    let mut graph = mithril::load_str(&model.to_string(), "case.json", "case", &opts).map_err(|e| format!("{name}: {e}"))?;
    let popts = passes::Options { grad: Wrt::AllParams };
    passes::run_pipeline(&mut graph, passes::PIPELINE, &popts, |_, _| {}).map_err(|e| format!("{name}: {e}"))?;
    for (k, v) in case["output_grads"].as_object().into_iter().flatten() {
        feeds.insert(output_grad_name(k), tensor(v, Dtype::F64));
    }
    let outs: BTreeMap<String, Tensor> = mithrilc::interp::run(&graph, &feeds).map_err(|e| format!("{name}: {e}"))?.into_iter().collect();
    let results = &case["results"];
    let mut wanted: Vec<(String, &Value)> = results["eval"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), numpy(v))).collect();
    wanted.extend(results["grad"].as_object().into_iter().flatten().map(|(k, v)| (grad_name(k), numpy(v))));
    for (key, want) in wanted {
        let want = tensor(want, Dtype::F64);
        let got = outs.get(&key).ok_or_else(|| format!("{name}: no output {key} among {:?}", outs.keys().collect::<Vec<_>>()))?;
        let close = |g: f64, w: f64| g == w || (g - w).abs() <= ATOL.max(RTOL * w.abs()) || (g.is_nan() && w.is_nan());
        if got.numel() != want.numel() || !got.data.iter().zip(&want.data).all(|(&g, &w)| close(g, w)) {
            return Err(format!("{name}: {key} is {:?} {:?}, Mithril's is {:?} {:?}", got.shape, got.data, want.shape, want.data));
        }
    }
    Ok(())
}

/// Runs every case of a group and reports all mismatches at once.
fn check(cases: &[(&str, &str)]) {
    let failures: Vec<String> = cases.iter().filter_map(|(name, text)| run(name, text).err()).collect();
    assert!(failures.is_empty(), "{} of {} cases differ from Mithril:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn cross_entropy_input_types() {
    check(CROSS_ENTROPY);
}

#[test]
fn max_min_ties_split_the_gradient() {
    check(EXTREMES);
}

/// `Prod`'s gradient where an element is zero is the product of the others (Mithril's
/// `reduce_prod_grad`); Mithril's own cases have no zero, so this one is worked out
/// from that formula: a single zero gets the rest's product, two zeros give zeros.
#[test]
fn reduce_prod_at_zero() {
    check(&[(
        "prod_at_zero",
        r#"{"model": {"name": "Prod", "args": {"axis": 1}, "assigned_differentiabilities": [["input", true]]},
            "inputs": {"input": [[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]]}, "output_grads": {"output": [1.0, 2.0, 3.0]},
            "results": {"eval": {"output": [0.0, 0.0, 8.0]}, "grad": {"input": [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0], [24.0, 12.0, 6.0]]}}}"#,
    )]);
}

/// A TrainModel's loss takes its class's `input_type` too: Linear into
/// BinaryCrossEntropy on probabilities, mean-reduced. x = [0.25, 0.5], w = 1, b = 0.25
/// give o = [0.5, 0.75]; with t = [1, 0], the loss is mean(-log 0.5, -log 0.25) and
/// dL/do = [-1/0.5, 1/0.25] / 2 = [-1, 2], so dL/dw = -0.25 + 1 = 0.75, dL/db = 1.
#[test]
fn train_model_loss_on_probabilities() {
    let text = r#"{"is_train_model": true, "model": {"name": "Linear", "args": {"dimension": 1}},
        "losses": [{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}}, "reduce_steps": [{"name": "Mean"}],
                    "args": {"input": "output", "target": "target"}}],
        "regularizations": []}"#;
    let feeds: BTreeMap<String, Tensor> = [
        ("input", Tensor::new(Dtype::F64, vec![2, 1], vec![0.25, 0.5])),
        ("weight", Tensor::new(Dtype::F64, vec![1, 1], vec![1.0])),
        ("bias", Tensor::new(Dtype::F64, vec![1], vec![0.25])),
        ("target", Tensor::new(Dtype::F64, vec![2, 1], vec![1.0, 0.0])),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), t))
    .collect();
    let mut opts = Options::default();
    for (k, t) in &feeds {
        opts.known_types.insert(k.clone(), TensorType::new(t.dtype, Shape::known(&t.shape)));
    }
    let mut graph = mithril::load_str(text, "train.json", "train", &opts).unwrap_or_else(|e| panic!("{e}"));
    passes::run_pipeline(&mut graph, passes::PIPELINE, &passes::Options { grad: Wrt::AllParams }, |_, _| {}).unwrap_or_else(|e| panic!("{e}"));
    let outs: BTreeMap<String, Tensor> = mithrilc::interp::run(&graph, &feeds).unwrap_or_else(|e| panic!("{e}")).into_iter().collect();
    let loss = (-(0.5f64.ln()) - 0.25f64.ln()) / 2.0;
    for (key, want) in [("final_cost", loss), ("grad/weight", 0.75), ("grad/bias", 1.0)] {
        let got = outs[key].data[0];
        assert!((got - want).abs() <= RTOL * want.abs(), "{key}: {got}, want {want}");
    }
}

#[test]
fn robust_ops_at_zero_and_thresholds() {
    check(ROBUST);
}

#[test]
fn subgradients_at_kinks() {
    check(KINKS);
}

// ---- Mithril's cases, copied from models_directed_test.json -----------------------

const CROSS_ENTROPY: &[(&str, &str)] = &[
    ("test_cross_entropy_1", r#"{"model": {"name": "CrossEntropy", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, 1.0, 1.0, 1.0]]}, "static_keys": {"target": [2]}, "output_grads": {"output": [1.0]}, "results": {"eval": {"output": [1.3862943611198906]}, "grad": {"input": [[0.25, 0.25, -0.75, 0.25]]}}}"#),
    ("test_cross_entropy_2", r#"{"model": {"name": "CrossEntropy", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1000.0, 0.0], [0.0, 1000.0]]}, "static_keys": {"target": [0, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.0, 1000.0]}, "grad": {"input": [[0.0, 0.0], [-1.0, 1.0]]}}}"#),
    ("test_cross_entropy_3", r#"{"model": {"name": "CrossEntropy", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, 1.0], [0.0, 1000.0]]}, "static_keys": {"target": [0, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.6931471805599453, 1000]}, "grad": {"input": [[-0.5, 0.5], [-1.0, 1.0]]}}}"#),
    ("test_cross_entropy_4", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0, 1.0], [0.1, 0.9]]}, "static_keys": {"target": [1, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.0, 2.302585092994046]}, "grad": {"input": [[0.0, -1.0], [-10.0, 0.0]]}}}"#),
    ("test_cross_entropy_5", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0, 1.0], [0.1, 0.9]]}, "static_keys": {"target": [0, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [709.396418532264, 2.3025850929940455]}, "grad": {"input": {"jax": [[-4.49423283715579e+307, -0.0], [-10.0, 0.0]], "numpy": [[-4.49423283715579e+307, -0.0], [-10.0, 0.0]], "torch": [[0.0, -0.0], [-10.0, 0.0]]}}}}"#),
    ("test_cross_entropy_6", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[2.220446049250313e-16, 1.0], [0.1, 0.9]]}, "static_keys": {"target": [0, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [36.04365338911715, 2.302585092994046]}, "grad": {"input": [[-4503599627370496.0, -0.0], [-10.0, 0.0]]}}}"#),
    ("test_cross_entropy_7", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0, 1.0]]}, "static_keys": {"target": [0]}, "output_grads": {"output": [1.0]}, "results": {"eval": {"output": [709.396418532264]}, "grad": {"input": {"jax": [[-4.49423283715579e+307, 0.0]], "numpy": [[-4.49423283715579e+307, 0.0]], "torch": [[0.0, 0.0]]}}}}"#),
    ("test_cross_entropy_8", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.2, 1.1102230246251565e-16, 0.7999999999999998], [0.1, 0.6, 0.3]]}, "static_keys": {"target": [1, 2]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [36.7368005696771, 1.2039728043259361]}, "grad": {"input": [[0.0, -9007199254740992.0, 0.0], [0.0, 0.0, -3.3333333333333335]]}}}"#),
    ("test_cross_entropy_9", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.5, 0.5], [0.1, 0.9]]}, "static_keys": {"target": [0, 1]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.6931471805599453, 0.1053605156578263]}, "grad": {"input": [[-2.0, 0.0], [0.0, -1.1111111111111112]]}}}"#),
    ("test_cross_entropy_10", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.5, 0.5], [0.1, 0.9]]}, "static_keys": {"target": [0, 1]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.6931471805599453, 0.1053605156578263]}, "grad": {"input": [[-2.0, 0.0], [0.0, -1.1111111111111112]]}}}"#),
    ("test_cross_entropy_11", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0, 1.0], [0.1, 0.9]]}, "static_keys": {"target": [1, 0]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.0, 2.302585092994046]}, "grad": {"input": [[0.0, -1.0], [-10.0, 0.0]]}}}"#),
    ("test_cross_entropy_12", r#"{"model": {"name": "CrossEntropy", "args": {"input_type": "log_probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-0.6931471805599453, -0.6931471805599453], [-2.3025850929940455, -0.10536051565782628]]}, "static_keys": {"target": [0, 1]}, "output_grads": {"output": [1.0, 1.0]}, "results": {"eval": {"output": [0.6931471805599453, 0.1053605156578263]}, "grad": {"input": [[-1.0, 0.0], [0.0, -1]]}}}"#),
    ("test_binary_cross_entropy_1", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1], [0.5]]}, "static_keys": {"target": [[0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.1053605156578263], [0.6931471805599453]]}, "grad": {"input": [[1.1111111111111112], [-2]]}}}"#),
    ("test_binary_cross_entropy_2", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1, 0.2, 0.3], [0.5, 0.4, 0.2]]}, "static_keys": {"target": [[0, 1, 0], [1, 1, 1]]}, "output_grads": {"output": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[0.10536051565782628, 1.6094379124341003, 0.35667494393873245], [0.6931471805599453, 0.916290731874155, 1.6094379124341003]]}, "grad": {"input": [[1.1111111111111112, -5.0, 1.4285714285714286], [-2.0, -2.5, -5.0]]}}}"#),
    ("test_binary_cross_entropy_3", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1e-20, 0.2, 0.3], [0.5, 0.4, 1e-20]]}, "static_keys": {"target": [[0, 1, 0], [1, 1, 1]]}, "output_grads": {"output": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 1.6094379124341003, 0.35667494393873245], [0.6931471805599453, 0.916290731874155, 46.051701859880914]]}, "grad": {"input": [[1.0, -5.0, 1.4285714285714286], [-2.0, -2.5, -1e+20]]}}}"#),
    ("test_binary_cross_entropy_4", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs", "robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1, 0.2, 0.3], [0.5, 1.0, 0.2]]}, "static_keys": {"target": [[0, 1, 0], [1, 1, 1]]}, "output_grads": {"output": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[0.10536051565782628, 1.6094379124341003, 0.35667494393873245], [0.6931471805599453, 0.0, 1.6094379124341003]]}, "grad": {"input": [[1.1111111111111112, -5.0, 1.4285714285714286], [-2.0, -1.0, -5.0]]}}}"#),
    ("test_binary_cross_entropy_5", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1], [0.5]]}, "static_keys": {"target": [[0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.1053605156578263], [0.6931471805599453]]}, "grad": {"input": [[1.1111111111111112], [-2]]}}}"#),
    ("test_binary_cross_entropy_6", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.1102230246251565e-16], [0.5]]}, "static_keys": {"target": [[0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[1.1102230246251565e-16], [0.6931471805599453]]}, "grad": {"input": [[1.0000000000000002], [-2]]}}}"#),
    ("test_binary_cross_entropy_7", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0102230246251565e-16], [0.5]]}, "static_keys": {"target": [[0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[1.1102230246251565e-16], [0.6931471805599453]]}, "grad": {"input": [[1.0], [-2]]}}}"#),
    ("test_binary_cross_entropy_8", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "probs"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.1102230246251565e-16], [0.95]]}, "static_keys": {"target": [[0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[1.1102230246251565e-16], [0.05129329438755058]]}, "grad": {"input": [[1.0000000000000002], [-1.0526315789473684]]}}}"#),
    ("test_binary_w_logits_1", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "logits"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-36.83119036496738], [0.0]]}, "static_keys": {"target": [[0.0], [1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[1.1102230246251565e-16], [0.6931471805599453]]}, "grad": {"input": {"jax": [[1.0102230246251579e-16], [-1.0]], "torch": [[1.0102230246251579e-16], [-0.5]], "numpy": [[1.0102230246251579e-16], [-0.5]]}}}}"#),
    ("test_binary_w_logits_2", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "logits"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0], [-2]]}, "static_keys": {"target": [[1.0], [0]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.3132616875182228], [0.1269280110429725]]}, "grad": {"input": [[-0.2689414213699951], [0.11920292202211756]]}}}"#),
    ("test_binary_w_logits_3", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "logits"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, -2, 3, 0], [0, 1, 2, -1]]}, "static_keys": {"target": [[1.0, 0, 1, 0], [0, 0, 0, 1]]}, "output_grads": {"output": [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[0.3132616875182228, 0.1269280110429725, 0.04858735157374206, 0.6931471805599453], [0.6931471805599453, 1.3132616875182228, 2.1269280110429727, 1.3132616875182228]]}, "grad": {"input": {"jax": [[-0.2689414213699951, 0.11920292202211753, -0.047425873177566635, 0.0], [0.0, 0.7310585786300048, 0.8807970779778833, -0.7310585786300048]], "torch": [[-0.2689414213699951, 0.11920292202211753, -0.047425873177566635, 0.5], [0.5, 0.7310585786300048, 0.8807970779778833, -0.7310585786300048]], "numpy": [[-0.2689414213699951, 0.11920292202211753, -0.047425873177566635, 0.5], [0.5, 0.7310585786300048, 0.8807970779778833, -0.7310585786300048]]}}}}"#),
    ("test_multilabel_3_binary_w_logits_1", r#"{"model": {"name": "BinaryCrossEntropy", "args": {"input_type": "logits"}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-2.197224577336219, -1.3862943611198906, -0.8472978603872036], [0.0, 1e+100, -1.3862943611198906]]}, "static_keys": {"target": [[0.0, 1, 0], [1, 1, 1]]}, "output_grads": {"output": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[0.10536051565782628, 1.6094379124341003, 0.35667494393873245], [0.6931471805599453, 0.0, 1.6094379124341003]]}, "grad": {"input": {"jax": [[0.1, -0.8, 0.3], [-1.0, 0.0, -0.8]], "torch": [[0.1, -0.8, 0.3], [-0.5, 0.0, -0.8]], "numpy": [[0.1, -0.8, 0.3], [-0.5, 0.0, -0.8]]}}}}"#),
];

const EXTREMES: &[(&str, &str)] = &[
    ("test_reduce_max_1", r#"{"model": {"name": "Max", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[[[[[[[[[[[[1.0, 2.0, 3.0], [8.0, 6.0, 1.0]], [[7.0, 6.0, 1.0], [11.0, 9.0, 3.0]]]]]]]]]]]]]]]}, "output_grads": {"output": 17.0}, "results": {"eval": {"output": 11.0}, "grad": {"input": [[[[[[[[[[[[[[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [17.0, 0.0, 0.0]]]]]]]]]]]]]]]}}}"#),
    ("test_reduce_max_2", r#"{"model": {"name": "Max", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-7.0, -8.0], [6.0, 6.0], [6.0, 5.0]]}, "output_grads": {"output": 9.0}, "results": {"eval": {"output": 6.0}, "grad": {"input": [[0.0, 0.0], [3.0, 3.0], [3.0, 0.0]]}}}"#),
    ("test_reduce_max_3", r#"{"model": {"name": "Max", "args": {"axis": 1}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [1.0, 1.0, 1.0]}, "results": {"eval": {"output": [-1.0, 2.0, 1.0]}, "grad": {"input": [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]}}}"#),
    ("test_reduce_max_4", r#"{"model": {"name": "Max", "args": {"axis": 1}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [4.0, 3.0, 1.0]}, "results": {"eval": {"output": [-1.0, 2.0, 1.0]}, "grad": {"input": [[4.0, 0.0], [3.0, 0.0], [1.0, 0.0]]}}}"#),
    ("test_reduce_max_5", r#"{"model": {"name": "Max", "args": {"axis": 0}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [3.0, 9.0]}, "results": {"eval": {"output": [2.0, 0.0]}, "grad": {"input": [[0.0, 0.0], [3.0, 9.0], [0.0, 0.0]]}}}"#),
    ("test_reduce_max_6", r#"{"model": {"name": "Max", "args": {"axis": [0, 2]}, "tuples": ["axis"], "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]}, "output_grads": {"output": [9.0, 27.0]}, "results": {"eval": {"output": [6.0, 9.0]}, "grad": {"input": [[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[9.0, 0.0, 0.0], [27.0, 0.0, 0.0]]]}}}"#),
    ("test_reduce_max_7", r#"{"model": {"name": "Max", "args": {"axis": [0, 1, 2, 3, 4]}, "tuples": ["axis"], "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[[[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]]]]]]}, "output_grads": {"output": [[[1.0, 2.0, 4.0], [5.0, 6.0, 3.0]], [[2.0, 7.0, 9.0], [1.0, 2.0, 6.0]], [[2.0, 8.0, 9.0], [11.0, 17.0, 10000000000.0]]]}, "results": {"eval": {"output": [[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]}, "grad": {"input": [[[[[[[[1.0, 2.0, 4.0], [5.0, 6.0, 3.0]], [[2.0, 7.0, 9.0], [1.0, 2.0, 6.0]], [[2.0, 8.0, 9.0], [11.0, 17.0, 10000000000.0]]]]]]]]}}}"#),
    ("test_reduce_min_1", r#"{"model": {"name": "Min", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[[[[[[[[[[[[1.0, 2.0, 3.0], [8.0, 6.0, 1.0]], [[7.0, 6.0, 1.0], [11.0, 9.0, 3.0]]]]]]]]]]]]]]]}, "output_grads": {"output": 9.0}, "results": {"eval": {"output": 1.0}, "grad": {"input": [[[[[[[[[[[[[[[3.0, 0.0, 0.0], [0.0, 0.0, 3.0]], [[0.0, 0.0, 3.0], [0.0, 0.0, 0.0]]]]]]]]]]]]]]]}}}"#),
    ("test_reduce_min_2", r#"{"model": {"name": "Min", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-7.0, -8.0], [6.0, 6.0], [6.0, 5.0]]}, "output_grads": {"output": 4.0}, "results": {"eval": {"output": -8.0}, "grad": {"input": [[0.0, 4.0], [0.0, 0.0], [0.0, 0.0]]}}}"#),
    ("test_reduce_min_3", r#"{"model": {"name": "Min", "args": {"axis": 1}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [1.0, 1.0, 1.0]}, "results": {"eval": {"output": [-2.0, 0.0, -1.0]}, "grad": {"input": [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]}}}"#),
    ("test_reduce_min_4", r#"{"model": {"name": "Min", "args": {"axis": 1}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [4.0, 3.0, 1.0]}, "results": {"eval": {"output": [-2.0, 0.0, -1.0]}, "grad": {"input": [[0.0, 4.0], [0.0, 3.0], [0.0, 1.0]]}}}"#),
    ("test_reduce_min_5", r#"{"model": {"name": "Min", "args": {"axis": 0}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [1.0, -1.0]]}, "output_grads": {"output": [3.0, 9.0]}, "results": {"eval": {"output": [-1.0, -2.0]}, "grad": {"input": [[3.0, 9.0], [0.0, 0.0], [0.0, 0.0]]}}}"#),
    ("test_reduce_min_6", r#"{"model": {"name": "Min", "args": {"axis": [0, 2]}, "tuples": ["axis"], "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]}, "output_grads": {"output": [8.0, 16.0]}, "results": {"eval": {"output": [1.0, 1.0]}, "grad": {"input": [[[4.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 4.0], [8.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, 0.0, 8.0]]]}}}"#),
    ("test_reduce_min_7", r#"{"model": {"name": "Min", "args": {"axis": [0, 1, 3, 5, 6]}, "tuples": ["axis"], "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[[[[[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]]]]]]]]}, "output_grads": {"output": [[[[[1.0, 2.0, 4.0], [5.0, 6.0, 3.0]], [[2.0, 7.0, 9.0], [1.0, 2.0, 6.0]], [[2.0, 8.0, 9.0], [11.0, 17.0, 10000000000.0]]]]]}, "results": {"eval": {"output": [[[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[3.0, 2.0, 1.0], [1.0, 3.0, 5.0]], [[6.0, 2.0, 5.0], [9.0, 3.0, 1.0]]]]]}, "grad": {"input": [[[[[[[[[[1.0, 2.0, 4.0], [5.0, 6.0, 3.0]], [[2.0, 7.0, 9.0], [1.0, 2.0, 6.0]], [[2.0, 8.0, 9.0], [11.0, 17.0, 10000000000.0]]]]]]]]]]}}}"#),
];

const ROBUST: &[(&str, &str)] = &[
    ("test_robust_log_1", r#"{"model": {"name": "Log", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[2.0, 2.0], [3.0, 4.0], [4.0, 100.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.6931471805599453, 0.6931471805599453], [1.0986122886681098, 1.3862943611198906], [1.3862943611198906, 4.605170185988092]]}, "grad": {"input": [[0.5, 0.5], [0.3333333333333333, 0.25], [0.25, 0.01]]}}}"#),
    ("test_robust_log_2", r#"{"model": {"name": "Log", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[0.0]]]}, "output_grads": {"output": [[[1.0]]]}, "results": {"eval": {"output": [[[-709.3964185322641]]]}, "grad": {"input": {"jax": [[[4.49423283715579e+307]]], "numpy": [[[4.49423283715579e+307]]], "torch": [[[0.0]]]}}}}"#),
    ("test_robust_log_3", r#"{"model": {"name": "Log", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[1e-311, 1e-306]]]}, "output_grads": {"output": [[[1.0, 1.0]]]}, "results": {"eval": {"output": {"jax": [[[-709.3964185322641, -704.591038456178]]], "torch": [[[-709.3959691089804, -704.591038456178]]], "numpy": [[[-709.3959691089804, -704.591038456178]]]}}, "grad": {"input": [[[4.49423283715579e+307, 1e+306]]]}}}"#),
    ("test_stable_reciprocal_1", r#"{"model": {"name": "StableReciprocal", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[[2.0, 2.0], [3.0, 4.0], [4.0, 100.0]]]]]}, "output_grads": {"output": [[[[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]]]]}, "results": {"eval": {"output": [[[[[0.5, 0.5], [0.3333333333333333, 0.25], [0.25, 0.01]]]]]}, "grad": {"input": [[[[[-0.25, -0.25], [-0.1111111111111111, -0.0625], [-0.0625, -0.0001]]]]]}}}"#),
    ("test_stable_reciprocal_2", r#"{"model": {"name": "StableReciprocal", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0]]}, "output_grads": {"output": [[1.0]]}, "results": {"eval": {"output": [[1.3407807929942598e+153]]}, "grad": {"input": [[-4.49423283715579e+305]]}}}"#),
    ("test_stable_reciprocal_3", r#"{"model": {"name": "StableReciprocal", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1e-155, 1e-145]]}, "output_grads": {"output": [[1.0, 1.0]]}, "results": {"eval": {"output": [[1.336286560157104e+153, 1e+145]]}, "grad": {"input": [[-4.49423283715579e+305, -1e+290]]}}}"#),
    ("test_robust_sqrt_1", r#"{"model": {"name": "Sqrt", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, 2.0], [3.0, 4.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 1.4142135623730951], [1.7320508075688772, 2.0]]}, "grad": {"input": [[0.5, 0.35355339059327373], [0.2886751345948129, 0.25]]}}}"#),
    ("test_robust_sqrt_2", r#"{"model": {"name": "Sqrt", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[[[4.0, 16.0], [25.0, 100.0]]]]}, "output_grads": {"output": [[[[3.0, 2.0], [5.0, 6.0]]]]}, "results": {"eval": {"output": [[[[2.0, 4.0], [5.0, 10.0]]]]}, "grad": {"input": [[[[0.75, 0.25], [0.5, 0.3]]]]}}}"#),
    ("test_robust_sqrt_3", r#"{"model": {"name": "Sqrt", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [10000.0]}, "output_grads": {"output": [1.0]}, "results": {"eval": {"output": [100.0]}, "grad": {"input": [0.005]}}}"#),
    ("test_robust_sqrt_4", r#"{"model": {"name": "Sqrt", "args": {"robust": true}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0, -4.0], [-1.0, -4.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 2.0], [1.0, 2.0]]}, "grad": {"input": {"jax": [[6.703903964971299e+153, -0.25], [-0.5, -0.25]], "torch": [[0.0, -0.25], [-0.5, -0.25]], "numpy": [[0.0, -0.25], [-0.5, -0.25]]}}}}"#),
    ("test_robust_sqrt_5", r#"{"model": {"name": "Sqrt", "args": {"robust": true, "threshold": 1e-20}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[9.999999999999e-21, 1.0000000000001e-20, 0.0]]}, "output_grads": {"output": [[1.0, 1.0, 1.0]]}, "results": {"eval": {"output": [[9.999999999999e-11, 1.00000000000005e-10, 0.0]]}, "grad": {"input": {"jax": [[10000000000.0, 4999999999.99975, 10000000000.0]], "torch": [[10000000000.0, 4999999999.99975, 0.0]], "numpy": [[10000000000.0, 4999999999.99975, 0.0]]}}}}"#),
    ("test_robust_power_1", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [[0.0], [2.2250738585072014e-308]], "exponent": [[0.5], [0.2]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.0], [2.9476022969692e-62]]}, "grad": {"base": [[0.0], [2.6494422067830456e+245]], "exponent": [[0.0], [-2.08807091043044e-59]]}}}"#),
    ("test_robust_power_2", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [[2.0], [3.0], [4.0]], "exponent": [[2.0, 3.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[4.0, 8.0], [9.0, 27.0], [16.0, 64.0]]}, "grad": {"base": [[16.0], [33.0], [56.0]], "exponent": [[34.84080909817102, 123.93054835019151]]}}}"#),
    ("test_robust_power_3", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [2.0], "exponent": [[1.0], [2.0], [3.0], [4.0]]}, "output_grads": {"output": [[1.0], [1.0], [1.0], [1.0]]}, "results": {"eval": {"output": [[2.0], [4.0], [8.0], [16.0]]}, "grad": {"base": [49.0], "exponent": [[1.3862943611198906], [2.772588722239781], [5.545177444479562], [11.090354888959125]]}}}"#),
    ("test_robust_power_4", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [2.0], "exponent": [3.0]}, "output_grads": {"output": [1.0]}, "results": {"eval": {"output": [8.0]}, "grad": {"base": [12.0], "exponent": [5.545177444479562]}}}"#),
    ("test_robust_power_5", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [1.0, 2.0], "exponent": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 4.0], [1.0, 16.0], [1.0, 64.0]]}, "grad": {"base": [9.0, 228.0], "exponent": [[0.0, 2.772588722239781], [0.0, 11.090354888959125], [0.0, 44.3614195558365]]}}}"#),
    ("test_robust_power_6", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [1.0, 2.0], "exponent": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 4.0], [1.0, 16.0], [1.0, 64.0]]}, "grad": {"base": [9.0, 228.0], "exponent": [[0.0, 2.772588722239781], [0.0, 11.090354888959125], [0.0, 44.3614195558365]]}}}"#),
    ("test_robust_power_7", r#"{"model": {"name": "Power", "args": {"robust": true}, "assigned_differentiabilities": [["base", true], ["exponent", true]]}, "inputs": {"base": [[1e-311, 1e-311]], "exponent": [[0.01076316536, 0.01076316538]]}, "output_grads": {"output": [[1.0, 1.0]]}, "results": {"eval": {"output": {"jax": [[0.0, 0.0]], "torch": [[0.0004494232837155554, 0.00044942328188518133]], "numpy": [[0.0004494232837155554, 0.00044942328188518133]]}}, "grad": {"base": {"jax": [[0.0, 0.0]], "torch": [[4.49423283715579e+307, 4.837217108552834e+305]], "numpy": [[4.49423283715579e+307, 4.837217108552834e+305]]}, "exponent": {"jax": [[0.0, 0.0]], "torch": [[0, -0.32183379363642994]], "numpy": [[0, -0.32183379363642994]]}}}}"#),
    ("test_kl_div_1", r#"{"model": {"name": "KLDivergence", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1, 0.5], [0.5, 0.1]]}, "static_keys": {"target": [[0.2, 0.5], [0.2, 0.4]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.1386294361119891, 0.0], [-0.183258146374831, 0.5545177444479562]]}, "grad": {"input": [[-2.0, -1.0], [-0.4, -4.0]]}}}"#),
    ("test_kl_div_3", r#"{"model": {"name": "KLDivergence", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.1, 0.5], [0.5, 0.1]]}, "static_keys": {"target": [[0.1, 0.5], [0.5, 0.1]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 0.0], [0.0, 0.0]]}, "grad": {"input": [[-1.0, -1.0], [-1.0, -1.0]]}}}"#),
    ("test_kl_div_4", r#"{"model": {"name": "KLDivergence", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.1102230246251565e-16, 0.5], [0.5, 0.1]]}, "static_keys": {"target": [[0.1, 0.5], [0.5, 0.1]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[3.443421547668306, 0.0], [0.0, 0.0]]}, "grad": {"input": [[-900719925474099.2, -1.0], [-1.0, -1.0]]}}}"#),
];

const KINKS: &[(&str, &str)] = &[
    ("test_leaky_relu_1", r#"{"model": {"name": "LeakyRelu", "args": {"slope": 0.2}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, -2.0], [2.0, 0.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, -0.4], [2.0, 0.0]]}, "grad": {"input": {"jax": [[1.0, 0.2], [1.0, 1.0]], "torch": [[1.0, 0.2], [1.0, 0.2]], "numpy": [[1.0, 0.2], [1.0, 0.2]]}}}}"#),
    ("test_leaky_relu_2", r#"{"model": {"name": "LeakyRelu", "args": {"slope": 0.2}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0]]}, "output_grads": {"output": [[1.0]]}, "results": {"eval": {"output": [[0.0]]}, "grad": {"input": {"jax": [[1.0]], "torch": [[0.2]], "numpy": [[0.2]]}}}}"#),
    ("test_leaky_relu_3", r#"{"model": {"name": "LeakyRelu", "args": {"slope": 0.2}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [-0.04, -100]]}, "output_grads": {"output": [[5.0, 1.0], [3.2, 1.0], [0.0, 1.0]]}, "results": {"eval": {"output": [[-0.2, -0.4], [2.0, 0.0], [-0.008, -20.0]]}, "grad": {"input": {"jax": [[1.0, 0.2], [3.2, 1.0], [0.0, 0.2]], "torch": [[1.0, 0.2], [3.2, 0.2], [0.0, 0.2]], "numpy": [[1.0, 0.2], [3.2, 0.2], [0.0, 0.2]]}}}}"#),
    ("test_hinge_loss_1", r#"{"model": {"name": "HingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[2.0], [0.25]]}, "static_keys": {"target": [[1], [-1]]}, "output_grads": {"output": [[1.0], [1]]}, "results": {"eval": {"output": [[0.0], [1.25]]}, "grad": {"input": [[0.0], [1.0]]}}}"#),
    ("test_hinge_loss_2", r#"{"model": {"name": "HingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0], [-1.0]]}, "static_keys": {"target": [[1], [-1]]}, "output_grads": {"output": [[1.0], [1]]}, "results": {"eval": {"output": [[0.0], [0.0]]}, "grad": {"input": [[-0.5], [0.5]]}}}"#),
    ("test_hinge_loss_3", r#"{"model": {"name": "HingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0], [0.0]]}, "static_keys": {"target": [[1], [-1]]}, "output_grads": {"output": [[1.0], [1]]}, "results": {"eval": {"output": [[1.0], [1.0]]}, "grad": {"input": [[-1.0], [1.0]]}}}"#),
    ("test_quad_hinge_loss_1", r#"{"model": {"name": "QuadHingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[2.0], [0.25]]}, "static_keys": {"target": [[1], [-1]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.0], [1.5625]]}, "grad": {"input": [[0.0], [2.5]]}}}"#),
    ("test_quad_hinge_loss_2", r#"{"model": {"name": "QuadHingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0], [-1.0]]}, "static_keys": {"target": [[1.0], [-1.0]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.0], [0.0]]}, "grad": {"input": [[0.0], [0.0]]}}}"#),
    ("test_quad_hinge_loss_3", r#"{"model": {"name": "QuadHingeLoss", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0], [0.0]]}, "static_keys": {"target": [[1.0], [-1.0]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[1.0], [1.0]]}, "grad": {"input": [[-2.0], [2.0]]}}}"#),
    ("test_quantile_loss_1", r#"{"model": {"name": "QuantileLoss", "args": {"quantile": 0.1}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0]]}, "static_keys": {"target": [[0.0]]}, "output_grads": {"output": [[1.0]]}, "results": {"eval": {"output": [[0.9]]}, "grad": {"input": [[0.9]]}}}"#),
    ("test_quantile_loss_2", r#"{"model": {"name": "QuantileLoss", "args": {"quantile": 0.1}, "assigned_differentiabilities": [["input", true]]}, "static_keys": {"target": [[1.0], [1e-05]]}, "inputs": {"input": [[-1.1102230246251565e-16], [20000000000.0]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.1], [17999999999.999992]]}, "grad": {"input": [[-0.1], [0.9]]}}}"#),
    ("test_quantile_loss_3", r#"{"model": {"name": "QuantileLoss", "args": {"quantile": 0.9}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0], [1e-05]]}, "static_keys": {"target": [[1.0], [1e-05]]}, "output_grads": {"output": [[1.0], [1.0]]}, "results": {"eval": {"output": [[0.0], [0.0]]}, "grad": {"input": [[-0.4], [-0.4]]}}}"#),
    ("test_quantile_loss_4", r#"{"model": {"name": "QuantileLoss", "args": {"quantile": 0.4}, "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, 2.0], [0.0, 1.0]]}, "static_keys": {"target": [[1.0, 0.0], [2.0, -1.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 1.2], [0.8, 1.2]]}, "grad": {"input": [[0.1, 0.6], [-0.4, 0.6]]}}}"#),
    ("test_relu_1", r#"{"model": {"name": "Relu", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[1.0, -2.0], [2.0, 0.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 0.0], [2.0, 0.0]]}, "grad": {"input": [[1.0, 0.0], [1.0, 0.0]]}}}"#),
    ("test_relu_2", r#"{"model": {"name": "Relu", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[0.0]]}, "output_grads": {"output": [[1.0]]}, "results": {"eval": {"output": [[0.0]]}, "grad": {"input": [[0.0]]}}}"#),
    ("test_relu_3", r#"{"model": {"name": "Relu", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [-0.04, -100]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]}, "grad": {"input": [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]}}}"#),
    ("test_relu_4", r#"{"model": {"name": "Relu", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, -2.0], [2.0, 0.0], [-0.04, -100]]}, "output_grads": {"output": [[5.0, 1.0], [3.2, 1.0], [0.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]}, "grad": {"input": [[0.0, 0.0], [3.2, 0.0], [0.0, 0.0]]}}}"#),
    ("test_abs", r#"{"model": {"name": "Absolute", "assigned_differentiabilities": [["input", true]]}, "inputs": {"input": [[-1.0, 0.0], [1.0, -2.0]]}, "output_grads": {"output": [[-2.0, -1.0], [0.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 0.0], [1.0, 2.0]]}, "grad": {"input": {"jax": [[2.0, -1.0], [0.0, -1.0]], "torch": [[2.0, 0.0], [0.0, -1.0]], "numpy": [[2.0, 0.0], [0.0, -1.0]]}}}}"#),
    ("test_absolute_error_1", r#"{"model": {"name": "AbsoluteError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0], [2.0], [3.0], [4.0]], "target": [[0.7], [0.9], [1.1], [1.3]]}, "output_grads": {"output": [[1.0], [1.0], [1.0], [1.0]]}, "results": {"eval": {"output": [[0.3], [1.1], [1.9], [2.7]]}, "grad": {"input": {"jax": [[1.0], [1.0], [1.0], [1.0]], "torch": [[1.0], [1.0], [1.0], [1.0]], "numpy": [[1.0], [1.0], [1.0], [1.0]]}, "target": {"jax": [[-1.0], [-1.0], [-1.0], [-1.0]], "torch": [[-1.0], [-1.0], [-1.0], [-1.0]], "numpy": [[-1.0], [-1.0], [-1.0], [-1.0]]}}}}"#),
    ("test_absolute_error_2", r#"{"model": {"name": "AbsoluteError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0], [-1000000.0], [1e-12], [-1.5]], "target": [[1.0], [-1000000.0], [1e-12], [-1.5]]}, "output_grads": {"output": [[1.0], [1.0], [1.0], [1.0]]}, "results": {"eval": {"output": [[0.0], [0.0], [0.0], [0.0]]}, "grad": {"input": {"jax": [[1.0], [1.0], [1.0], [1.0]], "torch": [[0.0], [0.0], [0.0], [0.0]], "numpy": [[0.0], [0.0], [0.0], [0.0]]}, "target": {"jax": [[-1.0], [-1.0], [-1.0], [-1.0]], "torch": [[0.0], [0.0], [0.0], [0.0]], "numpy": [[0.0], [0.0], [0.0], [0.0]]}}}}"#),
    ("test_absolute_error_3", r#"{"model": {"name": "AbsoluteError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[0.1, 0.2], [1000000000.0, 1e-10]], "target": [[0.1, 0.2], [1e-10, 1000000000.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[0.0, 0.0], [1000000000.0, 1000000000.0]]}, "grad": {"input": {"jax": [[1.0, 1.0], [1.0, -1.0]], "torch": [[0.0, 0.0], [1.0, -1.0]], "numpy": [[0.0, 0.0], [1.0, -1.0]]}, "target": {"jax": [[-1.0, -1.0], [-1.0, 1.0]], "torch": [[0.0, 0.0], [-1.0, 1.0]], "numpy": [[0.0, 0.0], [-1.0, 1.0]]}}}}"#),
    ("test_absolute_error_4", r#"{"model": {"name": "AbsoluteError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "target": [[2.0, 3.0], [3.0, 4.0], [4.0, 5.0]]}, "output_grads": {"output": [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]}, "results": {"eval": {"output": [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]}, "grad": {"input": {"jax": [[-1.0, -1.0], [1.0, 1.0], [1.0, 1.0]], "torch": [[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]], "numpy": [[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]}, "target": {"jax": [[1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]], "torch": [[1.0, 1.0], [0.0, 0.0], [-1.0, -1.0]], "numpy": [[1.0, 1.0], [0.0, 0.0], [-1.0, -1.0]]}}}}"#),
    ("test_squared_error_1", r#"{"model": {"name": "SquaredError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0], [2], [3], [4]], "target": [[0.7], [0.9], [1.1], [1.3]]}, "output_grads": {"output": [[1.0], [1], [1], [1]]}, "results": {"eval": {"output": [[0.09], [1.21], [3.61], [7.29]]}, "grad": {"input": [[0.6], [2.2], [3.8], [5.4]], "target": [[-0.6], [-2.2], [-3.8], [-5.4]]}}}"#),
    ("test_squared_error_2", r#"{"model": {"name": "SquaredError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0], [-1000000.0], [1e-12], [-1.5]], "target": [[1.0], [-1000000.0], [1e-12], [-1.5]]}, "output_grads": {"output": [[1.0], [1], [1], [1]]}, "results": {"eval": {"output": [[0.0], [0.0], [0.0], [0.0]]}, "grad": {"input": [[0.0], [0.0], [0.0], [0.0]], "target": [[0.0], [0.0], [0.0], [0.0]]}}}"#),
    ("test_squared_error_3", r#"{"model": {"name": "SquaredError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[0.1, 0.2], [1000000000.0, 1e-10]], "target": [[0.1, 0.2], [1e-10, 1000000000.0]]}, "output_grads": {"output": [[1.0, 1], [1, 1]]}, "results": {"eval": {"output": [[0.0, 0.0], [1e+18, 1e+18]]}, "grad": {"input": [[0.0, 0.0], [2000000000.0, -2000000000.0]], "target": [[0.0, 0.0], [-2000000000.0, 2000000000.0]]}}}"#),
    ("test_squared_error_4", r#"{"model": {"name": "SquaredError", "assigned_differentiabilities": [["input", true], ["target", true]]}, "inputs": {"input": [[1.0, 2], [3, 4], [5, 6]], "target": [[2.0, 3], [3, 4], [4, 5]]}, "output_grads": {"output": [[1.0, 1], [1, 1], [1, 1]]}, "results": {"eval": {"output": [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]}, "grad": {"input": [[-2.0, -2.0], [0.0, 0.0], [2.0, 2.0]], "target": [[2.0, 2.0], [0.0, 0.0], [-2.0, -2.0]]}}}"#),
    ("test_where_1", r#"{"model": {"name": "Where", "assigned_differentiabilities": [["input1", true], ["input2", true]]}, "static_keys": {"cond": [[[[true, false, true], [false, true, false], [true, false, true]]]]}, "inputs": {"input1": [[[[0.0, -1.0, 5.0], [-2.0, 5.0, -6.0], [8.0, -9.0, 12.0]]]], "input2": [[[3.0, 3.0, 3.0]]]}, "output_grads": {"output": [[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]]}, "results": {"eval": {"output": [[[[0, 3.0, 5.0], [3.0, 5.0, 3.0], [8.0, 3.0, 12.0]]]]}, "grad": {"input1": [[[[1.0, 0.0, 3.0], [0.0, 5.0, 0.0], [7.0, 0.0, 9.0]]]], "input2": [[[4.0, 10.0, 6.0]]]}}}"#),
    ("test_where_2", r#"{"model": {"name": "Where", "assigned_differentiabilities": [["input1", true], ["input2", true]]}, "static_keys": {"cond": [[[[true, false, true], [false, true, false], [true, false, true]]]]}, "inputs": {"input1": [[[-1.0], [5.0], [-9.0]]], "input2": [[[3.0, 3.0, 3.0]]]}, "output_grads": {"output": [[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]]}, "results": {"eval": {"output": [[[[-1.0, 3.0, -1.0], [3.0, 5.0, 3.0], [-9.0, 3.0, -9.0]]]]}, "grad": {"input1": [[[4.0], [5.0], [16.0]]], "input2": [[[4.0, 10.0, 6.0]]]}}}"#),
    ("test_where_3", r#"{"model": {"name": "Where", "assigned_differentiabilities": [["input1", true], ["input2", true]]}, "static_keys": {"cond": [true]}, "inputs": {"input1": [[[-1.0], [5.0], [-9.0]]], "input2": [[[3.0, 3.0, 3.0]]]}, "output_grads": {"output": [[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]}, "results": {"eval": {"output": [[[-1.0, -1.0, -1.0], [5.0, 5.0, 5.0], [-9.0, -9.0, -9.0]]]}, "grad": {"input1": [[[6.0], [15.0], [24.0]]], "input2": [[[0.0, 0.0, 0.0]]]}}}"#),
    ("test_where_4", r#"{"model": {"name": "Where", "assigned_differentiabilities": [["input1", true], ["input2", true]]}, "static_keys": {"cond": [true]}, "inputs": {"input1": [[[-1.0], [5.0], [-9.0]]], "input2": 1.0}, "output_grads": {"output": [[[1.0], [4.0], [7.0]]]}, "results": {"eval": {"output": [[[-1.0], [5.0], [-9.0]]]}, "grad": {"input1": [[[1.0], [4.0], [7.0]]], "input2": 0.0}}}"#),
    ("test_where_5", r#"{"model": {"name": "Where", "assigned_differentiabilities": [["input1", true], ["input2", true]]}, "static_keys": {"cond": [false]}, "inputs": {"input1": [[[-1.0], [5.0], [-9.0]]], "input2": 1.0}, "output_grads": {"output": [[[1.0], [4.0], [7.0]]]}, "results": {"eval": {"output": [[[1.0], [1.0], [1.0]]]}, "grad": {"input1": [[[0.0], [0.0], [0.0]]], "input2": 12.0}}}"#),
];
