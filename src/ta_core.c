/* Core helpers shared by every backend: status names, version, workspace
 * cursor, checked size arithmetic, dtype element access, trace. */
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"

const char *ta_status_string(ta_status s) {
    switch (s) {
    case TA_OK: return "TA_OK: success";
    case TA_ERR_NULL_ARG: return "TA_ERR_NULL_ARG: a required pointer is NULL";
    case TA_ERR_BAD_SHAPE: return "TA_ERR_BAD_SHAPE: a size is <= 0 or heads_q % heads_kv != 0";
    case TA_ERR_BAD_ARG:
        return "TA_ERR_BAD_ARG: invalid enum, flag, scale, conv size, seqlens value, "
               "pointer alignment, stream or overlapping buffers";
    case TA_ERR_UNSUPPORTED:
        return "TA_ERR_UNSUPPORTED: valid but unsupported (head dim, tile size, conv size or "
               "operation)";
    case TA_ERR_OVERFLOW: return "TA_ERR_OVERFLOW: a size overflows size_t or exceeds TA_SEQ_MAX";
    case TA_ERR_WORKSPACE_SIZE: return "TA_ERR_WORKSPACE_SIZE: workspace smaller than the query";
    case TA_ERR_WORKSPACE_ALIGN:
        return "TA_ERR_WORKSPACE_ALIGN: workspace not aligned to TA_WORKSPACE_ALIGN bytes";
    case TA_ERR_BACKEND_UNAVAILABLE:
        return "TA_ERR_BACKEND_UNAVAILABLE: backend not compiled in, not implemented, or no "
               "device";
    case TA_ERR_DEVICE: return "TA_ERR_DEVICE: a device call failed";
    }
    return "TA_ERR_UNKNOWN: not a ta_status value";
}

#define TA_STR2(x) #x
#define TA_STR(x) TA_STR2(x)
uint32_t ta_version(void) { return (uint32_t)TA_VERSION; }

const char *ta_version_string(void) {
    return TA_STR(TA_VERSION_MAJOR) "." TA_STR(TA_VERSION_MINOR) "." TA_STR(TA_VERSION_PATCH);
}

int ta_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

void ta_ws_begin(ta_ws_cursor *c, void *base) {
    c->base = (unsigned char *)base;
    c->used = 0;
    c->overflow = 0;
}

void *ta_ws_take(ta_ws_cursor *c, size_t count, size_t elem_bytes) {
    size_t bytes, start;
    if (c->overflow || !ta_mul_size(count, elem_bytes, &bytes) ||
        bytes > SIZE_MAX - (TA_WORKSPACE_ALIGN - 1) - c->used) {
        c->overflow = 1;
        return NULL;
    }
    start = c->used;
    c->used += (bytes + (TA_WORKSPACE_ALIGN - 1)) & ~(size_t)(TA_WORKSPACE_ALIGN - 1);
    return c->base ? (void *)(c->base + start) : NULL;
}

float ta_load(const void *base, ta_dtype dt, size_t idx) {
    switch (dt) {
    case TA_F16: return ta_f16_to_f32(((const uint16_t *)base)[idx]);
    case TA_BF16: return ta_bf16_to_f32(((const uint16_t *)base)[idx]);
    case TA_F32: break;
    }
    return ((const float *)base)[idx];
}

void ta_store(void *base, ta_dtype dt, size_t idx, float x) {
    switch (dt) {
    case TA_F16: ((uint16_t *)base)[idx] = ta_f32_to_f16(x); return;
    case TA_BF16: ((uint16_t *)base)[idx] = ta_f32_to_bf16(x); return;
    case TA_F32: break;
    }
    ((float *)base)[idx] = x;
}

void ta_trace_add(ta_trace *tr, int32_t pass, int32_t batch, int32_t head, int32_t q_tile,
                  int32_t k_tile) {
    if (!tr) return;
    if (tr->count < tr->capacity) {
        ta_trace_entry *e = &tr->entries[tr->count];
        e->batch = batch;
        e->head = head;
        e->q_tile = q_tile;
        e->k_tile = k_tile;
        e->pass = pass;
    }
    tr->count++;
}
