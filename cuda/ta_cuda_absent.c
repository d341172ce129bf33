/* Built instead of cuda/ta_cuda.cu when TILEATTN_CUDA is off. */
#include "ta_internal.h"

int ta_cuda_compiled(void) { return 0; }
int ta_cuda_device_present(void) { return 0; }
