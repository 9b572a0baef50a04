/*
 * test_log.c - the key=value line format: plain values, quoting and
 * escaping, printf conversions with lengths and '*', truncation, level
 * filtering, the stderr copy, and log.socket (a private datagram socket
 * that receives RFC 3164 lines and survives the daemon's restart).
 */
#include "common/log.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* A datagram socket bound at path, as syslog-ng's unix-dgram() source. */
static int bind_dgram(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);

    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void test_socket(void)
{
    char dir[] = "/tmp/hy-logsock-XXXXXX", path[160], want[64], got[512];
    char err[HY_ERR_LEN], longp[200];
    struct timeval tv = {2, 0};
    ssize_t n;
    int fd;

    if (mkdtemp(dir) == NULL) {
        HY_T_OK(0, "mkdtemp failed");
        return;
    }
    snprintf(path, sizeof path, "%s/log", dir);
    fd = bind_dgram(path);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    HY_T_OK(hy_log_set_socket(longp, err) == HY_EINVAL && strstr(err, "at most 107"),
            "a socket path longer than sun_path is refused (%s)", err);
    HY_T_OK(hy_log_set_socket(path, err) == HY_OK, "log.socket set (%s)", err);
    hy_log_open("hysock", LOG_LOCAL3, LOG_INFO, false);
    hy_log(LOG_WARNING, "first", "k=%d", 7);
    n = recv(fd, got, sizeof got - 1, 0);
    got[n > 0 ? n : 0] = '\0';
    /* <PRI> = facility | level; then "Mmm dd hh:mm:ss ident[pid]: line" */
    snprintf(want, sizeof want, "hysock[%ld]: event=first k=7", (long)getpid());
    HY_T_OK(n > 0 && strncmp(got, "<156>", 5) == 0 && got[8] == ' ' && got[20] == ' ' &&
                strcmp(got + 21, want) == 0,
            "one RFC 3164 datagram per line: [%s]", got);
    /* the daemon restarts: a new socket at the same path gets the next line */
    close(fd);
    fd = bind_dgram(path);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    hy_log(LOG_INFO, "second", "k=%d", 8);
    n = recv(fd, got, sizeof got - 1, 0);
    got[n > 0 ? n : 0] = '\0';
    HY_T_OK(n > 0 && strstr(got, "event=second k=8") && strncmp(got, "<158>", 5) == 0,
            "after the daemon restarts the next line is delivered: [%s]", got);
    hy_log_close();
    close(fd);
    unlink(path);
    rmdir(dir);
}

static int same(const char *got, const char *want)
{
    if (strcmp(got, want) != 0) {
        printf("# got  [%s]\n# want [%s]\n", got, want);
        return 0;
    }
    return 1;
}

int main(void)
{
    char buf[HY_LOG_LINE_LEN], small[24];
    const char *volatile none = NULL; /* volatile: keep gcc from flagging the NULL %s */
    size_t n;
    int fds[2];

    n = hy_log_format(buf, sizeof buf, "model_loaded", "path=%s ms=%d", "/x.gguf", 123);
    HY_T_OK(same(buf, "event=model_loaded path=/x.gguf ms=123") && n == strlen(buf),
            "plain values are written bare");
    hy_log_format(buf, sizeof buf, "req", "msg=%s user=%s", "hello world", "a\"b\\c");
    HY_T_OK(same(buf, "event=req msg=\"hello world\" user=\"a\\\"b\\\\c\""),
            "values with spaces are quoted, quotes and backslashes escaped");
    hy_log_format(buf, sizeof buf, "x", "a=%s b=%s c=%s", "", "k=v", "l1\nl2\x01");
    HY_T_OK(same(buf, "event=x a=\"\" b=\"k=v\" c=\"l1\\nl2\\x01\""),
            "empty values, '=' and control characters are quoted and escaped");
    hy_log_format(buf, sizeof buf, "n", "a=%lld b=%zu c=%.2f d=%5s e=%-3d| f=%x g=%% h=%*d i=%s",
                  -9000000000LL, (size_t)42, 3.14159, "ab", 7, 255u, 4, 9, none);
    HY_T_OK(same(buf, "event=n a=-9000000000 b=42 c=3.14 d=\"   ab\" e=\"7  |\" f=ff g=% h=\"   9\" i=(null)"),
            "conversions, lengths, width, precision and '*' consume the right arguments");
    hy_log_format(buf, sizeof buf, "t", "took=%dms  tokens=%u %s", 5, 6u, "tail");
    HY_T_OK(same(buf, "event=t took=5ms tokens=6 tail"),
            "literal text inside a value, repeated spaces and bare values");
    n = hy_log_format(small, sizeof small, "overflow", "k=%s", "0123456789abcdef");
    HY_T_OK(same(small, "event=overflow k=012...") && n == strlen(small),
            "a line that does not fit is cut with ...");

    hy_log_open("hytest", LOG_USER, LOG_WARNING, false);
    HY_T_OK(hy_log_enabled(LOG_ERR) && hy_log_enabled(LOG_WARNING) &&
            !hy_log_enabled(LOG_NOTICE) && !hy_log_enabled(LOG_DEBUG),
            "level filtering keeps warning and more severe");
    hy_log_close();

    /* the stderr copy: capture it through a pipe */
    if (pipe(fds) == 0) {
        int saved = dup(2);
        ssize_t got;

        dup2(fds[1], 2);
        hy_log_open("hytest", LOG_USER, LOG_INFO, true);
        hy_log(LOG_DEBUG, "hidden", "x=%d", 1);
        hy_log(LOG_INFO, "shown", "x=%s", "a b");
        hy_log_close();
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        close(fds[1]);
        got = read(fds[0], buf, sizeof buf - 1);
        close(fds[0]);
        buf[got > 0 ? got : 0] = '\0';
        HY_T_OK(strstr(buf, "hytest[") == buf && strstr(buf, "info: event=shown x=\"a b\"\n") &&
                !strstr(buf, "hidden"),
                "stderr gets the filtered line with ident, pid and level");
    } else {
        HY_T_OK(0, "pipe failed");
    }
    test_socket();
    return hy_t_done();
}
