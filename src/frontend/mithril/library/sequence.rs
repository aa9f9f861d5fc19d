//! Mithril's recurrent models built from primitives: RNN and LSTM cells, their
//! unrolling over a static sequence length (OneToMany, ManyToOne, EncoderDecoder), and
//! positional encodings.

use super::*;

/// The keys a recurrent cell class shares across time steps and the states it
/// passes on (`shared_keys`, `state_keys` in models.py), its output being `output`.
pub(super) fn cell_keys(class: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    match class {
        "RNNCell" => Some((&["w_ih", "w_hh", "w_ho", "bias_h", "bias_o"], &["hidden"])),
        "LSTMCell" => {
            Some((&["w_f", "w_i", "w_o", "w_c", "w_out", "bias_f", "bias_i", "bias_o", "bias_c", "bias_out"], &["hidden", "cell"]))
        }
        _ => None,
    }
}

/// OneToMany and ManyToOne as models.py unrolls them over `max_sequence_length`
/// copies of `cell_type`, which share its weights (keys of the same names) and pass
/// their states on (`prev_<state>` of step 0 is `initial_<state>`); step `i` writes
/// `output<i>`.
/// - OneToMany: step 0 reads `input`; step `i` reads the first `target<i>.shape[0]`
///   rows of step `i-1`'s output (of `target<i-1>` with `teacher_forcing`).
/// - ManyToOne: step `i` reads `input<i>`; `hidden_concat` stacks (axis 0) each later
///   step's `hidden_compl` and the last step's `hidden` before its `hidden_compl`.
pub(super) fn unrolled(s: &mut Scope, args: &Args, one_to_many: bool) -> Result<()> {
    let cell = args.model("cell_type")?;
    let (shared, states) =
        cell_keys(&cell.class).ok_or_else(|| args.err(&format!("`cell_type` must be RNNCell or LSTMCell, got {}", cell.class)))?;
    let steps = args.value("max_sequence_length")?.as_int().filter(|&n| n >= 2).ok_or_else(|| {
        args.err("`max_sequence_length` must be an integer of at least 2 (models.py leaves a shorter model without an output)")
    })?;
    let teacher_forcing = args.bool_or("teacher_forcing", false)?;
    // Values given for the model's own keys (models.py's `**kwargs`).
    let own = |s: &mut Scope, name: &str| -> Result<SlotId> {
        let k = s.key(name);
        if args.get(name).is_some() {
            s.set_value(k, args.value(name)?, name)?;
        }
        Ok(k)
    };
    let mut prev: Option<Keys> = None;
    let mut concat = Vec::new();
    for i in 0..steps {
        let keys = s.instantiate(&cell)?;
        let key = |k: &str| keys.get(k).copied().ok_or_else(|| Error::internal(format!("{} has no key `{k}`", cell.class)));
        let input = match (&prev, one_to_many) {
            (None, true) => own(s, "input")?,
            (_, false) => own(s, &format!("input{i}"))?,
            (Some(p), true) => {
                let target = s.key(&format!("target{i}"));
                let n = batch_of(s, target)?;
                let from = if teacher_forcing { s.key(&format!("target{}", i - 1)) } else { p["output"] };
                rows(s, from, None, Some(n))?
            }
        };
        s.union(input, key("input")?)?;
        for k in shared {
            let o = own(s, k)?;
            s.union(o, key(k)?)?;
        }
        for st in states {
            let from = match &prev {
                None => own(s, &format!("initial_{st}"))?,
                Some(p) => p[*st],
            };
            s.union(from, key(&format!("prev_{st}"))?)?;
        }
        let out = s.key(&format!("output{i}"));
        s.union(key("output")?, out)?;
        if !one_to_many && i > 0 {
            if i + 1 == steps {
                concat.push(key("hidden")?);
            }
            concat.push(key("hidden_compl")?);
        }
        prev = Some(keys);
    }
    if !one_to_many {
        let names: Vec<String> = (1..=concat.len()).map(|j| format!("input{j}")).collect();
        let list = s.prim(Formula::ToList, names.iter().zip(&concat).map(|(k, &c)| (k.as_str(), In::Slot(c))).collect())?;
        let out = s.key("hidden_concat");
        s.prim_into(Formula::Concat, ins![("input", list), ("axis", int(0))], out)?;
    }
    Ok(())
}

/// EncoderDecoder as models.py builds it: a `ManyToOne` encoder over
/// `max_input_sequence_length` steps (its keys keep their names: `input<i>`,
/// `initial_<state>`, the cell's weights), `PermuteTensor(hidden_concat, indices)` as
/// the decoder's `initial_hidden`, and a `OneToMany` decoder over
/// `max_target_sequence_length` steps (with `teacher_forcing`) whose keys are prefixed
/// `decoder_` (`decoder_input`, `decoder_w_ih`, ...) except `target<i>` and its
/// outputs `output<i>`, the model's outputs.
pub(super) fn encoder_decoder(s: &mut Scope, args: &Args) -> Result<()> {
    let cell = args.get("cell_type").cloned().ok_or_else(|| args.err("argument `cell_type` is missing"))?;
    // The encoder and decoder are named as models.py names its locals.
    let mut part = |class: &str, length: &str, name: &str, extra: Value| -> Result<Keys> {
        let steps = args.value(length)?.as_int().filter(|&n| n >= 2).ok_or_else(|| {
            args.err(&format!("`{length}` must be an integer of at least 2 (models.py leaves a shorter {class} without an output)"))
        })?;
        let mut node_args = serde_json::json!({"cell_type": cell.clone(), "max_sequence_length": steps});
        if let (Value::Object(a), Value::Object(e)) = (&mut node_args, extra) {
            a.extend(e);
        }
        let path = if args.node.path.is_empty() { name.to_string() } else { format!("{}.{name}", args.node.path) };
        let node = json::parse_value(&serde_json::json!({"name": class, "args": node_args}), &path)?;
        s.instantiate(&node)
    };
    let encoder = part("ManyToOne", "max_input_sequence_length", "encoder", serde_json::json!({}))?;
    let teacher_forcing = args.bool_or("teacher_forcing", false)?;
    let decoder = part("OneToMany", "max_target_sequence_length", "decoder", serde_json::json!({"teacher_forcing": teacher_forcing}))?;
    let mut hidden_concat = None;
    for (k, slot) in &encoder {
        if k == "hidden_concat" {
            hidden_concat = Some(*slot);
        } else if !k.starts_with('$') && !is_step_output(k) {
            let own = s.key(k);
            s.union(*slot, own)?;
        }
    }
    let hidden_concat = hidden_concat.ok_or_else(|| Error::internal("ManyToOne has no `hidden_concat`"))?;
    let indices = s.key("indices");
    if args.get("indices").is_some() {
        s.set_value(indices, args.value("indices")?, "indices")?;
    }
    let initial = s.prim(Formula::PermuteTensor, ins![("input", hidden_concat), ("indices", indices)])?;
    for (k, slot) in &decoder {
        if k.starts_with('$') {
            continue;
        }
        let own = match k.as_str() {
            "initial_hidden" => initial,
            k if is_step_output(k) || k.contains("target") => s.key(k),
            k => s.key(&format!("decoder_{k}")),
        };
        s.union(*slot, own)?;
    }
    Ok(())
}

/// PositionalEncoding as Mithril's (Torch-only) `positional_encoding` computes it:
/// `input + pe[None, :L]` (`L = input.shape[1]`) with `pe[p, 2k] = sin(p * w_k)`,
/// `pe[p, 2k+1] = cos(p * w_k)`, `w_k = exp(2k * -(ln 10000 / hidden_dim))`, all in
/// float32 (Torch's default dtype, which Mithril leaves alone), then cast to the input's
/// dtype as the sum promotes it. Only the first `min(L, max_len)` positions are built;
/// `L > max_len` fails to broadcast, as in Torch.
pub(super) fn positional_encoding(s: &mut Scope, args: &Args) -> Result<()> {
    let hidden = args.value("hidden_dim")?.as_int().filter(|h| *h > 0 && h % 2 == 0).ok_or_else(|| {
        args.err("`hidden_dim` must be a positive even integer (Torch's `pe[:, 1::2] = cos(...)` fails for an odd one)")
    })?;
    let hk = s.key("hidden_dim");
    s.set_value(hk, int(hidden), "hidden_dim")?;
    let max_len = arg_key(s, args, "max_len", Some(int(5000)))?;
    let x = s.key("input");
    let f32 = || Static::Str("float32".into());
    let shape = s.prim(Formula::Shape, ins![("input", x)])?;
    let len = s.prim(Formula::Indexer, ins![("input", shape), ("index", int(1))])?;
    let all = s.prim(Formula::Arange, ins![("stop", max_len), ("start", int(0)), ("step", int(1)), ("dtype", Static::None)])?;
    let positions = rows(s, all, None, Some(len))?;
    let pf = s.prim(Formula::Cast, ins![("input", positions), ("dtype", f32())])?;
    let column = s.prim(Formula::Reshape, ins![("input", pf), ("shape", Static::tuple(vec![int(-1), int(1)]))])?;
    let k2 = s.prim(Formula::Arange, ins![("stop", int(hidden)), ("start", int(0)), ("step", int(2)), ("dtype", Static::None)])?;
    let k2f = s.prim(Formula::Cast, ins![("input", k2), ("dtype", f32())])?;
    // `-torch.log(torch.tensor(10000.0)) / hidden_dim`, a float32 scalar.
    let rate = -(10000f32.ln()) / hidden as f32;
    let scaled = s.prim(Formula::Multiplication, ins![("left", k2f), ("right", Static::Float(f64::from(rate)))])?;
    let w = s.prim(Formula::Exp, ins![("input", scaled)])?;
    let angles = s.prim(Formula::Multiplication, ins![("left", column), ("right", w)])?;
    let half = Static::tuple(vec![int(-1), int(hidden / 2), int(1)]);
    let sin = s.prim(Formula::Sin, ins![("input", angles)])?;
    let sin3 = s.prim(Formula::Reshape, ins![("input", sin), ("shape", half.clone())])?;
    let cos = s.prim(Formula::Cos, ins![("input", angles)])?;
    let cos3 = s.prim(Formula::Reshape, ins![("input", cos), ("shape", half)])?;
    let pair = s.prim(Formula::ToList, ins![("input1", sin3), ("input2", cos3)])?;
    let interleaved = s.prim(Formula::Concat, ins![("input", pair), ("axis", int(-1))])?;
    let pe = s.prim(Formula::Reshape, ins![("input", interleaved), ("shape", Static::tuple(vec![int(1), int(-1), int(hidden)]))])?;
    let dtype = s.prim(Formula::Dtype, ins![("input", x)])?;
    let pe = s.prim(Formula::Cast, ins![("input", pe), ("dtype", dtype)])?;
    let out = s.key("output");
    s.prim_into(Formula::Add, ins![("left", x), ("right", pe)], out)?;
    s.order(&["input", "hidden_dim", "max_len", "output"]);
    Ok(())
}

/// A recurrent cell's `[first, 1, last]` template (one time step).
pub(super) fn cell_dims(first: &str, last: &str) -> Vec<TemplateDim> {
    vec![sym(first), known(1), sym(last)]
}

/// `x[start:stop]` along the first axis, the bounds slots or `None`.
pub(super) fn rows(s: &mut Scope, x: SlotId, start: Option<SlotId>, stop: Option<SlotId>) -> Result<SlotId> {
    let bound = |b: Option<SlotId>| b.map_or(In::Const(Static::None), In::Slot);
    let sl = s.prim(Formula::Slice, vec![("start", bound(start)), ("stop", bound(stop)), ("step", In::Const(Static::None))])?;
    s.prim(Formula::Indexer, ins![("input", x), ("index", sl)])
}

/// `input.shape[0]`: the batch a recurrent cell steps, whose first rows of the
/// previous state it reads (the rest pass on as `hidden_compl`).
pub(super) fn batch_of(s: &mut Scope, x: SlotId) -> Result<SlotId> {
    let shape = s.prim(Formula::Shape, ins![("input", x)])?;
    s.prim(Formula::Indexer, ins![("input", shape), ("index", int(0))])
}

/// RNNCell as models.py builds it: `hidden = tanh(h[:N] w_hh^T + x w_ih^T + bias_h)`,
/// `output = hidden w_ho^T + bias_o`, `hidden_compl = h[N:]`.
pub(super) fn rnn_cell(s: &mut Scope) -> Result<()> {
    let x = s.key("input");
    let n = batch_of(s, x)?;
    let h = s.key("prev_hidden");
    let compl = rows(s, h, Some(n), None)?;
    let hc = s.key("hidden_compl");
    s.union(compl, hc)?;
    let h0 = rows(s, h, None, Some(n))?;
    let m1 = linear(s, h0, None, false, "w_hh", "")?;
    let m2 = linear(s, x, None, false, "w_ih", "")?;
    let a1 = s.prim(Formula::Add, ins![("left", m1), ("right", m2)])?;
    let bh = s.param("bias_h");
    let a2 = s.prim(Formula::Add, ins![("left", a1), ("right", bh)])?;
    let hidden = s.key("hidden");
    s.prim_into(Formula::Tanh, ins![("input", a2)], hidden)?;
    let m3 = linear(s, hidden, None, false, "w_ho", "")?;
    let bo = s.param("bias_o");
    let out = s.key("output");
    s.prim_into(Formula::Add, ins![("left", m3), ("right", bo)], out)?;
    let (wih, whh, who) = (s.key("w_ih"), s.key("w_hh"), s.key("w_ho"));
    s.template(vec![
        (x, cell_dims("N", "d_in")),
        (h, cell_dims("M", "d_hid")),
        (wih, dims(&["d_hid", "d_in"])),
        (whh, dims(&["d_hid", "d_hid"])),
        (who, dims(&["d_out", "d_hid"])),
        (bh, dims(&["d_hid"])),
        (bo, dims(&["d_out"])),
    ]);
    s.order(&["input", "prev_hidden", "hidden_compl", "w_hh", "w_ih", "bias_h", "hidden", "w_ho", "bias_o", "output"]);
    Ok(())
}

/// LSTMCell as models.py builds it: the body on the first N rows of the previous
/// hidden and cell states, its output split into `cell` (first N rows) and `hidden`,
/// and `output = Linear(hidden)` with `w_out`, `bias_out`.
pub(super) fn lstm_cell(s: &mut Scope) -> Result<()> {
    let x = s.key("input");
    let n = batch_of(s, x)?;
    let (c, h) = (s.key("prev_cell"), s.key("prev_hidden"));
    let c0 = rows(s, c, None, Some(n))?;
    let h0 = rows(s, h, None, Some(n))?;
    let body = lstm_body(s, x, h0, c0)?;
    let hidden = rows(s, body, Some(n), None)?;
    let hk = s.key("hidden");
    s.union(hidden, hk)?;
    let cell = rows(s, body, None, Some(n))?;
    let ck = s.key("cell");
    s.union(cell, ck)?;
    let compl = rows(s, h, Some(n), None)?;
    let hc = s.key("hidden_compl");
    s.union(compl, hc)?;
    let y = linear(s, hk, None, true, "w_out", "bias_out")?;
    let out = s.key("output");
    s.union(y, out)?;
    let mut shapes = vec![
        (x, cell_dims("N", "d_in")),
        (h, cell_dims("M", "d_hid")),
        (c, cell_dims("M", "d_hid")),
        (hk, cell_dims("N", "d_hid")),
        (ck, cell_dims("N", "d_hid")),
    ];
    for w in ["w_i", "w_f", "w_c", "w_o"] {
        let k = s.key(w);
        shapes.push((k, dims(&["d_hid", "d_sum"])));
    }
    s.template(shapes);
    Ok(())
}

/// LSTMCellBody: gates from `concat([input, prev_hidden], -1)`; its output stacks the
/// new cell state over the new hidden state (`concat(axis=0)`).
pub(super) fn lstm_body(s: &mut Scope, x: SlotId, h: SlotId, c: SlotId) -> Result<SlotId> {
    let list = s.prim(Formula::ToList, ins![("input1", x), ("input2", h)])?;
    let cat = s.prim(Formula::Concat, ins![("input", list), ("axis", int(-1))])?;
    let gate = |s: &mut Scope, w: &str, b: &str, f: Formula| -> Result<SlotId> {
        let y = linear(s, cat, None, true, w, b)?;
        s.prim(f, ins![("input", y)])
    };
    let forget = gate(s, "w_f", "bias_f", Formula::Sigmoid)?;
    let m1 = s.prim(Formula::Multiplication, ins![("left", c), ("right", forget)])?;
    let input_gate = gate(s, "w_i", "bias_i", Formula::Sigmoid)?;
    let candidate = gate(s, "w_c", "bias_c", Formula::Tanh)?;
    let m2 = s.prim(Formula::Multiplication, ins![("left", input_gate), ("right", candidate)])?;
    let cell = s.prim(Formula::Add, ins![("left", m1), ("right", m2)])?;
    let t = s.prim(Formula::Tanh, ins![("input", cell)])?;
    let out_gate = gate(s, "w_o", "bias_o", Formula::Sigmoid)?;
    let hidden = s.prim(Formula::Multiplication, ins![("left", t), ("right", out_gate)])?;
    let both = s.prim(Formula::ToList, ins![("input1", cell), ("input2", hidden)])?;
    s.prim(Formula::Concat, ins![("input", both), ("axis", int(0))])
}
