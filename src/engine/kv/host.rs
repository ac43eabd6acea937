//! The CPU engine's paged KV store, in host memory: fixed-size blocks of [`BLOCK_TOKENS`] positions, each holding the keys and
//! values of every layer as f32 in `[layer][k|v][kv_head][slot][dim]` order, so attention for one head reads one
//! contiguous run of positions per block. A sequence is a block table (block ids in position order) into one
//! shared [`KvBlocks`]; which block belongs to whom, and which full blocks hold a shared prefix, is the block
//! manager's business (`engine::blocks`). A block's memory is allocated on its first write and kept after.

use super::BLOCK_TOKENS;

/// The block store of one model: every block's keys and values.
pub struct KvBlocks {
    blocks: Vec<Vec<f32>>,
    n_layer: usize,
    n_kv: usize,
    dim: usize,
}

impl KvBlocks {
    /// A store for `n_blocks` blocks of a model with `n_layer` layers of `n_kv` KV heads of `dim` values.
    pub fn new(n_blocks: usize, n_layer: usize, n_kv: usize, dim: usize) -> Self {
        Self {
            blocks: (0..n_blocks).map(|_| Vec::new()).collect(),
            n_layer,
            n_kv,
            dim,
        }
    }

    /// Bytes one block holds once written.
    pub fn block_bytes(&self) -> usize {
        Self::bytes_per_block(self.n_layer, self.n_kv, self.dim)
    }

    /// Bytes one block of such a model holds.
    pub fn bytes_per_block(n_layer: usize, n_kv: usize, dim: usize) -> usize {
        n_layer * 2 * n_kv * BLOCK_TOKENS * dim * std::mem::size_of::<f32>()
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Grows the store to at least `n_blocks` blocks (new ones take no memory until written).
    pub fn grow_to(&mut self, n_blocks: usize) {
        if n_blocks > self.blocks.len() {
            self.blocks.resize_with(n_blocks, Vec::new);
        }
    }

    /// Bytes allocated (blocks written at least once).
    pub fn memory_bytes(&self) -> usize {
        self.blocks.iter().filter(|b| !b.is_empty()).count() * self.block_bytes()
    }

    fn elems(&self) -> usize {
        self.n_layer * 2 * self.n_kv * BLOCK_TOKENS * self.dim
    }

    /// Where head `h`'s run of `layer`'s keys (`which` 0) or values (1) starts inside a block.
    fn run_at(&self, layer: usize, which: usize, h: usize) -> usize {
        ((layer * 2 + which) * self.n_kv + h) * BLOCK_TOKENS * self.dim
    }

    /// Writes one position's keys and values (`[n_kv * dim]` each) of `layer` into `slot` of `block`.
    pub fn write(&mut self, block: u32, slot: usize, layer: usize, k: &[f32], v: &[f32]) {
        let elems = self.elems();
        let dim = self.dim;
        let (k_at, v_at) = (self.run_at(layer, 0, 0), self.run_at(layer, 1, 0));
        let n_kv = self.n_kv;
        let buf = &mut self.blocks[block as usize];
        if buf.is_empty() {
            buf.resize(elems, 0.0);
        }
        for h in 0..n_kv {
            let off = (h * BLOCK_TOKENS + slot) * dim;
            buf[k_at + off..k_at + off + dim].copy_from_slice(&k[h * dim..(h + 1) * dim]);
            buf[v_at + off..v_at + off + dim].copy_from_slice(&v[h * dim..(h + 1) * dim]);
        }
    }

    /// Keys and values of `layer`, head `h`, slots `0..n` of `block` (`n * dim` values each). A block never
    /// written reads as zeros of length 0, which the caller never asks for (it only reads written positions).
    pub fn run(&self, block: u32, layer: usize, h: usize, n: usize) -> (&[f32], &[f32]) {
        let buf = &self.blocks[block as usize];
        if buf.is_empty() {
            return (&[], &[]);
        }
        let (k, v) = (self.run_at(layer, 0, h), self.run_at(layer, 1, h));
        let len = n * self.dim;
        (&buf[k..k + len], &buf[v..v + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_in_their_block_slot_and_head() {
        let mut kv = KvBlocks::new(3, 2, 2, 4);
        for p in 0..20usize {
            let k: Vec<f32> = (0..8).map(|i| (p * 100 + i) as f32).collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            kv.write((p / BLOCK_TOKENS) as u32 * 2, p % BLOCK_TOKENS, 1, &k, &v);
        }
        // Position 17 is slot 1 of block 2; head 1 holds values 4..8.
        let (k, v) = kv.run(2, 1, 1, 2);
        assert_eq!(&k[4..8], &[1704.0, 1705.0, 1706.0, 1707.0]);
        assert_eq!(&v[0..4], &[-1604.0, -1605.0, -1606.0, -1607.0]);
        let (k, _) = kv.run(0, 1, 0, BLOCK_TOKENS);
        assert_eq!(&k[15 * 4..16 * 4], &[1500.0, 1501.0, 1502.0, 1503.0]);
        // Block 1 was never written: it holds no memory.
        assert_eq!(kv.memory_bytes(), 2 * kv.block_bytes());
        assert!(kv.run(1, 0, 0, 1).0.is_empty());
    }
}
