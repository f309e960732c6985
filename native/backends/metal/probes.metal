#pragma METAL fp contract(off)
// The Metal backend's own kernels, compiled after the head's kernel source: read bandwidth
// and fma rate probes (the machine's references for the head's floors) and a probe of the
// assumptions docs/NUMERICS.md makes about Apple GPUs, run only on a Mac by the tests.

// Reads `words` 16-byte words, grid-strided so neighbouring threads read neighbouring
// words. The store depends on every load (and never happens on zeroed memory), so the
// compiler cannot drop a load.
kernel void lmh_probe_read(device const uint4 *data [[buffer(0)]],
                           device uint *sink [[buffer(1)]],
                           constant ulong &words [[buffer(2)]],
                           uint group [[threadgroup_position_in_grid]],
                           uint thread_index [[thread_position_in_grid]],
                           uint threads [[threads_per_grid]]) {
  uint4 acc = uint4(0);
  for (ulong w = thread_index; w < words; w += threads) {
    acc ^= data[w];
  }
  uint folded = acc.x ^ acc.y ^ acc.z ^ acc.w;
  if (folded == 0xFFFFFFFFu) {
    sink[group] = folded;
  }
}

// The fma rate: `rounds` rounds of 8 independent chains of dependent fmas per thread, as
// the matvec's accumulators are. The store depends on every chain and never happens.
kernel void lmh_probe_fma(device float *sink [[buffer(0)]],
                          constant uint &rounds [[buffer(1)]],
                          uint thread_index [[thread_position_in_grid]]) {
  float acc[8];
  for (uint i = 0; i < 8u; i++) {
    acc[i] = float(i + thread_index);
  }
  for (uint r = 0; r < rounds; r++) {
    for (uint i = 0; i < 8u; i++) {
      acc[i] = fma(acc[i], 0.999f, 0.001f);
    }
  }
  float sum = 0.0f;
  for (uint i = 0; i < 8u; i++) {
    sum = sum + acc[i];
  }
  if (sum == -1.0f) {
    sink[thread_index & 1023u] = sum;
  }
}

// For each i, five results the tests compare with the host's IEEE arithmetic:
// [0] a*b+c written in one statement: equals the host's unfused value only if the
//     pragma above stops contraction; [1] fma(a, b, c): correctly rounded;
// [2] a*b: a subnormal product is kept or flushed; [3] a+c with c = 0 at run time:
// a subnormal input is kept or flushed; [4] the simdgroup width.
kernel void lmh_probe_numerics(device const float *a [[buffer(0)]],
                               device const float *b [[buffer(1)]],
                               device const float *c [[buffer(2)]],
                               device float *out [[buffer(3)]],
                               constant uint &values [[buffer(4)]],
                               uint i [[thread_position_in_grid]],
                               uint width [[threads_per_simdgroup]]) {
  if (i >= values) {
    return;
  }
  float unfused = a[i] * b[i] + c[i];
  out[5 * i + 0] = unfused;
  out[5 * i + 1] = fma(a[i], b[i], c[i]);
  float product = a[i] * b[i];
  out[5 * i + 2] = product;
  float sum = a[i] + c[i];
  out[5 * i + 3] = sum;
  out[5 * i + 4] = float(width);
}
