/*
 * hy.c - the error-buffer helper and status names declared in hy.h, and
 * the host's memory as /proc/meminfo reports it.
 */
#include "hy.h"

#include <stdarg.h>
#include <stdio.h>

int hy_err(char *err, int code, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL) {
        va_start(ap, fmt);
        vsnprintf(err, HY_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *hy_strerror(int code)
{
    switch (code) {
    case HY_OK: return "ok";
    case HY_EINVAL: return "invalid argument";
    case HY_ENOMEM: return "out of memory";
    case HY_EIO: return "i/o error";
    case HY_EFORMAT: return "malformed input";
    case HY_EUNSUPPORTED: return "unsupported";
    case HY_ENOENT: return "not found";
    case HY_ERANGE: return "out of range";
    case HY_EFULL: return "full";
    case HY_EUNAVAILABLE: return "unavailable";
    default: return "unknown error";
    }
}

void hy_host_memory(uint64_t *total, uint64_t *avail)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;

    *total = *avail = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = (uint64_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = (uint64_t)kb * 1024;
    }
    fclose(f);
}
