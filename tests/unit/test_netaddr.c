/*
 * test_netaddr.c - [server] allow as the workers apply it to each TCP peer:
 * CIDR edges in IPv4 and IPv6, odd prefixes, the loopback default, an
 * IPv4-mapped IPv6 peer judged by its IPv4 address, a listen address
 * parsed into the sockaddr that gets bound, and a bound socket whose port
 * is taken reported with the key.  (Refused values and their messages are
 * in test_config, through the configuration's own path.)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "common/netaddr.h"
#include "test.h"

static struct sockaddr_storage peer(const char *addr)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof ss);
    if (strchr(addr, ':') != NULL) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, addr, &in6->sin6_addr);
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;

        in->sin_family = AF_INET;
        inet_pton(AF_INET, addr, &in->sin_addr);
    }
    return ss;
}

static bool allowed(const hy_net_allow_t *a, const char *addr)
{
    struct sockaddr_storage ss = peer(addr);

    return hy_net_allowed(a, (struct sockaddr *)&ss);
}

static void test_allow(void)
{
    hy_net_allow_t a;
    char why[200] = "";
    struct sockaddr_un_like {
        sa_family_t family;
    } un = { AF_UNIX };

    HY_T_OK(hy_net_parse_allow("", &a, why, sizeof why) == HY_OK && a.n == 2 &&
                allowed(&a, "127.0.0.1") && allowed(&a, "127.255.0.9") && allowed(&a, "::1") &&
                !allowed(&a, "10.0.0.1") && !allowed(&a, "::2") &&
                !hy_net_allowed(&a, (struct sockaddr *)&un),
            "empty: loopback only, IPv4 and IPv6; other families never");
    HY_T_OK(hy_net_parse_allow("10.200.0.0/22, fd00:1::/33,192.168.1.7", &a, why, sizeof why) ==
                    HY_OK &&
                a.n == 3 && allowed(&a, "10.200.3.255") && !allowed(&a, "10.200.4.0") &&
                allowed(&a, "10.200.0.0") && !allowed(&a, "10.201.0.1") &&
                allowed(&a, "fd00:1:7fff::1") && !allowed(&a, "fd00:1:8000::1") &&
                allowed(&a, "192.168.1.7") && !allowed(&a, "192.168.1.8") &&
                !allowed(&a, "127.0.0.1"),
            "a /22, a /33 and a bare address: both edges of each (%s)", why);
    HY_T_OK(allowed(&a, "::ffff:10.200.1.2") && !allowed(&a, "::ffff:10.201.1.2") &&
                !allowed(&a, "::10.200.1.2"),
            "an IPv4-mapped IPv6 peer is judged by its IPv4 address");
    HY_T_OK(hy_net_parse_allow("0.0.0.0/0", &a, why, sizeof why) == HY_OK &&
                allowed(&a, "8.8.8.8") && !allowed(&a, "2001:db8::1"),
            "0.0.0.0/0 is every IPv4 peer and no IPv6 one");
}

static void test_listen(void)
{
    struct sockaddr_storage ss, got;
    socklen_t len, glen = sizeof got;
    char why[200] = "", err[HY_ERR_LEN] = "", text[HY_NET_ADDR_STR];
    int fd = -1, fd2 = -1, rc;

    HY_T_OK(hy_net_parse_listen("[::1]:9000", &ss, &len, why, sizeof why) == HY_OK &&
                ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6) &&
                ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) == 9000,
            "[::1]:9000 is IPv6 port 9000 (%s)", why);
    hy_net_format((struct sockaddr *)&ss, text, sizeof text);
    HY_T_OK(strcmp(text, "[::1]:9000") == 0, "formatted back as [::1]:9000 (%s)", text);
    /* port 1 is rarely free to bind; bind 127.0.0.1 on an ephemeral port
     * by hand: find one, then ask for it by number */
    rc = hy_net_parse_listen("127.0.0.1:1", &ss, &len, why, sizeof why);
    ((struct sockaddr_in *)&ss)->sin_port = 0;
    rc = rc == HY_OK ? hy_net_listen(&ss, len, "127.0.0.1:0", 8, &fd, err) : rc;
    HY_T_OK(rc == HY_OK && getsockname(fd, (struct sockaddr *)&got, &glen) == 0,
            "a listening socket on 127.0.0.1 (%s)", err);
    if (rc == HY_OK) {
        char spec[64];

        hy_net_format((struct sockaddr *)&got, text, sizeof text);
        snprintf(spec, sizeof spec, "%s", text);
        rc = hy_net_parse_listen(spec, &ss, &len, why, sizeof why);
        rc = rc == HY_OK ? hy_net_listen(&ss, len, spec, 8, &fd2, err) : rc;
        HY_T_OK(rc == HY_EIO && strstr(err, "[server] listen = ") == err &&
                    strstr(err, "cannot listen: Address already in use") != NULL,
                "a port in use is refused naming the key (%s)", err);
        close(fd);
        if (fd2 >= 0)
            close(fd2);
    }
}

int main(void)
{
    test_allow();
    test_listen();
    return hy_t_done();
}
