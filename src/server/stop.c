/*
 * stop.c - the incremental stop-string matcher declared in stop.h.  The
 * held-back buffer only ever holds the longest stop-string prefix that ends
 * it plus at most 3 bytes of an unfinished character, so each feed scans a
 * few bytes beyond the new text: linear in the generated text overall.
 */
#include "server/stop.h"

#include <stdlib.h>
#include <string.h>

#include "server/json_out.h"

int hy_stop_init(hy_stop_t *s, const char *const *stops, const size_t *lens, size_t n,
                 bool include_stop, char *err)
{
    size_t i;

    memset(s, 0, sizeof *s);
    s->matched_index = -1;
    s->include_stop = include_stop;
    if (n > HY_STOP_MAX)
        return hy_err(err, HY_ERANGE, "stop: %zu sequences: at most %d", n, HY_STOP_MAX);
    for (i = 0; i < n; i++) {
        if (lens[i] == 0)
            return hy_err(err, HY_EINVAL, "stop[%zu]: must not be empty", i);
        s->stop[i] = malloc(lens[i]);
        if (s->stop[i] == NULL) {
            hy_stop_free(s);
            return hy_err(err, HY_ENOMEM, "stop: out of memory");
        }
        memcpy(s->stop[i], stops[i], lens[i]);
        s->stop_len[i] = lens[i];
        s->n_stop = i + 1;
    }
    return HY_OK;
}

void hy_stop_free(hy_stop_t *s)
{
    size_t i;

    for (i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->pend);
    free(s->out);
    memset(s, 0, sizeof *s);
    s->matched_index = -1;
}

static int grow(char **p, size_t *cap, size_t need)
{
    size_t c = *cap ? *cap : 64;
    char *q;

    if (need <= *cap)
        return HY_OK;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return HY_ENOMEM;
        c *= 2;
    }
    q = realloc(*p, c);
    if (q == NULL)
        return HY_ENOMEM;
    *p = q;
    *cap = c;
    return HY_OK;
}

/* Moves the first n pending bytes to the out buffer. */
static int emit_prefix(hy_stop_t *s, size_t n, size_t drop, hy_stop_out_t *out)
{
    if (grow(&s->out, &s->out_cap, n + 1) != HY_OK)
        return HY_ENOMEM;
    if (n > 0)
        memcpy(s->out, s->pend, n);
    s->out[n] = '\0';
    out->emit = s->out;
    out->emit_len = n;
    n += drop;
    if (s->pend_len > n)
        memmove(s->pend, s->pend + n, s->pend_len - n);
    s->pend_len -= n;
    return HY_OK;
}

/* Start of the earliest occurrence of any stop string in h[0..n), or n. */
static size_t find_first(const hy_stop_t *s, const char *h, size_t n, int *which)
{
    size_t best = n, i, k;

    *which = -1;
    for (k = 0; k < s->n_stop; k++) {
        size_t l = s->stop_len[k];

        for (i = 0; i + l <= n && i < best; i++)
            if (h[i] == s->stop[k][0] && memcmp(h + i, s->stop[k], l) == 0) {
                best = i;
                *which = (int)k;
                break;
            }
    }
    return best;
}

/* Length of the longest suffix of h[0..n) that is a proper prefix of a stop string. */
static size_t partial_tail(const hy_stop_t *s, const char *h, size_t n)
{
    size_t best = 0, k, l;

    for (k = 0; k < s->n_stop; k++) {
        for (l = HY_MIN(s->stop_len[k] - 1, n); l > best; l--)
            if (memcmp(h + n - l, s->stop[k], l) == 0) {
                best = l;
                break;
            }
    }
    return best;
}

int hy_stop_feed(hy_stop_t *s, const char *text, size_t len, hy_stop_out_t *out)
{
    size_t at, safe;
    int which;

    out->emit = "";
    out->emit_len = 0;
    out->stopped = s->matched;
    if (s->matched)
        return HY_OK;
    if (len > SIZE_MAX - s->pend_len - 1 ||
        grow(&s->pend, &s->pend_cap, s->pend_len + len + 1) != HY_OK)
        return HY_ENOMEM;
    if (len > 0)
        memcpy(s->pend + s->pend_len, text, len);
    s->pend_len += len;

    at = find_first(s, s->pend, s->pend_len, &which);
    if (which >= 0) {
        size_t l = s->stop_len[which];

        s->matched = true;
        s->matched_index = which;
        out->stopped = true;
        return emit_prefix(s, s->include_stop ? at + l : at, s->include_stop ? 0 : l, out);
    }
    safe = s->pend_len - partial_tail(s, s->pend, s->pend_len);
    safe = hy_utf8_complete_prefix(s->pend, safe);
    return emit_prefix(s, safe, 0, out);
}

int hy_stop_flush(hy_stop_t *s, hy_stop_out_t *out)
{
    out->emit = "";
    out->emit_len = 0;
    out->stopped = s->matched;
    if (s->matched)
        return HY_OK;
    return emit_prefix(s, s->pend_len, 0, out);
}
