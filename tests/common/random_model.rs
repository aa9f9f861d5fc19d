//! Random small Mithril models, from a seed: a chain of layers over a tensor whose shape
//! the generator tracks, written as the model JSON Mithril's `model_to_dict` produces
//! (a composite `Model` of submodels wired by `connect`). Sizes are small and awkward
//! (1, 3, 5, 7, sizes that are not multiples of a stride); convolutions and pooling get
//! random kernels, strides, padding and dilation. The input is marked differentiable,
//! so `--grad` differentiates through every layer. Used by the differential test (the
//! interpreter against the C target) and as seeds of the frontend fuzzer.

use serde_json::{json, Map, Value};

/// Deterministic choices, from xorshift64.
pub struct Rng(pub u64);

impl Rng {
    /// A generator for `seed` (any value; zero is avoided).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        crate::common::xorshift64(&mut self.0)
    }
    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    pub fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A generated model: its JSON, the shapes of the inputs and parameters the JSON does
/// not fix (as `--shape` would give them), and a one-line summary of its layers.
pub struct RandomModel {
    pub json: String,
    pub shapes: Vec<(String, Vec<u64>)>,
    pub summary: String,
}

/// Sizes the generator draws spatial and feature sizes from: odd ones and ones that
/// are not multiples of 2 or 3 on purpose.
const SIZES: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 11];

/// One layer under construction: its class, constructor args and how its keys connect.
struct Layer {
    class: &'static str,
    args: Value,
    /// Keys wired in the parent besides `input` (which always takes the running tensor).
    conns: Map<String, Value>,
    /// What the summary says about it.
    label: String,
}

struct Builder {
    rng: Rng,
    layers: Vec<Layer>,
    /// The running tensor's shape (the output of the last layer).
    shape: Vec<u64>,
    /// Each earlier layer's output shape, for residual connections.
    outputs: Vec<Vec<u64>>,
    shapes: Vec<(String, Vec<u64>)>,
    /// Named parameters the model declares (made differentiable at the top level).
    params: Vec<String>,
}

impl Builder {
    fn push(&mut self, class: &'static str, args: Value, conns: Map<String, Value>, label: String, shape: Vec<u64>) {
        self.layers.push(Layer { class, args, conns, label });
        self.shape = shape.clone();
        self.outputs.push(shape);
    }

    /// A new parameter named `p<i>` of `shape`.
    fn param(&mut self, shape: Vec<u64>) -> Value {
        let name = format!("p{}", self.params.len());
        self.params.push(name.clone());
        self.shapes.push((name.clone(), shape));
        json!({"key": {"name": name}})
    }

    /// `shape` with some dimensions set to 1 and some leading ones dropped.
    fn broadcastable(&mut self, shape: &[u64]) -> Vec<u64> {
        let drop = self.rng.below(shape.len() as u64 + 1) as usize;
        shape[drop..].iter().map(|&d| if self.rng.below(3) == 0 { 1 } else { d }).collect()
    }

    /// An int or a pair, as Mithril's converters accept either.
    fn int_or_pair(&mut self, pair: [u64; 2]) -> Value {
        if pair[0] == pair[1] && self.rng.coin() {
            json!(pair[0])
        } else {
            json!(pair)
        }
    }

    fn conv2d(&mut self) -> bool {
        let [n, c, h, w] = self.shape[..] else { return false };
        let groups = *self.rng.pick(&[1, 1, 1, c]);
        let out_channels = groups * self.rng.range(1, 3);
        let kernel = [self.rng.range(1, 3), self.rng.range(1, 3)];
        let stride = [self.rng.range(1, 3), self.rng.range(1, 3)];
        let dilation = [self.rng.range(1, 2), self.rng.range(1, 2)];
        let pad = [self.rng.range(0, 2), self.rng.range(0, 2)];
        let Some(oh) = window_out(h, kernel[0], stride[0], (pad[0], pad[0]), dilation[0]) else { return false };
        let Some(ow) = window_out(w, kernel[1], stride[1], (pad[1], pad[1]), dilation[1]) else { return false };
        let args = json!({
            "kernel_size": self.int_or_pair(kernel),
            "out_channels": out_channels,
            "stride": stride,
            "padding": self.int_or_pair(pad),
            "dilation": dilation,
            "groups": groups,
            "use_bias": self.rng.below(4) != 0,
        });
        let label = format!("conv2d(k{kernel:?} s{stride:?} p{pad:?} d{dilation:?} g{groups} o{out_channels})");
        // The frontend cannot infer a grouped convolution's weight shape: it is named
        // and given (as a parameters file would); ungrouped ones are named half the time.
        let mut conns = Map::new();
        if groups > 1 || self.rng.coin() {
            let weight = self.param(vec![out_channels, c / groups, kernel[0], kernel[1]]);
            conns.insert("weight".into(), weight);
        }
        self.push("Convolution2D", args, conns, label, vec![n, out_channels, oh, ow]);
        true
    }

    fn pool2d(&mut self, class: &'static str) -> bool {
        let [n, c, h, w] = self.shape[..] else { return false };
        let kernel = [self.rng.range(1, 3), self.rng.range(1, 3)];
        // Half tile the input (stride = kernel, no padding: the VJP's reshape path, and
        // rows past the last window when the size is not a multiple); the rest overlap
        // or skip, with padding of at most half a window (a window wholly in the
        // padding has no maximum) and, for max pooling, dilation.
        let tiled = self.rng.coin();
        let stride = if tiled { kernel } else { [self.rng.range(1, 3), self.rng.range(1, 3)] };
        let pad = if tiled { [0, 0] } else { [self.rng.below(kernel[0] / 2 + 1), self.rng.below(kernel[1] / 2 + 1)] };
        let dilation = if !tiled && class == "MaxPool2D" && self.rng.below(3) == 0 { 2 } else { 1 };
        // Mithril's default stride (null) is the kernel size.
        let default_stride = tiled && self.rng.coin();
        let Some(oh) = window_out(h, kernel[0], stride[0], (pad[0], pad[0]), dilation) else { return false };
        let Some(ow) = window_out(w, kernel[1], stride[1], (pad[1], pad[1]), dilation) else { return false };
        // A max over padding alone is -inf (and NaN downstream): every window must
        // see the input.
        if !every_window_sees_input(h, kernel[0], stride[0], pad[0], dilation, oh) || !every_window_sees_input(w, kernel[1], stride[1], pad[1], dilation, ow) {
            return false;
        }
        let args = json!({
            "kernel_size": self.int_or_pair(kernel),
            "stride": if default_stride { Value::Null } else { self.int_or_pair(stride) },
            "padding": pad,
            "dilation": dilation,
        });
        let short = if class == "MaxPool2D" { "maxpool" } else { "avgpool" };
        let label = format!("{short}(k{kernel:?} s{stride:?} p{pad:?} d{dilation}) on {h}x{w}");
        self.push(class, args, Map::new(), label, vec![n, c, oh, ow]);
        true
    }

    fn linear(&mut self) -> bool {
        if self.shape.is_empty() {
            return false;
        }
        let dim = *self.rng.pick(SIZES);
        let use_bias = self.rng.below(4) != 0;
        let mut shape = self.shape.clone();
        *shape.last_mut().expect("rank >= 1") = dim;
        self.push("Linear", json!({"dimension": dim, "use_bias": use_bias}), Map::new(), format!("linear({dim})"), shape);
        true
    }

    fn activation(&mut self) -> bool {
        let class = *self.rng.pick(&["Relu", "Relu", "Tanh", "Sigmoid", "LeakyRelu", "Gelu", "Softplus", "Absolute", "Negate"]);
        let args = if class == "LeakyRelu" { json!({"slope": 0.1}) } else { json!({}) };
        let shape = self.shape.clone();
        self.push(class, args, Map::new(), class.to_lowercase(), shape);
        true
    }

    /// Add, Subtract, Multiply or Maximum with a broadcast parameter or, when an earlier
    /// layer's output has the running shape, with that output (a residual).
    fn binary(&mut self) -> bool {
        let class = *self.rng.pick(&["Add", "Add", "Multiply", "Multiply", "Subtract", "Maximum"]);
        let shape = self.shape.clone();
        let earlier: Vec<usize> = (0..self.outputs.len().saturating_sub(1)).filter(|&i| self.outputs[i] == shape).collect();
        let (right, label) = if !earlier.is_empty() && self.rng.coin() {
            let i = *self.rng.pick(&earlier);
            (json!({"key": {"connect": [[format!("m_{i}"), "output"]]}}), format!("{}(m_{i})", class.to_lowercase()))
        } else {
            let other = self.broadcastable(&shape);
            let label = format!("{}(param {other:?})", class.to_lowercase());
            (self.param(other), label)
        };
        // The other operand on either side: a broadcast left operand has its own VJP.
        let side = if self.rng.coin() { "right" } else { "left" };
        let mut conns = Map::new();
        conns.insert(side.into(), right);
        self.push(class, json!({}), conns, label, shape);
        true
    }

    fn softmax(&mut self) -> bool {
        if self.shape.is_empty() {
            return false;
        }
        let rank = self.shape.len() as i64;
        let axis = self.rng.below(rank as u64) as i64 - if self.rng.coin() { rank } else { 0 };
        let mut conns = Map::new();
        conns.insert("axis".into(), json!(axis));
        let shape = self.shape.clone();
        self.push("Softmax", json!({}), conns, format!("softmax({axis})"), shape);
        true
    }

    fn flatten(&mut self) -> bool {
        if self.shape.len() < 2 {
            return false;
        }
        let start = self.rng.range(1, self.shape.len() as u64 - 1) as usize;
        let mut shape = self.shape[..start].to_vec();
        shape.push(self.shape[start..].iter().product());
        self.push("Flatten", json!({"start_dim": start, "end_dim": -1}), Map::new(), format!("flatten({start})"), shape);
        true
    }

    /// Reshape to one of a few layouts with the same element count, some with -1.
    fn reshape(&mut self) -> bool {
        let total: u64 = self.shape.iter().product();
        let first = self.shape.first().copied().unwrap_or(1);
        let mut options: Vec<(Vec<i64>, Vec<u64>)> = vec![(vec![first as i64, -1], vec![first, total / first.max(1)])];
        if self.shape.len() == 2 {
            // Back to an image-like rank 4, when the features factor.
            let f = self.shape[1];
            for d in [1u64, 2, 3] {
                if f.is_multiple_of(d) {
                    options.push((vec![first as i64, d as i64, 1, (f / d) as i64], vec![first, d, 1, f / d]));
                }
            }
        }
        if self.shape.len() == 4 {
            let s = &self.shape;
            options.push((vec![s[0] as i64, (s[1] * s[2]) as i64, s[3] as i64], vec![s[0], s[1] * s[2], s[3]]));
        }
        if first == 0 {
            return false;
        }
        let (target, shape) = self.rng.pick(&options).clone();
        let mut conns = Map::new();
        conns.insert("shape".into(), json!(target));
        self.push("Reshape", json!({}), conns, format!("reshape({target:?})"), shape);
        true
    }

    /// Sum or Mean over one axis, keeping it (so the chain keeps its rank).
    fn reduce(&mut self) -> bool {
        if self.shape.len() < 2 {
            return false;
        }
        let class = *self.rng.pick(&["Sum", "Mean", "Max"]);
        let axis = self.rng.range(1, self.shape.len() as u64 - 1) as usize;
        let mut shape = self.shape.clone();
        shape[axis] = 1;
        let args = json!({"axis": axis, "keepdim": true});
        self.push(class, args, Map::new(), format!("{}({axis})", class.to_lowercase()), shape);
        true
    }

    fn layer_norm(&mut self) -> bool {
        if self.shape.len() != 3 {
            return false;
        }
        let shape = self.shape.clone();
        let args = json!({"use_scale": self.rng.coin(), "use_bias": self.rng.coin(), "eps": 1e-5});
        self.push("LayerNorm", args, Map::new(), "layernorm".into(), shape);
        true
    }

    fn to_json(&self) -> String {
        let mut submodels = Map::new();
        let mut connections = Map::new();
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            let id = format!("m_{i}");
            let exposed = exposed_keys(layer.class);
            submodels.insert(
                id.clone(),
                json!({
                    "name": layer.class, "args": layer.args, "exposed_keys": exposed,
                    "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [],
                    "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []
                }),
            );
            let mut conns = Map::new();
            let input = if i == 0 { json!({"key": {"name": "input"}}) } else { json!({"key": {"connect": [[format!("m_{}", i - 1), "output"]]}}) };
            // Binary layers take the running tensor on the side `conns` leaves free.
            let input_key = match layer.class {
                "Add" | "Multiply" | "Subtract" | "Maximum" if layer.conns.contains_key("right") => "left",
                "Add" | "Multiply" | "Subtract" | "Maximum" => "right",
                _ => "input",
            };
            conns.insert(input_key.into(), input);
            conns.extend(layer.conns.clone());
            if i == last {
                conns.insert("output".into(), json!({"key": {"name": "output"}}));
            }
            connections.insert(id, Value::Object(conns));
        }
        let mut diffs = vec![json!(["input", true])];
        diffs.extend(self.params.iter().map(|p| json!([p, true])));
        let model = json!({
            "name": "Model", "args": {}, "connections": connections, "submodels": submodels,
            "exposed_keys": [], "assigned_shapes": [], "assigned_types": [],
            "assigned_differentiabilities": diffs,
            "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []
        });
        serde_json::to_string(&model).expect("a JSON value prints")
    }
}

/// The keys `model_to_dict` lists as exposed for `class`: its output and the inputs
/// that carry a value (the frontend reads an unexposed valued key as a tensor input).
fn exposed_keys(class: &str) -> Vec<&'static str> {
    match class {
        "Convolution2D" => vec!["output", "padding", "stride", "dilation", "groups"],
        "MaxPool2D" | "AvgPool2D" => vec!["output", "kernel_size", "stride", "padding", "dilation"],
        "Gelu" => vec!["output", "approximate"],
        "LeakyRelu" => vec!["output", "slope"],
        "Softmax" => vec!["output", "axis"],
        "Flatten" => vec!["output", "start_dim", "end_dim"],
        "Reshape" => vec!["output", "shape"],
        "Sum" | "Mean" | "Max" => vec!["output", "axis", "keepdim"],
        "LayerNorm" => vec!["output", "eps"],
        _ => vec!["output"],
    }
}

/// The output size of a sliding window, or `None` when no window fits.
pub fn window_out(size: u64, kernel: u64, stride: u64, pad: (u64, u64), dilation: u64) -> Option<u64> {
    let span = (kernel - 1) * dilation + 1;
    let padded = size + pad.0 + pad.1;
    (padded >= span).then(|| (padded - span) / stride + 1)
}

/// Whether each of `out` windows along an axis of `size` (padded by `pad` before) has a
/// tap inside the input.
fn every_window_sees_input(size: u64, kernel: u64, stride: u64, pad: u64, dilation: u64, out: u64) -> bool {
    (0..out).all(|o| (0..kernel).any(|k| (o * stride + k * dilation).checked_sub(pad).is_some_and(|c| c < size)))
}

/// The model for `seed`: 1 to `max_layers` layers over an image `[N, C, H, W]`, a
/// sequence `[B, T, D]` or a matrix `[N, F]`; at most 4096 elements at any point.
pub fn generate(seed: u64, max_layers: usize) -> RandomModel {
    let mut rng = Rng::new(seed);
    let shape = match rng.below(4) {
        0 | 1 => vec![rng.range(1, 2), rng.range(1, 4), *rng.pick(SIZES), *rng.pick(SIZES)],
        2 => vec![rng.range(1, 2), *rng.pick(SIZES), *rng.pick(SIZES)],
        _ => vec![rng.range(1, 3), *rng.pick(SIZES)],
    };
    let mut b = Builder { rng, layers: Vec::new(), shape: shape.clone(), outputs: Vec::new(), shapes: vec![("input".into(), shape.clone())], params: Vec::new() };
    let want = 1 + b.rng.below(max_layers as u64) as usize;
    let mut tries = 0;
    while b.layers.len() < want && tries < 50 {
        tries += 1;
        let before = b.shape.clone();
        // Images mostly go through convolutions and pooling, matrices through linear
        // layers; reshapes move between them.
        let roll = b.rng.below(20);
        let added = match (b.shape.len(), roll) {
            (4, 0..=5) => b.conv2d(),
            (4, 6..=9) => b.pool2d("MaxPool2D"),
            (4, 10..=11) => b.pool2d("AvgPool2D"),
            (3, 0..=3) => b.layer_norm(),
            (_, 0..=5) => b.linear(),
            (_, 6..=7) => b.reshape(),
            (_, 8..=11) => b.activation(),
            (_, 12..=14) => b.binary(),
            (_, 15) => b.softmax(),
            (_, 16) => b.reduce(),
            (_, 17) => b.flatten(),
            (4, _) => b.conv2d(),
            _ => b.linear(),
        };
        // Keep every tensor small, so the interpreter and the C build stay fast.
        if added && b.shape.iter().product::<u64>() > 4096 {
            b.layers.pop();
            b.outputs.pop();
            b.shape = before;
        }
    }
    if b.layers.is_empty() {
        b.activation();
    }
    let summary = format!("input {shape:?}: {}", b.layers.iter().map(|l| l.label.as_str()).collect::<Vec<_>>().join(" -> "));
    RandomModel { json: b.to_json(), shapes: b.shapes.clone(), summary }
}
