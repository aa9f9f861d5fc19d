//! Synthetic Mithril models of any size, for the compile-time benchmark
//! (`benches/compile_time.rs`) and the test that large models compile
//! (`tests/large_models.rs`), which include this file.
#![allow(dead_code)]

use serde_json::{json, Map, Value};

/// The shape of a synthetic model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One input through `n` elementwise ops in a row (add, multiply, relu, subtract,
    /// tanh, sigmoid, ...; the binary ones with a scalar constant).
    Chain,
    /// `n / 2` products of the input with their own scalar, summed pairwise: thousands
    /// of values live at once and as many constants.
    Wide,
    /// `Linear(8)` and `Tanh` alternating (`n / 2` Linear layers, each with an unnamed
    /// weight and bias): parameters, matmuls and their epilogues.
    Linear,
}

impl Kind {
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "chain" => Some(Kind::Chain),
            "wide" => Some(Kind::Wide),
            "linear" => Some(Kind::Linear),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Kind::Chain => "a chain of elementwise nodes",
            Kind::Wide => "parallel products summed pairwise",
            Kind::Linear => "Linear(8) and Tanh alternating",
        }
    }
}

/// The `--shape` the models are compiled with (`input` is their one input).
pub const INPUT_SHAPE: &str = "input=4,8";

/// The model JSON (as `model_to_dict` writes it) of `n` nodes of `kind`.
pub fn model(kind: Kind, n: usize) -> String {
    let mut submodels = Map::new();
    let mut connections = Map::new();
    let mut add = |i: usize, class: &str, args: Value, conns: Value| {
        let node = json!({"name": class, "args": args, "exposed_keys": ["output"], "assigned_shapes": [], "assigned_types": [],
                          "assigned_differentiabilities": [], "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []});
        submodels.insert(format!("m_{i}"), node);
        connections.insert(format!("m_{i}"), conns);
    };
    let output_of = |i: usize| json!({"key": {"connect": [[format!("m_{i}"), "output"]]}});
    let named = |name: &str| json!({"key": {"name": name}});
    let n = n.max(2);
    match kind {
        Kind::Chain | Kind::Linear => {
            for i in 0..n {
                let input = if i == 0 { named("input") } else { output_of(i - 1) };
                let (class, args, mut conns) = match kind {
                    Kind::Linear if i % 2 == 0 => ("Linear", json!({"dimension": 8, "use_bias": true}), json!({"input": input})),
                    Kind::Linear => ("Tanh", json!({}), json!({"input": input})),
                    _ => {
                        let class = ["Add", "Multiply", "Relu", "Subtract", "Tanh", "Sigmoid"][i % 6];
                        // Constants near 1, none of them an identity (x * 1, x + 0).
                        let c = 1.0 + (i % 7 + 1) as f64 / 64.0;
                        let conns = if matches!(class, "Add" | "Multiply" | "Subtract") { json!({"left": input, "right": c}) } else { json!({"input": input}) };
                        (class, json!({}), conns)
                    }
                };
                if i == n - 1 {
                    conns["output"] = named("output");
                }
                add(i, class, args, conns);
            }
        }
        Kind::Wide => {
            let branches = n / 2;
            let mut values: Vec<usize> = Vec::new();
            for j in 0..branches {
                add(j, "Multiply", json!({}), json!({"left": named("input"), "right": 1.0 + j as f64 / branches as f64}));
                values.push(j);
            }
            let mut next = branches;
            while values.len() > 1 {
                let mut sums = Vec::new();
                for pair in values.chunks(2) {
                    match pair {
                        [a, b] => {
                            add(next, "Add", json!({}), json!({"left": output_of(*a), "right": output_of(*b)}));
                            sums.push(next);
                            next += 1;
                        }
                        [a] => sums.push(*a),
                        _ => {}
                    }
                }
                values = sums;
            }
            if let Some(Value::Object(conns)) = connections.get_mut(&format!("m_{}", values[0])) {
                conns.insert("output".into(), named("output"));
            }
        }
    }
    json!({"name": "Model", "args": {}, "connections": connections, "submodels": submodels, "exposed_keys": [],
           "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [], "assigned_constraints": [],
           "assigned_cins": [], "assigned_couts": []})
    .to_string()
}
