/*
 * crc32c.c - CRC-32C (reflected polynomial 0x82f63b78).  The table path
 * processes a byte at a time; the SSE4.2 path eight bytes per crc32
 * instruction.  Which one runs is decided once, from cpuid.
 */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82f63b78u

static uint32_t crc32c_table[256];

static void crc32c_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[i] = c;
    }
}

static uint32_t crc32c_soft(uint32_t crc, const unsigned char *p, size_t n)
{
    while (n--)
        crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p,
                                                            size_t n)
{
    uint64_t c = crc;

    for (; n > 0 && ((uintptr_t)p & 7) != 0; n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    for (; n > 0; n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

/* 1 = table, 2 = SSE4.2; set once (the I/O threads call this at once). */
static int crc32c_impl;
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static void crc32c_pick(void)
{
    crc32c_init_table();
    crc32c_impl = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_impl = 2;
#endif
}

uint32_t hy_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc32c_once, crc32c_pick);
    crc = ~crc;
#if defined(__x86_64__)
    if (crc32c_impl == 2)
        return ~crc32c_hw(crc, data, n);
#endif
    return ~crc32c_soft(crc, data, n);
}
