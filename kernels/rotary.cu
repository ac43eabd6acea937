// Rotary position embedding of `x: [t, heads, d]` (the projection's own layout: no transpose first) at
// positions `pos..pos + t`, from the engine's cos/sin tables `[positions, rot / 2]`. The first `rot` dims of
// each head rotate, as pairs (i, i + rot/2) (NeoX) or (2i, 2i + 1) (interleaved); the rest pass unchanged.
// One thread per pair. CPU twin: src/engine/candle/fused/twin.rs (`rotary`).
extern "C" __global__ void rotary_f32(const float* __restrict__ x, const float* __restrict__ cos,
                                      const float* __restrict__ sin, float* __restrict__ out, int t, int heads,
                                      int d, int rot, int pos, int interleaved) {
    const int half_d = d / 2, half_rot = rot / 2;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)t * heads * half_d) return;
    const int i = idx % half_d;
    const long row = idx / half_d;  // ti * heads + head
    const int ti = row / heads;
    const float* xr = x + row * d;
    float* yr = out + row * d;
    if (i < half_rot) {
        const float c = cos[(long)(pos + ti) * half_rot + i];
        const float s = sin[(long)(pos + ti) * half_rot + i];
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half_rot;
        const float x0 = xr[a], x1 = xr[b];
        yr[a] = x0 * c - x1 * s;
        yr[b] = x0 * s + x1 * c;
    } else {
        const int a = rot + 2 * (i - half_rot);
        yr[a] = xr[a];
        yr[a + 1] = xr[a + 1];
    }
}
