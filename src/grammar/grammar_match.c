/*
 * grammar_match.c - the pushdown automaton: pools of interned stack nodes,
 * the closure that turns a position into the set of positions that can
 * consume a byte (entering called rules, leaving finished ones), one-byte
 * steps over a set of stacks, and the matcher a sequence carries (with the
 * trigger scan of lazy grammars).
 *
 * Hypothetical walks (mask computation) create nodes in the same pool and
 * roll them back afterwards: nodes are removed from the hash table in
 * reverse order of insertion, which keeps linear probing consistent.
 */
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- sets ---------------------------------------------------------------- */

int hy_gset_push(hy_gset_t *s, int32_t id)
{
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 16;
        int32_t *ids = realloc(s->ids, sizeof *ids * (size_t)cap);

        if (ids == NULL)
            return HY_ENOMEM;
        s->ids = ids;
        s->cap = cap;
    }
    s->ids[s->n++] = id;
    return HY_OK;
}

void hy_gset_free(hy_gset_t *s)
{
    free(s->ids);
    memset(s, 0, sizeof *s);
}

int hy_gset_copy(hy_gset_t *dst, const hy_gset_t *src)
{
    if (dst->cap < src->n) {
        int32_t *ids = realloc(dst->ids, sizeof *ids * (size_t)src->n);

        if (ids == NULL)
            return HY_ENOMEM;
        dst->ids = ids;
        dst->cap = src->n;
    }
    if (src->n > 0)
        memcpy(dst->ids, src->ids, sizeof *src->ids * (size_t)src->n);
    dst->n = src->n;
    dst->accept = src->accept;
    dst->escape = src->escape;
    memcpy(dst->follow, src->follow, sizeof dst->follow);
    return HY_OK;
}

static int id_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return x < y ? -1 : x > y;
}

void hy_gset_sort(hy_gset_t *s)
{
    if (s->n > 1)
        qsort(s->ids, (size_t)s->n, sizeof *s->ids, id_cmp);
}

/* ---- node pools ---------------------------------------------------------- */

static inline uint32_t node_hash(int32_t state, int32_t parent)
{
    uint64_t h = ((uint64_t)(uint32_t)state << 32) | (uint32_t)parent;

    h *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

int hy_gpool_init(hy_gpool_t *p, const struct hy_grammar *g)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->cap = 256;
    p->tcap = 512;
    p->wcap = 256;
    p->stamp = 1;
    p->nodes = malloc(sizeof *p->nodes * (size_t)p->cap);
    p->slot = malloc(sizeof *p->slot * (size_t)p->cap);
    p->seen = calloc((size_t)p->cap, sizeof *p->seen);
    p->table = malloc(sizeof *p->table * p->tcap);
    p->work = malloc(sizeof *p->work * (size_t)p->wcap);
    if (!p->nodes || !p->slot || !p->seen || !p->table || !p->work) {
        hy_gpool_free(p);
        return HY_ENOMEM;
    }
    memset(p->table, 0xff, sizeof *p->table * p->tcap);
    return HY_OK;
}

void hy_gpool_free(hy_gpool_t *p)
{
    for (int32_t i = 0; i < p->mrows; i++)
        free(p->mrow[i]);
    free(p->mrow);
    free(p->mids);
    free(p->nodes);
    free(p->slot);
    free(p->seen);
    free(p->table);
    free(p->work);
    memset(p, 0, sizeof *p);
}

static int pool_rehash(hy_gpool_t *p)
{
    uint32_t cap = p->tcap * 2, mask = cap - 1;
    int32_t *t = malloc(sizeof *t * cap);

    if (t == NULL)
        return HY_ENOMEM;
    memset(t, 0xff, sizeof *t * cap);
    /* in id order, so that removing in reverse id order stays valid */
    for (int32_t i = 0; i < p->n; i++) {
        uint32_t h = node_hash(p->nodes[i].state, p->nodes[i].parent) & mask;

        while (t[h] >= 0)
            h = (h + 1) & mask;
        t[h] = i;
        p->slot[i] = (int32_t)h;
    }
    free(p->table);
    p->table = t;
    p->tcap = cap;
    return HY_OK;
}

/* The node (state, parent), interned; -1 when out of memory. */
int32_t hy_gpool_node(hy_gpool_t *p, int32_t state, int32_t parent)
{
    uint32_t mask = p->tcap - 1, h = node_hash(state, parent) & mask;
    int32_t id;

    while ((id = p->table[h]) >= 0) {
        if (p->nodes[id].state == state && p->nodes[id].parent == parent)
            return id;
        h = (h + 1) & mask;
    }
    if (p->n == p->cap) {
        int32_t cap = p->cap * 2;
        hy_gnode_t *nodes = realloc(p->nodes, sizeof *nodes * (size_t)cap);
        int32_t *slot;
        uint32_t *seen;

        if (nodes == NULL)
            return -1;
        p->nodes = nodes;
        if ((slot = realloc(p->slot, sizeof *slot * (size_t)cap)) == NULL)
            return -1;
        p->slot = slot;
        if ((seen = realloc(p->seen, sizeof *seen * (size_t)cap)) == NULL)
            return -1;
        p->seen = seen;
        p->cap = cap;
    }
    id = p->n++;
    p->nodes[id] = (hy_gnode_t){ state, parent };
    p->seen[id] = 0;
    p->table[h] = id;
    p->slot[id] = (int32_t)h;
    if ((uint32_t)p->n * 2 > p->tcap && pool_rehash(p) != HY_OK) {
        /* undo, so the pool stays consistent */
        p->table[p->slot[id]] = -1;
        p->n--;
        return -1;
    }
    return id;
}

void hy_gpool_rollback(hy_gpool_t *p, int32_t mark)
{
    while (p->n > mark) {
        p->n--;
        p->table[p->slot[p->n]] = -1;
    }
}

void hy_gpool_reset(hy_gpool_t *p)
{
    hy_gpool_rollback(p, 0);
    for (int32_t i = 0; i < p->mrows; i++) {
        free(p->mrow[i]);
        p->mrow[i] = NULL;
    }
    p->n_mids = 0;
}

static int next_stamp(hy_gpool_t *p)
{
    if (++p->stamp == 0) {
        memset(p->seen, 0, sizeof *p->seen * (size_t)p->cap);
        p->stamp = 1;
    }
    return HY_OK;
}

/* Adds the closure of node to out under the current stamp: every position
 * reachable without consuming a byte that has byte edges; popping past
 * the bottom sets out->accept (ROOT) or out->escape (BOTTOM). */
static int expand_into(hy_gpool_t *p, int32_t node, hy_gset_t *out)
{
    const struct hy_grammar *g = p->g;
    int32_t sp = 0;

    p->work[sp++] = node; /* wcap >= 1 from hy_gpool_init */
    while (sp > 0) {
        int32_t n = p->work[--sp], parent;
        const hy_gstate_t *st;

        if (p->seen[n] == p->stamp)
            continue;
        p->seen[n] = p->stamp;
        st = &g->st[p->nodes[n].state];
        parent = p->nodes[n].parent;
        if (st->ne > 0 && hy_gset_push(out, n) != HY_OK)
            return HY_ENOMEM;
        /* room for every push this node can make */
        if (sp + st->nc + 1 > p->wcap) {
            int32_t cap = (sp + st->nc + 1) * 2;
            int32_t *w = realloc(p->work, sizeof *w * (size_t)cap);

            if (w == NULL)
                return HY_ENOMEM;
            p->work = w;
            p->wcap = cap;
        }
        for (int32_t k = 0; k < st->nc; k++) {
            const hy_gcall_t *c = &g->calls[st->c0 + k];
            int32_t ret = hy_gpool_node(p, c->to, parent), child;

            if (ret < 0)
                return HY_ENOMEM;
            child = hy_gpool_node(p, g->rule_start[c->rule], ret);
            if (child < 0)
                return HY_ENOMEM;
            /* the pool may have grown: st is re-read below */
            st = &g->st[p->nodes[n].state];
            p->work[sp++] = child;
        }
        if (st->final) {
            if (parent == HY_GNODE_ROOT) {
                out->accept = 1;
            } else if (parent == HY_GNODE_BOTTOM) {
                const uint64_t *f = g->follow ? g->follow[st->rule] : NULL;

                out->escape = 1;
                for (int w = 0; w < 4; w++)
                    out->follow[w] |= f ? f[w] : ~0ull; /* no sets: anything may follow */
            } else
                p->work[sp++] = parent;
        }
    }
    return HY_OK;
}

int hy_gpool_expand(hy_gpool_t *p, int32_t node, hy_gset_t *out)
{
    memset(out->follow, 0, sizeof out->follow);
    next_stamp(p);
    return expand_into(p, node, out);
}

/* The edge of state st containing byte b, or NULL. */
static inline const hy_gedge_t *find_edge(const struct hy_grammar *g, const hy_gstate_t *st,
                                          uint8_t b)
{
    const hy_gedge_t *e = g->edges + st->e0;
    int32_t lo = 0, hi = st->ne - 1;

    if (st->ne <= 6) {
        for (int32_t i = 0; i < st->ne; i++)
            if (b >= e[i].lo && b <= e[i].hi)
                return &e[i];
        return NULL;
    }
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;

        if (b < e[mid].lo)
            hi = mid - 1;
        else if (b > e[mid].hi)
            lo = mid + 1;
        else
            return &e[mid];
    }
    return NULL;
}

static int step_raw(hy_gpool_t *p, const hy_gset_t *in, uint8_t b, hy_gset_t *out);

/* Remembers out as the step of the one-stack set {node} by byte b.  Rows
 * are per node (256 entries), so a walk that keeps visiting a few stacks
 * keeps its memo in cache. */
static void memo_put(hy_gpool_t *p, int32_t node, uint8_t b, const hy_gset_t *out)
{
    if (out->n > 0xFFFFFF)
        return; /* an optimisation only: skip it */
    if (node >= p->mrows) {
        int32_t rows = HY_MAX(node + 1, p->mrows * 2), **r;

        if ((r = realloc(p->mrow, sizeof *r * (size_t)rows)) == NULL)
            return;
        memset(r + p->mrows, 0, sizeof *r * (size_t)(rows - p->mrows));
        p->mrow = r;
        p->mrows = rows;
    }
    if (p->mrow[node] == NULL) {
        if ((p->mrow[node] = malloc(sizeof **p->mrow * 256)) == NULL)
            return;
        memset(p->mrow[node], 0xff, sizeof **p->mrow * 256);
    }
    if (p->n_mids + out->n + 9 > p->cap_mids) {
        int64_t cap = p->cap_mids ? p->cap_mids * 2 : 8192;
        int32_t *m;

        while (cap < p->n_mids + out->n + 9)
            cap *= 2;
        if ((m = realloc(p->mids, sizeof *m * (size_t)cap)) == NULL)
            return;
        p->mids = m;
        p->cap_mids = cap;
    }
    p->mrow[node][b] = (int32_t)p->n_mids;
    p->mids[p->n_mids++] = out->n | (out->accept << 24) | (out->escape << 25);
    if (out->escape) { /* the follow mask, as 8 words */
        memcpy(p->mids + p->n_mids, out->follow, sizeof out->follow);
        p->n_mids += 8;
    }
    if (out->n > 0)
        memcpy(p->mids + p->n_mids, out->ids, sizeof *out->ids * (size_t)out->n);
    p->n_mids += out->n;
}

int hy_gpool_step(hy_gpool_t *p, const hy_gset_t *in, uint8_t b, hy_gset_t *out)
{
    int rc;

    out->n = 0;
    out->accept = out->escape = 0;
    memset(out->follow, 0, sizeof out->follow);
    if (p->memo_on && in->n == 1) {
        const int32_t *r;

        if ((r = hy_gpool_memo(p, in->ids[0], b)) != NULL) {
            int32_t n = r[0] & 0xFFFFFF;
            const int32_t *ids = r + 1;

            out->accept = (r[0] >> 24) & 1;
            out->escape = (r[0] >> 25) & 1;
            if (out->escape) {
                memcpy(out->follow, r + 1, sizeof out->follow);
                ids += 8;
            }
            for (int32_t i = 0; i < n; i++)
                if (hy_gset_push(out, ids[i]) != HY_OK)
                    return HY_ENOMEM;
            return HY_OK;
        }
    }
    rc = step_raw(p, in, b, out);
    if (rc == HY_OK && p->memo_on && in->n == 1)
        memo_put(p, in->ids[0], b, out);
    return rc;
}

/* One byte over every stack, without the memo. */
static int step_raw(hy_gpool_t *p, const hy_gset_t *in, uint8_t b, hy_gset_t *out)
{
    const struct hy_grammar *g = p->g;

    next_stamp(p);
    for (int32_t i = 0; i < in->n; i++) {
        int32_t n = in->ids[i];
        const hy_gedge_t *e = find_edge(g, &g->st[p->nodes[n].state], b);
        int32_t to;

        if (e == NULL)
            continue;
        if ((to = hy_gpool_node(p, e->to, p->nodes[n].parent)) < 0 ||
            expand_into(p, to, out) != HY_OK)
            return HY_ENOMEM;
    }
    return HY_OK;
}

/* ---- matcher --------------------------------------------------------------- */

/* The stacks at the start of the grammar. */
static int match_reset(hy_gmatch_t *m)
{
    int32_t n;

    hy_gpool_rollback(&m->pool, 0);
    m->cur.n = 0;
    m->cur.accept = m->cur.escape = 0;
    n = hy_gpool_node(&m->pool, m->g->rule_start[m->g->root], HY_GNODE_ROOT);
    if (n < 0 || hy_gpool_expand(&m->pool, n, &m->cur) != HY_OK)
        return HY_ENOMEM;
    hy_gset_sort(&m->cur);
    for (int i = 0; i < HY_GMATCH_MEMO; i++)
        m->memo[i].used = 0; /* node ids are reused after a reset */
    return HY_OK;
}

int hy_gmatch_create(hy_gmatch_t **out, hy_grammar_t *g, const hy_gmatch_opts_t *o, char *err)
{
    hy_gmatch_t *m;
    int32_t i;

    *out = NULL;
    if (o != NULL && (o->n_triggers < 0 || o->n_triggers > HY_GRAMMAR_MAX_TRIGGERS))
        return hy_err(err, HY_ERANGE, "grammar: %d triggers: at most %d", o ? o->n_triggers : 0,
                      HY_GRAMMAR_MAX_TRIGGERS);
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return hy_err(err, HY_ENOMEM, "grammar: out of memory");
    m->g = hy_grammar_ref(g);
    if (hy_gpool_init(&m->pool, g) != HY_OK)
        goto nomem;
    for (i = 0; o != NULL && i < o->n_triggers; i++) {
        if (o->trigger_len[i] == 0 || o->trigger_len[i] > HY_GRAMMAR_MAX_TRIGGER_LEN) {
            hy_gmatch_free(m);
            return hy_err(err, HY_ERANGE, "grammar: trigger %d has %zu bytes: must be 1..%d",
                          (int)i, o->trigger_len[i], HY_GRAMMAR_MAX_TRIGGER_LEN);
        }
        if ((m->triggers[i] = malloc(o->trigger_len[i])) == NULL)
            goto nomem;
        memcpy(m->triggers[i], o->triggers[i], o->trigger_len[i]);
        m->trigger_len[i] = o->trigger_len[i];
        m->n_triggers++;
    }
    m->active = m->n_triggers == 0;
    if (m->active && match_reset(m) != HY_OK)
        goto nomem;
    *out = m;
    return HY_OK;
nomem:
    hy_gmatch_free(m);
    return hy_err(err, HY_ENOMEM, "grammar: out of memory");
}

void hy_gmatch_free(hy_gmatch_t *m)
{
    if (m == NULL)
        return;
    hy_gpool_free(&m->pool);
    hy_gset_free(&m->cur);
    hy_gset_free(&m->a);
    hy_gset_free(&m->b);
    for (int32_t i = 0; i < m->n_triggers; i++)
        free(m->triggers[i]);
    for (int32_t i = 0; i < m->n_level; i++)
        hy_gset_free(&m->level[i]);
    free(m->level);
    for (int i = 0; i < HY_GMATCH_MEMO; i++) {
        free(m->memo[i].ids);
        free(m->memo[i].bits);
    }
    hy_grammar_unref(m->g);
    free(m);
}

/* Feeds bytes to the constrained grammar; all or nothing. */
static int feed(hy_gmatch_t *m, const uint8_t *s, size_t n, char *err)
{
    int32_t mark = m->pool.n;
    hy_gset_t *in = &m->cur, *out = &m->a;

    for (size_t i = 0; i < n; i++) {
        if (hy_gpool_step(&m->pool, in, s[i], out) != HY_OK) {
            hy_gpool_rollback(&m->pool, mark);
            return hy_err(err, HY_ENOMEM, "grammar: out of memory");
        }
        if (out->n == 0 && !(out->accept && i + 1 == n)) {
            hy_gpool_rollback(&m->pool, mark);
            if (in->n == 0 && in->accept)
                return hy_err(err, HY_EINVAL,
                              "grammar: byte %llu (0x%02x): the grammar already ended",
                              (unsigned long long)(m->offset + i), s[i]);
            return hy_err(err, HY_EINVAL, "grammar: byte %llu (0x%02x) is not allowed here",
                          (unsigned long long)(m->offset + i), s[i]);
        }
        in = out;
        out = out == &m->a ? &m->b : &m->a;
    }
    if (n > 0) {
        hy_gset_t t = m->cur;

        hy_gset_sort(in);
        m->cur = *in;
        *in = t; /* the old buffer becomes scratch */
    }
    m->offset += n;
    return HY_OK;
}

/* Lazy: free text is scanned for the triggers; from a trigger on the
 * grammar constrains the text, and once it has matched, the first byte
 * that does not continue it is free text again (the triggers re-arm). */
static int scan_triggers(hy_gmatch_t *m, const uint8_t *s, size_t n, char *err)
{
    for (size_t i = 0; i < n; i++) {
        if (m->active) {
            int rc;

            if (m->cur.n > 0) {
                char e2[HY_ERR_LEN];

                rc = feed(m, s + i, 1, e2);
                if (rc == HY_OK)
                    continue;
                if (!m->cur.accept)
                    return hy_err(err, rc, "%s", e2);
            }
            m->active = false; /* complete: back to free text */
            m->n_tail = 0;
        }
        if (m->n_tail == sizeof m->tail) {
            size_t keep = HY_GRAMMAR_MAX_TRIGGER_LEN - 1;

            memmove(m->tail, m->tail + m->n_tail - keep, keep);
            m->n_tail = keep;
        }
        m->tail[m->n_tail++] = s[i];
        m->offset++;
        for (int32_t t = 0; t < m->n_triggers; t++) {
            size_t tl = m->trigger_len[t];

            if (m->n_tail >= tl && memcmp(m->tail + m->n_tail - tl, m->triggers[t], tl) == 0) {
                int rc;

                if (match_reset(m) != HY_OK)
                    return hy_err(err, HY_ENOMEM, "grammar: out of memory");
                m->offset -= tl;
                m->active = true;
                if ((rc = feed(m, (const uint8_t *)m->triggers[t], tl, err)) != HY_OK)
                    return hy_err(err, rc,
                                  "grammar: the grammar does not start with trigger %d", (int)t);
                m->n_tail = 0;
                break;
            }
        }
    }
    /* matched completely: nothing else can follow inside the grammar */
    if (m->active && m->cur.n == 0 && m->cur.accept) {
        m->active = false;
        m->n_tail = 0;
    }
    return HY_OK;
}

bool hy_gmatch_try_token(hy_gmatch_t *m, int32_t id)
{
    const hy_gvocab_t *v = m->g->vocab;
    hy_tok_str_t p;
    int32_t mark = m->pool.n;
    const hy_gset_t *in = &m->cur;
    hy_gset_t *out = &m->a;
    bool ok = true;

    if (v == NULL || id < 0 || id >= v->n_vocab || m->ended)
        return false;
    if (hy_gvocab_is_eog(v, id))
        return hy_gmatch_can_end(m);
    p = hy_gvocab_piece(v, id);
    if (!m->active)
        return true;
    if (p.len == 0)
        return false;
    for (size_t i = 0; i < p.len && ok; i++) {
        if (hy_gpool_step(&m->pool, in, (uint8_t)p.ptr[i], out) != HY_OK)
            ok = false;
        else
            ok = out->n > 0 || (out->accept && i + 1 == p.len);
        in = out;
        out = out == &m->a ? &m->b : &m->a;
    }
    hy_gpool_rollback(&m->pool, mark);
    return ok;
}

int hy_gmatch_accept_bytes(hy_gmatch_t *m, const void *bytes, size_t n, char *err)
{
    int rc;

    if (m->ended)
        return hy_err(err, HY_EINVAL, "grammar: text after the end of generation");
    rc = m->n_triggers > 0 ? scan_triggers(m, bytes, n, err) : feed(m, bytes, n, err);
    return rc;
}

int hy_gmatch_accept_token(hy_gmatch_t *m, int32_t id, char *err)
{
    const hy_gvocab_t *v = m->g->vocab;
    hy_tok_str_t p;

    if (v == NULL)
        return hy_err(err, HY_EINVAL, "grammar: compiled without a vocabulary");
    if (id < 0 || id >= v->n_vocab)
        return hy_err(err, HY_EINVAL, "grammar: token %d is outside the vocabulary", (int)id);
    if (hy_gvocab_is_eog(v, id)) {
        if (!hy_gmatch_can_end(m))
            return hy_err(err, HY_EINVAL,
                          "grammar: end of generation at byte %llu, where the grammar is not "
                          "complete",
                          (unsigned long long)m->offset);
        m->ended = true;
        return HY_OK;
    }
    p = hy_gvocab_piece(v, id);
    if (p.len == 0) {
        if (!hy_gmatch_constrained(m))
            return HY_OK; /* free text may hold special tokens */
        return hy_err(err, HY_EINVAL, "grammar: token %d is special or empty: not allowed here",
                      (int)id);
    }
    return hy_gmatch_accept_bytes(m, p.ptr, p.len, err);
}

bool hy_gmatch_can_end(const hy_gmatch_t *m)
{
    return !m->active || m->cur.accept;
}

bool hy_gmatch_done(const hy_gmatch_t *m)
{
    return m->ended || (m->n_triggers == 0 && m->cur.n == 0 && m->cur.accept);
}

bool hy_gmatch_whole(const hy_gmatch_t *m)
{
    return m->n_triggers == 0;
}

hy_grammar_t *hy_gmatch_grammar(const hy_gmatch_t *m)
{
    return m->g;
}

bool hy_gmatch_constrained(const hy_gmatch_t *m)
{
    return m->active;
}

uint64_t hy_gmatch_offset(const hy_gmatch_t *m)
{
    return m->offset;
}

void hy_gmatch_mask_time(const hy_gmatch_t *m, uint64_t *ns, uint64_t *calls)
{
    *ns = m->mask_ns;
    *calls = m->mask_calls;
}
