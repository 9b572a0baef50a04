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
 * file; after the step the store brings every cold unit read up into a
 * slot (the blocks a token chooses change slowly: the next token finds
 * them warm) and checks its CRC-32C, failing the step when a unit's bytes
 * are not what was written or could not be read: the step's logits are
 * then not used.
 *
 * The file is created unlinked (it holds nothing a restart could use: a
 * running sequence does not survive its process) and allocated whole at
 * init, so a full disk refuses the start instead of failing a request.
 * Accounting: used units = warm + cold; warm slots used + free = n_warm.
 * The engine thread calls everything; the op only reads through the view.
 */
#ifndef HY_ENGINE_OUTSTORE_H
#define HY_ENGINE_OUTSTORE_H

#include "backend/backend.h"
#include "ipc/shm.h"

typedef struct {
    uint64_t unit_bytes;  /* >= 1 */
    int32_t n_units;      /* pages out at most (>= 1) */
    int32_t n_warm;       /* RAM slots; 0 or >= n_units: every unit in RAM, no file */
    const char *dir;      /* the spill file's directory (created if missing) when
                             n_warm < n_units */
} hy_outstore_opts_t;

typedef struct {
    int32_t units, used;         /* unit ids; of which in use */
    int32_t warm, warm_used;     /* RAM slots; of which hold a unit */
    int32_t cold;                /* used units only in the file */
    uint64_t file_bytes;         /* the spill file (0: none) */
    uint64_t promotions;         /* cold units brought up to RAM */
    uint64_t spills;             /* units written to the file */
    uint64_t disk_write_bytes, disk_read_bytes;
    uint64_t disk_read_ns;       /* the reads after the steps (the op's are inside its time) */
} hy_outstore_counts_t;

typedef struct {
    hy_out_view_t view;          /* what the batch passes to the backend */
    hy_outstore_opts_t o;
    uint8_t *ram;                /* [n_warm * unit_bytes] */
    int32_t *slot;               /* [n_units] RAM slot, -1 */
    int32_t *slot_unit;          /* [n_warm] the unit a slot holds, -1 */
    uint8_t *ref;                /* [n_units] read since the clock last passed */
    uint8_t *on_disk;            /* [n_units] written to the file */
    uint32_t *crc;               /* [n_units] of the file copy */
    int32_t *free_units, n_free_units;
    int32_t *free_slots, n_free_slots;
    int32_t *wanted;             /* [n_units] cold units the op read this step */
    int32_t hand;
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
/* After a step, whether or not it ran: a failed read fails it (HY_EIO, err
 * names the file and offset); the cold units it read come up to RAM and
 * are checked (a mismatch: HY_EIO). */
int hy_outstore_end_step(hy_outstore_t *s, char *err);
void hy_outstore_counts(const hy_outstore_t *s, hy_outstore_counts_t *c);

#endif
