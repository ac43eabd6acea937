// RMSNorm over the last dimension, alone or fused with the residual add that precedes it in every
// pre-norm transformer block: `sum = x + r; out = sum / sqrt(mean(sum²) + eps) * w`.
// One block per row. CPU twin: src/engine/candle/fused/twin.rs (`rms_norm`, `add_rms_norm`).
#include "common.cuh"

template <bool ADD>
__device__ void rms_row(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ w,
                        float* __restrict__ sum, float* __restrict__ out, int n, float eps) {
    __shared__ float scratch[32];
    const long row = blockIdx.x;
    x += row * n;
    out += row * n;
    if (ADD) {
        r += row * n;
        sum += row * n;
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = x[i];
        if (ADD) {
            v += r[i];
            sum[i] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = ADD ? sum[i] : x[i];
        out[i] = v * inv * w[i];
    }
}

extern "C" __global__ void rms_norm_f32(const float* x, const float* w, float* out, int n, float eps) {
    rms_row<false>(x, nullptr, w, nullptr, out, n, eps);
}

// `both` is one [2, rows, n] buffer: the sums, then the normalised rows.
extern "C" __global__ void add_rms_norm_f32(const float* x, const float* r, const float* w, float* both,
                                            int rows, int n, float eps) {
    rms_row<true>(x, r, w, both, both + (long)rows * n, n, eps);
}
