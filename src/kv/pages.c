/*
 * pages.c - page id allocation with refcounts and per-sequence page lists.
 * Allocation is a stack pop, so it is O(1) and never scans the pool.
 */
#include "kv/pages.h"

#include <stdlib.h>
#include <string.h>

int hy_kv_pages_init(hy_kv_pages_t *p, int32_t n_pages, char *err)
{
    int32_t i;

    memset(p, 0, sizeof *p);
    if (n_pages <= 0)
        return hy_err(err, HY_EINVAL, "KV pool needs at least one page");
    p->free_ids = malloc(sizeof(int32_t) * (size_t)n_pages);
    p->refcnt = calloc((size_t)n_pages, sizeof(uint16_t));
    if (p->free_ids == NULL || p->refcnt == NULL) {
        hy_kv_pages_free(p);
        return hy_err(err, HY_ENOMEM, "out of memory for %d KV pages", n_pages);
    }
    p->n_pages = n_pages;
    /* lowest ids come out first */
    for (i = 0; i < n_pages; i++)
        p->free_ids[i] = n_pages - 1 - i;
    p->n_free = n_pages;
    return HY_OK;
}

void hy_kv_pages_free(hy_kv_pages_t *p)
{
    free(p->free_ids);
    free(p->refcnt);
    memset(p, 0, sizeof *p);
}

int32_t hy_kv_page_alloc(hy_kv_pages_t *p)
{
    int32_t id;

    if (p->n_free == 0)
        return -1;
    id = p->free_ids[--p->n_free];
    p->refcnt[id] = 1;
    return id;
}

void hy_kv_page_unref(hy_kv_pages_t *p, int32_t id)
{
    if (--p->refcnt[id] == 0)
        p->free_ids[p->n_free++] = id;
}

int32_t hy_kv_pages_used(const hy_kv_pages_t *p)
{
    return p->n_pages - p->n_free;
}

int hy_kv_seq_reserve(hy_kv_pages_t *p, hy_kv_seq_t *s, int32_t n_total,
                      int32_t page_tokens, char *err)
{
    int32_t need = (n_total + page_tokens - 1) / page_tokens, i;

    if (need <= s->n_pages)
        return HY_OK;
    if (need - s->n_pages > p->n_free)
        return hy_err(err, HY_EFULL, "KV cache full: %d more pages needed, %d free",
                      need - s->n_pages, p->n_free);
    if (need > s->cap) {
        int32_t cap = HY_MAX(need, s->cap * 2);
        int32_t *np = realloc(s->pages, sizeof(int32_t) * (size_t)cap);

        if (np == NULL)
            return hy_err(err, HY_ENOMEM, "out of memory");
        s->pages = np;
        s->cap = cap;
    }
    for (i = s->n_pages; i < need; i++)
        s->pages[i] = hy_kv_page_alloc(p);
    s->n_pages = need;
    return HY_OK;
}

void hy_kv_seq_release(hy_kv_pages_t *p, hy_kv_seq_t *s)
{
    int32_t i;

    for (i = 0; i < s->n_pages; i++)
        hy_kv_page_unref(p, s->pages[i]);
    free(s->pages);
    memset(s, 0, sizeof *s);
}
