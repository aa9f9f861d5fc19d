//! Attention: a matrix product whose every score goes through a softmax along its last
//! axis into a second matrix product, `softmax(score(q @ k)) @ v`, becomes one
//! [`Kernel::Attention`] where the target's library computes it. The scores and the
//! probabilities are then never stored: the m x n matrices (per head) leave the
//! arena, and the kernel runs the softmax online over tiles of keys.
//!
//! The heads' outputs are usually transposed next (`[batch, head, m, e]` to `[batch,
//! m, head, e]`) by a copy; the attention then stores its output there directly.
//!
//! Runs after `fuse`, which has made the scaling and the mask the first product's
//! epilogue (that epilogue becomes the attention's score), and before `memory`. The
//! pattern is left alone when anything else reads the scores or the probabilities (a
//! backward pass does), when the second product has an epilogue, or when the head
//! dimensions exceed the library's.
//!
//! Relies on lowering's invariant that each arena buffer has one writer.

use crate::error::Result;
use crate::lower::*;

pub fn run(p: &mut Program, library: &Library) -> Result<()> {
    if library.attention.is_empty() {
        return Ok(());
    }
    while let Some((first, softmax, second)) = find(p, library) {
        fuse(p, first, softmax, second);
        store_through_copy(p, second - 2);
    }
    p.sweep_buffers();
    Ok(())
}

/// The next (first product, softmax, second product) steps that form an attention.
fn find(p: &Program, library: &Library) -> Option<(usize, usize, usize)> {
    let mut uses = vec![0usize; p.buffers.len()];
    for step in &p.steps {
        for b in kernel_read_uses(&step.kernel) {
            uses[b.0] += 1;
        }
    }
    let writer = |b: BufId| p.steps.iter().position(|s| kernel_writes(&s.kernel) == b);
    let reader = |b: BufId| p.steps.iter().position(|s| kernel_read_uses(&s.kernel).contains(&b));
    let arena = |b: BufId| matches!(p.buffers[b.0].storage, Storage::Arena { .. });
    p.steps.iter().enumerate().find_map(|(i, step)| {
        let Kernel::Softmax { x, out: probs, axis } = &step.kernel else { return None };
        let first = writer(x.buf)?;
        let second = reader(probs.buf)?;
        let Kernel::Gemm { a: q, b: k, c: scores, epilogue, scratch: None } = &p.steps[first].kernel else { return None };
        let Kernel::Gemm { a: pv, b: v, c: out, epilogue: None, scratch: None } = &p.steps[second].kernel else { return None };
        let r = scores.shape.len();
        // The first product's epilogue reads its own result once per element.
        let own = epilogue.as_ref().map_or(0, |e| {
            let mut read = Vec::new();
            expr_bufs(e, &mut read);
            read.iter().filter(|&&b| b == scores.buf).count()
        });
        let dtypes = [q, k, v, out, scores].map(|v| p.buffers[v.buf.0].dtype);
        let ok = *axis == r - 1
            && x == scores
            && pv == probs
            && p.is_whole(scores)
            && p.is_whole(probs)
            && arena(scores.buf)
            && arena(probs.buf)
            // nothing else reads the scores or the probabilities
            && uses[scores.buf.0] == 1 + own
            && uses[probs.buf.0] == 1
            && dtypes.iter().all(|d| library.attention.contains(d))
            && q.shape[r - 1] <= library.attention_dim
            && out.shape[r - 1] <= library.attention_dim;
        ok.then_some((first, i, second))
    })
}

/// Replaces the three steps with one attention at the second product's place, the
/// scores' buffer becoming local.
fn fuse(p: &mut Program, first: usize, softmax: usize, second: usize) {
    let Kernel::Gemm { a: q, b: k, c: scores, epilogue, .. } = p.steps[first].kernel.clone() else { unreachable!("found by `find`") };
    let Kernel::Gemm { b: v, c: out, .. } = p.steps[second].kernel.clone() else { unreachable!("found by `find`") };
    let r = scores.shape.len();
    p.buffers[scores.buf.0].storage = Storage::Local;
    // The domain is the scores' [batch..., m, n], then d (the first product's length)
    // and e (the second's width).
    let (one, two) = (&p.steps[first], &p.steps[second]);
    let dims = one.dims[..=r].iter().chain([&two.dims[r - 1]]).cloned().collect();
    let origins = [first, softmax, second].iter().flat_map(|&s| p.steps[s].origins.clone()).collect();
    p.steps[second] = Step { kernel: Kernel::Attention { q, k, v, out, scores, score: epilogue }, origins, dims };
    p.steps.remove(softmax);
    p.steps.remove(first);
}

/// When the only reader of attention `at`'s output is a copy that permutes its
/// dimensions (the heads' transpose), the attention writes the copy's buffer through
/// the permuted strides instead, and the copy goes.
fn store_through_copy(p: &mut Program, at: usize) {
    let Kernel::Attention { out, .. } = &p.steps[at].kernel else { return };
    let b = out.buf;
    if !matches!(p.buffers[b.0].storage, Storage::Arena { .. }) {
        return;
    }
    let readers: Vec<usize> = (0..p.steps.len()).filter(|&s| kernel_read_uses(&p.steps[s].kernel).contains(&b)).collect();
    let [copy] = readers[..] else { return };
    let Kernel::Map { out: to, expr: Expr::Load { view: from, vars } } = &p.steps[copy].kernel else { return };
    if from.buf != b || from.offset != 0 || !p.is_whole(to) || p.buffers[to.buf.0].dtype != p.buffers[b.0].dtype || p.buffers[to.buf.0].len != p.buffers[b.0].len {
        return;
    }
    // Element `o` of the output is at Σ o_k * dense_k in its buffer; the copy reads
    // that element at the point where the dimension of `from` with stride dense_k is
    // o_k, and stores it at Σ of that point's indices times the copy's strides.
    let dense = contiguous_strides(&out.shape);
    let to_strides = contiguous_strides(&to.shape);
    let mut strides = vec![0i64; out.shape.len()];
    let mut taken = vec![false; from.shape.len()];
    for k in (0..out.shape.len()).filter(|&k| out.shape[k] > 1) {
        let Some(d) = (0..from.shape.len()).find(|&d| !taken[d] && from.strides[d] == dense[k] && from.shape[d] == out.shape[k] && vars[d] < to.shape.len()) else { return };
        taken[d] = true;
        strides[k] = to_strides[vars[d]];
    }
    // Every dimension of the copy that is more than 1 reads one of the output's.
    if (0..from.shape.len()).any(|d| from.shape[d] > 1 && !taken[d]) {
        return;
    }
    let (to, origins) = (to.buf, p.steps[copy].origins.clone());
    let Kernel::Attention { out, .. } = &mut p.steps[at].kernel else { unreachable!("matched above") };
    *out = View { buf: to, shape: out.shape.clone(), strides, offset: 0 };
    p.steps[at].origins.extend(origins);
    p.steps.remove(copy);
}
