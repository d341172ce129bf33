/* Argument checks shared by the entry points (src/ta_api.c). */
#ifndef TA_VALIDATE_H
#define TA_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"

/*
 * The first failed check of a validation run (the caller's stack; no global
 * state). Every check that refuses an input records itself here through
 * ta_fail* and returns the status it recorded, so the status an entry point
 * returns and the explanation ta_explain_* writes come from the same record.
 * Formatted by ta_diag_format (src/ta_diag.c) as
 *   field[.member][[index]][ = value]: [rule][ other[ = other_value]][; allowed bounds] (STATUS)
 * e.g. "heads_kv = 0: allowed >= 1 (TA_ERR_BAD_SHAPE)",
 *      "args.o: overlaps args.q (TA_ERR_BAD_ARG)".
 */
enum {
    TA_DIAG_VALUE = 1u << 0,       /* value is set (decimal) */
    TA_DIAG_VALUE_ADDR = 1u << 1,  /* value is set and is an address (hex) */
    TA_DIAG_OTHER_VALUE = 1u << 2, /* other_value is set */
    TA_DIAG_INDEX = 1u << 3,       /* index is set: field[index] */
    TA_DIAG_LO = 1u << 4,          /* allowed >= lo */
    TA_DIAG_HI = 1u << 5,          /* allowed <= hi (with TA_DIAG_LO: [lo, hi]) */
    TA_DIAG_MULTIPLE = 1u << 6     /* allowed: a multiple of lo */
};
typedef struct ta_diag {
    ta_status status;   /* TA_OK until a check fails */
    const char *field;  /* what failed, as the caller spells it: "heads_kv", "args.q" */
    const char *member; /* a member of field ("seq" of "args.k_strides"), or NULL */
    const char *rule;   /* static text: what is wrong ("overlaps"), or NULL */
    const char *other;  /* the second party (the overlapping buffer, the divisor), or NULL */
    int64_t value, other_value, index, lo, hi;
    unsigned flags; /* TA_DIAG_* */
} ta_diag;

void ta_diag_init(ta_diag *d);
/* Record a failure (only the first one of a run is kept) and return st. */
ta_status ta_fail(ta_diag *d, ta_status st, const char *field, const char *rule);
/* ... with the value found: "field = value: rule" (a value outside a named set). */
ta_status ta_fail_value(ta_diag *d, ta_status st, const char *field, int64_t value,
                        const char *rule);
/* ... with the value found and the allowed bounds (TA_DIAG_LO / _HI / _MULTIPLE). */
ta_status ta_fail_bounds(ta_diag *d, ta_status st, const char *field, int64_t value,
                         unsigned bounds, int64_t lo, int64_t hi);
/* ... with a second party: "field: rule other". */
ta_status ta_fail_pair(ta_diag *d, ta_status st, const char *field, const char *rule,
                       const char *other);
/* One line into buf (NUL-terminated, truncated to buf_len - 1 characters; nothing
 * written when buf is NULL or buf_len is 0). st is the status the check run
 * returned; TA_OK gives "ok: every check passed". */
void ta_diag_format(const ta_diag *d, ta_status st, char *buf, size_t buf_len);

/* A buffer for the alignment and overlap checks: base, byte extent, alignment,
 * and its name for the diagnostics ("args.q"). */
typedef struct ta_buf {
    const void *ptr;
    size_t bytes;
    size_t align;
    const char *name;
} ta_buf;

int ta_ptr_aligned(const void *ptr, size_t align);
int ta_ranges_overlap(const void *a, size_t na, const void *b, size_t nb);
/* Every buffer aligned to its element; no output overlaps an input or another output. */
ta_status ta_check_buffers(const ta_buf *in, int n_in, const ta_buf *out, int n_out, ta_diag *d);
ta_status ta_check_workspace(const void *ws, size_t ws_bytes, size_t needed, ta_diag *d);
/* Reads seqlens_k (host memory): each value in [0, seq_k]. With
 * TA_SEQLENS_DEVICE nothing is read: TA_ERR_BAD_ARG on a host_memory backend,
 * else TA_OK (the CUDA kernels clamp the values). */
ta_status ta_check_seqlens_host(const ta_plan *pl, const int32_t *seqlens_k, int host_memory,
                                ta_diag *d);
/* Reads the paged KV block table (host memory; nothing without pages): the
 * entries [0, ceil(seq_k / kv_page_size)) of every row in [0, kv_num_pages). */
ta_status ta_check_block_table(const ta_plan *pl, ta_diag *d);
/* The rotary positions: a NULL array needs its sequence length <= rope_rows
 * (every backend); with host_memory the arrays are read: each value in
 * [0, rope_rows), and with query history rows pos_q[b][0] >= q_history
 * (history row -i uses pos_q[b][0] - i). Device memory is not read (CUDA
 * clamps the values into the table). */
ta_status ta_check_rope_pos(const ta_plan *pl, int host_memory, ta_diag *d);
/* The trace: REF only, entries non-NULL when capacity > 0, capacity * entry size
 * fits size_t (*bytes = that extent, for the overlap checks). */
ta_status ta_check_trace(ta_backend be, const ta_trace *tr, size_t *bytes, ta_diag *d);
/* The ranges of ta_problem (key_begin, key_end, row_begin, row_end) on the
 * tiles of one pass (TA_TILING_FWD: keys on the forward's K tiles, no row
 * range; TA_TILING_BWD: rows and keys on the backward's tiles), else
 * TA_ERR_UNSUPPORTED. Right after ta_plan_make, whose bounds they assume. */
ta_status ta_check_ranges(const ta_plan *pl, int pass, ta_diag *d);

#endif /* TA_VALIDATE_H */
