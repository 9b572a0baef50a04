/*
 * stop.h - incremental stop-string matching for streamed generation.  The
 * worker feeds each piece of detokenized text in; the matcher says which
 * bytes are safe to send now, holding back (a) any tail that could still
 * become the start of a stop string and (b) an unfinished UTF-8 character,
 * so a client never sees half a stop string or half a character.  When a
 * stop string appears (possibly across many pieces) it reports the text
 * before it (plus the stop string itself if asked) and stops.
 */
#ifndef HY_SERVER_STOP_H
#define HY_SERVER_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/hy.h"

#define HY_STOP_MAX 4

typedef struct {
    char *stop[HY_STOP_MAX];  /* copies */
    size_t stop_len[HY_STOP_MAX];
    size_t n_stop;
    bool include_stop;        /* emit the matched stop string too (vLLM option) */
    bool matched;             /* a stop string was found: feed no more */
    int matched_index;        /* which one, -1 none */
    char *pend;               /* held-back bytes */
    size_t pend_len, pend_cap;
    char *out;                /* what the last call said to emit */
    size_t out_cap;
} hy_stop_t;

typedef struct {
    const char *emit;  /* bytes safe to send now; valid until the next call */
    size_t emit_len;
    bool stopped;      /* a stop string matched: emit is the last text */
} hy_stop_out_t;

/* Copies the n stop strings (none may be empty; n <= HY_STOP_MAX). */
int hy_stop_init(hy_stop_t *s, const char *const *stops, const size_t *lens, size_t n,
                 bool include_stop, char *err);
void hy_stop_free(hy_stop_t *s);

/* Appends len bytes of generated text.  After stopped, further calls emit
 * nothing.  HY_ENOMEM on allocation failure. */
int hy_stop_feed(hy_stop_t *s, const char *text, size_t len, hy_stop_out_t *out);

/* End of generation (EOS or length): releases everything still held back,
 * including an unfinished UTF-8 tail (the JSON writer turns it into U+FFFD). */
int hy_stop_flush(hy_stop_t *s, hy_stop_out_t *out);

#endif
