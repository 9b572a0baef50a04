/*
 * netaddr.h - the TCP side of the FastCGI socket: [server] listen
 * (ADDRESS:PORT, "[v6]:port" for IPv6) and [server] allow (a list of CIDR
 * blocks, IPv4 and IPv6).  The same parsers check the values when the
 * configuration is read (config.c: a bad value is refused at start, naming
 * the key) and build what the workers test each accepted peer against, so
 * what was accepted at start is exactly what is enforced.
 */
#ifndef HY_COMMON_NETADDR_H
#define HY_COMMON_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/hy.h"

#define HY_NET_ALLOW_MAX 64  /* CIDR blocks in one [server] allow */
#define HY_NET_ADDR_STR 64   /* "[ffff:...:ffff]:65535" and a NUL fit */

typedef struct {
    int family;        /* AF_INET or AF_INET6 */
    uint8_t addr[16];  /* network order; IPv4 uses the first 4 bytes */
    uint32_t prefix;   /* 0..32 or 0..128 */
} hy_net_cidr_t;

typedef struct {
    hy_net_cidr_t cidr[HY_NET_ALLOW_MAX];
    size_t n;
} hy_net_allow_t;

/* "10.0.0.1:9000", "[::1]:9000", "0.0.0.0:9000": the address to bind.  why
 * gets a reason without the key (the caller names it). */
int hy_net_parse_listen(const char *s, struct sockaddr_storage *out, socklen_t *len,
                        char *why, size_t why_cap);

/* "10.0.0.0/8, ::1/128, 192.168.1.7" (a bare address is /32 or /128);
 * "" gives the loopback blocks 127.0.0.0/8 and ::1/128. */
int hy_net_parse_allow(const char *s, hy_net_allow_t *out, char *why, size_t why_cap);

/* Whether a peer (AF_INET or AF_INET6; an IPv4-mapped IPv6 peer counts as
 * its IPv4 address) lies in one of the blocks.  Other families: false. */
bool hy_net_allowed(const hy_net_allow_t *allow, const struct sockaddr *peer);

/* "10.0.0.1:41234" or "[::1]:41234"; "?" when unknown. */
void hy_net_format(const struct sockaddr *sa, char *buf, size_t cap);

/* A listening TCP socket bound to the parsed address (SO_REUSEADDR, close
 * on exec); errors name spec (the configured text). */
int hy_net_listen(const struct sockaddr_storage *ss, socklen_t len, const char *spec,
                  int backlog, int *out, char *err);

#endif
