// Programmatic dependent launch (T.pdl_trigger / T.pdl_sync): griddepcontrol on sm_90 and
// newer; before sm_90 kernels on a stream run one after the other and these do nothing.
#pragma once

#include "common.h"

namespace tl {

TL_DEVICE void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

TL_DEVICE void pdl_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace tl
