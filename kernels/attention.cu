// Causal grouped-query attention over the paged KV store of continuous batching (src/engine/kv/): per layer
// one `[2 (k|v), n_blocks, n_kv, BLOCK, d]` buffer, and a batch of sequences whose query tokens are laid end to
// end. `meta` (u32) holds, for the T query tokens, each one's sequence then each one's position, then every
// sequence's block table (`max_blocks` entries each).
//
// q: [T, n_head, d] (the projection's layout), out: same. Query i sits at its sequence's position p and sees
// keys j with j <= p and, given a window w > 0, j > p - w. Query head h reads KV head h / (n_head / n_kv).
//
// One block per (head, query): its warps take keys in turn, each keeping an online softmax (running max,
// running sum, weighted values in registers, d / 32 per lane), and the block merges the warps at the end.
// d <= 256. CPU twin: src/engine/candle/fused/twin.rs (`paged_attention`).
#include "common.cuh"

#define MAX_D 256
#define PER_LANE (MAX_D / WARP)
#define WARPS 8
// Positions per block of the paged store (src/engine/kv/mod.rs BLOCK_TOKENS; checked in src/engine/candle/fused/cuda.rs).
#define BLOCK 16

// Keys and values of one KV head of one sequence in the paged store.
struct Paged {
    const float* k;
    const float* v;
    const unsigned* table;
    long head;   // offset of this KV head within a block: kvh * BLOCK * d
    long block;  // floats per block: n_kv * BLOCK * d
    int d;
    __device__ long at(int j) const { return (long)table[j / BLOCK] * block + head + (long)(j % BLOCK) * d; }
    __device__ const float* key(int j) const { return k + at(j); }
    __device__ const float* val(int j) const { return v + at(j); }
};

// One query row against keys lo..=p: the warps take keys in turn with an online softmax each, then merge.
template <class KV>
__device__ void attend(const float* __restrict__ qr, KV kv, float* __restrict__ yr, int d, int lo, int p,
                       float scale) {
    __shared__ float sm_m[WARPS], sm_l[WARPS];
    __shared__ float sm_acc[WARPS][MAX_D];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) {
        const int col = lane + c * WARP;
        qv[c] = col < d ? qr[col] * scale : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = lo + warp; j <= p; j += WARPS) {
        const float* kr = kv.key(j);
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            const int col = lane + c * WARP;
            if (col < d) s += qv[c] * kr[col];
        }
        s = warp_sum(s);
        const float m_new = fmaxf(m, s);
        const float corr = __expf(m - m_new);
        const float e = __expf(s - m_new);
        l = l * corr + e;
        const float* vr = kv.val(j);
#pragma unroll
        for (int c = 0; c < PER_LANE; ++c) {
            const int col = lane + c * WARP;
            if (col < d) acc[c] = acc[c] * corr + e * vr[col];
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) {
        const int col = lane + c * WARP;
        if (col < d) sm_acc[warp][col] = acc[c];
    }
    __syncthreads();
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, sm_m[w]);
    float total = 0.0f;
    float f[WARPS];
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        // A warp that saw no key has m = -inf and contributes nothing.
        f[w] = sm_l[w] > 0.0f ? __expf(sm_m[w] - mx) : 0.0f;
        total += sm_l[w] * f[w];
    }
    for (int col = threadIdx.x; col < d; col += blockDim.x) {
        float y = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) y += sm_acc[w][col] * f[w];
        yr[col] = y / total;
    }
}

__device__ __forceinline__ int first_key(int p, int window) { return window > 0 ? max(0, p - window + 1) : 0; }

extern "C" __global__ void __launch_bounds__(WARPS * WARP)
paged_attention_f32(const float* __restrict__ q, const float* __restrict__ cache, const unsigned* __restrict__ meta,
                    float* __restrict__ out, int t, int n_head, int n_kv, int d, int n_blocks, int max_blocks,
                    int window, float scale) {
    const int h = blockIdx.x, i = blockIdx.y;
    const int kvh = h / (n_head / n_kv);
    const int seq = meta[i], p = meta[t + i];
    const long block = (long)n_kv * BLOCK * d;
    const Paged kv{cache, cache + (long)n_blocks * block, meta + 2 * t + (long)seq * max_blocks,
                   (long)kvh * BLOCK * d, block, d};
    const long row = ((long)i * n_head + h) * d;
    attend(q + row, kv, out + row, d, first_key(p, window), p, scale);
}

// Writes the new keys and values of a batch (`rows`: [2 (k|v), t, n_kv, d]) into their slots of the paged
// store, each token at its sequence's position (from `meta`, as above). One thread per value.
extern "C" __global__ void kv_write_f32(float* __restrict__ cache, const float* __restrict__ rows,
                                        const unsigned* __restrict__ meta, int t, int n_kv, int d, int n_blocks,
                                        int max_blocks) {
    const long per_kind = (long)t * n_kv * d;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= 2 * per_kind) return;
    const int kind = idx / per_kind;
    const long r = idx % per_kind;
    const int col = r % d;
    const int kvh = (r / d) % n_kv;
    const int i = r / ((long)n_kv * d);
    const int seq = meta[i], p = meta[t + i];
    const long block = (long)n_kv * BLOCK * d;
    const long b = meta[2 * t + (long)seq * max_blocks + p / BLOCK];
    cache[kind * (long)n_blocks * block + b * block + ((long)kvh * BLOCK + p % BLOCK) * d + col] = rows[idx];
}
