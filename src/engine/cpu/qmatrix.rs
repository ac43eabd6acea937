//! A weight matrix used as `y = x · Wᵀ` on the CPU: the rows of the file's own quantized type with its kernel
//! from [`super::kernels`], or f32 rows for types without one. `matmul_many` runs several matrices that read
//! the same activations (q/k/v, gate/up) in one pool job whose items are blocks of 16 rows (claimed by the
//! threads one at a time); a block's weights stay in cache while the micro-kernel walks the token batch
//! (prefill as a tiled GEMM): rows go in pairs across 4 tokens (`vec_dot_2x4`), so a weight block is unpacked
//! once per four tokens and an activation block loaded once per two rows.

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::GgmlDType;
use candle_core::Device;

use crate::engine::cpu::act::{ActBlock, ActKind, ActRows, Acts, SyncPtr};
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::kernels::{self, WeightKernel};
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
        if K::Act::ELEMS == crate::engine::cpu::act::QK_K {
            ActKind::Q8K
        } else {
            ActKind::Q8
        }
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
            GgmlDType::Q4_0 => Self::typed::<kernels::q4_0::Q4_0>(data, rows, cols, isa)?,
            GgmlDType::Q4_1 => Self::typed::<kernels::q4_1::Q4_1>(data, rows, cols, isa)?,
            GgmlDType::Q5_0 => Self::typed::<kernels::q5_0::Q5_0>(data, rows, cols, isa)?,
            GgmlDType::Q5_1 => Self::typed::<kernels::q5_1::Q5_1>(data, rows, cols, isa)?,
            GgmlDType::Q8_0 => Self::typed::<kernels::q8_0::Q8_0>(data, rows, cols, isa)?,
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
