//! The f32 vector operations of the forward pass (dot, axpy, RMS norm, SwiGLU, GeGLU, softmax, rotary), written once
//! as plain loops over 8-wide chunks and compiled twice: as is, and inside an AVX2/FMA `target_feature`
//! function so the same loops become 256-bit code on processors that have it (picked at run time).

use crate::engine::cpu::isa::Isa;

macro_rules! multiversion {
    ($(#[$m:meta])* pub fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? => $generic:ident, $avx2:ident) => {
        $(#[$m])*
        #[inline]
        pub fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if isa.has_avx2() {
                // SAFETY: `has_avx2` checked that the processor has AVX2 and FMA.
                return unsafe { $avx2($($arg),*) };
            }
            let _ = isa;
            $generic($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($arg: $ty),*) $(-> $ret)? {
            $generic($($arg),*)
        }
    };
}

multiversion! {
    /// Σ a·b over the shorter length.
    pub fn dot(a: &[f32], b: &[f32]) -> f32 => dot_generic, dot_avx2
}

multiversion! {
    /// y += a·x.
    pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) => axpy_generic, axpy_avx2
}

multiversion! {
    /// out = x / rms(x) · w (llama's RMS norm).
    pub fn rms_norm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) => rms_norm_generic, rms_norm_avx2
}

multiversion! {
    /// g = silu(g) · u.
    pub fn silu_mul(g: &mut [f32], u: &[f32]) => silu_mul_generic, silu_mul_avx2
}

multiversion! {
    /// g = gelu(g) · u, GELU's tanh approximation (Gemma's GeGLU).
    pub fn gelu_mul(g: &mut [f32], u: &[f32]) => gelu_mul_generic, gelu_mul_avx2
}

multiversion! {
    /// y += x.
    pub fn add(y: &mut [f32], x: &[f32]) => add_generic, add_avx2
}

#[inline(always)]
fn dot_generic(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

#[inline(always)]
fn axpy_generic(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[inline(always)]
fn add_generic(y: &mut [f32], x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += x;
    }
}

#[inline(always)]
fn rms_norm_generic(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rem = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l] * c[l];
        }
    }
    let mut ss = acc.iter().sum::<f32>();
    for v in rem {
        ss += v * v;
    }
    let scale = 1.0 / (ss / x.len() as f32 + eps).sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(w) {
        *o = x * scale * w;
    }
}

#[inline(always)]
fn silu_mul_generic(g: &mut [f32], u: &[f32]) {
    for (g, u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// e^x without a library call, so the loops using it vectorize (ggml's SiLU and softmax do the same): x = n·ln2 +
/// r with |r| ≤ ln2/2, e^r by a degree-6 polynomial, 2^n put in the exponent bits. Relative error under 1e-6
/// (tested) over [-87, 88]; below, x is taken as -87 (e^-87 ≈ 1.6e-38, NaN included), above as 88 (e^88 ≈
/// 1.7e38): nothing a softmax term or SiLU's `x / (1 + e^-x)` can tell apart.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Not `clamp`: `max` takes NaN to -87 (a NaN score must not poison a softmax), `clamp` would keep it.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.0).min(88.0);
    let n = (x * LOG2_E).round();
    let r = x - n * LN2_HI - n * LN2_LO;
    // Taylor coefficients of e^r to r^6.
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    // 2^n from the biased exponent n + 127 (in 1..=254 after the clamp), read out of the float n + 127 + 2^23
    // (whose low mantissa bits are that integer) rather than by `as i32`: Rust's saturating cast does not
    // vectorize (it was eight scalar conversions, compares and moves per vector of SiLU and softmax).
    let biased = (n + (127.0 + 8_388_608.0)).to_bits() - 0x4b00_0000;
    p * f32::from_bits(biased << 23)
}

#[inline(always)]
fn gelu_mul_generic(g: &mut [f32], u: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for (g, u) in g.iter_mut().zip(u) {
        let x = *g;
        *g = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh()) * u;
    }
}

/// Rotary embedding of one head in place: `cos`/`sin` hold `head_dim / 2` values for the position;
/// `neox` pairs dimension i with i + d/2, otherwise adjacent pairs (2i, 2i + 1).
pub fn rope(x: &mut [f32], cos: &[f32], sin: &[f32], neox: bool) {
    let half = x.len() / 2;
    if neox {
        let (a, b) = x.split_at_mut(half);
        for i in 0..half {
            let (x0, x1) = (a[i], b[i]);
            a[i] = x0 * cos[i] - x1 * sin[i];
            b[i] = x0 * sin[i] + x1 * cos[i];
        }
    } else {
        for i in 0..half {
            let (x0, x1) = (x[2 * i], x[2 * i + 1]);
            x[2 * i] = x0 * cos[i] - x1 * sin[i];
            x[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_the_library_over_its_range() {
        let mut worst = 0f32;
        for i in 0..=400_000 {
            let x = -87.0 + (i as f32) * 175.0 / 400_000.0;
            let (got, want) = (exp(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert!(exp(-1000.0) < 1e-37 && exp(f32::NAN) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
        assert_eq!(exp(0.0), 1.0);
        // The exponent read out of a float is the saturating cast's, bit for bit, over the range and beyond.
        let by_cast = |x: f32| {
            // As `exp` clamps (`max` then `min`, NaN to -87).
            #[allow(clippy::manual_clamp)]
            let x = x.max(-87.0).min(88.0);
            let n = (x * std::f32::consts::LOG2_E).round();
            let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
            let p = [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0]
                .iter()
                .fold(1.0 / 720.0, |p: f32, c| p * r + c);
            p * f32::from_bits(((n as i32 + 127) as u32) << 23)
        };
        for i in -20_000..=20_000 {
            let x = i as f32 * 0.005;
            assert_eq!(exp(x).to_bits(), by_cast(x).to_bits(), "x = {x}");
        }
        // SiLU at the ends: no NaN, the limits.
        let mut g = [-1000.0, -88.5, 0.0, 30.0, 1000.0];
        silu_mul_generic(&mut g, &[1.0; 5]);
        assert_eq!(g[2], 0.0);
        assert!(g[0].abs() < 1e-30 && g[1].abs() < 1e-30, "{g:?}");
        assert_eq!((g[3], g[4]), (30.0, 1000.0));
    }

    #[test]
    fn every_path_computes_the_same_values() {
        let a: Vec<f32> = (0..77).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..77).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        for isa in Isa::available() {
            assert!((dot(isa, &a, &b) - want).abs() < 1e-4);
            let mut y = b.clone();
            axpy(isa, &mut y, 2.0, &a);
            assert!((y[5] - (b[5] + 2.0 * a[5])).abs() < 1e-6);
            let mut out = vec![0f32; 77];
            rms_norm(isa, &mut out, &a, &b, 1e-5);
            let rms = (a.iter().map(|v| v * v).sum::<f32>() / 77.0 + 1e-5).sqrt();
            assert!((out[9] - a[9] / rms * b[9]).abs() < 1e-5);
            let mut g = a.clone();
            silu_mul(isa, &mut g, &b);
            let s = a[3] / (1.0 + (-a[3]).exp()) * b[3];
            assert!((g[3] - s).abs() < 1e-6);
        }
    }

    #[test]
    fn rope_rotates_pairs() {
        let mut x = vec![1.0, 0.0, 0.0, 1.0];
        rope(&mut x, &[0.0, 1.0], &[1.0, 0.0], false);
        assert_eq!(x, vec![0.0, 1.0, 0.0, 1.0]);
        let mut x = vec![1.0, 0.0, 0.0, 1.0];
        rope(&mut x, &[0.0, 1.0], &[1.0, 0.0], true);
        assert_eq!(x, vec![0.0, 0.0, 1.0, 1.0]);
    }
}
