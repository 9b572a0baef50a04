/*
 * test_access.c - the instance secret (src/server/access.h): the nginx
 * include it is read from (comments, the one entry and its name, the
 * secret's length and characters, a file others may read refused, each
 * with its message), the constant-time comparison, and the switch to
 * [server] user (as root: in a child that becomes nobody and cannot come
 * back; otherwise the refusals only).
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/access.h"
#include "test.h"

#define S43 "hys-0123456789abcdefghijklmnopqrstuvwxyzABCDEF"

static char g_path[256], g_name[64];

/* Loads a secret file with the given text and mode for instance "blue":
 * the return code, the secret in out, the message in err. */
static int load(const char *text, mode_t mode, char *out, char *err)
{
    FILE *f = fopen(g_path, "w");

    fputs(text, f);
    fclose(f);
    chmod(g_path, mode);
    out[0] = err[0] = g_name[0] = '\0';
    return hy_access_load_secret(g_path, out, g_name, sizeof g_name, err);
}

/* The message, without the path it starts with. */
static const char *msg(const char *err)
{
    const char *p = strstr(err, g_path);

    return p ? p + strlen(g_path) : err;
}

int main(void)
{
    char out[HY_ACCESS_SECRET_MAX + 1], err[HY_ERR_LEN];
    int rc;

    snprintf(g_path, sizeof g_path, "/tmp/hytest-%ld-secret.map", (long)getpid());

    rc = load("# hyserve blue\n\nblue \"" S43 "\";\n", 0600, out, err);
    HY_T_OK(rc == HY_OK && strcmp(out, S43) == 0 && strcmp(g_name, "blue") == 0,
            "comments, a blank line, the entry: its name and secret%s", err);
    rc = load("  blue\t\"" S43 "\" ;  # rotated 2026-01-01\r\n", 0400, out, err);
    HY_T_OK(rc == HY_OK && strcmp(out, S43) == 0, "blanks, CRLF and a trailing comment: %s", err);

    rc = load("green \"" S43 "\";\n", 0600, out, err);
    HY_T_OK(rc == HY_OK && strcmp(g_name, "green") == 0, "another name is read as it is: %s",
            g_name);
    rc = load("blue \"" S43 "\";\nblue \"" S43 "\";\n", 0600, out, err);
    HY_T_OK(rc == HY_EFORMAT &&
                strcmp(msg(err), ": line 2: a second entry (one instance, one secret)") == 0,
            "two entries: %s", msg(err));
    rc = load("blue \"short\";\n", 0600, out, err);
    HY_T_OK(rc == HY_EINVAL &&
                strcmp(msg(err), ": line 1: the secret has 5 characters, must have 32..128") == 0,
            "a short secret: %s", msg(err));
    rc = load("blue \"" S43 "!\";\n", 0600, out, err);
    HY_T_OK(rc == HY_EFORMAT &&
                strcmp(msg(err), ": line 1: expected <colour> \"<secret>\"; with a secret of "
                                 "A-Z a-z 0-9 _ -") == 0,
            "a character outside the alphabet: %s", msg(err));
    rc = load("blue " S43 ";\n", 0600, out, err) | load("blue \"" S43 "\"\n", 0600, out, err) |
         load("blue\"" S43 "\";\n", 0600, out, err);
    HY_T_OK(rc != HY_OK && out[0] == '\0', "no quotes, no ';', no blank after the name: refused");
    rc = load("# nothing here\n", 0600, out, err);
    HY_T_OK(rc == HY_EFORMAT && strcmp(msg(err), ": no line <colour> \"<secret>\";") == 0,
            "no entry: %s", msg(err));
    rc = load("blue \"" S43 "\";\n", 0644, out, err);
    HY_T_OK(rc == HY_EINVAL &&
                strcmp(msg(err), ": mode 0644 lets group or others read the secret (chmod "
                                 "0600)") == 0 &&
                out[0] == '\0',
            "a file others may read is refused: %s", msg(err));
    unlink(g_path);
    rc = hy_access_load_secret(g_path, out, g_name, sizeof g_name, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "No such file") != NULL, "a missing file: %s", err);

    HY_T_OK(hy_access_secret_equal(S43, S43) && !hy_access_secret_equal(S43, NULL) &&
                !hy_access_secret_equal(S43, "") &&
                !hy_access_secret_equal(S43, "hys-0123456789") &&
                !hy_access_secret_equal(S43, S43 "x") &&
                !hy_access_secret_equal(S43, "Hys-0123456789abcdefghijklmnopqrstuvwxyzABCDEF"),
            "the secret equals itself only (not absent, empty, a prefix, longer, one char off)");

    HY_T_OK(hy_access_become("", NULL, 0, err) == HY_OK, "no [server] user: nothing to do");
    rc = hy_access_become("no-such-user-hyserve", NULL, 0, err);
    HY_T_OK(rc == HY_EINVAL && strcmp(err, "[server] user = no-such-user-hyserve: no such user") == 0,
            "an unknown user: %s", err);
    if (geteuid() != 0) {
        rc = hy_access_become("root", NULL, 0, err);
        HY_T_OK(rc == HY_EINVAL && strstr(err, "cannot become it") != NULL,
                "not root: another user is refused: %s", err);
    } else {
        /* in a child: becomes nobody, owns the chowned file, cannot be root again */
        struct passwd *nobody = getpwnam("nobody");
        const char *paths[] = {g_path, NULL};
        struct stat st;
        pid_t pid;
        int status = -1;

        fclose(fopen(g_path, "w"));
        pid = fork();
        if (pid == 0) {
            if (hy_access_become("nobody", paths, 2, err) != HY_OK)
                _exit(2);
            _exit(getuid() == nobody->pw_uid && geteuid() == nobody->pw_uid &&
                          getgid() == nobody->pw_gid && setuid(0) != 0 && seteuid(0) != 0
                      ? 0
                      : 3);
        }
        waitpid(pid, &status, 0);
        HY_T_OK(nobody != NULL && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
                    stat(g_path, &st) == 0 && st.st_uid == nobody->pw_uid,
                "as root: becomes nobody (uid, gid), owns the paths given, cannot regain root "
                "(status %d)",
                status);
        unlink(g_path);
    }
    return hy_t_done();
}
