// common/mma_sm80.cuh - PTX wrappers for the Ampere tensor-core path: mma.sync m16n8k16 (fp32
// accumulate), ldmatrix x4 (plain and .trans), cp.async 16 B with zero fill, commit / wait.
// All asm that touches memory is volatile with a "memory" clobber so the compiler never moves
// shared-memory accesses across it.
#ifndef TSATTN_COMMON_MMA_SM80_CUH
#define TSATTN_COMMON_MMA_SM80_CUH

#include "common/prelude.cuh"

namespace tsattn_dev {

// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ u32 smem_u32(const void* p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

// d = a * b + c for one warp: A 16x16 row-major (4 regs of 2 halves), B 16x8 col-major (2 regs),
// C/D 16x8 fp32 (4 regs). Fragment ownership (g = lane / 4, c = lane % 4):
//   a0: (g, 2c..2c+1)  a1: (g+8, 2c..)  a2: (g, 2c+8..)  a3: (g+8, 2c+8..)
//   b0: (k 2c..2c+1, n g)  b1: (k 2c+8.., n g)
//   d0,d1: (g, 2c..2c+1)  d2,d3: (g+8, 2c..2c+1)
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 b16 matrices; lane l gives the address of row (l % 8) of matrix (l / 8), and gets
// element (row l / 4, cols 2(l % 4)..+1) of each matrix (with .trans: of its transpose).
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// 16-byte global -> shared copy through L2 only (.cg). With valid == false the source size is 0:
// nothing is read and the 16 bytes are zero-filled, so tail rows never touch memory past a
// tensor's end. Both addresses must be 16-byte aligned (docs/contract.md: strides keep 16-byte alignment).
__device__ __forceinline__ void cp_async_16(u32 smem_addr, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most n committed groups of this thread are still in flight.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory");
}

__device__ __forceinline__ void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__device__ __forceinline__ void ld_shared_v4(u32 addr, u32& a, u32& b, u32& c, u32& d) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr) : "memory");
}

__device__ __forceinline__ void st_shared_b32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_b16(u32 addr, u32 v) {
  asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(static_cast<u16>(v)) : "memory");
}

// 16-byte global load/store (addresses 16-byte aligned). The load goes through the read-only
// non-coherent path: q/k/v are never written by this kernel (docs/contract.md: out may not overlap them).
__device__ __forceinline__ void ld_global_nc_v4(const void* p, u32 (&r)[4]) {
  asm volatile("ld.global.nc.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}

__device__ __forceinline__ void st_global_v4(void* p, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

}  // namespace tsattn_dev

#endif  // TSATTN_COMMON_MMA_SM80_CUH
