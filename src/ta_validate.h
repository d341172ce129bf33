/* Argument checks shared by the entry points (src/ta_api.c). */
#ifndef TA_VALIDATE_H
#define TA_VALIDATE_H

#include <stddef.h>

#include "ta_internal.h"

/* A buffer for the alignment and overlap checks: base, byte extent, alignment. */
typedef struct ta_buf {
    const void *ptr;
    size_t bytes;
    size_t align;
} ta_buf;

int ta_ptr_aligned(const void *ptr, size_t align);
int ta_ranges_overlap(const void *a, size_t na, const void *b, size_t nb);
/* Every buffer aligned to its element; no output overlaps an input or another output. */
ta_status ta_check_buffers(const ta_buf *in, int n_in, const ta_buf *out, int n_out);
ta_status ta_check_workspace(const void *ws, size_t ws_bytes, size_t needed);
/* Reads seqlens_k (host memory): each value in [0, seq_k]. */
ta_status ta_check_seqlens_host(const ta_plan *pl, const int32_t *seqlens_k);
ta_status ta_check_trace(ta_backend be, const ta_trace *tr);

#endif /* TA_VALIDATE_H */
