//! Activations quantized for the integer dot products: 32-value Q8 blocks (paired with Q4_0, Q4_1, Q5_0, Q5_1
//! and Q8_0 weights) and 256-value Q8_K blocks (paired with the K-quants). The roundings are llama.cpp's
//! (`quantize_row_q8_0`/`_q8_1`: scale kept as f16; `quantize_row_q8_K`: scale from the signed maximum, f32),
//! so results stay within llama.cpp's own noise.

use half::f16;

#[cfg(target_arch = "x86_64")]
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::pool::ThreadPool;

/// Values per [`BlockQ8`].
pub const QK8: usize = 32;
/// Values per [`BlockQ8K`] (and per K-quant super-block).
pub const QK_K: usize = 256;

/// 32 activations: `x ≈ d · qs`. `s = d · Σqs` (both f16-rounded, as in Q8_1) serves the offset term of
/// Q4_1/Q5_1; Q4_0/Q5_0/Q8_0 ignore it. `sum = Σqs` exactly: the VNNI path feeds signed weights as unsigned
/// bytes `w + 128` and takes `128 · sum` back off.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8 {
    pub d: f32,
    pub s: f32,
    pub sum: i32,
    pub qs: [i8; QK8],
}

impl Default for BlockQ8 {
    fn default() -> Self {
        Self {
            d: 0.0,
            s: 0.0,
            sum: 0,
            qs: [0; QK8],
        }
    }
}

/// 256 activations: `x ≈ d · qs`; `bsums[j]` is the sum of `qs[16j..16j+16]` (the K-quants' min terms).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

impl Default for BlockQ8K {
    fn default() -> Self {
        Self {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}

/// Quantizes `x` (a multiple of 32 long) into `out` (`x.len() / 32` blocks).
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.has_avx2() {
        // SAFETY: the processor has AVX2, FMA and F16C (checked just above).
        return unsafe { quantize_q8_avx2(x, out) };
    }
    quantize_q8_generic(x, out)
}

/// `p` rounded half away from zero to i32, as `trunc(p + copysign(0.49999997, p))` (exact for |p| ≤ 127.5,
/// where `p + 0.49999997` cannot round up past the next integer).
///
/// # Safety
/// The processor has AVX2.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn round_half_away(p: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let half = _mm256_or_ps(
        _mm256_and_ps(p, _mm256_set1_ps(-0.0)),
        _mm256_set1_ps(0.499_999_97),
    );
    _mm256_cvttps_epi32(_mm256_add_ps(p, half))
}

/// Four vectors of i32 (32 values in order) saturated to i8 into `out`.
///
/// # Safety
/// The processor has AVX2.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_i8(q: [std::arch::x86_64::__m256i; 4], out: &mut [i8; 32]) {
    use std::arch::x86_64::*;
    // Packing works per 128-bit lane: (q0 q1 | q0 q1) → i16, then → i8, then the lanes' dwords put in order.
    let w01 = _mm256_packs_epi32(q[0], q[1]);
    let w23 = _mm256_packs_epi32(q[2], q[3]);
    let bytes = _mm256_packs_epi16(w01, w23);
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: `out` is 32 bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, bytes) };
}

/// [`quantize_q8_generic`] in AVX2 and F16C, bit for bit: the maximum in registers, rounding half away from zero
/// as `trunc(p + copysign(0.49999997, p))` (exact for |p| ≤ 127.5), the f16 roundings of `d` and `s` by
/// `vcvtps2ph` (round to nearest even, as `half`'s): the generic loop spends most of its time in `half`'s
/// per-block conversion calls.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_avx2(x: &[f32], out: &mut [BlockQ8]) {
    use std::arch::x86_64::*;
    debug_assert_eq!(x.len(), out.len() * QK8);
    let sign = _mm256_set1_ps(-0.0);
    let f16_round = |v: f32| _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<0>(_mm_set_ss(v))));
    for (x, b) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let p = x.as_ptr();
        let v = [0, 8, 16, 24].map(|i| _mm256_loadu_ps(p.add(i)));
        let a = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = v.map(|v| round_half_away(_mm256_mul_ps(v, id)));
        let total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let t = _mm_add_epi32(
            _mm256_castsi256_si128(total),
            _mm256_extracti128_si256::<1>(total),
        );
        let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0b01_00_11_10>(t));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32::<0b10_11_00_01>(t)));
        store_i8(q, &mut b.qs);
        let d16 = f16_round(d);
        b.d = d16;
        b.s = f16_round(f16_round(sum as f32) * d16);
        b.sum = sum;
    }
}

/// [`quantize_q8k_generic`] in AVX2, bit for bit: the largest magnitude by vector maxima (a NaN never wins, as
/// in the generic comparison), the signed maximum as the first value of that magnitude, each product made 0 if
/// NaN and clamped to [-128, 127] before rounding half away from zero as `trunc(p + copysign(0.49999997, p))`
/// (the generic rounds, then clamps: the same integers for every finite, infinite and NaN product). The compiled
/// generic loop finds the maximum and converts each value one scalar at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_q8k_avx2(x: &[f32], out: &mut [BlockQ8K]) {
    use std::arch::x86_64::*;
    debug_assert_eq!(x.len(), out.len() * QK_K);
    let sign = _mm256_set1_ps(-0.0);
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    for (x, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let p = x.as_ptr();
        // SAFETY (the loads below): `x` is QK_K floats, read 8 at a time at offsets below QK_K.
        let mut m = _mm256_setzero_ps();
        for i in (0..QK_K).step_by(8) {
            let a = _mm256_andnot_ps(sign, unsafe { _mm256_loadu_ps(p.add(i)) });
            // `max` returns its second operand when either is NaN: the running maximum, never NaN.
            m = _mm256_max_ps(a, m);
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let want = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in (0..QK_K).step_by(8) {
            let v = unsafe { _mm256_loadu_ps(p.add(i)) };
            let hit =
                _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, v), want));
            if hit != 0 {
                max = x[i + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let scale = _mm256_set1_ps(iscale);
        for (j, q) in b.qs.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            // A loop, not a closure: the closure was not inlined (a call per 8 values).
            let mut ints = [_mm256_setzero_si256(); 4];
            for (k, int) in ints.iter_mut().enumerate() {
                let v = unsafe { _mm256_loadu_ps(p.add(32 * j + 8 * k)) };
                let prod = _mm256_mul_ps(scale, v);
                let prod = _mm256_and_ps(prod, _mm256_cmp_ps::<_CMP_ORD_Q>(prod, prod));
                *int = round_half_away(_mm256_min_ps(_mm256_max_ps(prod, lo), hi));
            }
            store_i8(ints, q);
        }
        for (j, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

#[inline(always)]
fn quantize_q8_generic(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK8);
    for (x, b) in x.chunks_exact(QK8).zip(out.iter_mut()) {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        let d16 = f16::from_f32(d);
        b.d = d16.to_f32();
        b.s = (f16::from_f32(sum as f32) * d16).to_f32();
        b.sum = sum;
    }
}

/// Quantizes `x` (a multiple of 256 long) into `out` (`x.len() / 256` blocks).
pub fn quantize_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx2.has_avx2() {
        // SAFETY: the processor has AVX2 and FMA (checked just above).
        return unsafe { quantize_q8k_avx2(x, out) };
    }
    quantize_q8k_generic(x, out)
}

#[inline(always)]
fn quantize_q8k_generic(x: &[f32], out: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (x, b) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, v) in b.qs.iter_mut().zip(x) {
            *q = (iscale * v).round().clamp(-128.0, 127.0) as i8;
        }
        for (j, s) in b.bsums.iter_mut().enumerate() {
            *s = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
        }
        b.d = 1.0 / iscale;
    }
}

/// The activation block a weight type is dotted with.
pub trait ActBlock: Copy + Default + Send + Sync + 'static {
    /// Values per block.
    const ELEMS: usize;
    /// Quantizes `x` into blocks (the kernels' test harness builds its activations with it).
    #[cfg(test)]
    fn quantize(x: &[f32], out: &mut [Self]);
}

impl ActBlock for BlockQ8 {
    const ELEMS: usize = QK8;
    #[cfg(test)]
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q8(x, out)
    }
}

impl ActBlock for BlockQ8K {
    const ELEMS: usize = QK_K;
    #[cfg(test)]
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q8k(x, out)
    }
}

/// Which activation form a matrix reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    Q8,
    Q8K,
    F32,
}

/// One matmul input for `rows` tokens of `cols` values, in every form some reader needs: f32 always, Q8 and
/// Q8_K when asked. Quantized once, shared by the matrices reading the same input (q/k/v, gate/up). Buffers
/// only grow, so steady-state decoding allocates nothing.
#[derive(Default)]
pub struct Acts {
    pub rows: usize,
    pub cols: usize,
    pub f32: Vec<f32>,
    pub q8: Vec<BlockQ8>,
    pub q8k: Vec<BlockQ8K>,
    pub has_q8: bool,
    pub has_q8k: bool,
}

impl Acts {
    /// Sizes the buffers for `rows × cols` and records which quantized forms will be filled.
    pub fn reset(&mut self, rows: usize, cols: usize, kinds: &[ActKind]) {
        self.rows = rows;
        self.cols = cols;
        grow(&mut self.f32, rows * cols);
        self.has_q8 = kinds.contains(&ActKind::Q8) && cols.is_multiple_of(QK8);
        self.has_q8k = kinds.contains(&ActKind::Q8K) && cols.is_multiple_of(QK_K);
        if self.has_q8 {
            grow(&mut self.q8, rows * cols / QK8);
        }
        if self.has_q8k {
            grow(&mut self.q8k, rows * cols / QK_K);
        }
    }

    /// Fills every row in parallel: `make(r, row)` writes row `r`'s f32 values, which are then quantized into
    /// the forms asked for while the row is still in cache (the fused norm → quantize step).
    pub fn fill(&mut self, pool: &ThreadPool, make: &(dyn Fn(usize, &mut [f32]) + Sync)) {
        let (rows, cols) = (self.rows, self.cols);
        let (has_q8, has_q8k) = (self.has_q8, self.has_q8k);
        let f = SyncPtr(self.f32.as_mut_ptr());
        let q8 = SyncPtr(self.q8.as_mut_ptr());
        let q8k = SyncPtr(self.q8k.as_mut_ptr());
        pool.run(rows, &|r, _| {
            {
                // SAFETY: each row is one item, run once; `reset` sized every buffer for `rows` rows.
                let row = unsafe { f.slice(r * cols, cols) };
                make(r, row);
                if has_q8 {
                    // SAFETY: as above; Q8 rows are `cols / QK8` blocks.
                    quantize_q8(row, unsafe { q8.slice(r * cols / QK8, cols / QK8) });
                }
                if has_q8k {
                    // SAFETY: as above; Q8_K rows are `cols / QK_K` blocks.
                    quantize_q8k(row, unsafe { q8k.slice(r * cols / QK_K, cols / QK_K) });
                }
            }
        });
    }
}

/// A raw pointer handed to pool threads that write disjoint parts of one buffer.
#[derive(Clone, Copy)]
pub struct SyncPtr<T>(pub *mut T);

// SAFETY: used only for buffers whose parts are written by exactly one thread each (see every `slice` call).
unsafe impl<T> Sync for SyncPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Send for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    /// # Safety
    /// `start + len` must be within the buffer, and no other thread may touch that part meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// Grows `v` to at least `n` elements (never shrinks).
pub fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// Reads a matrix's activation rows out of [`Acts`].
pub trait ActRows: ActBlock {
    fn rows(acts: &Acts) -> &[Self];
}

impl ActRows for BlockQ8 {
    fn rows(acts: &Acts) -> &[Self] {
        &acts.q8
    }
}

impl ActRows for BlockQ8K {
    fn rows(acts: &Acts) -> &[Self] {
        &acts.q8k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizing_q8_gives_the_generic_blocks_bit_for_bit() {
        let mut x: Vec<f32> = (0..64 * QK8)
            .map(|i| (((i * 7919) % 2003) as f32 - 1001.0) * 0.0137 * (1 + i % 5) as f32)
            .collect();
        // Ties: with amax 127 the scale is 1, so x.5 values round away from zero (not to even).
        for (i, v) in x[..QK8].iter_mut().enumerate() {
            *v = if i == 0 { 127.0 } else { i as f32 - 16.5 };
        }
        x[QK8..2 * QK8].fill(0.0);
        x[2 * QK8..3 * QK8].fill(-3.0);
        // Σqs = 31 · 127 + 2 = 3939, odd above 2048, with d = 0.017: `s` rounds Σqs to f16 before the product
        // (67, not 66.94).
        x[3 * QK8..4 * QK8].fill(127.0 * 0.017);
        x[4 * QK8 - 1] = 2.0 * 0.017;
        let mut want = vec![BlockQ8::default(); 64];
        quantize_q8_generic(&x, &mut want);
        let mut got = vec![BlockQ8::default(); 64];
        quantize_q8(&x, &mut got);
        assert_eq!(want[0].qs[1..4], [-16, -15, -14]);
        assert_eq!(want[0].qs[17..20], [1, 2, 3]);
        assert_eq!((want[3].sum, want[3].s), (3939, 67.0));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "block {i}");
        }
    }

    #[test]
    fn quantizing_q8k_gives_the_generic_blocks_bit_for_bit() {
        let blocks = 12;
        let mut x: Vec<f32> = (0..blocks * QK_K)
            .map(|i| (((i * 7919) % 2003) as f32 - 1001.0) * 0.0137 * (1 + i % 5) as f32)
            .collect();
        let block = |k: usize| k * QK_K..(k + 1) * QK_K;
        // Ties of magnitude: the first value of the largest magnitude sets the sign of the scale.
        let r = block(1);
        x[r.clone()].fill(1.0);
        x[r.start + 3] = -5.0;
        x[r.start + 200] = 5.0;
        let r = block(2);
        x[r.clone()].fill(0.5);
        x[r.start + 7] = 5.0;
        x[r.start + 9] = -5.0;
        // All zero; a NaN among values (never the maximum; its product quantizes to 0); infinities; a tiny
        // maximum whose scale overflows to infinity (products clamp to the ends, 0 · inf is NaN).
        let r = block(3);
        x[r].fill(0.0);
        let r = block(4);
        x[r.start + 10] = f32::NAN;
        x[r.end - 1] = f32::NAN;
        let r = block(5);
        x[r.start] = f32::INFINITY;
        x[r.start + 1] = f32::NEG_INFINITY;
        let r = block(6);
        x[r.clone()].fill(0.0);
        x[r.start + 4] = 1e-45;
        x[r.start + 5] = -1e-45;
        // Products at .5: with max -127 the scale is 1, so x.5 rounds away from zero (not to even).
        let r = block(7);
        for (i, v) in x[r.clone()].iter_mut().enumerate() {
            *v = (i % 200) as f32 * 0.5 - 50.25;
        }
        x[r.start] = -127.0;
        x[r.start + 1] = -126.5;
        x[r.start + 2] = 0.5;
        let mut want = vec![BlockQ8K::default(); blocks];
        quantize_q8k_generic(&x, &mut want);
        let mut got = vec![BlockQ8K::default(); blocks];
        quantize_q8k(&x, &mut got);
        // d = -max / 127: the first maximum is -5 in block 1, +5 in block 2.
        assert!(
            want[1].d > 0.0 && want[2].d < 0.0,
            "{} {}",
            want[1].d,
            want[2].d
        );
        assert_eq!(&want[7].qs[..3], &[-127, -127, 1]);
        assert_eq!(want[4].qs[10], 0);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.qs, w.qs, "block {i}");
            assert_eq!(g.bsums, w.bsums, "block {i}");
            assert_eq!(g.d.to_bits(), w.d.to_bits(), "block {i}");
        }
    }
}
