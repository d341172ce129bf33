/*
 * The record of the first failed check and its one-line explanation
 * (ta_explain_*, docs/api.md "Diagnostics"). No allocation, no libc formatting:
 * a bounded writer appends into the caller's buffer.
 */
#include <stdint.h>
#include <string.h>

#include "ta_validate.h"

void ta_diag_init(ta_diag *d) { memset(d, 0, sizeof *d); }

ta_status ta_fail(ta_diag *d, ta_status st, const char *field, const char *rule) {
    if (d->status == TA_OK) {
        ta_diag_init(d);
        d->status = st;
        d->field = field;
        d->rule = rule;
    }
    return st;
}

ta_status ta_fail_value(ta_diag *d, ta_status st, const char *field, int64_t value,
                        const char *rule) {
    if (d->status == TA_OK) {
        ta_fail(d, st, field, rule);
        d->value = value;
        d->flags = TA_DIAG_VALUE;
    }
    return st;
}

ta_status ta_fail_bounds(ta_diag *d, ta_status st, const char *field, int64_t value,
                         unsigned bounds, int64_t lo, int64_t hi) {
    if (d->status == TA_OK) {
        ta_fail(d, st, field, NULL);
        d->value = value;
        d->lo = lo;
        d->hi = hi;
        d->flags = TA_DIAG_VALUE | bounds;
    }
    return st;
}

ta_status ta_fail_pair(ta_diag *d, ta_status st, const char *field, const char *rule,
                       const char *other) {
    if (d->status == TA_OK) {
        ta_fail(d, st, field, rule);
        d->other = other;
    }
    return st;
}

/* ---- A bounded writer: keeps the first cap - 1 characters, always terminated. ---- */
typedef struct ta_writer {
    char *buf;
    size_t cap, len;
} ta_writer;

static void ta_put(ta_writer *w, const char *s) {
    for (; *s; ++s)
        if (w->len + 1 < w->cap) w->buf[w->len++] = *s;
    if (w->cap > 0) w->buf[w->len] = '\0';
}

/* Decimal, or hex with a 0x prefix; INT64_MIN included (magnitude in uint64). */
static void ta_put_int(ta_writer *w, int64_t v, int hex) {
    char digits[24], *s = digits + sizeof digits - 1;
    const unsigned base = hex ? 16u : 10u;
    uint64_t m = v < 0 && !hex ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    *s = '\0';
    do {
        *--s = "0123456789abcdef"[m % base];
        m /= base;
    } while (m != 0);
    if (hex) {
        *--s = 'x';
        *--s = '0';
    } else if (v < 0) {
        *--s = '-';
    }
    ta_put(w, s);
}

/* The status's name: ta_status_string up to its colon. */
static void ta_put_status_name(ta_writer *w, ta_status st) {
    const char *s = ta_status_string(st);
    char name[32];
    size_t n = 0;
    while (s[n] && s[n] != ':' && n + 1 < sizeof name) {
        name[n] = s[n];
        ++n;
    }
    name[n] = '\0';
    ta_put(w, name);
}

static void ta_put_bounds(ta_writer *w, const ta_diag *d) {
    const unsigned lohi = d->flags & (TA_DIAG_LO | TA_DIAG_HI);
    if (!(d->flags & (TA_DIAG_LO | TA_DIAG_HI | TA_DIAG_MULTIPLE))) return;
    ta_put(w, d->rule || d->other ? "; allowed " : "allowed ");
    if (d->flags & TA_DIAG_MULTIPLE) {
        ta_put(w, "a multiple of ");
        ta_put_int(w, d->lo, 0);
    } else if (lohi == (TA_DIAG_LO | TA_DIAG_HI)) {
        ta_put(w, "[");
        ta_put_int(w, d->lo, 0);
        ta_put(w, ", ");
        ta_put_int(w, d->hi, 0);
        ta_put(w, "]");
    } else {
        ta_put(w, lohi == TA_DIAG_LO ? ">= " : "<= ");
        ta_put_int(w, lohi == TA_DIAG_LO ? d->lo : d->hi, 0);
    }
}

void ta_diag_format(const ta_diag *d, ta_status st, char *buf, size_t buf_len) {
    ta_writer w;
    w.buf = buf;
    w.cap = buf ? buf_len : 0;
    w.len = 0;
    if (st == TA_OK) {
        ta_put(&w, "ok: every check passed");
        return;
    }
    if (d->status != st || !d->field) { /* a check returned without recording itself */
        ta_put(&w, "no explanation recorded (");
    } else {
        ta_put(&w, d->field);
        if (d->member) {
            ta_put(&w, ".");
            ta_put(&w, d->member);
        }
        if (d->flags & TA_DIAG_INDEX) {
            ta_put(&w, "[");
            ta_put_int(&w, d->index, 0);
            ta_put(&w, "]");
        }
        if (d->flags & (TA_DIAG_VALUE | TA_DIAG_VALUE_ADDR)) {
            ta_put(&w, " = ");
            ta_put_int(&w, d->value, (d->flags & TA_DIAG_VALUE_ADDR) != 0);
        }
        ta_put(&w, ": ");
        if (d->rule) ta_put(&w, d->rule);
        if (d->other) {
            ta_put(&w, " ");
            ta_put(&w, d->other);
            if (d->flags & TA_DIAG_OTHER_VALUE) {
                ta_put(&w, " = ");
                ta_put_int(&w, d->other_value, 0);
            }
        }
        ta_put_bounds(&w, d);
        ta_put(&w, " (");
    }
    ta_put_status_name(&w, st);
    ta_put(&w, ")");
}
