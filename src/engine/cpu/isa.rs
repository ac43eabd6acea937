//! Which SIMD instruction set the CPU kernels use, detected at run time (never from the build machine's
//! `target-cpu`): AVX-512 VNNI, AVX2+FMA+F16C, NEON (aarch64 always has it), or plain Rust.

/// An instruction set a kernel can be run with. Every kernel accepts every value: one the processor lacks
/// falls back to the best lower path, so tests can force each path that exists on the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// AVX2, FMA and F16C (x86_64).
    Avx2,
    /// AVX-512 F/BW/VL with VNNI, on top of AVX2 (x86_64).
    Avx512Vnni,
    /// Advanced SIMD with the dot-product extension where present (aarch64).
    Neon,
}

impl Isa {
    /// The best instruction set this processor supports (`AGENTD_CPU_ISA=scalar|avx2|avx512|neon` caps it).
    pub fn detect() -> Self {
        let best = Self::available().into_iter().max().unwrap_or(Self::Scalar);
        match std::env::var("AGENTD_CPU_ISA").ok().as_deref() {
            Some(cap) => Self::from_name(cap)
                .filter(|c| Self::available().contains(c))
                .unwrap_or(best),
            None => best,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "scalar" => Some(Self::Scalar),
            "avx2" => Some(Self::Avx2),
            "avx512" | "avx512vnni" => Some(Self::Avx512Vnni),
            "neon" => Some(Self::Neon),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512vnni",
            Self::Neon => "neon",
        }
    }

    /// Every instruction set this processor can run, the scalar path first.
    pub fn available() -> Vec<Self> {
        let mut v = vec![Self::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
            {
                v.push(Self::Avx2);
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512vnni")
                {
                    v.push(Self::Avx512Vnni);
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        v.push(Self::Neon);
        v
    }

    /// Whether the AVX2 path may run: asked for (AVX-512 implies it) and present. Checked again here (against
    /// a detection cached once per process) so that a value made up by a caller can never run an instruction
    /// the processor lacks.
    #[inline]
    pub fn has_avx2(self) -> bool {
        matches!(self, Self::Avx2 | Self::Avx512Vnni) && detected().avx2
    }

    /// Whether the AVX-512 VNNI path may run: asked for and present.
    #[inline]
    pub fn has_avx512(self) -> bool {
        self == Self::Avx512Vnni && detected().avx512
    }

    /// Whether the NEON path may run (always on aarch64).
    #[inline]
    pub fn has_neon(self) -> bool {
        self == Self::Neon && cfg!(target_arch = "aarch64")
    }
}

struct Detected {
    avx2: bool,
    avx512: bool,
}

fn detected() -> &'static Detected {
    static D: std::sync::OnceLock<Detected> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c");
            Detected {
                avx2,
                avx512: avx2
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Detected {
                avx2: false,
                avx512: false,
            }
        }
    })
}
