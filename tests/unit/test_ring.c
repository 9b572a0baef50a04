/*
 * test_ring.c - request slots and token rings across processes: 100k tokens
 * from an engine process to a worker process through a 16-entry ring (so it
 * wraps thousands of times), the futex wake-up of a sleeping reader, read
 * timeout, cancel of a queued and of a running request, EFULL when every
 * slot is busy, priority order, and reaping the requests of a worker killed
 * with SIGKILL.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/ring.h"
#include "test.h"

#define NTOK 100000

static char err[HY_ERR_LEN];
static char inst[64];

static void req_params(hy_req_params_t *rp, int prio)
{
    memset(rp, 0, sizeof *rp);
    hy_sampling_default(&rp->sampling);
    rp->max_tokens = NTOK;
    rp->priority = prio;
}

/* Engine process: take one request and stream NTOK tokens (token i, logprob
 * -i/1000, top-1 alternative i+1), spinning politely when the ring is full. */
static int engine_stream(void)
{
    hy_shm_t *e;
    int32_t idx, i;
    hy_ring_tok_t t;

    if (hy_shm_attach(&e, inst, err) != HY_OK)
        return 1;
    while (hy_req_take(e, &idx) != HY_OK)
        hy_shm_engine_wait(e, atomic_load(&hy_shm_header_rw(e)->engine_futex), 10);
    memset(&t, 0, sizeof t);
    for (i = 0; i < NTOK; i++) {
        t.token = i;
        t.logprob = -(float)i / 1000.0f;
        t.n_top = 1;
        t.top_ids[0] = i + 1;
        t.top_logprobs[0] = -1.0f;
        while (hy_req_push(e, idx, &t) == HY_EFULL)
            usleep(50);
    }
    hy_req_finish(e, idx, HY_REQ_DONE, HY_FINISH_LENGTH, 0, NULL);
    hy_shm_close(e);
    return 0;
}

static void test_stream(hy_shm_t *shm)
{
    hy_req_params_t rp;
    hy_req_handle_t h;
    hy_ring_tok_t buf[7];
    hy_req_status_t st;
    int32_t prompt[3] = {1, 2, 3};
    int64_t expect = 0, bad = -1;
    pid_t pid, cons;
    int status, cstatus;

    req_params(&rp, 0);
    pid = fork();
    if (pid == 0)
        _exit(engine_stream());
    /* the consumer is a separate process too: worker role */
    cons = fork();
    if (cons == 0) {
        hy_shm_t *w;
        if (hy_shm_attach(&w, inst, err) != HY_OK || hy_req_submit(w, &rp, prompt, 3, &h, err))
            _exit(10);
        for (;;) {
            int n = hy_req_read(w, h, buf, 7, 1000, &st, err), k;
            if (n < 0)
                _exit(11);
            for (k = 0; k < n; k++) {
                if (buf[k].token != expect || buf[k].n_top != 1 || buf[k].top_ids[0] != expect + 1 ||
                    buf[k].logprob != -(float)expect / 1000.0f)
                    _exit(12);
                expect++;
            }
            if (st.done)
                break;
        }
        if (expect != NTOK || st.state != HY_REQ_DONE || st.finish_reason != HY_FINISH_LENGTH ||
            st.n_generated != NTOK)
            _exit(13);
        hy_req_release(w, h, err);
        hy_shm_close(w);
        _exit(0);
    }
    waitpid(cons, &cstatus, 0);
    waitpid(pid, &status, 0);
    (void)bad;
    HY_T_OK(WIFEXITED(cstatus) && WEXITSTATUS(cstatus) == 0 && WIFEXITED(status) &&
                WEXITSTATUS(status) == 0,
            "100k tokens engine process -> worker process through a 16-slot ring, in order "
            "(consumer exit %d)", WIFEXITED(cstatus) ? WEXITSTATUS(cstatus) : -1);
    HY_T_OK(atomic_load(&hy_shm_stats(shm)->slots_used) == 0 &&
                atomic_load(&hy_shm_stats(shm)->generation_tokens) == NTOK,
            "slot freed after finish + release; generation_tokens counted");
}

/* Whether process pid is asleep ('S' in /proc/PID/stat). */
static int proc_sleeping(pid_t pid)
{
    char path[64], buf[256], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the state follows the command name */
    return p != NULL && p[1] == ' ' && p[2] == 'S';
}

/* The wake-up is checked by what happened, not by how long it took: the
 * reader is known to be asleep in FUTEX_WAIT (its slot says it is waiting
 * and the kernel says it sleeps) before the push, and it must come back
 * with the token before its own 30 s timeout, which only a wake can do. */
static void test_latency(hy_shm_t *shm)
{
    hy_req_params_t rp;
    hy_req_handle_t h;
    hy_ring_tok_t t, out;
    hy_req_status_t st;
    hy_req_slot_t *slot;
    int32_t prompt[1] = {5}, idx;
    int fds[2], n, asleep = 0, i;
    int64_t t0, t1, woke[2] = {0, 0};
    pid_t pid;

    req_params(&rp, 0);
    hy_req_submit(shm, &rp, prompt, 1, &h, err);
    hy_req_take(shm, &idx);
    slot = hy_req_slot(shm, idx);
    t0 = hy_shm_now_ns();
    n = hy_req_read(shm, h, &out, 1, 50, &st, err);
    t1 = hy_shm_now_ns();
    HY_T_OK(n == 0 && !st.done && st.state == HY_REQ_RUNNING && t1 - t0 >= 45000000,
            "read with 50 ms timeout on an empty ring waits and returns 0 (%.1f ms)",
            (double)(t1 - t0) / 1e6);
    if (pipe(fds) != 0)
        return;
    pid = fork();
    if (pid == 0) {
        hy_shm_t *w;
        int64_t d[2];
        if (hy_shm_attach(&w, inst, err) != HY_OK)
            _exit(1);
        d[0] = hy_shm_now_ns();
        n = hy_req_read(w, h, &out, 1, 30000, &st, err); /* blocks in FUTEX_WAIT */
        d[1] = hy_shm_now_ns();
        if (write(fds[1], d, sizeof d) != sizeof d || n != 1 || out.token != 77)
            _exit(2);
        _exit(0);
    }
    /* up to 20 s for the child to start and fall asleep on the slot's word */
    for (i = 0; i < 20000 && !asleep; i++) {
        asleep = atomic_load(&slot->waiting) == 1 && proc_sleeping(pid);
        if (!asleep)
            usleep(1000);
    }
    memset(&t, 0, sizeof t);
    t.token = 77;
    hy_req_push(shm, idx, &t);
    n = (int)read(fds[0], woke, sizeof woke);
    waitpid(pid, NULL, 0);
    HY_T_OK(asleep && n == sizeof woke && woke[1] - woke[0] < 30000000000LL,
            "a reader asleep in FUTEX_WAIT is woken by the push, before its 30 s timeout "
            "(asleep %d, back after %.3f ms)", asleep, (double)(woke[1] - woke[0]) / 1e6);
    close(fds[0]);
    close(fds[1]);
    hy_req_finish(shm, idx, HY_REQ_DONE, HY_FINISH_STOP, 0, NULL);
    hy_req_release(shm, h, err);
}

static void test_cancel_full_priority(hy_shm_t *shm)
{
    hy_req_params_t rp;
    hy_req_handle_t h[8], x;
    hy_ring_tok_t t, out[4];
    hy_req_status_t st;
    int32_t prompt[2] = {1, 2}, idx, i, ok = 1, n;
    hy_stats_t *s = hy_shm_stats(shm);

    /* queued cancel: never reaches the engine */
    req_params(&rp, 0);
    hy_req_submit(shm, &rp, prompt, 2, &h[0], err);
    hy_req_cancel(shm, h[0], err);
    n = hy_req_read(shm, h[0], out, 4, 0, &st, err);
    HY_T_OK(n == 0 && st.done && st.state == HY_REQ_CANCELLED && hy_req_take(shm, &idx) == HY_ENOENT,
            "cancel of a queued request: final at once, engine never sees it");
    hy_req_release(shm, h[0], err);
    HY_T_OK(hy_req_cancel(shm, h[0], err) == HY_ENOENT, "stale handle refused: %s", err);

    /* running cancel: tokens already pushed stay readable */
    hy_req_submit(shm, &rp, prompt, 2, &h[0], err);
    hy_req_take(shm, &idx);
    memset(&t, 0, sizeof t);
    t.token = 9;
    hy_req_push(shm, idx, &t);
    hy_req_cancel(shm, h[0], err);
    if (hy_req_cancel_requested(shm, idx))
        hy_req_finish(shm, idx, HY_REQ_CANCELLED, HY_FINISH_CANCELLED, 0, NULL);
    n = hy_req_read(shm, h[0], out, 4, 100, &st, err);
    i = hy_req_read(shm, h[0], out + 1, 3, 100, &st, err);
    HY_T_OK(n == 1 && out[0].token == 9 && i == 0 && st.done && st.state == HY_REQ_CANCELLED &&
                st.finish_reason == HY_FINISH_CANCELLED,
            "cancel of a running request: engine sees the flag, pushed token still read");
    hy_req_release(shm, h[0], err);

    /* every slot busy -> EFULL; priorities taken lowest first */
    for (i = 0; i < 8; i++) {
        req_params(&rp, i == 5 ? -1 : i);
        ok &= hy_req_submit(shm, &rp, prompt, 2, &h[i], err) == HY_OK;
    }
    HY_T_OK(ok && hy_req_submit(shm, &rp, prompt, 2, &x, err) == HY_EFULL &&
                atomic_load(&s->requests[HY_STATS_REQ_REJECTED]) == 1,
            "all 8 slots busy: HY_EFULL and a rejected count (%s)", err);
    HY_T_OK(hy_req_take(shm, &idx) == HY_OK && idx == (int32_t)h[5].idx,
            "priority -1 request taken first");
    hy_req_finish(shm, idx, HY_REQ_ERROR, HY_FINISH_ERROR, HY_EIO, "backend failed");
    n = hy_req_read(shm, h[5], out, 4, 0, &st, err);
    HY_T_OK(st.done && st.state == HY_REQ_ERROR && strcmp(st.error_msg, "backend failed") == 0,
            "error status and message reach the worker");
    HY_T_OK(hy_req_take(shm, &idx) == HY_OK && idx == (int32_t)h[0].idx, "then FIFO among equals");
    hy_req_finish(shm, idx, HY_REQ_DONE, HY_FINISH_STOP, 0, NULL);
    for (i = 0; i < 8; i++)
        hy_req_release(shm, h[i], err);
    HY_T_OK(atomic_load(&s->slots_used) == 0 && atomic_load(&s->running) == 0 &&
                atomic_load(&s->waiting) == 0,
            "all slots free again; running/waiting gauges back to 0");
}

static void test_reap(hy_shm_t *shm)
{
    hy_req_params_t rp;
    hy_req_handle_t h;
    hy_stats_t *s = hy_shm_stats(shm);
    int32_t prompt[2] = {1, 2}, idx, reaped, i, nq = 0;
    int fds[2];
    char c;
    pid_t pid;

    req_params(&rp, 0);
    if (pipe(fds) != 0)
        return;
    pid = fork();
    if (pid == 0) {
        hy_shm_t *w;
        if (hy_shm_attach(&w, inst, err) != HY_OK)
            _exit(1);
        for (i = 0; i < 3; i++)
            hy_req_submit(w, &rp, prompt, 2, &h, err);
        if (write(fds[1], "x", 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    if (read(fds[0], &c, 1) != 1)
        return;
    hy_req_take(shm, &idx); /* one of its requests is running */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    reaped = hy_shm_reap_owner(shm, pid);
    for (i = 0; i < 8; i++)
        nq += atomic_load(&hy_req_slot(shm, i)->state) == HY_REQ_QUEUED;
    HY_T_OK(reaped == 3 && nq == 0 && hy_req_cancel_requested(shm, idx),
            "kill -9 of a worker: 3 requests reaped, queued ones cancelled, running one flagged");
    HY_T_OK(atomic_load(&s->slots_used) == 1, "the running one's slot waits for the engine");
    hy_req_finish(shm, idx, HY_REQ_CANCELLED, HY_FINISH_CANCELLED, 0, NULL);
    HY_T_OK(atomic_load(&s->slots_used) == 0 && atomic_load(&s->reaped_requests) == 3,
            "engine finish frees the last slot");
    HY_T_OK(hy_shm_reap_owner(shm, pid) == 0, "reaping twice is a no-op");
    close(fds[0]);
    close(fds[1]);
}

int main(void)
{
    hy_shm_params_t p;
    hy_shm_t *shm;
    hy_req_params_t rp;
    hy_req_handle_t h;
    int32_t prompt[300];

    snprintf(inst, sizeof inst, "test-ring-%d", (int)getpid());
    hy_shm_params_default(&p);
    p.n_pages = 32;
    p.n_request_slots = 8;
    p.max_prompt_tokens = 256;
    p.ring_capacity = 16;
    p.ring_top_logprobs = 2;
    if (hy_shm_create(&shm, inst, &p, err) != HY_OK) {
        HY_T_OK(0, "create: %s", err);
        return hy_t_done();
    }
    memset(prompt, 0, sizeof prompt);
    req_params(&rp, 0);
    HY_T_OK(hy_req_submit(shm, &rp, prompt, 300, &h, err) == HY_ERANGE,
            "prompt longer than max_prompt_tokens refused: %s", err);
    rp.sampling.top_p = 0;
    HY_T_OK(hy_req_submit(shm, &rp, prompt, 3, &h, err) == HY_ERANGE,
            "bad sampling parameters refused: %s", err);
    rp.sampling.top_p = 1;
    rp.sampling.n_logprobs = 5;
    HY_T_OK(hy_req_submit(shm, &rp, prompt, 3, &h, err) == HY_ERANGE,
            "more top_logprobs than the ring stores refused: %s", err);
    test_stream(shm);
    test_latency(shm);
    test_cancel_full_priority(shm);
    test_reap(shm);
    hy_shm_close(shm);
    return hy_t_done();
}
