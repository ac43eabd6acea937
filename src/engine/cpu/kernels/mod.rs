//! Dot-product kernels: one file per weight type, each dotting rows of that type (kept in the GGUF's own block
//! layout) with quantized activations, with a scalar path and the SIMD paths of [`Isa`]. The forward pass and
//! [`super::qmatrix`] reach them only through [`WeightKernel`], so adding a type is adding a file.

use candle_core::quantized::GgmlDType;

use crate::engine::cpu::act::ActBlock;
use crate::engine::cpu::isa::Isa;

mod block32;
mod kquant;
pub(crate) mod ktile;
pub(crate) mod packed;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

/// A weight type the matrices keep as row-interleaved tiles of eight rows ([`packed`] for the 32-value types,
/// [`ktile`] for Q4_K and Q6_K): packing, reading a row back, and the tile dot.
pub(crate) trait Tiled: WeightKernel {
    /// Bytes of one tile (block `i` of eight rows).
    const TILE: usize;

    /// Packs a `[rows, nb · BLOCK_ELEMS]` matrix of raw blocks into row groups of eight tiles per block.
    fn pack(raw: &[u8], rows: usize, nb: usize) -> Vec<u8>;

    /// Writes row `r` of `tile` back as the raw block it was packed from.
    fn unpack(tile: &[u8], r: usize, out: &mut [u8]);

    /// The eight rows of a row group (`nb` tiles) · `N` activation rows, on the best path `isa` allows:
    /// `out[t][r]`, bit for bit the type's reference row dot.
    fn dot_group<const N: usize>(isa: Isa, group: &[u8], x: [&[Self::Act]; N]) -> [[f32; 8]; N];
}

/// A quantized weight type's dot products.
pub trait WeightKernel: Send + Sync + 'static {
    const NAME: &'static str;
    /// The GGUF/ggml type of the rows (read by the kernels' tests, which check against candle's dequantisation).
    #[cfg_attr(not(test), allow(dead_code))]
    const DTYPE: GgmlDType;
    /// Values and bytes per weight block, as stored in the file.
    const BLOCK_ELEMS: usize;
    const BLOCK_BYTES: usize;
    /// The activation blocks the rows are dotted with (`Act::ELEMS == BLOCK_ELEMS`).
    type Act: ActBlock;

    /// One weight row (its raw blocks: `x.len() * BLOCK_BYTES` bytes) · one activation row.
    fn vec_dot(isa: Isa, w: &[u8], x: &[Self::Act]) -> f32;

    /// One weight row · four activation rows: the GEMM micro-kernel, which unpacks each weight block once for
    /// four tokens. The default calls `vec_dot` four times.
    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[Self::Act]; 4]) -> [f32; 4] {
        x.map(|x| Self::vec_dot(isa, w, x))
    }

    /// Two weight rows · four activation rows (each activation load serves both rows); row `r`'s results
    /// are bit for bit `vec_dot_x4(isa, w[r], x)`. The default calls `vec_dot_x4` twice.
    fn vec_dot_2x4(isa: Isa, w: [&[u8]; 2], x: [&[Self::Act]; 4]) -> [[f32; 4]; 2] {
        w.map(|w| Self::vec_dot_x4(isa, w, x))
    }
}

/// `acc + Σ` of the four `a·b` byte products per lane: aarch64's `sdot` (the dot-product extension), shared by
/// the packed tiles and the K-quant kernels.
#[cfg(target_arch = "aarch64")]
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn neon_sdot(
    acc: std::arch::aarch64::int32x4_t,
    a: std::arch::aarch64::int8x16_t,
    b: std::arch::aarch64::int8x16_t,
) -> std::arch::aarch64::int32x4_t {
    let mut acc = acc;
    // SAFETY: `sdot` only reads and writes these registers; the dot-product extension is enabled for this
    // function (callers reach it only where it was detected).
    unsafe {
        std::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Reads a little-endian f16 at `b[at..at + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Test harness shared by the kernel files: random weight blocks, candle's dequantize-and-dot as the
/// reference, every instruction set this machine has.
#[cfg(test)]
pub(crate) mod testing {
    use candle_core::quantized::ggml_file::qtensor_from_ggml;
    use candle_core::quantized::k_quants::GgmlType;
    use candle_core::Device;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::engine::cpu::act::{ActBlock, BlockQ8K};
    use crate::engine::cpu::isa::Isa;
    use crate::engine::cpu::kernels::WeightKernel;

    /// An f16 scale in `[-lim, lim]`, as little-endian bytes.
    pub fn scale(rng: &mut StdRng, lim: f32) -> [u8; 2] {
        half::f16::from_f32(rng.gen_range(-lim..lim)).to_le_bytes()
    }

    /// Random activations with a few outliers (what real hidden states look like).
    pub fn activations(rng: &mut StdRng, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v: f32 = rng.gen_range(-1.0..1.0);
                if i % 97 == 13 {
                    v * 20.0
                } else {
                    v
                }
            })
            .collect()
    }

    /// Checks `K` on `rows` random rows of `blocks` blocks each (`block(rng)` makes one block's bytes):
    /// every instruction set agrees with the scalar path within float rounding, the scalar path agrees with
    /// candle's dequantized weights dotted with the dequantized activations, and `vec_dot_x4` with `vec_dot`.
    pub fn check_kernel<K: WeightKernel>(
        block: impl Fn(&mut StdRng) -> Vec<u8>,
        dequant_act: impl Fn(&K::Act) -> Vec<f32>,
    ) {
        let mut rng = StdRng::seed_from_u64(0x5eed ^ K::BLOCK_BYTES as u64);
        for blocks in [1usize, 2, 3, 8] {
            let rows = 5;
            let cols = blocks * K::BLOCK_ELEMS;
            let mut raw = Vec::new();
            for _ in 0..rows * blocks {
                let b = block(&mut rng);
                assert_eq!(b.len(), K::BLOCK_BYTES, "{}: block size", K::NAME);
                raw.extend(b);
            }
            let q = qtensor_from_ggml(K::DTYPE, &raw, vec![rows, cols], &Device::Cpu)
                .expect("candle reads the blocks");
            let w: Vec<f32> = q
                .dequantize(&Device::Cpu)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle dequantizes");
            let acts: Vec<Vec<K::Act>> = (0..4)
                .map(|_| {
                    let x = activations(&mut rng, cols);
                    let mut a = vec![K::Act::default(); blocks];
                    K::Act::quantize(&x, &mut a);
                    a
                })
                .collect();
            for r in 0..rows {
                let wr = &raw[r * blocks * K::BLOCK_BYTES..(r + 1) * blocks * K::BLOCK_BYTES];
                let wf = &w[r * cols..(r + 1) * cols];
                for a in &acts {
                    let xf: Vec<f32> = a.iter().flat_map(&dequant_act).collect();
                    let terms: Vec<f64> = wf
                        .iter()
                        .zip(&xf)
                        .map(|(w, x)| *w as f64 * *x as f64)
                        .collect();
                    let want: f64 = terms.iter().sum();
                    let mag: f64 = terms.iter().map(|t| t.abs()).sum::<f64>() + 1e-6;
                    let scalar = K::vec_dot(Isa::Scalar, wr, a);
                    assert!(
                        ((scalar as f64 - want) / mag).abs() < 1e-3,
                        "{} {blocks} blocks row {r}: scalar {scalar} vs candle {want} (magnitude {mag})",
                        K::NAME
                    );
                    for isa in Isa::available() {
                        let got = K::vec_dot(isa, wr, a);
                        assert!(
                            ((got as f64 - scalar as f64) / mag).abs() < 1e-5,
                            "{} {blocks} blocks row {r}: {} {got} vs scalar {scalar}",
                            K::NAME,
                            isa.name()
                        );
                    }
                }
                for isa in Isa::available() {
                    let x4 = K::vec_dot_x4(isa, wr, [&acts[0], &acts[1], &acts[2], &acts[3]]);
                    for (t, got) in x4.iter().enumerate() {
                        let one = K::vec_dot(isa, wr, &acts[t]);
                        assert!(
                            (got - one).abs() <= 1e-5 * (one.abs() + 1.0),
                            "{} {}: x4[{t}] {got} vs vec_dot {one}",
                            K::NAME,
                            isa.name()
                        );
                    }
                }
            }
        }
    }

    /// candle's dot product of K-quant rows (`w`: raw blocks of `T`) with Q8_K activations, whose layout
    /// (`repr(C)` d, qs, bsums) ours shares.
    pub fn candle_k_dot<T>(w: &[u8], x: &[BlockQ8K]) -> f32
    where
        T: GgmlType<VecDotType = candle_core::quantized::k_quants::BlockQ8K>,
    {
        let n = w.len() / std::mem::size_of::<T>();
        assert_eq!(w.as_ptr() as usize % std::mem::align_of::<T>(), 0);
        // SAFETY: `T` is a `repr(C)` block of plain bytes and f16s, `w` holds `n` of them and is aligned for
        // them (checked); candle's `BlockQ8K` is `repr(C)` with our `BlockQ8K`'s fields.
        let (ws, xs) = unsafe {
            (
                std::slice::from_raw_parts(w.as_ptr() as *const T, n),
                std::slice::from_raw_parts(
                    x.as_ptr() as *const candle_core::quantized::k_quants::BlockQ8K,
                    x.len(),
                ),
            )
        };
        T::vec_dot(n * T::BLCK_SIZE, ws, xs)
    }

    /// One row of `blocks` random blocks and four activation rows for it.
    fn long_row<K: WeightKernel>(
        rng: &mut StdRng,
        blocks: usize,
        block: &impl Fn(&mut StdRng) -> Vec<u8>,
    ) -> (Vec<u8>, Vec<Vec<K::Act>>) {
        let w: Vec<u8> = (0..blocks).flat_map(|_| block(rng)).collect();
        let acts = (0..4)
            .map(|_| {
                let x = activations(rng, blocks * K::BLOCK_ELEMS);
                let mut a = vec![K::Act::default(); blocks];
                K::Act::quantize(&x, &mut a);
                a
            })
            .collect();
        (w, acts)
    }

    /// Every instruction set this machine has, `vec_dot` and `vec_dot_x4`, against the scalar path on a
    /// 4864-column row (19 K-quant super-blocks: more than any unrolling, not a power of two).
    pub fn long_row_every_isa<K: WeightKernel>(block: impl Fn(&mut StdRng) -> Vec<u8>) {
        let mut rng = StdRng::seed_from_u64(4864 ^ K::BLOCK_BYTES as u64);
        let (w, acts) = long_row::<K>(&mut rng, 4864 / K::BLOCK_ELEMS, &block);
        let xs = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
        for isa in Isa::available() {
            let x4 = K::vec_dot_x4(isa, &w, xs);
            for (t, a) in acts.iter().enumerate() {
                let want = K::vec_dot(Isa::Scalar, &w, a);
                let got = K::vec_dot(isa, &w, a);
                let tol = 1e-5 * want.abs().max(1.0);
                assert!(
                    (got - want).abs() <= tol,
                    "{} {}: {got} vs scalar {want}",
                    K::NAME,
                    isa.name()
                );
                assert!(
                    (x4[t] - want).abs() <= tol,
                    "{} {} x4[{t}]: {} vs scalar {want}",
                    K::NAME,
                    isa.name(),
                    x4[t]
                );
            }
        }
    }

    /// Prints ns per row-dot (one weight row · one activation row) of a 4864-column row for every
    /// instruction set, `vec_dot` and `vec_dot_x4` (which counts four row-dots per call).
    /// `baseline` (candle's own dot, which ports ggml's AVX2 code) is timed alongside, under the same load.
    pub fn timing<K: WeightKernel>(
        block: impl Fn(&mut StdRng) -> Vec<u8>,
        baseline: impl Fn(&[u8], &[K::Act]) -> f32,
    ) {
        let mut rng = StdRng::seed_from_u64(7);
        let nb = 4864 / K::BLOCK_ELEMS;
        // 64 rows (~0.7 MB of Q4_K): past L2, as a matmul's weights are.
        let rows = 64;
        let mut w = Vec::new();
        let mut acts = Vec::new();
        for _ in 0..rows {
            let (wr, a) = long_row::<K>(&mut rng, nb, &block);
            w.extend(wr);
            if acts.is_empty() {
                acts = a;
            }
        }
        let xs = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
        let rb = nb * K::BLOCK_BYTES;
        // The fastest of 100 short trials: the build machine is shared, and preemption only adds time.
        let best = |f: &mut dyn FnMut() -> f32| {
            let mut best = f64::MAX;
            let mut sink = 0f32;
            for _ in 0..100 {
                let t0 = std::time::Instant::now();
                sink += f();
                best = best.min(t0.elapsed().as_nanos() as f64);
            }
            std::hint::black_box(sink);
            best
        };
        let reps = 20;
        let base = best(&mut || {
            let mut sink = 0f32;
            for _ in 0..reps {
                for r in 0..rows {
                    sink += baseline(std::hint::black_box(&w[r * rb..(r + 1) * rb]), xs[r & 3]);
                }
            }
            sink
        }) / (reps * rows) as f64;
        println!(
            "{:>5} {:>10}: vec_dot {base:7.1} ns/row-dot",
            K::NAME,
            "candle"
        );
        for isa in Isa::available() {
            let reps = if isa == Isa::Scalar { 2 } else { reps };
            let one = best(&mut || {
                let mut sink = 0f32;
                for _ in 0..reps {
                    for r in 0..rows {
                        sink += K::vec_dot(
                            isa,
                            std::hint::black_box(&w[r * rb..(r + 1) * rb]),
                            xs[r & 3],
                        );
                    }
                }
                sink
            }) / (reps * rows) as f64;
            let x4 = best(&mut || {
                let mut sink = 0f32;
                for _ in 0..reps {
                    for r in 0..rows {
                        let w = std::hint::black_box(&w[r * rb..(r + 1) * rb]);
                        sink += K::vec_dot_x4(isa, w, xs).iter().sum::<f32>();
                    }
                }
                sink
            }) / (reps * rows * 4) as f64;
            println!(
                "{:>5} {:>10}: vec_dot {one:7.1} ns/row-dot, vec_dot_x4 {x4:7.1} ns/row-dot",
                K::NAME,
                isa.name()
            );
        }
    }

    /// Every instruction set against the scalar path on saturated inputs: each of `blocks` (weight blocks
    /// with extreme quants and scales) as a one-block row, against Q8_K activations all 127, all −128, and
    /// alternating, so that no 16-bit intermediate of a SIMD path may saturate.
    pub fn extremes_every_isa<K: WeightKernel<Act = BlockQ8K>>(blocks: &[Vec<u8>]) {
        let act = |f: &dyn Fn(usize) -> i8| {
            let mut a = BlockQ8K {
                d: 1.0 / 127.0,
                ..Default::default()
            };
            for (i, q) in a.qs.iter_mut().enumerate() {
                *q = f(i);
            }
            for (j, s) in a.bsums.iter_mut().enumerate() {
                *s = a.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
            }
            vec![a]
        };
        let acts = [
            act(&|_| 127),
            act(&|_| -128),
            act(&|i| if i % 2 == 0 { 127 } else { -128 }),
            act(&|i| if (i / 16) % 2 == 0 { -128 } else { 127 }),
        ];
        let xs = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
        for (b, w) in blocks.iter().enumerate() {
            assert_eq!(w.len(), K::BLOCK_BYTES);
            for isa in Isa::available() {
                let x4 = K::vec_dot_x4(isa, w, xs);
                for (t, a) in acts.iter().enumerate() {
                    let want = K::vec_dot(Isa::Scalar, w, a);
                    let got = K::vec_dot(isa, w, a);
                    let tol = 1e-5 * want.abs().max(1.0);
                    assert!(
                        (got - want).abs() <= tol && (x4[t] - want).abs() <= tol,
                        "{} {} block {b} activations {t}: {got} (x4 {}) vs scalar {want}",
                        K::NAME,
                        isa.name(),
                        x4[t]
                    );
                }
            }
        }
    }

    /// Checks a tiled type against its reference row dot `reference(raw row, activation row)`: every group of the
    /// packed `raw` (`rows` × `nb` blocks) with 1, 2, 3, 4 and 8 tokens per call (windows of `acts`, wrapping
    /// around) on every instruction set this machine has, bit for bit (padding rows give 0); and every row's
    /// blocks come back out of the tiles as stored.
    pub fn check_tiled<T: super::Tiled, R: Fn(&[u8], &[T::Act]) -> f32>(
        raw: &[u8],
        rows: usize,
        nb: usize,
        acts: &[Vec<T::Act>],
        reference: R,
    ) {
        let packed = T::pack(raw, rows, nb);
        let gb = nb * T::TILE;
        assert_eq!(packed.len(), rows.div_ceil(8) * gb);
        check_n::<T, R, 1>(&packed, raw, rows, nb, acts, &reference);
        check_n::<T, R, 2>(&packed, raw, rows, nb, acts, &reference);
        check_n::<T, R, 3>(&packed, raw, rows, nb, acts, &reference);
        check_n::<T, R, 4>(&packed, raw, rows, nb, acts, &reference);
        check_n::<T, R, 8>(&packed, raw, rows, nb, acts, &reference);
        let mut out = vec![0u8; T::BLOCK_BYTES];
        for row in 0..rows {
            for i in 0..nb {
                let tile = &packed[((row / 8) * nb + i) * T::TILE..][..T::TILE];
                T::unpack(tile, row % 8, &mut out);
                let at = (row * nb + i) * T::BLOCK_BYTES;
                assert_eq!(
                    out,
                    raw[at..at + T::BLOCK_BYTES],
                    "{} row {row} block {i}",
                    T::NAME
                );
            }
        }
    }

    fn check_n<T: super::Tiled, R: Fn(&[u8], &[T::Act]) -> f32, const N: usize>(
        packed: &[u8],
        raw: &[u8],
        rows: usize,
        nb: usize,
        acts: &[Vec<T::Act>],
        reference: &R,
    ) {
        let row_bytes = nb * T::BLOCK_BYTES;
        for isa in Isa::available() {
            // Every window of N rows, wrapping around (N may be more than there are rows).
            for t0 in 0..acts.len() {
                let x: [&[T::Act]; N] = std::array::from_fn(|t| &acts[(t0 + t) % acts.len()][..]);
                for (g, group) in packed.chunks_exact(nb * T::TILE).enumerate() {
                    let got = T::dot_group::<N>(isa, group, x);
                    for (t, got) in got.iter().enumerate() {
                        for (r, got) in got.iter().enumerate() {
                            let row = g * 8 + r;
                            let want = if row < rows {
                                reference(&raw[row * row_bytes..(row + 1) * row_bytes], x[t])
                            } else {
                                0.0
                            };
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{} {}: {rows} rows × {nb} blocks, N = {N}, token {}, row {row}: {got} vs {want}",
                                T::NAME,
                                isa.name(),
                                (t0 + t) % acts.len()
                            );
                        }
                    }
                }
            }
        }
    }
}
