/*
 * access.c - the instance secret's file (the nginx include it shares with
 * the site, see access.h), its constant-time check, and the one-way switch
 * to [server] user once what needs root is open.
 */
#define _GNU_SOURCE /* initgroups */
#include "server/access.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AC_FILE_MAX 65536 /* a secret file is one line and comments */
#define AC_NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
#define AC_SECRET_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

/* The whole file (NUL-terminated) into buf; refuses what others may read. */
static int ac_read(const char *path, char *buf, size_t cap, char *err)
{
    struct stat st;
    ssize_t n;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = HY_OK;

    if (fd < 0)
        return hy_err(err, HY_EIO, "[server] secret_file = %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = hy_err(err, HY_EINVAL, "[server] secret_file = %s: not a regular file", path);
        goto out;
    }
    if (st.st_mode & 077) {
        rc = hy_err(err, HY_EINVAL,
                    "[server] secret_file = %s: mode %04o lets group or others read the secret "
                    "(chmod 0600)",
                    path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    while (got + 1 < cap && (n = read(fd, buf + got, cap - 1 - got)) > 0)
        got += (size_t)n;
    if (got + 1 >= cap) {
        rc = hy_err(err, HY_EINVAL, "[server] secret_file = %s: larger than %zu bytes", path,
                    cap - 1);
        goto out;
    }
    buf[got] = '\0';
out:
    close(fd);
    return rc;
}

/* One entry, `<name> "<secret>";` (a comment may follow): its name and
 * secret as spans of p; false when the line has another shape or the
 * secret other characters. */
static bool ac_parse_line(const char *p, size_t *name_len, const char **sec, size_t *sec_len)
{
    const char *q;

    *name_len = strspn(p, AC_NAME_CHARS);
    q = p + *name_len;
    if (*name_len == 0 || (*q != ' ' && *q != '\t'))
        return false;
    q += strspn(q, " \t");
    if (*q++ != '"')
        return false;
    *sec = q;
    *sec_len = strspn(q, AC_SECRET_CHARS);
    q += *sec_len;
    if (*q++ != '"')
        return false;
    q += strspn(q, " \t");
    if (*q++ != ';')
        return false;
    q += strspn(q, " \t\r");
    return *q == '\0' || *q == '#';
}

int hy_access_load_secret(const char *path, char *out, char *name, size_t name_cap, char *err)
{
    char *buf = malloc(AC_FILE_MAX), *line, *next;
    int rc, lineno = 0, found = 0;

    if (buf == NULL)
        return hy_err(err, HY_ENOMEM, "[server] secret_file: out of memory");
    if ((rc = ac_read(path, buf, AC_FILE_MAX, err)) != HY_OK)
        goto out;
    for (line = buf; line != NULL; line = next) {
        size_t name_len, sec_len;
        const char *p, *sec;

        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        p = line + strspn(line, " \t\r");
        if (*p == '\0' || *p == '#')
            continue;
        if (!ac_parse_line(p, &name_len, &sec, &sec_len)) {
            rc = hy_err(err, HY_EFORMAT,
                        "[server] secret_file = %s: line %d: expected <colour> \"<secret>\"; "
                        "with a secret of A-Z a-z 0-9 _ -",
                        path, lineno);
            goto out;
        }
        if (++found > 1) {
            rc = hy_err(err, HY_EFORMAT,
                        "[server] secret_file = %s: line %d: a second entry (one instance, one "
                        "secret)",
                        path, lineno);
            goto out;
        }
        if (sec_len < HY_ACCESS_SECRET_MIN || sec_len > HY_ACCESS_SECRET_MAX) {
            rc = hy_err(err, HY_EINVAL,
                        "[server] secret_file = %s: line %d: the secret has %zu characters, "
                        "must have %d..%d",
                        path, lineno, sec_len, HY_ACCESS_SECRET_MIN, HY_ACCESS_SECRET_MAX);
            goto out;
        }
        memcpy(out, sec, sec_len);
        out[sec_len] = '\0';
        snprintf(name, name_cap, "%.*s", (int)name_len, p);
    }
    if (found == 0)
        rc = hy_err(err, HY_EFORMAT, "[server] secret_file = %s: no line <colour> \"<secret>\";",
                    path);
out:
    /* the copy of the file held the secret too */
    explicit_bzero(buf, AC_FILE_MAX);
    free(buf);
    return rc;
}

bool hy_access_secret_equal(const char *secret, const char *given)
{
    size_t n = strlen(secret), m, i;
    unsigned char diff;

    if (given == NULL)
        return false;
    m = strlen(given);
    diff = (unsigned char)(n != m);
    for (i = 0; i < n; i++)
        diff |= (unsigned char)(secret[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

int hy_access_become(const char *user, const char *const *paths, int n_paths, char *err)
{
    struct passwd *pw;
    int i;

    if (user == NULL || user[0] == '\0')
        return HY_OK;
    errno = 0;
    if ((pw = getpwnam(user)) == NULL)
        return hy_err(err, HY_EINVAL, "[server] user = %s: %s", user,
                      errno ? strerror(errno) : "no such user");
    if (geteuid() != 0) {
        if (geteuid() == pw->pw_uid)
            return HY_OK;
        return hy_err(err, HY_EINVAL,
                      "[server] user = %s: started as uid %d, which cannot become it (start as "
                      "root or as %s)",
                      user, (int)geteuid(), user);
    }
    for (i = 0; i < n_paths; i++)
        if (paths[i] != NULL && paths[i][0] && chown(paths[i], pw->pw_uid, (gid_t)-1) != 0)
            return hy_err(err, HY_EIO, "[server] user = %s: chown %s: %s", user, paths[i],
                          strerror(errno));
    /* groups first: afterwards we may no longer change them */
    if (initgroups(user, pw->pw_gid) != 0 || setgid(pw->pw_gid) != 0 ||
        setuid(pw->pw_uid) != 0)
        return hy_err(err, HY_EIO, "[server] user = %s: cannot switch to it: %s", user,
                      strerror(errno));
    if (pw->pw_uid != 0 && setuid(0) == 0)
        return hy_err(err, HY_EIO, "[server] user = %s: root could be regained", user);
    return HY_OK;
}
