//! Compile time against model size (not a test: it prints a table). Generates models
//! of 1,000 to 100,000 nodes (`benches/common/models.rs`), compiles each to C source
//! as `mithrilc compile --target c --emit source` does, and prints the seconds, the
//! nodes per second and the log-log slope of time against nodes: 1 is linear, 2
//! quadratic.
//!
//!   cargo bench --bench compile_time [-- [--kind chain|wide|linear] [--grad] [--runs R] [N ...]]
//!
//! Each size keeps the best of R runs (3 by default): the machines are shared.

#[path = "common/models.rs"]
mod models;

use std::time::Instant;

use mithrilc::cli;
use models::Kind;

fn main() {
    let mut kind = Kind::Chain;
    let mut grad = false;
    let mut runs = 3;
    let mut sizes: Vec<usize> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kind" => match args.next().as_deref().and_then(Kind::parse) {
                Some(k) => kind = k,
                None => return fail("--kind takes chain, wide or linear"),
            },
            "--grad" => grad = true,
            "--runs" => match args.next().and_then(|r| r.parse().ok()) {
                Some(r) if r >= 1 => runs = r,
                _ => return fail("--runs takes a count of at least 1"),
            },
            // What cargo passes to every bench binary.
            "--bench" => {}
            n => match n.parse() {
                Ok(n) => sizes.push(n),
                Err(_) => return fail(&format!("unknown argument {n}")),
            },
        }
    }
    if sizes.is_empty() {
        sizes = vec![1_000, 10_000, 50_000, 100_000];
    }
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return fail(&format!("cannot create a scratch directory: {e}")),
    };
    println!(
        "compile to C source (--emit source{}), {}, best of {runs} run(s)",
        if grad { ", --grad" } else { "" },
        kind.describe()
    );
    println!("{:>8} {:>9} {:>11} {:>7}", "nodes", "seconds", "nodes/s", "slope");
    let mut points: Vec<(f64, f64)> = Vec::new();
    for &n in &sizes {
        let model = dir.path().join(format!("{kind:?}_{n}.json").to_lowercase());
        if let Err(e) = std::fs::write(&model, models::model(kind, n)) {
            return fail(&format!("cannot write {}: {e}", model.display()));
        }
        let mut best = f64::INFINITY;
        for run in 0..runs {
            let args = cli::CompileArgs {
                model: cli::ModelArgs {
                    model: model.clone(),
                    shapes: vec![models::INPUT_SHAPE.to_string()],
                    grad: if grad { mithrilc::passes::autodiff::Wrt::AllParams } else { Default::default() },
                    ..Default::default()
                },
                // A fresh directory each run: replacing the last one would time its check too.
                out: Some(dir.path().join(format!("out_{n}_{run}"))),
                emit: mithrilc::cli::Emit::Source,
                ..Default::default()
            };
            let start = Instant::now();
            if let Err(e) = cli::compile(&args) {
                return fail(&format!("{n} nodes: {e}"));
            }
            best = best.min(start.elapsed().as_secs_f64());
            let _ = std::fs::remove_dir_all(dir.path().join("out"));
        }
        let slope = points.last().map_or("-".to_string(), |&(n0, t0)| format!("{:.2}", (best / t0).ln() / (n as f64 / n0).ln()));
        println!("{n:>8} {best:>9.3} {:>11.0} {slope:>7}", n as f64 / best);
        points.push((n as f64, best));
    }
    if points.len() > 2 {
        // Least squares over (log n, log t).
        let logs: Vec<(f64, f64)> = points.iter().map(|&(n, t)| (n.ln(), t.ln())).collect();
        let k = logs.len() as f64;
        let (mx, my) = (logs.iter().map(|p| p.0).sum::<f64>() / k, logs.iter().map(|p| p.1).sum::<f64>() / k);
        let sxy: f64 = logs.iter().map(|&(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = logs.iter().map(|&(x, _)| (x - mx) * (x - mx)).sum();
        println!("overall slope (least squares of log time on log nodes): {:.2}  (1 = linear, 2 = quadratic)", sxy / sxx);
    } else if let [(n0, t0), (n1, t1)] = points[..] {
        println!("overall slope: {:.2}  (1 = linear, 2 = quadratic)", (t1 / t0).ln() / (n1 / n0).ln());
    }
}

fn fail(problem: &str) {
    eprintln!("compile_time: {problem}");
    eprintln!("usage: cargo bench --bench compile_time [-- [--kind chain|wide|linear] [--grad] [--runs R] [N ...]]");
    std::process::exit(2);
}
