//! Dimensions: a known size, a symbol bound at run time (a batch size), or a small
//! expression of symbols (`B*S`, `S + 1`, `(S - 3)/2`) that reshapes, concatenations
//! and ONNX's shape arithmetic make of them.
//!
//! An expression is kept as a polynomial in canonical form, so two dimensions are
//! equal exactly when their polynomials are: `B*S` and `S*B` are one dimension, and a
//! reshape checks its element count by comparing two products.

use std::collections::BTreeMap;
use std::fmt;

/// One dimension. Constants are always `Known` and a lone symbol `Sym`, so the derived
/// equality is equality of sizes for every binding of the symbols.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Known(u64),
    Sym(String),
    /// Anything else: neither a constant nor a lone symbol.
    Expr(Box<Poly>),
}

/// A polynomial over symbols with integer coefficients: each product of atoms (sorted;
/// the empty product is the constant term) maps to its coefficient, never 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Poly(BTreeMap<Vec<Atom>, i64>);

/// A factor of a term: a symbol, or the floor of a polynomial divided by a constant
/// that does not divide it (at least 2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    Sym(String),
    Div(Box<Poly>, u64),
}

const OVERFLOW: &str = "a dimension overflows";

impl Poly {
    pub fn constant(c: i64) -> Poly {
        let mut p = Poly::default();
        if c != 0 {
            p.0.insert(Vec::new(), c);
        }
        p
    }

    pub fn symbol(s: &str) -> Poly {
        Poly([(vec![Atom::Sym(s.to_string())], 1)].into_iter().collect())
    }

    /// The constant, when the polynomial is one.
    pub fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    fn add_term(&mut self, atoms: Vec<Atom>, coef: i64) -> Result<(), String> {
        let c = self.0.get(&atoms).copied().unwrap_or(0).checked_add(coef).ok_or(OVERFLOW)?;
        if c == 0 {
            self.0.remove(&atoms);
        } else {
            self.0.insert(atoms, c);
        }
        Ok(())
    }

    pub fn add(&self, o: &Poly) -> Result<Poly, String> {
        let mut out = self.clone();
        for (atoms, &c) in &o.0 {
            out.add_term(atoms.clone(), c)?;
        }
        Ok(out)
    }

    pub fn scale(&self, k: i64) -> Result<Poly, String> {
        let mut out = Poly::default();
        for (atoms, &c) in &self.0 {
            out.add_term(atoms.clone(), c.checked_mul(k).ok_or(OVERFLOW)?)?;
        }
        Ok(out)
    }

    pub fn sub(&self, o: &Poly) -> Result<Poly, String> {
        self.add(&o.scale(-1)?)
    }

    pub fn mul(&self, o: &Poly) -> Result<Poly, String> {
        let mut out = Poly::default();
        for (a, &ca) in &self.0 {
            for (b, &cb) in &o.0 {
                let mut atoms: Vec<Atom> = a.iter().chain(b).cloned().collect();
                atoms.sort();
                out.add_term(atoms, ca.checked_mul(cb).ok_or(OVERFLOW)?)?;
            }
        }
        Ok(out)
    }

    /// `floor(self / d)`. The terms `d` divides come out of the floor, so `(2*S + 1)/2`
    /// is `S + (1)/2`, which is `S`, and `(4*B*S)/2` is `2*B*S`.
    pub fn div_floor(&self, d: u64) -> Result<Poly, String> {
        let d = i64::try_from(d).map_err(|_| OVERFLOW)?;
        if d == 0 {
            return Err("a dimension is divided by 0".into());
        }
        let (mut quotient, mut rest) = (Poly::default(), Poly::default());
        for (atoms, &c) in &self.0 {
            quotient.add_term(atoms.clone(), c.div_euclid(d))?;
            rest.add_term(atoms.clone(), c.rem_euclid(d))?;
        }
        match rest.as_constant() {
            Some(c) => quotient.add(&Poly::constant(c.div_euclid(d))),
            None if d == 1 => Ok(self.clone()),
            None => quotient.add(&Poly([(vec![Atom::Div(Box::new(rest), d as u64)], 1)].into_iter().collect())),
        }
    }

    /// `self / d` when it divides exactly for every binding: by a constant that divides
    /// every coefficient, or by a single term whose factors every term holds.
    pub fn div_exact(&self, d: &Poly) -> Option<Poly> {
        let [(den, &k)] = d.0.iter().collect::<Vec<_>>()[..] else { return None };
        let mut out = Poly::default();
        for (atoms, &c) in &self.0 {
            if c % k != 0 {
                return None;
            }
            let mut rest = atoms.clone();
            for a in den {
                let i = rest.iter().position(|x| x == a)?;
                rest.remove(i);
            }
            out.add_term(rest, c / k).ok()?;
        }
        Some(out)
    }

    /// The value for a binding of every symbol (`None` when one is unbound or the
    /// arithmetic overflows).
    pub fn eval(&self, value: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        self.0.iter().try_fold(0i64, |acc, (atoms, &c)| {
            let term = atoms.iter().try_fold(c, |t, a| t.checked_mul(a.eval(value)?))?;
            acc.checked_add(term)
        })
    }

    /// The least and greatest values over every binding of each symbol `s` within
    /// `1..=max(s)` (interval arithmetic, so a bound, not always reached).
    pub fn range(&self, max: &dyn Fn(&str) -> Option<u64>) -> Option<(i64, i64)> {
        self.0.iter().try_fold((0i64, 0i64), |(lo, hi), (atoms, &c)| {
            let (tl, th) = atoms.iter().try_fold((c, c), |(l, h), a| {
                let (al, ah) = a.range(max)?;
                let ends = [l.checked_mul(al)?, l.checked_mul(ah)?, h.checked_mul(al)?, h.checked_mul(ah)?];
                Some((*ends.iter().min()?, *ends.iter().max()?))
            })?;
            Some((lo.checked_add(tl)?, hi.checked_add(th)?))
        })
    }

    /// Symbols in order of first appearance (pushed onto `out` once each).
    pub fn symbols<'a>(&'a self, out: &mut Vec<&'a str>) {
        for atoms in self.0.keys() {
            for a in atoms {
                match a {
                    Atom::Sym(s) if !out.contains(&s.as_str()) => out.push(s),
                    Atom::Sym(_) => {}
                    Atom::Div(p, _) => p.symbols(out),
                }
            }
        }
    }

    /// The terms, each as its coefficient and its factors (the constant term has
    /// none), in canonical order: for renderers of other languages.
    pub fn terms(&self) -> impl Iterator<Item = (i64, &[Atom])> {
        self.0.iter().map(|(atoms, &c)| (c, atoms.as_slice()))
    }
}

impl Atom {
    fn eval(&self, value: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        match self {
            Atom::Sym(s) => value(s),
            Atom::Div(p, d) => Some(p.eval(value)?.div_euclid(i64::try_from(*d).ok()?)),
        }
    }

    fn range(&self, max: &dyn Fn(&str) -> Option<u64>) -> Option<(i64, i64)> {
        match self {
            Atom::Sym(s) => Some((1, i64::try_from(max(s)?).ok()?)),
            Atom::Div(p, d) => {
                let (lo, hi) = p.range(max)?;
                let d = i64::try_from(*d).ok()?;
                Some((lo.div_euclid(d), hi.div_euclid(d)))
            }
        }
    }
}

impl Dim {
    /// The dimension a polynomial stands for; `None` for a negative constant.
    pub fn from_poly(p: Poly) -> Option<Dim> {
        if let Some(c) = p.as_constant() {
            return u64::try_from(c).ok().map(Dim::Known);
        }
        if let [(atoms, 1)] = p.0.iter().collect::<Vec<_>>()[..] {
            if let [Atom::Sym(s)] = &atoms[..] {
                return Some(Dim::Sym(s.clone()));
            }
        }
        Some(Dim::Expr(Box::new(p)))
    }

    pub fn poly(&self) -> Result<Poly, String> {
        Ok(match self {
            Dim::Known(n) => Poly::constant(i64::try_from(*n).map_err(|_| OVERFLOW)?),
            Dim::Sym(s) => Poly::symbol(s),
            Dim::Expr(p) => (**p).clone(),
        })
    }

    pub fn known(&self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }

    pub fn is_one(&self) -> bool {
        *self == Dim::Known(1)
    }

    fn make(p: Result<Poly, String>) -> Result<Dim, String> {
        let p = p?;
        Dim::from_poly(p.clone()).ok_or_else(|| format!("a dimension would be {}, which is negative", Dim::Expr(Box::new(p))))
    }

    pub fn add(&self, o: &Dim) -> Result<Dim, String> {
        Dim::make(self.poly()?.add(&o.poly()?))
    }

    pub fn sub(&self, o: &Dim) -> Result<Dim, String> {
        Dim::make(self.poly()?.sub(&o.poly()?))
    }

    pub fn mul(&self, o: &Dim) -> Result<Dim, String> {
        if let (Dim::Known(a), Dim::Known(b)) = (self, o) {
            return a.checked_mul(*b).map(Dim::Known).ok_or_else(|| OVERFLOW.to_string());
        }
        Dim::make(self.poly()?.mul(&o.poly()?))
    }

    pub fn div_floor(&self, d: u64) -> Result<Dim, String> {
        Dim::make(self.poly()?.div_floor(d))
    }

    /// `self / d` when `d` divides it for every binding of the symbols.
    pub fn div_exact(&self, d: &Dim) -> Option<Dim> {
        Dim::from_poly(self.poly().ok()?.div_exact(&d.poly().ok()?)?)
    }

    /// The product of dimensions (a shape's element count).
    pub fn product<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Result<Dim, String> {
        dims.into_iter().try_fold(Dim::Known(1), |acc, d| acc.mul(d))
    }

    /// The size for the given values of the symbols.
    pub fn eval(&self, value: &dyn Fn(&str) -> Option<u64>) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => u64::try_from(self.poly().ok()?.eval(&|s| i64::try_from(value(s)?).ok())?).ok(),
        }
    }

    /// The largest size when each symbol `s` takes a value from 1 to `max(s)`: what a
    /// buffer is laid out for.
    pub fn upper_bound(&self, max: &dyn Fn(&str) -> Option<u64>) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(*n),
            Dim::Sym(s) => max(s),
            Dim::Expr(p) => u64::try_from(p.range(max)?.1).ok(),
        }
    }

    /// Symbols in order of first appearance, pushed onto `out` once each.
    pub fn symbols<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Dim::Known(_) => {}
            Dim::Sym(s) if !out.contains(&s.as_str()) => out.push(s),
            Dim::Sym(_) => {}
            Dim::Expr(p) => p.symbols(out),
        }
    }

    /// Reads `B`, `12`, `B*S`, `2*S + 1`, `(S - 3)/2 + 1`: what [`Display`](fmt::Display)
    /// writes.
    pub fn parse(s: &str) -> Result<Dim, String> {
        let mut p = Parser { s: s.as_bytes(), at: 0 };
        let poly = p.sum()?;
        p.space();
        if p.at != p.s.len() {
            return Err(format!("bad dimension `{s}`"));
        }
        Dim::make(Ok(poly)).map_err(|e| format!("bad dimension `{s}`: {e}"))
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Expr(p) => write!(f, "{p}"),
        }
    }
}

/// `2*B*S + (S - 1)/2 - 3`: terms with symbols in canonical order, then the constant.
impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<(&Vec<Atom>, i64)> = self.0.iter().filter(|(a, _)| !a.is_empty()).map(|(a, &c)| (a, c)).collect();
        let constant = self.0.get(&Vec::new()).copied();
        let empty = Vec::new();
        terms.extend(constant.map(|c| (&empty, c)));
        if terms.is_empty() {
            return f.write_str("0");
        }
        for (i, (atoms, c)) in terms.into_iter().enumerate() {
            let sign = if c < 0 { "-" } else { "+" };
            match i {
                0 if c < 0 => f.write_str("-")?,
                0 => {}
                _ => write!(f, " {sign} ")?,
            }
            let k = c.unsigned_abs();
            let mut factors: Vec<String> = atoms.iter().map(|a| a.to_string()).collect();
            if k != 1 || factors.is_empty() {
                factors.insert(0, k.to_string());
            }
            f.write_str(&factors.join("*"))?;
        }
        Ok(())
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(s) => f.write_str(s),
            Atom::Div(p, d) => write!(f, "({p})/{d}"),
        }
    }
}

/// Recursive descent over `sum := term (('+'|'-') term)*`, `term := factor ('*' factor
/// | '/' integer)*`, `factor := integer | symbol | '(' sum ')' | '-' factor`.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.s.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.space();
        let hit = self.s.get(self.at) == Some(&c);
        self.at += hit as usize;
        hit
    }

    fn sum(&mut self) -> Result<Poly, String> {
        let mut p = self.term()?;
        loop {
            if self.eat(b'+') {
                p = p.add(&self.term()?)?;
            } else if self.eat(b'-') {
                p = p.sub(&self.term()?)?;
            } else {
                return Ok(p);
            }
        }
    }

    fn term(&mut self) -> Result<Poly, String> {
        let mut p = self.factor()?;
        loop {
            if self.eat(b'*') {
                p = p.mul(&self.factor()?)?;
            } else if self.eat(b'/') {
                let d = self.factor()?.as_constant().filter(|&d| d > 0).ok_or("a dimension divides by a positive integer only")?;
                p = p.div_floor(d as u64)?;
            } else {
                return Ok(p);
            }
        }
    }

    fn factor(&mut self) -> Result<Poly, String> {
        self.space();
        if self.eat(b'(') {
            let p = self.sum()?;
            return if self.eat(b')') { Ok(p) } else { Err("expected `)`".into()) };
        }
        if self.eat(b'-') {
            return self.factor()?.scale(-1);
        }
        let start = self.at;
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'?' | b'.')) {
            self.at += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.at]).map_err(|_| "bad dimension")?;
        match word.parse::<i64>() {
            Ok(n) => Ok(Poly::constant(n)),
            Err(_) if !word.is_empty() && !word.as_bytes()[0].is_ascii_digit() => Ok(Poly::symbol(word)),
            Err(_) => Err(format!("expected a size or a symbol, got `{word}`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dim {
        Dim::parse(s).unwrap()
    }

    #[test]
    fn canonical_forms_compare_equal() {
        assert_eq!(d("B*S"), d("S*B"));
        assert_eq!(d("S + S"), d("2*S"));
        assert_eq!(d("B*S - S*B + 3"), Dim::Known(3));
        assert_eq!(d("(S + 1) - 1"), Dim::Sym("S".into()));
        assert_eq!(d("(2*S + 1)/2"), Dim::Sym("S".into()));
        assert_eq!(d("(4*B*S + 2)/2"), d("2*B*S + 1"));
        assert_ne!(d("(S - 3)/2"), d("S/2 - 1"), "floor((S-3)/2) is S/2 - 2 for even S, (S-1)/2 - 1 for odd");
    }

    #[test]
    fn display_round_trips() {
        for s in ["B*S", "2*B*S + 1", "S - 1", "(S - 3)/2 + 1", "B*(S)/2", "-B + S + 4", "N*C*(H + 1)/2"] {
            let x = d(s);
            assert_eq!(Dim::parse(&x.to_string()).unwrap(), x, "{s} -> {x}");
        }
        assert_eq!(d("S*B + 1").to_string(), "B*S + 1");
        assert_eq!(d("(S - 3)/2 + 1").to_string(), "(S + 1)/2 - 1");
        assert_eq!(d("(S - 3)/2 + 1").to_string(), d("(S + 1)/2 - 1").to_string());
    }

    #[test]
    fn evaluates_and_bounds() {
        fn at(b: u64, s: u64) -> impl Fn(&str) -> Option<u64> {
            move |n| match n {
                "B" => Some(b),
                "S" => Some(s),
                _ => None,
            }
        }
        assert_eq!(d("B*S").eval(&at(3, 5)), Some(15));
        assert_eq!(d("(S - 3)/2 + 1").eval(&at(1, 8)), Some(3));
        assert_eq!(d("(S - 3)/2 + 1").eval(&at(1, 9)), Some(4));
        assert_eq!(d("S - B").eval(&at(5, 3)), None, "negative");
        assert_eq!(d("B*S + 1").upper_bound(&at(4, 8)), Some(33));
        assert_eq!(d("S - 1").upper_bound(&at(4, 8)), Some(7));
        assert_eq!(d("(S + 7)/8").upper_bound(&at(4, 64)), Some(8));
        assert_eq!(d("S").upper_bound(&at(4, 8)), Some(8));
        assert_eq!(d("B*T").upper_bound(&at(4, 8)), None, "T has no maximum");
    }

    #[test]
    fn exact_division_cancels_factors() {
        assert_eq!(d("B*S*64").div_exact(&d("64")), Some(d("B*S")));
        assert_eq!(d("B*S*64").div_exact(&d("S*64")), Some(d("B")));
        assert_eq!(d("2*B*S + 2*S").div_exact(&d("2*S")), Some(d("B + 1")));
        assert_eq!(d("B*S").div_exact(&d("T")), None);
        assert_eq!(d("B*S + 1").div_exact(&d("S")), None);
        assert_eq!(d("3*S").div_exact(&d("2")), None);
    }

    #[test]
    fn bad_text_and_overflow_are_errors() {
        assert_eq!(Dim::parse("S +").unwrap_err(), "expected a size or a symbol, got ``");
        assert_eq!(Dim::parse("S/T").unwrap_err(), "a dimension divides by a positive integer only");
        assert_eq!(Dim::parse("1 - S - 2").map(|_| ()), Ok(()), "negative in part: a bound, not a constant");
        assert_eq!(Dim::parse("2 - 5").unwrap_err(), "bad dimension `2 - 5`: a dimension would be -3, which is negative");
        assert_eq!(d("9223372036854775807*S").mul(&d("2")).unwrap_err(), OVERFLOW);
    }
}
