//! `--mesh`: how the entry parameters are split over a device mesh, written as HLO
//! sharding annotations that XLA's SPMD partitioner turns into a partitioned program
//! (mithrilc writes the sharding; XLA inserts the collectives).
//!
//! A mesh has the axes `data` and `model` (either or both, each a device count); its
//! devices are numbered row-major over the axes as given (`data=2,model=2`: device
//! `d * 2 + m`), the order the runner lays them out in too. The split:
//! - every input whose first dimension the `data` size divides is split along it (data
//!   parallel: the first dimension is the batch);
//! - with a `model` axis, the weight of every matrix product that reads a 2-D
//!   parameter (directly, or transposed as a Linear's `[out, in]` weight is) is split
//!   along its output features where the `model` size divides them (tensor parallel,
//!   column-wise);
//! - everything else, and every output, is replicated.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::ir::{Graph, Op};

/// The axes a mesh may have.
pub const AXES: [&str; 2] = ["data", "model"];

/// The most devices a mesh may have (the product of its axes). jaxlib 0.10.2's CPU
/// client makes up to 2048 virtual devices (more fail inside XLA: "Multiprocess
/// computations aren't implemented on the CPU backend"), and every device holds its own
/// copy of each replicated weight, so memory grows with the count; 256 runs a small
/// model in about a second (tests/xla_target.rs runs `data=16,model=16`).
pub const MAX_DEVICES: u64 = 256;

/// Per dimension of a parameter: the mesh axis (its index) that splits it, if any.
pub type Spec = Vec<Option<usize>>;

/// Parses `--mesh data=4` / `--mesh data=2,model=2`: each axis and their product from
/// 1 to [`MAX_DEVICES`].
pub fn parse(arg: &str) -> Result<Vec<(String, u64)>> {
    let usage = |why: String| Error::usage(format!("--mesh {arg}: {why} (expected AXIS=N,..., axes {}, e.g. data=2,model=2)", AXES.join(" and ")));
    let mut axes: Vec<(String, u64)> = Vec::new();
    for part in arg.split(',') {
        let (name, n) = part.split_once('=').ok_or_else(|| usage(format!("`{part}` is not AXIS=N")))?;
        let name = name.trim();
        if !AXES.contains(&name) {
            return Err(usage(format!("no axis `{name}`")));
        }
        if axes.iter().any(|(a, _)| a == name) {
            return Err(usage(format!("axis `{name}` is given twice")));
        }
        let n: u64 = n.trim().parse().ok().filter(|&n| (1..=MAX_DEVICES).contains(&n)).ok_or_else(|| usage(format!("`{n}` is not a device count from 1 to {MAX_DEVICES}")))?;
        axes.push((name.to_string(), n));
    }
    match axes.iter().try_fold(1u64, |acc, (_, n)| acc.checked_mul(*n)) {
        Some(devices) if devices <= MAX_DEVICES => Ok(axes),
        devices => {
            let sizes: Vec<String> = axes.iter().map(|(_, n)| n.to_string()).collect();
            let count = devices.map_or_else(|| sizes.join(" x "), |d| d.to_string());
            Err(usage(format!("{count} devices, more than the {MAX_DEVICES} the runner builds")))
        }
    }
}

/// How each entry parameter of `graph` (by name) is split over `mesh`; unsplit
/// parameters are absent.
pub fn specs(graph: &Graph, mesh: &[(String, u64)]) -> BTreeMap<String, Spec> {
    let axis = |name: &str| mesh.iter().position(|(a, _)| a == name).map(|i| (i, mesh[i].1));
    let mut out = BTreeMap::new();
    let rank_dims = |v: crate::ir::ValueId| graph.ty(v).shape.as_known().unwrap_or_default();
    if let Some((data, n)) = axis("data") {
        for v in graph.inputs() {
            let dims = rank_dims(v);
            if let (Some(&first), Some(name)) = (dims.first(), &graph.node(v).name) {
                if first % n == 0 && n > 1 {
                    let mut spec = vec![None; dims.len()];
                    spec[0] = Some(data);
                    out.insert(name.clone(), spec);
                }
            }
        }
    }
    if let Some((model, n)) = axis("model") {
        for v in graph.ids() {
            let node = graph.node(v);
            if node.op != Op::MatMul || n < 2 {
                continue;
            }
            // The right operand, or what it transposes: [in, out] or [out, in].
            let rhs = graph.node(node.args[1]);
            let (param, out_dim) = match &rhs.op {
                Op::Param => (node.args[1], 1),
                Op::Transpose { perm } if perm == &[1, 0] && graph.node(rhs.args[0]).op == Op::Param => (rhs.args[0], 0),
                _ => continue,
            };
            let dims = rank_dims(param);
            if let (2, Some(name)) = (dims.len(), &graph.node(param).name) {
                if dims[out_dim] % n == 0 {
                    let mut spec = vec![None; 2];
                    spec[out_dim] = Some(model);
                    out.insert(name.clone(), spec);
                }
            }
        }
    }
    out
}

/// The HLO sharding of a tensor split as `spec` says over `mesh`: tiled along the
/// split dimensions, replicated over the mesh axes that split nothing.
pub fn hlo_sharding(spec: &Spec, mesh: &[(String, u64)]) -> String {
    let used: Vec<usize> = spec.iter().flatten().copied().collect();
    if used.is_empty() {
        return "{replicated}".to_string();
    }
    let unused: Vec<usize> = (0..mesh.len()).filter(|a| !used.contains(a)).collect();
    let replicas: u64 = unused.iter().map(|&a| mesh[a].1).product();
    let mut tiles: Vec<u64> = spec.iter().map(|s| s.map_or(1, |a| mesh[a].1)).collect();
    if replicas > 1 {
        tiles.push(replicas);
    }
    let total: u64 = mesh.iter().map(|(_, n)| n).product();
    let mut assignment = vec![0u64; total as usize];
    for device in 0..total {
        // The device's coordinate on each mesh axis (row-major).
        let mut coord = vec![0u64; mesh.len()];
        let mut rest = device;
        for a in (0..mesh.len()).rev() {
            coord[a] = rest % mesh[a].1;
            rest /= mesh[a].1;
        }
        // Its tile: the split dimensions' coordinates, then its place among replicas.
        let mut at: Vec<u64> = spec.iter().map(|s| s.map_or(0, |a| coord[a])).collect();
        if replicas > 1 {
            at.push(unused.iter().fold(0, |acc, &a| acc * mesh[a].1 + coord[a]));
        }
        let flat = at.iter().zip(&tiles).fold(0, |acc, (&c, &t)| acc * t + c);
        assignment[flat as usize] = device;
    }
    let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let last = if replicas > 1 { " last_tile_dim_replicate" } else { "" };
    format!("{{devices=[{}]{}{last}}}", join(&tiles), join(&assignment))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(axes: &[(&str, u64)]) -> Vec<(String, u64)> {
        axes.iter().map(|(a, n)| (a.to_string(), *n)).collect()
    }

    #[test]
    fn shardings_tile_and_replicate_over_the_mesh() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        assert_eq!(hlo_sharding(&vec![Some(0), None], &m), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
        assert_eq!(hlo_sharding(&vec![None, Some(1)], &m), "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
        assert_eq!(hlo_sharding(&vec![Some(1), None], &m), "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
        assert_eq!(hlo_sharding(&vec![Some(0), Some(1)], &m), "{devices=[2,2]0,1,2,3}");
        assert_eq!(hlo_sharding(&vec![None, None], &m), "{replicated}");
        assert_eq!(hlo_sharding(&vec![Some(0), None, None], &mesh(&[("data", 4)])), "{devices=[4,1,1]0,1,2,3}");
    }

    #[test]
    fn mesh_arguments_are_checked() {
        assert_eq!(parse("data=2,model=2").unwrap(), mesh(&[("data", 2), ("model", 2)]));
        assert_eq!(parse("model=4").unwrap(), mesh(&[("model", 4)]));
        assert_eq!(parse("data=16,model=16").unwrap(), mesh(&[("data", 16), ("model", 16)]));
        assert_eq!(parse("model=256").unwrap(), mesh(&[("model", 256)]));
        for (bad, why) in [
            ("data", "`data` is not AXIS=N"),
            ("pipe=2", "no axis `pipe`"),
            ("data=2,data=2", "axis `data` is given twice"),
            ("data=0", "`0` is not a device count from 1 to 256"),
            ("data=4096", "`4096` is not a device count from 1 to 256"),
            ("data=32,model=16", "512 devices, more than the 256 the runner builds"),
            ("data=18446744073709551617", "`18446744073709551617` is not a device count from 1 to 256"),
        ] {
            assert_eq!(parse(bad).unwrap_err().to_string(), format!("--mesh {bad}: {why} (expected AXIS=N,..., axes data and model, e.g. data=2,model=2)"));
        }
    }

    #[test]
    fn inputs_split_by_batch_and_linear_weights_by_output_features() {
        let g = crate::ir::parse::parse(
            "graph g {\n  %0 = input \"x\" : f32[4, 6]\n  %1 = param \"w\" : f32[8, 6]\n  %2 = transpose %1 {perm = [1, 0]} : f32[6, 8]\n  %3 = matmul %0, %2 : f32[4, 8]\n  %4 = param \"v\" : f32[8, 3]\n  %5 = matmul %3, %4 : f32[4, 3]\n  output \"y\" = %5\n}\n",
        )
        .unwrap();
        let s = specs(&g, &mesh(&[("data", 2), ("model", 2)]));
        // v's 3 output features do not split in two.
        assert_eq!(s.into_iter().collect::<Vec<_>>(), vec![("w".to_string(), vec![Some(1), None]), ("x".to_string(), vec![Some(0), None])]);
        assert!(specs(&g, &mesh(&[("data", 3)])).is_empty());
    }
}
