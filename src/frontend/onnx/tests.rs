//! Models built here with prost's types, written and read back: what is read, and
//! every way a file can be wrong, each a user's error with the whole message checked.

use std::path::{Path, PathBuf};

use prost::Message;

use super::proto::tensor_proto::{DataLocation, DataType};
use super::proto::tensor_shape_proto::{dimension, Dimension};
use super::proto::type_proto::{self, Value as TypeValue};
use super::proto::*;
use crate::frontend::{self, Options};
use crate::ir::{Dim, Dtype, Op, Shape, TensorType};

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims.iter().map(|&d| Dimension { value: Some(if d < 0 { dimension::Value::DimParam("N".into()) } else { dimension::Value::DimValue(d) }), ..Default::default() }).collect();
    let tensor = type_proto::Tensor { elem_type: Some(DataType::Float as i32), shape: Some(TensorShapeProto { dim }) };
    ValueInfoProto { name: Some(name.into()), r#type: Some(TypeProto { value: Some(TypeValue::TensorType(tensor)), ..Default::default() }), ..Default::default() }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto { op_type: Some(op.into()), input: inputs.iter().map(|s| s.to_string()).collect(), output: outputs.iter().map(|s| s.to_string()).collect(), ..Default::default() }
}

fn floats(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(DataType::Float as i32), raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into()), ..Default::default() }
}

/// `y = x + w` over `f32[N, 2]` (N symbolic) with the weight `w` an initializer.
fn add_model() -> ModelProto {
    let graph = GraphProto {
        name: Some("g".into()),
        node: vec![node("Add", &["x", "w"], &["y"])],
        input: vec![value_info("x", &[-1, 2])],
        output: vec![value_info("y", &[-1, 2])],
        initializer: vec![floats("w", &[2], &[1.0, 2.0])],
        ..Default::default()
    };
    ModelProto { ir_version: Some(8), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }], graph: Some(graph), ..Default::default() }
}

fn write(dir: &Path, model: &ModelProto) -> PathBuf {
    let path = dir.join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// The error loading `model` gives, without the file's name in front.
fn error(model: &ModelProto) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), model);
    let msg = frontend::load(&path, &Options::default()).unwrap_err().to_string();
    msg.strip_prefix(&format!("{}: ", path.display())).unwrap_or(&msg).to_string()
}

#[test]
fn inputs_initializers_and_symbols_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &add_model());
    let model = frontend::load(&path, &Options::default()).unwrap();
    let g = &model.graph;
    let x = g.inputs().next().unwrap();
    assert_eq!(g.ty(x).shape.0, vec![Dim::Sym("N".into()), Dim::Known(2)]);
    assert_eq!(g.params().map(|p| g.node(p).name.clone().unwrap()).collect::<Vec<_>>(), ["w"]);
    assert_eq!(g.outputs[0].name, "y");
    assert!(matches!(g.node(g.outputs[0].value).op, Op::Binary(_)));
    // The weight is a view of the mapped file, not a copy.
    let w = &model.weights["w"];
    assert_eq!(w.values().collect::<Vec<_>>(), [1.0, 2.0]);
    let file = std::fs::read(&path).unwrap();
    assert!(file.windows(8).any(|win| win == w.bytes()));
}

/// `run --data`'s arrays bind an input's symbols (its element type stays the model's);
/// one whose shape contradicts the model's is refused.
#[test]
fn the_datas_shape_binds_an_inputs_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &add_model());
    let data = |dims: &[u64]| Options { known_types: [("x".to_string(), TensorType::new(Dtype::F64, Shape::known(dims)))].into_iter().collect(), ..Default::default() };
    let model = frontend::load(&path, &data(&[3, 2])).unwrap();
    let x = model.graph.inputs().next().unwrap();
    assert_eq!(model.graph.ty(x).to_string(), "f32[3, 2]");
    let msg = frontend::load(&path, &data(&[3, 5])).unwrap_err().to_string();
    assert_eq!(msg, format!("{}: the data's \"x\", of shape [3, 5]: dimension 1 of the model's input f32[N, 2] is 2", path.display()));
}

#[test]
fn truncated_and_corrupt_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = add_model().encode_to_vec();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let msg = frontend::load(&path, &Options::default()).unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{}: not a valid ONNX model: failed to decode Protobuf message", path.display())), "{msg}");
}

#[test]
fn versions_outside_those_read_are_refused() {
    let mut m = add_model();
    m.ir_version = Some(2);
    assert_eq!(error(&m), "ONNX IR version 2 is older than the versions mithrilc reads (3 to 13)\n  note: re-export the model, or convert it with onnx.version_converter");
    m.ir_version = Some(8);
    m.opset_import[0].version = Some(99);
    assert_eq!(error(&m), "opset 99 is newer than the opsets mithrilc reads (7 to 27, from onnx 1.22.0)\n  note: convert the model with onnx.version_converter.convert_version(model, 17)");
    // Add changed at opset 7 (NumPy broadcasting), so opset 6 is refused...
    m.opset_import[0].version = Some(6);
    assert_eq!(error(&m), "opset 6 is older than the opsets mithrilc reads (7 to 27, from onnx 1.22.0)\n  note: convert the model with onnx.version_converter.convert_version(model, 17)");
    // ... and a graph of operators that opsets 1 to 7 define alike is read as opset 7.
    m.graph.as_mut().unwrap().node = vec![node("MatMul", &["x", "w"], &["y"])];
    m.graph.as_mut().unwrap().output = vec![value_info("y", &[-1])];
    m.opset_import[0].version = Some(1);
    let dir = tempfile::tempdir().unwrap();
    assert!(frontend::load(&write(dir.path(), &m), &Options::default()).is_ok());
}

#[test]
fn an_initializer_shorter_than_its_shape_is_refused() {
    let mut m = add_model();
    m.graph.as_mut().unwrap().initializer[0].dims = vec![4];
    assert_eq!(error(&m), "initializer \"w\": its data holds 8 bytes, and f32[4] takes 16");
}

#[test]
fn external_data_stays_in_the_models_folder() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("m");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(dir.path().join("outside.bin"), [0u8; 8]).unwrap();
    std::fs::write(inner.join("weights.bin"), [0u8, 0, 128, 63, 0, 0, 0, 64]).unwrap();
    let external = |location: &str, offset: Option<&str>| {
        let mut m = add_model();
        let t = &mut m.graph.as_mut().unwrap().initializer[0];
        t.raw_data = None;
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = vec![StringStringEntryProto { key: Some("location".into()), value: Some(location.into()) }];
        if let Some(o) = offset {
            t.external_data.push(StringStringEntryProto { key: Some("offset".into()), value: Some(o.into()) });
        }
        let path = write(&inner, &m);
        frontend::load(&path, &Options::default()).map_err(|e| e.to_string().replace(&format!("{}: ", path.display()), ""))
    };
    let read = external("weights.bin", None).unwrap();
    assert_eq!(read.weights["w"].values().collect::<Vec<_>>(), [1.0, 2.0]);
    let outside = "initializer \"w\": its external data's location LOC is outside the model's folder\n  note: ONNX external data must lie in the model's folder or below it";
    for loc in ["../outside.bin", "/etc/passwd", ""] {
        assert_eq!(external(loc, None).unwrap_err(), outside.replace("LOC", &format!("{loc:?}")));
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("outside.bin"), inner.join("link.bin")).unwrap();
        assert_eq!(external("link.bin", None).unwrap_err(), outside.replace("LOC", "\"link.bin\""));
    }
    assert_eq!(external("weights.bin", Some("9")).unwrap_err(), "initializer \"w\": its external data (weights.bin, offset 9, length to the end) lies past the end of the file (8 bytes)");
}

#[test]
fn graphs_that_are_not_dags_are_refused() {
    let mut m = add_model();
    let g = m.graph.as_mut().unwrap();
    g.node = vec![node("Add", &["x", "b"], &["a"]), node("Relu", &["a"], &["b"]), node("Relu", &["a"], &["y"])];
    assert_eq!(error(&m), "the graph has a cycle: these nodes depend on each other's outputs: node 0 (Add), node 1 (Relu), node 2 (Relu)");
    let g = m.graph.as_mut().unwrap();
    g.node = vec![node("Add", &["x", "z"], &["y"])];
    assert_eq!(error(&m), "node 0 (Add) uses \"z\", which no node, graph input or initializer defines");
    let g = m.graph.as_mut().unwrap();
    g.node = vec![node("Relu", &["x"], &["y"]), node("Neg", &["x"], &["y"])];
    assert_eq!(error(&m), "node 0 (Relu) and node 1 (Neg) both define \"y\"");
    let g = m.graph.as_mut().unwrap();
    g.node = vec![node("Relu", &["x"], &["y"])];
    g.output.push(value_info("y", &[-1, 2]));
    assert_eq!(error(&m), "graph output \"y\" is listed twice");
    let g = m.graph.as_mut().unwrap();
    g.output.pop();
    g.input.push(value_info("x", &[-1, 2]));
    assert_eq!(error(&m), "graph input \"x\" is listed twice");
}

#[test]
fn every_unsupported_node_is_listed_at_once() {
    let mut m = add_model();
    let g = m.graph.as_mut().unwrap();
    let mut fused = node("FusedGemm", &["x", "w"], &["a"]);
    fused.domain = Some("com.microsoft".into());
    fused.name = Some("gemm1".into());
    g.node = vec![fused, node("Loop", &["a"], &["b"]), node("Frobnicate", &["b"], &["c"]), node("Relu", &["c"], &["y"])];
    assert_eq!(
        error(&m),
        "3 of the model's 4 node(s) cannot be compiled:\n  \
         node 0 \"gemm1\" (FusedGemm): FusedGemm is an ONNX Runtime contrib operator (domain com.microsoft), which mithrilc does not read\n  \
         node 1 (Loop): control flow is not supported (mithrilc compiles one static graph)\n  \
         node 2 (Frobnicate): no ONNX operator Frobnicate in mithrilc"
    );
}

/// Shape arithmetic over symbols folds when compiling: `Shape → Gather → Mul → Concat
/// → Reshape` gives `[B*S, 2, 4]`, `Range` up to a symbol has that length, and
/// `ConstantOfShape` and `Size` take symbolic shapes.
#[test]
fn shape_arithmetic_over_symbols_folds() {
    let info = |name: &str, elem: DataType, dims: &[&str]| {
        let dim = dims
            .iter()
            .map(|d| Dimension { value: Some(d.parse().map_or_else(|_| dimension::Value::DimParam(d.to_string()), dimension::Value::DimValue)), ..Default::default() })
            .collect();
        let tensor = type_proto::Tensor { elem_type: Some(elem as i32), shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto { name: Some(name.into()), r#type: Some(TypeProto { value: Some(TypeValue::TensorType(tensor)), ..Default::default() }), ..Default::default() }
    };
    let concat = |inputs: &[&str], output: &str| {
        let axis = AttributeProto { name: Some("axis".into()), i: Some(0), r#type: Some(attribute_proto::AttributeType::Int as i32), ..Default::default() };
        NodeProto { attribute: vec![axis], ..node("Concat", inputs, &[output]) }
    };
    let ints = |name: &str, dims: &[i64], values: &[i64]| TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(DataType::Int64 as i32), int64_data: values.to_vec(), ..Default::default() };
    let graph = GraphProto {
        name: Some("g".into()),
        node: vec![
            node("Shape", &["x"], &["shape"]),
            node("Gather", &["shape", "zero"], &["b"]),
            node("Gather", &["shape", "one"], &["s"]),
            node("Mul", &["b", "s"], &["bs"]),
            concat(&["bs", "two_minus_one"], "target"),
            node("Reshape", &["x", "target"], &["r"]),
            node("Gather", &["shape", "one_scalar"], &["s_scalar"]),
            node("Range", &["zero_scalar", "s_scalar", "one_scalar"], &["positions"]),
            concat(&["b", "s"], "bs_shape"),
            node("ConstantOfShape", &["bs_shape"], &["zeros"]),
            node("Size", &["x"], &["count"]),
        ],
        input: vec![info("x", DataType::Float, &["B", "S", "8"])],
        output: vec![
            info("r", DataType::Float, &["N", "2", "4"]),
            info("positions", DataType::Int64, &["S"]),
            info("zeros", DataType::Float, &["B", "S"]),
            info("count", DataType::Int64, &[]),
        ],
        initializer: vec![ints("zero", &[1], &[0]), ints("one", &[1], &[1]), ints("two_minus_one", &[2], &[2, -1]), ints("one_scalar", &[], &[1]), ints("zero_scalar", &[], &[0])],
        ..Default::default()
    };
    let model = ModelProto { ir_version: Some(8), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }], graph: Some(graph), ..Default::default() };
    let dir = tempfile::tempdir().unwrap();
    let g = frontend::load(&write(dir.path(), &model), &Options::default()).unwrap().graph;
    let types: Vec<String> = g.outputs.iter().map(|o| g.ty(o.value).to_string()).collect();
    assert_eq!(types, ["f32[B*S, 2, 4]", "i64[S]", "f32[B, S]", "i64[]"]);
}
