//! Mithril's classic machine-learning models built from primitives: distances,
//! the norm modifier, MDS.

use super::*;

/// Mithril's `distance_matrix` primitive: `sum(|l_i - r_j| ** norm, axis=2)`.
/// Mithril's gradient for `norm` takes `0 ** norm * log(0)` as 0 (`nan_to_num` of
/// the log), so a zero difference is raised as 1 and its power masked back to 0
/// (the norm, from NormModifier, is at least 1).
pub(super) fn distance_matrix(s: &mut Scope, l: SlotId, r: SlotId, norm: SlotId) -> Result<SlotId> {
    let diff = s.prim(Formula::CartesianDiff, ins![("left", l), ("right", r)])?;
    let a = s.prim(Formula::Abs, ins![("input", diff)])?;
    let zero = s.prim(Formula::Equal, ins![("left", a), ("right", Static::Float(0.0))])?;
    let safe = s.prim(Formula::Where, ins![("cond", zero), ("input1", Static::Float(1.0)), ("input2", a)])?;
    let p = s.prim(Formula::Power, ins![("base", safe), ("exponent", norm)])?;
    let masked = s.prim(Formula::Where, ins![("cond", zero), ("input1", Static::Float(0.0)), ("input2", p)])?;
    s.prim(Formula::ReduceSum, ins![("input", masked), ("axis", int(2)), ("keepdim", Static::Bool(false))])
}

/// Mithril's `norm_modifier` primitive, which maps any norm into [1, 5]:
/// `4 * (1 - 2 * |((x - 1) % 8) / 8 - 0.5|) + 1`, Python's float `%` being
/// `a - 8 * floor(a / 8)`.
pub(super) fn norm_modifier(s: &mut Scope, x: SlotId) -> Result<SlotId> {
    let f = |v: f64| Static::Float(v);
    let a = s.prim(Formula::Subtract, ins![("left", x), ("right", f(1.0))])?;
    let q = s.prim(Formula::FloorDivide, ins![("numerator", a), ("denominator", f(8.0))])?;
    let q8 = s.prim(Formula::Multiplication, ins![("left", q), ("right", f(8.0))])?;
    let m = s.prim(Formula::Subtract, ins![("left", a), ("right", q8)])?;
    let d = s.prim(Formula::Divide, ins![("numerator", m), ("denominator", f(8.0))])?;
    let inner = s.prim(Formula::Subtract, ins![("left", d), ("right", f(0.5))])?;
    let ab = s.prim(Formula::Abs, ins![("input", inner)])?;
    let t = s.prim(Formula::Multiplication, ins![("left", ab), ("right", f(2.0))])?;
    let u = s.prim(Formula::Subtract, ins![("left", f(1.0)), ("right", t)])?;
    let v = s.prim(Formula::Multiplication, ins![("left", u), ("right", f(4.0))])?;
    s.prim(Formula::Add, ins![("left", v), ("right", f(1.0))])
}

/// MDSCore as models.py builds it (the stress `(sum |d - p| ** q / sum d ** q) ** (1/q)`
/// with `q = NormModifier(norm)`): with `exact` distances the predicted ones are first
/// raised to `1/q`; otherwise both are taken as already powered, `d ** (1/q)` and
/// `p ** (1/q)` compared and `sum d` the denominator. Every Power is `Power(robust)`,
/// the reciprocals `StableReciprocal`.
pub(super) fn mds_core(s: &mut Scope, d: SlotId, pd: SlotId, norm: SlotId, exact: bool, robust: bool, out: SlotId) -> Result<()> {
    let power = |s: &mut Scope, base: SlotId, exponent: SlotId| -> Result<SlotId> {
        let o = s.net.new_slot();
        power_into(s, base, exponent, robust, o)?;
        Ok(o)
    };
    let reciprocal = |s: &mut Scope, x: SlotId| {
        let t = Static::Named("STABLE_RECIPROCAL_THRESHOLD".into());
        s.prim(Formula::StableReciprocal, ins![("input", x), ("threshold", t)])
    };
    let q = norm_modifier(s, norm)?;
    let inv_q = reciprocal(s, q)?;
    let (num, den) = if exact {
        let p = power(s, pd, inv_q)?;
        let diff = s.prim(Formula::Subtract, ins![("left", d), ("right", p)])?;
        let a = s.prim(Formula::Abs, ins![("input", diff)])?;
        let pa = power(s, a, q)?;
        let num = s.prim(Formula::ReduceSum, reduce_all(pa))?;
        let pd2 = power(s, d, q)?;
        (num, s.prim(Formula::ReduceSum, reduce_all(pd2))?)
    } else {
        let p1 = power(s, d, inv_q)?;
        let p4 = power(s, pd, inv_q)?;
        let diff = s.prim(Formula::Subtract, ins![("left", p1), ("right", p4)])?;
        let a = s.prim(Formula::Abs, ins![("input", diff)])?;
        let pa = power(s, a, q)?;
        let num = s.prim(Formula::ReduceSum, reduce_all(pa))?;
        (num, s.prim(Formula::ReduceSum, reduce_all(d))?)
    };
    let inv_den = reciprocal(s, den)?;
    let m = s.prim(Formula::Multiplication, ins![("left", num), ("right", inv_den)])?;
    power_into(s, m, inv_q, robust, out)?;
    s.template(vec![(d, dims(&["N", "N"])), (pd, dims(&["N", "N"]))]);
    Ok(())
}

/// MDS as models.py's DistanceEncoder builds it: predicted distances are
/// `EncoderDistanceMatrix(get_final_distance=False)` of `coords` with itself (so
/// powered, hence `MDSCore(exact_distances=False)` unless `input_type` is
/// `"distances"`); for `"points"` the input's distances are computed the same way.
/// `predicted_coords` is a Buffer of `coords`.
pub(super) fn mds(s: &mut Scope, args: &Args) -> Result<()> {
    let dim = args.opt_int("prediction_dim")?;
    let input_type = match args.get("input_type") {
        None => "distances".to_string(),
        Some(Value::String(t)) => t.clone(),
        Some(v) => return Err(args.err(&format!("argument `input_type` must be a string, got {v}"))),
    };
    if !["distances", "powered_distances", "points"].contains(&input_type.as_str()) {
        return Err(args.err(&format!("input_type '{input_type}' is not one of 'distances', 'powered_distances' and 'points'")));
    }
    let (x, coords, norm) = (s.key("input"), s.key("coords"), s.key("norm"));
    let encoder_distances = |s: &mut Scope, v: SlotId| -> Result<SlotId> {
        let p = norm_modifier(s, norm)?;
        distance_matrix(s, v, v, p)
    };
    let d = if input_type == "points" { encoder_distances(s, x)? } else { x };
    let pd = encoder_distances(s, coords)?;
    let out = s.key("output");
    mds_core(s, d, pd, norm, input_type == "distances", true, out)?;
    let pc = s.key("predicted_coords");
    s.prim_into(Formula::Buffer, ins![("input", coords)], pc)?;
    s.template(vec![(coords, vec![TemplateDim::Any, dim.map_or(TemplateDim::Any, known)])]);
    s.order(&["input", "coords", "norm", "predicted_coords", "output"]);
    Ok(())
}
