/*
 * pages.h - the KV page pool's bookkeeping: which page ids are free, their
 * reference counts, and each sequence's page list.  The page memory itself
 * belongs to the backend (hy_backend_i.kv_init); this only hands out ids.
 * The coordinator's shared-memory page table builds on the same rules:
 * a page is free exactly when its refcount is 0, and used + free = total.
 */
#ifndef HY_KV_PAGES_H
#define HY_KV_PAGES_H

#include "common/hy.h"

typedef struct {
    int32_t n_pages;
    int32_t n_free;
    int32_t *free_ids;  /* [n_pages] stack of free ids, top at n_free-1 */
    uint16_t *refcnt;   /* [n_pages] */
} hy_kv_pages_t;

/* One sequence's pages: pages[i] holds positions i*page_tokens .. +page_tokens-1. */
typedef struct {
    int32_t *pages;
    int32_t n_pages;
    int32_t cap;
    int32_t n_tokens;   /* positions already written */
    int32_t state_slot; /* recurrent-state slot + 1 (0 = none yet) */
} hy_kv_seq_t;

int hy_kv_pages_init(hy_kv_pages_t *p, int32_t n_pages, char *err);
void hy_kv_pages_free(hy_kv_pages_t *p);
/* -1 when the pool is empty. */
int32_t hy_kv_page_alloc(hy_kv_pages_t *p);
void hy_kv_page_unref(hy_kv_pages_t *p, int32_t id);
int32_t hy_kv_pages_used(const hy_kv_pages_t *p);

/* Make seq's page list cover n_total positions.  HY_EFULL (nothing
 * allocated) if the pool cannot. */
int hy_kv_seq_reserve(hy_kv_pages_t *p, hy_kv_seq_t *s, int32_t n_total,
                      int32_t page_tokens, char *err);
/* Return all of seq's pages and empty it. */
void hy_kv_seq_release(hy_kv_pages_t *p, hy_kv_seq_t *s);

#endif
