/*
 * test_outstore.c - the out store of running sequences' pages beyond their
 * hot window (engine/outstore.h), without a model: units in RAM slots and a
 * spill file, the clock that picks which one leaves RAM, cold units read
 * by a step brought up and checked, a changed file refused, a file the
 * disk cannot hold refused at init; used + free adds up after each step.
 */
#include "engine/outstore.h"
#include "kv/plan.h"
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>

#define UB 256

static char g_dir[] = "/tmp/hy-outstore-XXXXXX";

static void fill(uint8_t *p, int32_t u)
{
    for (int i = 0; i < UB; i++)
        p[i] = (uint8_t)(u * 31 + i);
}

static bool holds(const hy_outstore_t *s, int32_t u)
{
    uint8_t want[UB];

    fill(want, u);
    return s->slot[u] >= 0 && memcmp(s->ram + (size_t)s->slot[u] * UB, want, UB) == 0;
}

static bool adds_up(const hy_outstore_t *s)
{
    hy_outstore_counts_t c;

    hy_outstore_counts(s, &c);
    return c.used + s->n_free_units == c.units && c.warm_used + s->n_free_slots == c.warm &&
           c.cold == c.used - c.warm_used && c.cold >= 0;
}

/* What the attention op does on reading a cold unit (backend.h) */
static void op_reads_cold(hy_outstore_t *s, int32_t u)
{
    s->view.ref[u] = 2;
    s->view.wanted[s->view.n_wanted++] = u;
}

static void t_units(void)
{
    hy_outstore_opts_t o = {UB, 8, 3, g_dir};
    hy_outstore_t s;
    hy_outstore_counts_t c;
    char err[HY_ERR_LEN] = "";
    int32_t u[8], extra;
    uint8_t *b;
    int rc = hy_outstore_init(&s, &o, err), ok = 1;

    HY_T_OK(rc == HY_OK && s.fd >= 0 && s.c.file_bytes == 8 * UB, "8 units, 3 in RAM: a spill "
            "file of 8 units (%s)", rc ? err : "ok");
    if (rc != HY_OK)
        return;
    for (int i = 0; i < 8; i++) {
        ok &= hy_outstore_take(&s, &u[i], &b, err) == HY_OK;
        fill(b, u[i]);
        /* a step that read nothing cold */
        ok &= hy_outstore_end_step(&s, err) == HY_OK && adds_up(&s);
    }
    hy_outstore_counts(&s, &c);
    HY_T_OK(ok && c.used == 8 && c.warm_used == 3 && c.cold == 5 && c.spills == 5 &&
                c.disk_write_bytes == 5 * UB,
            "8 taken: 3 warm, %d cold, %llu written, adds up after each", c.cold,
            (unsigned long long)c.spills);
    rc = hy_outstore_take(&s, &extra, &b, err);
    HY_T_OK(rc == HY_EFULL && strstr(err, "all 8 units in use"), "a 9th refused (%s)", err);
    /* a step reads the two oldest units, which are cold: they come up */
    op_reads_cold(&s, u[0]);
    op_reads_cold(&s, u[1]);
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_counts(&s, &c);
    HY_T_OK(rc == HY_OK && holds(&s, u[0]) && holds(&s, u[1]) && c.promotions == 2 &&
                c.disk_read_bytes == 2 * UB && c.warm_used == 3 && adds_up(&s),
            "the cold units a step read are in RAM after it, their bytes as written (%s)",
            rc ? err : "ok");
    /* the clock: of the three warm units the one not read since it passed
     * leaves first */
    {
        int32_t warm[3], n = 0, left = -1, cold = -1;

        for (int i = 0; i < 8; i++) {
            if (s.slot[u[i]] >= 0 && n < 3)
                warm[n++] = u[i];
            else if (s.slot[u[i]] < 0)
                cold = u[i];
        }
        for (int i = 0; i < n; i++)
            s.ref[warm[i]] = 0;
        s.ref[warm[0]] = s.ref[warm[2]] = 1;
        hy_outstore_put(&s, cold); /* a free unit; still no free slot */
        if (n == 3 && cold >= 0 && hy_outstore_take(&s, &extra, &b, err) == HY_OK) {
            fill(b, extra);
            for (int i = 0; i < n; i++)
                if (s.slot[warm[i]] < 0)
                    left = i;
        }
        HY_T_OK(n == 3 && left == 1 && adds_up(&s),
                "the clock sends the one warm unit nobody read to disk (%d of %d)", left, n);
    }
    /* the file changed under a cold unit: the step that read it fails */
    {
        int32_t cold = -1;
        uint8_t junk[16];

        memset(junk, 0xa5, sizeof junk);
        for (int i = 0; i < 8; i++)
            if (s.slot[i] < 0 && s.on_disk[i])
                cold = i;
        if (cold >= 0)
            (void)!pwrite(s.fd, junk, sizeof junk, (off_t)cold * UB + 40);
        op_reads_cold(&s, cold >= 0 ? cold : 0);
        rc = hy_outstore_end_step(&s, err);
        HY_T_OK(cold >= 0 && rc == HY_EIO && strstr(err, "checksum mismatch") &&
                    strstr(err, "hyserve-spill-") && s.slot[cold] < 0 && adds_up(&s),
                "a cold unit whose bytes changed fails the step, stays cold (%s)", err);
        s.view.failed_unit = 3;
        s.view.failed_errno = EIO;
        rc = hy_outstore_end_step(&s, err);
        HY_T_OK(rc == HY_EIO && strstr(err, "reading unit 3 at offset 768") &&
                    s.view.failed_unit == -1,
                "a read the op could not make fails the step (%s)", err);
    }
    for (int i = 0; i < 8; i++)
        hy_outstore_put(&s, i);
    hy_outstore_counts(&s, &c);
    HY_T_OK(c.used == 0 && c.warm_used == 0 && c.cold == 0 && adds_up(&s),
            "every unit back: none used, no slot used");
    hy_outstore_free(&s);
}

static void t_refused(void)
{
    hy_outstore_opts_t o = {4096, 1000, 10, g_dir}, nodir = {UB, 8, 3, NULL},
                       ram = {UB, 8, 0, NULL};
    hy_outstore_t s;
    struct rlimit old, lim;
    char err[HY_ERR_LEN] = "";
    int rc;

    rc = hy_outstore_init(&s, &nodir, err);
    HY_T_OK(rc == HY_EINVAL && strstr(err, "needs a directory"),
            "3 of 8 in RAM without a directory refused (%s)", err);
    /* a directory that cannot be made: its parent is a regular file */
    {
        char file[sizeof g_dir + 16], sub[sizeof g_dir + 32];
        hy_outstore_opts_t bad = {UB, 8, 3, sub};
        FILE *fp;
        snprintf(file, sizeof file, "%s/plain", g_dir);
        snprintf(sub, sizeof sub, "%s/spill", file);
        fp = fopen(file, "w");
        if (fp)
            fclose(fp);
        rc = hy_outstore_init(&s, &bad, err);
        HY_T_OK(fp && rc == HY_EIO && strstr(err, "mkdir") && strstr(err, sub) &&
                    strstr(err, "Not a directory"),
                "a spill directory that cannot be created refused, naming it (%s)", err);
        if (rc == HY_OK)
            hy_outstore_free(&s);
        unlink(file);
    }
    rc = hy_outstore_init(&s, &ram, err);
    HY_T_OK(rc == HY_OK && s.fd < 0 && s.o.n_warm == 8,
            "every unit in RAM: no file (%s)", rc ? err : "ok");
    if (rc == HY_OK)
        hy_outstore_free(&s);
    /* a disk that cannot hold the file: the file size limit stands in */
    signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 64 << 10;
    setrlimit(RLIMIT_FSIZE, &lim);
    rc = hy_outstore_init(&s, &o, err);
    setrlimit(RLIMIT_FSIZE, &old);
    HY_T_OK(rc == HY_EIO && strstr(err, "cannot hold a spill file of 3.9 MiB"),
            "a spill file the disk cannot hold refused at init (%s)", err);
    if (rc == HY_OK)
        hy_outstore_free(&s);
}

int main(void)
{
    if (mkdtemp(g_dir) == NULL) {
        HY_T_OK(0, "mkdtemp: %s", strerror(errno));
        return hy_t_done();
    }
    t_units();
    t_refused();
    HY_T_OK(rmdir(g_dir) == 0, "nothing left in the directory (the file was unlinked)");
    return hy_t_done();
}
