// pipe_rates.cu - per-SM throughput of the instructions in attention's softmax (exp2, FFMA, the
// e4m3 pack, the packed 16-bit exp2s), measured on the GPU this runs on. Not part of the build:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o pipe_rates tools/profile/pipe_rates.cu && ./pipe_rates
// One CTA per SM, 384 (as the attention kernel) or 1024 threads; each thread runs kChains
// independent dependency chains of one instruction kind for kIters steps. Rate = lane operations /
// SM cycles (clock64 around the loop, the slowest CTA). docs/PERF.md (sm90a v10) has the H200's.
#include <cstdio>
#include <cuda_runtime.h>

constexpr int kChains = 8;
constexpr int kIters = 4096;

template <int kKind>
__global__ void pipe_kernel(float* out, long long* cycles, float seed) {
  float v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = seed * (threadIdx.x + c) * 1e-7f - 1.0f;
  __syncthreads();
  const long long start = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kKind == 0) {  // MUFU.EX2
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
      } else if constexpr (kKind == 1) {  // FFMA
        asm volatile("fma.rn.f32 %0, %0, 0f3F800001, 0fBF000000;" : "+f"(v[c]));
      } else if constexpr (kKind == 2) {  // one MUFU.EX2 and one FFMA per chain step
        asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
        asm volatile("fma.rn.f32 %0, %0, 0f3F800001, 0fBF000000;" : "+f"(v[c]));
      } else if constexpr (kKind == 4 || kKind == 5) {  // packed 16-bit exp2: two values per instruction
        unsigned int h = __float_as_uint(v[c]);
        if constexpr (kKind == 4)
          asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(h));
        else
          asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(h));
        v[c] = __uint_as_float(h);
      } else {  // an e4m3x2 pack (F2FP, as P is packed for the PV GEMM) and the unpack back
        unsigned short p;
        asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %1;" : "=h"(p) : "f"(v[c]));
        unsigned int h;
        asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(p));
        v[c] = __uint_as_float(h) * 1e-30f - 1.0f;
      }
    }
  }
  __syncthreads();
  const long long end = clock64();
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += v[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = end - start;
}

template <int kKind>
void measure(const char* name, int sms, int threads, float* out, long long* cycles) {
  pipe_kernel<kKind><<<sms, threads>>>(out, cycles, 1.0f);  // warm-up
  pipe_kernel<kKind><<<sms, threads>>>(out, cycles, 2.0f);
  cudaDeviceSynchronize();
  long long host[1024];
  cudaMemcpy(host, cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost);
  long long worst = 0;
  for (int b = 0; b < sms; ++b) worst = host[b] > worst ? host[b] : worst;
  const double lanes = double(threads) * kChains * kIters;  // of the named instruction (kind 3: pairs)
  printf("%-34s %4d threads/SM: %7.2f lane-ops per SM cycle (%6.2f cycles per warp instruction per SMSP)\n", name,
         threads, lanes / worst, 4.0 * worst / (lanes / 32.0));
}

int main() {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int sms = prop.multiProcessorCount;
  float* out;
  long long* cycles;
  cudaMalloc(&out, sizeof(float) * sms * 1024);
  cudaMalloc(&cycles, sizeof(long long) * sms);
  printf("%s, %d SMs\n", prop.name, sms);
  for (int threads : {384, 1024}) {
    measure<0>("ex2.approx.ftz.f32 (MUFU.EX2)", sms, threads, out, cycles);
    measure<1>("fma.rn.f32 (FFMA)", sms, threads, out, cycles);
    measure<2>("ex2 + fma per step (counts ex2)", sms, threads, out, cycles);
    measure<3>("cvt e4m3x2 pack + unpack (counts pairs)", sms, threads, out, cycles);
    measure<4>("ex2.approx.f16x2 (counts pairs)", sms, threads, out, cycles);
    measure<5>("ex2.approx.ftz.bf16x2 (counts pairs)", sms, threads, out, cycles);
  }
  const cudaError_t e = cudaGetLastError();
  printf("status: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
