/*
 * test_outstore.c - the out store of running sequences' pages beyond their
 * hot window (engine/outstore.h), without a model: units in RAM slots and a
 * spill file, the clock that picks which one leaves RAM, cold units read
 * by a step (through the op's reader, backend.h hy_out_read) brought up by
 * the I/O thread while the next step would run and published before that
 * step ends, a changed file refused by the op run by run and by the I/O
 * thread, a unit let go while on its way up, a file the disk cannot hold
 * refused at init; used + pending + free adds up after each step.
 */
#include "engine/outstore.h"
#include "kv/plan.h"
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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
    return c.used + s->n_free_units == c.units &&
           c.warm_used + c.pending + s->n_free_slots == c.warm && c.cold == c.used - c.warm_used &&
           c.cold >= 0;
}

/* Takes n units (ids into u), each filled as fill() says: whether all n
 * were taken. */
static bool take_filled(hy_outstore_t *s, int n, int32_t *u)
{
    char err[HY_ERR_LEN];
    uint8_t *b;
    bool ok = true;

    for (int i = 0; i < n; i++) {
        if (hy_outstore_take(s, &u[i], &b, err) != HY_OK) {
            ok = false;
            continue;
        }
        fill(b, u[i]);
    }
    return ok;
}

/* The attention op reads a cold unit whole (the store's runs: all of it)
 * through the view: whether it got the bytes written */
static bool op_reads_cold(hy_outstore_t *s, int32_t u)
{
    uint8_t buf[UB], want[UB];
    const uint8_t *p = hy_out_read(&s->view, u, 0, buf, UB);

    fill(want, u);
    return memcmp(p, want, UB) == 0;
}

/* The op wanted u without reading it (its bytes checked by the I/O thread
 * alone) */
static void op_wants(hy_outstore_t *s, int32_t u)
{
    s->view.ref[u] = 2;
    s->view.wanted[s->view.n_wanted++] = u;
}

static void t_units(void)
{
    hy_outstore_opts_t o = {UB, 8, 3, g_dir, 0};
    hy_outstore_t s;
    hy_outstore_counts_t c;
    char err[HY_ERR_LEN] = "";
    int32_t u[8], extra, bad = -1;
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
    /* a step reads the two oldest units, which are cold: they come up on
     * the I/O thread, published while the next step would run */
    ok = op_reads_cold(&s, u[0]) && op_reads_cold(&s, u[1]);
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_counts(&s, &c);
    HY_T_OK(ok && rc == HY_OK && c.pending == 2 && c.warm_used == 1 && adds_up(&s),
            "the cold units a step read, checked, are on their way up after it (%d pending; %s)",
            c.pending, rc ? err : "ok");
    {
        int32_t seen = 0;

        /* the op of the next step finds them in RAM as soon as they are */
        for (int i = 0; i < 5000 && seen < 2; i++) {
            seen = (__atomic_load_n(&s.slot[u[0]], __ATOMIC_ACQUIRE) >= 0) +
                   (__atomic_load_n(&s.slot[u[1]], __ATOMIC_ACQUIRE) >= 0);
            if (seen < 2)
                usleep(1000);
        }
        HY_T_OK(seen == 2 && s.view.n_wanted == 0 && op_reads_cold(&s, u[0]) &&
                    s.view.n_wanted == 0 && s.view.disk_read_bytes == 0,
                "published before the next step ends: the op reads them from RAM (%d seen, "
                "%d wanted, %llu read)", seen, s.view.n_wanted,
                (unsigned long long)s.view.disk_read_bytes);
    }
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_counts(&s, &c);
    HY_T_OK(rc == HY_OK && holds(&s, u[0]) && holds(&s, u[1]) && c.promotions == 2 &&
                c.pending == 0 && c.disk_read_bytes == 4 * UB && c.warm_used == 3 &&
                c.promote_failures == 0 && adds_up(&s),
            "accounted at the next step's end, their bytes as written (%llu bytes read: "
            "the op's and the thread's; %s)", (unsigned long long)c.disk_read_bytes,
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
    /* the file changed under a cold unit: the step that reads it fails,
     * and the unit stays cold */
    {
        int32_t cold = -1;
        uint8_t junk[16];
        bool zeros = true;

        memset(junk, 0xa5, sizeof junk);
        for (int i = 0; i < 8; i++)
            if (s.slot[i] < 0 && s.on_disk[i])
                cold = i;
        if (cold >= 0)
            (void)!pwrite(s.fd, junk, sizeof junk, (off_t)cold * UB + 40);
        bad = cold;
        {
            uint8_t buf[UB];
            const uint8_t *p = hy_out_read(&s.view, cold >= 0 ? cold : 0, 0, buf, UB);

            for (int i = 0; i < UB; i++)
                zeros &= p[i] == 0;
        }
        rc = hy_outstore_end_step(&s, err);
        hy_outstore_counts(&s, &c);
        HY_T_OK(cold >= 0 && zeros && rc == HY_EIO && strstr(err, "checksum mismatch") &&
                    strstr(err, "hyserve-spill-") && s.slot[cold] < 0 && c.pending == 0 &&
                    adds_up(&s),
                "a cold unit whose bytes changed: the op gets zeros, the step fails, the "
                "unit stays cold (%s)", err);
        /* wanted without the op's read: the I/O thread finds it bad, logs
         * it and leaves it cold; no step failed */
        op_wants(&s, cold >= 0 ? cold : 0);
        rc = hy_outstore_end_step(&s, err);
        hy_outstore_sync(&s);
        hy_outstore_counts(&s, &c);
        HY_T_OK(cold >= 0 && rc == HY_OK && c.promote_failures == 1 && s.slot[cold] < 0 &&
                    c.promotions == 2 && adds_up(&s),
                "the I/O thread refuses it too: counted, still cold (%s)", rc ? err : "ok");
        s.view.failed_unit = 3;
        s.view.failed_errno = EIO;
        rc = hy_outstore_end_step(&s, err);
        HY_T_OK(rc == HY_EIO && strstr(err, "reading unit 3 at offset 768") &&
                    s.view.failed_unit == -1,
                "a read the op could not make fails the step (%s)", err);
    }
    /* a unit let go while on its way up: waits for it, then free */
    {
        int32_t cold = -1, before;

        for (int i = 0; i < 8; i++)
            if (s.slot[i] < 0 && s.on_disk[i] && i != bad)
                cold = i;
        before = s.n_free_units;
        op_wants(&s, cold >= 0 ? cold : 0);
        rc = hy_outstore_end_step(&s, err);
        hy_outstore_counts(&s, &c);
        ok = rc == HY_OK && c.pending == 1;
        hy_outstore_put(&s, cold >= 0 ? cold : 0);
        hy_outstore_counts(&s, &c);
        HY_T_OK(cold >= 0 && ok && s.n_free_units == before + 1 && s.slot[cold] < 0 &&
                    c.pending == 0 && adds_up(&s),
                "a unit put on its way up: free once it arrived, no slot kept (%s)",
                rc ? err : "ok");
        if (hy_outstore_take(&s, &extra, &b, err) == HY_OK) /* all 8 in use again */
            fill(b, extra);
    }
    for (int i = 0; i < 8; i++)
        hy_outstore_put(&s, i);
    hy_outstore_counts(&s, &c);
    HY_T_OK(c.used == 0 && c.warm_used == 0 && c.cold == 0 && adds_up(&s),
            "every unit back: none used, no slot used (%d used, %d warm, %d cold, %d pending)",
            c.used, c.warm_used, c.cold, c.pending);
    hy_outstore_free(&s);
}

/* A step that reads more cold units than there are slots: as many go up
 * as slots can be had; the rest stay cold and are listed again when a
 * later step reads them */
static void t_more_than_slots(void)
{
    hy_outstore_opts_t o = {UB, 8, 2, g_dir, 0};
    hy_outstore_t s;
    hy_outstore_counts_t c;
    char err[HY_ERR_LEN] = "";
    int32_t u[8], n_cold = 0, again;
    bool ok = true;
    int rc = hy_outstore_init(&s, &o, err);

    if (rc != HY_OK) {
        HY_T_OK(0, "8 units, 2 in RAM (%s)", err);
        return;
    }
    ok &= take_filled(&s, 8, u);
    for (int i = 0; i < 8; i++)
        if (s.slot[u[i]] < 0 && n_cold < 5)
            ok &= op_reads_cold(&s, u[i]), n_cold++;
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_counts(&s, &c);
    ok &= rc == HY_OK && c.pending == 2 && adds_up(&s);
    hy_outstore_sync(&s);
    for (int i = 0, k = 0; i < 8 && k < 5; i++)
        if (s.on_disk[u[i]] && s.slot[u[i]] < 0)
            ok &= op_reads_cold(&s, u[i]), k++;
    again = s.view.n_wanted;
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_sync(&s);
    hy_outstore_counts(&s, &c);
    HY_T_OK(ok && n_cold == 5 && again == 5 && rc == HY_OK && c.promotions == 4 &&
                c.warm_used == 2 && adds_up(&s),
            "5 cold units read with 2 slots: 2 go up, the rest are listed again by the next "
            "step that reads them (%d listed, %llu brought up; %s)", again,
            (unsigned long long)c.promotions, rc ? err : "ok");
    hy_outstore_free(&s);
}

/* Units checked in runs of a quarter: the op checks only the runs it
 * reads, and a read across runs is refused */
static void t_runs(void)
{
    hy_outstore_opts_t o = {UB, 4, 1, g_dir, UB / 4};
    hy_outstore_t s;
    char err[HY_ERR_LEN] = "";
    uint8_t buf[UB], junk[8], want[UB];
    int32_t u[4];
    bool ok = true;
    int rc = hy_outstore_init(&s, &o, err);

    HY_T_OK(rc == HY_OK && s.runs == 4, "4 units checked in 4 runs each (%s)",
            rc ? err : "ok");
    if (rc != HY_OK)
        return;
    ok &= take_filled(&s, 4, u);
    /* u[0] is in the file only now; its third run changes */
    memset(junk, 0x3c, sizeof junk);
    (void)!pwrite(s.fd, junk, sizeof junk, (off_t)u[0] * UB + 2 * (UB / 4) + 5);
    fill(want, u[0]);
    ok &= s.slot[u[0]] < 0 &&
          memcmp(hy_out_read(&s.view, u[0], UB / 4, buf, UB / 4), want + UB / 4, UB / 4) == 0;
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_sync(&s);
    HY_T_OK(ok && rc == HY_OK, "a sound run of a unit whose other run changed: read as "
            "written, the step goes on (%s)", rc ? err : "ok");
    if (s.slot[u[0]] >= 0) { /* the thread refused the whole unit: it must not be warm */
        HY_T_OK(0, "the I/O thread brought up a unit with a changed run");
        hy_outstore_free(&s);
        return;
    }
    (void)hy_out_read(&s.view, u[0], 2 * (UB / 4), buf, UB / 4);
    rc = hy_outstore_end_step(&s, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "checksum mismatch"),
            "the changed run fails the step that reads it (%s)", err);
    (void)hy_out_read(&s.view, u[0], 10, buf, UB / 4);
    rc = hy_outstore_end_step(&s, err);
    HY_T_OK(rc == HY_EIO && strstr(err, "a read across the checked runs"),
            "a read that is not whole runs fails the step (%s)", err);
    hy_outstore_free(&s);
}

/* Whether request i of r holds bytes [off, off+n) of unit u as written. */
static bool req_holds(const hy_out_req_t *r, int32_t u)
{
    uint8_t want[UB];

    fill(want, u);
    return r->at && memcmp(r->at, want + r->off, r->n) == 0;
}

/* hy_out_reads: cold reads next to each other in the list and in the file
 * are one preadv (the bytes between them read too: disk_read_bytes says
 * how many), a warm unit or a read out of file order starts a new one,
 * a changed run fails its own unit only, and a read that is not whole
 * runs is refused as hy_out_read refuses it */
static void t_reads(void)
{
    hy_outstore_opts_t o = {UB, 24, 2, g_dir, UB / 4};
    hy_outstore_t s;
    char err[HY_ERR_LEN] = "";
    uint8_t buf[8][UB], junk[4];
    int32_t u[24];
    bool ok = true;
    int rc = hy_outstore_init(&s, &o, err);

    if (rc != HY_OK) {
        HY_T_OK(0, "init (%s)", err);
        return;
    }
    ok &= take_filled(&s, 24, u);
    /* units are handed out in order: unit i is u[i], the first ones cold */
    for (int i = 0; i < 24; i++)
        ok &= u[i] == i;
    ok &= s.slot[0] < 0 && s.slot[1] < 0 && s.slot[2] < 0 && s.slot[20] < 0 &&
          s.slot[23] >= 0;
    HY_T_OK(ok, "24 units, the first 22 only in the file");
    if (!ok) {
        hy_outstore_free(&s);
        return;
    }
    {
        /* runs 0 and 2 of unit 0 (a run between), unit 1 whole (run 3 of
         * unit 0 between): one read of the 512 bytes */
        hy_out_req_t r[3] = {{0, 0, UB / 4, buf[0], NULL},
                             {0, UB / 2, UB / 4, buf[1], NULL},
                             {1, 0, UB, buf[2], NULL}};
        hy_out_reads(&s.view, r, 3);
        HY_T_OK(req_holds(&r[0], 0) && req_holds(&r[1], 0) && req_holds(&r[2], 1) &&
                    r[0].at == buf[0] && s.view.disk_read_bytes == 2 * UB &&
                    s.view.failed_unit == -1,
                "three cold reads that follow in the file: one call, the runs between "
                "them read and dropped (%llu bytes)",
                (unsigned long long)s.view.disk_read_bytes);
    }
    {
        /* unit 20 is 19 units (4,864 bytes) after unit 0: too far; unit 2
         * before unit 1: out of order; unit 23 is warm */
        hy_out_req_t r[4] = {{0, 0, UB, buf[0], NULL}, {20, 0, UB, buf[1], NULL},
                             {2, 0, UB, buf[2], NULL}, {23, UB / 4, UB / 4, buf[3], NULL}};
        uint64_t before = s.view.disk_read_bytes;

        hy_out_reads(&s.view, r, 4);
        HY_T_OK(req_holds(&r[0], 0) && req_holds(&r[1], 20) && req_holds(&r[2], 2) &&
                    req_holds(&r[3], 23) && r[3].at != buf[3] &&
                    s.view.disk_read_bytes - before == 3 * UB && s.view.failed_unit == -1,
                "reads far apart or out of order are read apart; a warm unit is read where "
                "it lies (%llu bytes)", (unsigned long long)(s.view.disk_read_bytes - before));
    }
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_sync(&s);
    ok = rc == HY_OK;
    /* unit 4's second run changes; a merged read of units 3, 4, 5 fails unit
     * 4 alone */
    memset(junk, 0x3c, sizeof junk);
    (void)!pwrite(s.fd, junk, sizeof junk, (off_t)4 * UB + UB / 4 + 3);
    {
        hy_out_req_t r[3] = {{3, 0, UB, buf[0], NULL}, {4, 0, UB, buf[1], NULL},
                             {5, 0, UB, buf[2], NULL}};
        hy_out_reads(&s.view, r, 3);
        ok &= req_holds(&r[0], 3) && req_holds(&r[2], 5) && !req_holds(&r[1], 4) &&
              s.view.failed_unit == 4;
    }
    rc = hy_outstore_end_step(&s, err);
    HY_T_OK(ok && rc == HY_EIO && strstr(err, "checksum mismatch"),
            "a changed run inside a merged read fails its unit alone, and the step (%s)", err);
    {
        hy_out_req_t r[2] = {{6, 0, UB, buf[0], NULL}, {7, 10, UB / 4, buf[1], NULL}};
        hy_out_reads(&s.view, r, 2);
        ok = req_holds(&r[0], 6) && s.view.failed_unit == 7;
    }
    rc = hy_outstore_end_step(&s, err);
    HY_T_OK(ok && rc == HY_EIO && strstr(err, "a read across the checked runs"),
            "a read that is not whole runs is refused, the one before it read (%s)", err);
    hy_outstore_free(&s);
}

/* The I/O thread reads a run of consecutive wanted units in one call and
 * judges each unit apart: the sound ones go up, a changed one and the
 * ones a short read did not cover stay cold, each logged and counted */
static void t_io_runs(void)
{
    hy_outstore_opts_t o = {UB, 16, 6, g_dir, UB / 4};
    hy_outstore_t s;
    hy_outstore_counts_t c;
    char err[HY_ERR_LEN] = "";
    uint8_t junk[4];
    int32_t u[16];
    bool ok = true;
    int rc = hy_outstore_init(&s, &o, err);

    if (rc != HY_OK) {
        HY_T_OK(0, "init (%s)", err);
        return;
    }
    ok &= take_filled(&s, 16, u);
    for (int i = 0; i < 16; i++)
        ok &= u[i] == i && (i >= 8 || s.slot[i] < 0);
    /* unit 4 changes; the file ends halfway through unit 5 */
    memset(junk, 0x5a, sizeof junk);
    ok &= pwrite(s.fd, junk, sizeof junk, (off_t)4 * UB + 3 * (UB / 4)) == sizeof junk &&
          ftruncate(s.fd, (off_t)5 * UB + UB / 2) == 0;
    op_wants(&s, 2);
    op_wants(&s, 3);
    op_wants(&s, 4);
    op_wants(&s, 5);
    op_wants(&s, 7);
    rc = hy_outstore_end_step(&s, err);
    hy_outstore_sync(&s);
    hy_outstore_counts(&s, &c);
    HY_T_OK(ok && rc == HY_OK && holds(&s, 2) && holds(&s, 3) && s.slot[4] < 0 &&
                s.slot[5] < 0 && s.slot[7] < 0 && c.promotions == 2 &&
                c.promote_failures == 3 && c.pending == 0 && adds_up(&s),
            "units 2-5 in one read: 2 and 3 up, the changed 4 and the cut 5 cold, and 7 "
            "past the end cold (%llu up, %llu refused)", (unsigned long long)c.promotions,
            (unsigned long long)c.promote_failures);
    hy_outstore_free(&s);
}

static void t_refused(void)
{
    hy_outstore_opts_t o = {4096, 1000, 10, g_dir, 0}, nodir = {UB, 8, 3, NULL, 0},
                       ram = {UB, 8, 0, NULL, 0};
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
        hy_outstore_opts_t bad = {UB, 8, 3, sub, 0};
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
    t_more_than_slots();
    t_runs();
    t_reads();
    t_io_runs();
    t_refused();
    HY_T_OK(rmdir(g_dir) == 0, "nothing left in the directory (the file was unlinked)");
    return hy_t_done();
}
