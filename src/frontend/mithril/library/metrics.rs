//! Mithril's metrics built from primitives: Metric, and Accuracy, Precision, Recall
//! and F1 on it.

use super::*;

/// Mithril's `Metric`, which the metric classes build on: `label` (its argmax over the
/// last axis when `is_label_one_hot`) and `pred` (its argmax when `is_pred_one_hot`, or,
/// for `is_binary` without one-hot predictions, `where(pred > threshold, 1, 0)`) as
/// class indices; returns `(pred - label, pred, label)`.
pub(super) fn metric(s: &mut Scope, args: &Args) -> Result<(SlotId, SlotId, SlotId)> {
    let threshold = args.value_or("threshold", Static::None)?;
    let is_binary = args.bool_or("is_binary", false)?;
    if is_binary && threshold == Static::None {
        return Err(args.err("`is_binary` needs a `threshold` (models.py asserts it)"));
    }
    let argmax = |s: &mut Scope, x: SlotId| {
        s.prim(Formula::ReduceArgmax, ins![("input", x), ("axis", int(-1)), ("keepdim", Static::Bool(false))])
    };
    let mut label = s.key("label");
    if args.bool_or("is_label_one_hot", true)? {
        label = argmax(s, label)?;
    }
    let mut pred = s.key("pred");
    if args.bool_or("is_pred_one_hot", true)? {
        pred = argmax(s, pred)?;
    } else if is_binary {
        let above = s.prim(Formula::Greater, ins![("left", pred), ("right", threshold)])?;
        pred = s.prim(Formula::Where, ins![("cond", above), ("input1", int_tensor(1)), ("input2", int_tensor(0))])?;
    }
    let diff = s.prim(Formula::Subtract, ins![("left", pred), ("right", label)])?;
    Ok((diff, pred, label))
}

/// `Tensor(i)`: an integer tensor constant (Mithril's int default, i32).
pub(super) fn int_tensor(i: i64) -> Static {
    Static::Tensor(crate::tensor::Constant::scalar(Dtype::I32, i as f64))
}

/// `x.shape[0].tensor()`.
pub(super) fn rows_tensor(s: &mut Scope, x: SlotId) -> Result<SlotId> {
    let n = batch_of(s, x)?;
    s.prim(Formula::ToTensor, ins![("input", n), ("dtype", Static::None)])
}

/// The number of distinct values of `x` (of `Unique(x).shape[0]`): the elements of the
/// flattened `x` equal to no earlier one, counted without a data-dependent shape.
pub(super) fn distinct_count(s: &mut Scope, x: SlotId) -> Result<SlotId> {
    let flat = s.prim(Formula::Flatten, ins![("input", x), ("start_dim", int(0)), ("end_dim", int(-1))])?;
    let n = batch_of(s, flat)?;
    let column = Static::tuple(vec![int(-1), int(1)]);
    let row = Static::tuple(vec![int(1), int(-1)]);
    let reshape = |s: &mut Scope, v: SlotId, shape: &Static| s.prim(Formula::Reshape, ins![("input", v), ("shape", shape.clone())]);
    let (xc, xr) = (reshape(s, flat, &column)?, reshape(s, flat, &row)?);
    let same = s.prim(Formula::Equal, ins![("left", xc), ("right", xr)])?;
    let idx = s.prim(Formula::Arange, ins![("stop", n), ("start", int(0)), ("step", int(1)), ("dtype", Static::None)])?;
    let (ic, ir) = (reshape(s, idx, &column)?, reshape(s, idx, &row)?);
    let earlier = s.prim(Formula::Less, ins![("left", ir), ("right", ic)])?;
    let repeat = s.prim(Formula::LogicalAnd, ins![("left", same), ("right", earlier)])?;
    let repeats = s.prim(Formula::ReduceSum, ins![("input", repeat), ("axis", int(1)), ("keepdim", Static::Bool(false))])?;
    let first = s.prim(Formula::Equal, ins![("left", repeats), ("right", int(0))])?;
    s.prim(Formula::ReduceSum, reduce_all(first))
}

/// Accuracy, Precision, Recall and F1 as models.py builds them on `Metric`.
/// Accuracy is `sum(metric == 0) / label.shape[0]`; the others by `average`:
/// - `micro`: `tp / (tp + fp)` with `tp = sum(metric == 0)`, `fp = sum(metric != 0)`
///   (the same for all three);
/// - `macro` and `weighted` (which need `n_classes`): per class `i < n_classes` the
///   score `tp_i / den_i` (`den_i` `tp_i + fp_i` for Precision, `tp_i + fn_i` for
///   Recall, `tp_i + 0.5 (fp_i + fn_i)` for F1, 1 where it is 0), summed and divided
///   by the number of distinct labels (`macro`; models.py's `Unique(label).shape[0]`),
///   or each times its class's count over `label.shape[0]`, summed (`weighted`).
pub(super) fn metric_model(s: &mut Scope, args: &Args, class: &str) -> Result<()> {
    let (diff, pred, label) = metric(s, args)?;
    let out = s.key("output");
    s.order(&["pred", "label", "output"]);
    let zero = int_tensor(0);
    let correct = s.prim(Formula::Equal, ins![("left", diff), ("right", zero.clone())])?;
    let sum = |s: &mut Scope, x: SlotId| s.prim(Formula::ReduceSum, reduce_all(x));
    if class == "Accuracy" {
        let right = sum(s, correct)?;
        let n = rows_tensor(s, label)?;
        return s.prim_into(Formula::Divide, ins![("numerator", right), ("denominator", n)], out);
    }
    let average = match args.get("average") {
        None => "micro".to_string(),
        Some(Value::String(a)) if ["micro", "macro", "weighted"].contains(&a.as_str()) => a.clone(),
        Some(v) => return Err(args.err(&format!("`average` must be one of 'micro', 'macro' and 'weighted', got {v}"))),
    };
    if average == "micro" {
        let wrong = s.prim(Formula::NotEqual, ins![("left", diff), ("right", zero)])?;
        let (tp, fp) = (sum(s, correct)?, sum(s, wrong)?);
        let den = s.prim(Formula::Add, ins![("left", tp), ("right", fp)])?;
        let r = s.prim(Formula::Divide, ins![("numerator", tp), ("denominator", den)])?;
        return s.prim_into(Formula::Buffer, ins![("input", r)], out);
    }
    let n_classes = args.opt_int("n_classes")?.ok_or_else(|| args.err(&format!("`n_classes` must be given for average '{average}'")))?;
    if n_classes == 0 {
        return Err(args.err(&format!("`n_classes` must be positive for average '{average}' (models.py leaves the model without an output)")));
    }
    let weighted = average == "weighted";
    let n = if weighted { Some(rows_tensor(s, label)?) } else { None };
    let mut total = None;
    for i in 0..n_classes as i64 {
        let class_i = s.prim(Formula::Equal, ins![("left", label), ("right", int_tensor(i))])?;
        let hit = s.prim(Formula::LogicalAnd, ins![("left", correct), ("right", class_i)])?;
        let tp = sum(s, hit)?;
        let false_positives = |s: &mut Scope| -> Result<SlotId> {
            let as_i = s.prim(Formula::Equal, ins![("left", pred), ("right", int_tensor(i))])?;
            let other = s.prim(Formula::LogicalNot, ins![("input", class_i)])?;
            let fp = s.prim(Formula::LogicalAnd, ins![("left", as_i), ("right", other)])?;
            sum(s, fp)
        };
        let false_negatives = |s: &mut Scope| -> Result<SlotId> {
            let not_i = s.prim(Formula::NotEqual, ins![("left", pred), ("right", int_tensor(i))])?;
            let fnn = s.prim(Formula::LogicalAnd, ins![("left", not_i), ("right", class_i)])?;
            sum(s, fnn)
        };
        let count = if weighted { Some(sum(s, class_i)?) } else { None };
        let den = match class {
            "Precision" => {
                let fp = false_positives(s)?;
                s.prim(Formula::Add, ins![("left", tp), ("right", fp)])?
            }
            "Recall" => {
                let fnn = false_negatives(s)?;
                s.prim(Formula::Add, ins![("left", tp), ("right", fnn)])?
            }
            _ => {
                let fp = false_positives(s)?;
                let fnn = false_negatives(s)?;
                let errors = s.prim(Formula::Add, ins![("left", fp), ("right", fnn)])?;
                let half = Static::Tensor(crate::tensor::Constant::scalar(Dtype::F64, 0.5));
                let h = s.prim(Formula::Multiplication, ins![("left", half), ("right", errors)])?;
                s.prim(Formula::Add, ins![("left", tp), ("right", h)])?
            }
        };
        let empty = s.prim(Formula::Equal, ins![("left", den), ("right", int_tensor(0))])?;
        let den = s.prim(Formula::Where, ins![("cond", empty), ("input1", int_tensor(1)), ("input2", den)])?;
        let mut score = s.prim(Formula::Divide, ins![("numerator", tp), ("denominator", den)])?;
        if let (Some(count), Some(n)) = (count, n) {
            let w = s.prim(Formula::Multiplication, ins![("left", score), ("right", count)])?;
            score = s.prim(Formula::Divide, ins![("numerator", w), ("denominator", n)])?;
        }
        total = Some(match total {
            None => score,
            Some(t) => s.prim(Formula::Add, ins![("left", t), ("right", score)])?,
        });
    }
    let total = total.expect("n_classes > 0");
    if weighted {
        return s.prim_into(Formula::Buffer, ins![("input", total)], out);
    }
    let distinct = distinct_count(s, label)?;
    s.prim_into(Formula::Divide, ins![("numerator", total), ("denominator", distinct)], out)
}
