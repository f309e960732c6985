// Declarations of the CUDA builtins the CUDA kernel source uses, so that build.zig can
// check with `zig c++ -fsyntax-only` that the source is valid C++ without a CUDA toolkit.
// Only declarations: nothing here runs.
#define __device__
#define __global__
#define __launch_bounds__(threads, blocks)
#define __forceinline__ inline
#define __shared__ static // as a device function's __shared__ variable is
#define __align__(bytes) __attribute__((aligned(bytes)))

struct lmh_stub_dim3 {
    unsigned int x, y, z;
};
extern const lmh_stub_dim3 threadIdx, blockIdx, blockDim, gridDim;

unsigned int __float_as_uint(float value);
float __uint_as_float(unsigned int bits);
float __fmaf_rn(float a, float b, float c);
float fabsf(float value);
unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int selector);
unsigned int __shfl_xor_sync(unsigned int members, unsigned int value, int lane_mask);
unsigned int __shfl_sync(unsigned int members, unsigned int value, int source_lane);
[[noreturn]] void __trap(void);
void __syncwarp(void);
void __syncthreads(void);
unsigned long long __cvta_generic_to_shared(const void *pointer);
unsigned long long __cvta_generic_to_global(const void *pointer);
struct uint2 {
    unsigned int x, y;
};
struct uint4 {
    unsigned int x, y, z, w;
};
