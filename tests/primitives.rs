//! Every Mithril primitive class (every row of `PRIMITIVES`) and every named composite
//! (`COMPOSITES`) through the real frontend, the pass pipeline and the interpreter,
//! checked against values computed here with plain loops that implement Mithril's
//! NumPy semantics (`mithril/cores/python/numpy/ops.py`).
//!
//! Inputs are multiples of 1/8 (exact in f32), so the references see the same inputs
//! as the compiled f32 graph. Shapes are deliberately awkward: size-1 dimensions,
//! broadcasting, 3 and 5 elements.
//!
//! `every_class_is_covered` ties the `COVERAGE` table to `PRIMITIVES`/`COMPOSITES`
//! and to the bodies of the tests named there, so a newly added class fails until it
//! has a test.

use std::collections::{BTreeMap, BTreeSet};
use std::f64::consts::{PI, SQRT_2};

use mithrilc::frontend::mithril::{self, Options, COMPOSITES, PRIMITIVES};
use mithrilc::ir::{Dtype, Shape, TensorType};
use mithrilc::tensor::Tensor;
use mithrilc::{passes, Error, ErrorKind};
use serde_json::{json, Value};

// ---- reference arrays ------------------------------------------------------------

/// A row-major n-d array of f64 for the reference computations.
#[derive(Clone, Debug, PartialEq)]
struct A {
    shape: Vec<usize>,
    data: Vec<f64>,
}

fn unravel(shape: &[usize], mut flat: usize) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    idx
}

impl A {
    fn new(shape: &[usize], data: Vec<f64>) -> A {
        assert_eq!(shape.iter().product::<usize>(), data.len(), "reference array {shape:?}");
        A { shape: shape.to_vec(), data }
    }
    fn from_fn(shape: &[usize], mut f: impl FnMut(&[usize]) -> f64) -> A {
        let n = shape.iter().product::<usize>();
        A::new(shape, (0..n).map(|i| f(&unravel(shape, i))).collect())
    }
    fn offset(&self, idx: &[usize]) -> usize {
        assert_eq!(idx.len(), self.shape.len());
        idx.iter().zip(&self.shape).fold(0, |acc, (&i, &d)| {
            assert!(i < d, "index {idx:?} out of {:?}", self.shape);
            acc * d + i
        })
    }
    fn get(&self, idx: &[usize]) -> f64 {
        self.data[self.offset(idx)]
    }
    fn map(&self, f: impl Fn(f64) -> f64) -> A {
        A::new(&self.shape, self.data.iter().map(|&x| f(x)).collect())
    }
    fn reshape(&self, shape: &[usize]) -> A {
        A::new(shape, self.data.clone())
    }
    /// NumPy broadcasting read: `idx` indexes a result of higher or equal rank.
    fn bget(&self, idx: &[usize]) -> f64 {
        let off = idx.len() - self.shape.len();
        let mine: Vec<usize> = self.shape.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { idx[off + i] }).collect();
        self.get(&mine)
    }
}

fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= r { s[i + s.len() - r] } else { 1 };
    (0..r)
        .map(|i| {
            let (x, y) = (dim(a, i), dim(b, i));
            assert!(x == y || x == 1 || y == 1, "reference: {a:?} and {b:?} do not broadcast");
            if x == 1 { y } else { x }
        })
        .collect()
}

fn zip(a: &A, b: &A, f: impl Fn(f64, f64) -> f64) -> A {
    A::from_fn(&broadcast_shape(&a.shape, &b.shape), |i| f(a.bget(i), b.bget(i)))
}

/// Reduces `axes` with `f` over the values of each group (in row-major order).
fn reduce(a: &A, axes: &[usize], keepdim: bool, f: impl Fn(&[f64]) -> f64) -> A {
    let kept: Vec<usize> = a.shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); kept.iter().product()];
    for (flat, &x) in a.data.iter().enumerate() {
        let mut idx = unravel(&a.shape, flat);
        for &ax in axes {
            idx[ax] = 0;
        }
        let g = A::new(&kept, vec![0.0; groups.len()]).offset(&idx);
        groups[g].push(x);
    }
    let out = A::new(&kept, groups.iter().map(|g| f(g)).collect());
    if keepdim {
        out
    } else {
        let dropped: Vec<usize> = a.shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
        out.reshape(&dropped)
    }
}

fn transpose(a: &A, perm: &[usize]) -> A {
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    A::from_fn(&shape, |o| {
        let mut src = vec![0; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            src[p] = o[k];
        }
        a.get(&src)
    })
}

fn softmax(a: &A, axis: usize) -> A {
    A::from_fn(&a.shape, |i| {
        let mut j = i.to_vec();
        let row: Vec<f64> = (0..a.shape[axis])
            .map(|k| {
                j[axis] = k;
                a.get(&j)
            })
            .collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (a.get(i) - m).exp() / row.iter().map(|&x| (x - m).exp()).sum::<f64>()
    })
}

/// NumPy `matmul` of arrays of rank 2 or more (batch dimensions broadcast).
fn matmul(a: &A, b: &A) -> A {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (n, k, m) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    assert_eq!(k, b.shape[rb - 2]);
    let mut shape = broadcast_shape(&a.shape[..ra - 2], &b.shape[..rb - 2]);
    shape.extend([n, m]);
    let batch_a = A::new(&a.shape[..ra - 2], vec![0.0; a.shape[..ra - 2].iter().product()]);
    let batch_b = A::new(&b.shape[..rb - 2], vec![0.0; b.shape[..rb - 2].iter().product()]);
    let pick = |arr: &A, batch: &A, o: &[usize], r: usize, c: usize| {
        let off = o.len() - 2 - batch.shape.len();
        let mut idx: Vec<usize> =
            batch.shape.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { o[off + i] }).collect();
        idx.extend([r, c]);
        arr.get(&idx)
    };
    A::from_fn(&shape, |o| {
        let (i, j) = (o[o.len() - 2], o[o.len() - 1]);
        (0..k).map(|t| pick(a, &batch_a, o, i, t) * pick(b, &batch_b, o, t, j)).sum()
    })
}

type Pads = [(usize, usize); 2];

/// PyTorch's conv2d (cross-correlation, NCHW, weight [O, C/groups, kh, kw]).
fn conv2d(x: &A, w: &A, bias: Option<&A>, stride: [usize; 2], pad: Pads, dil: [usize; 2], groups: usize) -> A {
    let (n, c, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (o, cg, kh, kw) = (w.shape[0], w.shape[1], w.shape[2], w.shape[3]);
    assert_eq!(cg * groups, c);
    let oh = (h + pad[0].0 + pad[0].1 - dil[0] * (kh - 1) - 1) / stride[0] + 1;
    let ow = (wd + pad[1].0 + pad[1].1 - dil[1] * (kw - 1) - 1) / stride[1] + 1;
    let per_group = o / groups;
    let out = A::from_fn(&[n, o, oh, ow], |i| {
        let (b, oc, y, z) = (i[0], i[1], i[2], i[3]);
        let g = oc / per_group;
        let mut s = 0.0;
        for ci in 0..cg {
            for p in 0..kh {
                for q in 0..kw {
                    let yy = (y * stride[0] + p * dil[0]) as i64 - pad[0].0 as i64;
                    let zz = (z * stride[1] + q * dil[1]) as i64 - pad[1].0 as i64;
                    if yy >= 0 && zz >= 0 && (yy as usize) < h && (zz as usize) < wd {
                        s += x.get(&[b, g * cg + ci, yy as usize, zz as usize]) * w.get(&[oc, ci, p, q]);
                    }
                }
            }
        }
        s
    });
    match bias {
        Some(b) => zip(&out, b, |a, c| a + c),
        None => out,
    }
}

/// conv1d as conv2d over a height of 1.
fn conv1d(x: &A, w: &A, bias: Option<&A>, stride: usize, pad: (usize, usize), dil: usize) -> A {
    let x4 = x.reshape(&[x.shape[0], x.shape[1], 1, x.shape[2]]);
    let w4 = w.reshape(&[w.shape[0], w.shape[1], 1, w.shape[2]]);
    let b4 = bias.map(|b| b.reshape(&[1, b.shape[1], 1, 1]));
    let y = conv2d(&x4, &w4, b4.as_ref(), [1, stride], [(0, 0), pad], [1, dil], 1);
    y.reshape(&[y.shape[0], y.shape[1], y.shape[3]])
}

/// 2-d pooling over the last two axes: max ignores padding (-inf), avg counts it as 0
/// and divides by the window size.
fn pool2d(x: &A, k: [usize; 2], stride: [usize; 2], pad: Pads, max: bool) -> A {
    let r = x.shape.len();
    let (h, w) = (x.shape[r - 2], x.shape[r - 1]);
    let oh = (h + pad[0].0 + pad[0].1 - k[0]) / stride[0] + 1;
    let ow = (w + pad[1].0 + pad[1].1 - k[1]) / stride[1] + 1;
    let mut shape = x.shape[..r - 2].to_vec();
    shape.extend([oh, ow]);
    A::from_fn(&shape, |i| {
        let (y, z) = (i[r - 2], i[r - 1]);
        let mut vals = Vec::new();
        for p in 0..k[0] {
            for q in 0..k[1] {
                let yy = (y * stride[0] + p) as i64 - pad[0].0 as i64;
                let zz = (z * stride[1] + q) as i64 - pad[1].0 as i64;
                if yy >= 0 && zz >= 0 && (yy as usize) < h && (zz as usize) < w {
                    let mut j = i[..r - 2].to_vec();
                    j.extend([yy as usize, zz as usize]);
                    vals.push(x.get(&j));
                }
            }
        }
        if max {
            vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
        } else {
            vals.iter().sum::<f64>() / (k[0] * k[1]) as f64
        }
    })
}

fn pool1d(x: &A, k: usize, stride: usize, pad: (usize, usize), max: bool) -> A {
    let x4 = x.reshape(&[x.shape[0], x.shape[1], 1, x.shape[2]]);
    let y = pool2d(&x4, [1, k], [1, stride], [(0, 0), pad], max);
    y.reshape(&[y.shape[0], y.shape[1], y.shape[3]])
}

/// `erf` by its Taylor series (exact to ~1e-13 for |x| <= 3, all this file needs).
fn erf(x: f64) -> f64 {
    assert!(x.abs() <= 3.0);
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    2.0 / PI.sqrt() * sum
}

fn gelu(v: f64) -> f64 {
    v * (1.0 + erf(v / SQRT_2)) / 2.0
}

fn gelu_tanh(v: f64) -> f64 {
    0.5 * v * (1.0 + ((2.0 / PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

fn softplus(v: f64) -> f64 {
    (-v.abs()).exp().ln_1p() + v.max(0.0)
}

fn b2f(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// Deterministic values in [-2, 2], multiples of 1/8.
fn vals(shape: &[usize], seed: u32) -> A {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    A::from_fn(shape, |_| {
        s = s.wrapping_mul(1103515245).wrapping_add(12345);
        ((s >> 16) % 33) as f64 * 0.125 - 2.0
    })
}

/// Deterministic values in [0.125, 4], multiples of 1/8.
fn pos(shape: &[usize], seed: u32) -> A {
    vals(shape, seed).map(|v| (v + 2.0) + 0.125)
}

// ---- tensors and models ----------------------------------------------------------

fn tensor(dtype: Dtype, a: &A) -> Tensor {
    Tensor::new(dtype, a.shape.iter().map(|&d| d as u64).collect(), a.data.clone())
}

fn f32t(a: &A) -> Tensor {
    tensor(Dtype::F32, a)
}

fn i32t(shape: &[usize], data: &[i64]) -> Tensor {
    tensor(Dtype::I32, &A::new(shape, data.iter().map(|&v| v as f64).collect()))
}

fn boolt(shape: &[usize], data: &[bool]) -> Tensor {
    tensor(Dtype::Bool, &A::new(shape, data.iter().map(|&b| b2f(b)).collect()))
}

fn a_of(t: &Tensor) -> A {
    A::new(&t.shape.iter().map(|&d| d as usize).collect::<Vec<_>>(), t.data.clone())
}

/// `{"key": {"name": k}}`: the parent's key `k` (an input of the model when nothing
/// produces it, or an output when nothing consumes it).
fn key(k: &str) -> Value {
    json!({"key": {"name": k}})
}

/// `{"key": {"connect": [[m, k]]}}`: the value of key `k` of child `m`.
fn from(m: &str, k: &str) -> Value {
    json!({"key": {"connect": [[m, k]]}})
}

/// A primitive child written as Mithril writes it: `exposed_keys` lists `output` and
/// every input that carries a value (a class default or a constructor argument).
fn node(class: &str, args: Value) -> Value {
    let spec = PRIMITIVES.iter().find(|p| p.class == class);
    let defaults: serde_json::Map<String, Value> = spec.map_or_else(Default::default, |p| serde_json::from_str(p.defaults).unwrap());
    let mut exposed = vec!["output".to_string()];
    for k in spec.map_or(&[][..], |p| p.inputs) {
        let from_args = args.get(*k).is_some_and(|v| v != "TBD");
        if defaults.contains_key(*k) || from_args {
            exposed.push(k.to_string());
        }
    }
    // `robust=True` adds a valued `threshold` key (Log, Sqrt, Power).
    if args.get("robust") == Some(&Value::Bool(true)) {
        exposed.push("threshold".to_string());
    }
    node_exposing(class, args, &exposed.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A primitive child with the given `exposed_keys` (an input left out has no value).
fn node_exposing(class: &str, args: Value, exposed: &[&str]) -> Value {
    json!({"name": class, "args": args, "exposed_keys": exposed})
}

/// A composite of children `m_0, m_1, ...`, each with its connections.
fn model(children: Vec<(Value, Value)>) -> Value {
    let mut subs = serde_json::Map::new();
    let mut conns = serde_json::Map::new();
    for (i, (n, c)) in children.into_iter().enumerate() {
        subs.insert(format!("m_{i}"), n);
        conns.insert(format!("m_{i}"), c);
    }
    json!({"name": "Model", "args": {}, "connections": conns, "submodels": subs, "exposed_keys": []})
}

/// A model with one child of `class`; its `output` is the model's `output`.
fn one(class: &str, args: Value, conns: Value) -> Value {
    let mut conns = conns;
    conns.as_object_mut().expect("connections are an object").entry("output").or_insert(key("output"));
    model(vec![(node(class, args), conns)])
}

/// Compiles the model (input types from `feeds`), runs the pipeline and the
/// interpreter; returns the outputs by name.
fn run(model: &Value, feeds: &[(&str, Tensor)]) -> Result<BTreeMap<String, Tensor>, Error> {
    let text = serde_json::to_string_pretty(model).unwrap();
    let mut opts = Options::default();
    for (name, t) in feeds {
        let shape = Shape::known(&t.shape);
        opts.known_types.insert(name.to_string(), TensorType::new(t.dtype, shape));
    }
    let mut graph = mithril::load_str(&text, "t.json", "t", &opts)?;
    passes::run_pipeline(&mut graph, passes::PIPELINE, &Default::default(), |_, _| {})?;
    let feeds: BTreeMap<String, Tensor> = feeds.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    Ok(mithrilc::interp::run(&graph, &feeds)?.into_iter().collect())
}

/// The model's `output` (panics with the model and the error if it fails).
fn out(model: &Value, feeds: &[(&str, Tensor)]) -> Tensor {
    match run(model, feeds) {
        Ok(mut outs) => {
            let names: Vec<String> = outs.keys().cloned().collect();
            outs.remove("output").unwrap_or_else(|| panic!("no `output` among the outputs {names:?}"))
        }
        Err(e) => panic!("{e}\nmodel: {}", serde_json::to_string(model).unwrap()),
    }
}

/// The error of a model that must fail (from the frontend or the interpreter).
fn fails(model: &Value, feeds: &[(&str, Tensor)]) -> Error {
    match run(model, feeds) {
        Ok(outs) => panic!("expected an error, got outputs {outs:?}\nmodel: {}", serde_json::to_string(model).unwrap()),
        Err(e) => e,
    }
}

#[track_caller]
fn assert_user_error(e: &Error, want: &str) {
    assert_eq!(e.to_string(), want);
    assert_eq!(e.kind, ErrorKind::User, "{e}");
}

const RTOL: f64 = 1e-6;
const ATOL: f64 = 1e-7;

/// `got` has `dtype` and `want`'s shape, and its values are `want`'s: exactly for
/// ints and bools, within RTOL (plus ATOL near 0) for floats; NaN matches NaN.
#[track_caller]
fn check(what: &str, got: &Tensor, dtype: Dtype, want: &A) {
    let want_shape: Vec<u64> = want.shape.iter().map(|&d| d as u64).collect();
    assert_eq!((got.dtype, &got.shape), (dtype, &want_shape), "{what}: dtype and shape");
    for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        let ok = if dtype.is_float() {
            (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= ATOL + RTOL * w.abs()
        } else {
            g == w
        };
        assert!(ok, "{what}: element {i} {:?} is {g}, expected {w}\n got {:?}\nwant {:?}", unravel(&want.shape, i), got.data, want.data);
    }
}

// ---- elementwise, one operand ----------------------------------------------------

#[test]
fn unary_math() {
    let x = A::new(&[2, 1, 3], vec![-2.0, -0.625, 0.0, 0.375, 1.25, 2.0]);
    let cases: &[(&str, fn(f64) -> f64)] = &[
        ("Absolute", f64::abs),
        ("Negate", |v| -v),
        ("Exponential", f64::exp),
        ("Sine", f64::sin),
        ("Cosine", f64::cos),
        ("Tanh", f64::tanh),
        ("Sigmoid", sigmoid),
        ("Relu", |v| v.max(0.0)),
        ("Softplus", softplus),
        ("Sign", |v| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 }),
        ("Square", |v| v * v),
        ("Floor", f64::floor),
        ("StopGradient", |v| v),
        ("Buffer", |v| v),
        ("Gelu", gelu),
    ];
    for (class, f) in cases {
        let m = one(class, json!({}), json!({"input": key("input")}));
        check(class, &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(*f));
    }
}

#[test]
fn extreme_inputs() {
    // Mithril's stable forms: sigmoid and softplus neither overflow nor lose the tail.
    let x = A::new(&[4], vec![-100.0, -30.0, 30.0, 100.0]);
    for (class, f) in [("Sigmoid", sigmoid as fn(f64) -> f64), ("Softplus", softplus), ("Tanh", f64::tanh), ("Gelu", |v: f64| if v > 0.0 { v } else { 0.0 })] {
        let m = one(class, json!({}), json!({"input": key("input")}));
        check(class, &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(f));
    }
    let t = A::new(&[4], vec![1.0, 0.0, 1.0, 0.0]);
    let m = one("BinaryCrossEntropy", json!({}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&t))]);
    check("BinaryCrossEntropy", &got, Dtype::F32, &zip(&x, &t, |a, b| (1.0 - b) * a + softplus(-a)));
}

#[test]
fn sqrt_and_log() {
    let x = A::new(&[1, 5], vec![0.25, 1.0, 2.0, 3.5, 0.125]);
    for (class, f) in [("Sqrt", f64::sqrt as fn(f64) -> f64), ("Log", f64::ln)] {
        let m = one(class, json!({}), json!({"input": key("input")}));
        check(class, &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(f));
    }
}

#[test]
fn gelu_approximate() {
    let x = vals(&[3, 1], 2);
    // The attribute as a connection constant, and as a recorded constructor argument.
    let by_conn = one("Gelu", json!({}), json!({"input": key("input"), "approximate": true}));
    check("Gelu approximate (connection)", &out(&by_conn, &[("input", f32t(&x))]), Dtype::F32, &x.map(gelu_tanh));
    let by_arg = one("Gelu", json!({"approximate": true}), json!({"input": key("input")}));
    check("Gelu approximate (args)", &out(&by_arg, &[("input", f32t(&x))]), Dtype::F32, &x.map(gelu_tanh));
    let exact = one("Gelu", json!({}), json!({"input": key("input"), "approximate": false}));
    check("Gelu exact", &out(&exact, &[("input", f32t(&x))]), Dtype::F32, &x.map(gelu));
}

#[test]
fn leaky_relu() {
    let x = vals(&[2, 1, 3], 3);
    let leaky = |s: f64| move |v: f64| v.max(0.0) + s * v.min(0.0);
    let default = one("LeakyRelu", json!({}), json!({"input": key("input")}));
    check("LeakyRelu default slope", &out(&default, &[("input", f32t(&x))]), Dtype::F32, &x.map(leaky(0.01)));
    let conn = one("LeakyRelu", json!({}), json!({"input": key("input"), "slope": 0.25}));
    check("LeakyRelu slope 0.25", &out(&conn, &[("input", f32t(&x))]), Dtype::F32, &x.map(leaky(0.25)));
    let arg = one("LeakyRelu", json!({"slope": 0.5}), json!({"input": key("input")}));
    check("LeakyRelu slope arg", &out(&arg, &[("input", f32t(&x))]), Dtype::F32, &x.map(leaky(0.5)));
}

#[test]
fn clamp() {
    let x = vals(&[5], 4);
    let both = one("Clamp", json!({}), json!({"input": key("input"), "min_val": -0.5, "max_val": 1.0}));
    check("Clamp [-0.5, 1]", &out(&both, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| v.clamp(-0.5, 1.0)));
    let ints = one("Clamp", json!({}), json!({"input": key("input"), "min_val": -1, "max_val": 1}));
    check("Clamp int bounds", &out(&ints, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| v.clamp(-1.0, 1.0)));
    // np.clip(x, None, 0.5): no lower bound.
    let upper = one("Clamp", json!({}), json!({"input": key("input"), "min_val": null, "max_val": 0.5}));
    check("Clamp (None, 0.5)", &out(&upper, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| v.min(0.5)));
    // Tensor bounds broadcast.
    let lo = A::new(&[2, 1], vec![-1.0, 0.0]);
    let t = one("Clamp", json!({}), json!({"input": key("input"), "min_val": key("lo"), "max_val": 1.5}));
    let want = zip(&x, &lo, |v, l| v.max(l).min(1.5));
    check("Clamp tensor bound", &out(&t, &[("input", f32t(&x)), ("lo", f32t(&lo))]), Dtype::F32, &want);
}

#[test]
fn isnan_and_logical_not() {
    let x = A::new(&[2, 2], vec![f64::NAN, 1.0, f64::NEG_INFINITY, 0.0]);
    let m = one("IsNan", json!({}), json!({"input": key("input")}));
    check("IsNan", &out(&m, &[("input", f32t(&x))]), Dtype::Bool, &A::new(&[2, 2], vec![1.0, 0.0, 0.0, 0.0]));
    let m = one("LogicalNot", json!({}), json!({"input": key("input")}));
    let got = out(&m, &[("input", boolt(&[2, 1], &[true, false]))]);
    check("LogicalNot", &got, Dtype::Bool, &A::new(&[2, 1], vec![0.0, 1.0]));
}

#[test]
fn zeros_like_and_atleast_1d() {
    let m = one("ZerosLike", json!({}), json!({"input": key("input")}));
    check("ZerosLike f32", &out(&m, &[("input", f32t(&vals(&[2, 1, 3], 5)))]), Dtype::F32, &A::new(&[2, 1, 3], vec![0.0; 6]));
    check("ZerosLike i32", &out(&m, &[("input", i32t(&[3], &[4, -1, 7]))]), Dtype::I32, &A::new(&[3], vec![0.0; 3]));
    let m = one("AtLeast1D", json!({}), json!({"input": key("input")}));
    let scalar = A::new(&[], vec![2.5]);
    check("AtLeast1D scalar", &out(&m, &[("input", f32t(&scalar))]), Dtype::F32, &A::new(&[1], vec![2.5]));
    let x = vals(&[2, 1], 6);
    check("AtLeast1D matrix", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x);
}

// ---- elementwise, two operands ---------------------------------------------------

#[test]
fn arithmetic_broadcast() {
    let l = vals(&[2, 1, 3], 7);
    let r = A::new(&[4, 1], vec![-1.5, 0.5, 2.0, -0.25]);
    let base = pos(&[2, 1, 3], 8);
    let cases: &[(&str, &str, &str, fn(f64, f64) -> f64)] = &[
        ("Add", "left", "right", |a, b| a + b),
        ("Subtract", "left", "right", |a, b| a - b),
        ("Multiply", "left", "right", |a, b| a * b),
        ("Divide", "numerator", "denominator", |a, b| a / b),
        ("FloorDivide", "numerator", "denominator", |a, b| (a / b).floor()),
        ("Power", "base", "exponent", f64::powf),
        ("Minimum", "left", "right", f64::min),
        ("Maximum", "left", "right", f64::max),
    ];
    for (class, lk, rk, f) in cases {
        let left = if *class == "Power" { &base } else { &l };
        let m = one(class, json!({}), json!({*lk: key(lk), *rk: key(rk)}));
        let got = out(&m, &[(lk, f32t(left)), (rk, f32t(&r))]);
        check(class, &got, Dtype::F32, &zip(left, &r, *f));
    }
}

#[test]
fn scalar_operands() {
    // Python scalars take the tensor's dtype (NumPy 2's weak scalars).
    let x = vals(&[3, 1], 9);
    let add = one("Add", json!({}), json!({"left": key("x"), "right": 2.5}));
    check("x + 2.5", &out(&add, &[("x", f32t(&x))]), Dtype::F32, &x.map(|v| v + 2.5));
    let sub = one("Subtract", json!({}), json!({"left": 1, "right": key("x")}));
    check("1 - x", &out(&sub, &[("x", f32t(&x))]), Dtype::F32, &x.map(|v| 1.0 - v));
    let div = one("Divide", json!({}), json!({"numerator": key("x"), "denominator": 4}));
    check("x / 4", &out(&div, &[("x", f32t(&x))]), Dtype::F32, &x.map(|v| v / 4.0));
    let sq = one("Power", json!({}), json!({"base": key("x"), "exponent": 2}));
    check("x ** 2", &out(&sq, &[("x", f32t(&x))]), Dtype::F32, &x.map(|v| v * v));
    let p = pos(&[5], 10);
    let root = one("Power", json!({}), json!({"base": key("x"), "exponent": 0.5}));
    check("x ** 0.5", &out(&root, &[("x", f32t(&p))]), Dtype::F32, &p.map(f64::sqrt));
    let mul = one("Multiply", json!({}), json!({"left": key("x"), "right": 3}));
    let got = out(&mul, &[("x", i32t(&[3], &[-2, 0, 5]))]);
    check("int x * 3", &got, Dtype::I32, &A::new(&[3], vec![-6.0, 0.0, 15.0]));
    // A float scalar with an int tensor gives floats (NumPy: int32 + 2.5 is float).
    let add = one("Add", json!({}), json!({"left": key("x"), "right": 2.5}));
    let got = out(&add, &[("x", i32t(&[3], &[-2, 0, 5]))]);
    check("int x + 2.5", &got, Dtype::F32, &A::new(&[3], vec![0.5, 2.5, 7.5]));
    let gt = one("Greater", json!({}), json!({"left": key("x"), "right": 1.5}));
    let got = out(&gt, &[("x", i32t(&[3], &[-2, 1, 2]))]);
    check("int x > 1.5", &got, Dtype::Bool, &A::new(&[3], vec![0.0, 0.0, 1.0]));
}

#[test]
fn int_floor_divide() {
    // Python's // on ints rounds toward -inf.
    let m = one("FloorDivide", json!({}), json!({"numerator": key("n"), "denominator": key("d")}));
    let got = out(&m, &[("n", i32t(&[5], &[-7, 7, -8, 0, 9])), ("d", i32t(&[5], &[2, -2, 3, 5, -4]))]);
    check("FloorDivide i32", &got, Dtype::I32, &A::new(&[5], vec![-4.0, -4.0, -3.0, 0.0, -3.0]));
}

#[test]
fn comparisons() {
    let l = A::new(&[2, 1, 3], vec![0.0, 1.0, 2.0, -1.0, 1.0, 3.0]);
    let r = A::new(&[4, 1], vec![1.0, 0.0, 3.0, -1.0]);
    let cases: &[(&str, fn(f64, f64) -> bool)] = &[
        ("Greater", |a, b| a > b),
        ("GreaterEqual", |a, b| a >= b),
        ("Less", |a, b| a < b),
        ("LessEqual", |a, b| a <= b),
        ("Equal", |a, b| a == b),
        ("NotEqual", |a, b| a != b),
    ];
    for (class, f) in cases {
        let m = one(class, json!({}), json!({"left": key("left"), "right": key("right")}));
        let got = out(&m, &[("left", f32t(&l)), ("right", f32t(&r))]);
        check(class, &got, Dtype::Bool, &zip(&l, &r, |a, b| b2f(f(a, b))));
    }
    // A scalar constant operand.
    let m = one("Greater", json!({}), json!({"left": key("left"), "right": 0.5}));
    check("Greater than 0.5", &out(&m, &[("left", f32t(&l))]), Dtype::Bool, &l.map(|v| b2f(v > 0.5)));
}

#[test]
fn logical() {
    let l = boolt(&[2, 1], &[true, false]);
    let r = boolt(&[1, 3], &[true, false, true]);
    let cases: &[(&str, fn(bool, bool) -> bool)] =
        &[("LogicalAnd", |a, b| a && b), ("LogicalOr", |a, b| a || b), ("LogicalXOr", |a, b| a != b)];
    for (class, f) in cases {
        let m = one(class, json!({}), json!({"left": key("left"), "right": key("right")}));
        let got = out(&m, &[("left", l.clone()), ("right", r.clone())]);
        check(class, &got, Dtype::Bool, &zip(&a_of(&l), &a_of(&r), |a, b| b2f(f(a != 0.0, b != 0.0))));
    }
}

#[test]
fn shifts() {
    let x = [-7i64, 5, 1, 12, -1, 3];
    let s = [1i64, 2, 0];
    let want = |f: fn(i64, i64) -> i64| A::from_fn(&[2, 3], |i| f(x[i[0] * 3 + i[1]], s[i[1]]) as f64);
    let feeds = [("input", i32t(&[2, 3], &x)), ("shift", i32t(&[3], &s))];
    let m = one("ShiftLeft", json!({}), json!({"input": key("input"), "shift": key("shift")}));
    check("ShiftLeft", &out(&m, &feeds), Dtype::I32, &want(|a, b| a << b));
    // Arithmetic shift: -7 >> 1 == -4, -1 >> 2 == -1.
    let m = one("ShiftRight", json!({}), json!({"input": key("input"), "shift": key("shift")}));
    check("ShiftRight", &out(&m, &feeds), Dtype::I32, &want(|a, b| a >> b));
}

#[test]
fn where_select() {
    let cond = boolt(&[2, 1], &[true, false]);
    let a = vals(&[1, 3], 11);
    let b = vals(&[2, 3], 12);
    let m = one("Where", json!({}), json!({"cond": key("cond"), "input1": key("a"), "input2": key("b")}));
    let got = out(&m, &[("cond", cond.clone()), ("a", f32t(&a)), ("b", f32t(&b))]);
    let want = A::from_fn(&[2, 3], |i| if i[0] == 0 { a.get(&[0, i[1]]) } else { b.get(i) });
    check("Where tensors", &got, Dtype::F32, &want);
    let m = one("Where", json!({}), json!({"cond": key("cond"), "input1": key("a"), "input2": 0.5}));
    let got = out(&m, &[("cond", cond), ("a", f32t(&a))]);
    let want = A::from_fn(&[2, 3], |i| if i[0] == 0 { a.get(&[0, i[1]]) } else { 0.5 });
    check("Where scalar", &got, Dtype::F32, &want);
}

// ---- linear algebra and neural-network primitives ---------------------------------

#[test]
fn matmul_batched_broadcast() {
    let a = vals(&[2, 1, 2, 3], 13);
    let b = vals(&[3, 3, 2], 14);
    let m = one("MatrixMultiply", json!({}), json!({"left": key("left"), "right": key("right")}));
    let got = out(&m, &[("left", f32t(&a)), ("right", f32t(&b))]);
    check("MatrixMultiply [2,1,2,3] @ [3,3,2]", &got, Dtype::F32, &matmul(&a, &b));
}

#[test]
fn matmul_vectors() {
    // NumPy matmul promotes a 1-d operand to a matrix and drops that dimension again.
    let m = one("MatrixMultiply", json!({}), json!({"left": key("left"), "right": key("right")}));
    let v = vals(&[3], 15);
    let w = vals(&[3, 2], 16);
    let want = matmul(&v.reshape(&[1, 3]), &w).reshape(&[2]);
    check("[3] @ [3, 2]", &out(&m, &[("left", f32t(&v)), ("right", f32t(&w))]), Dtype::F32, &want);
    let w2 = vals(&[2, 3], 17);
    let want = matmul(&w2, &v.reshape(&[3, 1])).reshape(&[2]);
    check("[2, 3] @ [3]", &out(&m, &[("left", f32t(&w2)), ("right", f32t(&v))]), Dtype::F32, &want);
    let want = matmul(&v.reshape(&[1, 3]), &v.reshape(&[3, 1])).reshape(&[]);
    check("[3] @ [3]", &out(&m, &[("left", f32t(&v)), ("right", f32t(&v))]), Dtype::F32, &want);
}

#[test]
fn conv2d_primitive() {
    let x = vals(&[1, 4, 5, 6], 18);
    let w = vals(&[4, 2, 3, 2], 19);
    let b = vals(&[1, 4, 1, 1], 20);
    let m = one(
        "PrimitiveConvolution2D",
        json!({}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias"),
               "stride": [2, 1], "padding": [[1, 0], [0, 1]], "dilation": [1, 2], "groups": 2}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    let want = conv2d(&x, &w, Some(&b), [2, 1], [(1, 0), (0, 1)], [1, 2], 2);
    assert_eq!(want.shape, [1, 4, 2, 5]);
    check("PrimitiveConvolution2D groups=2", &got, Dtype::F32, &want);
}

#[test]
fn conv1d_primitive() {
    let x = vals(&[2, 3, 5], 21);
    let w = vals(&[2, 3, 2], 22);
    let b = vals(&[1, 2, 1], 23);
    let m = one(
        "PrimitiveConvolution1D",
        json!({}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias"),
               "stride": 2, "padding": [1, 2], "dilation": 2}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    let want = conv1d(&x, &w, Some(&b), 2, (1, 2), 2);
    assert_eq!(want.shape, [2, 2, 3]);
    check("PrimitiveConvolution1D", &got, Dtype::F32, &want);
    let m = one(
        "PrimitiveConvolution1D",
        json!({"use_bias": false}),
        json!({"input": key("input"), "weight": key("weight"), "stride": 1, "padding": 1, "dilation": 1}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w))]);
    check("PrimitiveConvolution1D without bias", &got, Dtype::F32, &conv1d(&x, &w, None, 1, (1, 1), 1));
}

/// [1, 2, 4, 5] with channel 1 all negative (so zero padding would win a max).
fn pool_input() -> A {
    let p = pos(&[1, 2, 4, 5], 24);
    A::from_fn(&p.shape, |i| if i[1] == 1 { -p.get(i) } else { p.get(i) - 2.0 })
}

#[test]
fn pools_primitive() {
    let x = pool_input();
    let attrs = json!({"input": key("input"), "kernel_size": [2, 3], "stride": [2, 2], "padding": [[1, 0], [0, 1]], "dilation": [1, 1]});
    let pads = [(1, 0), (0, 1)];
    let m = one("PrimitiveMaxPool2D", json!({}), attrs.clone());
    let want = pool2d(&x, [2, 3], [2, 2], pads, true);
    assert_eq!(want.shape, [1, 2, 2, 2]);
    check("PrimitiveMaxPool2D", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    let m = one("PrimitiveAvgPool2D", json!({}), attrs);
    check("PrimitiveAvgPool2D", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &pool2d(&x, [2, 3], [2, 2], pads, false));
    let x1 = pos(&[2, 1, 5], 25).map(|v| -v);
    let m = one(
        "PrimitiveMaxPool1D",
        json!({}),
        json!({"input": key("input"), "kernel_size": 2, "stride": 2, "padding": [1, 1], "dilation": 1}),
    );
    let want = pool1d(&x1, 2, 2, (1, 1), true);
    assert_eq!(want.shape, [2, 1, 3]);
    check("PrimitiveMaxPool1D", &out(&m, &[("input", f32t(&x1))]), Dtype::F32, &want);
}

#[test]
fn embedding() {
    // weight[indices]; a negative index counts from the end, as in NumPy.
    let idx = [4i64, 0, -1, 2, 1, 3];
    let w = vals(&[5, 2], 26);
    let m = one("Embedding", json!({}), json!({"input": key("input"), "weight": key("weight")}));
    let got = out(&m, &[("input", i32t(&[2, 3], &idx)), ("weight", f32t(&w))]);
    let want = A::from_fn(&[2, 3, 2], |i| w.get(&[idx[i[0] * 3 + i[1]].rem_euclid(5) as usize, i[2]]));
    check("Embedding", &got, Dtype::F32, &want);
}

enum Mask<'a> {
    None,
    Float(&'a A),
    Bool(&'a A),
}

/// Mithril's scaled_dot_product_attention.
fn attention(q: &A, k: &A, v: &A, scale: Option<f64>, causal: bool, mask: Mask) -> A {
    let r = q.shape.len();
    let (l, s) = (q.shape[r - 2], k.shape[r - 2]);
    let scale = scale.unwrap_or(1.0 / (q.shape[r - 1] as f64).sqrt());
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    let scores = matmul(q, &transpose(k, &perm)).map(|x| x * scale);
    let mut bias = A::from_fn(&[l, s], |i| if causal && i[1] > i[0] { f64::NEG_INFINITY } else { 0.0 });
    match mask {
        Mask::None => {}
        Mask::Float(m) => bias = zip(&bias, m, |a, b| a + b),
        Mask::Bool(m) => bias = zip(&bias, m, |a, b| if b != 0.0 { a } else { f64::NEG_INFINITY }),
    }
    matmul(&softmax(&zip(&scores, &bias, |a, b| a + b), r - 1), v)
}

#[test]
fn attention_causal() {
    let (q, k, v) = (vals(&[2, 3, 4], 27), vals(&[2, 3, 4], 28), vals(&[2, 3, 5], 29));
    let m = one("ScaledDotProduct", json!({}), json!({"query": key("q"), "key": key("k"), "value": key("v")}));
    let got = out(&m, &[("q", f32t(&q)), ("k", f32t(&k)), ("v", f32t(&v))]);
    check("ScaledDotProduct causal", &got, Dtype::F32, &attention(&q, &k, &v, None, true, Mask::None));
    // L != S: the causal mask is np.tril of an [L, S] matrix.
    let (q, k, v) = (vals(&[1, 2, 4], 30), vals(&[1, 5, 4], 31), vals(&[1, 5, 3], 32));
    let got = out(&m, &[("q", f32t(&q)), ("k", f32t(&k)), ("v", f32t(&v))]);
    check("ScaledDotProduct causal L=2 S=5", &got, Dtype::F32, &attention(&q, &k, &v, None, true, Mask::None));
}

#[test]
fn attention_scale_and_constant_mask() {
    let (q, k, v) = (vals(&[1, 2, 4], 33), vals(&[1, 5, 4], 34), vals(&[1, 5, 3], 35));
    let qkv = [("q", f32t(&q)), ("k", f32t(&k)), ("v", f32t(&v))];
    let conns = json!({"query": key("q"), "key": key("k"), "value": key("v"), "is_causal": false, "scale": 0.25});
    let m = one("ScaledDotProduct", json!({}), conns);
    check("ScaledDotProduct scale 0.25", &out(&m, &qkv), Dtype::F32, &attention(&q, &k, &v, Some(0.25), false, Mask::None));
    // A float mask written as a tensor constant.
    let fmask = vals(&[2, 5], 36);
    let rows: Vec<Vec<f64>> = (0..2).map(|r| (0..5).map(|c| fmask.get(&[r, c])).collect()).collect();
    let conns = json!({"query": key("q"), "key": key("k"), "value": key("v"), "is_causal": false,
                       "attn_mask": {"tensor": rows}});
    let m = one("ScaledDotProduct", json!({}), conns);
    check("ScaledDotProduct constant mask", &out(&m, &qkv), Dtype::F32, &attention(&q, &k, &v, None, false, Mask::Float(&fmask)));
}

#[test]
fn attention_with_a_mask_input() {
    // `ScaledDotProduct(is_causal=False, use_attn_mask=True)` with its `attn_mask`
    // connected to a model input is written as below: Mithril records no factory args
    // for ScaledDotProduct, and `attn_mask` (no value) is not among the child's
    // exposed_keys, so the class default `attn_mask: None` does not apply.
    let (q, k, v) = (vals(&[1, 2, 4], 33), vals(&[1, 5, 4], 34), vals(&[1, 5, 3], 35));
    let conns = json!({"query": key("q"), "key": key("k"), "value": key("v"), "attn_mask": key("mask"),
                       "is_causal": false, "scale": 0.25, "output": key("output")});
    let child = node_exposing("ScaledDotProduct", json!({}), &["output", "dropout_p", "is_causal", "scale"]);
    let m = model(vec![(child, conns)]);
    let fmask = vals(&[2, 5], 36);
    let got = out(&m, &[("q", f32t(&q)), ("k", f32t(&k)), ("v", f32t(&v)), ("mask", f32t(&fmask))]);
    check("ScaledDotProduct float mask", &got, Dtype::F32, &attention(&q, &k, &v, Some(0.25), false, Mask::Float(&fmask)));
    let bits = [true, false, true, true, false, false, true, false, false, true];
    let bmask = a_of(&boolt(&[2, 5], &bits));
    let got = out(&m, &[("q", f32t(&q)), ("k", f32t(&k)), ("v", f32t(&v)), ("mask", boolt(&[2, 5], &bits))]);
    check("ScaledDotProduct bool mask", &got, Dtype::F32, &attention(&q, &k, &v, Some(0.25), false, Mask::Bool(&bmask)));
}

#[test]
fn cartesian_and_permute() {
    let l = vals(&[3, 2], 37);
    let r = vals(&[4, 2], 38);
    let m = one("CartesianDifference", json!({}), json!({"left": key("left"), "right": key("right")}));
    let got = out(&m, &[("left", f32t(&l)), ("right", f32t(&r))]);
    let want = A::from_fn(&[3, 4, 2], |i| l.get(&[i[0], i[2]]) - r.get(&[i[1], i[2]]));
    check("CartesianDifference", &got, Dtype::F32, &want);
    let x = vals(&[3, 2], 39);
    let m = one("PermuteTensor", json!({}), json!({"input": key("input"), "indices": key("indices")}));
    let got = out(&m, &[("input", f32t(&x)), ("indices", i32t(&[3], &[2, 0, 1]))]);
    let want = A::from_fn(&[3, 2], |i| x.get(&[[2, 0, 1][i[0]], i[1]]));
    check("PermuteTensor", &got, Dtype::F32, &want);
}

#[test]
fn softmax_axes() {
    let x = vals(&[2, 1, 3], 40);
    let m = one("Softmax", json!({}), json!({"input": key("input")}));
    check("Softmax default axis", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &softmax(&x, 2));
    for (axis, ax) in [(0i64, 0usize), (1, 1), (-3, 0)] {
        let m = one("Softmax", json!({}), json!({"input": key("input"), "axis": axis}));
        check(&format!("Softmax axis {axis}"), &out(&m, &[("input", f32t(&x))]), Dtype::F32, &softmax(&x, ax));
    }
}

// ---- reductions --------------------------------------------------------------------

/// (axis as JSON, normalized axes of a rank-4 input, keepdim).
fn reduction_cases() -> Vec<(Value, Vec<usize>, bool)> {
    vec![
        (Value::Null, vec![0, 1, 2, 3], false),
        (Value::Null, vec![0, 1, 2, 3], true),
        (json!(1), vec![1], false),
        (json!(-1), vec![3], false),
        (json!([0, 2]), vec![0, 2], true),
        (json!([0, -1]), vec![0, 3], false),
    ]
}

#[test]
fn reductions() {
    let x = vals(&[2, 3, 1, 2], 41);
    let cases: &[(&str, fn(&[f64]) -> f64)] = &[
        ("Mean", |g| g.iter().sum::<f64>() / g.len() as f64),
        ("Sum", |g| g.iter().sum()),
        ("Max", |g| g.iter().cloned().fold(f64::NEG_INFINITY, f64::max)),
        ("Min", |g| g.iter().cloned().fold(f64::INFINITY, f64::min)),
        ("Prod", |g| g.iter().product()),
    ];
    for (class, f) in cases {
        for (axis, axes, keepdim) in reduction_cases() {
            let m = one(class, json!({}), json!({"input": key("input"), "axis": axis, "keepdim": keepdim}));
            let what = format!("{class} axis={axis} keepdim={keepdim}");
            check(&what, &out(&m, &[("input", f32t(&x))]), Dtype::F32, &reduce(&x, &axes, keepdim, f));
        }
    }
    // The mean of integers is a float.
    let m = one("Mean", json!({}), json!({"input": key("input"), "axis": 1}));
    check("Mean i32", &out(&m, &[("input", i32t(&[2, 2], &[1, 2, 7, -2]))]), Dtype::F32, &A::new(&[2], vec![1.5, 2.5]));
    // Defaults (axis None, keepdim False) and an integer input.
    let m = one("Sum", json!({}), json!({"input": key("input")}));
    check("Sum i32 defaults", &out(&m, &[("input", i32t(&[2, 2], &[1, -4, 7, 2]))]), Dtype::I32, &A::new(&[], vec![6.0]));
}

/// Index of the first extreme (NumPy's tie rule).
fn arg_extreme(g: &[f64], max: bool) -> f64 {
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        if (max && v > g[best]) || (!max && v < g[best]) {
            best = i;
        }
    }
    best as f64
}

#[test]
fn arg_reductions() {
    let x = A::new(&[2, 3], vec![1.0, 3.0, 3.0, -2.0, -2.0, 0.0]);
    for (class, max) in [("ArgMax", true), ("ArgMin", false)] {
        let m = one(class, json!({}), json!({"input": key("input")}));
        let want = A::new(&[], vec![arg_extreme(&x.data, max)]);
        check(&format!("{class} flat"), &out(&m, &[("input", f32t(&x))]), Dtype::I64, &want);
        let m = one(class, json!({}), json!({"input": key("input"), "axis": 1}));
        let want = reduce(&x, &[1], false, |g| arg_extreme(g, max));
        check(&format!("{class} axis 1"), &out(&m, &[("input", f32t(&x))]), Dtype::I64, &want);
        let m = one(class, json!({}), json!({"input": key("input"), "axis": 0, "keepdim": true}));
        let want = reduce(&x, &[0], true, |g| arg_extreme(g, max));
        check(&format!("{class} axis 0 keepdim"), &out(&m, &[("input", f32t(&x))]), Dtype::I64, &want);
        let y = vals(&[2, 1, 3], 42);
        let m = one(class, json!({}), json!({"input": key("input"), "axis": -1}));
        let want = reduce(&y, &[2], false, |g| arg_extreme(g, max));
        check(&format!("{class} axis -1"), &out(&m, &[("input", f32t(&y))]), Dtype::I64, &want);
    }
    // The expected values above, by hand.
    let m = one("ArgMax", json!({}), json!({"input": key("input"), "axis": 1}));
    check("ArgMax by hand", &out(&m, &[("input", f32t(&x))]), Dtype::I64, &A::new(&[2], vec![1.0, 2.0]));
}

#[test]
fn variance() {
    let x = vals(&[2, 3, 2], 43);
    let var = |ddof: f64| {
        move |g: &[f64]| {
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            g.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (g.len() as f64 - ddof)
        }
    };
    let m = one("Variance", json!({}), json!({"input": key("input")}));
    check("Variance defaults", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &reduce(&x, &[0, 1, 2], false, var(0.0)));
    let m = one("Variance", json!({}), json!({"input": key("input"), "axis": [0, 2], "keepdim": true, "correction": 1}));
    check("Variance axes (0, 2) ddof 1", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &reduce(&x, &[0, 2], true, var(1.0)));
    let m = one("Variance", json!({}), json!({"input": key("input"), "axis": 1, "correction": 1.5}));
    check("Variance axis 1 ddof 1.5", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &reduce(&x, &[1], false, var(1.5)));
}

// ---- shape manipulation --------------------------------------------------------------

#[test]
fn reshape_and_flatten() {
    let x = vals(&[2, 3, 2], 44);
    for (shape, want) in [(json!([3, -1]), vec![3, 4]), (json!([1, 12]), vec![1, 12]), (json!([-1, 1, 3]), vec![4, 1, 3]), (json!(12), vec![12])] {
        let m = one("Reshape", json!({}), json!({"input": key("input"), "shape": shape}));
        check(&format!("Reshape {shape}"), &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.reshape(&want));
    }
    let y = vals(&[2, 1, 3, 2], 45);
    let cases = [
        (json!({}), vec![12]),
        (json!({"start_dim": 1, "end_dim": 2}), vec![2, 3, 2]),
        (json!({"start_dim": 1}), vec![2, 6]),
        (json!({"start_dim": -2, "end_dim": -1}), vec![2, 1, 6]),
    ];
    for (attrs, want) in cases {
        let mut conns = json!({"input": key("input")});
        conns.as_object_mut().unwrap().extend(attrs.as_object().unwrap().clone());
        let m = one("Flatten", json!({}), conns);
        check(&format!("Flatten {attrs}"), &out(&m, &[("input", f32t(&y))]), Dtype::F32, &y.reshape(&want));
    }
}

#[test]
fn transpose_swapaxes_squeeze() {
    let x = vals(&[2, 1, 3], 46);
    let m = one("Transpose", json!({}), json!({"input": key("input")}));
    check("Transpose reverse", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &transpose(&x, &[2, 1, 0]));
    let m = one("Transpose", json!({}), json!({"input": key("input"), "axes": [1, 2, 0]}));
    check("Transpose (1, 2, 0)", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &transpose(&x, &[1, 2, 0]));
    let m = one("Transpose", json!({}), json!({"input": key("input"), "axes": [-1, 0, -2]}));
    check("Transpose (-1, 0, -2)", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &transpose(&x, &[2, 0, 1]));
    let m = one("SwapAxes", json!({"axis1": 0, "axis2": 2}), json!({"input": key("input")}));
    check("SwapAxes 0 2", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &transpose(&x, &[2, 1, 0]));
    let m = one("SwapAxes", json!({}), json!({"input": key("input"), "axis1": -1, "axis2": 1}));
    check("SwapAxes -1 1", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &transpose(&x, &[0, 2, 1]));
    let y = vals(&[1, 3, 1, 2], 47);
    let m = one("Squeeze", json!({}), json!({"input": key("input")}));
    check("Squeeze [1,3,1,2]", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &y.reshape(&[3, 2]));
    let z = A::new(&[1, 1], vec![1.5]);
    check("Squeeze [1,1]", &out(&m, &[("input", f32t(&z))]), Dtype::F32, &z.reshape(&[]));
}

#[test]
fn broadcast_to() {
    let x = vals(&[3, 1], 48);
    let m = one("BroadcastTo", json!({}), json!({"input": key("input"), "shape": [2, 3, 4]}));
    check("BroadcastTo [2,3,4]", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &A::from_fn(&[2, 3, 4], |i| x.bget(i)));
    let s = A::new(&[], vec![0.75]);
    let m = one("BroadcastTo", json!({}), json!({"input": key("input"), "shape": [2, 1]}));
    check("BroadcastTo scalar", &out(&m, &[("input", f32t(&s))]), Dtype::F32, &A::new(&[2, 1], vec![0.75; 2]));
}

fn concat(parts: &[&A], axis: usize) -> A {
    let mut shape = parts[0].shape.clone();
    shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
    A::from_fn(&shape, |i| {
        let mut j = i.to_vec();
        for p in parts {
            if j[axis] < p.shape[axis] {
                return p.get(&j);
            }
            j[axis] -= p.shape[axis];
        }
        unreachable!()
    })
}

#[test]
fn concat_lists() {
    let (a, b, c) = (vals(&[2, 1], 49), vals(&[2, 3], 50), vals(&[2, 1], 51));
    let list2 = |axis_conn: Option<Value>, args: Value| {
        let mut conns = json!({"input": from("m_0", "output"), "output": key("output")});
        if let Some(ax) = axis_conn {
            conns["axis"] = ax;
        }
        model(vec![
            (node("ToList", json!({"n": 2})), json!({"input1": key("a"), "input2": key("b")})),
            (node("Concat", args), conns),
        ])
    };
    let feeds = [("a", f32t(&a)), ("b", f32t(&b))];
    check("Concat axis 1 (args)", &out(&list2(None, json!({"axis": 1})), &feeds), Dtype::F32, &concat(&[&a, &b], 1));
    check("Concat axis -1", &out(&list2(Some(json!(-1)), json!({})), &feeds), Dtype::F32, &concat(&[&a, &b], 1));
    // axis=None: flatten each, then concatenate.
    let v = vals(&[3], 52);
    let feeds = [("a", f32t(&a)), ("b", f32t(&v))];
    let want = concat(&[&a.reshape(&[2]), &v], 0);
    check("Concat axis None", &out(&list2(Some(Value::Null), json!({})), &feeds), Dtype::F32, &want);
    // Three inputs along the default axis 0.
    let m = model(vec![
        (node("ToList", json!({"n": 3})), json!({"input1": key("a"), "input2": key("b"), "input3": key("c")})),
        (node("Concat", json!({})), json!({"input": from("m_0", "output"), "output": key("output")})),
    ]);
    let b0 = vals(&[3, 1], 53);
    let got = out(&m, &[("a", f32t(&a)), ("b", f32t(&b0)), ("c", f32t(&c))]);
    check("Concat three, axis 0", &got, Dtype::F32, &concat(&[&a, &b0, &c], 0));
}

#[test]
fn split_then_index() {
    let split = |x_conn: Value, size: i64, axis: i64, index: i64| {
        model(vec![
            (node("Split", json!({})), json!({"input": x_conn, "split_size": size, "axis": axis})),
            (node("Indexer", json!({})), json!({"input": from("m_0", "output"), "index": index, "output": key("output")})),
        ])
    };
    let x = vals(&[2, 1, 6], 54);
    let m = split(key("input"), 3, -1, 1);
    let want = A::from_fn(&[2, 1, 2], |i| x.get(&[i[0], i[1], 2 + i[2]]));
    check("Split(3, axis=-1)[1]", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    let y = vals(&[4, 3], 55);
    let m = split(key("input"), 2, 0, -1);
    let want = A::from_fn(&[2, 3], |i| y.get(&[2 + i[0], i[1]]));
    check("Split(2, axis=0)[-1]", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &want);
}

fn pad(x: &A, pads: &[(usize, usize)]) -> A {
    let shape: Vec<usize> = x.shape.iter().zip(pads).map(|(d, p)| d + p.0 + p.1).collect();
    A::from_fn(&shape, |i| {
        let mut j = Vec::new();
        for (k, &o) in i.iter().enumerate() {
            if o < pads[k].0 || o >= pads[k].0 + x.shape[k] {
                return 0.0;
            }
            j.push(o - pads[k].0);
        }
        x.get(&j)
    })
}

#[test]
fn pad_constant() {
    let x = vals(&[2, 1, 3], 56);
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": [[0, 1], [2, 0], [1, 1]]}));
    check("Pad per axis", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &pad(&x, &[(0, 1), (2, 0), (1, 1)]));
    let y = vals(&[2, 3], 57);
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": 1}));
    check("Pad 1", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &pad(&y, &[(1, 1), (1, 1)]));
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": [[1, 2]]}));
    check("Pad ((1, 2),) rank 3", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &pad(&x, &[(1, 2), (1, 2), (1, 2)]));
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": [1, 2]}));
    check("Pad (1, 2) rank 3", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &pad(&x, &[(1, 2), (1, 2), (1, 2)]));
}

#[test]
fn pad_pair_on_a_matrix() {
    // np.pad(x, (1, 2)) and np.pad(x, ((1, 2),)) pad *every* axis with (1 before,
    // 2 after) whatever the rank (numpy's _as_pairs), also for a rank-2 input.
    let y = vals(&[2, 3], 58);
    let want = pad(&y, &[(1, 2), (1, 2)]);
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": [1, 2]}));
    check("Pad (1, 2) rank 2", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &want);
    let m = one("Pad", json!({}), json!({"input": key("input"), "pad_width": [[1, 2]]}));
    check("Pad ((1, 2),) rank 2", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &want);
}

#[test]
fn indexer_on_tensors() {
    let x = vals(&[2, 3, 4], 59);
    let cases: Vec<(Value, A)> = vec![
        (json!(1), A::from_fn(&[3, 4], |i| x.get(&[1, i[0], i[1]]))),
        (json!(-1), A::from_fn(&[3, 4], |i| x.get(&[1, i[0], i[1]]))),
        (json!([0, -1]), A::from_fn(&[4], |i| x.get(&[0, 2, i[0]]))),
        (json!([null, 0]), A::from_fn(&[1, 3, 4], |i| x.get(&[0, i[1], i[2]]))),
        (json!(["...", 2]), A::from_fn(&[2, 3], |i| x.get(&[i[0], i[1], 2]))),
        (json!([1, "...", null]), A::from_fn(&[3, 4, 1], |i| x.get(&[1, i[0], i[1]]))),
    ];
    for (index, want) in cases {
        let m = one("Indexer", json!({}), json!({"input": key("input"), "index": index}));
        check(&format!("x[{index}]"), &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    }
}

#[test]
fn slices() {
    let x = vals(&[5, 3], 60);
    // x[1::2, 0]: Slice -> ToTuple -> Indexer, as Mithril writes `x[1::2, 0]`.
    let m = model(vec![
        (node("Slice", json!({})), json!({"start": 1, "stop": null, "step": 2})),
        (node("ToTuple", json!({"n": 2})), json!({"input1": from("m_0", "output"), "input2": 0})),
        (node("Indexer", json!({})), json!({"input": key("input"), "index": from("m_1", "output"), "output": key("output")})),
    ]);
    let want = A::from_fn(&[2], |i| x.get(&[1 + 2 * i[0], 0]));
    check("x[1::2, 0]", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    // x[::-1]: a slice with defaults and a negative step.
    let m = model(vec![
        (node("Slice", json!({})), json!({"step": -1})),
        (node("Indexer", json!({})), json!({"input": key("input"), "index": from("m_0", "output"), "output": key("output")})),
    ]);
    let want = A::from_fn(&[5, 3], |i| x.get(&[4 - i[0], i[1]]));
    check("x[::-1]", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    // x[-4:-1] on a list of tensors is a list: Split -> Indexer(slice) -> Concat.
    let y = vals(&[2, 6], 61);
    let m = model(vec![
        (node("Split", json!({})), json!({"input": key("input"), "split_size": 3, "axis": 1})),
        (node("Slice", json!({})), json!({"start": -2})),
        (node("Indexer", json!({})), json!({"input": from("m_0", "output"), "index": from("m_1", "output")})),
        (node("Concat", json!({})), json!({"input": from("m_2", "output"), "axis": 1, "output": key("output")})),
    ]);
    let want = A::from_fn(&[2, 4], |i| y.get(&[i[0], 2 + i[1]]));
    check("concat(split(x)[-2:])", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &want);
}

#[test]
fn cast_and_dtype() {
    let x = A::new(&[2, 3], vec![-1.75, 2.5, 0.0, 0.5, -0.25, 3.0]);
    // A dtype name is a constructor value (in a connection, a bare string names a key,
    // as `dict_to_model` reads it).
    let m = one("Cast", json!({"dtype": "int32"}), json!({"input": key("input")}));
    // astype(int32) truncates toward zero.
    check("Cast int32", &out(&m, &[("input", f32t(&x))]), Dtype::I32, &x.map(f64::trunc));
    let m = one("Cast", json!({"dtype": "Dtype.bool"}), json!({"input": key("input")}));
    check("Cast bool", &out(&m, &[("input", f32t(&x))]), Dtype::Bool, &x.map(|v| b2f(v != 0.0)));
    let m = one("Cast", json!({"dtype": "float32"}), json!({"input": key("input")}));
    let got = out(&m, &[("input", i32t(&[3], &[-3, 0, 7]))]);
    check("Cast float32", &got, Dtype::F32, &A::new(&[3], vec![-3.0, 0.0, 7.0]));
    // y.astype(x.dtype)
    let m = model(vec![
        (node("Dtype", json!({})), json!({"input": key("x")})),
        (node("Cast", json!({})), json!({"input": key("y"), "dtype": from("m_0", "output"), "output": key("output")})),
    ]);
    let got = out(&m, &[("x", f32t(&x)), ("y", i32t(&[3], &[-3, 0, 7]))]);
    check("Cast to Dtype(x)", &got, Dtype::F32, &A::new(&[3], vec![-3.0, 0.0, 7.0]));
}

#[test]
fn shape_to_reshape() {
    // y.reshape(x.shape[0], -1)
    let x = vals(&[2, 3, 2], 62);
    let y = vals(&[6, 2], 63);
    let m = model(vec![
        (node("Shape", json!({})), json!({"input": key("x")})),
        (node("Indexer", json!({})), json!({"input": from("m_0", "output"), "index": 0})),
        (node("ToTuple", json!({"n": 2})), json!({"input1": from("m_1", "output"), "input2": -1})),
        (node("Reshape", json!({})), json!({"input": key("y"), "shape": from("m_2", "output"), "output": key("output")})),
    ]);
    check("y.reshape(x.shape[0], -1)", &out(&m, &[("x", f32t(&x)), ("y", f32t(&y))]), Dtype::F32, &y.reshape(&[2, 6]));
    // y.reshape(x.shape[-2:] + ...) via a slice of the shape tuple: y [6] -> x.shape[1:] == (3, 2).
    let z = vals(&[6], 64);
    let m = model(vec![
        (node("Shape", json!({})), json!({"input": key("x")})),
        (node("Slice", json!({})), json!({"start": 1})),
        (node("Indexer", json!({})), json!({"input": from("m_0", "output"), "index": from("m_1", "output")})),
        (node("Reshape", json!({})), json!({"input": key("y"), "shape": from("m_2", "output"), "output": key("output")})),
    ]);
    check("y.reshape(x.shape[1:])", &out(&m, &[("x", f32t(&x)), ("y", f32t(&z))]), Dtype::F32, &z.reshape(&[3, 2]));
}

#[test]
fn size_and_length() {
    let x = vals(&[2, 3, 2], 65);
    let feeds = [("x", f32t(&x))];
    // arange(x.size)
    let m = model(vec![
        (node("Size", json!({})), json!({"input": key("x")})),
        (node("Arange", json!({})), json!({"stop": from("m_0", "output"), "output": key("output")})),
    ]);
    check("arange(size(x))", &out(&m, &feeds), Dtype::I32, &A::from_fn(&[12], |i| i[0] as f64));
    // ones(x.shape[0], x.shape[2]) through Size(dim=(0, 2)).
    let m = model(vec![
        (node("Size", json!({})), json!({"input": key("x"), "dim": [0, 2]})),
        (node("Ones", json!({})), json!({"shape": from("m_0", "output"), "output": key("output")})),
    ]);
    check("ones(size(x, (0, 2)))", &out(&m, &feeds), Dtype::F32, &A::new(&[2, 2], vec![1.0; 4]));
    // eye(x.shape[-2], 2)
    let m = model(vec![
        (node("Size", json!({})), json!({"input": key("x"), "dim": -2})),
        (node("Eye", json!({})), json!({"N": from("m_0", "output"), "M": 2, "output": key("output")})),
    ]);
    check("eye(size(x, -2), 2)", &out(&m, &feeds), Dtype::F32, &A::from_fn(&[3, 2], |i| b2f(i[0] == i[1])));
    // eye(len(x))
    let m = model(vec![
        (node("Length", json!({})), json!({"input": key("x")})),
        (node("Eye", json!({})), json!({"N": from("m_0", "output"), "output": key("output")})),
    ]);
    check("eye(len(x))", &out(&m, &feeds), Dtype::F32, &A::from_fn(&[2, 2], |i| b2f(i[0] == i[1])));
}

#[test]
fn union_of_shapes() {
    // broadcast_to(z, (len(x),) + (3, 1))
    let x = vals(&[2, 5], 66);
    let z = vals(&[3, 1], 67);
    let m = model(vec![
        (node("Length", json!({})), json!({"input": key("x")})),
        (node("PrimitiveUnion", json!({"n": 2})), json!({"input1": from("m_0", "output"), "input2": [3, 1]})),
        (node("BroadcastTo", json!({})), json!({"input": key("z"), "shape": from("m_1", "output"), "output": key("output")})),
    ]);
    let got = out(&m, &[("x", f32t(&x)), ("z", f32t(&z))]);
    check("PrimitiveUnion -> BroadcastTo", &got, Dtype::F32, &A::from_fn(&[2, 3, 1], |i| z.bget(i)));
    // z.reshape(shape(z) + (1,)): a tuple and an int.
    let m = model(vec![
        (node("Shape", json!({})), json!({"input": key("z")})),
        (node("PrimitiveUnion", json!({"n": 2})), json!({"input1": from("m_0", "output"), "input2": 1})),
        (node("Reshape", json!({})), json!({"input": key("z"), "shape": from("m_1", "output"), "output": key("output")})),
    ]);
    check("PrimitiveUnion -> Reshape", &out(&m, &[("z", f32t(&z))]), Dtype::F32, &z.reshape(&[3, 1, 1]));
}

#[test]
fn converters_2d() {
    // MaxPool2D's converter chain by hand: kernel 2 -> (2, 2); stride None -> kernel;
    // padding 1 -> ((1, 1), (1, 1)); dilation 1 -> (1, 1).
    let x = pool_input();
    let m = model(vec![
        (node("TupleConverter", json!({})), json!({"input": 2})),
        (node("StrideConverter", json!({})), json!({"input": null, "kernel_size": from("m_0", "output")})),
        (node("PaddingConverter2D", json!({})), json!({"input": 1, "kernel_size": from("m_0", "output")})),
        (node("TupleConverter", json!({})), json!({"input": 1})),
        (
            node("PrimitiveMaxPool2D", json!({})),
            json!({"input": key("input"), "kernel_size": from("m_0", "output"), "stride": from("m_1", "output"),
                   "padding": from("m_2", "output"), "dilation": from("m_3", "output"), "output": key("output")}),
        ),
    ]);
    let want = pool2d(&x, [2, 2], [2, 2], [(1, 1), (1, 1)], true);
    assert_eq!(want.shape, [1, 2, 3, 3]);
    check("converters -> PrimitiveMaxPool2D", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    // 'same' padding for a 3x3 kernel, explicit stride (1, 1); average pooling counts padding.
    let m = model(vec![
        (node("PaddingConverter2D", json!({"input": "PaddingType.SAME"})), json!({"kernel_size": [3, 3]})),
        (node("StrideConverter", json!({})), json!({"input": [1, 1], "kernel_size": [3, 3]})),
        (
            node("PrimitiveAvgPool2D", json!({})),
            json!({"input": key("input"), "kernel_size": [3, 3], "stride": from("m_1", "output"),
                   "padding": from("m_0", "output"), "dilation": [1, 1], "output": key("output")}),
        ),
    ]);
    let want = pool2d(&x, [3, 3], [1, 1], [(1, 1), (1, 1)], false);
    check("same padding -> PrimitiveAvgPool2D", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    // A (top, bottom), (left, right) pair per axis and a mixed (int, pair) padding.
    let m = model(vec![
        (node("PaddingConverter2D", json!({})), json!({"input": [1, [0, 1]], "kernel_size": [2, 2]})),
        (
            node("PrimitiveMaxPool2D", json!({})),
            json!({"input": key("input"), "kernel_size": [2, 2], "stride": [1, 2],
                   "padding": from("m_0", "output"), "dilation": [1, 1], "output": key("output")}),
        ),
    ]);
    let want = pool2d(&x, [2, 2], [1, 2], [(1, 1), (0, 1)], true);
    check("padding (1, (0, 1))", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
}

#[test]
fn converters_1d() {
    let x = pos(&[1, 2, 5], 68).map(|v| -v);
    let pool = |padding: Value| {
        model(vec![
            (node("PaddingConverter1D", json!({"input": padding})), json!({"kernel_size": 3})),
            (node("StrideConverter", json!({})), json!({"input": 1, "kernel_size": 3})),
            (
                node("PrimitiveMaxPool1D", json!({})),
                json!({"input": key("input"), "kernel_size": 3, "stride": from("m_1", "output"),
                       "padding": from("m_0", "output"), "dilation": 1, "output": key("output")}),
            ),
        ])
    };
    let feeds = [("input", f32t(&x))];
    check("PaddingConverter1D same", &out(&pool(json!("PaddingType.SAME")), &feeds), Dtype::F32, &pool1d(&x, 3, 1, (1, 1), true));
    check("PaddingConverter1D 2", &out(&pool(json!(2)), &feeds), Dtype::F32, &pool1d(&x, 3, 1, (2, 2), true));
    check("PaddingConverter1D (1, 0)", &out(&pool(json!([1, 0])), &feeds), Dtype::F32, &pool1d(&x, 3, 1, (1, 0), true));
    check("PaddingConverter1D valid", &out(&pool(json!("PaddingType.VALID")), &feeds), Dtype::F32, &pool1d(&x, 3, 1, (0, 0), true));
}

#[test]
fn to_tensor() {
    let m = one("ToTensor", json!({}), json!({"input": [[1, 2, 3], [4, 5, 6]]}));
    check("ToTensor ints", &out(&m, &[]), Dtype::I32, &A::from_fn(&[2, 3], |i| (i[0] * 3 + i[1] + 1) as f64));
    let m = one("ToTensor", json!({}), json!({"input": [0.5, -1.5]}));
    check("ToTensor floats", &out(&m, &[]), Dtype::F32, &A::new(&[2], vec![0.5, -1.5]));
    let m = one("ToTensor", json!({"dtype": "float32"}), json!({"input": [1, 2]}));
    check("ToTensor ints as float32", &out(&m, &[]), Dtype::F32, &A::new(&[2], vec![1.0, 2.0]));
    // x + to_tensor(3.0) broadcasts a scalar tensor.
    let x = vals(&[2, 1], 69);
    let m = model(vec![
        (node("ToTensor", json!({})), json!({"input": 3.0})),
        (node("Add", json!({})), json!({"left": key("x"), "right": from("m_0", "output"), "output": key("output")})),
    ]);
    check("x + to_tensor(3.0)", &out(&m, &[("x", f32t(&x))]), Dtype::F32, &x.map(|v| v + 3.0));
}

#[test]
fn creation() {
    let m = one("Arange", json!({}), json!({"stop": 5}));
    check("arange(5)", &out(&m, &[]), Dtype::I32, &A::new(&[5], vec![0.0, 1.0, 2.0, 3.0, 4.0]));
    let m = one("Arange", json!({}), json!({"start": 1, "stop": 2, "step": 0.25}));
    check("arange(1, 2, 0.25)", &out(&m, &[]), Dtype::F32, &A::new(&[4], vec![1.0, 1.25, 1.5, 1.75]));
    let m = one("Arange", json!({}), json!({"start": 3, "stop": -2, "step": -2}));
    check("arange(3, -2, -2)", &out(&m, &[]), Dtype::I32, &A::new(&[3], vec![3.0, 1.0, -1.0]));
    let m = one("Eye", json!({}), json!({"N": 2, "M": 3}));
    check("eye(2, 3)", &out(&m, &[]), Dtype::F32, &A::from_fn(&[2, 3], |i| b2f(i[0] == i[1])));
    let m = one("Eye", json!({}), json!({"N": 3}));
    check("eye(3)", &out(&m, &[]), Dtype::F32, &A::from_fn(&[3, 3], |i| b2f(i[0] == i[1])));
    let m = one("Ones", json!({}), json!({"shape": [2, 1, 3]}));
    check("ones((2, 1, 3))", &out(&m, &[]), Dtype::F32, &A::new(&[2, 1, 3], vec![1.0; 6]));
}

#[test]
fn eye_and_ones_dtype() {
    // np.eye(N, M, dtype=dtype) and np.ones(shape, dtype=dtype) give the requested dtype.
    let m = one("Eye", json!({"dtype": "int32"}), json!({"N": 2, "M": 3}));
    check("eye(2, 3, dtype=int32)", &out(&m, &[]), Dtype::I32, &A::from_fn(&[2, 3], |i| b2f(i[0] == i[1])));
    let m = one("Ones", json!({"dtype": "bool"}), json!({"shape": [2, 1]}));
    check("ones((2, 1), dtype=bool)", &out(&m, &[]), Dtype::Bool, &A::new(&[2, 1], vec![1.0; 2]));
}

#[test]
fn dtype_values_as_mithril_writes_them() {
    // Mithril's `Dtype` is an IntEnum and `model_to_dict` writes a Dtype value
    // with `str(val)` (utils/dict_conversions.py, connection_to_dict); Mithril needs
    // Python >= 3.12, where str() of an IntEnum member is its number, so
    // `Cast()(input="x", dtype=ml.float32)` is written `"dtype": "7"` (and
    // `dict_to_model` maps "7" back through `value_dict`). Dtype numbers: uint8 0,
    // int8 1, int16 2, int32 3, int64 4, float16 5, bfloat16 6, float32 7, float64 8,
    // bool 9.
    let m = one("Cast", json!({}), json!({"input": key("input"), "dtype": "7"}));
    let got = out(&m, &[("input", i32t(&[3], &[-3, 0, 7]))]);
    check("Cast dtype \"7\" (float32)", &got, Dtype::F32, &A::new(&[3], vec![-3.0, 0.0, 7.0]));
    let x = A::new(&[2], vec![-1.75, 2.5]);
    let m = one("Cast", json!({}), json!({"input": key("input"), "dtype": "3"}));
    check("Cast dtype \"3\" (int32)", &out(&m, &[("input", f32t(&x))]), Dtype::I32, &A::new(&[2], vec![-1.0, 2.0]));
}

// ---- losses --------------------------------------------------------------------------

#[test]
fn regression_losses() {
    let x = vals(&[2, 3], 70);
    let t = vals(&[2, 3], 71);
    let sign = A::new(&[2, 3], vec![1.0, -1.0, -1.0, 1.0, 1.0, -1.0]);
    let hinge = |a: f64, b: f64| (1.0 - b * a).max(0.0);
    let cases: Vec<(&str, &A, A)> = vec![
        ("SquaredError", &t, zip(&x, &t, |a, b| (a - b) * (a - b))),
        ("AbsoluteError", &t, zip(&x, &t, |a, b| (a - b).abs())),
        ("HingeLoss", &sign, zip(&x, &sign, hinge)),
        ("QuadHingeLoss", &sign, zip(&x, &sign, |a, b| hinge(a, b).powi(2))),
        ("QuantileLoss", &t, zip(&x, &t, |a, b| (0.5 * (b - a)).max(-0.5 * (b - a)))),
    ];
    for (class, target, want) in cases {
        let m = one(class, json!({}), json!({"input": key("input"), "target": key("target")}));
        check(class, &out(&m, &[("input", f32t(&x)), ("target", f32t(target))]), Dtype::F32, &want);
    }
    let m = one("QuantileLoss", json!({}), json!({"input": key("input"), "target": key("target"), "quantile": 0.25}));
    let want = zip(&x, &t, |a, b| (0.25 * (b - a)).max(-0.75 * (b - a)));
    check("QuantileLoss 0.25", &out(&m, &[("input", f32t(&x)), ("target", f32t(&t))]), Dtype::F32, &want);
    // A broadcast target.
    let row = vals(&[3], 72);
    let m = one("SquaredError", json!({}), json!({"input": key("input"), "target": key("target")}));
    let want = zip(&x, &row, |a, b| (a - b) * (a - b));
    check("SquaredError broadcast", &out(&m, &[("input", f32t(&x)), ("target", f32t(&row))]), Dtype::F32, &want);
}

#[test]
fn quantile_as_a_model_input() {
    // `QuantileLoss(quantile=TBD)` with `quantile` connected to the model input `q` is
    // written with args {"quantile": "TBD"}, a named connection, and `quantile` not
    // exposed (it has no value): the class default 0.5 does not apply.
    let x = vals(&[2, 3], 108);
    let t = vals(&[2, 3], 109);
    let q = A::new(&[], vec![0.25]);
    let conns = json!({"input": key("input"), "target": key("target"), "quantile": key("q"), "output": key("output")});
    let m = model(vec![(node_exposing("QuantileLoss", json!({"quantile": "TBD"}), &["output"]), conns)]);
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&t)), ("q", f32t(&q))]);
    check("QuantileLoss q=0.25 as an input", &got, Dtype::F32, &zip(&x, &t, |a, b| (0.25 * (b - a)).max(-0.75 * (b - a))));
}

#[test]
fn cross_entropy() {
    let x = vals(&[3, 4], 73);
    let lse = |r: usize| {
        let m = (0..4).map(|j| x.get(&[r, j])).fold(f64::NEG_INFINITY, f64::max);
        m + (0..4).map(|j| (x.get(&[r, j]) - m).exp()).sum::<f64>().ln()
    };
    let labels = [3i64, 0, 1];
    let m = one("CrossEntropy", json!({}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&x)), ("target", i32t(&[3], &labels))]);
    let want = A::from_fn(&[3], |i| lse(i[0]) - x.get(&[i[0], labels[i[0]] as usize]));
    check("CrossEntropy categorical", &got, Dtype::F32, &want);
    let p = A::new(&[3, 4], vec![0.25, 0.25, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0, 0.125, 0.375, 0.25, 0.25]);
    let m = one("CrossEntropy", json!({}), json!({"input": key("input"), "target": key("target"), "categorical": false}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&p))]);
    let want = A::from_fn(&[3], |i| -(0..4).map(|j| p.get(&[i[0], j]) * (x.get(&[i[0], j]) - lse(i[0]))).sum::<f64>());
    check("CrossEntropy probabilities", &got, Dtype::F32, &want);
}

#[test]
fn binary_cross_entropy() {
    let x = vals(&[2, 3], 74);
    let t = A::new(&[2, 3], vec![0.0, 1.0, 0.25, 1.0, 0.0, 0.5]);
    let m = one("BinaryCrossEntropy", json!({}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&t))]);
    // (1 - t) * x - log_sigmoid(x)
    let want = zip(&x, &t, |a, b| (1.0 - b) * a - sigmoid(a).ln());
    check("BinaryCrossEntropy", &got, Dtype::F32, &want);
}

/// f32's smallest positive normal, Mithril's `Constant.MIN_POSITIVE_NORMAL` for f32.
const F32_MIN_NORMAL: f64 = 1.1754943508222875e-38;

/// Mithril's `robust_log`.
fn robust_log(x: f64, t: f64) -> f64 {
    if x.abs() < t { t.ln() + x.abs() / t - 1.0 } else { x.abs().ln() }
}

#[test]
fn robust_variants() {
    // Log(robust=True): the default threshold (f32's smallest normal) and an explicit one.
    let x = A::new(&[5], vec![0.0, -1.0, 2.0, 0.25, -0.125]);
    let m = one("Log", json!({"robust": true}), json!({"input": key("input")}));
    check("Log robust", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| robust_log(v, F32_MIN_NORMAL)));
    let m = one("Log", json!({"robust": true}), json!({"input": key("input"), "threshold": 0.5}));
    check("Log robust t=0.5", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| robust_log(v, 0.5)));
    // Sqrt(robust=True): |x| < t ? |x| / sqrt(t) : sqrt(|x|).
    let x = A::new(&[1, 5], vec![0.0625, -0.125, 0.0, 4.0, -9.0]);
    let rsqrt = |t: f64| move |v: f64| if v.abs() < t { v.abs() / t.sqrt() } else { v.abs().sqrt() };
    let m = one("Sqrt", json!({"robust": true}), json!({"input": key("input"), "threshold": 0.25}));
    check("Sqrt robust t=0.25", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(rsqrt(0.25)));
    let m = one("Sqrt", json!({"robust": true}), json!({"input": key("input")}));
    check("Sqrt robust", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(rsqrt(F32_MIN_NORMAL)));
    // Power(robust=True): cond = e < 1 - log(t)/log|b| and |b| < t; cond ? |b|/t : |b|**e.
    let b = A::new(&[4], vec![0.25, -2.0, 3.0, 0.125]);
    let e = A::new(&[4], vec![2.0, 0.5, -1.0, 0.5]);
    let rpow = |t: f64| {
        move |b: f64, e: f64| {
            let a = b.abs();
            if e < 1.0 - t.ln() / a.ln() && a < t { a / t } else { a.powf(e) }
        }
    };
    let m = one("Power", json!({"robust": true}), json!({"base": key("base"), "exponent": key("exponent"), "threshold": 0.5}));
    let got = out(&m, &[("base", f32t(&b)), ("exponent", f32t(&e))]);
    let want = zip(&b, &e, rpow(0.5));
    assert_eq!(want.data, [0.0625, SQRT_2, 1.0 / 3.0, 0.25]);
    check("Power robust t=0.5", &got, Dtype::F32, &want);
    let m = one("Power", json!({"robust": true}), json!({"base": key("base"), "exponent": key("exponent")}));
    let got = out(&m, &[("base", f32t(&b)), ("exponent", f32t(&e))]);
    check("Power robust", &got, Dtype::F32, &zip(&b, &e, rpow(F32_MIN_NORMAL)));
}

#[test]
fn stable_reciprocal() {
    // |x| < t ? (sign(x) + (1 - sign(|x|))) * 2/t - x/t**2 : 1/x
    let x = A::new(&[5, 1], vec![0.25, -0.25, 0.0, 2.0, -4.0]);
    let m = one("StableReciprocal", json!({}), json!({"input": key("input"), "threshold": 0.5}));
    check("StableReciprocal t=0.5", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &A::new(&[5, 1], vec![3.0, -3.0, 4.0, 0.5, -0.25]));
    let m = one("StableReciprocal", json!({}), json!({"input": key("input")}));
    let y = A::new(&[3], vec![0.5, -3.0, 8.0]);
    check("StableReciprocal default", &out(&m, &[("input", f32t(&y))]), Dtype::F32, &y.map(|v| 1.0 / v));
}

#[test]
fn kl_divergence() {
    // target * (robust_log(target) - robust_log(input))
    let x = pos(&[2, 3], 105);
    let t = A::new(&[1, 3], vec![0.25, 0.0, 0.75]);
    let m = one("KLDivergence", json!({}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&t))]);
    let want = zip(&x, &t, |a, b| b * (robust_log(b, F32_MIN_NORMAL) - robust_log(a, F32_MIN_NORMAL)));
    check("KLDivergence", &got, Dtype::F32, &want);
    let m = one("KLDivergence", json!({}), json!({"input": key("input"), "target": key("target"), "threshold": 0.5}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&t))]);
    check("KLDivergence t=0.5", &got, Dtype::F32, &zip(&x, &t, |a, b| b * (robust_log(b, 0.5) - robust_log(a, 0.5))));
}

#[test]
fn nan_to_num() {
    let x = A::new(&[2, 2], vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5]);
    let m = one("NanToNum", json!({}), json!({"input": key("input")}));
    let max = f32::MAX as f64;
    check("NanToNum defaults", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &A::new(&[2, 2], vec![0.0, max, -max, 1.5]));
    let m = one("NanToNum", json!({}), json!({"input": key("input"), "nan": 1.0, "posinf": 2.0, "neginf": -3.0}));
    check("NanToNum given", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &A::new(&[2, 2], vec![1.0, 2.0, -3.0, 1.5]));
}

#[test]
fn cross_entropy_options() {
    let x = vals(&[3, 4], 106);
    let lse = |r: usize| {
        let m = (0..4).map(|j| x.get(&[r, j])).fold(f64::NEG_INFINITY, f64::max);
        m + (0..4).map(|j| (x.get(&[r, j]) - m).exp()).sum::<f64>().ln()
    };
    let labels = [2i64, 2, 0];
    let w = [0.5, 2.0, 1.5, 1.0];
    let feeds = [("input", f32t(&x)), ("target", i32t(&[3], &labels))];
    // Class weights: loss[i] * weights[target[i]].
    let m = one("CrossEntropy", json!({"weights": w}), json!({"input": key("input"), "target": key("target")}));
    let want = A::from_fn(&[3], |i| (lse(i[0]) - x.get(&[i[0], labels[i[0]] as usize])) * w[labels[i[0]] as usize]);
    check("CrossEntropy class weights", &out(&m, &feeds), Dtype::F32, &want);
    // robust=True only guards log(sum(exp(x - max))) >= log(1): the same values.
    let m = one("CrossEntropy", json!({}), json!({"input": key("input"), "target": key("target"), "robust": true}));
    let want = A::from_fn(&[3], |i| lse(i[0]) - x.get(&[i[0], labels[i[0]] as usize]));
    check("CrossEntropy robust", &out(&m, &feeds), Dtype::F32, &want);
    // Probability targets with class weights.
    let p = A::new(&[3, 4], vec![0.25, 0.25, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0, 0.125, 0.375, 0.25, 0.25]);
    let m = one("CrossEntropy", json!({"weights": w}), json!({"input": key("input"), "target": key("target"), "categorical": false}));
    let got = out(&m, &[("input", f32t(&x)), ("target", f32t(&p))]);
    let want = A::from_fn(&[3], |i| -(0..4).map(|j| p.get(&[i[0], j]) * (x.get(&[i[0], j]) - lse(i[0])) * w[j]).sum::<f64>());
    check("CrossEntropy probabilities, class weights", &got, Dtype::F32, &want);
    // BinaryCrossEntropy(robust=True): log(1 + e^-|x|) >= 0 is never below the threshold.
    let y = vals(&[2, 3], 107);
    let t = A::new(&[2, 3], vec![0.0, 1.0, 0.25, 1.0, 0.0, 0.5]);
    let m = one("BinaryCrossEntropy", json!({"robust": true}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&y)), ("target", f32t(&t))]);
    check("BinaryCrossEntropy robust", &got, Dtype::F32, &zip(&y, &t, |a, b| (1.0 - b) * a - sigmoid(a).ln()));
}

// ---- named composites ----------------------------------------------------------------

fn linear_ref(x: &A, w: &A, b: Option<&A>) -> A {
    let y = matmul(x, &transpose(w, &[1, 0]));
    match b {
        Some(b) => zip(&y, b, |a, c| a + c),
        None => y,
    }
}

#[test]
fn linear() {
    let x = vals(&[2, 1, 4], 75);
    let w = vals(&[3, 4], 76);
    let b = vals(&[3], 77);
    // Parameters left unconnected take their key names: `weight`, `bias`.
    let m = one("Linear", json!({"dimension": 3, "use_bias": true}), json!({"input": key("input")}));
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    check("Linear", &got, Dtype::F32, &linear_ref(&x, &w, Some(&b)));
    let m = one("Linear", json!({"dimension": 3, "use_bias": false}), json!({"input": key("input"), "weight": key("w")}));
    let got = out(&m, &[("input", f32t(&x)), ("w", f32t(&w))]);
    check("Linear without bias", &got, Dtype::F32, &linear_ref(&x, &w, None));
}

#[test]
fn layer_and_mlp() {
    let x = vals(&[2, 4], 78);
    let (w, b) = (vals(&[3, 4], 79), vals(&[3], 80));
    let m = one(
        "Layer",
        json!({"dimension": 3, "activation": {"name": "Relu", "args": {}}}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias")}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    check("Layer(Relu)", &got, Dtype::F32, &linear_ref(&x, &w, Some(&b)).map(|v| v.max(0.0)));
    let (w1, b1) = (vals(&[1, 3], 81), vals(&[1], 82));
    let m = one(
        "MLP",
        json!({"activations": [{"name": "Tanh", "args": {}}, "Sigmoid"], "dimensions": [3, 1]}),
        json!({"input": key("input"), "weight0": key("weight0"), "bias0": key("bias0"), "weight1": key("weight1"), "bias1": key("bias1")}),
    );
    let feeds = [
        ("input", f32t(&x)),
        ("weight0", f32t(&w)),
        ("bias0", f32t(&b)),
        ("weight1", f32t(&w1)),
        ("bias1", f32t(&b1)),
    ];
    let h = linear_ref(&x, &w, Some(&b)).map(f64::tanh);
    check("MLP(Tanh, Sigmoid)", &out(&m, &feeds), Dtype::F32, &linear_ref(&h, &w1, Some(&b1)).map(sigmoid));
}

/// Normalizes over the last axis (LayerNorm without scale and bias).
fn normalize_last(x: &A, eps: f64) -> A {
    let last = x.shape.len() - 1;
    let mean = reduce(x, &[last], true, |g| g.iter().sum::<f64>() / g.len() as f64);
    let c = zip(x, &mean, |a, m| a - m);
    let var = reduce(&c, &[last], true, |g| g.iter().map(|v| v * v).sum::<f64>() / g.len() as f64);
    zip(&c, &var, |a, v| a / (v + eps).sqrt())
}

#[test]
fn layer_norm() {
    let x = vals(&[2, 1, 4], 83);
    let (w, b) = (vals(&[4], 84), vals(&[4], 85));
    let n = normalize_last(&x, 1e-5);
    let scaled = zip(&n, &w, |a, c| a * c);
    let conns = |keys: &[&str]| {
        let mut c = json!({"input": key("input")});
        for k in keys {
            c[*k] = key(k);
        }
        c
    };
    let m = one("LayerNorm", json!({}), conns(&["weight", "bias"]));
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    check("LayerNorm", &got, Dtype::F32, &zip(&scaled, &b, |a, c| a + c));
    let m = one("LayerNorm", json!({"use_bias": false}), conns(&["weight"]));
    check("LayerNorm use_bias=False", &out(&m, &[("input", f32t(&x)), ("weight", f32t(&w))]), Dtype::F32, &scaled);
    let m = one("LayerNorm", json!({"use_scale": false}), conns(&["bias"]));
    let want = zip(&n, &b, |a, c| a + c);
    check("LayerNorm use_scale=False", &out(&m, &[("input", f32t(&x)), ("bias", f32t(&b))]), Dtype::F32, &want);
    let m = one("LayerNorm", json!({"use_scale": false, "use_bias": false, "eps": 0.5}), conns(&[]));
    check("LayerNorm bare, eps 0.5", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &normalize_last(&x, 0.5));
}

#[test]
fn group_norm() {
    let x = vals(&[2, 4, 1, 3], 86);
    let (w, b) = (vals(&[1, 4, 1, 1], 87), vals(&[1, 4, 1, 1], 88));
    let m = one(
        "GroupNorm",
        json!({"num_groups": 2}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias")}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    let n = normalize_last(&x.reshape(&[2, 2, 6]), 1e-5).reshape(&[2, 4, 1, 3]);
    let want = zip(&zip(&n, &w, |a, c| a * c), &b, |a, c| a + c);
    check("GroupNorm(2)", &got, Dtype::F32, &want);
}

#[test]
fn batch_norm() {
    let x = vals(&[2, 3, 2, 1], 89);
    let (rm, rv) = (vals(&[3], 90), pos(&[3], 91));
    let (w, b) = (vals(&[1, 3, 1, 1], 92), vals(&[1, 3, 1, 1], 93));
    let m = one(
        "BatchNorm2D",
        json!({"num_features": 3}),
        json!({"input": key("input"), "running_mean": key("running_mean"), "running_var": key("running_var"),
               "weight": key("weight"), "bias": key("bias")}),
    );
    let feeds = [
        ("input", f32t(&x)),
        ("running_mean", f32t(&rm)),
        ("running_var", f32t(&rv)),
        ("weight", f32t(&w)),
        ("bias", f32t(&b)),
    ];
    let want = A::from_fn(&x.shape, |i| {
        let c = i[1];
        (x.get(i) - rm.get(&[c])) / (rv.get(&[c]) + 1e-5).sqrt() * w.get(&[0, c, 0, 0]) + b.get(&[0, c, 0, 0])
    });
    check("BatchNorm2D", &out(&m, &feeds), Dtype::F32, &want);
}

#[test]
fn affine_and_silu() {
    let x = vals(&[2, 3], 94);
    let (w, b) = (vals(&[3], 95), vals(&[1], 96));
    let m = one("ElementWiseAffine", json!({}), json!({"input": key("input"), "weight": key("weight"), "bias": key("bias")}));
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    check("ElementWiseAffine", &got, Dtype::F32, &zip(&zip(&x, &w, |a, c| a * c), &b, |a, c| a + c));
    let m = one("SiLU", json!({}), json!({"input": key("input")}));
    check("SiLU", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &x.map(|v| v * sigmoid(v)));
}

#[test]
fn convolution1d() {
    let x = vals(&[1, 2, 6], 97);
    let (w, b) = (vals(&[2, 2, 3], 98), vals(&[1, 2, 1], 99));
    let m = one(
        "Convolution1D",
        json!({"out_channels": 2, "kernel_size": 3, "stride": 2, "padding": 1}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias")}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    check("Convolution1D", &got, Dtype::F32, &conv1d(&x, &w, Some(&b), 2, (1, 1), 1));
}

#[test]
fn convolution2d() {
    let x = vals(&[1, 4, 5, 6], 100);
    let (w, b) = (vals(&[4, 2, 3, 2], 101), vals(&[1, 4, 1, 1], 102));
    let m = one(
        "Convolution2D",
        json!({"out_channels": 4, "kernel_size": [3, 2], "stride": [2, 1], "padding": [[1, 0], [0, 1]],
               "dilation": [1, 2], "groups": 2}),
        json!({"input": key("input"), "weight": key("weight"), "bias": key("bias")}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w)), ("bias", f32t(&b))]);
    let want = conv2d(&x, &w, Some(&b), [2, 1], [(1, 0), (0, 1)], [1, 2], 2);
    check("Convolution2D stride/padding/dilation/groups", &got, Dtype::F32, &want);
    let w1 = vals(&[3, 4, 3, 3], 103);
    let m = one(
        "Convolution2D",
        json!({"out_channels": 3, "kernel_size": 3, "padding": 1, "use_bias": false}),
        json!({"input": key("input"), "weight": key("weight")}),
    );
    let got = out(&m, &[("input", f32t(&x)), ("weight", f32t(&w1))]);
    let want = conv2d(&x, &w1, None, [1, 1], [(1, 1), (1, 1)], [1, 1], 1);
    check("Convolution2D padding 1 without bias", &got, Dtype::F32, &want);
}

#[test]
fn pooling_models() {
    let x1 = pos(&[2, 1, 5], 104).map(|v| -v);
    let m = one("MaxPool1D", json!({"kernel_size": 2, "padding": [1, 0]}), json!({"input": key("input")}));
    check("MaxPool1D", &out(&m, &[("input", f32t(&x1))]), Dtype::F32, &pool1d(&x1, 2, 2, (1, 0), true));
    let x = pool_input();
    let m = one("MaxPool2D", json!({"kernel_size": 2, "padding": 1}), json!({"input": key("input")}));
    let want = pool2d(&x, [2, 2], [2, 2], [(1, 1), (1, 1)], true);
    check("MaxPool2D padding 1", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    let m = one("MaxPool2D", json!({"kernel_size": [2, 3], "stride": [1, 2]}), json!({"input": key("input")}));
    let want = pool2d(&x, [2, 3], [1, 2], [(0, 0), (0, 0)], true);
    check("MaxPool2D (2, 3) stride (1, 2)", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
    let m = one("AvgPool2D", json!({"kernel_size": [2, 2], "stride": 1, "padding": [1, 0]}), json!({"input": key("input")}));
    let want = pool2d(&x, [2, 2], [1, 1], [(1, 1), (0, 0)], false);
    check("AvgPool2D padding (1, 0)", &out(&m, &[("input", f32t(&x))]), Dtype::F32, &want);
}

// ---- errors a user can reach ------------------------------------------------------------

#[test]
fn softmax_axis_out_of_range() {
    let m = one("Softmax", json!({}), json!({"input": key("input"), "axis": 2}));
    let e = fails(&m, &[("input", f32t(&vals(&[2, 3], 1)))]);
    assert_user_error(&e, "t.json: submodels.m_0 (Softmax): axis 2 is out of range for a rank-2 tensor\n  note: inputs: input = `input` f32[2, 3]");
}

#[test]
fn reshape_to_an_incompatible_shape() {
    let m = one("Reshape", json!({}), json!({"input": key("input"), "shape": [4, 2]}));
    let e = fails(&m, &[("input", f32t(&vals(&[2, 3], 1)))]);
    assert_user_error(&e, "t.json: submodels.m_0 (Reshape): cannot reshape [2, 3] into [4, 2]: element counts differ\n  note: reshape of input = `input` f32[2, 3]");
}

#[test]
fn concat_of_mismatched_shapes() {
    let m = model(vec![
        (node("ToList", json!({"n": 2})), json!({"input1": key("a"), "input2": key("b")})),
        (node("Concat", json!({"axis": 1})), json!({"input": from("m_0", "output"), "output": key("output")})),
    ]);
    let e = fails(&m, &[("a", f32t(&vals(&[2, 1], 1))), ("b", f32t(&vals(&[3, 2], 2)))]);
    assert_user_error(&e, "t.json: submodels.m_1 (Concat): cannot concatenate [2, 1] with [3, 2] along axis 1\n  note: concat of `a` f32[2, 1] and `b` f32[3, 2]");
}

#[test]
fn attention_with_dropout() {
    let m = one(
        "ScaledDotProduct",
        json!({}),
        json!({"query": key("q"), "key": key("k"), "value": key("v"), "dropout_p": 0.1}),
    );
    let t = f32t(&vals(&[1, 2, 4], 1));
    let e = fails(&m, &[("q", t.clone()), ("k", t.clone()), ("v", t)]);
    assert_user_error(&e, "t.json: submodels.m_0 (ScaledDotProduct): dropout_p must be 0 for inference, got 0.1\n  \
         note: inputs: query = `q` f32[1, 2, 4], key = `k` f32[1, 2, 4], value = `v` f32[1, 2, 4]");
}

#[test]
fn balancing_weights_and_pos_weight() {
    // weights="auto" (Mithril's `calculate_cross_entropy_class_weights`): class c
    // weighs N / (C * count[c]) over the batch's targets.
    let x = vals(&[4, 3], 108);
    let lse = |r: usize| {
        let m = (0..3).map(|j| x.get(&[r, j])).fold(f64::NEG_INFINITY, f64::max);
        m + (0..3).map(|j| (x.get(&[r, j]) - m).exp()).sum::<f64>().ln()
    };
    let labels = [0i64, 2, 2, 1];
    let count = |c: usize| labels.iter().filter(|&&l| l as usize == c).count() as f64;
    let w = |c: usize| 4.0 / (3.0 * count(c));
    let m = one("CrossEntropy", json!({"weights": "auto"}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&x)), ("target", i32t(&[4], &labels))]);
    let want = A::from_fn(&[4], |i| (lse(i[0]) - x.get(&[i[0], labels[i[0]] as usize])) * w(labels[i[0]] as usize));
    check("CrossEntropy weights='auto'", &got, Dtype::F32, &want);
    // Probabilities with a numeric and a batch-balanced ("auto") pos_weight:
    // -pw * t * log(x) - (1 - t) * log(1 - x), pw = (1 - mean(t)) / mean(t).
    let p = A::new(&[2, 3], vec![0.125, 0.5, 0.75, 0.875, 0.25, 0.625]);
    let t = A::new(&[2, 3], vec![0.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    let bce = |pw: f64| zip(&p, &t, move |a, b| -pw * b * a.ln() - (1.0 - b) * (1.0 - a).ln());
    let feeds = [("input", f32t(&p)), ("target", f32t(&t))];
    for (pw, arg) in [(2.0, json!(2.0)), (2.0, json!("auto"))] {
        let m = one("BinaryCrossEntropy", json!({"input_type": "probs", "pos_weight": arg}), json!({"input": key("input"), "target": key("target")}));
        check(&format!("BinaryCrossEntropy probs pos_weight={arg}"), &out(&m, &feeds), Dtype::F32, &bce(pw));
    }
    // Logits with pos_weight: (1 - t) * x - ((pw - 1) * t + 1) * log_sigmoid(x).
    let y = vals(&[2, 3], 109);
    let m = one("BinaryCrossEntropy", json!({"pos_weight": 2.0}), json!({"input": key("input"), "target": key("target")}));
    let got = out(&m, &[("input", f32t(&y)), ("target", f32t(&t))]);
    check("BinaryCrossEntropy logits pos_weight=2", &got, Dtype::F32, &zip(&y, &t, |a, b| (1.0 - b) * a - (b + 1.0) * sigmoid(a).ln()));
    // An input_type Mithril does not define.
    let m = one("BinaryCrossEntropy", json!({"input_type": "log_probs"}), json!({"input": key("input"), "target": key("target")}));
    let e = fails(&m, &feeds);
    assert_user_error(&e, "t.json: submodels.m_0 (BinaryCrossEntropy): input_type 'log_probs' is not one of 'logits' and 'probs'");
}

#[test]
fn embedding_with_float_indices() {
    let m = one("Embedding", json!({}), json!({"input": key("input"), "weight": key("weight")}));
    let e = fails(&m, &[("input", f32t(&A::new(&[2], vec![0.0, 1.0]))), ("weight", f32t(&vals(&[3, 2], 1)))]);
    assert_user_error(&e, "t.json: submodels.m_0 (Embedding): gather indices must be integers, got f32\n  note: gather of weight = `weight` f32[3, 2] and input = `input` f32[2]");
}

#[test]
fn embedding_index_out_of_range() {
    let m = one("Embedding", json!({}), json!({"input": key("input"), "weight": key("weight")}));
    let e = fails(&m, &[("input", i32t(&[2], &[1, 3])), ("weight", f32t(&vals(&[3, 2], 1)))]);
    assert_user_error(&e, "%2 = gather (submodels.m_0 (Embedding)): gather index 3 is out of range for axis 0 of size 3");
}

#[test]
fn transpose_with_too_few_axes() {
    let m = one("Transpose", json!({}), json!({"input": key("input"), "axes": [1, 0]}));
    let e = fails(&m, &[("input", f32t(&vals(&[2, 1, 3], 1)))]);
    assert_user_error(&e, "t.json: submodels.m_0 (Transpose): axes [1, 0] are not a permutation of the 3 dimensions of [2, 1, 3]\n  note: transpose of input = `input` f32[2, 1, 3]");
}

// ---- coverage ----------------------------------------------------------------------------

/// Test function → the classes its body exercises (checked against the source).
const COVERAGE: &[(&str, &[&str])] = &[
    (
        "unary_math",
        &[
            "Absolute", "Negate", "Exponential", "Sine", "Cosine", "Tanh", "Sigmoid", "Relu", "Softplus", "Sign", "Square",
            "Floor", "StopGradient", "Buffer", "Gelu",
        ],
    ),
    ("sqrt_and_log", &["Sqrt", "Log"]),
    ("extreme_inputs", &["Sigmoid", "Softplus", "Tanh", "Gelu", "BinaryCrossEntropy"]),
    ("gelu_approximate", &["Gelu"]),
    ("leaky_relu", &["LeakyRelu"]),
    ("clamp", &["Clamp"]),
    ("isnan_and_logical_not", &["IsNan", "LogicalNot"]),
    ("zeros_like_and_atleast_1d", &["ZerosLike", "AtLeast1D"]),
    (
        "arithmetic_broadcast",
        &["Add", "Subtract", "Multiply", "Divide", "FloorDivide", "Power", "Minimum", "Maximum"],
    ),
    ("scalar_operands", &["Add", "Subtract", "Divide", "Power", "Multiply"]),
    ("int_floor_divide", &["FloorDivide"]),
    ("comparisons", &["Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual"]),
    ("logical", &["LogicalAnd", "LogicalOr", "LogicalXOr"]),
    ("shifts", &["ShiftLeft", "ShiftRight"]),
    ("where_select", &["Where"]),
    ("matmul_batched_broadcast", &["MatrixMultiply"]),
    ("matmul_vectors", &["MatrixMultiply"]),
    ("conv2d_primitive", &["PrimitiveConvolution2D"]),
    ("conv1d_primitive", &["PrimitiveConvolution1D"]),
    ("pools_primitive", &["PrimitiveMaxPool2D", "PrimitiveAvgPool2D", "PrimitiveMaxPool1D"]),
    ("embedding", &["Embedding"]),
    ("attention_causal", &["ScaledDotProduct"]),
    ("attention_scale_and_constant_mask", &["ScaledDotProduct"]),
    ("attention_with_a_mask_input", &["ScaledDotProduct"]),
    ("cartesian_and_permute", &["CartesianDifference", "PermuteTensor"]),
    ("softmax_axes", &["Softmax"]),
    ("reductions", &["Mean", "Sum", "Max", "Min", "Prod"]),
    ("arg_reductions", &["ArgMax", "ArgMin"]),
    ("variance", &["Variance"]),
    ("reshape_and_flatten", &["Reshape", "Flatten"]),
    ("transpose_swapaxes_squeeze", &["Transpose", "SwapAxes", "Squeeze"]),
    ("broadcast_to", &["BroadcastTo"]),
    ("concat_lists", &["ToList", "Concat"]),
    ("split_then_index", &["Split", "Indexer"]),
    ("pad_constant", &["Pad"]),
    ("pad_pair_on_a_matrix", &["Pad"]),
    ("indexer_on_tensors", &["Indexer"]),
    ("slices", &["Slice", "ToTuple", "Indexer", "Split", "Concat"]),
    ("cast_and_dtype", &["Cast", "Dtype"]),
    ("shape_to_reshape", &["Shape", "Indexer", "ToTuple", "Reshape", "Slice"]),
    ("size_and_length", &["Size", "Length", "Arange", "Ones", "Eye"]),
    ("union_of_shapes", &["PrimitiveUnion", "Length", "Shape", "BroadcastTo", "Reshape"]),
    (
        "converters_2d",
        &["TupleConverter", "StrideConverter", "PaddingConverter2D", "PrimitiveMaxPool2D", "PrimitiveAvgPool2D"],
    ),
    ("converters_1d", &["PaddingConverter1D", "StrideConverter", "PrimitiveMaxPool1D"]),
    ("to_tensor", &["ToTensor"]),
    ("creation", &["Arange", "Eye", "Ones"]),
    ("eye_and_ones_dtype", &["Eye", "Ones"]),
    ("dtype_values_as_mithril_writes_them", &["Cast"]),
    ("regression_losses", &["SquaredError", "AbsoluteError", "HingeLoss", "QuadHingeLoss", "QuantileLoss"]),
    ("quantile_as_a_model_input", &["QuantileLoss"]),
    ("cross_entropy", &["CrossEntropy"]),
    ("binary_cross_entropy", &["BinaryCrossEntropy"]),
    ("robust_variants", &["Log", "Sqrt", "Power"]),
    ("stable_reciprocal", &["StableReciprocal"]),
    ("kl_divergence", &["KLDivergence"]),
    ("nan_to_num", &["NanToNum"]),
    ("cross_entropy_options", &["CrossEntropy", "BinaryCrossEntropy"]),
    ("linear", &["Linear"]),
    ("layer_and_mlp", &["Layer", "MLP"]),
    ("layer_norm", &["LayerNorm"]),
    ("group_norm", &["GroupNorm"]),
    ("batch_norm", &["BatchNorm2D"]),
    ("affine_and_silu", &["ElementWiseAffine", "SiLU"]),
    ("convolution1d", &["Convolution1D"]),
    ("convolution2d", &["Convolution2D"]),
    ("pooling_models", &["MaxPool1D", "MaxPool2D", "AvgPool2D"]),
];

#[test]
fn every_class_is_covered() {
    let src = include_str!("primitives.rs");
    let mut covered = BTreeSet::new();
    let mut problems = Vec::new();
    for (test, classes) in COVERAGE {
        let head = format!("\n#[test]\nfn {test}() {{\n");
        let Some(start) = src.find(&head) else {
            problems.push(format!("COVERAGE names `{test}`, which is not a #[test] fn here"));
            continue;
        };
        let body = &src[start + head.len()..];
        let body = &body[..body.find("\n}\n").expect("a test body ends with `}` on its own line")];
        for class in *classes {
            if body.contains(&format!("\"{class}\"")) {
                covered.insert(*class);
            } else {
                problems.push(format!("`{test}` is listed for {class}, but its body never names \"{class}\""));
            }
        }
    }
    // Classes of Mithril's model library are tested against Mithril's numbers in
    // tests/mithril_library.rs: covered when one of its cases (it runs them all) or one
    // of its tests builds the class by name (a regularizer by its lower-case name).
    let library = [include_str!("mithril_library.rs"), include_str!("mithril_library/cases.json")];
    for class in PRIMITIVES.iter().map(|p| p.class).chain(COMPOSITES.iter().copied()) {
        let forms = [format!("\"name\": \"{class}\""), format!("\"model\": \"{}\"", class.to_lowercase())];
        if library.iter().any(|text| forms.iter().any(|f| text.contains(f.as_str()))) {
            covered.insert(class);
        }
    }
    for p in PRIMITIVES {
        if !covered.contains(p.class) {
            problems.push(format!("primitive {} has no test (add one and list it in COVERAGE)", p.class));
        }
    }
    for c in COMPOSITES {
        if !covered.contains(c) {
            problems.push(format!("composite {c} has no test (add one and list it in COVERAGE)"));
        }
    }
    for c in &covered {
        if !PRIMITIVES.iter().any(|p| p.class == *c) && !COMPOSITES.contains(c) {
            problems.push(format!("COVERAGE lists {c}, which is neither a primitive nor a composite"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
