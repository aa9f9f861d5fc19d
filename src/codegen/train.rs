//! Where a training step keeps things, for every target that writes one: the backward
//! pass's outputs in the arena after its own buffers, and each trained parameter's
//! velocity in the caller's optimizer state. The step is the backward pass, then SGD
//! with momentum on each parameter, in place in the weights blob.

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::lower::{align, Layout, Program, Storage};

/// Where `<name>_train_step` keeps things: the backward pass's outputs in the arena
/// after the backward pass's own buffers, and one velocity per trained parameter in the
/// caller's optimizer state.
pub struct TrainLayout {
    /// The loss among the backward pass's outputs.
    pub loss: usize,
    /// The arena offset of each backward output.
    pub outputs: Vec<u64>,
    /// The arena the step needs.
    pub arena_size: u64,
    pub updates: Vec<Update>,
    pub state_size: u64,
    /// The loss's type: the step's learning rate, momentum and result have it.
    pub scalar: Dtype,
}

/// One parameter's SGD update.
pub struct Update {
    pub name: String,
    /// Its offset in the weights blob, in bytes.
    pub offset: u64,
    /// The index of its gradient among the backward pass's outputs.
    pub grad: usize,
    /// The offset of its velocity in the optimizer state, in bytes.
    pub state: u64,
    pub len: u64,
    /// The parameter's (and its gradient's and velocity's) type: f32 or f64.
    pub dtype: Dtype,
}

impl TrainLayout {
    /// The training step of `forward` with `backward` (from `--grad`), if any.
    pub fn of(forward: &Program, backward: Option<&Program>) -> Result<Option<TrainLayout>> {
        backward.map_or(Ok(None), |b| TrainLayout::new(forward, b))
    }

    /// `None` when the backward pass has no loss to descend.
    pub fn new(forward: &Program, backward: &Program) -> Result<Option<TrainLayout>> {
        // One blob serves both passes (and the step updates it in place).
        let same = |a: &crate::lower::Port, b: &crate::lower::Port| {
            a.name == b.name && a.shape == b.shape && a.layout == b.layout && forward.buffers[a.buf.0].storage == backward.buffers[b.buf.0].storage
        };
        if forward.weights.len() != backward.weights.len() || !forward.weights.iter().zip(&backward.weights).all(|(a, b)| same(a, b)) {
            return Err(Error::internal("the forward and backward programs lay out the weights differently"));
        }
        let Some(loss) = backward.loss else { return Ok(None) };
        let mut outputs = Vec::new();
        let mut cursor = align(backward.arena_size);
        for port in &backward.outputs {
            outputs.push(cursor);
            let bytes = port.shape.iter().product::<u64>() * backward.buffers[port.buf.0].dtype.size() as u64;
            cursor = align(cursor + bytes);
        }
        // Each weight's gradient among the outputs, found by name (not by a scan per weight).
        let output_index: std::collections::HashMap<&str, usize> = backward.outputs.iter().enumerate().rev().map(|(i, o)| (o.name.as_str(), i)).collect();
        let mut updates = Vec::new();
        let mut state = 0;
        for w in &backward.weights {
            let Some(&grad) = output_index.get(crate::passes::autodiff::grad_name(&w.name).as_str()) else { continue };
            let buf = &backward.buffers[w.buf.0];
            if !matches!(buf.dtype, Dtype::F32 | Dtype::F64) || backward.buffers[backward.outputs[grad].buf.0].dtype != buf.dtype {
                return Err(Error::user(format!("the training step updates f32 and f64 parameters only; `{}` is {}", w.name, buf.dtype)));
            }
            let (Storage::Weight { offset }, Layout::RowMajor) = (&buf.storage, w.layout) else {
                return Err(Error::internal(format!("trained parameter `{}` is not a row-major weight", w.name)));
            };
            let len = w.shape.iter().product::<u64>();
            updates.push(Update { name: w.name.clone(), offset: *offset, grad, state, len, dtype: buf.dtype });
            state = align(state + len * buf.dtype.size() as u64);
        }
        let scalar = backward.buffers[backward.outputs[loss].buf.0].dtype;
        if !matches!(scalar, Dtype::F32 | Dtype::F64) {
            return Err(Error::user(format!("the training step descends an f32 or f64 loss; `{}` is {scalar}", backward.outputs[loss].name)));
        }
        Ok(Some(TrainLayout { loss, outputs, arena_size: cursor, updates, state_size: state, scalar }))
    }
}
