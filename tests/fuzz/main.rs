//! Fuzzing on the stable toolchain, in process: two targets, each a loop that mutates
//! inputs from a committed corpus (and, for the frontend, fresh random models), runs
//! them through the library, and requires that nothing panics and that every error is
//! the user's (`ErrorKind::User`, exit 1; `Usage` for a bad `--shape`), never an
//! internal one. This is the architecture invariant "nothing a model file or data file
//! contains reaches a panic", tested.
//!
//! - `frontend`: model JSON (+ `--shape`s) → IR → passes (shape inference, autodiff
//!   with `--grad` half the time, simplify) → lowering and the program passes (each
//!   program's text must read back as itself) → C
//!   source; and, when the tensors are small, the interpreter on random data.
//! - `data_readers`: `.npy`, `.npz` and `.safetensors` bytes → `data::read_arrays`; what
//!   reads must write back (`write_npz`, `write_npy`) and read back unchanged.
//!
//! Each target first replays its corpus (`tests/fuzz/corpus/{frontend,data}`: seeds
//! from the test data and every input that once failed), then mutates: byte havoc,
//! JSON-aware edits and splices, `.npy`/`.safetensors` header and `.npz` entry edits.
//! An input whose outcome is new (the stage it reached and its error message with
//! numbers and names blanked) joins the in-memory pool, a cheap stand-in for coverage.
//! A run is a function of its seed: a failure prints the seed and iteration and saves
//! the input under `target/fuzz/`.
//!
//! By default each target runs a fixed number of iterations (the frontend as two tests
//! from consecutive seeds, 12,500 each, about 25 s here; the data readers 6,000, 4 s;
//! all at once).
//! `MITHRILC_FUZZ_SECS=600` runs each test for that long instead,
//! `MITHRILC_FUZZ_ITERS=N` for N iterations, `MITHRILC_FUZZ_SEED=S` from another seed;
//! `MITHRILC_FUZZ_VERBOSE=1` prints each corpus input's outcome;
//! `MITHRILC_FUZZ_TRACE=1` writes each input to `target/fuzz/current-<target>/` before
//! running it, to catch one that aborts the process (rerun with the seed printed):
//!
//! ```sh
//! MITHRILC_FUZZ_SECS=600 cargo test --test suite fuzz:: -- --nocapture
//! ```

mod mutate;

use crate::common::{self, random_model};

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mithrilc::cli;
use mithrilc::pipeline::Graphs;
use mithrilc::data;
use mithrilc::frontend::mithril;
use mithrilc::passes::autodiff::Wrt;
use mithrilc::tensor::Tensor;
use mithrilc::{Error, ErrorKind};
use random_model::Rng;
use serde_json::Value;

/// Refuses any single allocation over 2 GiB while an input runs (on a thread in
/// [`guarded`]), so that a size taken unchecked from an input aborts at once ("memory
/// allocation of N bytes failed", after the backtrace of the allocation) instead of
/// swapping the machine; `MITHRILC_FUZZ_TRACE` then has the input. It is the allocator
/// of the whole test binary: the other tests, and the fuzz tests between inputs,
/// allocate as the system allocator lets them.
struct Capped;

const ALLOCATION_CAP: usize = 2 << 30;

/// Whether the cap refuses `size` bytes on this thread (`GUARDED` is a `const` local
/// without a destructor: reading it never allocates).
fn over_cap(size: usize) -> bool {
    size > ALLOCATION_CAP && GUARDED.with(|g| g.get())
}

/// Prints where a refused allocation came from (capturing allocates, but little).
fn refused(size: usize) -> *mut u8 {
    eprintln!("fuzz: refused an allocation of {size} bytes at\n{}", std::backtrace::Backtrace::force_capture());
    std::ptr::null_mut()
}

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if over_cap(layout.size()) {
            return refused(layout.size());
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if over_cap(layout.size()) {
            return refused(layout.size());
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if over_cap(new_size) {
            return refused(new_size);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Capped = Capped;

/// Every class name the frontend knows, for mutations that swap one in.
pub fn classes() -> &'static [&'static str] {
    static CLASSES: OnceLock<Vec<&'static str>> = OnceLock::new();
    CLASSES.get_or_init(mithril::known_classes)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// How long a target runs, and from which seed.
struct Budget {
    seed: u64,
    iterations: u64,
    deadline: Option<Instant>,
}

impl Budget {
    fn from_env(default_iterations: u64) -> Budget {
        let var = |n: &str| std::env::var(n).ok().and_then(|s| s.trim().parse::<u64>().ok());
        let seed = var("MITHRILC_FUZZ_SEED").unwrap_or(1);
        match (var("MITHRILC_FUZZ_SECS"), var("MITHRILC_FUZZ_ITERS")) {
            (Some(secs), _) => Budget { seed, iterations: u64::MAX, deadline: Some(Instant::now() + Duration::from_secs(secs)) },
            (None, Some(n)) => Budget { seed, iterations: n, deadline: None },
            (None, None) => Budget { seed, iterations: default_iterations, deadline: None },
        }
    }
    fn done(&self, i: u64) -> bool {
        i >= self.iterations || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

thread_local! {
    /// Whether this thread is running an input (its panics are findings, not failures).
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The last panic's message and location on this thread (the hook below records it).
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records the panics of inputs instead of printing them (the harness reports them with
/// the input); any other panic, such as a test's own assertion, prints as usual.
fn quiet_panics() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(|g| g.get()) {
                return default(info);
            }
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            PANIC.with(|p| *p.borrow_mut() = Some(format!("panic at {at}: {msg}")));
        }));
    });
}

/// What one input did: an outcome signature (for the pool), or a finding.
type Verdict = Result<String, String>;

/// Runs `f`, turning a panic into a finding.
fn guarded(f: impl FnOnce() -> Verdict) -> Verdict {
    GUARDED.with(|g| g.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(false));
    match result {
        Ok(v) => v,
        Err(_) => Err(PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "panic".into())),
    }
}

/// An error from stage `stage`: a user's error is an outcome, anything else a finding.
fn judge(stage: &str, e: &Error, usage_ok: bool) -> Verdict {
    match e.kind {
        ErrorKind::User => Ok(format!("{stage}: {}", blank(&e.message))),
        ErrorKind::Usage if usage_ok => Ok(format!("{stage}: usage: {}", blank(&e.message))),
        kind => Err(format!("{stage}: {kind:?} error: {e}")),
    }
}

/// An error message with its specifics (numbers, quoted names, paths) blanked, so that
/// messages of one kind share a signature.
fn blank(msg: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in msg.chars().take(160) {
        match quote {
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None if matches!(c, '`' | '\'' | '"') => {
                out.push(c);
                quote = Some(c);
            }
            None if c.is_ascii_digit() => {
                if !out.ends_with('#') {
                    out.push('#');
                }
            }
            None => out.push(c),
        }
    }
    out
}

/// Prints what a target's run did, then fails on its findings.
#[allow(clippy::too_many_arguments)]
fn conclude(target: &str, corpus: usize, mutated: u64, started: Instant, seed: u64, outcomes: usize, stages: &Stages, findings: &[String]) {
    println!(
        "fuzz {target}: {corpus} corpus inputs, {mutated} mutated in {:.0} s (seed {seed}), {outcomes} outcomes seen, {} findings\n  ended at: {}",
        started.elapsed().as_secs_f64(),
        findings.len(),
        stages.summary()
    );
    assert!(findings.is_empty(), "{} finding(s):\n{}", findings.len(), findings.join("\n"));
}

/// How many inputs ended at each stage (the part of their outcome before `:`).
#[derive(Default)]
struct Stages(BTreeMap<String, u64>);

impl Stages {
    fn count(&mut self, outcome: &str) {
        let stage = outcome.split(':').next().unwrap_or_default();
        *self.0.entry(stage.to_string()).or_default() += 1;
    }
    fn summary(&self) -> String {
        self.0.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")
    }
}

/// A pool of inputs to mutate: the corpus, then every input with a new outcome.
struct Pool<T> {
    items: Vec<T>,
    seen: BTreeSet<String>,
}

impl<T: Clone> Pool<T> {
    const MAX: usize = 4000;

    fn offer(&mut self, signature: String, item: &T) {
        if self.seen.insert(signature) && self.items.len() < Self::MAX {
            self.items.push(item.clone());
        }
    }
}

/// Hangs are findings too: a watchdog aborts the process, printing the input's seed
/// and iteration, when one input runs longer than `MITHRILC_FUZZ_HANG_SECS` (60).
struct Watchdog {
    /// Milliseconds since `start` when the current input began (0: between inputs).
    began: Arc<AtomicU64>,
    start: Instant,
    current: Arc<Mutex<String>>,
}

impl Watchdog {
    fn new(target: &'static str) -> Watchdog {
        let began = Arc::new(AtomicU64::new(0));
        let current = Arc::new(Mutex::new(String::new()));
        let start = Instant::now();
        let limit = std::env::var("MITHRILC_FUZZ_HANG_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60u64) * 1000;
        let (b, c) = (began.clone(), current.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let at = b.load(Ordering::Relaxed);
            if at != 0 && start.elapsed().as_millis() as u64 > at + limit {
                eprintln!("fuzz {target}: an input has run for over {} s: {}", limit / 1000, c.lock().map(|s| s.clone()).unwrap_or_default());
                std::process::abort();
            }
        });
        Watchdog { began, start, current }
    }
    fn enter(&self, what: String) {
        if let Ok(mut c) = self.current.lock() {
            *c = what;
        }
        self.began.store(self.start.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
    }
    fn leave(&self) {
        self.began.store(0, Ordering::Relaxed);
    }
}

/// Prints what `what` says when `MITHRILC_FUZZ_VERBOSE` is set (each corpus input's
/// outcome).
fn verbose(what: impl FnOnce() -> String) {
    if std::env::var_os("MITHRILC_FUZZ_VERBOSE").is_some() {
        println!("{}", what());
    }
}

/// With `MITHRILC_FUZZ_TRACE` set, writes each input to `target/fuzz/current-<target>/`
/// (the frontend's: `current-frontend-seed<S>/`)
/// before it runs: what an abort (an allocation refused, a stack overflow) leaves there
/// is its input.
fn trace(target: &str, files: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    if std::env::var_os("MITHRILC_FUZZ_TRACE").is_none() {
        return;
    }
    let dir = root().join("target/fuzz").join(format!("current-{target}"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::create_dir_all(&dir);
    for (name, bytes) in files() {
        let _ = std::fs::write(dir.join(name), bytes);
    }
}

/// Saves a failing input under `target/fuzz/` and describes the failure.
fn report(target: &str, seed: u64, iteration: u64, files: &[(String, Vec<u8>)], finding: &str) -> String {
    let dir = root().join("target/fuzz").join(format!("{target}-seed{seed}-iter{iteration}"));
    let _ = std::fs::create_dir_all(&dir);
    for (name, bytes) in files {
        let _ = std::fs::write(dir.join(name), bytes);
    }
    let _ = std::fs::write(dir.join("finding.txt"), finding);
    format!("seed {seed}, iteration {iteration}: {finding}\n  input saved in {}", dir.display())
}

// ---------------------------------------------------------------- frontend target

/// A frontend input: a model file's text and its command-line arguments, one
/// `--shape NAME=D0,D1,...` or `--set PATH.KEY=VALUE` a line (as `NAME.args` beside
/// `NAME.json` in the corpus, so `mithrilc inspect NAME.json $(cat NAME.args)` runs it).
#[derive(Clone)]
struct Model {
    text: Vec<u8>,
    args: Vec<String>,
}

impl Model {
    /// The files that reproduce this input (`--grad` added when it was asked for).
    /// With `command`, for tests/fuzz/crashes: `mithrilc compile` through the C source.
    fn files(&self, name: &str, grad: bool) -> Vec<(String, Vec<u8>)> {
        let mut args = self.args.join("\n");
        if grad {
            args.push_str("\n--grad");
        }
        args.push('\n');
        let mut command = format!("compile\n{name}.json\n--target\nc\n--emit\nsource\n-o\n$OUT\n");
        for a in args.lines() {
            command.push_str(&a.replacen(' ', "\n", 1));
            command.push('\n');
        }
        vec![(format!("{name}.json"), self.text.clone()), (format!("{name}.args"), args.into_bytes()), ("command".into(), command.into_bytes())]
    }
}

/// The frontend corpus: every `NAME.json` with its `NAME.args`, in name order.
fn frontend_corpus() -> Vec<(String, Model)> {
    let dir = root().join("tests/fuzz/corpus/frontend");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let text = std::fs::read(&p).unwrap();
            let args = std::fs::read_to_string(p.with_extension("args")).unwrap_or_default();
            let args = args.lines().map(str::trim).filter(|l| !l.is_empty() && *l != "--grad").map(str::to_string).collect();
            (p.file_name().unwrap().to_string_lossy().into_owned(), Model { text, args })
        })
        .collect()
}

/// The frontend's options from `--shape` and `--set` lines, as the command line reads
/// them; a malformed line is a usage error.
fn options(args: &[String]) -> Result<mithril::Options, Error> {
    let mut opts = mithril::Options::default();
    for a in args {
        let (flag, value) = a.split_once(' ').unwrap_or((a.as_str(), ""));
        match flag {
            "--shape" => {
                let (name, shape) = cli::parse_shape_arg(value)?;
                opts.shapes.insert(name, shape);
            }
            "--set" => {
                let (path, v) = value.split_once('=').ok_or_else(|| Error::usage(format!("--set {value}: expected PATH.KEY=VALUE")))?;
                let v = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
                opts.set.push((path.trim().to_string(), v));
            }
            other => return Err(Error::usage(format!("unknown argument {other}"))),
        }
    }
    Ok(opts)
}

/// The largest number of elements, summed over every value of a graph, that the
/// interpreter is asked to compute.
const INTERP_ELEMENTS: u64 = 1 << 20;

/// A program's printed text parses and prints the same again (a text equality, as a
/// NaN constant makes a program unequal to itself).
fn text_round_trip(p: &mithrilc::lower::Program) -> Result<(), String> {
    let text = mithrilc::lower::print::print(p);
    let back = mithrilc::lower::parse::parse(&text).map_err(|e| format!("does not parse: {e}"))?;
    if mithrilc::lower::print::print(&back) != text {
        return Err("parses back to a different program".to_string());
    }
    Ok(())
}

/// One frontend input through every stage; `grad` asks for the backward graph.
fn frontend_run(m: &Model, grad: bool, data_seed: u64) -> Verdict {
    let text = String::from_utf8_lossy(&m.text);
    let opts = match options(&m.args) {
        Ok(o) => o,
        Err(e) => return judge("arguments", &e, true),
    };
    let graph = match mithril::load_str(&text, "fuzz.json", "fuzz", &opts) {
        Ok(g) => g,
        Err(e) => return judge("frontend", &e, false),
    };
    let wrt = if grad { Wrt::AllParams } else { Wrt::None };
    let graphs = match Graphs::new(graph, &wrt, |_, _| {}) {
        Ok(g) => g,
        Err(e) => return judge("passes", &e, false),
    };
    // Symbolic sizes get a small maximum, as `--max` would give them.
    let mut max = BTreeMap::new();
    for n in &graphs.main().nodes {
        for s in n.ty.shape.symbols() {
            max.insert(s.to_string(), 3);
        }
    }
    let lopts = mithrilc::lower::Options { max, library: mithrilc::codegen::c::LIBRARY, ..Default::default() };
    let passes = if graphs.backward.is_some() { mithrilc::codegen::c::PASSES_ROW_MAJOR } else { mithrilc::codegen::c::PASSES };
    let mut unreadable = None;
    let mut reads_back = |pass: &str, p: &mithrilc::lower::Program| {
        if unreadable.is_none() {
            unreadable = text_round_trip(p).err().map(|e| format!("program text after {pass}: {e}"));
        }
    };
    let forward = match mithrilc::passes::compile(&graphs.forward, &lopts, passes, &mut reads_back) {
        Ok(p) => p,
        Err(e) => return judge("lower", &e, false),
    };
    let backward = match graphs.backward.as_ref().map(|g| mithrilc::passes::compile(g, &lopts, passes, &mut reads_back)).transpose() {
        Ok(p) => p,
        Err(e) => return judge("lower backward", &e, false),
    };
    if let Some(e) = unreadable {
        return Err(e);
    }
    let copts = mithrilc::codegen::c::Options { source: "fuzz.json".into(), weights: None, ..Default::default() };
    if let Err(e) = mithrilc::codegen::c::emit(&forward, backward.as_ref(), &copts) {
        return judge("codegen", &e, false);
    }
    let g = graphs.main();
    let ops: BTreeSet<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    let signature = format!("ok{}: {}", if grad { " grad" } else { "" }, ops.into_iter().collect::<Vec<_>>().join(" "));
    // The interpreter, when every shape is static and small.
    let sizes: Option<u64> = g.nodes.iter().try_fold(0u64, |acc, n| acc.checked_add(n.ty.shape.as_known()?.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?));
    if sizes.is_none_or(|s| s > INTERP_ELEMENTS) {
        return Ok(signature);
    }
    let mut state = data_seed | 1;
    let mut feeds = BTreeMap::new();
    for v in g.inputs().chain(g.params()) {
        let node = g.node(v);
        let shape = node.ty.shape.as_known().expect("checked static above");
        let n = shape.iter().product::<u64>() as usize;
        let data = (0..n).map(|_| (common::xorshift64(&mut state) % 17) as f64 / 4.0 - 2.0).collect();
        feeds.insert(node.name.clone().unwrap_or_default(), Tensor::new(node.ty.dtype, shape, data));
    }
    match mithrilc::interp::run(g, &feeds) {
        Ok(_) => Ok(signature),
        Err(e) => judge("interp", &e, false),
    }
}

/// One mutation of a frontend input (`pool` supplies donors for splices).
fn mutate_model(rng: &mut Rng, m: &mut Model, pool: &[Model]) {
    match rng.below(10) {
        0 if rng.coin() => mutate::bytes(rng, &mut m.text),
        0 | 1 => mutate::args(rng, &mut m.args),
        _ => {
            let Ok(mut doc) = serde_json::from_slice::<Value>(&m.text) else {
                mutate::bytes(rng, &mut m.text);
                return;
            };
            let donor = serde_json::from_slice::<Value>(&rng.pick(pool).text).ok();
            for _ in 0..1 + rng.below(2) {
                mutate::json(rng, &mut doc, donor.as_ref());
            }
            m.text = if rng.coin() { serde_json::to_vec(&doc) } else { serde_json::to_vec_pretty(&doc) }.expect("a JSON value prints");
        }
    }
}

/// The frontend target runs as two tests side by side (libtest runs tests on every core),
/// from the seed S and from S + 1, each half the default iterations: a run of each is
/// still a function of its seed (`MITHRILC_FUZZ_SEED=S` replays the second's as the
/// first's).
#[test]
fn frontend() {
    frontend_from(0);
}

#[test]
fn frontend_next_seed() {
    frontend_from(1);
}

/// The frontend target from the seed `MITHRILC_FUZZ_SEED` + `offset`.
fn frontend_from(offset: u64) {
    quiet_panics();
    let mut budget = Budget::from_env(12500);
    budget.seed = budget.seed.wrapping_add(offset);
    let corpus = frontend_corpus();
    assert!(!corpus.is_empty(), "tests/fuzz/corpus/frontend is empty");
    let watchdog = Watchdog::new("frontend");
    let mut pool = Pool { items: Vec::new(), seen: BTreeSet::new() };
    let mut findings = Vec::new();
    // The corpus as it is, with and without gradients: regressions first.
    for (name, m) in &corpus {
        for grad in [false, true] {
            watchdog.enter(format!("corpus {name}"));
            match guarded(|| frontend_run(m, grad, 1)) {
                Ok(sig) => {
                    verbose(|| format!("corpus {name}{}: {sig}", if grad { " (--grad)" } else { "" }));
                    pool.offer(sig, m)
                }
                Err(f) => findings.push(format!("corpus {name}{}: {f}", if grad { " (--grad)" } else { "" })),
            }
            watchdog.leave();
        }
        pool.items.push(m.clone());
    }
    let mut rng = Rng::new(budget.seed);
    let mut i = 0;
    let mut stages = Stages::default();
    let started = Instant::now();
    while !budget.done(i) {
        i += 1;
        let mut m = if rng.below(8) == 0 {
            let r = random_model::generate(rng.next(), 8);
            let args = r.shapes.iter().map(|(n, s)| format!("--shape {n}={}", s.iter().map(u64::to_string).collect::<Vec<_>>().join(","))).collect();
            Model { text: r.json.into_bytes(), args }
        } else {
            rng.pick(&pool.items).clone()
        };
        // Mostly one edit: several at once rarely get past the frontend.
        for _ in 0..*rng.pick(&[1, 1, 1, 2, 3]) {
            mutate_model(&mut rng, &mut m, &pool.items);
        }
        let grad = rng.coin();
        let data_seed = rng.next();
        watchdog.enter(format!("seed {}, iteration {i}", budget.seed));
        trace(&format!("frontend-seed{}", budget.seed), || m.files("model", grad));
        let verdict = guarded(|| frontend_run(&m, grad, data_seed));
        watchdog.leave();
        match verdict {
            Ok(sig) => {
                stages.count(&sig);
                pool.offer(sig, &m)
            }
            Err(f) => {
                let f = format!("{f}{}", if grad { " (with --grad)" } else { "" });
                // One report per distinct finding (by its blanked message).
                if pool.seen.insert(format!("finding: {}", blank(&f))) {
                    findings.push(report("frontend", budget.seed, i, &m.files("model", grad), &f));
                }
            }
        }
    }
    conclude("frontend", corpus.len(), i, started, budget.seed, pool.seen.len(), &stages, &findings);
}

// ---------------------------------------------------------------- reported crashes

/// Every reproducer in `tests/fuzz/crashes/`: a directory with the input files and a
/// `command` file, the `mithrilc` arguments one a line (`$OUT` a scratch directory),
/// run in that directory under a 4 GiB address-space limit and a 20 s timeout. It must
/// exit 0, 1 or 2: never 101 (a panic or internal error), a signal (an abort) or the
/// timeout. Each once crashed (the README says how); they stay as regressions.
#[test]
fn crashes_exit_cleanly() {
    if !common::have("timeout") {
        common::skip("coreutils' timeout is needed");
        return;
    }
    let dir = root().join("tests/fuzz/crashes");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("command").exists()).collect();
    cases.sort();
    let out = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in &cases {
        let command = std::fs::read_to_string(case.join("command")).unwrap();
        let scratch = out.path().join(case.file_name().unwrap());
        let args = command.lines().map(str::trim).filter(|l| !l.is_empty()).map(|a| a.replace("$OUT", &scratch.to_string_lossy()));
        let mut cmd = std::process::Command::new("sh");
        cmd.current_dir(case).args(["-c", "ulimit -v 4194304 && exec timeout 20 \"$0\" \"$@\"", env!("CARGO_BIN_EXE_mithrilc")]).args(args);
        let run = cmd.output().unwrap();
        let code = run.status.code();
        // 0, or the user's error: 1 for the model or data, 2 for an argument.
        if !matches!(code, Some(0..=2)) {
            let stderr = String::from_utf8_lossy(&run.stderr);
            let what = if code == Some(124) { "timed out after 20 s".to_string() } else { stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().to_string() };
            failures.push(format!("{}: exit {code:?}: {what}", case.strip_prefix(root()).unwrap_or(case).display()));
        }
    }
    println!("{} reproducers in tests/fuzz/crashes", cases.len());
    assert!(failures.is_empty(), "{} reproducer(s) still crash:\n{}", failures.len(), failures.join("\n"));
}

// ---------------------------------------------------------------- data target

/// The data corpus: every file in `tests/fuzz/corpus/data`, by name.
fn data_corpus() -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fuzz/corpus/data");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Whether two tensors hold the same values (NaN matching NaN; bf16 written as f32).
fn same(a: &Tensor, b: &Tensor) -> bool {
    let dtype_ok = a.dtype == b.dtype || (a.dtype == mithrilc::ir::Dtype::Bf16 && b.dtype == mithrilc::ir::Dtype::F32);
    dtype_ok && a.shape == b.shape && a.data.len() == b.data.len() && a.data.iter().zip(&b.data).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

/// One data file (`name` gives its extension) through the readers, and what reads
/// through the writers and back.
fn data_run(dir: &Path, name: &str, bytes: &[u8]) -> Verdict {
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("cannot write the input: {e}"))?;
    let file = match data::read_arrays(&path) {
        Ok(f) => f,
        Err(e) => return judge("read", &e, false),
    };
    for (key, t) in &file.arrays {
        let n = t.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n != Some(t.data.len() as u64) {
            return Err(format!("read: array '{key}' of shape {:?} holds {} elements", t.shape, t.data.len()));
        }
    }
    let arrays: Vec<(String, Tensor)> = file.arrays.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
    let npz = dir.join("roundtrip.npz");
    match data::write_npz(&npz, &arrays) {
        Ok(()) => {}
        // Two names that are one key once made safe to unzip (`..` and `__`).
        Err(e) if e.kind == ErrorKind::User && e.message.contains("are both written as") => return judge("write", &e, false),
        Err(e) => return Err(format!("write_npz of what read: {:?} error: {e}", e.kind)),
    }
    let back = data::read_arrays(&npz).map_err(|e| format!("reading back what write_npz wrote: {e}"))?;
    // Keys come back as `npz_key` makes them: unchanged unless unsafe to unzip.
    let back_keys: Vec<&String> = back.arrays.keys().collect();
    let keys: Vec<String> = file.arrays.keys().map(|k| data::npz_key(k)).collect();
    if back_keys != keys.iter().collect::<Vec<_>>() {
        return Err(format!("write_npz then read: names {back_keys:?}, read first {:?}", file.arrays.keys().collect::<Vec<_>>()));
    }
    for (k, t) in &file.arrays {
        let again = &back.arrays[&data::npz_key(k)];
        if !same(t, again) {
            return Err(format!("write_npz then read: array '{k}' changed ({:?} {:?} -> {:?} {:?})", t.dtype, t.shape, again.dtype, again.shape));
        }
    }
    if let Some((_, t)) = arrays.first() {
        let npy = dir.join("roundtrip.npy");
        data::write_npy(&npy, t).map_err(|e| format!("write_npy of what read: {e}"))?;
        let one = data::read_arrays(&npy).map_err(|e| format!("reading back what write_npy wrote: {e}"))?;
        if !one.arrays.values().next().is_some_and(|b| same(t, b)) {
            return Err("write_npy then read: the array changed".into());
        }
    }
    let shapes: Vec<String> = file.arrays.values().map(|t| format!("{:?}{}", t.dtype, t.shape.len())).collect();
    Ok(format!("ok {}: {}", name.rsplit('.').next().unwrap_or_default(), shapes.join(" ")))
}

#[test]
fn data_readers() {
    quiet_panics();
    let budget = Budget::from_env(6000);
    let corpus = data_corpus();
    assert!(!corpus.is_empty(), "tests/fuzz/corpus/data is empty");
    let scratch = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::new("data");
    let mut pool = Pool { items: Vec::new(), seen: BTreeSet::new() };
    let mut findings = Vec::new();
    for (name, bytes) in &corpus {
        watchdog.enter(format!("corpus {name}"));
        match guarded(|| data_run(scratch.path(), name, bytes)) {
            Ok(sig) => {
                verbose(|| format!("corpus {name}: {sig}"));
                pool.offer(sig, &(name.clone(), bytes.clone()))
            }
            Err(f) => findings.push(format!("corpus {name}: {f}")),
        }
        watchdog.leave();
        pool.items.push((name.clone(), bytes.clone()));
    }
    let mut rng = Rng::new(budget.seed);
    let mut i = 0;
    let mut stages = Stages::default();
    let started = Instant::now();
    while !budget.done(i) {
        i += 1;
        let (name, mut bytes) = rng.pick(&pool.items).clone();
        let ext = name.rsplit('.').next().unwrap_or_default().to_string();
        for _ in 0..1 + rng.below(2) {
            match (rng.below(6), ext.as_str()) {
                (0, _) => mutate::bytes(&mut rng, &mut bytes),
                (_, "npy") => mutate::npy(&mut rng, &mut bytes),
                (_, "npz") => mutate::npz(&mut rng, &mut bytes),
                (_, "safetensors") => mutate::safetensors(&mut rng, &mut bytes),
                _ => mutate::bytes(&mut rng, &mut bytes),
            }
        }
        // Now and then a file read as another format than it holds.
        let ext = if rng.below(16) == 0 { rng.pick(&["npy", "npz", "safetensors"]).to_string() } else { ext };
        let file = format!("input.{ext}");
        watchdog.enter(format!("seed {}, iteration {i}", budget.seed));
        trace("data", || vec![(file.clone(), bytes.clone())]);
        let verdict = guarded(|| data_run(scratch.path(), &file, &bytes));
        watchdog.leave();
        match verdict {
            Ok(sig) => {
                stages.count(&sig);
                pool.offer(sig, &(file, bytes))
            }
            Err(f) => {
                if pool.seen.insert(format!("finding: {}", blank(&f))) {
                    findings.push(report("data", budget.seed, i, &[(file, bytes)], &f));
                }
            }
        }
    }
    conclude("data_readers", corpus.len(), i, started, budget.seed, pool.seen.len(), &stages, &findings);
}
