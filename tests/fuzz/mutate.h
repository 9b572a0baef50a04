/*
 * mutate.h - what the standalone fuzz replays (fuzz_api.c, fuzz_gguf.c
 * built with -DHY_FUZZ_STANDALONE) share: a fixed xorshift stream, so that a
 * run replays exactly, and the byte edits both formats use.  Each edit
 * works on buf[0..n) with room for cap bytes and returns the new length.
 * Static functions: include once per program.
 */
#ifndef HY_FUZZ_MUTATE_H
#define HY_FUZZ_MUTATE_H

#include <stdint.h>
#include <string.h>

#include "common/hy.h"

static uint64_t hy_fz_state = 0x9E3779B97F4A7C15ULL;

static uint64_t hy_fz_rnd(void)
{
    hy_fz_state ^= hy_fz_state << 13;
    hy_fz_state ^= hy_fz_state >> 7;
    hy_fz_state ^= hy_fz_state << 17;
    return hy_fz_state;
}

/* One bit of one byte. */
static size_t hy_fz_flip(uint8_t *buf, size_t n)
{
    if (n)
        buf[hy_fz_rnd() % n] ^= (uint8_t)(1u << (hy_fz_rnd() % 8));
    return n;
}

/* 1..max bytes removed somewhere. */
static size_t hy_fz_delete(uint8_t *buf, size_t n, size_t max)
{
    size_t pos, len;

    if (n == 0)
        return n;
    pos = (size_t)(hy_fz_rnd() % n);
    len = 1 + (size_t)(hy_fz_rnd() % max); /* not inside HY_MIN: it evaluates twice */
    len = HY_MIN(len, n - pos);
    memmove(buf + pos, buf + pos + len, n - pos - len);
    return n - len;
}

/* A slice of 1..max bytes copied to another place: repeats keys, nesting,
 * length fields. */
static size_t hy_fz_dup_slice(uint8_t *buf, size_t n, size_t cap, size_t max)
{
    size_t pos, from, len;

    if (n == 0)
        return n;
    pos = (size_t)(hy_fz_rnd() % n);
    from = (size_t)(hy_fz_rnd() % n);
    len = 1 + (size_t)(hy_fz_rnd() % max);
    len = HY_MIN(HY_MIN(len, n - from), cap - n);
    memmove(buf + pos + len, buf + pos, n - pos);
    memmove(buf + pos, buf + (from >= pos ? from + len : from), len);
    return n + len;
}

#endif
