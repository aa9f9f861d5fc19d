//! The two macros that let each IR op be declared once, in the tables of `op.rs`.
//!
//! [`kinds!`] declares enums of named kinds (`UnaryOp`, `ReduceKind`, ...): each variant
//! with its name in the text form, from which `ALL`, `name` and `from_name` are made; a
//! variant may nest another such enum (`UnaryOp::Composite(Composite)`).
//!
//! [`ops!`] declares the `Op` enum, one row per variant: its fields, its name in the text
//! form, its category and how many arguments it takes. From the rows it makes the enum,
//! the attribute structs declared inline, and `Op::name`, `arity`, `category`,
//! `attributes` (the printer), `attribute_types`, `parse` (the parser) and `catalogue`.
//! Each field is printed and parsed by its type's impl of [`super::Attr`], written
//! `key = value` with the field's name as key, unless it is marked:
//! - `#[kind]`: the field is a kinds enum that names the op (`reduce_sum` is
//!   `Reduce { kind: ReduceKind::Sum, .. }`); an op without one has a literal name.
//! - `#[node]`: the field is taken from the node rather than written `key = value`
//!   ([`super::NodeAttr`]): a shape or element type that is the node's own type, a
//!   constant's values.
//!
//! What an op means (shape rule, interpreter, VJP, lowerings) stays in exhaustive
//! matches elsewhere, so a new row makes the compiler list every place to extend.
//! Like Cranelift's `meta` crate, which declares each instruction once with the
//! immediates of its format, but as a plain `macro_rules!` over Rust syntax.

/// Enums of named kinds: `pub enum E { Variant = "name", ... }`, each variant with its
/// docs. Adds `E::ALL` (declaration order), `E::name` and `E::from_name`.
///
/// A row `Variant(Kinds)` nests another kinds enum: its kinds are this enum's too
/// (`ALL` lists them after the named rows, `name` and `from_name` pass through), so
/// `UnaryOp::Composite(Composite::Sigmoid)` is the op `sigmoid`.
macro_rules! kinds {
    ($( $(#[$meta:meta])* pub enum $E:ident { $($rows:tt)* } )*) => {$(
        kinds!(@row [$(#[$meta])*] $E [] [] $($rows)*);
    )*};

    // Each row is collected as named (`Variant = "name"`) or nested (`Variant(Kinds)`).
    (@row $meta:tt $E:ident [$($named:tt)*] $nested:tt
        $(#[$vmeta:meta])* $V:ident = $name:literal $(, $($rest:tt)*)?) => {
        kinds!(@row $meta $E [$($named)* { [$(#[$vmeta])*] $V $name }] $nested $($($rest)*)?);
    };
    (@row $meta:tt $E:ident $named:tt [$($nested:tt)*]
        $(#[$vmeta:meta])* $V:ident ($K:ident) $(, $($rest:tt)*)?) => {
        kinds!(@row $meta $E $named [$($nested)* { [$(#[$vmeta])*] $V $K }] $($($rest)*)?);
    };

    // All rows read: generate.
    (@row [$(#[$meta:meta])*] $E:ident
        [$({ [$(#[$vmeta:meta])*] $V:ident $name:literal })*]
        [$({ [$(#[$nmeta:meta])*] $N:ident $K:ident })*]) => {
        $(#[$meta])*
        pub enum $E {
            $( $(#[$vmeta])* $V, )*
            $( $(#[$nmeta])* $N($K), )*
        }

        impl $E {
            /// Every kind, in declaration order (a nested enum's after the named ones).
            pub const ALL: [$E; [$($name),*].len() $( + $K::ALL.len() )*] = {
                let named = [$($E::$V),*];
                let mut all = [named[0]; [$($name),*].len() $( + $K::ALL.len() )*];
                let mut i = 0;
                while i < named.len() {
                    all[i] = named[i];
                    i += 1;
                }
                $(
                    let mut j = 0;
                    while j < $K::ALL.len() {
                        all[i] = $E::$N($K::ALL[j]);
                        i += 1;
                        j += 1;
                    }
                )*
                let _ = i;
                all
            };

            /// The kind's name in the text form of the IR.
            pub fn name(self) -> &'static str {
                match self {
                    $( $E::$V => $name, )*
                    $( $E::$N(k) => k.name(), )*
                }
            }

            /// The kind named `name` in the text form of the IR.
            pub fn from_name(name: &str) -> Option<$E> {
                match name {
                    $( $name => Some($E::$V), )*
                    _ => None$( .or_else(|| $K::from_name(name).map($E::$N)) )*,
                }
            }
        }
    };
}

/// The `Op` enum and its static facts, from one row per variant (see the module docs):
///
/// ```text
/// /// docs
/// Variant                                 = "name", args N, Category;   // no attributes
/// Variant { field: Type, ... }            = "name", args N, Category;   // attributes
/// Variant { #[kind] kind: Kind, ... }               , args N, Category; // named by its kind
/// Variant(#[kind] Kind) or Variant(#[node] Type)   ...                  // one marked field
/// Variant(#[derive(..)] Struct { fields })  ...                         // declares `Struct`
/// ```
///
/// `args` is `N`, `MIN..=MAX` or `MIN..` ([`super::ArgCount`]).
macro_rules! ops {
    ($(#[$meta:meta])* pub enum Op { $($rows:tt)* }) => {
        ops!(@row [$(#[$meta])*] [] [] $($rows)*);
    };

    // Each row is rewritten into one form, `{ docs Variant (declaration) (pattern)
    // [fields] [name] category (args) }`, and collected; struct declarations apart.
    (@row $meta:tt [$($done:tt)*] $structs:tt
        $(#[$doc:meta])* $V:ident = $name:literal, args $args:expr, $cat:ident; $($rest:tt)*) => {
        ops!(@row $meta [$($done)* { [$(#[$doc])*] $V () () [] [$name] $cat ($args) }] $structs $($rest)*);
    };
    (@row $meta:tt [$($done:tt)*] $structs:tt
        $(#[$doc:meta])* $V:ident { $( $(#[$m:ident])? $f:ident : $t:ty ),* $(,)? }
        $(= $name:literal)?, args $args:expr, $cat:ident; $($rest:tt)*) => {
        ops!(@row $meta [$($done)* {
            [$(#[$doc])*] $V ({ $($f: $t),* }) ({ $($f),* }) [$( [$($m)?] $f: $t ),*] [$($name)?] $cat ($args)
        }] $structs $($rest)*);
    };
    (@row $meta:tt [$($done:tt)*] $structs:tt
        $(#[$doc:meta])* $V:ident ( #[$m:ident] $t:ty ) $(= $name:literal)?, args $args:expr, $cat:ident; $($rest:tt)*) => {
        ops!(@row $meta [$($done)* { [$(#[$doc])*] $V (($t)) ((x)) [[$m] x: $t] [$($name)?] $cat ($args) }] $structs $($rest)*);
    };
    (@row $meta:tt [$($done:tt)*] [$($structs:tt)*]
        $(#[$doc:meta])* $V:ident ( $(#[$smeta:meta])* $S:ident { $( $(#[$m:ident])? $f:ident : $t:ty ),* $(,)? } )
        $(= $name:literal)?, args $args:expr, $cat:ident; $($rest:tt)*) => {
        ops!(@row $meta [$($done)* {
            [$(#[$doc])*] $V (($S)) (($S { $($f),* })) [$( [$($m)?] $f: $t ),*] [$($name)?] $cat ($args)
        }] [$($structs)* $(#[$smeta])* pub struct $S { $(pub $f: $t),* }] $($rest)*);
    };

    // All rows read: generate.
    (@row [$(#[$meta:meta])*] [$({
        [$(#[$doc:meta])*] $V:ident ($($decl:tt)*) ($($pat:tt)*) [$( [$($m:ident)?] $f:ident : $t:ty ),*] [$($name:literal)?] $cat:ident ($args:expr)
    })*] [$($structs:tt)*]) => {
        $(#[$meta])*
        pub enum Op {
            $( $(#[$doc])* $V $($decl)*, )*
        }

        $($structs)*

        // Every arm binds all the variant's fields; each fact reads few of them.
        #[allow(unused_variables)]
        impl Op {
            /// The op's name in the text form of the IR.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Op::$V $($pat)* => { $($( ops!(@name $m $f); )?)* $($name)? } )*
                }
            }

            /// How many arguments the op takes: `(min, max)`; `None` for any number ≥ min.
            pub fn arity(&self) -> (usize, Option<usize>) {
                match self {
                    $( Op::$V $($pat)* => $crate::ir::ArgCount::bounds($args), )*
                }
            }

            /// The op's group in the op list of `docs/ops.md`.
            pub fn category(&self) -> $crate::ir::Category {
                match self {
                    $( Op::$V $($pat)* => $crate::ir::Category::$cat, )*
                }
            }

            /// The op's attributes as the text form of the IR writes them: `key = value`
            /// items, in field order.
            pub fn attributes(&self, graph: &$crate::ir::Graph) -> Vec<String> {
                let mut items = Vec::new();
                match self {
                    $( Op::$V $($pat)* => { $( ops!(@print [$($m)?] $f, graph, items); )* } )*
                }
                items
            }

            /// The attributes the text form writes `key = value`, each with its type: for
            /// the op list of `docs/ops.md`.
            pub fn attribute_types(&self) -> Vec<(&'static str, &'static str)> {
                let mut items = Vec::new();
                match self {
                    $( Op::$V $($pat)* => { $( ops!(@type [$($m)?] $f: $t, items); )* } )*
                }
                items
            }

            /// The op named `cx.op` with the attributes `cx.attrs` (what [`Op::attributes`]
            /// writes).
            pub fn parse(cx: &mut $crate::ir::ParseCx) -> Result<Op, String> {
                $(
                    if false $( || cx.op == $name )? $($( || ops!(@names $m $t, cx.op) )?)* {
                        $( let $f = ops!(@parse [$($m)?] $f: $t, cx); )*
                        return Ok(Op::$V $($pat)*);
                    }
                )*
                Err(format!("unknown op `{}`", cx.op))
            }

            /// Every op, one for each name, in declaration order, with example attributes
            /// (`Attr::example`): for tables generated from the code (`docs/ops.md`).
            pub fn catalogue() -> Vec<Op> {
                let mut ops = Vec::new();
                $(
                    for i in 0..1 $($( * ops!(@count $m $t) )?)* {
                        $( let $f = ops!(@example [$($m)?] $t, i); )*
                        ops.push(Op::$V $($pat)*);
                    }
                )*
                ops
            }
        }
    };

    // What each kind of field does in the functions above.
    (@name kind $f:ident) => { return $f.name() };
    (@name node $f:ident) => {};
    (@print [] $f:ident, $g:ident, $items:ident) => {
        $items.push(format!("{} = {}", stringify!($f), $crate::ir::Attr::print($f)))
    };
    (@print [kind] $f:ident, $g:ident, $items:ident) => {};
    (@print [node] $f:ident, $g:ident, $items:ident) => { $items.extend($crate::ir::NodeAttr::print($f, $g)) };
    (@type [] $f:ident : $t:ty, $items:ident) => { $items.push((stringify!($f), stringify!($t))) };
    (@type [$m:ident] $f:ident : $t:ty, $items:ident) => {};
    (@names kind $t:ty, $op:expr) => { <$t>::from_name($op).is_some() };
    (@names node $t:ty, $op:expr) => { false };
    (@parse [] $f:ident : $t:ty, $cx:ident) => {
        <$t as $crate::ir::Attr>::parse($cx.attr(stringify!($f))?).map_err(|e| format!("{} {}: {e}", $cx.op, stringify!($f)))?
    };
    (@parse [kind] $f:ident : $t:ty, $cx:ident) => { <$t>::from_name($cx.op).ok_or_else(|| format!("unknown op `{}`", $cx.op))? };
    (@parse [node] $f:ident : $t:ty, $cx:ident) => { <$t as $crate::ir::NodeAttr>::parse($cx)? };
    (@count kind $t:ty) => { <$t>::ALL.len() };
    (@count node $t:ty) => { 1 };
    (@example [] $t:ty, $i:ident) => { <$t as $crate::ir::Attr>::example() };
    (@example [kind] $t:ty, $i:ident) => { <$t>::ALL[$i] };
    (@example [node] $t:ty, $i:ident) => { <$t as $crate::ir::NodeAttr>::example() };
}
