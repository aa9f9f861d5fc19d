//! `compile --target cuda --report`: what ptxas says of every kernel of the built model
//! at sm_90 (registers, shared memory, spills), from nvcc's `-Xptxas -v`.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, ErrorKind, Result};

/// One kernel as ptxas compiled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u64,
    pub shared_bytes: u64,
    pub spill_stores: u64,
    pub spill_loads: u64,
}

/// Compiles `<name>.cu` in `dir` for sm_90 with ptxas's report on, and returns the
/// report's lines for `--report`.
pub fn ptxas_report(dir: &Path, name: &str) -> Result<String> {
    let nvcc = crate::build::nvcc()?;
    let out = Command::new(&nvcc)
        .current_dir(dir)
        .args(["-cubin", "-std=c++17", "-O3", "-arch=sm_90", "-Xptxas", "-v", "-o", "/dev/null"])
        .arg(format!("{name}.cu"))
        .output()
        .map_err(|e| Error::new(ErrorKind::Toolchain, format!("cannot run {}: {e}", nvcc.display())))?;
    if !out.status.success() {
        return Err(Error::new(ErrorKind::Toolchain, format!("nvcc -Xptxas -v failed: {}", String::from_utf8_lossy(&out.stderr))));
    }
    let kernels = parse(&String::from_utf8_lossy(&out.stderr));
    let mut s = String::from("kernels at sm_90 (ptxas): registers, shared memory, spills\n");
    for k in &kernels {
        let spills = if k.spill_stores + k.spill_loads == 0 { "no spills".to_string() } else { format!("spills {} B stored, {} B loaded", k.spill_stores, k.spill_loads) };
        s.push_str(&format!("  {}: {} registers, {} B shared, {spills}\n", demangle(&k.name), k.registers, k.shared_bytes));
    }
    Ok(s)
}

/// The kernels of ptxas's `-v` output, in its order.
pub fn parse(text: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    let number_before = |line: &str, unit: &str| -> u64 {
        line.find(unit).and_then(|at| line[..at].split_whitespace().last()).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources { name, registers: 0, shared_bytes: 0, spill_stores: 0, spill_loads: 0 });
        } else if let Some(k) = out.last_mut() {
            if line.contains("spill stores") {
                k.spill_stores = number_before(line, "bytes spill stores");
                k.spill_loads = number_before(line, "bytes spill loads");
            } else if line.contains("Used ") && line.contains("registers") {
                k.registers = number_before(line, "registers");
                k.shared_bytes = number_before(line, "bytes smem");
            }
        }
    }
    out
}

/// A kernel's name as its source spells it: `c++filt`'s reading of a mangled C++ name
/// (templates), the name itself when it is not mangled or c++filt is missing.
fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    match Command::new("c++filt").arg(name).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_verbose_output_is_read_per_kernel() {
        let text = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_' for 'sm_90'
ptxas info    : Function properties for _Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 127 registers, used 1 barriers, 24576 bytes smem
ptxas info    : Compile time = 114.841 ms
ptxas info    : Compiling entry function 'linear_k1' for 'sm_90'
ptxas info    : Function properties for linear_k1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 380 bytes cmem[0]
";
        let got = parse(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], KernelResources { name: "_Z10mr_k_sgemmI9linear_e0Lb0ELb0EEv12mr_gemm_args8mr_batchT_".into(), registers: 127, shared_bytes: 24576, spill_stores: 8, spill_loads: 12 });
        assert_eq!(got[1], KernelResources { name: "linear_k1".into(), registers: 10, shared_bytes: 0, spill_stores: 0, spill_loads: 0 });
    }
}
