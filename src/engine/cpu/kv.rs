//! The CPU engine's KV cache for one sequence: per layer, keys and values as f32 in `[kv_head][position][dim]`
//! order, so attention for one head reads one contiguous run of positions. Capacity grows by doubling (a
//! re-layout per head); positions past the sequence's length are garbage the attention never reads, which is
//! what makes truncation (prefix reuse) free.

/// Keys and values of every layer of one sequence.
pub struct CpuKv {
    layers: Vec<LayerBuf>,
    n_kv: usize,
    dim: usize,
    capacity: usize,
}

struct LayerBuf {
    k: Vec<f32>,
    v: Vec<f32>,
}

const MIN_CAPACITY: usize = 256;

impl CpuKv {
    pub fn new(n_layer: usize, n_kv: usize, dim: usize) -> Self {
        Self {
            layers: (0..n_layer)
                .map(|_| LayerBuf {
                    k: Vec::new(),
                    v: Vec::new(),
                })
                .collect(),
            n_kv,
            dim,
            capacity: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held (capacity, not just the used part).
    pub fn memory_bytes(&self) -> usize {
        self.layers.len() * 2 * self.n_kv * self.capacity * self.dim * 4
    }

    /// Makes room for `positions` positions, keeping the first `keep`.
    pub fn reserve(&mut self, positions: usize, keep: usize) {
        if positions <= self.capacity {
            return;
        }
        let new_cap = positions.max(self.capacity * 2).max(MIN_CAPACITY);
        let (n_kv, dim, old_cap) = (self.n_kv, self.dim, self.capacity);
        let keep = keep.min(old_cap);
        for l in &mut self.layers {
            for buf in [&mut l.k, &mut l.v] {
                let mut grown = vec![0f32; n_kv * new_cap * dim];
                for h in 0..n_kv {
                    let from = &buf[h * old_cap * dim..(h * old_cap + keep) * dim];
                    grown[h * new_cap * dim..(h * new_cap + keep) * dim].copy_from_slice(from);
                }
                *buf = grown;
            }
        }
        self.capacity = new_cap;
    }

    /// Writes one position's keys and values (`[n_kv * dim]` each) of `layer`.
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (cap, dim) = (self.capacity, self.dim);
        let l = &mut self.layers[layer];
        for h in 0..self.n_kv {
            let at = (h * cap + pos) * dim;
            l.k[at..at + dim].copy_from_slice(&k[h * dim..(h + 1) * dim]);
            l.v[at..at + dim].copy_from_slice(&v[h * dim..(h + 1) * dim]);
        }
    }

    /// Keys of `layer`, head `h`, positions `0..len` (`len * dim` values).
    pub fn keys(&self, layer: usize, h: usize, len: usize) -> &[f32] {
        let at = h * self.capacity * self.dim;
        &self.layers[layer].k[at..at + len * self.dim]
    }

    /// Values of `layer`, head `h`, positions `0..len`.
    pub fn values(&self, layer: usize, h: usize, len: usize) -> &[f32] {
        let at = h * self.capacity * self.dim;
        &self.layers[layer].v[at..at + len * self.dim]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_keeps_what_was_written_per_head() {
        let mut kv = CpuKv::new(2, 2, 4);
        kv.reserve(3, 0);
        for p in 0..3 {
            let k: Vec<f32> = (0..8).map(|i| (p * 100 + i) as f32).collect();
            kv.write(1, p, &k, &k);
        }
        kv.reserve(1000, 3);
        assert!(kv.capacity() >= 1000);
        assert_eq!(&kv.keys(1, 1, 3)[8..12], &[204.0, 205.0, 206.0, 207.0]);
        assert_eq!(&kv.values(1, 0, 2)[4..8], &[100.0, 101.0, 102.0, 103.0]);
    }
}
