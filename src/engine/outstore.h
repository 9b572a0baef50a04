/*
 * outstore.h - where a running sequence's pages beyond its hot window live
 * (runner.h, hot_blocks): units of the full group's page bytes
 * (kv_page_read's layout), each in a host RAM slot (warm) or, when the
 * slots are full, only in a spill file under a directory (cold).
 *
 * A unit is written once (KV of past positions never changes), so a warm
 * unit that already has its file copy leaves RAM for free; the one that
 * leaves is chosen by a clock over the slots (the attention op marks each
 * unit it reads, backend.h hy_out_view_t: an approximation of least
 * recently used).  The op reads a cold unit's rows straight from the
 * file and checks them against the CRC-32C of each run written
 * (hy_out_read), so a step whose bytes are not what was written fails and
 * its logits are not used.  The blocks a token chooses change slowly, so
 * after a step the store hands every cold unit it read to its I/O thread,
 * which reads and checks the whole unit into a RAM slot while the next
 * step computes and publishes the slot as soon as it is ready (that
 * step's later layers find the unit warm).  The next end of a step waits
 * for what is still in flight: a read lags at most one step.
 *
 * The file is created unlinked (it holds nothing a restart could use: a
 * running sequence does not survive its process) and allocated whole at
 * init, so a full disk refuses the start instead of failing a request.
 * Accounting: used units = warm + cold (a unit on its way up is cold until
 * it arrives); warm slots used + pending + free = n_warm.  The engine
 * thread calls everything; the op only reads through the view.
 */
#ifndef HY_ENGINE_OUTSTORE_H
#define HY_ENGINE_OUTSTORE_H

#include "backend/backend.h"
#include "ipc/shm.h"

#include <pthread.h>

typedef struct {
    uint64_t unit_bytes;  /* >= 1 */
    int32_t n_units;      /* pages out at most (>= 1) */
    int32_t n_warm;       /* RAM slots; 0 or >= n_units: every unit in RAM, no file */
    const char *dir;      /* the spill file's directory (created if missing) when
                             n_warm < n_units */
    uint64_t run_bytes;   /* the checked runs (layout.h hy_kv_layout_out_run); 0:
                             whole units */
} hy_outstore_opts_t;

typedef struct {
    int32_t units, used;         /* unit ids; of which in use */
    int32_t warm, warm_used;     /* RAM slots; of which hold a unit */
    int32_t cold;                /* used units only in the file */
    int32_t pending;             /* slots the I/O thread is filling */
    uint64_t file_bytes;         /* the spill file (0: none) */
    uint64_t promotions;         /* cold units brought up to RAM */
    uint64_t promote_failures;   /* reads the I/O thread could not make or check */
    uint64_t spills;             /* units written to the file */
    uint64_t disk_write_bytes, disk_read_bytes;
    uint64_t disk_read_ns;       /* the I/O thread's reads (the op's are inside its time) */
} hy_outstore_counts_t;

typedef struct {
    hy_out_view_t view;          /* what the batch passes to the backend */
    hy_outstore_opts_t o;
    uint8_t *ram;                /* [n_warm * unit_bytes] */
    int32_t *slot;               /* [n_units] RAM slot, -1 */
    int32_t *slot_unit;          /* [n_warm] the unit a slot holds, -1 */
    uint8_t *ref;                /* [n_units] read since the clock last passed */
    uint8_t *on_disk;            /* [n_units] written to the file */
    uint32_t *crc;               /* [n_units * runs] of the file copy, run by run */
    uint64_t runs;               /* runs a unit */
    int32_t *free_units, n_free_units;
    int32_t *free_slots, n_free_slots;
    int32_t *wanted;             /* [n_units] cold units the op read this step */
    int32_t hand;
    /* the I/O thread's batch: the cold units one step read, each with a
     * slot taken for it (the counts under mu; a job's fields are the
     * engine's while the batch is not running) */
    int32_t *job_unit, *job_slot, *job_err; /* [n_warm]; job_err: 0, an errno,
                                                -1 short read, EBADMSG */
    uint8_t *job_in;             /* the thread published the slot */
    uint64_t *job_ns;
    int32_t *unit_job;           /* [n_units] its job in the batch, -1 */
    int32_t n_jobs, next_job, n_done;
    bool io_up, stop;
    pthread_t io;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    int fd;
    char path[4200];
    hy_outstore_counts_t c;
    /* where each file read (after a step) and write is timed, or NULL */
    hy_tier_hist_t *read_time, *write_time;
} hy_outstore_t;

int hy_outstore_init(hy_outstore_t *s, const hy_outstore_opts_t *o, char *err);
void hy_outstore_free(hy_outstore_t *s);

/* A free unit and where to put its bytes (a RAM slot, made free by
 * writing the clock's choice to the file when needed); HY_EFULL when
 * every unit is in use, HY_EIO when the file write failed (err says). */
int hy_outstore_take(hy_outstore_t *s, int32_t *unit, uint8_t **bytes, char *err);
/* A unit back (its bytes no longer needed) */
void hy_outstore_put(hy_outstore_t *s, int32_t unit);
/* After a step, whether or not it ran: waits for the reads the last call
 * started (a unit the I/O thread could not read or check stays cold and
 * is logged: the step that reads it next fails), then a failed read or
 * check of this step's fails it (HY_EIO, err names the unit, file and
 * offset), and the cold units it read are handed to the I/O thread. */
int hy_outstore_end_step(hy_outstore_t *s, char *err);
/* Waits for the I/O thread's reads and accounts them (tests; before
 * looking at slots between steps). */
void hy_outstore_sync(hy_outstore_t *s);
void hy_outstore_counts(const hy_outstore_t *s, hy_outstore_counts_t *c);

#endif
