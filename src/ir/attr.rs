//! How op attributes are written in the text form of the IR and read back: one impl per
//! attribute type, which the printer and parser that `ops!` makes for every op call.
//!
//! An attribute is written `key = value` inside a node's `{...}`, the key being the
//! field's name; [`Attr`] writes and reads the value. Fields marked `#[node]` in the op
//! table are not written that way ([`NodeAttr`]): a shape or element type that is the
//! node's own type, and a constant's values.

use super::parse::{find_attr, items};
use super::{ConstId, Dtype, Graph, Shape, SliceRange, TensorType};
use crate::tensor::Tensor;

/// An attribute's value: what follows `key = ` in the text form.
pub trait Attr: Sized {
    fn print(&self) -> String;
    fn parse(text: &str) -> Result<Self, String>;
    /// The value the ops of [`super::Op::catalogue`] carry (zero, false, empty).
    fn example() -> Self;
}

/// A field the text form takes from the node instead of writing it `key = value`.
pub trait NodeAttr: Sized {
    /// The `key = value` item to write, if any.
    fn print(&self, graph: &Graph) -> Option<String>;
    fn parse(cx: &mut ParseCx) -> Result<Self, String>;
    /// The value the ops of [`super::Op::catalogue`] carry.
    fn example() -> Self;
}

/// What [`super::Op::parse`] reads an op from: one node's line of the text form.
pub struct ParseCx<'a> {
    /// The op's name.
    pub op: &'a str,
    /// The text between the node's `{` and `}` (empty when it has none).
    pub attrs: &'a str,
    /// The node's type.
    pub ty: &'a TensorType,
    /// The graph the node is added to (a constant's values are added to it too).
    pub graph: &'a mut Graph,
}

impl<'a> ParseCx<'a> {
    /// The text of attribute `key`.
    pub fn attr(&self, key: &str) -> Result<&'a str, String> {
        find_attr(self.attrs, key).ok_or(format!("{} needs `{key} = ...`", self.op))
    }
}

macro_rules! numbers {
    ($($t:ty: $what:literal),*) => {$(
        impl Attr for $t {
            fn print(&self) -> String {
                self.to_string()
            }
            fn parse(text: &str) -> Result<Self, String> {
                text.parse().map_err(|_| format!(concat!("expected ", $what, ", got `{}`"), text))
            }
            fn example() -> Self {
                Self::default()
            }
        }
    )*};
}

numbers!(usize: "an index", u64: "a size", f64: "a number");

impl Attr for bool {
    fn print(&self) -> String {
        self.to_string()
    }
    fn parse(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| format!("expected `true` or `false`, got `{text}`"))
    }
    fn example() -> Self {
        false
    }
}

/// An optional index, `none` when absent.
impl Attr for Option<usize> {
    fn print(&self) -> String {
        self.map_or("none".to_string(), |a| a.to_string())
    }
    fn parse(text: &str) -> Result<Self, String> {
        if text == "none" { Ok(None) } else { usize::parse(text).map(Some) }
    }
    fn example() -> Self {
        None
    }
}

impl Attr for Dtype {
    fn print(&self) -> String {
        self.name().to_string()
    }
    fn parse(text: &str) -> Result<Self, String> {
        Dtype::from_name(text).ok_or(format!("expected an element type, got `{text}`"))
    }
    fn example() -> Self {
        Dtype::F32
    }
}

/// `[a, b, ...]`.
impl<T: Attr> Attr for Vec<T> {
    fn print(&self) -> String {
        let items: Vec<String> = self.iter().map(T::print).collect();
        format!("[{}]", items.join(", "))
    }
    fn parse(text: &str) -> Result<Self, String> {
        items(text)?.into_iter().map(T::parse).collect()
    }
    fn example() -> Self {
        Vec::new()
    }
}

/// `(before, after)`, as in padding.
impl Attr for (u64, u64) {
    fn print(&self) -> String {
        format!("({}, {})", self.0, self.1)
    }
    fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("expected a pair `(a, b)`, got `{text}`");
        let (a, b) = text.strip_prefix('(').and_then(|p| p.strip_suffix(')')).and_then(|p| p.split_once(',')).ok_or_else(bad)?;
        Ok((a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?))
    }
    fn example() -> Self {
        (0, 0)
    }
}

/// Python's `start:stop` or `start:stop:step`, either bound empty when absent.
impl Attr for SliceRange {
    fn print(&self) -> String {
        let o = |v: Option<i64>| v.map_or(String::new(), |x| x.to_string());
        if self.step == 1 { format!("{}:{}", o(self.start), o(self.stop)) } else { format!("{}:{}:{}", o(self.start), o(self.stop), self.step) }
    }
    fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("expected a slice `start:stop` or `start:stop:step`, got `{text}`");
        let bound = |x: &str| if x.is_empty() { Ok(None) } else { x.parse().map(Some).map_err(|_| bad()) };
        match text.split(':').collect::<Vec<_>>().as_slice() {
            [a, b] => Ok(SliceRange { start: bound(a)?, stop: bound(b)?, step: 1 }),
            [a, b, c] => Ok(SliceRange { start: bound(a)?, stop: bound(b)?, step: c.parse().map_err(|_| bad())? }),
            _ => Err(bad()),
        }
    }
    fn example() -> Self {
        SliceRange::FULL
    }
}

/// The shape of `reshape`, `broadcast_to` and `iota`: the node's own.
impl NodeAttr for Shape {
    fn print(&self, _: &Graph) -> Option<String> {
        None
    }
    fn parse(cx: &mut ParseCx) -> Result<Self, String> {
        Ok(cx.ty.shape.clone())
    }
    fn example() -> Self {
        Shape::scalar()
    }
}

/// The element type of `iota`: the node's own.
impl NodeAttr for Dtype {
    fn print(&self, _: &Graph) -> Option<String> {
        None
    }
    fn parse(cx: &mut ParseCx) -> Result<Self, String> {
        Ok(cx.ty.dtype)
    }
    fn example() -> Self {
        Dtype::I32
    }
}

/// A constant: `value = [..]` with its elements when it has at most 8, else `id = N`.
/// Only the first form reads back (a graph written for tests spells its constants out).
impl NodeAttr for ConstId {
    fn print(&self, graph: &Graph) -> Option<String> {
        Some(match graph.consts.get(self.0 as usize) {
            Some(t) if t.numel() <= 8 => format!("value = {}", super::print::constant_values(t)),
            _ => format!("id = {}", self.0),
        })
    }
    fn parse(cx: &mut ParseCx) -> Result<Self, String> {
        let values = Vec::<f64>::parse(cx.attr("value")?)?;
        let shape = cx.ty.shape.as_known().ok_or("a constant needs a static shape")?;
        let holds = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        if holds != Some(values.len() as u64) {
            return Err(format!("a constant of type {} cannot hold {} values", cx.ty, values.len()));
        }
        let id = ConstId(cx.graph.consts.len() as u32);
        cx.graph.consts.push(Tensor::new(cx.ty.dtype, shape, values).into());
        Ok(id)
    }
    fn example() -> Self {
        ConstId(0)
    }
}
