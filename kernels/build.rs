//! Build script: with the `cuda` feature, compiles `kernels/*.cu` to PTX with nvcc and embeds it
//! (`$OUT_DIR/agentd_kernels.rs`, included by `src/engine/candle/fused/cuda.rs`). Without the feature it does nothing.
//!
//! nvcc: `$NVCC`, else `$CUDA_ROOT/bin/nvcc` (or `CUDA_PATH`, `CUDA_HOME`), else `nvcc` on the PATH
//! (`scripts/cuda-toolchain.sh` provides one). Target: `compute_$CUDA_COMPUTE_CAP` (as candle reads it: `90`
//! or `9.0`), else what `nvidia-smi` reports, else 80. PTX, so the driver compiles it for that GPU or any
//! newer one when the kernels are first loaded.

use std::env;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const KERNELS: [&str; 3] = ["rmsnorm", "rotary", "attention"];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=kernels");
    for var in [
        "NVCC",
        "CUDA_ROOT",
        "CUDA_PATH",
        "CUDA_HOME",
        "CUDA_COMPUTE_CAP",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return Ok(());
    }
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let nvcc = nvcc();
    let arch = compute_cap();
    let mut consts = String::new();
    for name in KERNELS {
        let src = Path::new("kernels").join(format!("{name}.cu"));
        let ptx = out.join(format!("{name}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17", "-Ikernels"])
            .arg(format!("-arch=compute_{arch}"))
            .arg(&src)
            .arg("-o")
            .arg(&ptx)
            .status()
            .map_err(|e| {
                format!(
                    "running {} failed ({e}); see scripts/cuda-toolchain.sh",
                    nvcc.display()
                )
            })?;
        if !status.success() {
            return Err(format!("nvcc failed on {} ({status})", src.display()).into());
        }
        writeln!(
            consts,
            "pub const {}: &str = include_str!(concat!(env!(\"OUT_DIR\"), \"/{name}.ptx\"));",
            name.to_uppercase()
        )?;
    }
    std::fs::write(out.join("agentd_kernels.rs"), consts)?;
    Ok(())
}

fn nvcc() -> PathBuf {
    if let Some(p) = env::var_os("NVCC") {
        return p.into();
    }
    for var in ["CUDA_ROOT", "CUDA_PATH", "CUDA_HOME"] {
        if let Some(root) = env::var_os(var) {
            let p = Path::new(&root).join("bin").join("nvcc");
            if p.exists() {
                return p;
            }
        }
    }
    "nvcc".into()
}

fn compute_cap() -> String {
    if let Ok(cap) = env::var("CUDA_COMPUTE_CAP") {
        return cap.replace('.', "");
    }
    Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(|l| l.trim().replace('.', "")))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "80".into())
}
