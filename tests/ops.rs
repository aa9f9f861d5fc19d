//! Per-op execution tests: every file of `tests/ops/` is a small graph in the IR's text
//! form (what `mithrilc::ir::parse::parse` reads) that exercises one op at awkward sizes,
//! and every file is
//! 1. parsed, verified and run through the graph passes: forward, and backward when
//!    its header asks for gradients;
//! 2. run on the interpreter, the reference; the backward graph's gradients are checked
//!    against central finite differences of the same graph in f64 (every `f32` of the
//!    file read as `f64`), so each op's vector-Jacobian product is checked for real;
//! 3. run on every compiled target whose toolchain is present (c; cuda and metal
//!    through CPU emulation; ggml; xla) and compared with the interpreter within a
//!    tolerance per element type ([`default_tolerance`]). A file a target refuses
//!    (`backend::check_supported`, after `pipeline::for_target` decomposed what it does
//!    not claim) is skipped on it with the reason, and a table of what
//!    ran where is printed (`cargo test --release --test suite ops:: -- --nocapture`).
//!
//! To keep CI cheap, each target builds two artifacts, not one per file: all files it
//! accepts merged into one graph of disjoint parts (forward), and all files with
//! gradients merged likewise (backward). Every input, parameter and output of a file is
//! named `STEM/NAME` (`sigmoid/x`; gradients `grad/sigmoid/x`), so each output is
//! attributed to its file. When a merged artifact fails to build or run, the files are
//! split in halves until the failing ones are found (and when each half runs alone,
//! every file of the group fails, naming the others).
//!
//! The harness cannot pass by accident: `comparison_catches_wrong_values`,
//! `finite_differences_catch_a_wrong_vjp` (a gradient scaled by 1.01, or replaced by
//! another, fails) and `the_harness_finds_and_names_each_failure` (a target with a
//! wrong op, a build failing only when merged, and an op it refuses) check it.
//!
//! # A file's header
//! `//` lines before the `graph` line; `KEY: VALUE` lines with the keys below are the
//! header, other comment lines are free text (say what the file exercises).
//! - `// grad: all` derives the backward pass with respect to every `param` of the
//!   graph; `// grad: w, b` with respect to those. A file with parameters must have a
//!   `grad:` line (declare data as `input`): a parameter is what gradients are taken of.
//! - `// inputs: NAME=DIST, NAME=DIST` says how an input's or parameter's values are
//!   drawn (deterministically, from a seed made of the file's name: no data files):
//!   `uniform(LO,HI)` floats in [LO, HI); `int(LO,HI)` integers in [LO, HI) (integer
//!   valued floats for a float input); `bool` true or false; `pick(V1,V2,...)` each
//!   element one of the values listed (numbers, `nan`, `inf`, `-inf`). Unlisted ones
//!   are uniform(-2,2) (floats), int(-8,9) (integers) and bool; the cotangents of the
//!   outputs (`output_grad/...`) uniform(-1,1). Choose domains away from an op's kinks
//!   and poles (`log`: positive; a max pool: no ties), or the finite differences fail.
//!   The interpreter's float outputs must be finite, unless a `pick` feeds `nan` or
//!   an infinity.
//! - `// tol: 1e-4` widens the tolerance of every float output of the file on every
//!   target; `// tol: ggml=1e-3, cuda=2e-5` on those targets only (say why in a comment).
//!   Integer and bool outputs always compare exactly.
//! - `// known: TARGET: REASON` skips the file on that target (`// known: TARGET
//!   backward: REASON` its backward pass only), for a bug found and not yet fixed; the
//!   table lists it with the reason. `// known: autodiff: REASON` says the gradients
//!   are wrong (the finite differences disagree; every target computes the same wrong
//!   gradient, so they still run): the test prints it, and fails once the gradients
//!   are right, so that the line is removed with the fix. A known bug on a target is
//!   not run (it would fail the merged build); `MITHRILC_OPS_KNOWN=1` runs those files
//!   too, to check a fix.
//!
//! `MITHRILC_OPS_TARGETS=c,xla` runs the targets named only (while writing a file).
//!
//! The graph is named after the file (`graph sigmoid {` in `sigmoid.ir`). Every op of
//! `Op::catalogue()` must appear in some file ([`every_catalogue_op_has_a_file`]).
//! `tests/ops/README.md` says how to add a file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use mithrilc::backend::{check_supported, Backend, BuildConfig, Toolchain};
use mithrilc::pipeline::Graphs;
use mithrilc::ir::{Dtype, Graph, Op, ValueId};
use mithrilc::passes::autodiff::{grad_name, output_grad_name, Wrt};
use mithrilc::tensor::Tensor;

use crate::common;

// ---------------------------------------------------------------------------------
// The library, in two calls (the pipeline and running a target).

/// The graph passes over a parsed graph: the forward graph, and with `wrt` the backward
/// graph too.
fn passes(graph: Graph, wrt: &Wrt) -> Result<Graphs, String> {
    Graphs::new(graph, wrt, |_, _| {}).map_err(|e| e.to_string())
}

/// `graphs` built for `target` with `build` and run on `feeds`: the outputs of the
/// backward graph when there is one, else of the forward graph, in order.
fn build_and_run(target: &dyn Backend, graphs: &Graphs, feeds: &BTreeMap<String, Tensor>, build: &BuildConfig) -> Result<Vec<(String, Tensor)>, String> {
    mithrilc::exec::run_once(target, graphs, feeds, Path::new("ops.ir"), build, Default::default()).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------
// Headers.

/// How an input's values are drawn.
#[derive(Debug, Clone, PartialEq)]
enum Dist {
    Uniform(f64, f64),
    Int(i64, i64),
    Bool,
    Pick(Vec<f64>),
}

#[derive(Debug, Clone, PartialEq)]
enum Grad {
    All,
    Params(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
struct Known {
    target: String,
    backward_only: bool,
    reason: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Header {
    grad: Option<Grad>,
    inputs: BTreeMap<String, Dist>,
    /// The tolerance of every float output on every target (`None`: [`default_tolerance`]).
    tol: Option<f64>,
    target_tol: BTreeMap<String, f64>,
    known: Vec<Known>,
}

/// The targets a header may name.
const TARGET_NAMES: [&str; 5] = ["c", "cuda", "metal", "ggml", "xla"];

fn parse_header(text: &str) -> Result<Header, String> {
    let mut h = Header::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with("graph ") {
            break;
        }
        let Some(comment) = line.strip_prefix("//") else {
            if line.is_empty() {
                continue;
            }
            return Err(format!("line {}: expected a `//` header line or `graph NAME {{`", n + 1));
        };
        let Some((key, value)) = comment.trim().split_once(':') else { continue };
        let value = value.trim();
        let err = |m: String| format!("line {}: {key}: {m}", n + 1);
        match key {
            "grad" if value == "all" => h.grad = Some(Grad::All),
            "grad" => h.grad = Some(Grad::Params(value.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())),
            "inputs" => {
                for item in split_top(value) {
                    let (name, dist) = item.split_once('=').ok_or_else(|| err(format!("expected NAME=DIST, got `{item}`")))?;
                    let dist = parse_dist(dist.trim()).map_err(err)?;
                    h.inputs.insert(name.trim().to_string(), dist);
                }
            }
            "tol" => {
                for item in split_top(value) {
                    let number = |s: &str| s.trim().parse::<f64>().ok().filter(|t| *t >= 0.0).ok_or_else(|| err(format!("bad tolerance `{s}`")));
                    match item.split_once('=') {
                        Some((t, v)) => {
                            let t = t.trim();
                            if !TARGET_NAMES.contains(&t) {
                                return Err(err(format!("no target `{t}` (targets: {})", TARGET_NAMES.join(", "))));
                            }
                            h.target_tol.insert(t.to_string(), number(v)?);
                        }
                        None => h.tol = Some(number(item)?),
                    }
                }
            }
            "known" => {
                let (which, reason) = value.split_once(':').ok_or_else(|| err("expected `TARGET: REASON`".into()))?;
                let mut words = which.split_whitespace();
                let target = words.next().unwrap_or_default().to_string();
                let backward_only = match words.next() {
                    None => false,
                    Some("backward") => true,
                    Some(w) => return Err(err(format!("expected `TARGET` or `TARGET backward`, got `{which}` ({w})"))),
                };
                if !(TARGET_NAMES.contains(&target.as_str()) || target == "autodiff" && !backward_only) {
                    return Err(err(format!("expected `autodiff` or a target ({}), got `{which}`", TARGET_NAMES.join(", "))));
                }
                if reason.trim().is_empty() {
                    return Err(err("say why".into()));
                }
                h.known.push(Known { target, backward_only, reason: reason.trim().to_string() });
            }
            _ => {}
        }
    }
    Ok(h)
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

fn parse_dist(s: &str) -> Result<Dist, String> {
    if s == "bool" {
        return Ok(Dist::Bool);
    }
    let (name, args) = s.strip_suffix(')').and_then(|s| s.split_once('(')).ok_or_else(|| format!("expected uniform(LO,HI), int(LO,HI), bool or pick(V,...), got `{s}`"))?;
    let values: Vec<f64> = args
        .split(',')
        .map(|v| match v.trim() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            v => v.parse().map_err(|_| format!("bad number `{v}` in `{s}`")),
        })
        .collect::<Result<_, _>>()?;
    match (name, values.as_slice()) {
        ("uniform", &[lo, hi]) if lo < hi && lo.is_finite() && hi.is_finite() => Ok(Dist::Uniform(lo, hi)),
        ("int", &[lo, hi]) if lo < hi && lo.fract() == 0.0 && hi.fract() == 0.0 => Ok(Dist::Int(lo as i64, hi as i64)),
        ("pick", v) if !v.is_empty() => Ok(Dist::Pick(v.to_vec())),
        _ => Err(format!("bad distribution `{s}` (uniform(LO,HI) and int(LO,HI) need LO < HI, int integers)")),
    }
}

// ---------------------------------------------------------------------------------
// Values.

/// xorshift64, seeded from a name: the same values for a file wherever it runs and
/// whatever other files exist.
struct Rng(u64);

impl Rng {
    fn new(name: &str) -> Rng {
        // FNV-1a.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Rng(h | 1)
    }
    fn next(&mut self) -> u64 {
        common::xorshift64(&mut self.0)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn draw(&mut self, dist: &Dist) -> f64 {
        match dist {
            Dist::Uniform(lo, hi) => lo + (hi - lo) * self.unit(),
            Dist::Int(lo, hi) => (lo + (self.next() % (hi - lo) as u64) as i64) as f64,
            Dist::Bool => (self.next() >> 63) as f64,
            Dist::Pick(v) => v[(self.next() % v.len() as u64) as usize],
        }
    }
}

/// Values for every input and parameter of `graph` (the backward graph's cotangent
/// inputs included), drawn as the header says; names are `STEM/NAME`.
fn make_feeds(stem: &str, header: &Header, graph: &Graph) -> Result<BTreeMap<String, Tensor>, String> {
    let mut feeds = BTreeMap::new();
    for v in graph.inputs().chain(graph.params()) {
        let node = graph.node(v);
        let name = node.name.clone().unwrap_or_default();
        let ty = &node.ty;
        let shape = ty.shape.as_known().ok_or_else(|| format!("input `{name}` has a symbolic shape {}", ty.shape))?;
        let own = name.strip_prefix(&format!("{stem}/")).unwrap_or(&name);
        let dist = if name.starts_with("output_grad/") {
            Dist::Uniform(-1.0, 1.0)
        } else if let Some(d) = header.inputs.get(own) {
            let fits = match d {
                Dist::Uniform(..) => ty.dtype.is_float(),
                Dist::Int(..) => ty.dtype != Dtype::Bool,
                Dist::Bool => ty.dtype == Dtype::Bool,
                Dist::Pick(_) => true,
            };
            if !fits {
                return Err(format!("inputs: {own}={d:?} does not suit its type {ty}"));
            }
            d.clone()
        } else if ty.dtype.is_float() {
            Dist::Uniform(-2.0, 2.0)
        } else if ty.dtype == Dtype::Bool {
            Dist::Bool
        } else {
            Dist::Int(-8, 9)
        };
        let mut rng = Rng::new(&name);
        let data = (0..shape.iter().product::<u64>()).map(|_| rng.draw(&dist)).collect();
        feeds.insert(name, Tensor::new(ty.dtype, shape, data));
    }
    Ok(feeds)
}

// ---------------------------------------------------------------------------------
// Files.

/// One file of `tests/ops/`, parsed, through the passes, with its values and the
/// interpreter's outputs.
struct OpFile {
    stem: String,
    header: Header,
    text: String,
    /// As parsed, with inputs, parameters and outputs named `STEM/NAME`.
    parsed: Graph,
    wrt: Wrt,
    graphs: Graphs,
    feeds: BTreeMap<String, Tensor>,
    /// The interpreter's outputs of the forward graph, and of the backward graph.
    forward: Vec<(String, Tensor)>,
    backward: Option<Vec<(String, Tensor)>>,
}

impl OpFile {
    fn reference(&self, phase: Phase) -> &[(String, Tensor)] {
        match phase {
            Phase::Forward => &self.forward,
            Phase::Backward => self.backward.as_deref().unwrap_or_default(),
        }
    }
}

fn ops_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ops")
}

/// Every file of `tests/ops/`, in name order; the files that fail to load, each with why.
fn load_all() -> &'static (Vec<OpFile>, Vec<String>) {
    static FILES: OnceLock<(Vec<OpFile>, Vec<String>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(ops_dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "ir")).collect();
        paths.sort();
        let (mut files, mut errors) = (Vec::new(), Vec::new());
        for p in paths {
            match load(&p) {
                Ok(f) => files.push(f),
                Err(e) => errors.push(format!("tests/ops/{}: {e}", p.file_name().unwrap().to_string_lossy())),
            }
        }
        (files, errors)
    })
}

fn load(path: &Path) -> Result<OpFile, String> {
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    load_text(&stem, &text)
}

/// `text`, the file `STEM.ir`: parsed, checked, through the passes, and run on the
/// interpreter.
fn load_text(stem: &str, text: &str) -> Result<OpFile, String> {
    let header = parse_header(text)?;
    let parsed = parse_named(stem, text)?;
    let params: Vec<String> = parsed.params().filter_map(|v| parsed.node(v).name.clone()).collect();
    let wrt = match &header.grad {
        None if !params.is_empty() => return Err("it has parameters but no `// grad:` line (declare data as `input`)".into()),
        None => Wrt::None,
        Some(_) if params.is_empty() => return Err("`// grad:` without parameters to differentiate".into()),
        Some(Grad::All) => Wrt::Params(params),
        Some(Grad::Params(names)) => {
            let names: Vec<String> = names.iter().map(|n| format!("{stem}/{n}")).collect();
            if let Some(n) = names.iter().find(|n| !params.contains(n)) {
                return Err(format!("grad: no parameter `{n}`"));
            }
            Wrt::Params(names)
        }
    };
    for name in header.inputs.keys() {
        if parsed.find_arg(&format!("{stem}/{name}")).is_none() {
            return Err(format!("inputs: no input or parameter `{name}`"));
        }
    }
    let graphs = passes(parsed.clone(), &wrt)?;
    let feeds = make_feeds(stem, &header, graphs.main())?;
    let run = |g: &Graph| mithrilc::interp::run(g, &feeds).map_err(|e| format!("interpreter: {e}"));
    let forward = run(&graphs.forward)?;
    let backward = graphs.backward.as_ref().map(run).transpose()?;
    // Non-finite results are meant only where non-finite values are fed.
    let nonfinite_fed = header.inputs.values().any(|d| matches!(d, Dist::Pick(v) if v.iter().any(|x| !x.is_finite())));
    for (name, t) in forward.iter().chain(backward.iter().flatten()) {
        if !nonfinite_fed && t.dtype.is_float() && t.data.iter().any(|x| !x.is_finite()) {
            return Err(format!("the interpreter's `{name}` is not finite everywhere: choose inputs in the op's domain (`// inputs:`)"));
        }
    }
    Ok(OpFile { stem: stem.to_string(), header, text: text.to_string(), parsed, wrt, graphs, feeds, forward, backward })
}

/// The file's graph as parsed and verified, its inputs, parameters and outputs renamed
/// `STEM/NAME`.
fn parse_named(stem: &str, text: &str) -> Result<Graph, String> {
    let mut g = mithrilc::ir::parse::parse(text).map_err(|e| e.to_string())?;
    if g.name != stem {
        return Err(format!("the graph is named `{}`; name it after the file (`graph {stem} {{`)", g.name));
    }
    for n in &mut g.nodes {
        if matches!(n.op, Op::Input | Op::Param) {
            n.name = n.name.as_ref().map(|s| format!("{stem}/{s}"));
        }
    }
    for o in &mut g.outputs {
        o.name = format!("{stem}/{}", o.name);
    }
    mithrilc::ir::verify::verify(&g).map_err(|e| e.to_string())?;
    Ok(g)
}

// ---------------------------------------------------------------------------------
// Comparison.

/// The tolerance of an output of `dtype` on a target: `|got - want| <= tol * (1 + |want|)`.
/// f32 allows a few roundings of a short chain or of sums over the files' sizes (tens of
/// elements); integers and bools are exact.
fn default_tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F64 => 1e-12,
        Dtype::F32 => 1e-5,
        Dtype::F16 => 2e-3,
        Dtype::Bf16 => 1.6e-2,
        // One step of the type at most (a function computed in float rather than f64
        // may round to the other side of a halfway point).
        Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz => 0.125,
        Dtype::F8E5M2 | Dtype::F8E5M2Fnuz => 0.25,
        Dtype::F4E2M1 => 0.5,
        Dtype::I8 | Dtype::U8 | Dtype::I16 | Dtype::U16 | Dtype::I32 | Dtype::U32 | Dtype::I64 | Dtype::U64 | Dtype::Bool => 0.0,
        Dtype::I4 | Dtype::U4 | Dtype::I2 | Dtype::U2 => 0.0,
    }
}

/// The tolerance for output `dtype` of `file` on `target`.
fn tolerance(header: &Header, target: &str, dtype: Dtype) -> f64 {
    if !dtype.is_float() {
        return 0.0;
    }
    header.target_tol.get(target).copied().or(header.tol).unwrap_or_else(|| default_tolerance(dtype))
}

/// `got` against `want` within `tol * (1 + |want|)` per element (NaN matches NaN, an
/// infinity the same infinity). `Ok` holds the largest error in the tolerance's units,
/// `|got - want| / (1 + |want|)`; `Err` says where the largest difference is, what it
/// is and how many elements are out.
fn compare(got: &Tensor, want: &Tensor, tol: f64) -> Result<f64, String> {
    if got.shape != want.shape {
        return Err(format!("shape {:?}, the interpreter's {:?}", got.shape, want.shape));
    }
    if got.data.len() != want.data.len() {
        return Err(format!("{} elements, the interpreter's {}", got.data.len(), want.data.len()));
    }
    let (mut worst, mut at, mut out) = (0.0f64, None, 0usize);
    for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        let same = g == w || (g.is_nan() && w.is_nan());
        let diff = if same { 0.0 } else if g.is_finite() && w.is_finite() { (g - w).abs() } else { f64::INFINITY };
        // (not `diff > bound`: a NaN bound, where the interpreter has NaN, must fail)
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let bad = !same && !(diff <= tol * (1.0 + w.abs()));
        out += bad as usize;
        if bad && at.is_none_or(|(_, d)| diff > d) {
            at = Some((i, diff));
        }
        worst = worst.max(diff / (1.0 + w.abs()));
    }
    match at {
        None => Ok(worst),
        Some((i, diff)) => {
            let index = unravel(i, &want.shape);
            Err(format!(
                "largest difference {diff:.3e} at {index:?} (got {}, interpreter {}), tolerance {tol:.0e} x (1 + |interpreter|); {out} of {} elements out",
                got.data[i],
                want.data[i],
                want.data.len()
            ))
        }
    }
}

fn unravel(mut i: usize, shape: &[u64]) -> Vec<u64> {
    let mut index = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        let n = shape[d].max(1) as usize;
        index[d] = (i % n) as u64;
        i /= n;
    }
    index
}

// ---------------------------------------------------------------------------------
// Gradients against finite differences.

/// The file's text with every f32 read as f64.
fn widened(text: &str) -> String {
    text.replace("f32[", "f64[").replace("to = f32", "to = f64")
}

/// Checks the gradients `backward` computes (outputs `grad/P` for each `P` of `wrt`) of
/// `sum over float outputs y of r_y * y` (r_y: the cotangent inputs of `feeds`; a loss
/// output alone when there is one) against central finite differences of `forward`,
/// whose `stop_gradient`s hold their values at `feeds`. Returns how many elements were
/// checked and the largest difference.
fn check_gradients(forward: &Graph, backward: &Graph, wrt: &[String], feeds: &BTreeMap<String, Tensor>) -> Result<(usize, f64), String> {
    let frozen_values = freeze(forward, feeds)?;
    let (frozen, mut base) = frozen_values;
    base.extend(feeds.iter().map(|(k, v)| (k.clone(), v.clone())));
    let has_loss = frozen.outputs.iter().any(|o| o.loss);
    let objective = |values: &BTreeMap<String, Tensor>| -> Result<f64, String> {
        let outs = mithrilc::interp::run(&frozen, values).map_err(|e| e.to_string())?;
        let mut sum = 0.0;
        for ((name, y), o) in outs.iter().zip(&frozen.outputs) {
            if !y.dtype.is_float() || (has_loss && !o.loss) {
                continue;
            }
            if o.loss {
                sum += y.data[0];
                continue;
            }
            let r = values.get(&output_grad_name(name)).ok_or_else(|| format!("no cotangent for output `{name}`"))?;
            sum += y.data.iter().zip(&r.data).map(|(a, b)| a * b).sum::<f64>();
        }
        Ok(sum)
    };
    let grads: BTreeMap<String, Tensor> = mithrilc::interp::run(backward, feeds).map_err(|e| e.to_string())?.into_iter().collect();
    let h = 1e-6;
    let (mut worst, mut count) = (0.0f64, 0);
    let mut failures = Vec::new();
    for p in wrt {
        let grad = grads.get(&grad_name(p)).ok_or_else(|| format!("the backward graph has no output `{}`", grad_name(p)))?;
        let value = &base[p];
        if grad.shape != value.shape {
            return Err(format!("`{}` has shape {:?}, the parameter {:?}", grad_name(p), grad.shape, value.shape));
        }
        // Every element of a small parameter; of a large one, 400 spread over it with the
        // last (each costs two runs of the whole graph).
        let n = value.data.len();
        let step = n.div_ceil(400).max(1);
        for i in (0..n).step_by(step).chain((n > 0 && (n - 1) % step != 0).then(|| n - 1)) {
            let at = |delta: f64| {
                let mut v = base.clone();
                v.get_mut(p).unwrap().data[i] += delta;
                objective(&v)
            };
            let fd = (at(h)? - at(-h)?) / (2.0 * h);
            let got = grad.data[i];
            let diff = (got - fd).abs();
            worst = worst.max(diff);
            count += 1;
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            if !(diff <= 1e-6 + 1e-5 * fd.abs()) {
                failures.push(format!("d/d{p}{:?}: autodiff {got}, finite differences {fd}", unravel(i, &value.shape)));
            }
        }
    }
    if failures.is_empty() {
        Ok((count, worst))
    } else {
        let n = failures.len();
        failures.truncate(4);
        Err(format!("{n} gradient element(s) differ from finite differences by more than 1e-6 + 1e-5 |fd|:\n    {}", failures.join("\n    ")))
    }
}

/// `graph` with each `stop_gradient` replaced by an input holding its value at `feeds`
/// (named `stop_gradient/%N`), and those values.
fn freeze(graph: &Graph, feeds: &BTreeMap<String, Tensor>) -> Result<(Graph, BTreeMap<String, Tensor>), String> {
    let stops: Vec<ValueId> = graph.ids().filter(|&v| graph.node(v).op == Op::StopGradient).collect();
    let mut probe = graph.clone();
    probe.outputs = stops.iter().map(|&v| mithrilc::ir::Output { name: format!("stop_gradient/%{}", v.0), value: v, loss: false }).collect();
    let values: BTreeMap<String, Tensor> = if stops.is_empty() { BTreeMap::new() } else { mithrilc::interp::run(&probe, feeds).map_err(|e| e.to_string())?.into_iter().collect() };
    let mut frozen = graph.clone();
    for &v in &stops {
        let n = &mut frozen.nodes[v.index()];
        n.op = Op::Input;
        n.args.clear();
        n.name = Some(format!("stop_gradient/%{}", v.0));
    }
    Ok((frozen, values))
}

/// The file's gradients against finite differences, in f64.
fn check_file_gradients(f: &OpFile) -> Result<(usize, f64), String> {
    let Wrt::Params(wrt) = &f.wrt else { return Ok((0, 0.0)) };
    let forward = parse_named(&f.stem, &widened(&f.text))?;
    let graphs = passes(forward.clone(), &f.wrt)?;
    let backward = graphs.backward.as_ref().ok_or("no backward graph")?;
    // The same values, as f64 where the graph now is.
    let feeds: BTreeMap<String, Tensor> = f
        .feeds
        .iter()
        .map(|(k, t)| {
            let dtype = if t.dtype == Dtype::F32 { Dtype::F64 } else { t.dtype };
            (k.clone(), Tensor { dtype, shape: t.shape.clone(), data: t.data.clone() })
        })
        .collect();
    check_gradients(&forward, backward, wrt, &feeds)
}

// ---------------------------------------------------------------------------------
// Targets.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Forward,
    Backward,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
        }
    }
}

struct Target {
    name: &'static str,
    backend: &'static dyn Backend,
    build: BuildConfig,
    /// Why it cannot run here, if it cannot.
    missing: Option<String>,
}

fn targets() -> Vec<Target> {
    use mithrilc::codegen::{c::backend::CTarget, cuda::backend::CudaTarget, ggml::backend::GgmlTarget, metal::backend::MetalTarget, xla::backend::XlaTarget};
    let emulate = BuildConfig { emulate: true, ..Default::default() };
    let need = |tools: &[&str], install: &str| {
        tools.iter().all(|t| common::have(t)).then_some(()).ok_or_else(|| format!("{} are needed ({install})", tools.join(", ")))
    };
    // At -O2, as tests/c_target.rs builds: -O3 triples the time gcc takes over the
    // merged backward graph's code.
    let c = BuildConfig { cflags: "-O2".into(), ..Default::default() };
    let c_ready = need(&[&c.cc, "make"], "apt-get install gcc make");
    let cxx_ready = need(&["c++", "cc", "make"], "apt-get install g++ gcc make");
    let ggml_ready = c_ready.clone().and_then(|_| mithrilc::build::ggml().map(drop).map_err(|e| e.to_string()));
    let xla_ready = mithrilc::codegen::xla::toolchain::python().map(drop).map_err(|e| e.to_string());
    let t = |name, backend, build, ready: Result<(), String>| Target { name, backend, build, missing: ready.err().map(|e| e.replace('\n', " ")) };
    // The slowest builds first: two run at a time.
    vec![
        t("cuda", &CudaTarget as &dyn Backend, emulate.clone(), cxx_ready.clone()),
        t("metal", &MetalTarget, emulate, cxx_ready),
        t("c", &CTarget, c, c_ready),
        t("xla", &XlaTarget, BuildConfig::default(), xla_ready),
        t("ggml", &GgmlTarget, BuildConfig::default(), ggml_ready),
    ]
}

/// A target's cells by file (forward, backward), and how long each pass took.
type TargetResult = (BTreeMap<String, [Cell; 2]>, String);

/// What happened to one file's pass on one target.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    /// Not asked (no backward pass).
    None,
    /// Ran and matched, with the largest error in the tolerance's units.
    Ran(f64),
    Refused(String),
    Known(String),
    Failed(String),
}

impl Cell {
    fn mark(&self) -> &'static str {
        match self {
            Cell::None => "-",
            Cell::Ran(_) => "ok",
            Cell::Refused(_) => "skip",
            Cell::Known(_) => "known",
            Cell::Failed(_) => "FAIL",
        }
    }
}

/// The files merged into one graph: disjoint parts, one per file.
fn merge(parts: &[&Graph]) -> Graph {
    let mut g = Graph::new("ops");
    for p in parts {
        let base = g.nodes.len() as u32;
        let cbase = g.consts.len() as u32;
        g.consts.extend(p.consts.iter().cloned());
        for n in &p.nodes {
            let mut n = n.clone();
            for a in &mut n.args {
                a.0 += base;
            }
            if let Op::Constant(c) = &mut n.op {
                c.0 += cbase;
            }
            g.nodes.push(n);
        }
        g.outputs.extend(p.outputs.iter().map(|o| mithrilc::ir::Output { value: ValueId(o.value.0 + base), ..o.clone() }));
        g.warnings.extend(p.warnings.iter().cloned());
    }
    g
}

/// The file an output of a merged graph belongs to: `STEM/...` or `grad/STEM/...`.
fn owner(output: &str) -> &str {
    let name = output.strip_prefix("grad/").unwrap_or(output);
    name.split('/').next().unwrap_or(name)
}

/// Builds and runs `files` merged for `phase` on `target`, and compares each output
/// with the interpreter's: each file's outcome. A merged artifact that fails to build
/// or run is split in halves until the files that fail are found.
fn run_merged(target: &Target, files: &[&OpFile], phase: Phase) -> Vec<(String, Result<f64, String>)> {
    run_group(target, files, phase).0
}

/// [`run_merged`], and whether some build or run within failed (not only a comparison).
fn run_group(target: &Target, files: &[&OpFile], phase: Phase) -> (Vec<(String, Result<f64, String>)>, bool) {
    if files.is_empty() {
        return (Vec::new(), false);
    }
    let parsed: Vec<&Graph> = files.iter().map(|f| &f.parsed).collect();
    let wrt = match phase {
        Phase::Forward => Wrt::None,
        Phase::Backward => Wrt::Params(
            files
                .iter()
                .flat_map(|f| match &f.wrt {
                    Wrt::Params(p) => p.clone(),
                    _ => Vec::new(),
                })
                .collect(),
        ),
    };
    let feeds: BTreeMap<String, Tensor> = files.iter().flat_map(|f| f.feeds.iter().map(|(k, v)| (k.clone(), v.clone()))).collect();
    let ran = passes(merge(&parsed), &wrt).and_then(|graphs| {
        let outs = build_and_run(target.backend, &graphs, &feeds, &target.build)?;
        let names: Vec<String> = graphs.main().outputs.iter().map(|o| o.name.clone()).collect();
        if outs.len() != names.len() {
            return Err(format!("{} outputs, the graph has {}", outs.len(), names.len()));
        }
        Ok(names.into_iter().zip(outs.into_iter().map(|(_, t)| t)).collect::<Vec<_>>())
    });
    let outs = match ran {
        Ok(outs) => outs,
        Err(e) if files.len() == 1 => return (vec![(files[0].stem.clone(), Err(e))], true),
        Err(e) => {
            let (a, b) = files.split_at(files.len() / 2);
            let (mut out, failed_a) = run_group(target, a, phase);
            let (more, failed_b) = run_group(target, b, phase);
            out.extend(more);
            // Each half builds and runs alone but not merged: the failure is the merging's
            // (a pass across parts, a limit of the target on the whole), and it must not
            // pass unseen. Every file of the group is marked with it.
            if !failed_a && !failed_b {
                let stems: Vec<&str> = files.iter().map(|f| f.stem.as_str()).collect();
                let why = format!("merged with {} it fails, though each half runs alone: {e}", stems.join(", "));
                out = out
                    .into_iter()
                    .map(|(stem, r)| {
                        let r = match r {
                            Ok(_) => Err(why.clone()),
                            Err(own) => Err(format!("{why}\n    {own}")),
                        };
                        (stem, r)
                    })
                    .collect();
            }
            return (out, true);
        }
    };
    let by_name: BTreeMap<&str, &Tensor> = outs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let results = files
        .iter()
        .map(|f| {
            let mut worst = 0.0f64;
            let mut bad = Vec::new();
            for (name, want) in f.reference(phase) {
                let Some(got) = by_name.get(name.as_str()) else {
                    bad.push(format!("{name}: missing from the target's outputs"));
                    continue;
                };
                let tol = tolerance(&f.header, target.name, want.dtype);
                match compare(got, want, tol) {
                    Ok(w) => worst = worst.max(w),
                    Err(e) => bad.push(format!("{name} ({}): {e}", want.dtype)),
                }
            }
            (f.stem.clone(), if bad.is_empty() { Ok(worst) } else { Err(bad.join("\n    ")) })
        })
        .collect();
    (results, false)
}

/// Why `target` does not run `phase` of `f`, if it does not: a known bug (the file's
/// `// known:`) or the target's refusal (its first line).
fn not_run(target: &Target, f: &OpFile, phase: Phase) -> Option<Cell> {
    let run_known = std::env::var("MITHRILC_OPS_KNOWN").is_ok_and(|v| v == "1");
    if let Some(k) = f.header.known.iter().find(|k| !run_known && k.target == target.name && (!k.backward_only || phase == Phase::Backward)) {
        return Some(Cell::Known(k.reason.clone()));
    }
    // What the target compiles: the graphs with the composites it does not claim decomposed.
    let graphs = match mithrilc::pipeline::for_target(target.backend, &f.graphs, &[]) {
        Ok(graphs) => graphs,
        Err(e) => return Some(Cell::Failed(format!("decompose: {e}"))),
    };
    let graph = match phase {
        Phase::Forward => &graphs.forward,
        Phase::Backward => graphs.backward.as_ref()?,
    };
    check_supported(target.backend, graph).err().map(|e| {
        let text = e.to_string();
        Cell::Refused(text.lines().nth(1).unwrap_or(&text).trim().to_string())
    })
}

/// Every file on `target`: the cells of the table, by file, forward and backward.
fn run_target_files(target: &Target, files: &[&OpFile]) -> TargetResult {
    let mut cells: BTreeMap<String, [Cell; 2]> = files.iter().map(|f| (f.stem.clone(), [Cell::None, Cell::None])).collect();
    let mut times = Vec::new();
    for phase in [Phase::Forward, Phase::Backward] {
        let started = Instant::now();
        let slot = phase as usize;
        let mut group = Vec::new();
        for &f in files.iter().filter(|f| phase == Phase::Forward || f.backward.is_some()) {
            match not_run(target, f, phase) {
                Some(cell) => cells.get_mut(&f.stem).unwrap()[slot] = cell,
                None => group.push(f),
            }
        }
        for (stem, result) in run_merged(target, &group, phase) {
            cells.get_mut(&stem).unwrap()[slot] = match result {
                Ok(worst) => Cell::Ran(worst),
                Err(e) => Cell::Failed(e),
            };
        }
        times.push(format!("{} {:.0} s", phase.name(), started.elapsed().as_secs_f64()));
    }
    (cells, times.join(", "))
}

// ---------------------------------------------------------------------------------
// Tests.

/// Every file loads (header, parse, verifier, passes, interpreter, values in the op's
/// domain) and its gradients match central finite differences in f64.
#[test]
fn every_op_file_loads_and_its_gradients_match_finite_differences() {
    let (files, errors) = load_all();
    let mut failures = errors.clone();
    let (mut checked, mut elements, mut worst) = (0, 0, (0.0f64, ""));
    let mut known = Vec::new();
    for f in files {
        let bug = f.header.known.iter().find(|k| k.target == "autodiff");
        match (check_file_gradients(f), bug) {
            (Err(e), Some(k)) => known.push(format!("tests/ops/{}.ir: known bug: {}\n    {e}", f.stem, k.reason)),
            (Ok(_), Some(_)) => failures.push(format!("tests/ops/{}.ir: its gradients match finite differences now: remove its `// known: autodiff:` line", f.stem)),
            (Ok((n, w)), None) => {
                checked += f.backward.is_some() as usize;
                elements += n;
                if w > worst.0 {
                    worst = (w, &f.stem);
                }
            }
            (Err(e), None) => failures.push(format!("tests/ops/{}.ir: gradients: {e}", f.stem)),
        }
    }
    for k in &known {
        println!("{k}");
    }
    println!(
        "{} op files load; {checked} have gradients, whose {elements} elements match central finite differences (largest difference {:.1e}, {})",
        files.len(),
        worst.0,
        worst.1
    );
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Every op of the IR has a file exercising it: a new op gets one.
#[test]
fn every_catalogue_op_has_a_file() {
    let (files, _) = load_all();
    let used: BTreeSet<&str> = files.iter().flat_map(|f| f.parsed.nodes.iter().map(|n| n.op.name())).collect();
    let missing: Vec<&str> = Op::catalogue().iter().map(|op| op.name()).filter(|n| !used.contains(n)).collect();
    assert!(missing.is_empty(), "ops without a file in tests/ops/ (see tests/ops/README.md): {}", missing.join(", "));
}

/// Every file on every target whose toolchain is here, forward and backward, against
/// the interpreter; prints the table of what ran where.
#[test]
fn every_op_matches_the_interpreter_on_every_target() {
    let (files, _) = load_all();
    let only = std::env::var("MITHRILC_OPS_TARGETS").unwrap_or_default();
    let only: Vec<&str> = only.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let all: Vec<Target> = targets().into_iter().filter(|t| only.is_empty() || only.contains(&t.name)).collect();
    let mut ready = Vec::new();
    for t in &all {
        match &t.missing {
            Some(why) => common::skip(&format!("the {} target: {why}", t.name)),
            None => ready.push(t),
        }
    }
    run_and_report(files, &all, &ready);
}

/// Every file on each of `ready` (two targets at a time on two cores); prints the
/// table of `all` and fails with every failure.
fn run_and_report(files: &[OpFile], all: &[Target], ready: &[&Target]) {
    let results: Mutex<BTreeMap<&str, TargetResult>> = Mutex::default();
    let files_ref: Vec<&OpFile> = files.iter().collect();
    common::each_case(ready, |t| {
        let r = run_target_files(t, &files_ref);
        results.lock().unwrap().insert(t.name, r);
        Ok(())
    });
    let results = results.into_inner().unwrap();
    let (table, failures) = report(files, all, &results);
    println!("{table}");
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// On an NVIDIA GPU: every file built for the cuda target as `compile` builds it (nvcc,
/// no emulation) and run there against the interpreter, forward and backward. CI has
/// no GPU, so this runs only when asked: `cargo test --release --test suite
/// ops:: -- --ignored` (nvcc found as `run --target cuda` finds it: MITHRILC_NVCC, PATH, ...).
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test --release --test suite ops:: -- --ignored on a machine with one"]
fn every_op_matches_the_interpreter_on_the_gpu() {
    common::require_gpu();
    let (files, _) = load_all();
    let gpu = Target { name: "cuda", backend: &mithrilc::codegen::cuda::backend::CudaTarget, build: BuildConfig::default(), missing: None };
    run_and_report(files, std::slice::from_ref(&gpu), &[&gpu]);
}

/// The table (file by target, `forward/backward`), the counts and reasons per target;
/// and the failures, each naming the file, target and pass.
fn report(files: &[OpFile], all: &[Target], results: &BTreeMap<&str, TargetResult>) -> (String, Vec<String>) {
    let mut out = String::new();
    let width = files.iter().map(|f| f.stem.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!("{:width$}", "file"));
    for t in all {
        out.push_str(&format!("  {:11}", t.name));
    }
    out.push('\n');
    let mut failures = Vec::new();
    for f in files {
        out.push_str(&format!("{:width$}", f.stem));
        for t in all {
            let cell = match results.get(t.name) {
                Some((cells, _)) => {
                    let [a, b] = &cells[&f.stem];
                    for (phase, c) in [(Phase::Forward, a), (Phase::Backward, b)] {
                        if let Cell::Failed(e) = c {
                            failures.push(format!("tests/ops/{}.ir on {} ({}):\n    {e}", f.stem, t.name, phase.name()));
                        }
                    }
                    format!("{}/{}", a.mark(), b.mark())
                }
                None => "n/a".into(),
            };
            out.push_str(&format!("  {cell:11}"));
        }
        out.push('\n');
    }
    out.push_str("(forward/backward: ok ran and matched; skip: the target refuses it; known: a known bug; -: no gradients; n/a: toolchain missing)\n");
    for t in all {
        let Some((cells, time)) = results.get(t.name) else {
            out.push_str(&format!("{}: not run: {}\n", t.name, t.missing.as_deref().unwrap_or("?")));
            continue;
        };
        let count = |slot: usize, f: fn(&Cell) -> bool| cells.values().filter(|c| f(&c[slot])).count();
        let worst = cells
            .iter()
            .flat_map(|(stem, c)| c.iter().filter_map(move |c| if let Cell::Ran(w) = c { Some((*w, stem.as_str())) } else { None }))
            .fold((0.0, ""), |a, b| if b.0 > a.0 { b } else { a });
        out.push_str(&format!(
            "{}: forward {} ran, {} skipped; backward {} ran, {} skipped; {} failed; largest error {:.1e} x (1 + |interpreter|) ({}); {time}\n",
            t.name,
            count(0, |c| matches!(c, Cell::Ran(_) | Cell::Failed(_))),
            count(0, |c| matches!(c, Cell::Refused(_) | Cell::Known(_))),
            count(1, |c| matches!(c, Cell::Ran(_) | Cell::Failed(_))),
            count(1, |c| matches!(c, Cell::Refused(_) | Cell::Known(_))),
            cells.values().flatten().filter(|c| matches!(c, Cell::Failed(_))).count(),
            worst.0,
            worst.1,
        ));
        for (stem, [a, b]) in cells {
            for (phase, c) in [(Phase::Forward, a), (Phase::Backward, b)] {
                match c {
                    Cell::Refused(why) => out.push_str(&format!("  {stem} ({}): refused: {why}\n", phase.name())),
                    Cell::Known(why) => out.push_str(&format!("  {stem} ({}): known bug: {why}\n", phase.name())),
                    _ => {}
                }
            }
        }
    }
    (out, failures)
}

/// The comparison catches what it must: a wrong value, an integer off by one, a NaN
/// where a number is due, a wrong shape; and lets through what is within tolerance.
#[test]
fn comparison_catches_wrong_values() {
    let want = Tensor::new(Dtype::F32, vec![2, 3], vec![1.0, -2.0, 3.5, 0.0, 100.0, f64::NAN]);
    let mut got = want.clone();
    assert_eq!(compare(&got, &want, 1e-5), Ok(0.0));
    got.data[4] = 100.0 * (1.0 + 5e-6);
    let scaled = compare(&got, &want, 1e-5).expect("within the tolerance");
    assert!((scaled - 5e-4 / 101.0).abs() < 1e-9, "{scaled}");
    got.data[4] = 100.01;
    let e = compare(&got, &want, 1e-5).unwrap_err();
    assert!(e.starts_with("largest difference 1.000e-2 at [1, 1] (got 100.01, interpreter 100), tolerance 1e-5"), "{e}");
    got.data[4] = 100.0;
    got.data[3] = f64::NAN;
    assert!(compare(&got, &want, 1e-5).unwrap_err().contains("got NaN, interpreter 0"));
    got.data[3] = 0.0;
    got.data[5] = 1.0;
    assert!(compare(&got, &want, 1e-5).is_err(), "a number where the interpreter has NaN");
    let ints = Tensor::new(Dtype::I32, vec![3], vec![1.0, 2.0, 3.0]);
    let mut off = ints.clone();
    off.data[2] = 4.0;
    assert!(compare(&off, &ints, tolerance(&Header::default(), "c", Dtype::I32)).is_err(), "integers compare exactly");
    let reshaped = Tensor::new(Dtype::I32, vec![1, 3], vec![1.0, 2.0, 3.0]);
    assert_eq!(compare(&reshaped, &ints, 0.0), Err("shape [1, 3], the interpreter's [3]".into()));
}

/// The finite differences catch a wrong vector-Jacobian product: the sigmoid file's
/// backward graph with its gradient scaled by 1.01, or replaced by another of the same
/// shape, fails the check that the true one passes.
#[test]
fn finite_differences_catch_a_wrong_vjp() {
    let text = "// grad: all\ngraph t {\n  %0 = param \"x\" : f64[3, 5]\n  %1 = param \"w\" : f64[5]\n  %2 = mul %0, %1 : f64[3, 5]\n  %3 = sigmoid %2 : f64[3, 5]\n  output \"y\" = %3\n}\n";
    let f = load_text("t", text).unwrap();
    let Wrt::Params(wrt) = &f.wrt else { panic!() };
    let backward = f.graphs.backward.clone().unwrap();
    assert!(check_gradients(&f.parsed, &backward, wrt, &f.feeds).is_ok());
    // The gradient of x scaled by 1.01.
    let mut scaled = backward.clone();
    let out = scaled.outputs.iter().position(|o| o.name == "grad/t/x").unwrap();
    let g = scaled.outputs[out].value;
    let ty = scaled.ty(g).clone();
    let c = scaled.add_const(Tensor::scalar(Dtype::F64, 1.01));
    let wrong = scaled.push(Op::Binary(mithrilc::ir::BinaryOp::Mul), vec![g, c], ty);
    scaled.outputs[out].value = wrong;
    let e = check_gradients(&f.parsed, &scaled, wrt, &f.feeds).unwrap_err();
    assert!(e.contains("d/dt/x[") && e.contains("differ from finite differences"), "{e}");
    // The gradient of x: the forward value in its place (sigmoid's output, not its VJP).
    let mut swapped = backward;
    let y = swapped.outputs.iter().find(|o| o.name == "t/y").unwrap().value;
    swapped.outputs[out].value = y;
    assert!(check_gradients(&f.parsed, &swapped, wrt, &f.feeds).is_err());
}

/// `stop_gradient` holds its value in the finite differences, as autodiff treats it.
#[test]
fn finite_differences_hold_stop_gradient() {
    let text = "// grad: all\ngraph t {\n  %0 = param \"x\" : f64[4]\n  %1 = stop_gradient %0 : f64[4]\n  %2 = mul %0, %1 : f64[4]\n  output \"y\" = %2\n}\n";
    let f = load_text("t", text).unwrap();
    let Wrt::Params(wrt) = &f.wrt else { panic!() };
    assert!(check_gradients(&f.parsed, f.graphs.backward.as_ref().unwrap(), wrt, &f.feeds).is_ok());
}

/// Headers: each key read, and mistakes refused with the line.
#[test]
fn headers_are_read_and_mistakes_refused() {
    let h = parse_header("// grad: all\n// Some words: free text.\n// inputs: x=uniform(0.1,3), i=int(0,7), b=bool, p=pick(nan, -inf, 2)\n// tol: 1e-4, ggml=1e-2\n// known: xla backward: a bug\ngraph t {\n").unwrap();
    assert_eq!(h.grad, Some(Grad::All));
    assert_eq!(h.inputs["x"], Dist::Uniform(0.1, 3.0));
    assert_eq!(h.inputs["i"], Dist::Int(0, 7));
    assert_eq!(h.inputs["b"], Dist::Bool);
    assert!(matches!(&h.inputs["p"], Dist::Pick(v) if v.len() == 3 && v[0].is_nan() && v[1] == f64::NEG_INFINITY && v[2] == 2.0));
    assert_eq!((h.tol, h.target_tol.get("ggml").copied()), (Some(1e-4), Some(1e-2)));
    assert_eq!(h.known, vec![Known { target: "xla".into(), backward_only: true, reason: "a bug".into() }]);
    assert_eq!(parse_header("// grad: w, b\ngraph t {\n").unwrap().grad, Some(Grad::Params(vec!["w".into(), "b".into()])));
    assert_eq!(parse_header("// inputs: x=uniform(3,1)\n").unwrap_err(), "line 1: inputs: bad distribution `uniform(3,1)` (uniform(LO,HI) and int(LO,HI) need LO < HI, int integers)");
    assert_eq!(parse_header("// tol: gml=1e-2\n").unwrap_err(), "line 1: tol: no target `gml` (targets: c, cuda, metal, ggml, xla)");
    assert_eq!(parse_header("// known: c:\n").unwrap_err(), "line 1: known: say why");
    assert_eq!(parse_header("// known: autodiff backward: x\n").unwrap_err(), "line 1: known: expected `autodiff` or a target (c, cuda, metal, ggml, xla), got `autodiff backward`");
    let params_without_grad = load_text("t", "graph t {\n  %0 = param \"x\" : f32[2]\n  %1 = neg %0 : f32[2]\n  output \"y\" = %1\n}\n");
    assert_eq!(params_without_grad.err().unwrap(), "it has parameters but no `// grad:` line (declare data as `input`)");
    let typo = load_text("t", "// inputs: z=bool\ngraph t {\n  %0 = input \"x\" : bool[2]\n  %1 = not %0 : bool[2]\n  output \"y\" = %1\n}\n");
    assert_eq!(typo.err().unwrap(), "inputs: no input or parameter `z`");
    // The line of the file, comments and blank lines counted.
    let bad = load_text("t", "// A comment.\n\ngraph t {\n  %0 = input \"x\" : f32[2]\n  %1 = nosuch %0 : f32[2]\n}\n");
    assert_eq!(bad.err().unwrap(), "IR line 5: unknown op `nosuch`");
    let outside = load_text("t", "// inputs: x=uniform(-2,-1)\ngraph t {\n  %0 = input \"x\" : f32[2]\n  %1 = log %0 : f32[2]\n  output \"y\" = %1\n}\n");
    assert_eq!(outside.err().unwrap(), "the interpreter's `t/y` is not finite everywhere: choose inputs in the op's domain (`// inputs:`)");
}

/// Files merged are disjoint parts whose outputs keep their names and values.
#[test]
fn merged_files_compute_what_each_file_does() {
    let (files, _) = load_all();
    let some: Vec<&OpFile> = files.iter().take(6).collect();
    let parsed: Vec<&Graph> = some.iter().map(|f| &f.parsed).collect();
    let graphs = passes(merge(&parsed), &Wrt::None).unwrap();
    let feeds: BTreeMap<String, Tensor> = some.iter().flat_map(|f| f.feeds.clone()).collect();
    let outs = mithrilc::interp::run(&graphs.forward, &feeds).unwrap();
    let want: Vec<&(String, Tensor)> = some.iter().flat_map(|f| f.forward.iter()).collect();
    assert_eq!(outs.len(), want.len());
    for ((n, t), (m, u)) in outs.iter().zip(want) {
        assert_eq!((n, owner(n)), (m, owner(m)));
        assert_eq!(compare(t, u, 0.0), Ok(0.0), "{n}");
    }
}

/// A target for testing the harness itself: the interpreter, with a bug in sigmoid's
/// results (1e-3 added to each), a failure whenever `add` and `mul` are built together,
/// and no `neg`.
struct Faulty;

thread_local! {
    /// What `Faulty` last emitted (on the thread that runs it).
    static EMITTED: std::cell::RefCell<Option<Graph>> = const { std::cell::RefCell::new(None) };
}

impl Backend for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn about(&self) -> &'static str {
        "the interpreter with bugs, for the harness's own test"
    }
    /// Sigmoid whole, so its results are the ones with the bug.
    fn claims(&self, c: mithrilc::ir::Composite) -> bool {
        c == mithrilc::ir::Composite::Sigmoid
    }
    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        (graph.node(v).op == Op::Unary(mithrilc::ir::UnaryOp::Neg)).then(|| "no neg here".into())
    }
    fn emit(&self, graphs: &Graphs, _: &mithrilc::backend::EmitOptions) -> mithrilc::Result<mithrilc::backend::Emitted> {
        let g = graphs.main().clone();
        let output_types = g.outputs.iter().map(|o| g.ty(o.value).dtype).collect();
        let entry = mithrilc::backend::Entry { name: g.name.clone(), inputs: Vec::new(), outputs: g.outputs.iter().map(|o| o.name.clone()).collect(), output_types };
        EMITTED.with(|e| *e.borrow_mut() = Some(g));
        Ok(mithrilc::backend::Emitted { files: Vec::new(), entry, report: String::new(), sizes: Default::default() })
    }
    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for Faulty {
    fn needs(&self) -> &'static str {
        "none"
    }
    fn build(&self, _: &Path, _: &BuildConfig) -> mithrilc::Result<Option<mithrilc::build::CacheUse>> {
        Ok(None)
    }
    fn run(&self, _: &Path, _: &BuildConfig, _: &mithrilc::backend::Entry, feeds: &BTreeMap<String, Tensor>) -> mithrilc::Result<Vec<(String, Tensor)>> {
        let g = EMITTED.with(|e| e.borrow_mut().take()).expect("emitted before it runs");
        let parts: BTreeSet<&str> = g.outputs.iter().map(|o| owner(&o.name)).collect();
        if parts.contains("add") && parts.contains("mul") {
            return Err(mithrilc::Error::user("add and mul cannot be built together".to_string()));
        }
        let mut outs = mithrilc::interp::run(&g, feeds)?;
        for (name, t) in &mut outs {
            if owner(name) == "sigmoid" {
                t.data.iter_mut().for_each(|x| *x += 1e-3);
            }
        }
        Ok(outs)
    }
}

/// The harness fails, naming the file, for a wrong result on a target, for a build that
/// fails only with some files merged (every file of the smallest group that fails is
/// named), and skips what the target refuses, saying why; what is right passes.
#[test]
fn the_harness_finds_and_names_each_failure() {
    let (files, _) = load_all();
    let pick = |names: &[&str]| -> Vec<&OpFile> { names.iter().map(|n| files.iter().find(|f| f.stem == *n).unwrap()).collect() };
    let faulty = Target { name: "faulty", backend: &Faulty, build: BuildConfig::default(), missing: None };

    let (cells, _) = run_target_files(&faulty, &pick(&["exp", "sigmoid"]));
    assert!(matches!(cells["exp"], [Cell::Ran(_), Cell::Ran(_)]), "{:?}", cells["exp"]);
    for phase in 0..2 {
        let Cell::Failed(e) = &cells["sigmoid"][phase] else { panic!("{:?}", cells["sigmoid"]) };
        assert!(e.starts_with("sigmoid/y (f32): largest difference 1.000e-3 at [0, 0] (got "), "{e}");
    }

    let (cells, _) = run_target_files(&faulty, &pick(&["add", "exp", "mul", "neg", "sigmoid"]));
    assert_eq!(cells["neg"], [Cell::Refused("neg f32[3, 1, 37] (%1): no neg here".into()), Cell::Refused("neg f32[3, 1, 37] (%1): no neg here".into())]);
    for stem in ["add", "exp", "mul", "sigmoid"] {
        for c in &cells[stem] {
            let Cell::Failed(e) = c else { panic!("{stem}: {c:?}") };
            assert!(e.starts_with("merged with add, exp, mul, sigmoid it fails, though each half runs alone: add and mul cannot be built together"), "{stem}: {e}");
            assert_eq!(stem == "sigmoid", e.contains("sigmoid/y (f32): largest difference"), "{stem}: {e}");
        }
    }
}
