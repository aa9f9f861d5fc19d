//! Sliding-window kernels: convolution and pooling over the trailing spatial dimensions,
//! with any number of spatial dimensions, stride, zero padding and dilation.
//!
//! Both are written as "for each output position, visit the kernel taps that land inside
//! the input": a tap in the padding contributes nothing, which is exactly zero padding
//! for convolution and average pooling, and "padding never wins" for max pooling.

use super::elementwise::max_nan;
use super::index::{broadcast_strides, numel, unravel, Offsets};
use crate::ir::{ConvAttrs, PoolAttrs, PoolKind};
use crate::tensor::{strides, Tensor};

/// The geometry of one sliding window over an input of spatial shape `input`.
struct Window<'a> {
    input: &'a [u64],
    stride: &'a [u64],
    padding: &'a [(u64, u64)],
    dilation: &'a [u64],
    /// The multi-index of every kernel position, in row-major order.
    kernel_positions: Vec<Vec<usize>>,
    input_strides: Vec<usize>,
}

impl<'a> Window<'a> {
    fn new(input: &'a [u64], kernel: &[u64], stride: &'a [u64], padding: &'a [(u64, u64)], dilation: &'a [u64]) -> Window<'a> {
        Window {
            input,
            stride,
            padding,
            dilation,
            kernel_positions: (0..numel(kernel)).map(|i| unravel(i, kernel)).collect(),
            input_strides: strides(input),
        }
    }

    /// Fills `taps` with `(kernel position, input offset)` for every kernel position
    /// that falls inside the (unpadded) input when the window sits at output index `at`.
    fn taps(&self, at: &[usize], taps: &mut Vec<(usize, usize)>) {
        taps.clear();
        'kernel: for (kflat, kidx) in self.kernel_positions.iter().enumerate() {
            let mut offset = 0;
            for d in 0..self.input.len() {
                // Coordinate in the padded input, then shifted back by the leading pad.
                let padded = at[d] as u64 * self.stride[d] + kidx[d] as u64 * self.dilation[d];
                let Some(c) = padded.checked_sub(self.padding[d].0) else { continue 'kernel };
                if c >= self.input[d] {
                    continue 'kernel;
                }
                offset += c as usize * self.input_strides[d];
            }
            taps.push((kflat, offset));
        }
    }
}

/// Cross-correlation (no kernel flip): input `[N, C, spatial...]`, weight
/// `[O, C/groups, kernel...]`, optional bias broadcast onto the output `out`.
/// Output channel `o` belongs to group `o / (O/groups)` and sees only that group's
/// `C/groups` input channels.
pub fn conv(attrs: &ConvAttrs, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, out: &[u64]) -> Vec<f64> {
    let (batch, channels) = (x.shape[0] as usize, x.shape[1] as usize);
    let (out_channels, group_channels) = (w.shape[0] as usize, w.shape[1] as usize);
    // The shape rule guarantees groups > 0 and divides both channel counts.
    let per_group = out_channels / attrs.groups as usize;
    let window = Window::new(&x.shape[2..], &w.shape[2..], &attrs.stride, &attrs.padding, &attrs.dilation);
    let (in_size, k_size, out_size) = (numel(&x.shape[2..]), numel(&w.shape[2..]), numel(&out[2..]));

    let mut result = vec![0.0; numel(out)];
    if result.is_empty() {
        return result; // an empty batch: its positions may still be many
    }
    let mut taps = Vec::new();
    for pos in 0..out_size {
        window.taps(&unravel(pos, &out[2..]), &mut taps);
        for b in 0..batch {
            for o in 0..out_channels {
                let group = o / per_group;
                let mut acc = 0.0;
                for ci in 0..group_channels {
                    let xbase = (b * channels + group * group_channels + ci) * in_size;
                    let wbase = (o * group_channels + ci) * k_size;
                    for &(k, at) in &taps {
                        acc += x.data[xbase + at] * w.data[wbase + k];
                    }
                }
                result[(b * out_channels + o) * out_size + pos] = acc;
            }
        }
    }
    if let Some(bias) = bias {
        let offsets = Offsets::new(out, 0, &broadcast_strides(&bias.shape, out));
        for (v, i) in result.iter_mut().zip(offsets) {
            *v += bias.data[i];
        }
    }
    result
}

/// Max or average pooling over the trailing `kernel.len()` dimensions of `x`; every
/// leading dimension (batch, channel) is an independent plane.
///
/// Max pooling treats padding as -infinity, so it never wins (PyTorch); a window lying
/// wholly in the padding would give -infinity, which PyTorch forbids by requiring
/// padding <= kernel/2. Average pooling divides by the whole kernel size, padded zeros
/// included (PyTorch's default `count_include_pad=True`, and Mithril's NumPy backend).
pub fn pool(attrs: &PoolAttrs, x: &Tensor, out: &[u64]) -> Vec<f64> {
    let lead = x.rank() - attrs.kernel.len();
    let planes = numel(&x.shape[..lead]);
    let (in_size, out_size) = (numel(&x.shape[lead..]), numel(&out[lead..]));
    let window = Window::new(&x.shape[lead..], &attrs.kernel, &attrs.stride, &attrs.padding, &attrs.dilation);
    let kernel_size = numel(&attrs.kernel) as f64;

    let mut result = vec![0.0; numel(out)];
    if result.is_empty() {
        return result; // no planes: their positions may still be many
    }
    let mut taps = Vec::new();
    for pos in 0..out_size {
        window.taps(&unravel(pos, &out[lead..]), &mut taps);
        for p in 0..planes {
            let values = taps.iter().map(|&(_, at)| x.data[p * in_size + at]);
            result[p * out_size + pos] = match attrs.kind {
                PoolKind::Max => values.fold(f64::NEG_INFINITY, max_nan),
                PoolKind::Avg => values.sum::<f64>() / kernel_size,
            };
        }
    }
    result
}
