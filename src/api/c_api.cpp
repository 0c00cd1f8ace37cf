// c_api.cpp - the C boundary: converts arguments, runs the call, turns every exception
// into a status code and a thread-local message. Nothing throws past this file.
#include <tsattn/tsattn.h>
#include <tsattn/tsattn.hpp>

#include <new>
#include <string>

#include "api/execute.hpp"
#include "api/validate.hpp"

namespace {

thread_local std::string last_error;

template <class Body>
tsattn_status guarded(Body&& body) noexcept {
  try {
    last_error.clear();
    body();
    return TSATTN_OK;
  } catch (const tsattn::Error& e) {
    last_error = e.what();
    return static_cast<tsattn_status>(e.kind());
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
  } catch (...) {
    last_error = "internal error: unknown exception";
  }
  return TSATTN_ERROR_RUNTIME;
}

}  // namespace

extern "C" {

TSATTN_API void tsattn_prefill_options_init(tsattn_prefill_options* options) {
  if (options == nullptr) return;
  *options = tsattn_prefill_options{};
  options->struct_size = sizeof(tsattn_prefill_options);
  options->mask_type = TSATTN_MASK_DENSE;
  options->window_left = -1;
  options->output_scale = 1.0;
  options->out_dtype = TSATTN_DTYPE_UNSET;
}

TSATTN_API tsattn_status tsattn_batch_prefill(const tsattn_tensor_view* q, const tsattn_tensor_view* k,
                                              const tsattn_tensor_view* v, const tsattn_tensor_view* qo_indptr,
                                              const tsattn_tensor_view* kv_indptr,
                                              const tsattn_prefill_options* options,
                                              const tsattn_tensor_view* out) {
  return guarded([&] {
    const tsattn::Arguments args{q, k, v, qo_indptr, kv_indptr, options, out};
    tsattn::execute(tsattn::validate_arguments(args, tsattn::Residency::cuda));
  });
}

TSATTN_API const char* tsattn_last_error_message(void) { return last_error.c_str(); }

TSATTN_API const char* tsattn_version_string(void) { return TSATTN_VERSION_STRING; }

TSATTN_API int32_t tsattn_abi_version(void) { return TSATTN_ABI_VERSION; }

}  // extern "C"
