// sm90a/tma.cuh - inline-PTX wrappers for the Hopper Tensor Memory Accelerator (TMA), the
// transaction-counting mbarrier that TMA completes, and the fences and election they need.
// NVRTC-clean: no includes beyond the repo's templates.
//
// The tensor maps are TsattnTmaDescriptor (prefill_params.h): the 128-byte CUtensorMap of cuda.h
// (which NVRTC cannot include), 128-byte aligned as CUDA 13 declares it. The host fills them with
// cuTensorMapEncodeTiled and passes them by value in a `const __grid_constant__` kernel
// parameter; the device only ever takes their address (tensor_map_address).
//
// mbarrier protocol (PTX ISA, mbarrier): thread 0 runs mbarrier_init for each barrier,
// then fence_mbarrier_init() and a CTA barrier before any TMA may signal it. A "full" barrier is
// initialised with count 1: the producer's mbarrier_arrive_expect_tx(bar, bytes) is that arrival
// and announces the bytes the TMA loads will deliver; the phase completes when both happened.
// expect_tx bytes are always the whole box (out-of-bounds elements are zero-filled and counted).
// Waiters track the phase parity: the k-th completion (k = 0, 1, ...) is awaited with parity
// k & 1. A producer waiting for a fresh "empty" barrier waits with parity 1, which succeeds at once.
#ifndef TSATTN_SM90A_TMA_CUH
#define TSATTN_SM90A_TMA_CUH

#include "common/prelude.cuh"
#include "prefill_params.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "templates/sm90a needs --gpu-architecture=sm_90a (wgmma, TMA and mbarrier tx counts)"
#endif

namespace tsattn_dev {

static_assert(sizeof(TsattnTmaDescriptor) == 128 && alignof(TsattnTmaDescriptor) == 128,
              "TsattnTmaDescriptor mirrors CUDA 13's CUtensorMap");

#if defined(__CUDA_ARCH__)

__device__ __forceinline__ u32 smem_addr_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// The generic address of a tensor map (a __grid_constant__ parameter or global memory).
__device__ __forceinline__ u64 tensor_map_address(const TsattnTmaDescriptor& map) {
  return reinterpret_cast<u64>(&map);
}

__device__ __forceinline__ void prefetch_tensormap(const TsattnTmaDescriptor& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensor_map_address(map)) : "memory");
}

// Nanoseconds of the global timer (for bounded waits in tests and debug builds).
__device__ __forceinline__ u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// True in exactly one active lane of a converged warp (elect.sync with a full mask).
__device__ __forceinline__ bool elect_one_sync() {
  u32 elected = 0;
  asm volatile(
      "{\n.reg .b32 lane;\n.reg .pred p;\n"
      "elect.sync lane|p, %1;\n"
      "@p mov.u32 %0, 1;\n}\n"
      : "+r"(elected)
      : "r"(0xFFFFFFFFu));
  return elected != 0;
}

// ---------------------------------------------------------------------------------------------
// Fences.

// Makes this thread's generic-proxy writes to shared memory (st.shared) visible to the async
// proxy (TMA stores, wgmma operand reads). Each writer fences, then the threads synchronise.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Makes mbarrier_init visible to the async proxy (and the cluster) before TMA signals it.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// mbarrier (a 64-bit object in shared memory, 8-byte aligned; addressed by its u32 smem address).

__device__ __forceinline__ void mbarrier_init(u32 bar, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// One arrival that also raises the phase's expected transaction count by `bytes`.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One plain arrival (consumers releasing a stage).
__device__ __forceinline__ void mbarrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// True once the phase with this parity has completed. May suspend for a system-dependent time
// before returning false; callers loop.
__device__ __forceinline__ bool mbarrier_try_wait_parity(u32 bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbarrier_wait_parity(u32 bar, u32 parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// The same wait, bounded: false when the phase has not completed after timeout_ns (a hang in a
// test becomes a reported failure instead).
__device__ __forceinline__ bool mbarrier_wait_parity_bounded(u32 bar, u32 parity, u64 timeout_ns) {
  if (mbarrier_try_wait_parity(bar, parity)) return true;
  const u64 start = global_timer_ns();
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (global_timer_ns() - start > timeout_ns) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// TMA.

// Loads the box at element coordinates (c0 innermost, c1) of `map` into shared memory at
// smem_dst (1024-byte aligned for 128B swizzle) and completes `bytes` of the barrier's tx count.
// Out-of-bounds elements (also negative coordinates) are filled with zeros. With the 128-byte
// swizzle the innermost coordinate times the element size must be a multiple of 16 bytes: on the
// H200 a bf16 box at c0 = 100 (200 bytes) failed with CUDA_ERROR_ILLEGAL_INSTRUCTION, c0 = 96 and
// negative multiples of 8 loaded fine (tests/sm90a/test_blocks.cpp). The attention kernel's inner
// coordinates are 0, 64, 128 and 192, and for e4m3 V^T a key column (a multiple of 32 bytes).
__device__ __forceinline__ void tma_load_2d(u32 smem_dst, const TsattnTmaDescriptor& map, u32 bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_dst),
      "l"(tensor_map_address(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same for a rank-4 map (the attention tensors: {d, head, token, batch}).
__device__ __forceinline__ void tma_load_4d(u32 smem_dst, const TsattnTmaDescriptor& map, u32 bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(smem_dst),
      "l"(tensor_map_address(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The same load, multicast: the box lands at smem_dst in every CTA of the cluster named in cta_mask
// (bit r = cluster rank r), and each destination's barrier at offset `bar` gets the bytes.
__device__ __forceinline__ void tma_load_4d_multicast(u32 smem_dst, const TsattnTmaDescriptor& map, u32 bar, int c0,
                                                      int c1, int c2, int c3, u16 cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_dst),
      "l"(tensor_map_address(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(cta_mask)
      : "memory");
}

// ---------------------------------------------------------------------------------------------
// Thread-block clusters.

__device__ __forceinline__ u32 cluster_ctarank() {
  u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of every CTA of the cluster; orders shared-memory work (barrier inits, remote
// arrivals) across the cluster.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// One arrival on the barrier at offset `bar` of cluster rank `cta` (the caller's own rank too).
// Release at CTA scope (PTX's default, as CUTLASS's cluster barriers use it): what the arrival
// publishes is "this thread's wgmma reads of the stage retired", which wgmma.wait_group already
// ordered; .release.cluster compiles to MEMBAR.ALL.GPU before every arrival.
__device__ __forceinline__ void mbarrier_arrive_cluster(u32 bar, u32 cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(cta)
      : "memory");
}

// One arrival on the barrier at offset `bar` of cluster rank `cta` that also raises its phase's
// expected transaction count by `bytes` (for st_async_cluster_u32 below).
__device__ __forceinline__ void mbarrier_arrive_expect_tx_cluster(u32 bar, u32 cta, u32 bytes) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [remote], %2;\n}" ::"r"(bar),
      "r"(cta), "r"(bytes)
      : "memory");
}

// A 32-bit word of this CTA's shared memory (u32 smem address).
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 w) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(w) : "memory");
}

__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 w;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(w) : "r"(addr) : "memory");
  return w;
}

// The same read with acquire semantics at cluster scope: every later memory operation of the
// thread (a remote mbarrier arrival among them) is performed after it; ptxas waits for the load.
__device__ __forceinline__ u32 ld_acquire_cluster_shared_u32(u32 addr) {
  u32 w;
  asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(w) : "r"(addr) : "memory");
  return w;
}

// Stores 4 bytes at offset `addr` of cluster rank `cta`'s shared memory, asynchronously: they
// count as transaction bytes on that CTA's barrier at offset `bar` (like a TMA load), so its
// waiters see them once the phase completes.
__device__ __forceinline__ void st_async_cluster_u32(u32 addr, u32 cta, u32 w, u32 bar) {
  asm volatile(
      "{\n.reg .b32 remote, remote_bar;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mapa.shared::cluster.u32 remote_bar, %2, %1;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [remote], %3, [remote_bar];\n}" ::"r"(addr),
      "r"(cta), "r"(bar), "r"(w)
      : "memory");
}

// Stores the box at (c0, c1) from shared memory; elements outside the tensor are not written.
// The smem source must have been written through the async proxy, or fenced with
// fence_proxy_async_shared() by its writers. Completes with tma_store_commit / tma_store_wait.
__device__ __forceinline__ void tma_store_2d(const TsattnTmaDescriptor& map, u32 smem_src, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(tensor_map_address(map)),
      "r"(smem_src), "r"(c0), "r"(c1)
      : "memory");
}

__device__ __forceinline__ void tma_store_4d(const TsattnTmaDescriptor& map, u32 smem_src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   tensor_map_address(map)),
               "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until at most n committed store groups of this thread are pending; kReadOnly waits only
// until their shared-memory source may be reused, otherwise until the writes are done.
template <int n, bool kReadOnly>
__device__ __forceinline__ void tma_store_wait() {
  if constexpr (kReadOnly) {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(n) : "memory");
  } else {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(n) : "memory");
  }
}

#endif  // __CUDA_ARCH__

}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_TMA_CUH
