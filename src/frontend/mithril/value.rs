//! Compile-time values of Mithril's graph: attributes (axes, shapes, paddings), the
//! results of shape arithmetic (`x.shape[0]`), slices, and constant tensors.

use std::fmt;

use serde_json::Value;

use super::json::Json;
use crate::ir::{Dim, Dtype};
use crate::tensor::{Constant, Tensor};

#[derive(Debug, Clone, PartialEq)]
pub enum Static {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ellipsis,
    /// A symbolic size (a dimension of a tensor whose shape has a symbol).
    Dim(Dim),
    /// A Python tuple (`list: false`) or list.
    Seq { items: Vec<Static>, list: bool },
    Slice { start: Option<i64>, stop: Option<i64>, step: Option<i64> },
    /// A Mithril constant such as `Constant.MIN_POSITIVE_NORMAL`.
    Named(String),
    /// A tensor constant (`{"tensor": ...}`), shared by the slots that hold it.
    Tensor(Constant),
}

impl Static {
    pub fn tuple(items: Vec<Static>) -> Static {
        Static::Seq { items, list: false }
    }

    /// Converts a JSON value of the model file (args or a connection constant).
    /// `tensor: true` marks `{"tensor": v}`.
    pub fn from_json(v: &Value, tensor: bool) -> Result<Static, String> {
        if tensor {
            return json_tensor(v).map(Static::Tensor);
        }
        Ok(match v {
            Value::Null => Static::None,
            Value::Bool(b) => Static::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Static::Int(i),
                None => Static::Float(n.as_f64().ok_or_else(|| format!("number {n} is out of range"))?),
            },
            Value::String(s) => match s.as_str() {
                "(Ellipsis,)" | "Ellipsis" | "..." => Static::Ellipsis,
                s if s.starts_with("Constant.") || s.starts_with("<Constant.") => {
                    let name = s.trim_start_matches('<').trim_start_matches("Constant.");
                    Static::Named(name.split(':').next().unwrap_or(name).trim_end_matches('>').to_string())
                }
                s => Static::Str(s.to_string()),
            },
            Value::Array(a) => Static::Seq {
                items: a.iter().map(|x| Static::from_json(x, false)).collect::<Result<_, _>>()?,
                list: false,
            },
            Value::Object(_) => return Err(format!("unexpected object {v}")),
        })
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Static::Int(i) => Some(*i),
            Static::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Static::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Static::Int(i) => Some(*i as f64),
            Static::Float(f) => Some(*f),
            Static::Bool(b) => Some(*b as u8 as f64),
            Static::Named(n) => named_constant(n, Dtype::F32),
            Static::Tensor(t) if t.numel() == 1 => t.get(0),
            _ => None,
        }
    }

    /// An int, or a sequence of ints.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Static::Seq { items, .. } => items.iter().map(Static::as_int).collect(),
            s => s.as_int().map(|i| vec![i]),
        }
    }

    /// The tensor a scalar, nested sequence or tensor constant stands for. Python ints
    /// become `int_dtype`, floats `float_dtype` (NumPy 2's weak scalars take the dtype of
    /// the tensor they meet).
    pub fn to_tensor(&self, float_dtype: Dtype, int_dtype: Dtype) -> Option<Tensor> {
        match self {
            Static::Tensor(t) => Some(t.to_tensor()),
            Static::Bool(b) => Some(Tensor::scalar(Dtype::Bool, *b as u8 as f64)),
            Static::Int(i) => Some(Tensor::scalar(int_dtype, *i as f64)),
            Static::Float(f) => Some(Tensor::scalar(float_dtype, *f)),
            Static::Named(n) => Some(Tensor::scalar(float_dtype, named_constant(n, float_dtype)?)),
            Static::Seq { .. } => {
                let mut shape = Vec::new();
                let mut data = Vec::new();
                let mut any_float = false;
                flatten(self, 0, &mut shape, &mut None, &mut data, &mut any_float)?;
                let dtype = if any_float {
                    float_dtype
                } else if self.all_bools() {
                    Dtype::Bool
                } else {
                    int_dtype
                };
                Some(Tensor::new(dtype, shape, data))
            }
            _ => None,
        }
    }
}

impl Static {
    /// A nested sequence of bools only (a bool tensor, as NumPy types it).
    fn all_bools(&self) -> bool {
        match self {
            Static::Bool(_) => true,
            Static::Seq { items, .. } => !items.is_empty() && items.iter().all(Static::all_bools),
            _ => false,
        }
    }

    /// [`Static::to_tensor`] as a constant of the IR: a tensor constant as it is (not
    /// widened to f64 and back).
    pub fn to_constant(&self, float_dtype: Dtype, int_dtype: Dtype) -> Option<Constant> {
        match self {
            Static::Tensor(t) => Some(t.clone()),
            other => other.to_tensor(float_dtype, int_dtype).map(Constant::from),
        }
    }
}

/// Appends the scalars of nested sequence `s` (at nesting `depth`) to `data`, row-major,
/// and its sizes to `shape`; `None` when it is ragged. `leaf` is the depth of the first
/// scalar: every scalar must sit there and every sequence above it (`[1, [2]]` has
/// consistent lengths but is ragged).
fn flatten(s: &Static, depth: usize, shape: &mut Vec<u64>, leaf: &mut Option<usize>, data: &mut Vec<f64>, any_float: &mut bool) -> Option<()> {
    match s {
        Static::Seq { items, .. } => {
            if leaf.is_some_and(|l| depth >= l) {
                return None; // ragged: a sequence beside a scalar
            }
            if shape.len() == depth {
                shape.push(items.len() as u64);
            } else if shape.get(depth) != Some(&(items.len() as u64)) {
                return None; // ragged
            }
            for it in items {
                flatten(it, depth + 1, shape, leaf, data, any_float)?;
            }
            Some(())
        }
        _ if shape.len() != depth || leaf.is_some_and(|l| l != depth) => None,
        scalar => {
            *leaf = Some(depth);
            match scalar {
                Static::Float(f) => {
                    *any_float = true;
                    data.push(*f);
                }
                other => data.push(other.as_f64()?),
            }
            Some(())
        }
    }
}

impl Static {
    /// `{"tensor": v}` as parsed: a nested array of integer or float rows is read
    /// straight into a constant (never a `Static` per element); anything else (bools,
    /// named constants, a scalar, ragged nesting) as [`Static::from_json`] reads it.
    pub fn tensor_from_json(v: &Json) -> Result<Static, String> {
        let (mut shape, mut data, mut any_float) = (Vec::new(), Vec::new(), false);
        if rows(v, 0, &mut shape, &mut data, &mut any_float) {
            // Floats exactly (emission gives them the model's float type), ints as i32.
            let dtype = if any_float { Dtype::F64 } else { Dtype::I32 };
            return Ok(Static::Tensor(Constant::from_values(dtype, shape, data.into_iter())));
        }
        Static::from_json(&v.to_value(), true)
    }
}

/// [`flatten`] for arrays whose innermost items are compact rows; `false` for any
/// other shape of JSON.
fn rows(v: &Json, depth: usize, shape: &mut Vec<u64>, data: &mut Vec<f64>, any_float: &mut bool) -> bool {
    let len = match v {
        Json::Array(items) => items.len(),
        Json::Ints(row) => row.len(),
        Json::Floats(row) => row.len(),
        Json::Null | Json::Bool(_) | Json::Number(_) | Json::String(_) | Json::Object(_) => return false,
    } as u64;
    if shape.len() == depth {
        shape.push(len);
    } else if shape.get(depth) != Some(&len) {
        return false; // ragged
    }
    match v {
        Json::Array(items) => items.iter().all(|it| rows(it, depth + 1, shape, data, any_float)),
        // The items are scalars at depth + 1: no deeper dimension may have been seen.
        Json::Ints(row) if shape.len() == depth + 1 => {
            data.extend(row.iter().map(|&i| i as f64));
            true
        }
        Json::Floats(row) if shape.len() == depth + 1 => {
            *any_float = true;
            data.extend(row);
            true
        }
        _ => false,
    }
}

fn json_tensor(v: &Value) -> Result<Constant, String> {
    let s = Static::from_json(v, false)?;
    s.to_constant(Dtype::F64, Dtype::I32).ok_or_else(|| format!("{v} is not a tensor constant"))
}

/// Values of Mithril's `Constant` enum (`mithril/types.py`), which depend on the
/// precision of the tensors they meet.
pub fn named_constant(name: &str, dtype: Dtype) -> Option<f64> {
    let (eps, left_eps, min_normal, min_subnormal, reciprocal) = match dtype {
        Dtype::F64 => (2f64.powi(-52), 2f64.powi(-53), 2.2250738585072014e-308, 5e-324, 1.4916681462400413e-153),
        Dtype::F16 | Dtype::Bf16 => (0.000977, 0.0004885, 6.104e-05, 6e-08, 0.007812809993849843),
        _ => (1.1920929e-07, 5.9604645e-08, 1.1754944e-38, 1e-45, 1.0842021951e-19),
    };
    Some(match name {
        "EPSILON" => eps,
        "LEFT_EPSILON" => left_eps,
        "MIN_POSITIVE_NORMAL" => min_normal,
        "MIN_POSITIVE_SUBNORMAL" => min_subnormal,
        "STABLE_RECIPROCAL_THRESHOLD" => reciprocal,
        "ZEROS" => 0.0,
        "ONES" => 1.0,
        _ => return None,
    })
}

impl fmt::Display for Static {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Static::None => f.write_str("None"),
            Static::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Static::Int(i) => write!(f, "{i}"),
            Static::Float(x) => write!(f, "{x:?}"),
            Static::Str(s) => write!(f, "{s:?}"),
            Static::Ellipsis => f.write_str("..."),
            Static::Dim(d) => write!(f, "{d}"),
            Static::Seq { items, list } => {
                f.write_str(if *list { "[" } else { "(" })?;
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{it}")?;
                }
                if !list && items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(if *list { "]" } else { ")" })
            }
            Static::Slice { start, stop, step } => {
                let o = |v: &Option<i64>| v.map_or("None".to_string(), |x| x.to_string());
                write!(f, "slice({}, {}, {})", o(start), o(stop), o(step))
            }
            Static::Named(n) => write!(f, "Constant.{n}"),
            Static::Tensor(t) => write!(f, "tensor{:?}", t.shape()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_become_python_values() {
        let v = |s: &str| Static::from_json(&serde_json::from_str(s).unwrap(), false).unwrap();
        assert_eq!(v("null"), Static::None);
        assert_eq!(v("3"), Static::Int(3));
        assert_eq!(v("2.5"), Static::Float(2.5));
        assert_eq!(v("\"(Ellipsis,)\""), Static::Ellipsis);
        assert_eq!(v("\"<Constant.MIN_POSITIVE_NORMAL: 2>\""), Static::Named("MIN_POSITIVE_NORMAL".into()));
        assert_eq!(v("[1, [2, 3]]").to_string(), "(1, (2, 3))");
        assert_eq!(v("[4]").to_string(), "(4,)");
    }

    #[test]
    fn nested_sequences_become_tensors() {
        let t = Static::from_json(&serde_json::json!([[1, 2], [3, 4]]), true).unwrap();
        assert_eq!(t, Static::Tensor(Tensor::new(Dtype::I32, vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).into()));
        let f = Static::from_json(&serde_json::json!([1, 2.5]), false).unwrap().to_tensor(Dtype::F32, Dtype::I32).unwrap();
        assert_eq!(f.dtype, Dtype::F32);
        // Ragged nesting is not a tensor, whether the lengths differ or a scalar sits
        // beside a sequence (found by tests/fuzz: the second made a tensor of shape
        // [2, 3] holding 4 values).
        assert!(Static::from_json(&serde_json::json!([[1], [2, 3]]), true).is_err());
        assert!(Static::from_json(&serde_json::json!([1, [2]]), true).is_err());
        assert!(Static::from_json(&serde_json::json!([-1, [0.5, 2, 3]]), true).is_err());
        assert!(Static::from_json(&serde_json::json!([[1], 2]), true).is_err());
        assert!(Static::from_json(&serde_json::json!([[[1]], [2]]), true).is_err());
        let empty = Static::from_json(&serde_json::json!([[], []]), true).unwrap();
        assert_eq!(empty, Static::Tensor(Tensor::new(Dtype::I32, vec![2, 0], vec![]).into()));
    }
}
