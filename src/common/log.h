/*
 * log.h - one line per event, as key=value pairs, to syslog (and stderr
 * for CLI tools and tests):
 *   hy_log(LOG_INFO, "model_loaded", "path=%s ms=%d", path, ms);
 *   -> event=model_loaded path=/x.gguf ms=123
 * Each space-separated "key=value" piece of the format is formatted on its
 * own, so a value that expands to spaces, quotes or '=' is quoted as a
 * whole ("a b" -> "\"a b\"") and lines stay machine-parsable.
 * Levels are syslog's (LOG_ERR .. LOG_DEBUG).
 */
#ifndef HY_COMMON_LOG_H
#define HY_COMMON_LOG_H

#include "common/hy.h"

#include <stdarg.h>
#include <syslog.h>

#define HY_LOG_LINE_LEN 2048 /* longer lines are cut, ending in "..." */

/* Opens syslog with ident, facility (LOG_DAEMON, LOG_LOCAL0, ...) and
 * LOG_PID; drops events less severe than level; copies lines to stderr when
 * to_stderr.  Before the first call hy_log writes to stderr only, at
 * LOG_INFO, so nothing from startup is lost. */
void hy_log_open(const char *ident, int facility, int level, bool to_stderr);
void hy_log_close(void);

/* Sends syslog lines to the AF_UNIX datagram socket at path (RFC 3164
 * framing, as glibc's syslog() writes to /dev/log) instead of /dev/log;
 * NULL or "" returns to /dev/log.  The socket is reconnected on the next
 * line after a failed send, so a restarted syslog daemon is picked up.
 * Fails (message in err) when path is too long for sun_path; an absent
 * socket is not an error (lines go to stderr until it appears, if
 * to_stderr). Kept across hy_log_open (forked workers re-open with their
 * own ident and keep the socket). */
int hy_log_set_socket(const char *path, char *err);

/* Whether an event at level would be written (skip costly arguments). */
bool hy_log_enabled(int level);

void hy_log(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hy_log_v(int level, const char *event, const char *fmt, va_list ap);

/* The formatting alone: writes "event=EVENT k=v ..." into buf (always
 * NUL-terminated, cut with "..." when it does not fit) and returns its
 * length.  Supported conversions: %s %c %d %i %u %x %X %o %f %e %g %p %%
 * with flags, width, precision ('*' too) and the hh h l ll z j t lengths. */
size_t hy_log_format(char *buf, size_t cap, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
size_t hy_log_format_v(char *buf, size_t cap, const char *event, const char *fmt,
                       va_list ap);

#endif
