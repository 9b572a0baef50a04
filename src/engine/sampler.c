/*
 * sampler.c - per-sequence token sampling: logit bias, penalties, top-k,
 * top-p, min-p, temperature and a seeded draw, plus the logprobs the API
 * reports.  Built for vocabularies of ~150k: the vocabulary is never fully
 * sorted; top-k uses quickselect, top-p sorts growing slices of the best
 * remaining candidates until the mass is reached, and penalty counts live in
 * a small hash table so that accepting a token is O(1).
 */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float logit;
    int32_t id;
} hy_sampler_cand_t;

typedef struct {
    int32_t token;
    int32_t n_gen; /* generated occurrences in the window */
    int32_t n_all; /* prompt + generated occurrences in the window */
} hy_sampler_count_t;

struct hy_sampler {
    hy_sampling_t p;
    int32_t n_vocab;
    uint64_t rng[4]; /* xoshiro256** state */
    uint64_t n_draws; /* numbers drawn from it: the stream's position */

    /* Penalty counts: dense entries plus an open-addressing index into them
     * (index[i] = entry number or -1).  Entries are never removed, so the
     * index needs no tombstones; a token whose counts drop to zero through
     * the window simply costs one skipped entry per step. */
    hy_sampler_count_t *counts; /* (n_counts) */
    int32_t n_counts, cap_counts;
    int32_t *index;             /* (index_cap), power of two */
    uint32_t index_cap;

    /* penalty_last_n window: ring of the last n tokens, generated ones
     * stored as ~token (negative) so the flag costs no extra memory. */
    int32_t *window; /* (penalty_last_n) */
    int32_t window_len, window_head;

    hy_sampler_cand_t *cand; /* (n_vocab) scratch, allocated on first need */
    double *wts;             /* (n_vocab) draw_full's weights, allocated on first need */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 (Blackman & Vigna). ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static double rng_uniform(hy_sampler_t *s)
{
    s->n_draws++;
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

/* ---- construction ---- */

int hy_sampler_create(hy_sampler_t **out, const hy_sampling_t *p, int32_t n_vocab,
                      char *err)
{
    hy_sampler_t *s = NULL;
    uint64_t x;
    int rc;

    *out = NULL;
    if (n_vocab <= 0) {
        rc = hy_err(err, HY_EINVAL, "sampler: n_vocab = %d: must be > 0", (int)n_vocab);
        goto fail;
    }
    rc = hy_sampling_validate(p, n_vocab, err);
    if (rc != HY_OK)
        goto fail;
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        rc = hy_err(err, HY_ENOMEM, "sampler: out of memory");
        goto fail;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    if (p->penalty_last_n > 0) {
        s->window = malloc((size_t)p->penalty_last_n * sizeof *s->window);
        if (s->window == NULL) {
            rc = hy_err(err, HY_ENOMEM, "sampler: out of memory for penalty window");
            goto fail;
        }
    }
    *out = s;
    return HY_OK;
fail:
    hy_sampler_free(s);
    return rc;
}

uint64_t hy_sampler_draws(const hy_sampler_t *s)
{
    return s->n_draws;
}

void hy_sampler_skip(hy_sampler_t *s, uint64_t n)
{
    while (s->n_draws < n)
        (void)rng_uniform(s);
}

void hy_sampler_free(hy_sampler_t *s)
{
    if (s == NULL)
        return;
    free(s->counts);
    free(s->index);
    free(s->window);
    free(s->cand);
    free(s->wts);
    free(s);
}

/* ---- penalty counts ---- */

static inline uint32_t count_hash(int32_t token, uint32_t mask)
{
    return ((uint32_t)token * 0x9E3779B1u) & mask; /* Fibonacci hashing */
}

/* Index slot holding token, or the empty slot where it would go. */
static uint32_t count_slot(const hy_sampler_t *s, int32_t token)
{
    uint32_t mask = s->index_cap - 1, i = count_hash(token, mask);

    while (s->index[i] >= 0 && s->counts[s->index[i]].token != token)
        i = (i + 1) & mask;
    return i;
}

/* Grows the index so it stays at most half full; rebuilds it from entries. */
static int count_grow(hy_sampler_t *s)
{
    uint32_t cap = s->index_cap ? s->index_cap * 2 : 64;
    int32_t *index = malloc((size_t)cap * sizeof *index);

    if (index == NULL)
        return HY_ENOMEM;
    memset(index, 0xff, (size_t)cap * sizeof *index);
    free(s->index);
    s->index = index;
    s->index_cap = cap;
    for (int32_t e = 0; e < s->n_counts; e++)
        s->index[count_slot(s, s->counts[e].token)] = e;
    return HY_OK;
}

static hy_sampler_count_t *count_get(hy_sampler_t *s, int32_t token, bool create)
{
    uint32_t slot;

    if (s->index_cap == 0) {
        if (!create || count_grow(s) != HY_OK)
            return NULL;
    }
    slot = count_slot(s, token);
    if (s->index[slot] >= 0)
        return &s->counts[s->index[slot]];
    if (!create)
        return NULL;
    if ((uint32_t)(s->n_counts + 1) * 2 > s->index_cap) {
        if (count_grow(s) != HY_OK)
            return NULL;
        slot = count_slot(s, token);
    }
    if (s->n_counts == s->cap_counts) {
        int32_t cap = s->cap_counts ? s->cap_counts * 2 : 32;
        hy_sampler_count_t *c = realloc(s->counts, (size_t)cap * sizeof *c);

        if (c == NULL)
            return NULL;
        s->counts = c;
        s->cap_counts = cap;
    }
    s->counts[s->n_counts] = (hy_sampler_count_t){ .token = token };
    s->index[slot] = s->n_counts;
    return &s->counts[s->n_counts++];
}

/* Adds one occurrence and, with a window, retires the oldest one. */
static int count_add(hy_sampler_t *s, int32_t token, bool generated)
{
    hy_sampler_count_t *c;

    if (token < 0 || token >= s->n_vocab)
        return HY_EINVAL;
    c = count_get(s, token, true);
    if (c == NULL)
        return HY_ENOMEM;
    c->n_all++;
    c->n_gen += generated;
    if (s->window == NULL)
        return HY_OK;
    if (s->window_len == s->p.penalty_last_n) {
        int32_t old = s->window[s->window_head];
        bool old_gen = old < 0;
        hy_sampler_count_t *o = count_get(s, old_gen ? ~old : old, false);

        if (o != NULL) { /* always present: it was counted when it entered */
            o->n_all--;
            o->n_gen -= old_gen;
        }
    } else {
        s->window_len++;
    }
    s->window[s->window_head] = generated ? ~token : token;
    s->window_head = (s->window_head + 1) % s->p.penalty_last_n;
    return HY_OK;
}

int hy_sampler_accept_prompt(hy_sampler_t *s, const int32_t *tokens, size_t n)
{
    int rc = HY_OK;

    /* Prompt tokens only feed repetition_penalty; without it and without a
     * window (where they would push generated tokens out) they change
     * nothing, so a long prompt costs nothing. */
    if (s->p.repetition_penalty == 1.0f && s->window == NULL)
        return HY_OK;
    for (size_t i = 0; i < n && rc == HY_OK; i++)
        rc = count_add(s, tokens[i], false);
    return rc;
}

int hy_sampler_accept(hy_sampler_t *s, int32_t token)
{
    return count_add(s, token, true);
}

/* ---- candidate selection ---- */

/* Total order: higher logit first, then lower id, so every selection is
 * deterministic and top_k = 1 agrees with greedy on ties. */
static inline bool cand_better(const hy_sampler_cand_t *a, const hy_sampler_cand_t *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const hy_sampler_cand_t *a = pa, *b = pb;

    return cand_better(a, b) ? -1 : cand_better(b, a) ? 1 : 0;
}

static inline void cand_swap(hy_sampler_cand_t *a, hy_sampler_cand_t *b)
{
    hy_sampler_cand_t t = *a;

    *a = *b;
    *b = t;
}

/* Quickselect: rearranges c[lo, hi) so that c[nth] holds the element a full
 * sort would put there, better ones before it, worse ones after.  The pivot
 * position comes from a private generator (not the sampling RNG, so the
 * token stream does not depend on how selection went). */
static void cand_nth(hy_sampler_cand_t *c, size_t lo, size_t hi, size_t nth)
{
    uint64_t x = 0x2545F4914F6CDD1Dull ^ hi;

    while (hi - lo > 1) {
        size_t piv = lo + splitmix64(&x) % (hi - lo), store = lo;

        cand_swap(&c[piv], &c[hi - 1]);
        for (size_t i = lo; i < hi - 1; i++) {
            if (cand_better(&c[i], &c[hi - 1]))
                cand_swap(&c[i], &c[store++]);
        }
        cand_swap(&c[store], &c[hi - 1]);
        if (store == nth)
            return;
        if (nth < store)
            hi = store;
        else
            lo = store + 1;
    }
}

/* Smallest best-first prefix of c[0, n) whose probability mass (at
 * temperature 1, renormalised over c) reaches top_p.  Sorts slices of the
 * best remaining candidates of growing size, so a peaked distribution costs
 * one O(n) selection and a sort of a few dozen entries.  Returns the new n. */
static size_t cand_top_p(hy_sampler_cand_t *c, size_t n, float maxl, double top_p)
{
    double total = 0.0, cum = 0.0, target;
    size_t done = 0, slice = 64;

    for (size_t i = 0; i < n; i++)
        total += exp((double)c[i].logit - maxl);
    target = top_p * total;
    while (done < n) {
        size_t end = HY_MIN(n, done + slice);

        if (end < n)
            cand_nth(c, done, n, end - 1);
        qsort(c + done, end - done, sizeof *c, cand_cmp);
        for (size_t i = done; i < end; i++) {
            cum += exp((double)c[i].logit - maxl);
            if (cum >= target)
                return i + 1;
        }
        done = end;
        slice *= 4;
    }
    return n; /* rounding left the sum just short of target: keep all */
}

/* Keeps the top n (best first, ties -> lowest id) of logits in ids/lps. */
static int32_t top_n_logprobs(const float *logits, int32_t n_vocab, int32_t n, float maxl,
                              double log_z, int32_t *ids, float *lps)
{
    hy_sampler_cand_t heap[HY_SAMPLING_MAX_LOGPROBS]; /* sorted best-first */
    int32_t len = 0;

    n = HY_MIN(n, n_vocab);
    for (int32_t v = 0; v < n_vocab && n > 0; v++) {
        hy_sampler_cand_t c = { logits[v], v };
        int32_t j;

        if (len == n && !cand_better(&c, &heap[len - 1]))
            continue;
        /* insertion into a <= 20 element sorted array beats a heap here */
        j = len < n ? len++ : len - 1;
        while (j > 0 && cand_better(&c, &heap[j - 1])) {
            heap[j] = heap[j - 1];
            j--;
        }
        heap[j] = c;
    }
    for (int32_t i = 0; i < len; i++) {
        ids[i] = heap[i].id;
        lps[i] = (float)((double)heap[i].logit - maxl - log_z);
    }
    return len;
}

/* ---- sampling ---- */

static void apply_bias_and_penalties(const hy_sampler_t *s, float *logits)
{
    const hy_sampling_t *p = &s->p;

    for (int32_t i = 0; i < p->n_logit_bias; i++)
        logits[p->logit_bias[i].token] += p->logit_bias[i].bias;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
        p->frequency_penalty == 0.0f)
        return;
    for (int32_t e = 0; e < s->n_counts; e++) {
        const hy_sampler_count_t *c = &s->counts[e];
        float *l = &logits[c->token];

        if (c->n_all > 0 && p->repetition_penalty != 1.0f)
            *l = *l > 0.0f ? *l / p->repetition_penalty : *l * p->repetition_penalty;
        if (c->n_gen > 0)
            *l -= (float)c->n_gen * p->frequency_penalty + p->presence_penalty;
    }
}

/* Draws from c[0, n) with weights exp((logit - maxl) / temperature). */
static int32_t draw(hy_sampler_t *s, const hy_sampler_cand_t *c, size_t n, float maxl)
{
    double inv_t = 1.0 / s->p.temperature, total = 0.0, u, cum = 0.0;

    for (size_t i = 0; i < n; i++)
        total += exp(((double)c[i].logit - maxl) * inv_t);
    u = rng_uniform(s) * total;
    for (size_t i = 0; i < n; i++) {
        cum += exp(((double)c[i].logit - maxl) * inv_t);
        if (u < cum)
            return c[i].id;
    }
    return c[n - 1].id; /* u landed in the rounding gap at the very top */
}

/* Same draw straight over the logits when no candidate list is needed
 * (top_k and top_p off): tokens below min_thr weigh zero.  The weights of
 * the first pass are kept for the cumulative one: the same doubles summed
 * in the same order, so the same token, without a second exp() per entry
 * (up to n_vocab of them: 262,144 for Gemma).  Without the scratch (out of
 * memory) they are computed again, to the same bits. */
static int32_t draw_full(hy_sampler_t *s, const float *logits, float maxl, float min_thr)
{
    double inv_t = 1.0 / s->p.temperature, total = 0.0, u, cum = 0.0;
    int32_t last = 0;
    double *w;

    if (s->wts == NULL)
        s->wts = malloc((size_t)s->n_vocab * sizeof *s->wts);
    w = s->wts;
    for (int32_t v = 0; v < s->n_vocab; v++) {
        if (logits[v] >= min_thr) {
            double e = exp(((double)logits[v] - maxl) * inv_t);
            if (w != NULL)
                w[v] = e;
            total += e;
        }
    }
    u = rng_uniform(s) * total;
    for (int32_t v = 0; v < s->n_vocab; v++) {
        if (logits[v] >= min_thr) {
            cum += w != NULL ? w[v] : exp(((double)logits[v] - maxl) * inv_t);
            last = v;
            if (u < cum)
                return v;
        }
    }
    return last;
}

static int32_t sample_from(hy_sampler_t *s, float *logits, hy_sample_out_t *out);

int32_t hy_sampler_sample(hy_sampler_t *s, float *logits, hy_sample_out_t *out)
{
    apply_bias_and_penalties(s, logits);
    return sample_from(s, logits, out);
}

int32_t hy_sampler_resample(hy_sampler_t *s, float *logits, hy_sample_out_t *out)
{
    return sample_from(s, logits, out);
}

/* The draw itself, from logits that carry bias and penalties already. */
static int32_t sample_from(hy_sampler_t *s, float *logits, hy_sample_out_t *out)
{
    const hy_sampling_t *p = &s->p;
    int32_t n_vocab = s->n_vocab, best = 0, token;
    float maxl = -INFINITY, min_thr = -INFINITY;
    double log_z = 0.0;
    size_t n;

    /* argmax with ties to the lowest id; also the NaN check */
    for (int32_t v = 0; v < n_vocab; v++) {
        if (isnan(logits[v]))
            return HY_EINVAL;
        if (logits[v] > maxl) {
            maxl = logits[v];
            best = v;
        }
    }
    if (maxl == -INFINITY || maxl == INFINITY)
        return HY_EINVAL;
    if (p->min_p > 0.0f)
        min_thr = maxl + logf(p->min_p); /* p_i >= min_p * p_max */

    bool use_k = p->top_k > 0 && p->top_k < n_vocab;
    bool use_p = p->top_p < 1.0f;

    if (p->temperature == 0.0f || p->top_k == 1) {
        token = best;
    } else if (!use_k && !use_p) {
        token = draw_full(s, logits, maxl, min_thr);
    } else {
        if (s->cand == NULL) {
            s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
            if (s->cand == NULL)
                return HY_ENOMEM;
        }
        n = (size_t)n_vocab;
        for (int32_t v = 0; v < n_vocab; v++)
            s->cand[v] = (hy_sampler_cand_t){ logits[v], v };
        if (use_k) {
            cand_nth(s->cand, 0, n, (size_t)p->top_k - 1);
            n = (size_t)p->top_k;
        }
        if (use_p)
            n = cand_top_p(s->cand, n, maxl, p->top_p);
        if (p->min_p > 0.0f) {
            size_t kept = 0;

            for (size_t i = 0; i < n; i++) {
                if (s->cand[i].logit >= min_thr)
                    s->cand[kept++] = s->cand[i];
            }
            n = kept; /* >= 1: the max itself always passes */
        }
        token = draw(s, s->cand, n, maxl);
    }

    if (out != NULL) {
        double z = 0.0;

        for (int32_t v = 0; v < n_vocab; v++)
            z += exp((double)logits[v] - maxl);
        log_z = log(z);
        out->token = token;
        out->logprob = (float)((double)logits[token] - maxl - log_z);
        out->n_top = top_n_logprobs(logits, n_vocab, p->n_logprobs, maxl, log_z,
                                    out->top_ids, out->top_logprobs);
    }
    return token;
}
