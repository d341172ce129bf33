/*
 * The layout of every struct of include/tileattn.h that the Python package
 * mirrors with ctypes (python/tileattn/_lib.py), as the C compiler sees it:
 * for each struct its sizeof and _Alignof, and for each field, in the
 * header's order, its name, offsetof, sizeof and kind ("int", "float",
 * "pointer" or "struct:NAME"). Printed as one JSON object on stdout;
 * python/tests/test_mirror.py compares it with the ctypes mirror (CTest:
 * python_layout and python_tests, label python).
 *
 * Before printing, it checks that its own table is complete and in the
 * header's order: each field starts where the one before it ends, rounded up
 * to the field's alignment, and the struct ends where the last field ends,
 * rounded up to the struct's alignment. A header field missing from the table
 * (other than one that fits in padding) leaves a gap and fails that check, so
 * a field added to the header fails here until it is added below (and then in
 * the Python test until _lib.py has it).
 *
 * Exit 0 with the JSON; 1 with the first mismatch on stderr.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tileattn.h"

/* clang-format off */
/* The kind of a field's type (unevaluated). A type missing here gives
 * "unknown", which the table check refuses: add it. ta_dtype and
 * ta_precision are enums, compatible with one of the integer types. */
#define TA_KIND(x)                                                             \
    _Generic((x), int32_t: "int", uint32_t: "int", int64_t: "int",             \
             float: "float", double: "float",                                  \
             const void *: "pointer", void *: "pointer",                       \
             const float *: "pointer", float *: "pointer",                     \
             const int32_t *: "pointer", ta_trace *: "pointer",                \
             ta_strides: "struct:ta_strides",                                  \
             ta_rope_args: "struct:ta_rope_args",                              \
             default: "unknown")

/* The alignment of a field's type: a struct's _Alignof, else its size (every
 * scalar type above is aligned to its size on the targets the library builds for). */
#define TA_ALIGN(x)                                                            \
    _Generic((x), ta_strides: _Alignof(ta_strides),                            \
             ta_rope_args: _Alignof(ta_rope_args), default: sizeof(x))
/* clang-format on */

typedef struct field {
    const char *name;
    size_t offset, size, align;
    const char *kind;
} field;

#define F(T, f)                                                                                    \
    { #f, offsetof(T, f), sizeof(((T *)0)->f), TA_ALIGN(((T *)0)->f), TA_KIND(((T *)0)->f) }

static const field problem_fields[] = {
    F(ta_problem, batch),
    F(ta_problem, heads_q),
    F(ta_problem, heads_kv),
    F(ta_problem, seq_q),
    F(ta_problem, seq_k),
    F(ta_problem, head_dim),
    F(ta_problem, head_dim_v),
    F(ta_problem, dtype),
    F(ta_problem, precision),
    F(ta_problem, flags),
    F(ta_problem, scale),
    F(ta_problem, conv_q),
    F(ta_problem, conv_k),
    F(ta_problem, block_q),
    F(ta_problem, block_k),
    F(ta_problem, num_threads),
    F(ta_problem, window_left),
    F(ta_problem, window_right),
    F(ta_problem, tile_config),
    F(ta_problem, num_splits),
    F(ta_problem, rope),
    F(ta_problem, rope_pairs),
    F(ta_problem, rope_rows),
    F(ta_problem, rope_row_stride),
    F(ta_problem, rope_head_stride),
    F(ta_problem, q_history),
    F(ta_problem, kv_page_size),
    F(ta_problem, kv_num_pages),
    F(ta_problem, kv_max_blocks),
    F(ta_problem, rband_alpha),
    F(ta_problem, rband_width),
    F(ta_problem, latent_dim),
    F(ta_problem, q_offset),
    F(ta_problem, key_begin),
    F(ta_problem, key_end),
    F(ta_problem, row_begin),
    F(ta_problem, row_end),
};

static const field rope_args_fields[] = {
    F(ta_rope_args, cos),
    F(ta_rope_args, sin),
    F(ta_rope_args, pos_q),
    F(ta_rope_args, pos_k),
};

static const field strides_fields[] = {
    F(ta_strides, batch),
    F(ta_strides, head),
    F(ta_strides, seq),
};

static const field fwd_args_fields[] = {
    F(ta_fwd_args, q),           F(ta_fwd_args, k),         F(ta_fwd_args, v),
    F(ta_fwd_args, conv_w),      F(ta_fwd_args, seqlens_k), F(ta_fwd_args, o),
    F(ta_fwd_args, lse),         F(ta_fwd_args, trace),     F(ta_fwd_args, q_strides),
    F(ta_fwd_args, k_strides),   F(ta_fwd_args, v_strides), F(ta_fwd_args, o_strides),
    F(ta_fwd_args, rope),        F(ta_fwd_args, q_hist),    F(ta_fwd_args, q_hist_strides),
    F(ta_fwd_args, block_table), F(ta_fwd_args, w_qlat),    F(ta_fwd_args, w_vup),
    F(ta_fwd_args, score_ring),  F(ta_fwd_args, score_ring_slots),
    F(ta_fwd_args, score_ring_strides),
};

static const field bwd_args_fields[] = {
    F(ta_bwd_args, q),          F(ta_bwd_args, k),          F(ta_bwd_args, v),
    F(ta_bwd_args, o),          F(ta_bwd_args, d_o),        F(ta_bwd_args, lse),
    F(ta_bwd_args, conv_w),     F(ta_bwd_args, seqlens_k),  F(ta_bwd_args, dq),
    F(ta_bwd_args, dk),         F(ta_bwd_args, dv),         F(ta_bwd_args, dconv_w),
    F(ta_bwd_args, trace),      F(ta_bwd_args, q_strides),  F(ta_bwd_args, k_strides),
    F(ta_bwd_args, v_strides),  F(ta_bwd_args, o_strides),  F(ta_bwd_args, d_o_strides),
    F(ta_bwd_args, dq_strides), F(ta_bwd_args, dk_strides), F(ta_bwd_args, dv_strides),
    F(ta_bwd_args, rope),       F(ta_bwd_args, d_alpha),    F(ta_bwd_args, w_qlat),
    F(ta_bwd_args, w_vup),      F(ta_bwd_args, dw_qlat),    F(ta_bwd_args, dw_vup),
    F(ta_bwd_args, accumulate), F(ta_bwd_args, dq_lo),      F(ta_bwd_args, dk_lo),
    F(ta_bwd_args, dv_lo),      F(ta_bwd_args, dconv_w_lo),
};

typedef struct layout {
    const char *name;
    size_t size, align;
    const field *fields;
    size_t num_fields;
} layout;

#define L(T, arr)                                                                                  \
    { #T, sizeof(T), _Alignof(T), arr, sizeof(arr) / sizeof(arr[0]) }

static const layout layouts[] = {
    L(ta_problem, problem_fields),   L(ta_rope_args, rope_args_fields),
    L(ta_strides, strides_fields),   L(ta_fwd_args, fwd_args_fields),
    L(ta_bwd_args, bwd_args_fields),
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* 0 if the table of l tiles the struct as described above, else 1 (message on stderr). */
static int check_table(const layout *l) {
    size_t end = 0;
    for (size_t i = 0; i < l->num_fields; i++) {
        const field *f = &l->fields[i];
        size_t expect = round_up(end, f->align);
        if (f->offset != expect) {
            fprintf(stderr,
                    "abi_layout: %s.%s at offset %zu, expected %zu after the field before "
                    "it: test/abi_layout.c's table misses a field of include/tileattn.h "
                    "or lists it out of the header's order\n",
                    l->name, f->name, f->offset, expect);
            return 1;
        }
        if (f->kind[0] == 'u') {
            fprintf(stderr, "abi_layout: %s.%s: type not in TA_KIND, add it\n", l->name, f->name);
            return 1;
        }
        end = f->offset + f->size;
    }
    if (round_up(end, l->align) != l->size) {
        fprintf(stderr,
                "abi_layout: %s: the table's fields end at %zu, sizeof is %zu: "
                "test/abi_layout.c's table misses the header's last field(s)\n",
                l->name, end, l->size);
        return 1;
    }
    return 0;
}

int main(void) {
    size_t n = sizeof(layouts) / sizeof(layouts[0]);
    for (size_t i = 0; i < n; i++) {
        if (check_table(&layouts[i]) != 0) {
            return 1;
        }
    }
    printf("{\n");
    for (size_t i = 0; i < n; i++) {
        const layout *l = &layouts[i];
        printf("  \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": [\n", l->name, l->size,
               l->align);
        for (size_t j = 0; j < l->num_fields; j++) {
            const field *f = &l->fields[j];
            printf("    [\"%s\", %zu, %zu, \"%s\"]%s\n", f->name, f->offset, f->size, f->kind,
                   j + 1 < l->num_fields ? "," : "");
        }
        printf("  ]}%s\n", i + 1 < n ? "," : "");
    }
    printf("}\n");
    return 0;
}
