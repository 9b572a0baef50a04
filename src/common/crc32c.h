/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of the disk tier's files
 * (ipc/tier_file.h): the SSE4.2 instruction where the CPU has it (several
 * GB/s, so checking a page read back from disk costs little next to the
 * read), a table otherwise; both give the same value.
 */
#ifndef HY_COMMON_CRC32C_H
#define HY_COMMON_CRC32C_H

#include "common/hy.h"

/* Continues crc over n bytes; start with 0.  hy_crc32c(0, "123456789", 9)
 * is 0xe3069283. */
uint32_t hy_crc32c(uint32_t crc, const void *data, size_t n);

#endif
