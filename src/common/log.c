/*
 * log.c - key=value event lines to syslog and optionally stderr.  The
 * format string is printf's, but it is walked piece by piece: every
 * space-separated "key=value" piece has its value formatted alone and then
 * quoted if it needs to be, which a single vsnprintf over the whole line
 * could not do.  Lines are built in a stack buffer: logging never allocates.
 */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static struct {
    bool opened;
    bool to_stderr;
    int level;
    int facility;
    char ident[64]; /* openlog keeps the pointer, so it must outlive the call */
    /* log.socket: our own datagram client instead of syslog() */
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int sock_fd;
} log_state = { false, true, LOG_INFO, LOG_DAEMON, "hyserve", "", -1 };

/* Worker threads log concurrently; the socket is (re)connected lazily. */
static pthread_mutex_t log_sock_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_atfork_once = PTHREAD_ONCE_INIT;

/* The master forks workers and engines while another of its threads (the
 * model hash) may be logging: a child must not inherit a lock held by a
 * thread that does not exist in it, so fork takes this one and both sides
 * release it.  It also covers syslog() and the stderr copy, because glibc
 * does not reset syslog()'s own lock in a child: a fork in the middle of
 * another thread's syslog() left the new worker hung in openlog(). */
static void log_fork_prepare(void) { pthread_mutex_lock(&log_sock_lock); }
static void log_fork_release(void) { pthread_mutex_unlock(&log_sock_lock); }
static void log_atfork_register(void)
{
    pthread_atfork(log_fork_prepare, log_fork_release, log_fork_release);
}

void hy_log_open(const char *ident, int facility, int level, bool to_stderr)
{
    snprintf(log_state.ident, sizeof log_state.ident, "%s", ident ? ident : "hyserve");
    log_state.level = level;
    log_state.to_stderr = to_stderr;
    log_state.facility = facility;
    pthread_once(&log_atfork_once, log_atfork_register);
    pthread_mutex_lock(&log_sock_lock);
    openlog(log_state.ident, LOG_PID | LOG_NDELAY, facility);
    pthread_mutex_unlock(&log_sock_lock);
    log_state.opened = true;
}

void hy_log_close(void)
{
    pthread_mutex_lock(&log_sock_lock);
    if (log_state.opened)
        closelog();
    log_state.opened = false;
    log_state.to_stderr = true;
    if (log_state.sock_fd >= 0)
        close(log_state.sock_fd);
    log_state.sock_fd = -1;
    log_state.sock_path[0] = '\0';
    pthread_mutex_unlock(&log_sock_lock);
}

int hy_log_set_socket(const char *path, char *err)
{
    size_t n = path ? strlen(path) : 0;

    if (n >= sizeof log_state.sock_path)
        return hy_err(err, HY_EINVAL, "log socket path is %zu bytes; at most %zu fit",
                      n, sizeof log_state.sock_path - 1);
    pthread_once(&log_atfork_once, log_atfork_register);
    pthread_mutex_lock(&log_sock_lock);
    if (log_state.sock_fd >= 0)
        close(log_state.sock_fd);
    log_state.sock_fd = -1;
    memcpy(log_state.sock_path, path ? path : "", n + 1);
    pthread_mutex_unlock(&log_sock_lock);
    return HY_OK;
}

/* One RFC 3164 datagram: "<PRI>Mmm dd hh:mm:ss ident[pid]: line", what
 * glibc's syslog() sends to /dev/log, so the daemon parses program and pid
 * the same way.  Returns false when the line could not be delivered. */
static bool log_sock_send(int level, const char *line)
{
    static const char *const mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    char msg[HY_LOG_LINE_LEN + 160];
    struct tm tm;
    time_t now = time(NULL);
    int len;
    bool sent = false;

    /* localtime_r too: glibc's time-zone lock is not reset in a child either */
    pthread_mutex_lock(&log_sock_lock);
    localtime_r(&now, &tm);
    len = snprintf(msg, sizeof msg, "<%d>%s %2d %02d:%02d:%02d %s[%ld]: %s",
                   log_state.facility | level, mon[tm.tm_mon % 12], tm.tm_mday, tm.tm_hour,
                   tm.tm_min, tm.tm_sec, log_state.ident, (long)getpid(), line);
    if ((size_t)len >= sizeof msg)
        len = (int)sizeof msg - 1;
    for (int attempt = 0; len >= 0 && attempt < 2 && !sent; attempt++) {
        if (log_state.sock_fd < 0) {
            struct sockaddr_un sa;
            int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

            if (fd < 0)
                break;
            memset(&sa, 0, sizeof sa);
            sa.sun_family = AF_UNIX;
            memcpy(sa.sun_path, log_state.sock_path, strlen(log_state.sock_path) + 1);
            if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
                close(fd);
                break;
            }
            log_state.sock_fd = fd;
        }
        if (send(log_state.sock_fd, msg, (size_t)len, MSG_NOSIGNAL) == len) {
            sent = true;
        } else {
            /* the daemon restarted (ECONNREFUSED / ENOTCONN): reconnect once */
            close(log_state.sock_fd);
            log_state.sock_fd = -1;
        }
    }
    pthread_mutex_unlock(&log_sock_lock);
    return sent;
}

bool hy_log_enabled(int level)
{
    return level <= log_state.level; /* syslog: lower number = more severe */
}

/* ---- line building ---- */

typedef struct {
    char *buf;
    size_t cap, len;
    bool cut;
} hy_log_line_t;

static void put(hy_log_line_t *l, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (l->len + 1 < l->cap)
            l->buf[l->len++] = s[i];
        else
            l->cut = true;
    }
}

static bool needs_quotes(const char *v, size_t n)
{
    if (n == 0)
        return true; /* key="" reads better than a dangling key= */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];

        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return true;
    }
    return false;
}

static void put_value(hy_log_line_t *l, const char *v, size_t n)
{
    if (!needs_quotes(v, n)) {
        put(l, v, n);
        return;
    }
    put(l, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        char esc[8];

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c == '\n') {
            put(l, "\\n", 2);
        } else if (c == '\t') {
            put(l, "\\t", 2);
        } else if (c == '\r') {
            put(l, "\\r", 2);
        } else if (c < ' ' || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            put(l, esc, 4);
        } else {
            put(l, (const char *)&c, 1);
        }
    }
    put(l, "\"", 1);
}

/* Formats the one conversion at *pp (just past '%') into out, consuming
 * its arguments from ap; returns the length written (capped to cap - 1).
 * The spec handed to snprintf is not a literal: it is one conversion of a
 * format the caller's printf attribute has already checked, and the va_arg
 * type is picked from its own conversion and length modifier. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static size_t convert(const char **pp, va_list *ap, char *out, size_t cap)
{
    const char *p = *pp;
    char spec[48] = "%";
    size_t sl = 1;
    char len[3] = "";
    int n = 0;

#define SPEC_PUT(c) do { if (sl + 1 < sizeof spec) spec[sl++] = (c); spec[sl] = '\0'; } while (0)
    while (*p && strchr("-+ #0", *p))
        SPEC_PUT(*p++);
    for (int part = 0; part < 2; part++) { /* width, then precision */
        if (part == 1) {
            if (*p != '.')
                break;
            SPEC_PUT(*p++);
        }
        if (*p == '*') {
            sl += (size_t)snprintf(spec + sl, sizeof spec - sl, "%d", va_arg(*ap, int));
            sl = HY_MIN(sl, sizeof spec - 1);
            p++;
        } else {
            while (*p >= '0' && *p <= '9')
                SPEC_PUT(*p++);
        }
    }
    while (*p && strchr("hlzjtL", *p) && strlen(len) < 2) {
        len[strlen(len)] = *p;
        SPEC_PUT(*p++);
    }
    if (*p == '\0') {
        *pp = p;
        return (size_t)snprintf(out, cap, "%s", spec);
    }
    SPEC_PUT(*p);
    switch (*p) {
    case 'd': case 'i':
        if (strcmp(len, "ll") == 0) n = snprintf(out, cap, spec, va_arg(*ap, long long));
        else if (strcmp(len, "l") == 0) n = snprintf(out, cap, spec, va_arg(*ap, long));
        else if (strcmp(len, "z") == 0 || strcmp(len, "t") == 0)
            n = snprintf(out, cap, spec, va_arg(*ap, ptrdiff_t));
        else if (strcmp(len, "j") == 0) n = snprintf(out, cap, spec, va_arg(*ap, intmax_t));
        else n = snprintf(out, cap, spec, va_arg(*ap, int));
        break;
    case 'u': case 'x': case 'X': case 'o':
        if (strcmp(len, "ll") == 0) n = snprintf(out, cap, spec, va_arg(*ap, unsigned long long));
        else if (strcmp(len, "l") == 0) n = snprintf(out, cap, spec, va_arg(*ap, unsigned long));
        else if (strcmp(len, "z") == 0 || strcmp(len, "t") == 0)
            n = snprintf(out, cap, spec, va_arg(*ap, size_t));
        else if (strcmp(len, "j") == 0) n = snprintf(out, cap, spec, va_arg(*ap, uintmax_t));
        else n = snprintf(out, cap, spec, va_arg(*ap, unsigned));
        break;
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
        if (strcmp(len, "L") == 0) n = snprintf(out, cap, spec, va_arg(*ap, long double));
        else n = snprintf(out, cap, spec, va_arg(*ap, double));
        break;
    case 'c':
        n = snprintf(out, cap, spec, va_arg(*ap, int));
        break;
    case 's': {
        const char *s = va_arg(*ap, const char *);

        n = snprintf(out, cap, spec, s ? s : "(null)");
        break;
    }
    case 'p':
        n = snprintf(out, cap, spec, va_arg(*ap, void *));
        break;
    default: /* %n and unknown conversions: printed, never executed */
        n = snprintf(out, cap, "%s", spec);
        break;
    }
#undef SPEC_PUT
    *pp = p + 1;
    return n < 0 ? 0 : HY_MIN((size_t)n, cap - 1);
}
#pragma GCC diagnostic pop

size_t hy_log_format_v(char *buf, size_t cap, const char *event, const char *fmt, va_list ap0)
{
    hy_log_line_t l = { buf, cap, 0, false };
    char value[HY_LOG_LINE_LEN];
    const char *p = fmt ? fmt : "";
    va_list ap;

    if (cap == 0)
        return 0;
    va_copy(ap, ap0);
    put(&l, "event=", 6);
    put_value(&l, event ? event : "", event ? strlen(event) : 0);
    while (*p) {
        const char *q = p;
        size_t vlen = 0;

        if (*p == ' ') {
            p++;
            continue;
        }
        put(&l, " ", 1);
        while (*q && *q != ' ' && *q != '=' && *q != '%')
            q++;
        if (*q == '=') { /* a literal key */
            put(&l, p, (size_t)(q - p) + 1);
            p = q + 1;
        }
        while (*p && *p != ' ') {
            if (*p == '%' && p[1] == '%') {
                if (vlen + 1 < sizeof value)
                    value[vlen++] = '%';
                p += 2;
            } else if (*p == '%') {
                p++;
                vlen += convert(&p, &ap, value + vlen, sizeof value - vlen);
            } else {
                if (vlen + 1 < sizeof value)
                    value[vlen++] = *p;
                p++;
            }
        }
        put_value(&l, value, vlen);
    }
    va_end(ap);
    if (l.cut && cap >= 4)
        memcpy(buf + cap - 4, "...", 3), l.len = cap - 1;
    buf[l.len] = '\0';
    return l.len;
}

size_t hy_log_format(char *buf, size_t cap, const char *event, const char *fmt, ...)
{
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    n = hy_log_format_v(buf, cap, event, fmt, ap);
    va_end(ap);
    return n;
}

static const char *level_name(int level)
{
    static const char *const names[] = { "emerg", "alert", "crit", "err",
                                         "warning", "notice", "info", "debug" };

    return level >= 0 && level < 8 ? names[level] : "?";
}

void hy_log_v(int level, const char *event, const char *fmt, va_list ap)
{
    char line[HY_LOG_LINE_LEN];

    if (!hy_log_enabled(level))
        return;
    hy_log_format_v(line, sizeof line, event, fmt, ap);
    if (log_state.opened && log_state.sock_path[0]) {
        log_sock_send(level, line);
    } else if (log_state.opened) {
        pthread_mutex_lock(&log_sock_lock);
        syslog(level, "%s", line);
        pthread_mutex_unlock(&log_sock_lock);
    }
    if (log_state.to_stderr) {
        pthread_mutex_lock(&log_sock_lock);
        fprintf(stderr, "%s[%ld] %s: %s\n", log_state.ident, (long)getpid(),
                level_name(level), line);
        pthread_mutex_unlock(&log_sock_lock);
    }
}

void hy_log(int level, const char *event, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    hy_log_v(level, event, fmt, ap);
    va_end(ap);
}
