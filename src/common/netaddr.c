/*
 * netaddr.c - [server] listen and [server] allow: parsing (strict: the whole
 * text must be an address, a port 1..65535, a prefix within the family's
 * width; inet_pton, never a resolver, so start-up never waits on DNS and a
 * host name is refused rather than guessed at), the peer test a worker runs
 * on every TCP connection it accepts, and the bound listening socket.
 */
#include "common/netaddr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "why" messages are the reason only; callers prefix the key and value. */
static int net_why(char *why, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int net_why(char *why, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && cap > 0) {
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* One address without port or prefix: IPv4 dotted quad or IPv6. */
static bool net_pton(const char *s, int *family, uint8_t addr[16])
{
    memset(addr, 0, 16);
    if (inet_pton(AF_INET, s, addr) == 1) {
        *family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s, addr) == 1) {
        *family = AF_INET6;
        return true;
    }
    return false;
}

/* Whole-string decimal in lo..hi; no sign, no spaces. */
static bool net_number(const char *s, long lo, long hi, long *out)
{
    char *end;

    if (!isdigit((unsigned char)*s) || strlen(s) > 6)
        return false;
    errno = 0;
    *out = strtol(s, &end, 10);
    return *end == '\0' && errno == 0 && *out >= lo && *out <= hi;
}

int hy_net_parse_listen(const char *s, struct sockaddr_storage *out, socklen_t *len,
                        char *why, size_t why_cap)
{
    char host[INET6_ADDRSTRLEN + 2];
    const char *colon, *h = s;
    size_t hlen;
    uint8_t addr[16];
    int family;
    long port;

    colon = strrchr(s, ':');
    if (colon == NULL)
        return net_why(why, why_cap, HY_EINVAL, "expected ADDRESS:PORT (e.g. 10.0.0.2:9000, "
                                               "[fd00::2]:9000)");
    hlen = (size_t)(colon - s);
    /* IPv6 needs brackets: "::1:9000" could be either address ::1 port 9000
     * or address ::1:9000 with the port missing */
    if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
        h = s + 1;
        hlen -= 2;
    } else if (memchr(s, ':', hlen) != NULL) {
        return net_why(why, why_cap, HY_EINVAL, "an IPv6 address is written in brackets: "
                                               "[ADDRESS]:PORT");
    }
    if (hlen == 0 || hlen >= sizeof host)
        return net_why(why, why_cap, HY_EINVAL, "not an IP address");
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (!net_pton(host, &family, addr) || (h != s && family != AF_INET6))
        return net_why(why, why_cap, HY_EINVAL, "'%s' is not an IP address (names are not "
                                               "resolved)", host);
    if (!net_number(colon + 1, 1, 65535, &port))
        return net_why(why, why_cap, HY_ERANGE, "port '%s' is not 1..65535", colon + 1);
    memset(out, 0, sizeof *out);
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;

        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        memcpy(&in->sin_addr, addr, 4);
        *len = sizeof *in;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;

        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        memcpy(&in6->sin6_addr, addr, 16);
        *len = sizeof *in6;
    }
    return HY_OK;
}

/* One "ADDRESS[/PREFIX]" item, already trimmed. */
static int net_parse_cidr(const char *item, hy_net_cidr_t *c, char *why, size_t why_cap)
{
    char host[INET6_ADDRSTRLEN];
    const char *slash = strchr(item, '/');
    size_t hlen = slash ? (size_t)(slash - item) : strlen(item);
    long prefix, width;

    if (hlen == 0 || hlen >= sizeof host)
        return net_why(why, why_cap, HY_EINVAL, "'%s' is not ADDRESS/PREFIX", item);
    memcpy(host, item, hlen);
    host[hlen] = '\0';
    if (!net_pton(host, &c->family, c->addr))
        return net_why(why, why_cap, HY_EINVAL, "'%s' is not an IP address", host);
    width = c->family == AF_INET ? 32 : 128;
    prefix = width;
    if (slash != NULL && !net_number(slash + 1, 0, width, &prefix))
        return net_why(why, why_cap, HY_ERANGE, "'%s': prefix length must be 0..%ld", item,
                       width);
    c->prefix = (uint32_t)prefix;
    return HY_OK;
}

int hy_net_parse_allow(const char *s, hy_net_allow_t *out, char *why, size_t why_cap)
{
    const char *p = s;
    int rc;

    out->n = 0;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0') {
        /* the default: nginx on this host only */
        (void)net_parse_cidr("127.0.0.0/8", &out->cidr[0], NULL, 0);
        (void)net_parse_cidr("::1/128", &out->cidr[1], NULL, 0);
        out->n = 2;
        return HY_OK;
    }
    for (;;) {
        char item[INET6_ADDRSTRLEN + 8];
        size_t n = strcspn(p, ",");
        size_t b = 0, e = n;

        while (b < e && isspace((unsigned char)p[b]))
            b++;
        while (e > b && isspace((unsigned char)p[e - 1]))
            e--;
        if (e == b)
            return net_why(why, why_cap, HY_EINVAL, "empty item in the list");
        if (e - b >= sizeof item)
            return net_why(why, why_cap, HY_EINVAL, "'%.*s' is not ADDRESS/PREFIX", (int)(e - b),
                           p + b);
        if (out->n == HY_NET_ALLOW_MAX)
            return net_why(why, why_cap, HY_ERANGE, "more than %d blocks", HY_NET_ALLOW_MAX);
        memcpy(item, p + b, e - b);
        item[e - b] = '\0';
        if ((rc = net_parse_cidr(item, &out->cidr[out->n], why, why_cap)) != HY_OK)
            return rc;
        out->n++;
        if (p[n] == '\0')
            return HY_OK;
        p += n + 1;
    }
}

static bool net_match(const hy_net_cidr_t *c, int family, const uint8_t *addr)
{
    uint32_t full = c->prefix / 8, rest = c->prefix % 8;

    if (c->family != family || memcmp(c->addr, addr, full) != 0)
        return false;
    return rest == 0 || ((c->addr[full] ^ addr[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool hy_net_allowed(const hy_net_allow_t *allow, const struct sockaddr *peer)
{
    static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    const uint8_t *addr;
    int family = peer->sa_family;

    if (family == AF_INET) {
        addr = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
    } else if (family == AF_INET6) {
        addr = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
        /* a socket bound to [::] sees IPv4 peers as ::ffff:a.b.c.d: an
         * allow-list written in IPv4 must still apply to them */
        if (memcmp(addr, v4mapped, sizeof v4mapped) == 0) {
            addr += 12;
            family = AF_INET;
        }
    } else {
        return false;
    }
    for (size_t i = 0; i < allow->n; i++)
        if (net_match(&allow->cidr[i], family, addr))
            return true;
    return false;
}

void hy_net_format(const struct sockaddr *sa, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN];

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        snprintf(buf, cap, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        snprintf(buf, cap, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, cap, "?");
    }
}

int hy_net_listen(const struct sockaddr_storage *ss, socklen_t len, const char *spec,
                  int backlog, int *out, char *err)
{
    int fd, one = 1;

    fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return hy_err(err, HY_EIO, "[server] listen = %s: socket: %s", spec, strerror(errno));
    /* a restarted master rebinds at once despite the old TIME_WAITs */
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, backlog) != 0) {
        int e = errno;

        close(fd);
        return hy_err(err, HY_EIO, "[server] listen = %s: cannot listen: %s", spec, strerror(e));
    }
    *out = fd;
    return HY_OK;
}
