//! ONNX models written in a test: graphs of a few nodes, with symbolic dimensions
//! where a test needs them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mithrilc::frontend::onnx::proto::{
    attribute_proto, tensor_proto, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

/// A dimension: a size, or a symbol's name.
pub enum D {
    N(i64),
    S(&'static str),
}

/// A float32 graph input or output of the dimensions `dims`.
pub fn info(name: &str, dims: &[D]) -> ValueInfoProto {
    let dims = dims.iter().map(|d| tensor_shape_proto::Dimension {
        value: Some(match d {
            D::N(n) => tensor_shape_proto::dimension::Value::DimValue(*n),
            D::S(s) => tensor_shape_proto::dimension::Value::DimParam(s.to_string()),
        }),
        ..Default::default()
    });
    let t = type_proto::Tensor { elem_type: Some(tensor_proto::DataType::Float as i32), shape: Some(TensorShapeProto { dim: dims.collect() }) };
    ValueInfoProto { name: Some(name.into()), r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(t)), ..Default::default() }), ..Default::default() }
}

pub fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto { op_type: Some(op.into()), input: inputs.iter().map(|s| s.to_string()).collect(), output: vec![output.into()], ..Default::default() }
}

/// `node` with integer attributes (`ints` for a list).
pub fn node_with(op: &str, inputs: &[&str], output: &str, ints: &[(&str, &[i64])], int: &[(&str, i64)]) -> NodeProto {
    let mut attribute: Vec<AttributeProto> = ints
        .iter()
        .map(|(name, v)| AttributeProto { name: Some(name.to_string()), ints: v.to_vec(), r#type: Some(attribute_proto::AttributeType::Ints as i32), ..Default::default() })
        .collect();
    attribute.extend(int.iter().map(|(name, v)| AttributeProto { name: Some(name.to_string()), i: Some(*v), r#type: Some(attribute_proto::AttributeType::Int as i32), ..Default::default() }));
    NodeProto { attribute, ..node(op, inputs, output) }
}

/// An int64 initializer of one dimension.
pub fn ints(name: &str, values: &[i64]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: vec![values.len() as i64], data_type: Some(tensor_proto::DataType::Int64 as i32), int64_data: values.to_vec(), ..Default::default() }
}

/// A float32 initializer.
pub fn floats(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto { name: Some(name.into()), dims: dims.to_vec(), data_type: Some(tensor_proto::DataType::Float as i32), float_data: values.to_vec(), ..Default::default() }
}

/// The model of `nodes` at `opset` (IR version 7), written to `dir/name.onnx`.
pub fn write(dir: &Path, name: &str, opset: i64, nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, initializer: Vec<TensorProto>) -> PathBuf {
    let graph = GraphProto { name: Some("g".into()), node: nodes, input: inputs, output: outputs, initializer, ..Default::default() };
    let model = ModelProto { ir_version: Some(7), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }], graph: Some(graph), ..Default::default() };
    let path = dir.join(format!("{name}.onnx"));
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}
