//! Mithril's attribute conventions as plain functions: paddings and strides in their
//! int / pair / nested-pair spellings, NumPy pad widths, dtype names, reshape targets
//! with `-1`, Python arithmetic on compile-time numbers, and sequence indexing.

use super::emit::Val;
use super::value::Static;
use crate::error::{Error, Result};
use crate::ir::*;

pub(super) fn seq(items: Vec<Val>, list: bool) -> Val {
    match all_static(&items) {
        Some(Static::Seq { items, .. }) => Val::S(Static::Seq { items, list }),
        _ => Val::Seq(items, list),
    }
}

pub(super) fn all_static(items: &[Val]) -> Option<Static> {
    let mut out = Vec::new();
    for it in items {
        match it {
            Val::S(s) => out.push(s.clone()),
            Val::Seq(v, _) => out.push(all_static(v)?),
            Val::T(_) => return None,
        }
    }
    Some(Static::tuple(out))
}

/// `seq[index]` for a compile-time sequence or a list of tensors.
pub(super) fn index_seq(items: &[Val], list: bool, index: &Static) -> Result<Val> {
    let n = items.len() as i64;
    match index {
        Static::Int(i) => {
            let j = if *i < 0 { i + n } else { *i };
            // Say what was indexed: usually a shape, as `shape[1]` of a rank-1 tensor.
            let out_of_range = || {
                let what = all_static(items).map_or_else(|| format!("a list of {n} tensors"), |s| format!("{s}"));
                Error::user(format!("index {i} is out of range for {what}, of length {n}"))
            };
            usize::try_from(j).ok().and_then(|j| items.get(j)).cloned().ok_or_else(out_of_range)
        }
        Static::Slice { start, stop, step } => {
            let r = SliceRange { start: *start, stop: *stop, step: step.unwrap_or(1) };
            let (first, step, count) = r.resolve(n as u64).map_err(Error::user)?;
            Ok(seq((0..count as i64).map(|k| items[(first + k * step) as usize].clone()).collect(), list))
        }
        other => Err(Error::user(format!("cannot index a sequence with {other}"))),
    }
}

pub(super) fn dim_static(d: &Dim) -> Static {
    match d {
        Dim::Known(n) => Static::Int(*n as i64),
        d => Static::Dim(d.clone()),
    }
}

pub(super) fn static_shape(s: &Static) -> Result<Shape> {
    let items = match s {
        Static::Seq { items, .. } => items.clone(),
        other => vec![other.clone()],
    };
    items
        .iter()
        .map(|it| match it {
            Static::Int(n) if *n >= 0 => Ok(Dim::Known(*n as u64)),
            Static::Dim(d) => Ok(d.clone()),
            other => Err(Error::user(format!("bad size {other} in shape {s}"))),
        })
        .collect::<Result<Vec<_>>>()
        .map(Shape)
}

pub(super) fn positive(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).ok().filter(|&x| x > 0).ok_or_else(|| Error::user(format!("`{what}` must be positive, got {v}")))
}

/// An int or an n-tuple of positive ints.
pub(super) fn positive_list(s: &Static, n: usize, what: &str) -> Result<Vec<u64>> {
    let ints = s.as_ints().ok_or_else(|| Error::user(format!("`{what}` must be an int or a tuple of ints, got {s}")))?;
    let ints = if ints.len() == 1 { vec![ints[0]; n] } else { ints };
    if ints.len() != n {
        return Err(Error::user(format!("`{what}` needs {n} values, got {s}")));
    }
    ints.into_iter().map(|v| positive(v, what)).collect()
}

/// Padding as (before, after) per spatial dim, from `p`, `(p, q)` or `((a, b), (c, d))`.
pub(super) fn pad_pairs(s: &Static, n: usize) -> Result<Vec<(u64, u64)>> {
    let bad = || Error::user(format!("bad padding {s}"));
    let nonneg = |v: i64| u64::try_from(v).map_err(|_| bad());
    match s {
        Static::Int(p) => Ok(vec![(nonneg(*p)?, nonneg(*p)?); n]),
        Static::Seq { items, .. } => {
            let mut out = Vec::new();
            for it in items {
                out.push(match it {
                    Static::Int(p) => (nonneg(*p)?, nonneg(*p)?),
                    Static::Seq { items, .. } if items.len() == 2 => {
                        (nonneg(items[0].as_int().ok_or_else(bad)?)?, nonneg(items[1].as_int().ok_or_else(bad)?)?)
                    }
                    _ => return Err(bad()),
                });
            }
            // A 1-d padding is written as one (before, after) pair.
            if n == 1 && out.len() == 2 && items.iter().all(|i| matches!(i, Static::Int(_))) {
                return Ok(vec![(out[0].0, out[1].0)]);
            }
            if out.len() != n {
                return Err(bad());
            }
            Ok(out)
        }
        _ => Err(bad()),
    }
}

/// `np.pad`'s pad_width: `n`, `(n,)` or `(before, after)` for every axis, or one
/// `(before, after)` (or `n`) per axis.
pub(super) fn numpy_pad_width(s: &Static, rank: usize) -> Result<Vec<(u64, u64)>> {
    let bad = || Error::user(format!("bad pad_width {s} for a rank-{rank} tensor"));
    let nonneg = |v: &Static| v.as_int().and_then(|i| u64::try_from(i).ok()).ok_or_else(bad);
    let pair = |v: &Static| -> Result<(u64, u64)> {
        match v {
            Static::Seq { items, .. } if items.len() == 2 => Ok((nonneg(&items[0])?, nonneg(&items[1])?)),
            Static::Seq { items, .. } if items.len() == 1 => Ok((nonneg(&items[0])?, nonneg(&items[0])?)),
            other => Ok((nonneg(other)?, nonneg(other)?)),
        }
    };
    match s {
        Static::Seq { items, .. } if items.len() == rank && items.iter().all(|i| matches!(i, Static::Seq { .. })) => {
            items.iter().map(pair).collect()
        }
        Static::Seq { items, .. } if items.len() == 1 && matches!(items[0], Static::Seq { .. }) => Ok(vec![pair(&items[0])?; rank]),
        other => Ok(vec![pair(other)?; rank]),
    }
}

/// Mithril's `padding_converter_1d` / `padding_converter_2d`.
pub(super) fn convert_padding(p: &Static, kernel: &Static, two_d: bool) -> Result<Static> {
    let pair = |a: i64, b: i64| Static::tuple(vec![Static::Int(a), Static::Int(b)]);
    let mode = match p {
        Static::Str(s) => Some(s.to_lowercase().trim_start_matches("paddingtype.").to_string()),
        _ => None,
    };
    if let Some(mode) = mode {
        let ks = kernel.as_ints().ok_or_else(|| Error::user(format!("bad kernel size {kernel}")))?;
        return match mode.as_str() {
            "valid" => Ok(if two_d { Static::tuple(vec![pair(0, 0), pair(0, 0)]) } else { pair(0, 0) }),
            "same" => {
                if ks.iter().any(|k| k % 2 == 0) {
                    return Err(Error::user("'same' padding is not supported when the kernel size is even".to_string()));
                }
                if two_d {
                    let (h, w) = (ks[0] / 2, *ks.get(1).unwrap_or(&ks[0]) / 2);
                    Ok(Static::tuple(vec![pair(h, w), pair(h, w)]))
                } else {
                    Ok(pair(ks[0] / 2, ks[0] / 2))
                }
            }
            other => Err(Error::user(format!("unknown padding type '{other}'"))),
        };
    }
    match p {
        Static::Int(i) if two_d => Ok(Static::tuple(vec![pair(*i, *i), pair(*i, *i)])),
        Static::Int(i) => Ok(pair(*i, *i)),
        Static::Seq { items, .. } if two_d && items.len() == 2 => {
            let mut out = Vec::new();
            for it in items {
                out.push(match it {
                    Static::Int(v) => pair(*v, *v),
                    Static::Seq { items: q, .. } if q.len() == 2 => it.clone(),
                    _ => return Err(Error::user(format!("bad padding {p}"))),
                });
            }
            Ok(Static::tuple(out))
        }
        Static::Seq { items, .. } if !two_d && items.len() == 2 => Ok(p.clone()),
        other => Err(Error::user(format!("bad padding {other}"))),
    }
}

/// A dtype as Mithril writes it: a name (`float32`, `Dtype.float32`) or the number of
/// its `Dtype` IntEnum, which `str()` gives on Python 3.12 (`"7"` is float32). Types the
/// IR lacks widen (uint8, int8, int16 to i32).
pub(super) fn parse_dtype(s: &Static) -> Option<Dtype> {
    let name = match s {
        Static::Str(x) | Static::Named(x) => x.to_lowercase(),
        Static::Int(i) => i.to_string(),
        _ => return None,
    };
    let by_number = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"];
    let name = match name.parse::<usize>() {
        Ok(i) => by_number.get(i)?.to_string(),
        Err(_) => name,
    };
    let name = name.trim_start_matches("dtype.").trim_start_matches("mithril.");
    Some(match name {
        "float32" | "float" | "f32" => Dtype::F32,
        "float64" | "double" | "f64" => Dtype::F64,
        "float16" | "half" | "f16" => Dtype::F16,
        "bfloat16" | "bf16" => Dtype::Bf16,
        "int32" | "int" | "i32" | "uint8" | "int8" | "int16" => Dtype::I32,
        "int64" | "long" | "i64" => Dtype::I64,
        "bool" => Dtype::Bool,
        _ => return None,
    })
}

/// Arithmetic on compile-time numbers (shape arithmetic such as `shape[0] // 3`).
pub(super) fn fold_binary(a: &Static, b: &Static, op: BinaryOp) -> Option<Static> {
    use BinaryOp as B;
    if let (Some(x), Some(y)) = (a.as_int().filter(|_| !matches!(a, Static::Bool(_))), b.as_int().filter(|_| !matches!(b, Static::Bool(_)))) {
        return Some(Static::Int(match op {
            B::Add => x.checked_add(y)?,
            B::Sub => x.checked_sub(y)?,
            B::Mul => x.checked_mul(y)?,
            B::FloorDiv if y != 0 => x.div_euclid(y) - i64::from(x.rem_euclid(y) != 0 && y < 0),
            B::Max => x.max(y),
            B::Min => x.min(y),
            B::Div if y != 0 => return Some(Static::Float(x as f64 / y as f64)),
            _ => return None,
        }));
    }
    let (x, y) = (a.as_f64()?, b.as_f64()?);
    if matches!(a, Static::Tensor(_)) || matches!(b, Static::Tensor(_)) {
        return None;
    }
    Some(Static::Float(match op {
        B::Add => x + y,
        B::Sub => x - y,
        B::Mul => x * y,
        B::Div => x / y,
        B::Pow => x.powf(y),
        B::Max => x.max(y),
        B::Min => x.min(y),
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mithril_padding_and_stride_conversions() {
        let i = Static::Int;
        let pair = |a, b| Static::tuple(vec![i(a), i(b)]);
        assert_eq!(convert_padding(&i(1), &i(3), true).unwrap(), Static::tuple(vec![pair(1, 1), pair(1, 1)]));
        assert_eq!(convert_padding(&pair(1, 2), &i(3), true).unwrap(), Static::tuple(vec![pair(1, 1), pair(2, 2)]));
        assert_eq!(convert_padding(&Static::Str("same".into()), &pair(3, 5), true).unwrap(), Static::tuple(vec![pair(1, 2), pair(1, 2)]));
        assert!(convert_padding(&Static::Str("same".into()), &i(2), false).is_err());
        assert_eq!(pad_pairs(&Static::tuple(vec![pair(1, 2), pair(3, 4)]), 2).unwrap(), vec![(1, 2), (3, 4)]);
        assert_eq!(pad_pairs(&pair(1, 2), 1).unwrap(), vec![(1, 2)]);
        assert!(pad_pairs(&i(-1), 2).is_err());
        assert_eq!(numpy_pad_width(&i(1), 3).unwrap(), vec![(1, 1); 3]);
        assert_eq!(positive_list(&i(2), 2, "stride").unwrap(), vec![2, 2]);
        assert!(positive_list(&i(0), 2, "stride").is_err());
    }

    #[test]
    fn shape_arithmetic_folds_like_python() {
        let i = Static::Int;
        assert_eq!(fold_binary(&i(7), &i(2), BinaryOp::FloorDiv), Some(i(3)));
        assert_eq!(fold_binary(&i(-7), &i(2), BinaryOp::FloorDiv), Some(i(-4)));
        assert_eq!(fold_binary(&i(7), &i(-2), BinaryOp::FloorDiv), Some(i(-4)));
        assert_eq!(fold_binary(&i(3), &i(4), BinaryOp::Mul), Some(i(12)));
        assert_eq!(fold_binary(&i(1), &i(2), BinaryOp::Div), Some(Static::Float(0.5)));
        assert_eq!(fold_binary(&i(i64::MAX), &i(2), BinaryOp::Mul), None);
    }

    #[test]
    fn sequences_index_like_python() {
        let items: Vec<Val> = (0..5).map(|k| Val::S(Static::Int(k))).collect();
        assert!(matches!(index_seq(&items, false, &Static::Int(-1)).unwrap(), Val::S(Static::Int(4))));
        let sl = Static::Slice { start: None, stop: Some(3), step: None };
        match index_seq(&items, false, &sl).unwrap() {
            Val::S(Static::Seq { items, .. }) => assert_eq!(items, vec![Static::Int(0), Static::Int(1), Static::Int(2)]),
            other => panic!("{other:?}"),
        }
        assert!(index_seq(&items, false, &Static::Int(5)).is_err());
    }
}
