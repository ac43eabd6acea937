//! A weight matrix used as `y = x · Wᵀ` on the CPU: the 32-value block types and Q4_K/Q6_K repacked at load
//! into row-interleaved tiles ([`kernels::Tiled`]), the other K-quants (and, on AVX-512, all of them) in the
//! file's own blocks with their kernels, or f32 rows for types without one. `matmul_many` runs several matrices that read the same activations (q/k/v,
//! gate/up) in one pool job whose items are blocks of 16 rows (claimed by the threads one at a time); a block's
//! weights stay in cache while the micro-kernel walks the token batch (prefill as a tiled GEMM, batched decode
//! alike): a tile serves 8 rows × 8 tokens per weight unpack (then 4, then the rest); rows kept as stored go in
//! pairs across 4 tokens (`vec_dot_2x4`).

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::GgmlDType;
use candle_core::Device;

use crate::engine::cpu::act::{ActBlock, ActKind, ActRows, Acts, SyncPtr};
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::kernels::packed::ROWS;
use crate::engine::cpu::kernels::{self, ktile, Tiled, WeightKernel};
use crate::engine::cpu::pool::ThreadPool;
use crate::engine::cpu::vector;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::SharedBytes;

/// Output rows a thread handles together: their weights stay in L1/L2 while every token is dotted with them.
const ROW_BLOCK: usize = 16;

/// The type-specific part of a matrix.
trait Rows: Send + Sync {
    fn act_kind(&self) -> ActKind;
    /// `out[t * stride + r] = x_t · W_r` for every token `t < acts.rows` and row `r` in `rows`.
    fn compute(&self, acts: &Acts, rows: std::ops::Range<usize>, out: SyncPtr<f32>, stride: usize);
    fn storage_bytes(&self) -> usize;
    /// Row `r` as the file stored it (`out`: one row's bytes), where the rows are kept in another layout.
    fn raw_row(&self, _r: usize, _out: &mut [u8]) -> bool {
        false
    }
}

/// Rows in a quantized type with a kernel, kept in the file's block layout.
struct Typed<K: WeightKernel> {
    data: SharedBytes,
    row_bytes: usize,
    isa: Isa,
    _k: std::marker::PhantomData<K>,
}

impl<K: WeightKernel> Rows for Typed<K>
where
    K::Act: ActRows,
{
    fn act_kind(&self) -> ActKind {
        act_kind_of::<K>()
    }

    fn compute(&self, acts: &Acts, rows: std::ops::Range<usize>, out: SyncPtr<f32>, stride: usize) {
        let all = K::Act::rows(acts);
        let nb = acts.cols / K::Act::ELEMS;
        let x = |t: usize| &all[t * nb..(t + 1) * nb];
        let n = acts.rows;
        let mut r0 = rows.start;
        while r0 < rows.end {
            let r1 = (r0 + ROW_BLOCK).min(rows.end);
            let mut t = 0;
            let row = |r: usize| &self.data[r * self.row_bytes..(r + 1) * self.row_bytes];
            while t + 4 <= n {
                let x4 = [x(t), x(t + 1), x(t + 2), x(t + 3)];
                let mut r = r0;
                while r + 2 <= r1 {
                    let y = K::vec_dot_2x4(self.isa, [row(r), row(r + 1)], x4);
                    for (i, y) in y.iter().enumerate() {
                        for (j, v) in y.iter().enumerate() {
                            // SAFETY: rows `r`, `r + 1` belong to this thread alone; `t + j < n` rows of
                            // `stride` fit `out`.
                            unsafe { *out.0.add((t + j) * stride + r + i) = *v };
                        }
                    }
                    r += 2;
                }
                if r < r1 {
                    let y = K::vec_dot_x4(self.isa, row(r), x4);
                    for (j, v) in y.iter().enumerate() {
                        // SAFETY: row `r` belongs to this thread alone; `t + j < n` rows of `stride` fit `out`.
                        unsafe { *out.0.add((t + j) * stride + r) = *v };
                    }
                }
                t += 4;
            }
            for t in t..n {
                for r in r0..r1 {
                    // SAFETY: as above.
                    unsafe { *out.0.add(t * stride + r) = K::vec_dot(self.isa, row(r), x(t)) };
                }
            }
            r0 = r1;
        }
    }

    fn storage_bytes(&self) -> usize {
        self.data.len()
    }
}

/// Rows of a tiled type ([`Tiled`]), packed into row groups of eight (the last one padded).
struct Packed<T: Tiled> {
    data: SharedBytes,
    rows: usize,
    /// Blocks per row.
    nb: usize,
    isa: Isa,
    _t: std::marker::PhantomData<T>,
}

impl<T: Tiled> Packed<T>
where
    T::Act: ActRows,
{
    /// Tokens `t0..t0 + N` through row group `g`, written to `out[t * stride + row]` for its real rows.
    #[inline]
    fn tokens<const N: usize>(
        &self,
        x: &[T::Act],
        t0: usize,
        g: usize,
        out: SyncPtr<f32>,
        stride: usize,
    ) {
        let gb = self.nb * T::TILE;
        let group = &self.data[g * gb..(g + 1) * gb];
        let xs: [&[T::Act]; N] =
            std::array::from_fn(|t| &x[(t0 + t) * self.nb..(t0 + t + 1) * self.nb]);
        let y = T::dot_group::<N>(self.isa, group, xs);
        let r0 = g * ROWS;
        let live = ROWS.min(self.rows - r0);
        for (t, y) in y.iter().enumerate() {
            // SAFETY: the group's rows belong to this thread alone; `t0 + t` is a token of the batch, whose
            // `stride`-wide output row holds rows `r0..r0 + live`.
            unsafe {
                let dst = out.0.add((t0 + t) * stride + r0);
                if live == ROWS {
                    // A whole group: one fixed-size store, not a `memcpy` call per group and token (the padded
                    // last group's copy sits in a function of its own so that the compiler cannot merge the two).
                    dst.cast::<[f32; ROWS]>().write_unaligned(*y);
                } else {
                    copy_partial(y, dst, live);
                }
            };
        }
    }
}

/// The `live` real rows of a padded last group into `dst`.
///
/// # Safety
/// `dst` is valid for `live` (≤ [`ROWS`]) writes.
#[cold]
#[inline(never)]
unsafe fn copy_partial(y: &[f32; ROWS], dst: *mut f32, live: usize) {
    // SAFETY: the caller's guarantee; `y` holds ROWS ≥ live values.
    unsafe { std::ptr::copy_nonoverlapping(y.as_ptr(), dst, live.min(ROWS)) };
}

impl<T: Tiled> Rows for Packed<T>
where
    T::Act: ActRows,
{
    fn act_kind(&self) -> ActKind {
        act_kind_of::<T>()
    }

    fn compute(&self, acts: &Acts, rows: std::ops::Range<usize>, out: SyncPtr<f32>, stride: usize) {
        let x = T::Act::rows(acts);
        let n = acts.rows;
        // Row ranges start on a multiple of ROW_BLOCK, hence of a group.
        debug_assert!(rows.start.is_multiple_of(ROWS));
        for g in rows.start / ROWS..rows.end.div_ceil(ROWS) {
            // Eight tokens per call where there are eight: each weight vector's unpack (the Q5 types' fifth
            // bits above all) then serves twice as many tokens.
            let mut t = 0;
            while t + 8 <= n {
                self.tokens::<8>(x, t, g, out, stride);
                t += 8;
            }
            while t + 4 <= n {
                self.tokens::<4>(x, t, g, out, stride);
                t += 4;
            }
            match n - t {
                3 => self.tokens::<3>(x, t, g, out, stride),
                2 => self.tokens::<2>(x, t, g, out, stride),
                1 => self.tokens::<1>(x, t, g, out, stride),
                _ => {}
            }
        }
    }

    fn storage_bytes(&self) -> usize {
        self.data.len()
    }

    fn raw_row(&self, r: usize, out: &mut [u8]) -> bool {
        if r >= self.rows || out.len() != self.nb * T::BLOCK_BYTES {
            return false;
        }
        let group = &self.data[(r / ROWS) * self.nb * T::TILE..];
        for (i, b) in out.chunks_exact_mut(T::BLOCK_BYTES).enumerate() {
            T::unpack(&group[i * T::TILE..(i + 1) * T::TILE], r % ROWS, b);
        }
        true
    }
}

/// The activations a type's rows are dotted with.
fn act_kind_of<K: WeightKernel>() -> ActKind {
    if K::Act::ELEMS == crate::engine::cpu::act::QK_K {
        ActKind::Q8K
    } else {
        ActKind::Q8
    }
}

/// f32 rows (types without a kernel, and f32/f16 files): exact, slower.
struct F32Rows {
    data: Vec<f32>,
    cols: usize,
    isa: Isa,
}

impl Rows for F32Rows {
    fn act_kind(&self) -> ActKind {
        ActKind::F32
    }

    fn compute(&self, acts: &Acts, rows: std::ops::Range<usize>, out: SyncPtr<f32>, stride: usize) {
        let c = self.cols;
        for r in rows {
            let w = &self.data[r * c..(r + 1) * c];
            for t in 0..acts.rows {
                let v = vector::dot(self.isa, w, &acts.f32[t * c..(t + 1) * c]);
                // SAFETY: row `r` belongs to this thread alone.
                unsafe { *out.0.add(t * stride + r) = v };
            }
        }
    }

    fn storage_bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// A `[rows, cols]` weight matrix.
pub struct QMatrix {
    pub rows: usize,
    pub cols: usize,
    pub dtype: GgmlDType,
    inner: Box<dyn Rows>,
}

impl QMatrix {
    /// Takes a matrix's raw GGUF bytes: kept as stored when a kernel exists for `dtype`, else dequantized to f32.
    pub fn from_raw(
        data: SharedBytes,
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
        isa: Isa,
    ) -> Result<Self> {
        let inner: Box<dyn Rows> = match dtype {
            GgmlDType::Q4_0 => Self::packed::<kernels::q4_0::Q4_0>(data, rows, cols, isa)?,
            GgmlDType::Q4_1 => Self::packed::<kernels::q4_1::Q4_1>(data, rows, cols, isa)?,
            GgmlDType::Q5_0 => Self::packed::<kernels::q5_0::Q5_0>(data, rows, cols, isa)?,
            GgmlDType::Q5_1 => Self::packed::<kernels::q5_1::Q5_1>(data, rows, cols, isa)?,
            GgmlDType::Q8_0 => Self::packed::<kernels::q8_0::Q8_0>(data, rows, cols, isa)?,
            GgmlDType::Q4K if ktile::tiles_for(isa) => {
                Self::packed::<kernels::q4_k::Q4K>(data, rows, cols, isa)?
            }
            GgmlDType::Q6K if ktile::tiles_for(isa) => {
                Self::packed::<kernels::q6_k::Q6K>(data, rows, cols, isa)?
            }
            GgmlDType::Q4K => Self::typed::<kernels::q4_k::Q4K>(data, rows, cols, isa)?,
            GgmlDType::Q5K => Self::typed::<kernels::q5_k::Q5K>(data, rows, cols, isa)?,
            GgmlDType::Q6K => Self::typed::<kernels::q6_k::Q6K>(data, rows, cols, isa)?,
            _ => {
                let f = qtensor_from_ggml(dtype, &data, vec![rows, cols], &Device::Cpu)?
                    .dequantize(&Device::Cpu)?
                    .flatten_all()?
                    .to_vec1()?;
                Box::new(F32Rows { data: f, cols, isa })
            }
        };
        Ok(Self {
            rows,
            cols,
            dtype,
            inner,
        })
    }

    /// Repacks a tiled type's rows into tiles; the file's pages of them are handed back.
    fn packed<T: Tiled>(
        data: SharedBytes,
        rows: usize,
        cols: usize,
        isa: Isa,
    ) -> Result<Box<dyn Rows>>
    where
        T::Act: ActRows,
    {
        let nb = cols / T::BLOCK_ELEMS;
        if !cols.is_multiple_of(T::BLOCK_ELEMS) || data.len() != rows * nb * T::BLOCK_BYTES {
            return Err(EngineError::Internal(format!(
                "{} matrix [{rows}, {cols}]: {} bytes do not fit its blocks",
                T::NAME,
                data.len()
            )));
        }
        let tiles = T::pack(&data, rows, nb);
        data.release_pages();
        Ok(Box::new(Packed::<T> {
            data: SharedBytes::from(tiles),
            rows,
            nb,
            isa,
            _t: std::marker::PhantomData,
        }))
    }

    fn typed<K: WeightKernel>(
        data: SharedBytes,
        rows: usize,
        cols: usize,
        isa: Isa,
    ) -> Result<Box<dyn Rows>>
    where
        K::Act: ActRows,
    {
        if !cols.is_multiple_of(K::BLOCK_ELEMS)
            || data.len() != rows * cols / K::BLOCK_ELEMS * K::BLOCK_BYTES
        {
            return Err(EngineError::Internal(format!(
                "{} matrix [{rows}, {cols}]: {} bytes do not fit its blocks",
                K::NAME,
                data.len()
            )));
        }
        Ok(Box::new(Typed::<K> {
            row_bytes: cols / K::BLOCK_ELEMS * K::BLOCK_BYTES,
            data,
            isa,
            _k: std::marker::PhantomData,
        }))
    }

    pub fn act_kind(&self) -> ActKind {
        self.inner.act_kind()
    }

    pub fn storage_bytes(&self) -> usize {
        self.inner.storage_bytes()
    }

    /// Row `r` as the file stored it, for a matrix kept in another layout (a tied embedding table reads its
    /// rows back out of the output head's tiles); `false` where the matrix keeps the file's rows (or `out`
    /// is not one row's size).
    pub fn raw_row(&self, r: usize, out: &mut [u8]) -> bool {
        self.inner.raw_row(r, out)
    }
}

/// Most matrices one `matmul_many` call runs (q/k/v).
pub const MAX_JOBS: usize = 4;

/// Runs every `(matrix, out)` pair (at most [`MAX_JOBS`]) on the same activations in one pool job:
/// `out[t * matrix.rows + r]`.
pub fn matmul_many(pool: &ThreadPool, acts: &Acts, jobs: &mut [(&QMatrix, &mut [f32])]) {
    debug_assert!(jobs.len() <= MAX_JOBS);
    let mut targets: [Option<(&QMatrix, SyncPtr<f32>)>; MAX_JOBS] = [None; MAX_JOBS];
    for (slot, (m, out)) in targets.iter_mut().zip(jobs.iter_mut()) {
        assert!(
            out.len() >= acts.rows * m.rows && m.cols == acts.cols,
            "matmul shapes: {} tokens × {} cols into [{}, {}] with {} outputs",
            acts.rows,
            acts.cols,
            m.rows,
            m.cols,
            out.len()
        );
        *slot = Some((*m, SyncPtr(out.as_mut_ptr())));
    }
    // Items: every matrix's row blocks, in order.
    let blocks = |m: &QMatrix| m.rows.div_ceil(ROW_BLOCK);
    let items: usize = targets.iter().flatten().map(|(m, _)| blocks(m)).sum();
    pool.run(items, &|item, _| {
        let mut item = item;
        for (m, out) in targets.iter().flatten() {
            if item < blocks(m) {
                let r0 = item * ROW_BLOCK;
                m.inner
                    .compute(acts, r0..(r0 + ROW_BLOCK).min(m.rows), *out, m.rows);
                return;
            }
            item -= blocks(m);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::QTensor;
    use candle_core::Tensor;

    /// A matrix whose rows are not a whole number of tiles writes its padded last group's real rows only: every
    /// output equals the same row's output in a matrix of whole groups (rows are independent), bit for bit,
    /// and no token's row spills into the next token's (checked at 1, 3, 8 and 11 tokens, the tile calls of 8,
    /// 4 and the rest).
    #[test]
    fn a_partial_last_row_group_writes_its_real_rows_only() {
        let (rows, cols) = (13, 64);
        let pool = ThreadPool::new(2);
        for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0] {
            let w = Tensor::randn(0f32, 0.05, (16, cols), &Device::Cpu).unwrap();
            let raw = QTensor::quantize(&w, dtype)
                .unwrap()
                .data()
                .unwrap()
                .into_owned();
            let row_bytes = raw.len() / 16;
            let whole =
                QMatrix::from_raw(raw.clone().into(), dtype, 16, cols, Isa::detect()).unwrap();
            let part = QMatrix::from_raw(
                raw[..rows * row_bytes].to_vec().into(),
                dtype,
                rows,
                cols,
                Isa::detect(),
            )
            .unwrap();
            for n in [1, 3, 8, 11] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 7919) % 211) as f32 * 0.01 - 1.0)
                    .collect();
                let mut acts = Acts::default();
                acts.reset(n, cols, &[part.act_kind()]);
                acts.fill(&pool, &|r, row| {
                    row.copy_from_slice(&x[r * cols..(r + 1) * cols])
                });
                let mut want = vec![f32::NAN; n * 16];
                let mut got = vec![f32::NAN; n * rows];
                matmul_many(&pool, &acts, &mut [(&whole, &mut want)]);
                matmul_many(&pool, &acts, &mut [(&part, &mut got)]);
                for t in 0..n {
                    for r in 0..rows {
                        assert_eq!(
                            got[t * rows + r].to_bits(),
                            want[t * 16 + r].to_bits(),
                            "{dtype:?}, {n} tokens: token {t} row {r}"
                        );
                    }
                }
            }
        }
    }
}
