//! The CPU engine's paged KV store, in host memory: fixed-size blocks of [`BLOCK_TOKENS`] positions, each holding the keys and
//! values of every layer in `[layer][k|v][kv_head][slot][dim]` order, so attention for one head reads one
//! contiguous run of positions per block. Values are kept as the store's [`KvDtype`] (f32, f16, or q8_0 blocks)
//! and come back as f32 rows ([`KvBlocks::read`]). f16 keys are kept transposed within a head's run
//! (`[dim][slot]`: [`KvBlocks::f16_keys_t`]), the layout attention scores them in, so that it only converts
//! them instead of transposing every chunk of every sequence at every step. A sequence is a block table (block ids in position order) into one
//! shared [`KvBlocks`]; which block belongs to whom, and which full blocks hold a shared prefix, is the block
//! manager's business (`engine::blocks`). A block's memory is allocated on its first write and kept after.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::dtype::{KvDtype, Q8_0_BYTES, Q8_0_VALUES};
use super::BLOCK_TOKENS;
use crate::engine::error::{EngineError, Result};

/// Every block's memory, in the store's element type (q8_0 as raw blocks of bytes).
enum Data {
    F32(Vec<Vec<f32>>),
    F16(Vec<Vec<f16>>),
    Q8(Vec<Vec<u8>>),
}

/// Runs `$e` with `$b` bound to the block list, whatever its element type.
macro_rules! each {
    ($data:expr, $b:ident => $e:expr) => {
        match $data {
            Data::F32($b) => $e,
            Data::F16($b) => $e,
            Data::Q8($b) => $e,
        }
    };
}

/// The block store of one model: every block's keys and values.
pub struct KvBlocks {
    data: Data,
    n_layer: usize,
    n_kv: usize,
    dim: usize,
    /// Elements of the store's type per row of `dim` values (bytes for q8_0).
    row: usize,
}

impl KvBlocks {
    /// A store for `n_blocks` blocks of a model with `n_layer` layers of `n_kv` KV heads of `dim` values, kept
    /// as `dtype` (`auto` is f16 here). q8_0 needs `dim` to be a whole number of 32-value blocks.
    pub fn new(
        n_blocks: usize,
        n_layer: usize,
        n_kv: usize,
        dim: usize,
        dtype: KvDtype,
    ) -> Result<Self> {
        let dtype = dtype.resolve(true);
        let row = Self::row_units(dtype, dim)?;
        let data = match dtype {
            KvDtype::F32 | KvDtype::Auto => Data::F32(Vec::new()),
            KvDtype::F16 => Data::F16(Vec::new()),
            KvDtype::Q8_0 => Data::Q8(Vec::new()),
        };
        let mut store = Self {
            data,
            n_layer,
            n_kv,
            dim,
            row,
        };
        store.grow_to(n_blocks);
        Ok(store)
    }

    /// Elements per row of `dim` values as `dtype` (bytes for q8_0).
    fn row_units(dtype: KvDtype, dim: usize) -> Result<usize> {
        match dtype {
            KvDtype::Q8_0 => dtype.row_bytes(dim).ok_or_else(|| {
                EngineError::Config(format!(
                    "--kv-cache-dtype q8_0 needs heads of a multiple of {Q8_0_VALUES} values; this model's are \
                     {dim} (use f16)"
                ))
            }),
            _ => Ok(dim),
        }
    }

    /// The element type the store keeps.
    pub fn dtype(&self) -> KvDtype {
        match self.data {
            Data::F32(_) => KvDtype::F32,
            Data::F16(_) => KvDtype::F16,
            Data::Q8(_) => KvDtype::Q8_0,
        }
    }

    /// Bytes one block holds once written.
    pub fn block_bytes(&self) -> usize {
        self.units_per_block() * unit_bytes(self.dtype())
    }

    /// Bytes one block of such a model takes as `dtype` (`auto` as the CPU engine resolves it).
    pub fn bytes_per_block(
        n_layer: usize,
        n_kv: usize,
        dim: usize,
        dtype: KvDtype,
    ) -> Result<usize> {
        let dtype = dtype.resolve(true);
        Ok(n_layer * 2 * n_kv * BLOCK_TOKENS * Self::row_units(dtype, dim)? * unit_bytes(dtype))
    }

    fn units_per_block(&self) -> usize {
        self.n_layer * 2 * self.n_kv * BLOCK_TOKENS * self.row
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        each!(&self.data, b => b.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Grows the store to at least `n_blocks` blocks (new ones take no memory until written).
    pub fn grow_to(&mut self, n_blocks: usize) {
        each!(&mut self.data, b => if n_blocks > b.len() {
            b.resize_with(n_blocks, Vec::new)
        })
    }

    /// Bytes allocated (blocks written at least once).
    pub fn memory_bytes(&self) -> usize {
        let written = each!(&self.data, b => b.iter().filter(|b| !b.is_empty()).count());
        written * self.block_bytes()
    }

    /// Where the row of `slot` in head `h`'s run of `layer`'s keys (`which` 0) or values (1) starts in a block.
    fn at(&self, layer: usize, which: usize, h: usize, slot: usize) -> usize {
        (((layer * 2 + which) * self.n_kv + h) * BLOCK_TOKENS + slot) * self.row
    }

    /// Where the rows of `slots` of head `h`'s keys (`which` 0) or values (1) of `layer` lie in a block.
    fn span(
        &self,
        layer: usize,
        which: usize,
        h: usize,
        slots: &std::ops::Range<usize>,
    ) -> std::ops::Range<usize> {
        self.at(layer, which, h, slots.start)..self.at(layer, which, h, slots.end)
    }

    /// Writes one position's keys and values (`[n_kv * dim]` each) of `layer` into `slot` of `block`.
    pub fn write(&mut self, block: u32, slot: usize, layer: usize, k: &[f32], v: &[f32]) {
        let (units, d, row, n_kv) = (self.units_per_block(), self.dim, self.row, self.n_kv);
        // Head h's row of keys starts at `k_at + h * head`, its values' at `v_at + h * head`.
        let (k_at, v_at, head) = (
            self.at(layer, 0, 0, slot),
            self.at(layer, 1, 0, slot),
            BLOCK_TOKENS * row,
        );
        // f16 keys go to column `slot` of head h's transposed run, which starts at `k_run + h * head`.
        let k_run = self.at(layer, 0, 0, 0);
        let spots = (0..n_kv).flat_map(|h| {
            [
                (k_at + h * head, &k[h * d..(h + 1) * d]),
                (v_at + h * head, &v[h * d..(h + 1) * d]),
            ]
        });
        match &mut self.data {
            Data::F32(b) => {
                let buf = allocated(&mut b[block as usize], units, 0.0);
                for (at, src) in spots {
                    buf[at..at + d].copy_from_slice(src);
                }
            }
            Data::F16(b) => {
                let buf = allocated(&mut b[block as usize], units, f16::ZERO);
                for h in 0..n_kv {
                    // Keys: column `slot` of the head's transposed run; values: the slot's row.
                    let run = &mut buf[k_run + h * head..][..head];
                    for (c, &x) in k[h * d..(h + 1) * d].iter().enumerate() {
                        run[c * BLOCK_TOKENS + slot] = f16::from_f32(x);
                    }
                    let at = v_at + h * head;
                    buf[at..at + d].convert_from_f32_slice(&v[h * d..(h + 1) * d]);
                }
            }
            Data::Q8(b) => {
                let buf = allocated(&mut b[block as usize], units, 0);
                for (at, src) in spots {
                    quantize_q8_0(src, &mut buf[at..at + row]);
                }
            }
        }
    }

    /// Reads the rows of `slots` of `layer`'s keys (`which` 0) or values (1) of head `h` in `block` into `out`
    /// (`slots.len() * dim` values, in slot order) as f32. A block never written reads as zeros (the caller only
    /// reads positions it wrote).
    pub fn read(
        &self,
        block: u32,
        layer: usize,
        h: usize,
        which: usize,
        slots: std::ops::Range<usize>,
        out: &mut [f32],
    ) {
        let span = self.span(layer, which, h, &slots);
        let out = &mut out[..slots.len() * self.dim];
        match &self.data {
            Data::F32(b) => match b[block as usize].get(span) {
                Some(src) => out.copy_from_slice(src),
                None => out.fill(0.0),
            },
            Data::F16(b) if which == 0 => {
                let run = self.span(layer, 0, h, &(0..BLOCK_TOKENS));
                match b[block as usize].get(run) {
                    Some(kt) => {
                        for (row, slot) in out.chunks_exact_mut(self.dim).zip(slots) {
                            for (c, o) in row.iter_mut().enumerate() {
                                *o = kt[c * BLOCK_TOKENS + slot].to_f32();
                            }
                        }
                    }
                    None => out.fill(0.0),
                }
            }
            Data::F16(b) => match b[block as usize].get(span) {
                Some(src) => src.convert_to_f32_slice(out),
                None => out.fill(0.0),
            },
            Data::Q8(b) => match b[block as usize].get(span) {
                Some(src) => dequantize_q8_0(src, out),
                None => out.fill(0.0),
            },
        }
    }

    /// The stored f16 value rows of `slots` (as [`read`](Self::read) would return them, before conversion), when
    /// the store keeps f16 and the block was written: attention converts them itself.
    pub fn f16_values(
        &self,
        block: u32,
        layer: usize,
        h: usize,
        slots: std::ops::Range<usize>,
    ) -> Option<&[f16]> {
        let Data::F16(b) = &self.data else {
            return None;
        };
        b[block as usize].get(self.span(layer, 1, h, &slots))
    }

    /// Head `h`'s keys of `layer` in `block`, transposed as the store keeps them (`[c * BLOCK_TOKENS + slot]`,
    /// every slot, written or not), when the store keeps f16 and the block was written.
    pub fn f16_keys_t(&self, block: u32, layer: usize, h: usize) -> Option<&[f16]> {
        let Data::F16(b) = &self.data else {
            return None;
        };
        b[block as usize].get(self.span(layer, 0, h, &(0..BLOCK_TOKENS)))
    }
}

/// Bytes of one stored element of a resolved `dtype` (q8_0 rows are counted in bytes).
fn unit_bytes(dtype: KvDtype) -> usize {
    match dtype {
        KvDtype::F16 => 2,
        KvDtype::Q8_0 => 1,
        KvDtype::F32 | KvDtype::Auto => 4,
    }
}

/// `buf`, sized to `units` elements of `zero` on its first use.
fn allocated<T: Clone>(buf: &mut Vec<T>, units: usize, zero: T) -> &mut [T] {
    if buf.is_empty() {
        buf.resize(units, zero);
    }
    buf
}

/// ggml's `quantize_row_q8_0`: per 32 values, `d = max|x| / 127` (kept as f16) and `q = round(x / d)`.
fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xs, block) in x
        .chunks_exact(Q8_0_VALUES)
        .zip(out.chunks_exact_mut(Q8_0_BYTES))
    {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, &v) in block[2..].iter_mut().zip(xs) {
            *q = ((v * id).round() as i8) as u8;
        }
    }
}

/// The inverse of [`quantize_q8_0`]: `x = d · q`.
fn dequantize_q8_0(src: &[u8], out: &mut [f32]) {
    for (block, xs) in src
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_VALUES))
    {
        let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
        for (x, &q) in xs.iter_mut().zip(&block[2..]) {
            *x = d * f32::from(q as i8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kv: &KvBlocks, block: u32, layer: usize, h: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut k = vec![f32::NAN; n * kv.dim];
        let mut v = vec![f32::NAN; n * kv.dim];
        kv.read(block, layer, h, 0, 0..n, &mut k);
        kv.read(block, layer, h, 1, 0..n, &mut v);
        (k, v)
    }

    #[test]
    fn writes_land_in_their_block_slot_and_head() {
        for dtype in [KvDtype::F32, KvDtype::F16] {
            let mut kv = KvBlocks::new(3, 2, 2, 4, dtype).unwrap();
            for p in 0..20usize {
                let k: Vec<f32> = (0..8).map(|i| (p * 100 + i) as f32).collect();
                let v: Vec<f32> = k.iter().map(|x| -x).collect();
                kv.write((p / BLOCK_TOKENS) as u32 * 2, p % BLOCK_TOKENS, 1, &k, &v);
            }
            // Position 17 is slot 1 of block 2; head 1 holds values 4..8 (exact in f16 too: integers < 2048).
            let (k, v) = run(&kv, 2, 1, 1, 2);
            assert_eq!(&k[4..8], &[1704.0, 1705.0, 1706.0, 1707.0]);
            assert_eq!(&v[0..4], &[-1604.0, -1605.0, -1606.0, -1607.0]);
            let (k, _) = run(&kv, 0, 1, 0, BLOCK_TOKENS);
            assert_eq!(&k[15 * 4..16 * 4], &[1500.0, 1501.0, 1502.0, 1503.0]);
            let mut part = vec![0f32; 8];
            kv.read(0, 1, 0, 0, 14..16, &mut part);
            assert_eq!(
                part,
                [1400.0, 1401.0, 1402.0, 1403.0, 1500.0, 1501.0, 1502.0, 1503.0]
            );
            // Block 1 was never written: it holds no memory and reads as zeros.
            assert_eq!(kv.memory_bytes(), 2 * kv.block_bytes());
            assert_eq!(run(&kv, 1, 0, 0, 1).0, vec![0.0; 4]);
            // f16 keys as attention takes them: the head's run transposed, [c * BLOCK_TOKENS + slot]; values as
            // rows.
            if dtype == KvDtype::F16 {
                let kt = kv.f16_keys_t(2, 1, 1).unwrap();
                assert_eq!(kt.len(), 4 * BLOCK_TOKENS);
                for slot in 0..4 {
                    for c in 0..4 {
                        let want = (1600 + 100 * slot + 4 + c) as f32;
                        assert_eq!(
                            kt[c * BLOCK_TOKENS + slot].to_f32(),
                            want,
                            "slot {slot} c {c}"
                        );
                    }
                }
                let v = kv.f16_values(2, 1, 0, 1..2).unwrap();
                assert_eq!(
                    v.iter().map(|x| x.to_f32()).collect::<Vec<_>>(),
                    [-1700.0, -1701.0, -1702.0, -1703.0]
                );
                assert!(kv.f16_keys_t(1, 0, 0).is_none());
            }
        }
    }

    #[test]
    fn f16_keys_of_a_wide_head_are_each_value_rounded_once_into_its_column() {
        // 150 values per head (Gemma 3's heads are 256 wide), each key converted once into its column.
        let (n_kv, dim) = (2, 150);
        let mut kv = KvBlocks::new(2, 1, n_kv, dim, KvDtype::F16).unwrap();
        let key = |slot: usize, i: usize| (slot * 1000 + i) as f32 * 0.013 - 7.7;
        for slot in [0, 5, BLOCK_TOKENS - 1] {
            let k: Vec<f32> = (0..n_kv * dim).map(|i| key(slot, i)).collect();
            let v = vec![0f32; n_kv * dim];
            kv.write(1, slot, 0, &k, &v);
        }
        for h in 0..n_kv {
            let kt = kv.f16_keys_t(1, 0, h).unwrap();
            for slot in [0, 5, BLOCK_TOKENS - 1] {
                for c in 0..dim {
                    let want = f16::from_f32(key(slot, h * dim + c));
                    assert_eq!(
                        kt[c * BLOCK_TOKENS + slot].to_bits(),
                        want.to_bits(),
                        "h {h} slot {slot} c {c}"
                    );
                }
            }
            // Columns never written stay zero.
            assert_eq!(kt[3].to_bits(), 0);
        }
    }

    #[test]
    fn f16_halves_a_block_and_q8_0_keeps_17_of_64_bytes() {
        let f32b = KvBlocks::bytes_per_block(24, 2, 64, KvDtype::F32).unwrap();
        assert_eq!(
            KvBlocks::bytes_per_block(24, 2, 64, KvDtype::F16).unwrap() * 2,
            f32b
        );
        assert_eq!(
            KvBlocks::bytes_per_block(24, 2, 64, KvDtype::Auto).unwrap() * 2,
            f32b
        );
        assert_eq!(
            KvBlocks::bytes_per_block(24, 2, 64, KvDtype::Q8_0).unwrap() * 64,
            f32b * 17
        );
        let kv = KvBlocks::new(1, 24, 2, 64, KvDtype::Auto).unwrap();
        assert_eq!(kv.dtype(), KvDtype::F16);
        assert_eq!(kv.block_bytes() * 2, f32b);
        let err = KvBlocks::new(1, 2, 2, 80, KvDtype::Q8_0)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("q8_0") && err.contains("80"), "{err}");
    }

    #[test]
    fn reduced_types_read_back_within_their_rounding() {
        let dim = 64;
        let k: Vec<f32> = (0..2 * dim)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173)
            .collect();
        let v: Vec<f32> = k.iter().map(|x| x * -0.5 + 0.01).collect();
        for dtype in [KvDtype::F16, KvDtype::Q8_0] {
            let mut kv = KvBlocks::new(2, 3, 2, dim, dtype).unwrap();
            kv.write(1, 5, 2, &k, &v);
            let mut got = vec![0f32; dim];
            for (h, which, want) in [(0, 0, &k[..dim]), (1, 0, &k[dim..]), (1, 1, &v[dim..])] {
                kv.read(1, 2, h, which, 5..6, &mut got);
                let amax = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                // f16: relative 2^-11; q8_0: half a step of amax/127, plus the scale's f16 rounding.
                let tol = match dtype {
                    KvDtype::F16 => amax / 2048.0,
                    _ => amax / 127.0 * 0.5 + amax / 1024.0,
                };
                for (a, b) in got.iter().zip(want) {
                    assert!(
                        (a - b).abs() <= tol,
                        "{dtype}: {a} vs {b} (tolerance {tol})"
                    );
                }
            }
        }
        // A zero row stays zero in q8_0 (no division by a zero scale).
        let mut kv = KvBlocks::new(1, 1, 1, 32, KvDtype::Q8_0).unwrap();
        kv.write(0, 0, 0, &[0.0; 32], &[0.0; 32]);
        let mut got = vec![1f32; 32];
        kv.read(0, 0, 0, 0, 0..1, &mut got);
        assert_eq!(got, vec![0.0; 32]);
    }
}
