// Causal grouped-query attention reading the engine's KV cache in place (src/engine/kv.rs): per layer,
// keys and values are `[n_kv, capacity, d]` buffers of which the first `kv_len` positions are live; the
// strides say where each head and position is, so nothing is copied or transposed first.
//
// q: [t, n_head, d] (the projection's layout), out: same. Query i sits at absolute position pos + i and sees
// keys j with j <= pos + i and, given a window w > 0, j > pos + i - w. Query head h reads KV head
// h / (n_head / n_kv).
//
// One block per (head, query): its warps take keys in turn, each keeping an online softmax (running max,
// running sum, weighted values in registers, d / 32 per lane), and the block merges the warps at the end.
// d <= 256. CPU twin: src/engine/ops/twin.rs (`attention`).
#include "common.cuh"

#define MAX_D 256
#define PER_LANE (MAX_D / WARP)
#define WARPS 8

extern "C" __global__ void __launch_bounds__(WARPS * WARP)
attention_f32(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ out, int t, int n_head, int n_kv, int d, long k_head_stride,
              long k_pos_stride, long v_head_stride, long v_pos_stride, int pos, int window, float scale) {
    __shared__ float sm_m[WARPS], sm_l[WARPS];
    __shared__ float sm_acc[WARPS][MAX_D];
    const int h = blockIdx.x, i = blockIdx.y;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int kvh = h / (n_head / n_kv);
    const float* qr = q + ((long)i * n_head + h) * d;
    const float* kh = k + kvh * k_head_stride;
    const float* vh = v + kvh * v_head_stride;

    float qv[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) {
        const int col = lane + c * WARP;
        qv[c] = col < d ? qr[col] * scale : 0.0f;
        acc[c] = 0.0f;
    }
    const int p = pos + i;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    float m = -INFINITY, l = 0.0f;
    for (int j = lo + warp; j <= p; j += WARPS) {
        const float* kr = kh + (long)j * k_pos_stride;
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
        const float* vr = vh + (long)j * v_pos_stride;
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
    float* yr = out + ((long)i * n_head + h) * d;
    for (int col = threadIdx.x; col < d; col += blockDim.x) {
        float y = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) y += sm_acc[w][col] * f[w];
        yr[col] = y / total;
    }
}
