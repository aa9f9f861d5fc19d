//! The ggml target as a [`Backend`]: checks each node with [`super::writer::lacks`],
//! writes the C, the Makefile and the GGUF file ([`super::emit`]), builds them with make
//! against the ggml [`crate::build::ggml`] finds, and runs the demo for `run --target ggml`.
//!
//! With `--grad` the backward graph autodiff appended is written the same way: its
//! nodes are ordinary IR ops, so ggml computes the gradients forward, with no use of
//! ggml's own backward pass.

use std::collections::BTreeMap;
use std::path::Path;

use crate::backend::{Backend, BuildConfig, Capabilities, EmitOptions, Emitted, Entry, Quantize, Toolchain};
use crate::passes::Graphs;
use crate::codegen::c::backend::run_demo;
use crate::codegen::names::identifier;
use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::tensor::Tensor;

pub struct GgmlTarget;

impl Backend for GgmlTarget {
    fn name(&self) -> &'static str {
        "ggml"
    }

    fn about(&self) -> &'static str {
        "C that builds the model's ggml graph (CPU backend, weights in GGUF): a shared library, a header and a demo program"
    }

    fn claims(&self, c: crate::ir::Composite) -> bool {
        super::writer::composite_call(c).is_some()
    }

    fn lacks(&self, graph: &Graph, v: ValueId) -> Option<String> {
        super::writer::lacks(graph, v)
    }

    fn emit(&self, graphs: &Graphs, opts: &EmitOptions) -> Result<Emitted> {
        let graph = graphs.main();
        let options = super::Options { source: opts.source.clone(), weights: opts.weights.clone(), quantize: opts.quantize };
        let files = super::emit(graph, &options)?;
        let ports = graph.inputs().filter_map(|v| graph.node(v).name.clone()).collect();
        let output_types = graph.outputs.iter().map(|o| graph.ty(o.value).dtype).collect();
        let entry = Entry { name: identifier(&graph.name), inputs: ports, outputs: graph.outputs.iter().map(|o| o.name.clone()).collect(), output_types };
        let size: usize = files.iter().find(|(n, _)| n.ends_with(".gguf")).map_or(0, |(_, b)| b.len());
        Ok(Emitted { files, entry, report: format!("gguf: {} bytes\n", crate::backend::group(size as u64)), sizes: serde_json::json!({"gguf_bytes": size}) })
    }

    /// ggml's own types for the weights of matrix products (`gguf::TensorType`), each of
    /// which its CPU backend's products read.
    fn capabilities(&self) -> Capabilities {
        Capabilities { quantizations: &[Quantize::F32, Quantize::F16, Quantize::Bf16, Quantize::Q8_0, Quantize::Q4_0], ..Capabilities::NONE }
    }

    fn toolchain(&self) -> &dyn Toolchain {
        self
    }
}

impl Toolchain for GgmlTarget {
    fn needs(&self) -> &'static str {
        "make, a C compiler ($CC) and ggml ($MITHRILC_GGML, or the ggml wheel in mithrilc's cache)"
    }

    fn build(&self, dir: &Path, build: &BuildConfig) -> Result<Option<crate::build::CacheUse>> {
        let ggml = crate::build::ggml()?;
        let vars = [crate::build::make_word("GGML_INCLUDE", &ggml.include)?, crate::build::make_word("GGML_LIB", &ggml.lib)?];
        let vars = [crate::build::c_vars(&build.cc, &build.cflags)?, vars.to_vec()].concat();
        let shared = crate::codegen::c::shared_with_readers("mr_files.o", &[], Vec::new());
        crate::build::make_cached(dir, &vars, &[], &shared, &build.cache, crate::build::MAKE_INSTALL).map(Some)
    }

    fn run(&self, dir: &Path, _build: &BuildConfig, entry: &Entry, feeds: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        run_demo(&dir.join(format!("{}_demo", entry.name)), dir, entry, feeds, &[])
    }
}
