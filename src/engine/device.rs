//! Device selection (`auto | cpu | cuda[:N] | metal`) with a graceful fallback, and the CPU thread count.

use std::str::FromStr;
use std::sync::OnceLock;

use candle_core::Device;

use crate::engine::error::{EngineError, Result};

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The best accelerator this build and machine have, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
    Metal,
}

impl FromStr for DeviceSpec {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "metal" => Ok(Self::Metal),
            "cuda" => Ok(Self::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Self::Cuda(n)),
                _ => Err(EngineError::Device(format!(
                    "unknown device `{other}` (expected auto, cpu, cuda, cuda:N or metal)"
                ))),
            },
        }
    }
}

/// The chosen device, and a note for the user when it is not what they asked for.
pub struct SelectedDevice {
    pub device: Device,
    pub fallback_note: Option<String>,
}

impl SelectedDevice {
    pub fn describe(&self) -> String {
        describe(&self.device)
    }
}

pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => format!("cpu ({} threads)", cpu_threads()),
        Device::Cuda(_) => "cuda".into(),
        Device::Metal(_) => "metal".into(),
    }
}

/// Starts an accelerator.
type StartDevice = fn() -> std::result::Result<Device, String>;

/// Starts CUDA device `n`. The CUDA libraries are opened at run time (the `cuda` build links none of them),
/// and cudarc panics when one is missing: each is looked for first, and a missing one is an error naming
/// it. A panic inside the start is still caught and reported as an error.
fn start_cuda(n: usize) -> std::result::Result<Device, String> {
    if let Some(missing) = missing_cuda_libraries() {
        return Err(missing);
    }
    match std::panic::catch_unwind(|| Device::new_cuda(n)) {
        Ok(Ok(device)) => Ok(device),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "CUDA failed to start: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic")
        )),
    }
}

/// The CUDA libraries candle opens that this machine lacks, if any (the driver's libcuda, cuBLAS, cuBLASLt,
/// cuRAND, NVRTC; found through the loader's path, `LD_LIBRARY_PATH` included).
#[cfg(feature = "cuda")]
fn missing_cuda_libraries() -> Option<String> {
    use candle_core::cuda_backend::cudarc;
    // SAFETY: each only tries to open a shared library by name; no CUDA function is called.
    let present = unsafe {
        [
            (
                "libcuda (the NVIDIA driver)",
                cudarc::driver::sys::is_culib_present(),
            ),
            ("libcublas", cudarc::cublas::sys::is_culib_present()),
            ("libcublasLt", cudarc::cublaslt::sys::is_culib_present()),
            ("libcurand", cudarc::curand::sys::is_culib_present()),
            ("libnvrtc", cudarc::nvrtc::sys::is_culib_present()),
        ]
    };
    let missing: Vec<&str> = present
        .iter()
        .filter(|(_, found)| !found)
        .map(|(name, _)| *name)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{} not found (install the NVIDIA driver and CUDA 13 libraries, or add their folder to LD_LIBRARY_PATH)",
            missing.join(", ")
        )
    })
}

#[cfg(not(feature = "cuda"))]
fn missing_cuda_libraries() -> Option<String> {
    None
}

/// Picks the device. An accelerator that this build lacks, or that fails to initialise, falls back to the CPU
/// with a note saying why and how to get it (rebuild with `--features cuda|metal`).
pub fn select(spec: DeviceSpec) -> SelectedDevice {
    let cpu = |note: String| SelectedDevice {
        device: Device::Cpu,
        fallback_note: Some(note),
    };
    match spec {
        DeviceSpec::Cpu => SelectedDevice {
            device: Device::Cpu,
            fallback_note: None,
        },
        DeviceSpec::Cuda(n) => {
            if !candle_core::utils::cuda_is_available() {
                return cpu(format!(
                    "cuda:{n} requested but this build has no CUDA support; running on the CPU \
                     (rebuild with `cargo build --release --features cuda`)"
                ));
            }
            match start_cuda(n) {
                Ok(device) => SelectedDevice {
                    device,
                    fallback_note: None,
                },
                Err(e) => cpu(format!(
                    "cuda:{n} could not be initialised ({e}); running on the CPU"
                )),
            }
        }
        DeviceSpec::Metal => {
            if !candle_core::utils::metal_is_available() {
                return cpu(
                    "metal requested but this build has no Metal support; running on the CPU \
                     (rebuild with `cargo build --release --features metal`)"
                        .into(),
                );
            }
            match Device::new_metal(0) {
                Ok(device) => SelectedDevice {
                    device,
                    fallback_note: None,
                },
                Err(e) => cpu(format!(
                    "metal could not be initialised ({e}); running on the CPU"
                )),
            }
        }
        DeviceSpec::Auto => {
            // An accelerator compiled in is used when it starts; one that fails to start is said, not hidden.
            let mut note = None;
            let accelerators: [(&str, bool, StartDevice); 2] = [
                (
                    "CUDA device 0",
                    candle_core::utils::cuda_is_available(),
                    || start_cuda(0),
                ),
                ("Metal", candle_core::utils::metal_is_available(), || {
                    Device::new_metal(0).map_err(|e| e.to_string())
                }),
            ];
            for (name, built, start) in accelerators {
                if !built {
                    continue;
                }
                match start() {
                    Ok(device) => {
                        tracing::info!("device auto: {name}");
                        return SelectedDevice {
                            device,
                            fallback_note: None,
                        };
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "device auto: this build has {name} but it did not start");
                        note = Some(format!(
                            "auto: this build has {name} but it did not start ({e}); running on the CPU"
                        ));
                    }
                }
            }
            if note.is_none() {
                tracing::info!(
                    "device auto: the CPU (this build has no CUDA or Metal support; rebuild with \
                     --features cuda|metal for a GPU)"
                );
            }
            SelectedDevice {
                device: Device::Cpu,
                fallback_note: note,
            }
        }
    }
}

/// What `--device auto` would pick in this build on this machine, and why (for `agentd model list`): the
/// accelerator support compiled in, the CPU's thread count otherwise. Starts no device.
pub fn auto_summary() -> String {
    let built: Vec<&str> = [
        ("cuda", candle_core::utils::cuda_is_available()),
        ("metal", candle_core::utils::metal_is_available()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if built.is_empty() {
        format!(
            "cpu ({} threads); this build has no CUDA or Metal support (--features cuda|metal)",
            cpu_threads()
        )
    } else {
        format!(
            "{} when a device starts, else cpu ({} threads)",
            built.join(" or "),
            cpu_threads()
        )
    }
}

static THREADS: OnceLock<usize> = OnceLock::new();

/// The default thread count: the physical cores this process may run on (SMT siblings share one core's
/// execution units, so a second thread per core slows the matmuls, as llama.cpp also found), never more than
/// the logical CPUs available to the process.
pub fn default_threads() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    physical_cores().map_or(logical, |p| p.clamp(1, logical))
}

/// Distinct (package, core) pairs in the kernel's CPU topology (Linux), if readable.
fn physical_cores() -> Option<usize> {
    let mut cores = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/sys/devices/system/cpu").ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(n) = name.strip_prefix("cpu") else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(entry.path().join("topology").join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        if let (Some(pkg), Some(core)) = (read("physical_package_id"), read("core_id")) {
            cores.insert((pkg, core));
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

/// Sets the CPU thread count once per process (later calls are ignored and return the count in force).
///
/// Candle reads `RAYON_NUM_THREADS` for its matmul parallelism and uses rayon's global pool for quantized
/// kernels; both are set here. Call it before any other thread is started (the binary does so first thing).
pub fn init_threads(n: Option<usize>) -> usize {
    *THREADS.get_or_init(|| {
        let n = n
            .or_else(|| {
                std::env::var("RAYON_NUM_THREADS")
                    .ok()
                    .and_then(|s| s.parse().ok())
            })
            .filter(|&n| n > 0)
            .unwrap_or_else(default_threads);
        // Safe in practice: called at start-up before other threads read the environment.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
        // Fails only if the global pool was already built, in which case it keeps its own size.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
        n
    })
}

/// The thread count in force (initialising it to the default if nobody did).
pub fn cpu_threads() -> usize {
    init_threads(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_threads_are_between_one_and_the_logical_cpus() {
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = default_threads();
        assert!(n >= 1 && n <= logical, "{n} of {logical}");
    }

    #[test]
    fn parses_device_specs() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("cuda:1".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(1));
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        let err = "tpu".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(err.contains("auto, cpu, cuda"), "{err}");
    }

    #[test]
    fn missing_accelerator_falls_back_with_a_hint() {
        if candle_core::utils::cuda_is_available() {
            return;
        }
        let sel = select(DeviceSpec::Cuda(0));
        assert!(sel.device.is_cpu());
        assert!(sel.fallback_note.unwrap().contains("--features cuda"));
    }
}
