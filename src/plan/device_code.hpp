// device_code.hpp - the plain integer code of the kernels' headers that the host runs too: the
// work item order (common/item_order.cuh) and the split tail's walk (common/split_tail.cuh). Those
// headers are __host__ __device__ code for NVRTC; a host compiler needs the qualifiers gone.
#pragma once

#define __host__
#define __device__
#include "common/item_order.cuh"
#include "common/split_tail.cuh"
#undef __host__
#undef __device__
