/*
 * tsattn.h - the C ABI of tsattn: one-shot, task-scheduled prefill attention.
 *
 * Usable from any language. No exception crosses this boundary: every entry point
 * returns a tsattn_status, and tsattn_last_error_message() holds the message of the
 * last failure on the calling thread. The contract (shapes, masks, dtypes, errors)
 * is docs/contract.md; the C API carries exactly the Python arguments plus a CUDA stream.
 *
 * ABI rules: enums travel as int32_t fields; the options struct starts with its own
 * size so it can grow. Bump TSATTN_ABI_VERSION whenever a struct layout changes.
 */
#ifndef TSATTN_TSATTN_H
#define TSATTN_TSATTN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TSATTN_API __declspec(dllexport)
#else
#define TSATTN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TSATTN_ABI_VERSION 2

/* The four error kinds of the contract (docs/contract.md, "Errors"; Python: TypeError, ValueError,
 * NotImplementedError, RuntimeError). */
typedef enum tsattn_status {
  TSATTN_OK = 0,
  TSATTN_ERROR_TYPE = 1,
  TSATTN_ERROR_VALUE = 2,
  TSATTN_ERROR_NOT_IMPLEMENTED = 3,
  TSATTN_ERROR_RUNTIME = 4
} tsattn_status;

/* Element types a caller may hand over. Only float16, bfloat16 and float8_e4m3fn are
 * attention dtypes and int32 the index dtype; the others exist so that a wrong tensor
 * gets an error naming its real dtype. */
typedef enum tsattn_dtype {
  TSATTN_DTYPE_UNSET = 0, /* options.out_dtype only: "not given" */
  TSATTN_DTYPE_FLOAT16 = 1,
  TSATTN_DTYPE_BFLOAT16 = 2,
  TSATTN_DTYPE_FLOAT8_E4M3FN = 3,
  TSATTN_DTYPE_FLOAT32 = 4,
  TSATTN_DTYPE_FLOAT64 = 5,
  TSATTN_DTYPE_INT32 = 6,
  TSATTN_DTYPE_INT64 = 7,
  TSATTN_DTYPE_INT16 = 8,
  TSATTN_DTYPE_INT8 = 9,
  TSATTN_DTYPE_UINT8 = 10,
  TSATTN_DTYPE_BOOL = 11,
  TSATTN_DTYPE_FLOAT8_E5M2 = 12,
  TSATTN_DTYPE_OTHER = 255 /* anything else the caller has */
} tsattn_dtype;

/* Device kinds, with DLPack's numbers. */
typedef enum tsattn_device_type {
  TSATTN_DEVICE_CPU = 1,
  TSATTN_DEVICE_CUDA = 2,
  TSATTN_DEVICE_CUDA_HOST = 3 /* pinned host memory: host-readable */
} tsattn_device_type;

typedef enum tsattn_mask_type {
  TSATTN_MASK_DENSE = 0,
  TSATTN_MASK_CAUSAL = 1,         /* bottom-right aligned */
  TSATTN_MASK_VARIABLE_WINDOW = 2 /* per-query [start, end] bounds */
} tsattn_mask_type;

/* A DLPack-style view of caller-owned memory. Shapes and strides are in elements;
 * strides == NULL means compact row-major. The library never keeps the pointers
 * past the call. */
typedef struct tsattn_tensor_view {
  void* data;
  int32_t dtype;       /* tsattn_dtype */
  int32_t device_type; /* tsattn_device_type */
  int32_t device_id;
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides;
} tsattn_tensor_view;

/* Everything after q, k, v and the indptrs. Initialise with
 * tsattn_prefill_options_init(), then set what differs from the defaults. */
typedef struct tsattn_prefill_options {
  size_t struct_size;                                     /* sizeof(tsattn_prefill_options) as the caller compiled it */
  int32_t mask_type;                                      /* tsattn_mask_type; default dense */
  int64_t window_left;                                    /* -1 disables (default); W >= 1 needs the causal mask */
  const tsattn_tensor_view* variable_window_token_starts; /* int32 [B, Sq] or [total_q] */
  const tsattn_tensor_view* variable_window_token_ends;
  int32_t has_sm_scale; /* 0: sm_scale = 1/sqrt(D) */
  double sm_scale;
  double output_scale; /* default 1.0 */
  int32_t out_dtype;   /* tsattn_dtype; TSATTN_DTYPE_UNSET: out's dtype */
  void* stream;        /* CUstream / cudaStream_t; NULL is the legacy default stream */
  /* Optional log-sum-exp output (NULL: none): float32 [B, Sq, Hq] (fixed) or [total_q, Hq] (packed)
   * on q's device, any strides; the natural log of the sum of exp(sm_scale * q.k) over the row's
   * visible keys (before output_scale), -inf for a row that sees no key. */
  const tsattn_tensor_view* lse;
} tsattn_prefill_options;

TSATTN_API void tsattn_prefill_options_init(tsattn_prefill_options* options);

/*
 * out = attention(q, k, v) as docs/contract.md describes.
 *   fixed layout:  qo_indptr = kv_indptr = NULL; q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D], out [B,Sq,Hq,D]
 *   packed layout: both indptrs (int32 [B+1], host or device); q [total_q,Hq,D], k/v [total_k,Hkv,D]
 * out is caller-owned and required in C; options may be NULL (all defaults).
 * Work is queued on options->stream; the call returns before it finishes.
 */
TSATTN_API tsattn_status tsattn_batch_prefill(const tsattn_tensor_view* q, const tsattn_tensor_view* k,
                                              const tsattn_tensor_view* v, const tsattn_tensor_view* qo_indptr,
                                              const tsattn_tensor_view* kv_indptr,
                                              const tsattn_prefill_options* options, const tsattn_tensor_view* out);

/*
 * Plan once, run every layer: a tsattn_prefill_plan fixes everything of a call that does not depend
 * on tensor values (dtypes, heads, head dim, mask, scales, layout) and capacities (batch size and
 * per-request lengths), chooses and loads the kernel and owns its workspace. Its runs then only
 * launch: no compile, no allocation, no host wait, capturable in a CUDA graph with GPU indptrs.
 * A plan belongs to one CUDA context (the device's current or primary context at creation) and to
 * one stream of use at a time: its runs share its workspace, so they must be ordered on the device
 * (one stream, or streams ordered by events). docs/contract.md, "Plan once, run every layer".
 */
typedef struct tsattn_prefill_plan tsattn_prefill_plan;

typedef enum tsattn_layout {
  TSATTN_LAYOUT_FIXED = 0, /* q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D] */
  TSATTN_LAYOUT_PACKED = 1 /* q [total_q,Hq,D], k/v [total_k,Hkv,D], int32 indptrs [B+1] */
} tsattn_layout;

/* What a plan fixes. Initialise with tsattn_prefill_plan_options_init(), then set every capacity,
 * the heads, the head dim and the dtypes. */
typedef struct tsattn_prefill_plan_options {
  size_t struct_size; /* sizeof(tsattn_prefill_plan_options) as the caller compiled it */
  int32_t device_id;  /* CUDA device ordinal */
  int32_t layout;     /* tsattn_layout; default fixed */
  int64_t batch_size; /* capacities: requests per run, queries and keys per request (>= 1) */
  int64_t max_seq_len_q;
  int64_t max_kv_len;
  int32_t num_qo_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t q_dtype;   /* tsattn_dtype of q */
  int32_t kv_dtype;  /* tsattn_dtype of k and v (must equal q_dtype) */
  int32_t out_dtype; /* tsattn_dtype; TSATTN_DTYPE_UNSET: q_dtype */
  int32_t mask_type; /* tsattn_mask_type; default dense */
  int64_t window_left;
  int32_t has_sm_scale; /* 0: sm_scale = 1/sqrt(head_dim) */
  double sm_scale;
  double output_scale; /* default 1.0 */
} tsattn_prefill_plan_options;

/* What changes from run to run besides the tensors. Initialise with
 * tsattn_prefill_run_options_init() (validate = 1, everything else NULL). */
typedef struct tsattn_prefill_run_options {
  size_t struct_size; /* sizeof(tsattn_prefill_run_options) as the caller compiled it */
  const tsattn_tensor_view* variable_window_token_starts; /* variable_window plans only */
  const tsattn_tensor_view* variable_window_token_ends;
  const tsattn_tensor_view* lse; /* log-sum-exp output (options.lse of tsattn_prefill_options), or NULL */
  int32_t validate;              /* 1: check the tensors against the plan on the host; 0: skip (lengths clamped) */
  void* stream;                  /* CUstream / cudaStream_t of the plan's context; NULL is the legacy default stream */
} tsattn_prefill_run_options;

TSATTN_API void tsattn_prefill_plan_options_init(tsattn_prefill_plan_options* options);
TSATTN_API void tsattn_prefill_run_options_init(tsattn_prefill_run_options* options);

/* Checks the options, chooses and loads (compiles if needed) the kernel and allocates the plan's
 * workspace on options->device_id. May take milliseconds (seconds when it compiles). On success
 * *plan is a new plan; on failure *plan is NULL. */
TSATTN_API tsattn_status tsattn_prefill_plan_create(const tsattn_prefill_plan_options* options,
                                                    tsattn_prefill_plan** plan);

/*
 * out = attention(q, k, v) with the plan's settings, tensors as tsattn_batch_prefill takes them
 * (indptrs NULL for a fixed-layout plan, both given for a packed one, on the host or the GPU).
 * Shapes may be anything within the plan's capacities. Queues the work on options->stream and
 * returns; options may be NULL (defaults). The same output as tsattn_batch_prefill, bit for bit.
 */
TSATTN_API tsattn_status tsattn_prefill_plan_run(tsattn_prefill_plan* plan, const tsattn_tensor_view* q,
                                                 const tsattn_tensor_view* k, const tsattn_tensor_view* v,
                                                 const tsattn_tensor_view* qo_indptr,
                                                 const tsattn_tensor_view* kv_indptr,
                                                 const tsattn_prefill_run_options* options,
                                                 const tsattn_tensor_view* out);

/* Frees the plan and its workspace (NULL is a no-op); the frees (cuMemFree, cuMemFreeHost) wait for
 * the device's work in flight. A CUDA graph that captured runs of this plan must not be replayed
 * after it. */
TSATTN_API void tsattn_prefill_plan_destroy(tsattn_prefill_plan* plan);

/*
 * Prefill over a paged KV cache (docs/paged_kv.md): q packed as in tsattn_batch_prefill, the keys and
 * values in two page pools, each request's keys named by page tables:
 *   q [total_q, Hq, D]; k_cache, v_cache [num_pages, Hkv, page_size, D] (TSATTN_KV_LAYOUT_HND) or
 *   [num_pages, page_size, Hkv, D] (TSATTN_KV_LAYOUT_NHD), any strides with D contiguous and the rest
 *   16-byte aligned; qo_indptr and paged_kv_indptr int32 [B+1]; paged_kv_indices int32 (page ids);
 *   paged_kv_last_page_len int32 [B]; page_size 16, 32, 64 or 128; out [total_q, Hq, D].
 * Request b's keys are pages paged_kv_indices[paged_kv_indptr[b] .. paged_kv_indptr[b+1]-1] in order,
 * the last holding paged_kv_last_page_len[b] keys. The four tables are all on the host (every value
 * is checked before anything is queued) or all on q's GPU (never read back: clamped on the device,
 * so the call can be captured in a CUDA graph).
 */
typedef enum tsattn_kv_layout {
  TSATTN_KV_LAYOUT_HND = 0, /* pages [Hkv, page_size, D] */
  TSATTN_KV_LAYOUT_NHD = 1  /* pages [page_size, Hkv, D] */
} tsattn_kv_layout;

/* out = attention(q, the paged keys and values) with options as tsattn_batch_prefill takes them (no
 * variable_window mask: dense or causal, bottom-right aligned, with an optional window_left; lse may
 * be given). Work is queued on options->stream; the call returns before it finishes. */
TSATTN_API tsattn_status tsattn_batch_prefill_with_paged_kv_cache(
    const tsattn_tensor_view* q, const tsattn_tensor_view* k_cache, const tsattn_tensor_view* v_cache,
    const tsattn_tensor_view* qo_indptr, const tsattn_tensor_view* paged_kv_indptr,
    const tsattn_tensor_view* paged_kv_indices, const tsattn_tensor_view* paged_kv_last_page_len, int64_t page_size,
    int32_t kv_layout, const tsattn_prefill_options* options, const tsattn_tensor_view* out);

/* A plan for paged calls: tsattn_prefill_plan's rules, for packed q and a paged KV cache. Its
 * capacities bound each run as a packed plan's do (batch_size requests of at most max_seq_len_q
 * queries and max_kv_len keys); page_size and kv_layout are fixed by the plan. */
typedef struct tsattn_paged_prefill_plan tsattn_paged_prefill_plan;

/* What a paged plan fixes. Initialise with tsattn_paged_prefill_plan_options_init(), then set every
 * capacity, the heads, the head dim and the dtypes; the fields mean what they mean in
 * tsattn_prefill_plan_options. */
typedef struct tsattn_paged_prefill_plan_options {
  size_t struct_size; /* sizeof(tsattn_paged_prefill_plan_options) as the caller compiled it */
  int32_t device_id;
  int64_t batch_size;
  int64_t max_seq_len_q;
  int64_t max_kv_len;
  int32_t num_qo_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t q_dtype;
  int32_t kv_dtype;
  int32_t out_dtype;
  int32_t mask_type; /* dense or causal */
  int64_t window_left;
  int32_t has_sm_scale;
  double sm_scale;
  double output_scale;
  int64_t page_size; /* default 32 */
  int32_t kv_layout; /* tsattn_kv_layout; default HND */
} tsattn_paged_prefill_plan_options;

TSATTN_API void tsattn_paged_prefill_plan_options_init(tsattn_paged_prefill_plan_options* options);

/* As tsattn_prefill_plan_create; the plan also owns the buffer the pages are gathered into
 * (batch_size * max_kv_len keys of K and of V). */
TSATTN_API tsattn_status tsattn_paged_prefill_plan_create(const tsattn_paged_prefill_plan_options* options,
                                                          tsattn_paged_prefill_plan** plan);

/* out = the paged attention with the plan's settings, tensors as
 * tsattn_batch_prefill_with_paged_kv_cache takes them; run options as tsattn_prefill_plan_run takes
 * them (variable-window bounds must be NULL). Within the capacities no run compiles, allocates or
 * waits for the device; with options->validate = 0 the host checks are skipped and lengths beyond
 * the capacities are clamped on the device. The same output as the one-shot call, bit for bit. */
TSATTN_API tsattn_status tsattn_paged_prefill_plan_run(
    tsattn_paged_prefill_plan* plan, const tsattn_tensor_view* q, const tsattn_tensor_view* k_cache,
    const tsattn_tensor_view* v_cache, const tsattn_tensor_view* qo_indptr, const tsattn_tensor_view* paged_kv_indptr,
    const tsattn_tensor_view* paged_kv_indices, const tsattn_tensor_view* paged_kv_last_page_len,
    const tsattn_prefill_run_options* options, const tsattn_tensor_view* out);

/* As tsattn_prefill_plan_destroy. */
TSATTN_API void tsattn_paged_prefill_plan_destroy(tsattn_paged_prefill_plan* plan);

/*
 * Merging attention states (docs/contract.md, "Merging attention states"). Two partial attentions of
 * the same queries over disjoint key sets, each with its log-sum-exp (the natural log, -inf for a row
 * that saw no key: what options.lse holds), combine into the attention over both sets:
 *   m = max(s_a, s_b), w_a = exp(s_a - m), w_b = exp(s_b - m),
 *   out = (w_a v_a + w_b v_b) / (w_a + w_b), s_out = m + log(w_a + w_b),
 * computed in fp32. A state whose s is -inf weighs nothing and its v is not read: the other one is
 * copied bit for bit, and when both are -inf, out = 0 and s_out = -inf.
 *   v_a, v_b, out: [..., H, D], one dtype (float16, bfloat16 or float32), D contiguous, any other strides.
 *   s_a, s_b, s_out: float32 [..., H] (v's shape without D), any strides; s_out may be NULL (not written).
 * Every tensor on one CUDA device; out and s_out must not overlap the inputs or each other. The work is
 * queued on `stream` (NULL: the legacy default stream); a merge with nothing to write launches nothing.
 * Merges leave tsattn_last_kernel_name() as it was.
 */
TSATTN_API tsattn_status tsattn_merge_state(const tsattn_tensor_view* v_a, const tsattn_tensor_view* s_a,
                                            const tsattn_tensor_view* v_b, const tsattn_tensor_view* s_b,
                                            const tsattn_tensor_view* out, const tsattn_tensor_view* s_out,
                                            void* stream);

/*
 * n states per row at once: v [..., n, H, D], s [..., n, H] (FlashInfer's merge_states layout,
 * [seq_len, num_states, num_heads, head_dim]) into out [..., H, D] and s_out [..., H], with the rules
 * of tsattn_merge_state. n = 0 gives out = 0 and s_out = -inf; n = 1 copies.
 */
TSATTN_API tsattn_status tsattn_merge_states(const tsattn_tensor_view* v, const tsattn_tensor_view* s,
                                             const tsattn_tensor_view* out, const tsattn_tensor_view* s_out,
                                             void* stream);

/* Kernel cache counters of this process (in-memory table, disk layers, NVRTC, module loads).
 * Set stats->struct_size = sizeof(tsattn_cache_stats) first. */
typedef struct tsattn_cache_stats {
  size_t struct_size;
  uint64_t memory_hits;   /* kernel found in the process's table */
  uint64_t memory_misses; /* sent to the disk layers (and maybe NVRTC) */
  uint64_t compiles;      /* NVRTC compiles started */
  uint64_t compile_failures;
  uint64_t disk_lookups;
  uint64_t disk_read_only_hits;
  uint64_t disk_writable_hits;
  uint64_t disk_misses;
  uint64_t disk_damaged; /* entries rejected as corrupt, truncated or foreign */
  uint64_t disk_writes;
  uint64_t disk_write_failures;
  uint64_t modules_loaded; /* cubins loaded into CUDA contexts */
} tsattn_cache_stats;

TSATTN_API tsattn_status tsattn_get_cache_stats(tsattn_cache_stats* stats);

/* Compiles every kernel of a manifest (a built-in name: "default", "all", "llama3", "gemma"; or the
 * path of a JSON file, which contains a '/' or ends in .json) for the comma-separated
 * archs ("sm_90a,sm_80") into out_dir (NULL: the user cache). Needs no GPU. jobs <= 0: automatic.
 * Counts go to *compiled, *cached (already present) and *failed (each may be NULL). Returns
 * TSATTN_ERROR_VALUE for a bad manifest or arch list, TSATTN_ERROR_RUNTIME if a kernel failed. */
TSATTN_API tsattn_status tsattn_precompile(const char* manifest_path, const char* archs, const char* out_dir,
                                           int32_t jobs, int64_t* compiled, int64_t* cached, int64_t* failed);

/* The message of the last failed call on this thread ("" if none). Valid until the
 * next tsattn call on this thread. */
TSATTN_API const char* tsattn_last_error_message(void);

/* Which attention kernel the last tsattn_batch_prefill, tsattn_prefill_plan_run,
 * tsattn_batch_prefill_with_paged_kv_cache or tsattn_paged_prefill_plan_run call on this thread
 * launched (a paged call's page gather is not reported): its canonical name,
 * "prefill.<family>.<cubin arch>.d<D>.<in>_<out>.<mask>.<layout>", for example
 * "prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed" (the Hopper family) or
 * "prefill.sm80.sm_90a.d128.e4m3_bf16.dense.packed" (the portable family, compiled for Hopper),
 * with ".short_keys" appended for the Hopper family's variant of 128-key tiles (16-bit D128 dense
 * kernels, chosen by the call's key lengths; TSATTN_SHORT_KEYS), then ".lse" for the kernel that
 * writes the log-sum-exp output (options.lse).
 * "" before the first call, and after a call that failed or had nothing to launch (no query
 * rows): every call starts by clearing it. Never NULL; valid until the next such call on this
 * thread. A launch queued on a stream is reported even though the kernel may not have run yet. */
TSATTN_API const char* tsattn_last_kernel_name(void);

TSATTN_API const char* tsattn_version_string(void); /* "MAJOR.MINOR.PATCH" */
TSATTN_API int32_t tsattn_abi_version(void);        /* TSATTN_ABI_VERSION of the library */

#ifdef __cplusplus
}
#endif

#endif /* TSATTN_TSATTN_H */
