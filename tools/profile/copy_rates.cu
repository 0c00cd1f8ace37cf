// copy_rates.cu - how fast bulk copies (the TMA engine's cp.async.bulk) move bytes from L2 or from
// DRAM into shared memory, with the attention kernel's shape: one CTA per SM, one warp issuing
// 16 KB copies into a ring of stages, the consumer warps waiting for each stage and releasing it.
// Not part of the build:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o copy_rates tools/profile/copy_rates.cu && ./copy_rates
// Each CTA reads a window of `window` bytes `passes` times. CTAs share windows in groups of
// `sharing` (as the items of one kv head share its K/V): with few windows the bytes come from L2
// after the first pass; with every window distinct and read once they come from DRAM. Rate = bytes
// copied / wall time (cudaEvent), and bytes per SM cycle at the SM clock measured in the same run
// (clock64 over the slowest CTA against the event time). docs/PERF.md (serving step 8) has the
// H200's.
#include <cstdio>
#include <cuda_runtime.h>

constexpr unsigned kChunk = 16384;  // bytes per copy: one 128-row slab of a 16-bit tile (128 x 128 B)
constexpr int kMaxStages = 12;      // 192 KB of ring

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

__device__ __forceinline__ void bar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void copy_chunk(unsigned dst, const char* src, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kChunk) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(kChunk), "r"(bar)
               : "memory");
}

// 128 threads: warp 0 lane 0 copies, warps 1-3 consume (one arrival per warp releases a stage).
__global__ void __launch_bounds__(128, 1)
    copy_kernel(const char* src, long long window, int sharing, int passes, int stages, long long* cycles) {
  extern __shared__ __align__(1024) char ring[];
  __shared__ __align__(8) unsigned long long full[kMaxStages], empty[kMaxStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      bar_init(smem_u32(&full[s]), 1);
      bar_init(smem_u32(&empty[s]), 3);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long long start = clock64();
  const char* base = src + (blockIdx.x / sharing) * window;
  const long long chunks = window / kChunk * passes;
  if (warp == 0) {
    if (lane == 0) {
      for (long long k = 0; k < chunks; ++k) {
        const int s = static_cast<int>(k % stages);
        bar_wait(smem_u32(&empty[s]), ((k / stages) & 1) ^ 1);
        copy_chunk(smem_u32(ring + s * kChunk), base + (k % (window / kChunk)) * kChunk, smem_u32(&full[s]));
      }
    }
  } else {
    for (long long k = 0; k < chunks; ++k) {
      const int s = static_cast<int>(k % stages);
      bar_wait(smem_u32(&full[s]), (k / stages) & 1);
      if (lane == 0) bar_arrive(smem_u32(&empty[s]));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
}

void measure(const char* name, const char* src, int sms, long long window, int sharing, int passes, int stages,
             long long* cycles) {
  const size_t smem = static_cast<size_t>(stages) * kChunk;
  cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  copy_kernel<<<sms, 128, smem>>>(src, window, sharing, passes, stages, cycles);  // warm-up (and L2 fill)
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  copy_kernel<<<sms, 128, smem>>>(src, window, sharing, passes, stages, cycles);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, a, b);
  long long host[1024], slowest = 0;
  cudaMemcpy(host, cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost);
  for (int i = 0; i < sms; ++i) slowest = host[i] > slowest ? host[i] : slowest;
  const double bytes = static_cast<double>(sms) * window * passes;
  const double ghz = slowest / (ms * 1e6);
  std::printf("%-34s stages %2d (%3d KB in flight)  %7.3f ms  %6.2f TB/s  %5.1f B/clk/SM at %.2f GHz\n", name, stages,
              stages * 16, ms, bytes / (ms * 1e9), bytes / sms / slowest, ghz);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t total = size_t{4} << 30;  // DRAM runs: every CTA's window distinct, 4 GB in all
  char* src = nullptr;
  long long* cycles = nullptr;
  if (cudaMalloc(&src, total) != cudaSuccess || cudaMalloc(&cycles, sizeof(long long) * 1024) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(src, 1, total);
  std::printf("%d SMs; bulk copies of %u bytes into shared memory\n", sms, kChunk);
  const int stage_counts[] = {4, 8, 12};
  for (int stages : stage_counts) {
    // L2: windows of 128 KB (a kv head's K and V at 256 keys) shared by 4 CTAs, 33 distinct
    // windows (4 MB) read 400 times.
    measure("L2, 128 KB windows, 4 CTAs each", src, sms, 128 << 10, 4, 400, stages, cycles);
    // L2: 1 MB windows (K and V at 2K keys), every CTA its own (132 MB would not fit: 33 x 1 MB).
    measure("L2, 1 MB windows, 4 CTAs each", src, sms, 1 << 20, 4, 50, stages, cycles);
    // DRAM: each CTA its own 30 MB window, read once (4 GB over 132 CTAs).
    measure("DRAM, 30 MB windows, read once", src, sms, (total / sms) & ~static_cast<size_t>(kChunk - 1), 1, 1, stages,
            cycles);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
