//! Shape templates: Mithril's `set_shapes` patterns (`[N, ("Var", ...), d_in]`)
//! matched against shapes, binding their named dimensions within a group.

use super::json::TemplateDim;
use crate::ir::*;

pub(super) fn template_text(dims: &[TemplateDim]) -> String {
    let items: Vec<String> = dims
        .iter()
        .map(|d| match d {
            TemplateDim::Known(n) => n.to_string(),
            TemplateDim::Sym(s) => s.clone(),
            TemplateDim::Variadic(s) => format!("{s}..."),
            TemplateDim::Any => "?".to_string(),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Symbol bindings of one template group.
#[derive(Default)]
pub(super) struct Bindings {
    dims: std::collections::BTreeMap<String, Dim>,
    runs: std::collections::BTreeMap<String, Vec<Dim>>,
}

impl Bindings {
    /// Matches a template against a shape, binding its symbols; `Err` says why not.
    pub(super) fn bind(&mut self, template: &[TemplateDim], shape: &Shape) -> Result<(), String> {
        let var = template.iter().position(|d| matches!(d, TemplateDim::Variadic(_)));
        let fixed = template.len() - usize::from(var.is_some());
        let ok_rank = if var.is_some() { shape.rank() >= fixed } else { shape.rank() == fixed };
        if !ok_rank {
            return Err(format!(" (rank {} where {} is needed)", shape.rank(), if var.is_some() { format!("{fixed} or more") } else { fixed.to_string() }));
        }
        let mut pairs: Vec<(&TemplateDim, &[Dim])> = Vec::new();
        match var {
            None => pairs.extend(template.iter().zip(shape.0.iter()).map(|(t, d)| (t, std::slice::from_ref(d)))),
            Some(v) => {
                let tail = template.len() - v - 1;
                for (t, d) in template[..v].iter().zip(&shape.0) {
                    pairs.push((t, std::slice::from_ref(d)));
                }
                pairs.push((&template[v], &shape.0[v..shape.rank() - tail]));
                for (t, d) in template[v + 1..].iter().zip(&shape.0[shape.rank() - tail..]) {
                    pairs.push((t, std::slice::from_ref(d)));
                }
            }
        }
        for (t, ds) in pairs {
            match t {
                TemplateDim::Any => {}
                TemplateDim::Known(n) => {
                    if ds[0] != Dim::Known(*n) {
                        return Err(format!(" (needs {n} where it has {})", ds[0]));
                    }
                }
                TemplateDim::Sym(s) => match self.dims.get(s) {
                    Some(b) if *b != ds[0] => return Err(format!(" ({s} is {b} elsewhere but {} here)", ds[0])),
                    Some(_) => {}
                    None => {
                        self.dims.insert(s.clone(), ds[0].clone());
                    }
                },
                TemplateDim::Variadic(s) => match self.runs.get(s) {
                    Some(b) if b.as_slice() != ds => return Err(format!(" ({s}... differs)")),
                    Some(_) => {}
                    None => {
                        self.runs.insert(s.clone(), ds.to_vec());
                    }
                },
            }
        }
        Ok(())
    }

    /// The shape a template stands for under these bindings; unbound symbols of the
    /// file's own templates (`user`) become symbolic dimensions.
    pub(super) fn instantiate(&self, template: &[TemplateDim], user: bool) -> Option<Shape> {
        let mut dims = Vec::new();
        for t in template {
            match t {
                TemplateDim::Known(n) => dims.push(Dim::Known(*n)),
                TemplateDim::Sym(s) => match self.dims.get(s) {
                    Some(d) => dims.push(d.clone()),
                    None if user => dims.push(Dim::Sym(s.clone())),
                    None => return None,
                },
                TemplateDim::Variadic(s) => dims.extend(self.runs.get(s)?.iter().cloned()),
                TemplateDim::Any => return None,
            }
        }
        Some(Shape(dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_bind_and_instantiate() {
        let t = |s: &str| TemplateDim::Sym(s.into());
        let mut b = Bindings::default();
        let x = vec![t("N"), TemplateDim::Variadic("V".into()), t("d_in")];
        b.bind(&x, &Shape::known(&[2, 3, 4])).unwrap();
        assert_eq!(b.instantiate(&[TemplateDim::Known(5), t("d_in")], false), Some(Shape::known(&[5, 4])));
        assert_eq!(b.instantiate(&[t("unbound")], false), None);
        assert_eq!(b.instantiate(&[t("batch")], true), Some(Shape(vec![Dim::Sym("batch".into())])));
        assert_eq!(b.bind(&[t("d_in")], &Shape::known(&[5])).unwrap_err(), " (d_in is 4 elsewhere but 5 here)");
        assert_eq!(b.bind(&[t("a"), t("b")], &Shape::known(&[1])).unwrap_err(), " (rank 1 where 2 is needed)");
    }
}
