// sm90a/wgmma.cuh - inline-PTX wrappers for Hopper's warpgroup MMA (wgmma), NVRTC-clean.
//
// What is here:
//   - smem_desc_sw128_kmajor(): the 64-bit shared-memory matrix descriptor of a K-major 16-bit
//     tile stored in the 128-byte swizzled layout (the layout TMA writes with SWIZZLE_128B).
//   - sw128_offset(): the byte offset of element (row, k) in such a tile, for code that writes
//     or reads the tile with ordinary loads and stores.
//   - wgmma_fence / wgmma_commit / wgmma_wait<N>: wgmma.{fence,commit_group,wait_group}.
//   - wgmma_ss<N, dtype>(): one wgmma.mma_async m64nNk16 with fp32 accumulators and both
//     operands in shared memory (SS), for N in {64, 80, 128, 160, 256} and bf16/f16 inputs
//     (e4m3: 64, 128, 192, 256; RS e4m3: 64, 128).
//   - smem_desc_sw128_mnmajor(): the descriptor of an MN-major B operand (V in O += P V: rows
//     are the K dimension (keys), 64 N-elements (head dim) per 128-byte swizzled row), and
//     wgmma_rs<N, dtype>(): one m64nNk16 with A from registers (P) and B transposed from smem.
//   - e4m3 (8-bit) variants: wgmma_ss/wgmma_rs<N, kE4m3> are m64nNk32, both operands K-major
//     (8-bit wgmma has no transpose), and e4m3_a_operand() / e4m3_key_of_slot() for P and V^T (below).
//
// Shared-memory tile layout (K-major, 128B swizzle; both A (M x K) and B (N x K) use it):
//   a "slab" holds R rows x 64 elements of 2 bytes = R x 128 B, base 1024-byte aligned.
//   Element (r, k), 0 <= k < 64, lives at byte
//       r * 128 + (((k / 8) ^ (r % 8)) * 16) + (k % 8) * 2
//   i.e. the 16-byte chunk index is XOR-ed with the row index mod 8 (CuTe Swizzle<3,4,3>).
//   K beyond 64 goes to a further slab (its own 1024-aligned base); never advance a
//   descriptor linearly across slabs. Within a slab, k16 step s (s = 0..3) is the slab's
//   descriptor with the start address advanced by 32 * s bytes (smem_desc_advance).
//
// MN-major B (the same bytes TMA writes for a [keys][d] tile): slab s holds d in [64s, 64s + 64)
// for all R keys, element (key, n) at sw128_offset(key, n % 64) of slab n / 64. With the
// transpose bit set, the descriptor's leading byte offset is the step from one 64-wide N slab to
// the next, and its stride byte offset the step from one 8-key group to the next (1024 B). The
// k16 step kk (keys 16kk ..) starts 16 * 128 = 2048 * kk bytes further.
//
// A from registers (RS), m64k16: thread t (w, g, c as below) holds four 32-bit pairs,
//   a[0] = A(16w + g, 2c .. 2c+1)      a[1] = A(16w + g + 8, 2c .. 2c+1)
//   a[2] = A(16w + g, 2c+8 .. 2c+9)    a[3] = A(16w + g + 8, 2c+8 .. 2c+9)
// (low element in the low half). That is exactly the accumulator layout of columns
// 16kk .. 16kk+15 (d[8kk .. 8kk+7] packed pairwise), so P goes from S to A without shuffles.
//
// 8-bit (e4m3) operands. A slab row is still 128 bytes, now 128 elements: element (r, k) of a
// K-major slab lives at byte r * 128 + (((k / 16) ^ (r % 8)) * 16) + k % 16, and k32 step s
// (s = 0..3) is the slab's descriptor advanced by 32 * s bytes, as for 16-bit k16 steps. B must
// be K-major, so O += P V reads V^T ([d][keys], keys contiguous) with the same K-major descriptor
// as K in S = Q K^T.
// A from registers, m64k32: thread t holds four 32-bit words of four bytes each (low byte first),
//   a[0] = A(16w + g, 4c .. 4c+3)        a[1] = A(16w + g + 8, 4c .. 4c+3)
//   a[2] = A(16w + g, 16+4c .. 16+4c+3)  a[3] = A(16w + g + 8, 16+4c .. 16+4c+3)
// but the accumulator of 32 key columns gives that thread columns 2c, 2c+1, 8+2c, 9+2c, 16+2c,
// 17+2c, 24+2c, 25+2c. Rather than shuffling bytes between threads, P keeps its registers and the
// K index of the PV GEMM is permuted: A's column ("slot") 4c + e holds key 2c + e % 2 + 8 (e / 2)
// (and +16 for the second half), and V^T's column `slot` must hold the same key, i.e. V^T is
// written with column slot = key e4m3_key_of_slot(slot) within each 32-key group.
//
// Accumulator fragment (the m64nN fp32 result D, N/2 floats per thread of the warpgroup):
//   t = thread index within the warpgroup (0..127), w = t / 32, g = (t % 32) / 4, c = t % 4.
//   d[i] holds D(row, col) with j = i / 4, r = i % 4:
//       row = 16 * w + g + 8 * (r / 2)
//       col = 8 * j + 2 * c + (r % 2)
//   (the mma.sync m16n8 C layout, stacked over the 4 warps along M and repeated N/8 times).
//
// Rules (PTX ISA, wgmma): all 128 threads of a warpgroup that starts at a warp
// index divisible by 4 execute every wgmma convergently; wgmma_fence() before the first wgmma
// whenever accumulators were touched by ordinary code; read accumulators only after a
// wgmma_wait that retires the group; everything stays __forceinline__ (a call boundary
// serializes, ptxas C7510). Threads that wrote a tile with st.shared must run
// fence_proxy_async_shared() (sm90a/tma.cuh) and then a barrier before the wgmma reads it.
#ifndef TSATTN_SM90A_WGMMA_CUH
#define TSATTN_SM90A_WGMMA_CUH

#include "common/prelude.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "templates/sm90a needs --gpu-architecture=sm_90a (wgmma, TMA and mbarrier tx counts)"
#endif

namespace tsattn_dev {

// 128B-swizzled K-major layout: byte offset of element (row, k) in a slab, 0 <= k < 64.
__host__ __device__ constexpr u32 sw128_offset(u32 row, u32 k) {
  return row * 128u + ((((k >> 3) ^ row) & 7u) << 4) + ((k & 7u) << 1);
}

// 128B-swizzled K-major layout of 8-bit elements: byte offset of element (row, k), 0 <= k < 128.
__host__ __device__ constexpr u32 sw128_offset_8bit(u32 row, u32 k) {
  return row * 128u + ((((k >> 4) ^ row) & 7u) << 4) + (k & 15u);
}

// The key (within its 32-key group) that column `slot` of P's e4m3 A operand and of V^T holds
// (see "8-bit (e4m3) operands" above): slot 4c + e + 16h <- key 2c + e % 2 + 8 (e / 2) + 16h.
__host__ __device__ constexpr int e4m3_key_of_slot(int slot) {
  return (slot & 16) + 2 * ((slot & 15) >> 2) + (slot & 1) + 8 * ((slot >> 1) & 1);
}

// Descriptor fields (PTX ISA "Matrix Descriptor Format"): start address >> 4 in bits 0-13,
// leading byte offset >> 4 in bits 16-29 (unused by swizzled K-major layouts: 1),
// stride byte offset >> 4 in bits 32-45 (1024 B: from one 8-row group to the next),
// base offset in bits 49-51 (0: slabs are 1024-byte aligned), layout in bits 62-63 (1 = 128B).
__host__ __device__ constexpr u64 smem_desc_sw128_kmajor(u32 smem_addr) {
  return static_cast<u64>((smem_addr & 0x3FFFFu) >> 4) | (static_cast<u64>(1u) << 16) |
         (static_cast<u64>(1024u >> 4) << 32) | (static_cast<u64>(1u) << 62);
}

// MN-major (transposed B) 128B-swizzled operand: leading byte offset = the N-slab stride,
// stride byte offset = 1024 (8 K-rows of 128 B). slab_stride_bytes < 256 KB.
__host__ __device__ constexpr u64 smem_desc_sw128_mnmajor(u32 smem_addr, u32 slab_stride_bytes) {
  return static_cast<u64>((smem_addr & 0x3FFFFu) >> 4) | (static_cast<u64>((slab_stride_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<u64>(1024u >> 4) << 32) | (static_cast<u64>(1u) << 62);
}

// The descriptor with its start moved by `bytes` (a multiple of 16; 32 per k16 step), within one
// slab or to another one of the same layout. Only the low word changes: the start-address field
// (bits 0-13) holds a shared-memory address (< 256 KB) >> 4 and never carries into bit 14, so one
// 32-bit add per k-step replaces rebuilding the descriptor from an address.
__host__ __device__ constexpr u64 smem_desc_advance(u64 desc, u32 bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<u32>(static_cast<u32>(desc) + (bytes >> 4));
}

#if defined(__CUDA_ARCH__)

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Waits until at most n committed wgmma groups of this warpgroup are pending.
template <int n>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(n) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across a wgmma boundary.
template <int kCount>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A * B^T for one warpgroup: A 64x16 and B Nx16, both K-major in shared memory, given by
// descriptors. scale_d == 0 ignores the old d (d = A * B^T). Specialized below for each N.
template <int N, int dtype>
struct WgmmaSS;

// d (+)= A * B for one warpgroup: A 64x16 from registers (layout above), B 16xN MN-major in
// shared memory. Specialized below for each N.
template <int N, int dtype>
struct WgmmaRS;

#define TSATTN_ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define TSATTN_ACC16(i) TSATTN_ACC4(i), TSATTN_ACC4(i + 4), TSATTN_ACC4(i + 8), TSATTN_ACC4(i + 12)
#define TSATTN_ACC32(i) TSATTN_ACC16(i), TSATTN_ACC16(i + 16)
#define TSATTN_ACC_64 TSATTN_ACC32(0)
#define TSATTN_ACC_128 TSATTN_ACC32(0), TSATTN_ACC32(32)
#define TSATTN_ACC_160 TSATTN_ACC32(0), TSATTN_ACC32(32), TSATTN_ACC16(64)
#define TSATTN_ACC_256 TSATTN_ACC32(0), TSATTN_ACC32(32), TSATTN_ACC32(64), TSATTN_ACC32(96)
#define TSATTN_ACC_80 TSATTN_ACC32(0), TSATTN_ACC4(32), TSATTN_ACC4(36)
#define TSATTN_ACC_192 TSATTN_ACC32(0), TSATTN_ACC32(32), TSATTN_ACC32(64)
#define TSATTN_WGMMA_REGS_64                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define TSATTN_WGMMA_TAIL_64 " %32, %33, p, 1, 1"
#define TSATTN_WGMMA_PRED_64 "setp.ne.b32 p, %34, 0;\n"
#define TSATTN_WGMMA_REGS_128                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TSATTN_WGMMA_TAIL_128 " %64, %65, p, 1, 1"
#define TSATTN_WGMMA_PRED_128 "setp.ne.b32 p, %66, 0;\n"
#define TSATTN_WGMMA_REGS_160                                                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "           \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, " \
  "%72, %73, %74, %75, %76, %77, %78, %79"
#define TSATTN_WGMMA_TAIL_160 " %80, %81, p, 1, 1"
#define TSATTN_WGMMA_PRED_160 "setp.ne.b32 p, %82, 0;\n"
#define TSATTN_WGMMA_REGS_256                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, " \
  "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, " \
  "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "     \
  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "   \
  "%124, %125, %126, %127"
#define TSATTN_WGMMA_TAIL_256 " %128, %129, p, 1, 1"
#define TSATTN_WGMMA_PRED_256 "setp.ne.b32 p, %130, 0;\n"

#define TSATTN_WGMMA_REGS_80                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39"
#define TSATTN_WGMMA_TAIL_80 " %40, %41, p, 1, 1"
#define TSATTN_WGMMA_PRED_80 "setp.ne.b32 p, %42, 0;\n"
#define TSATTN_WGMMA_REGS_192                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
  "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, " \
  "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, " \
  "%66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define TSATTN_WGMMA_TAIL_192 " %96, %97, p, 1, 1"
#define TSATTN_WGMMA_PRED_192 "setp.ne.b32 p, %98, 0;\n"

// RS: A is four 32-bit registers after the N/2 accumulators; imm-trans-b = 1 (MN-major B).
#define TSATTN_WGMMA_RS_TAIL_64 " {%32, %33, %34, %35}, %36, p, 1, 1"
#define TSATTN_WGMMA_RS_PRED_64 "setp.ne.b32 p, %37, 0;\n"
#define TSATTN_WGMMA_RS_TAIL_128 " {%64, %65, %66, %67}, %68, p, 1, 1"
#define TSATTN_WGMMA_RS_PRED_128 "setp.ne.b32 p, %69, 0;\n"
#define TSATTN_WGMMA_RS_TAIL_256 " {%128, %129, %130, %131}, %132, p, 1, 1"
#define TSATTN_WGMMA_RS_PRED_256 "setp.ne.b32 p, %133, 0;\n"

// K is 16 for 16-bit inputs and 32 for e4m3. TRANS is the imm-trans operands: 16-bit wgmmas take
// them (SS: A and B not transposed; RS: B transposed, i.e. MN-major), 8-bit ones have none (both
// operands K-major only).
#define TSATTN_DEFINE_WGMMA_SS(N, DTYPE, TYPE, K, TRANS)                                                       \
  template <>                                                                                                  \
  struct WgmmaSS<N, DTYPE> {                                                                                   \
    __device__ static __forceinline__ void run(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d) {       \
      asm volatile("{\n.reg .pred p;\n" TSATTN_WGMMA_PRED_##N "wgmma.mma_async.sync.aligned.m64n" #N "k" #K    \
                                                              ".f32." TYPE "." TYPE " {" TSATTN_WGMMA_REGS_##N \
                   "}," TSATTN_WGMMA_TAIL_##N TRANS ";\n}\n"                                                   \
                   : TSATTN_ACC_##N                                                                            \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d)                                                    \
                   : "memory");                                                                                \
    }                                                                                                          \
  };

TSATTN_DEFINE_WGMMA_SS(64, kBfloat16, "bf16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(80, kBfloat16, "bf16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(128, kBfloat16, "bf16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(160, kBfloat16, "bf16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(256, kBfloat16, "bf16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(64, kFloat16, "f16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(80, kFloat16, "f16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(128, kFloat16, "f16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(160, kFloat16, "f16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(256, kFloat16, "f16", 16, ", 0, 0")
TSATTN_DEFINE_WGMMA_SS(64, kE4m3, "e4m3", 32, "")
TSATTN_DEFINE_WGMMA_SS(128, kE4m3, "e4m3", 32, "")
TSATTN_DEFINE_WGMMA_SS(192, kE4m3, "e4m3", 32, "")
TSATTN_DEFINE_WGMMA_SS(256, kE4m3, "e4m3", 32, "")

#define TSATTN_DEFINE_WGMMA_RS(N, DTYPE, TYPE, K, TRANS)                                                          \
  template <>                                                                                                     \
  struct WgmmaRS<N, DTYPE> {                                                                                      \
    __device__ static __forceinline__ void run(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, int scale_d) {   \
      asm volatile("{\n.reg .pred p;\n" TSATTN_WGMMA_RS_PRED_##N "wgmma.mma_async.sync.aligned.m64n" #N "k" #K    \
                                                                 ".f32." TYPE "." TYPE " {" TSATTN_WGMMA_REGS_##N \
                   "}," TSATTN_WGMMA_RS_TAIL_##N TRANS ";\n}\n"                                                   \
                   : TSATTN_ACC_##N                                                                               \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)                        \
                   : "memory");                                                                                   \
    }                                                                                                             \
  };

TSATTN_DEFINE_WGMMA_RS(64, kBfloat16, "bf16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(128, kBfloat16, "bf16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(256, kBfloat16, "bf16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(64, kFloat16, "f16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(128, kFloat16, "f16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(256, kFloat16, "f16", 16, ", 1")
TSATTN_DEFINE_WGMMA_RS(64, kE4m3, "e4m3", 32, "")  // the e4m3 D256 PV chunks (prefill_sm90a.cuh)
TSATTN_DEFINE_WGMMA_RS(128, kE4m3, "e4m3", 32, "")
TSATTN_DEFINE_WGMMA_RS(256, kE4m3, "e4m3", 32, "")

#undef TSATTN_DEFINE_WGMMA_RS
#undef TSATTN_DEFINE_WGMMA_SS
#undef TSATTN_WGMMA_RS_TAIL_64
#undef TSATTN_WGMMA_RS_PRED_64
#undef TSATTN_WGMMA_RS_TAIL_128
#undef TSATTN_WGMMA_RS_PRED_128
#undef TSATTN_WGMMA_RS_TAIL_256
#undef TSATTN_WGMMA_RS_PRED_256
#undef TSATTN_WGMMA_REGS_64
#undef TSATTN_WGMMA_TAIL_64
#undef TSATTN_WGMMA_PRED_64
#undef TSATTN_ACC_64
#undef TSATTN_WGMMA_REGS_128
#undef TSATTN_WGMMA_TAIL_128
#undef TSATTN_WGMMA_PRED_128
#undef TSATTN_ACC_128
#undef TSATTN_WGMMA_REGS_160
#undef TSATTN_WGMMA_TAIL_160
#undef TSATTN_WGMMA_PRED_160
#undef TSATTN_ACC_160
#undef TSATTN_WGMMA_REGS_256
#undef TSATTN_WGMMA_TAIL_256
#undef TSATTN_WGMMA_PRED_256
#undef TSATTN_ACC_256
#undef TSATTN_WGMMA_REGS_80
#undef TSATTN_WGMMA_TAIL_80
#undef TSATTN_WGMMA_PRED_80
#undef TSATTN_ACC_80
#undef TSATTN_WGMMA_REGS_192
#undef TSATTN_WGMMA_TAIL_192
#undef TSATTN_WGMMA_PRED_192
#undef TSATTN_ACC_192
#undef TSATTN_ACC32
#undef TSATTN_ACC16
#undef TSATTN_ACC4

// P (the fp32 accumulators of kSteps * 32 key columns, m64 layout) as the A operand of kSteps
// e4m3 k32 wgmmas, keys permuted as e4m3_key_of_slot says: step kk is d[16kk .. 16kk+15].
template <int kSteps>
__device__ __forceinline__ void e4m3_a_operand(const float (&d)[16 * kSteps], u32 (&a)[kSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // r: rows g (even r) / g + 8 (odd r), first (r < 2) or second 16 slots.
      const int base = 16 * kk + 8 * (r / 2) + 2 * (r % 2);
      a[kk][r] = pack_pair<kE4m3>(d[base], d[base + 1]) | (pack_pair<kE4m3>(d[base + 4], d[base + 5]) << 16);
    }
  }
}

// One SS wgmma (see WgmmaSS): m64nNk16 for kBfloat16 / kFloat16, m64nNk32 for kE4m3.
template <int N, int dtype>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d) {
  WgmmaSS<N, dtype>::run(d, desc_a, desc_b, scale_d);
}

// One RS wgmma (see WgmmaRS): m64nNk16 for kBfloat16 / kFloat16 (B MN-major), m64nNk32 for
// kE4m3 (B K-major).
template <int N, int dtype>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, int scale_d) {
  WgmmaRS<N, dtype>::run(d, a, desc_b, scale_d);
}

#endif  // __CUDA_ARCH__

}  // namespace tsattn_dev

#endif  // TSATTN_SM90A_WGMMA_CUH
