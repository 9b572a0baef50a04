/*
 * unicode.c - category lookup, UTF-8 decoding/validation and the GPT-2
 * byte<->unicode table used by the tokenizer (see unicode.h).  The
 * category data itself lives in the generated unicode_data.c.
 */
#include "model/unicode.h"

/* ASCII is nearly all of typical prompt text: answer it from a small
 * table built on first use instead of a binary search. */
static uint16_t hy_uni_ascii[128];
static bool hy_uni_ascii_ready;

static unsigned hy_uni_search(uint32_t cp)
{
    size_t lo = 0, hi = hy_uni_n_ranges;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp > hy_uni_ranges[mid].hi)
            lo = mid + 1;
        else if (cp < hy_uni_ranges[mid].lo)
            hi = mid;
        else
            return hy_uni_ranges[mid].flags;
    }
    return HY_UNI_UNDEFINED;
}

unsigned hy_uni_flags(uint32_t cp)
{
    if (cp < 128) {
        /* Benign race: every thread writes the same values. */
        if (!__atomic_load_n(&hy_uni_ascii_ready, __ATOMIC_ACQUIRE)) {
            for (uint32_t c = 0; c < 128; c++)
                hy_uni_ascii[c] = (uint16_t)hy_uni_search(c);
            __atomic_store_n(&hy_uni_ascii_ready, true, __ATOMIC_RELEASE);
        }
        return hy_uni_ascii[cp];
    }
    return hy_uni_search(cp);
}

uint32_t hy_uni_decode_lenient(const char *str, size_t n, size_t *pos)
{
    const unsigned char *s = (const unsigned char *)str + *pos;
    size_t left = n - *pos;
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80) {
        *pos += 1;
        return s[0];
    }
    if ((s[0] & 0x40) == 0)
        goto bad;
    if ((s[0] & 0x20) == 0) {
        len = 2;
        cp = s[0] & 0x1f;
    } else if ((s[0] & 0x10) == 0) {
        len = 3;
        cp = s[0] & 0x0f;
    } else if ((s[0] & 0x08) == 0) {
        len = 4;
        cp = s[0] & 0x07;
    } else {
        goto bad;
    }
    if (left < len)
        goto bad;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            goto bad;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *pos += len;
    return cp;
bad:
    *pos += 1;
    return 0xFFFD;
}

size_t hy_uni_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | ((cp >> 18) & 0x07));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Table 3-7 of the Unicode standard (well-formed UTF-8 byte sequences):
 * the second byte's allowed range depends on the lead byte, which is what
 * excludes overlongs, surrogates and values above U+10FFFF. */
int hy_uni_check_utf8(const unsigned char *s, size_t n)
{
    unsigned char lo = 0x80, hi = 0xbf;
    int len;

    if (n == 0)
        return 0;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        len = 2;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        len = 3;
        if (s[0] == 0xe0)
            lo = 0xa0;
        else if (s[0] == 0xed)
            hi = 0x9f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        if (s[0] == 0xf0)
            lo = 0x90;
        else if (s[0] == 0xf4)
            hi = 0x8f;
    } else {
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return 0;
        if (s[i] < lo || s[i] > hi)
            return -i;
        lo = 0x80;
        hi = 0xbf;
    }
    return len;
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves,
 * the other 68 bytes to U+0100.. in byte order. */
static bool hy_uni_byte_printable(uint8_t b)
{
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

uint32_t hy_uni_byte_to_cp(uint8_t b)
{
    uint32_t k = 0;

    if (hy_uni_byte_printable(b))
        return b;
    for (unsigned c = 0; c < b; c++)
        k += !hy_uni_byte_printable((uint8_t)c);
    return 0x100 + k;
}

int hy_uni_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return hy_uni_byte_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp < 0x100 + 68) {
        uint32_t k = cp - 0x100;
        for (unsigned c = 0; c < 256; c++) {
            if (!hy_uni_byte_printable((uint8_t)c) && k-- == 0)
                return (int)c;
        }
    }
    return -1;
}
