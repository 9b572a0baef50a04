/*
 * metrics.c - the operator's view of an instance (metrics.h).  Counting is
 * a relaxed atomic add into the shared segment, so every worker (and the
 * nginx error path, which reaches a worker through the control socket)
 * adds to the same numbers; rendering reads them without locks.  Besides
 * the histograms, the latency windows (common/winstat.h) give Prometheus
 * summaries (P50/P95/P99 over the last 60 s) that a dashboard or
 * `hyserve-ctl top` shows as they are, without a PromQL query.
 */
#include "server/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/ring.h"
#include "server/json_out.h"

/* ---- counting ---------------------------------------------------------------- */

/* The label values of hy_stats_t.http's endpoint index; "other" last. */
static const char *const mt_endpoints[] = {
    "/v1/completions", "/v1/chat/completions", "/v1/infer", "/generate", "/v1/models",
    "/health", "/metrics", "/tokenize", "/detokenize", "other",
};
#define MT_N_ENDPOINTS ((int)HY_ARRAY_LEN(mt_endpoints))
_Static_assert(HY_ARRAY_LEN(mt_endpoints) <= HY_STATS_HTTP_ENDPOINTS,
               "hy_stats_t.http has room for every endpoint");

static const char *const mt_origins[HY_STATS_HTTP_ORIGINS] = {"hyserve", "nginx"};

int hy_metrics_endpoint(const char *path)
{
    int i;

    for (i = 0; path != NULL && i < MT_N_ENDPOINTS - 1; i++)
        if (strcmp(path, mt_endpoints[i]) == 0)
            return i;
    return MT_N_ENDPOINTS - 1;
}

const char *hy_metrics_endpoint_name(int endpoint)
{
    return endpoint >= 0 && endpoint < MT_N_ENDPOINTS ? mt_endpoints[endpoint] : "other";
}

void hy_metrics_count(hy_stats_t *st, hy_metrics_origin_t origin, const char *path, int status)
{
    if (status < 100 || status > 599 || (int)origin < 0 || (int)origin >= HY_STATS_HTTP_ORIGINS)
        return;
    atomic_fetch_add_explicit(&st->http[origin][hy_metrics_endpoint(path)][status - 100], 1,
                              memory_order_relaxed);
}

/* ---- nginx's own refusals ------------------------------------------------------ */

/* Every status the site's error_page hands over (nginx/hyserve.conf), with
 * the words a client sees.  502 arrives as 503: nginx could not reach a
 * generation worker (pool at max_conns, the instance is down, or its worker
 * died before the first byte: guard.h). */
static const struct {
    int status;
    const char *type, *code, *message;
    int retry_after;
} mt_nginx_errors[] = {
    {400, "invalid_request_error", "bad_request",
     "Malformed HTTP request (request line, headers or body framing).", 0},
    {401, "invalid_request_error", "invalid_api_key",
     "Incorrect or missing API key: send \"Authorization: Bearer <key>\".", 0},
    {403, "permission_error", "forbidden", "This path is not served to this address.", 0},
    {404, "invalid_request_error", "not_found", "Unknown path.", 0},
    {405, "invalid_request_error", "method_not_allowed",
     "Method not allowed; the API uses GET, HEAD and POST.", 0},
    {408, "invalid_request_error", "request_timeout", "The request was not sent in time.", 0},
    {413, "invalid_request_error", "request_too_large", "Request body too large.", 0},
    {414, "invalid_request_error", "uri_too_long", "Request URI too long.", 0},
    {429, "rate_limit_error", "rate_limit_exceeded",
     "Rate limit reached for this API key or address; retry shortly.", 1},
    {431, "invalid_request_error", "headers_too_large", "Request headers too large.", 0},
    {500, "server_error", "internal_error",
     "The server failed while handling the request; retry it.", 0},
    {503, "server_error", "backend_unavailable",
     "The model server is overloaded or unavailable; retry shortly.", 5},
    {501, "invalid_request_error", "not_implemented",
     "Unsupported Transfer-Encoding: send the body with Content-Length or chunked.", 0},
    {504, "server_error", "gateway_timeout", "The model server did not answer in time.", 0},
    {505, "invalid_request_error", "http_version_not_supported",
     "HTTP version not supported: use HTTP/1.1 or HTTP/2.", 0},
};

int hy_metrics_nginx_error(int status, hy_api_error_t *e)
{
    size_t i;

    memset(e, 0, sizeof *e);
    for (i = 0; i < HY_ARRAY_LEN(mt_nginx_errors); i++) {
        if (mt_nginx_errors[i].status != status)
            continue;
        e->status = status;
        e->type = mt_nginx_errors[i].type;
        e->code = mt_nginx_errors[i].code;
        e->retry_after = mt_nginx_errors[i].retry_after;
        snprintf(e->message, sizeof e->message, "%s", mt_nginx_errors[i].message);
        return HY_OK;
    }
    hy_api_err_internal(e, "the web server handed over an error status hyserve does not know");
    return HY_EINVAL;
}

/* ---- memory facts ---------------------------------------------------------------- */

void hy_metrics_set_memory(hy_shm_t *shm, uint64_t weights_bytes, uint64_t page_bytes,
                           uint64_t swa_page_bytes, uint64_t state_bytes)
{
    const hy_shm_params_t *p = &hy_shm_header(shm)->params;
    hy_stats_t *st = hy_shm_stats(shm);
    uint64_t slots = (uint64_t)p->n_state_slots + (uint64_t)p->n_checkpoint_slots;

    atomic_store(&st->mem_weights_bytes, weights_bytes);
    atomic_store(&st->mem_page_bytes, page_bytes);
    atomic_store(&st->mem_swa_page_bytes, swa_page_bytes);
    atomic_store(&st->mem_slot_bytes, slots > 0 ? state_bytes / slots : 0);
}

/* ---- exposition ------------------------------------------------------------------ */

static void mt_head(hy_jbuf_t *b, const char *name, const char *type, const char *help)
{
    hy_jbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void mt_metric(hy_jbuf_t *b, const char *name, const char *type, const char *help,
                      unsigned long long v)
{
    mt_head(b, name, type, help);
    hy_jbuf_printf(b, "%s %llu\n", name, v);
}

/* A label value with the text format's escapes (backslash, quote, newline). */
static void mt_label(hy_jbuf_t *b, const char *s)
{
    for (; s != NULL && *s; s++) {
        if (*s == '\\' || *s == '"')
            hy_jbuf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            hy_jbuf_cstr(b, "\\n");
        else
            hy_jbuf_raw(b, s, 1);
    }
}

/* A sample value: Prometheus spells the special values NaN, +Inf, -Inf. */
static void mt_value(hy_jbuf_t *b, double v)
{
    if (isnan(v))
        hy_jbuf_cstr(b, "NaN");
    else if (isinf(v))
        hy_jbuf_cstr(b, v > 0 ? "+Inf" : "-Inf");
    else
        hy_jbuf_printf(b, "%.9g", v);
}

static void mt_hist(hy_jbuf_t *b, const char *name, const char *help, const hy_stats_hist_t *h)
{
    uint64_t cum = 0;
    int i;

    mt_head(b, name, "histogram", help);
    for (i = 0; i < HY_STATS_NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        hy_jbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, hy_stats_bucket_le[i],
                       (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&h->bucket[HY_STATS_NBUCKETS], memory_order_relaxed);
    hy_jbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    hy_jbuf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
                   (double)atomic_load(&h->sum_us) / 1e6, name,
                   (unsigned long long)atomic_load(&h->count));
}

/* The histogram's last 60 s as a summary.  _sum and _count are the
 * histogram's (cumulative, as Prometheus client libraries report them);
 * only the quantiles are windowed. */
static void mt_summary(hy_jbuf_t *b, const char *name, const char *help,
                       const hy_stats_hist_t *h, int64_t now)
{
    static const double q[3] = {0.5, 0.95, 0.99};
    static const char *const qs[3] = {"0.5", "0.95", "0.99"};
    double v[3];
    int i;

    hy_qwin_quantiles(&h->win, now, q, 3, v);
    mt_head(b, name, "summary", help);
    for (i = 0; i < 3; i++) {
        hy_jbuf_printf(b, "%s{quantile=\"%s\"} ", name, qs[i]);
        mt_value(b, v[i] / 1e6);
        hy_jbuf_cstr(b, "\n");
    }
    hy_jbuf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
                   (double)atomic_load(&h->sum_us) / 1e6, name,
                   (unsigned long long)atomic_load(&h->count));
}

static void mt_latency(hy_jbuf_t *b, const hy_stats_t *s, int64_t now)
{
    static const struct {
        size_t off;
        const char *hist, *summary, *help;
    } lat[] = {
        {offsetof(hy_stats_t, ttft), "hyserve_time_to_first_token_seconds",
         "hyserve_time_to_first_token_window_seconds", "Submit to first token"},
        {offsetof(hy_stats_t, tpot), "hyserve_time_per_output_token_seconds",
         "hyserve_time_per_output_token_window_seconds",
         "Mean time per output token after the first"},
        {offsetof(hy_stats_t, e2e), "hyserve_e2e_request_latency_seconds",
         "hyserve_e2e_request_latency_window_seconds", "Submit to finish"},
        {offsetof(hy_stats_t, queue), "hyserve_request_queue_time_seconds",
         "hyserve_request_queue_time_window_seconds", "Submit to taken by the engine"},
    };
    char help[160];
    size_t i;

    for (i = 0; i < HY_ARRAY_LEN(lat); i++) {
        const hy_stats_hist_t *h = (const hy_stats_hist_t *)((const char *)s + lat[i].off);

        snprintf(help, sizeof help, "%s.", lat[i].help);
        mt_hist(b, lat[i].hist, help, h);
        snprintf(help, sizeof help,
                 "%s: quantiles over the last %d s (%d steps of %lld s), within 3.2%%.",
                 lat[i].help, HY_QWIN_SECONDS, HY_QWIN_STEPS, HY_QWIN_STEP_NS / 1000000000LL);
        mt_summary(b, lat[i].summary, help, h, now);
    }
}

static void mt_rates(hy_jbuf_t *b, const hy_stats_t *s, int64_t now)
{
    static const int windows[2] = {10, 60};
    int i;

    mt_head(b, "hyserve_generation_tokens_per_second", "gauge",
            "Tokens generated per second, mean over the last whole 10 s or 60 s.");
    for (i = 0; i < 2; i++) {
        hy_jbuf_printf(b, "hyserve_generation_tokens_per_second{window=\"%ds\"} ", windows[i]);
        mt_value(b, hy_rwin_rate(&s->generation_rate, now, windows[i]));
        hy_jbuf_cstr(b, "\n");
    }
    mt_head(b, "hyserve_prompt_tokens_per_second", "gauge",
            "Prompt tokens computed per second (prefix-cache hits excluded), mean over the last "
            "whole 10 s or 60 s.");
    for (i = 0; i < 2; i++) {
        hy_jbuf_printf(b, "hyserve_prompt_tokens_per_second{window=\"%ds\"} ", windows[i]);
        mt_value(b, hy_rwin_rate(&s->prompt_rate, now, windows[i]));
        hy_jbuf_cstr(b, "\n");
    }
}

static void mt_http(hy_jbuf_t *b, const hy_stats_t *s)
{
    int o, ep, c;

    mt_head(b, "hyserve_http_requests_total", "counter",
            "HTTP answers by endpoint and status; origin=\"nginx\" for refusals nginx made "
            "itself (API key, rate limit, body size, malformed requests) and handed to hyserve "
            "to answer.");
    for (o = 0; o < HY_STATS_HTTP_ORIGINS; o++)
        for (ep = 0; ep < MT_N_ENDPOINTS; ep++)
            for (c = 0; c < HY_STATS_HTTP_CODES; c++) {
                uint64_t n = atomic_load_explicit(&s->http[o][ep][c], memory_order_relaxed);

                if (n > 0)
                    hy_jbuf_printf(b,
                                   "hyserve_http_requests_total{origin=\"%s\",endpoint=\"%s\","
                                   "code=\"%d\"} %llu\n",
                                   mt_origins[o], mt_endpoints[ep], c + 100,
                                   (unsigned long long)n);
            }
}

/* The store's kinds (ipc/tier_file.h) by the names of the memory kinds. */
static const char *const mt_tier_kinds[HY_TIER_KINDS] = {"kv_pages", "checkpoints",
                                                         "kv_swa_pages"};

/* Memory by kind in the hot tier (the pool the kernels read: GPU memory
 * with CUDA, the main pool on the CPU) and, when there is one, the warm
 * tier (host RAM); the cold tier is disk, in hyserve_tier_bytes. */
static void mt_memory(hy_jbuf_t *b, const hy_stats_t *s, const hy_shm_params_t *p,
                      const hy_pt_counts_t *pc)
{
    uint64_t w = atomic_load(&s->mem_weights_bytes), pb = atomic_load(&s->mem_page_bytes),
             sb = atomic_load(&s->mem_slot_bytes), spb = atomic_load(&s->mem_swa_page_bytes),
             total, avail;
    const struct {
        const char *kind;
        uint64_t alloc, used, cached;
    } k[] = {
        {"weights", w, w, 0},
        {"kv_pages", pb * (uint64_t)p->n_pages, pb * (uint64_t)pc->pages_used,
         pb * (uint64_t)pc->pages_cached},
        /* the sliding-window layers' own page group (common/kvgroup.h) */
        {"kv_swa_pages", spb * (uint64_t)p->n_swa_pages, spb * (uint64_t)pc->swa_used,
         spb * (uint64_t)pc->swa_cached},
        {"state_slots", sb * (uint64_t)p->n_state_slots, sb * (uint64_t)pc->state_used, 0},
        {"checkpoints", sb * (uint64_t)p->n_checkpoint_slots, sb * (uint64_t)pc->ckpt_used,
         sb * (uint64_t)pc->ckpt_cached},
    };
    const hy_tier_stats_t *ts = &s->tiers;
    /* the warm tier's slots of each store kind (HY_TIER_PAGE, _CKPT, _SWA) */
    uint64_t wunit[HY_TIER_KINDS] = {pb, sb, spb}, wn[HY_TIER_KINDS][HY_TIER_STATES];
    bool warm = false;
    size_t i;

    for (int kk = 0; kk < HY_TIER_KINDS; kk++)
        for (int st = 0; st < HY_TIER_STATES; st++) {
            int64_t v = atomic_load_explicit(&ts->n[HY_TIER_WARM][kk][st], memory_order_relaxed);
            wn[kk][st] = v > 0 ? (uint64_t)v : 0;
            warm |= v > 0;
        }
    mt_head(b, "hyserve_memory_bytes", "gauge", "Bytes allocated, by kind and tier.");
    for (i = 0; i < HY_ARRAY_LEN(k); i++)
        hy_jbuf_printf(b, "hyserve_memory_bytes{kind=\"%s\",tier=\"hot\"} %llu\n", k[i].kind,
                       (unsigned long long)k[i].alloc);
    for (int kk = 0; warm && kk < HY_TIER_KINDS; kk++)
        hy_jbuf_printf(b, "hyserve_memory_bytes{kind=\"%s\",tier=\"warm\"} %llu\n",
                       mt_tier_kinds[kk],
                       (unsigned long long)(wunit[kk] * (wn[kk][HY_TIER_USED] + wn[kk][HY_TIER_FREE] +
                                                         wn[kk][HY_TIER_CACHED])));
    mt_head(b, "hyserve_memory_used_bytes", "gauge",
            "Bytes held by running requests (all of the weights), by kind and tier.");
    for (i = 0; i < HY_ARRAY_LEN(k); i++)
        hy_jbuf_printf(b, "hyserve_memory_used_bytes{kind=\"%s\",tier=\"hot\"} %llu\n",
                       k[i].kind, (unsigned long long)k[i].used);
    for (int kk = 0; warm && kk < HY_TIER_KINDS; kk++)
        hy_jbuf_printf(b, "hyserve_memory_used_bytes{kind=\"%s\",tier=\"warm\"} %llu\n",
                       mt_tier_kinds[kk],
                       (unsigned long long)(wunit[kk] * wn[kk][HY_TIER_USED]));
    mt_head(b, "hyserve_memory_cached_bytes", "gauge",
            "Bytes of prefix-cache content no request holds (reclaimable), by kind and tier.");
    for (i = 0; i < HY_ARRAY_LEN(k); i++)
        if (strcmp(k[i].kind, "kv_pages") == 0 || strcmp(k[i].kind, "kv_swa_pages") == 0 ||
            strcmp(k[i].kind, "checkpoints") == 0)
            hy_jbuf_printf(b, "hyserve_memory_cached_bytes{kind=\"%s\",tier=\"hot\"} %llu\n",
                           k[i].kind, (unsigned long long)k[i].cached);
    for (int kk = 0; warm && kk < HY_TIER_KINDS; kk++)
        hy_jbuf_printf(b, "hyserve_memory_cached_bytes{kind=\"%s\",tier=\"warm\"} %llu\n",
                       mt_tier_kinds[kk],
                       (unsigned long long)(wunit[kk] * wn[kk][HY_TIER_CACHED]));
    hy_host_memory(&total, &avail);
    mt_head(b, "hyserve_host_memory_bytes", "gauge",
            "The host's memory (/proc/meminfo MemTotal and MemAvailable).");
    hy_jbuf_printf(b, "hyserve_host_memory_bytes{state=\"total\"} %llu\n"
                      "hyserve_host_memory_bytes{state=\"available\"} %llu\n",
                   (unsigned long long)total, (unsigned long long)avail);
}

static void mt_pages(hy_jbuf_t *b, const hy_pt_counts_t *pc)
{
    mt_head(b, "hyserve_kv_pages", "gauge", "KV pages by state.");
    hy_jbuf_printf(b, "hyserve_kv_pages{state=\"used\"} %d\nhyserve_kv_pages{state=\"free\"} %d\n"
                      "hyserve_kv_pages{state=\"cached\"} %d\n",
                   pc->pages_used, pc->pages_free, pc->pages_cached);
    mt_metric(b, "hyserve_kv_pages_total", "gauge", "KV pages in the pool.",
              (unsigned long long)pc->pages_total);
    mt_head(b, "hyserve_kv_swa_pages", "gauge",
            "KV pages of the sliding-window layers' page group by state.");
    hy_jbuf_printf(b, "hyserve_kv_swa_pages{state=\"used\"} %d\n"
                      "hyserve_kv_swa_pages{state=\"free\"} %d\n"
                      "hyserve_kv_swa_pages{state=\"cached\"} %d\n",
                   pc->swa_used, pc->swa_free, pc->swa_cached);
    mt_metric(b, "hyserve_kv_swa_pages_total", "gauge",
              "KV pages in the sliding-window group's pool (0: the model has none).",
              (unsigned long long)pc->swa_total);
    mt_head(b, "hyserve_state_checkpoints", "gauge", "Recurrent-state snapshots by state.");
    hy_jbuf_printf(b, "hyserve_state_checkpoints{state=\"used\"} %d\n"
                      "hyserve_state_checkpoints{state=\"free\"} %d\n"
                      "hyserve_state_checkpoints{state=\"cached\"} %d\n",
                   pc->ckpt_used, pc->ckpt_free, pc->ckpt_cached);
    mt_metric(b, "hyserve_state_slots_used", "gauge", "Live recurrent-state slots in use.",
              (unsigned long long)pc->state_used);
    mt_metric(b, "hyserve_state_slots_total", "gauge", "Live recurrent-state slots.",
              (unsigned long long)pc->state_total);
    mt_metric(b, "hyserve_kv_page_evictions_total", "counter", "Cached pages evicted.",
              (unsigned long long)pc->page_evictions);
    mt_metric(b, "hyserve_prefix_cache_queries_total", "counter", "Prefix-cache lookups (tokens).",
              (unsigned long long)pc->query_tokens);
    mt_metric(b, "hyserve_prefix_cache_hits_total", "counter", "Prefix-cache hits (tokens).",
              (unsigned long long)pc->hit_tokens);
}

/* ---- tiers ------------------------------------------------------------------ */

static const char *const mt_tier_names[HY_TIER_LEVELS] = {"hot", "warm", "cold"};
static const char *const mt_state_names[HY_TIER_STATES] = {"used", "free", "cached"};

/* One histogram's series, with the label label (e.g. tier="cold"; "": none) */
static void mt_hist_lines(hy_jbuf_t *b, const char *name, const char *label,
                          const hy_tier_hist_t *h)
{
    const char *sep = label[0] ? "," : "";
    uint64_t cum = 0;

    for (int i = 0; i <= HY_TIER_NBUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        if (i < HY_TIER_NBUCKETS)
            hy_jbuf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep,
                           hy_tier_bucket_le[i], (unsigned long long)cum);
        else
            hy_jbuf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep,
                           (unsigned long long)cum);
    }
    if (label[0])
        hy_jbuf_printf(b, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, label,
                       (double)atomic_load(&h->sum_ns) / 1e9, name, label,
                       (unsigned long long)atomic_load(&h->count));
    else
        hy_jbuf_printf(b, "%s_sum %.9f\n%s_count %llu\n", name,
                       (double)atomic_load(&h->sum_ns) / 1e9, name,
                       (unsigned long long)atomic_load(&h->count));
}

static void mt_tier_hist(hy_jbuf_t *b, const char *name, const char *help,
                         const hy_tier_hist_t *h)
{
    mt_head(b, name, "histogram", help);
    for (int t = HY_TIER_WARM; t < HY_TIER_LEVELS; t++) {
        char label[32];

        snprintf(label, sizeof label, "tier=\"%s\"", mt_tier_names[t]);
        mt_hist_lines(b, name, label, &h[t]);
    }
}

static void mt_tier_counter(hy_jbuf_t *b, const char *name, const char *help,
                            const _Atomic uint64_t *v, int from)
{
    mt_head(b, name, "counter", help);
    for (int t = from; t < HY_TIER_LEVELS; t++)
        hy_jbuf_printf(b, "%s{tier=\"%s\"} %llu\n", name, mt_tier_names[t],
                       (unsigned long long)atomic_load_explicit(&v[t], memory_order_relaxed));
}

/* Each tier's entries and bytes by state (hot: the page table's, in the
 * units of the memory facts), hits, moves and disk traffic. */
static void mt_tiers(hy_jbuf_t *b, const hy_stats_t *s, const hy_pt_counts_t *pc)
{
    static const char *const why[HY_TIER_DROP_N] = {"corrupt", "foreign", "unreadable"};
    const hy_tier_stats_t *ts = &s->tiers;
    uint64_t unit[HY_TIER_KINDS] = {atomic_load(&s->mem_page_bytes),
                                    atomic_load(&s->mem_slot_bytes),
                                    atomic_load(&s->mem_swa_page_bytes)};
    int64_t hot[HY_TIER_KINDS][HY_TIER_STATES] = {
        {pc->pages_used, pc->pages_free, pc->pages_cached},
        {pc->ckpt_used, pc->ckpt_free, pc->ckpt_cached},
        {pc->swa_used, pc->swa_free, pc->swa_cached},
    };

    mt_head(b, "hyserve_tier_entries", "gauge",
            "KV pages (kv_swa_pages: the sliding-window layers' page group) and "
            "recurrent-state checkpoints in each tier (hot: the pool the kernels read, warm: "
            "host RAM, cold: files) by state; used + free + cached = total.");
    for (int t = 0; t < HY_TIER_LEVELS; t++)
        for (int k = 0; k < HY_TIER_KINDS; k++)
            for (int st = 0; st < HY_TIER_STATES; st++)
                hy_jbuf_printf(b, "hyserve_tier_entries{tier=\"%s\",kind=\"%s\",state=\"%s\"} %lld\n",
                               mt_tier_names[t], mt_tier_kinds[k], mt_state_names[st],
                               (long long)(t == HY_TIER_HOT ? hot[k][st]
                                                            : atomic_load(&ts->n[t][k][st])));
    mt_head(b, "hyserve_tier_bytes", "gauge",
            "Bytes of each tier by state (cold: the disk budget [cache] disk_mb).");
    for (int t = 0; t < HY_TIER_LEVELS; t++)
        for (int st = 0; st < HY_TIER_STATES; st++) {
            int64_t v = 0;

            for (int k = 0; t == HY_TIER_HOT && k < HY_TIER_KINDS; k++)
                v += hot[k][st] * (int64_t)unit[k];
            hy_jbuf_printf(b, "hyserve_tier_bytes{tier=\"%s\",state=\"%s\"} %lld\n",
                           mt_tier_names[t], mt_state_names[st],
                           (long long)(t == HY_TIER_HOT ? v : atomic_load(&ts->bytes[t][st])));
        }
    mt_tier_counter(b, "hyserve_tier_hits_total",
                    "Prefix-cache blocks (pages and checkpoints) served from each tier.", ts->hits,
                    HY_TIER_HOT);
    mt_tier_counter(b, "hyserve_tier_promotions_total",
                    "Entries moved up out of each tier (cold: read back into warm; warm: copied "
                    "into the hot pool).", ts->promotions, HY_TIER_WARM);
    mt_tier_counter(b, "hyserve_tier_demotions_total",
                    "Entries moved down into each tier (warm: evicted from hot; cold: written to "
                    "disk).", ts->demotions, HY_TIER_WARM);
    mt_tier_counter(b, "hyserve_tier_read_bytes_total", "Bytes read out of each tier.",
                    ts->read_bytes, HY_TIER_WARM);
    mt_tier_counter(b, "hyserve_tier_write_bytes_total", "Bytes written into each tier.",
                    ts->write_bytes, HY_TIER_WARM);
    mt_tier_hist(b, "hyserve_tier_read_seconds",
                 "Time to move one entry up out of a tier (cold: read and check a file).",
                 ts->read_time);
    mt_tier_hist(b, "hyserve_tier_write_seconds",
                 "Time to move one entry into a tier (cold: write a file).", ts->write_time);
    mt_head(b, "hyserve_tier_dropped_files_total", "counter",
            "Disk-tier files dropped (and logged): corrupt or truncated, another model's or "
            "geometry's, unreadable.");
    for (int r = 0; r < HY_TIER_DROP_N; r++)
        hy_jbuf_printf(b, "hyserve_tier_dropped_files_total{reason=\"%s\"} %llu\n", why[r],
                       (unsigned long long)atomic_load(&ts->dropped[r]));
    mt_metric(b, "hyserve_tier_skipped_writes_total", "counter",
              "Entries not written to disk: the disk budget was all in use.",
              (unsigned long long)atomic_load(&ts->skipped_writes));
    mt_head(b, "hyserve_tier_fetch_giveups_total", "counter",
            "Prompts whose wait for their prefix from the warm and cold tiers was given up "
            "(logged as tier_fetch_given_up) and the rest of the prefix recomputed: entries "
            "read back too often (the warm tier thrashes), a read that does not end, no room "
            "to move anything.");
    for (int r = 0; r < HY_TIER_GIVEUP_N; r++)
        hy_jbuf_printf(b, "hyserve_tier_fetch_giveups_total{reason=\"%s\"} %llu\n", hy_tier_giveup_name[r],
                       (unsigned long long)atomic_load(&ts->fetch_giveups[r]));
    mt_metric(b, "hyserve_tier_disk_state", "gauge",
              "The disk tier: 0 off, 1 waiting for the model's hash, 2 indexing its directory "
              "(already serving), 3 ready, 4 turned off after an error (logged).",
              (unsigned long long)atomic_load(&ts->disk_state));
}

/* The plain counters and gauges of hy_stats_t, as one table. */
static const struct {
    const char *name, *type, *help;
    size_t off;
    bool i32; /* an _Atomic int32_t gauge (clamped at 0), else _Atomic uint64_t */
} mt_plain[] = {
    {"hyserve_prompt_tokens_total", "counter", "Prompt tokens submitted.",
     offsetof(hy_stats_t, prompt_tokens), false},
    {"hyserve_generation_tokens_total", "counter", "Tokens generated.",
     offsetof(hy_stats_t, generation_tokens), false},
    {"hyserve_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
     offsetof(hy_stats_t, cached_prompt_tokens), false},
    {"hyserve_num_requests_running", "gauge", "Requests the engine is running.",
     offsetof(hy_stats_t, running), true},
    {"hyserve_num_requests_waiting", "gauge", "Requests queued for the engine.",
     offsetof(hy_stats_t, waiting), true},
    {"hyserve_request_slots_used", "gauge", "Request slots in use.",
     offsetof(hy_stats_t, slots_used), true},
    {"hyserve_preemptions_total", "counter", "Sequences preempted for memory.",
     offsetof(hy_stats_t, preemptions), false},
    {"hyserve_worker_restarts_total", "counter", "Worker processes respawned.",
     offsetof(hy_stats_t, worker_restarts), false},
    {"hyserve_reaped_requests_total", "counter", "Requests of dead workers reclaimed.",
     offsetof(hy_stats_t, reaped_requests), false},
    {"hyserve_engine_restarts_total", "counter", "Engine processes restarted after a crash.",
     offsetof(hy_stats_t, engine_restarts), false},
    {"hyserve_disk_errors_total", "counter", "Disk-tier read, write and checksum failures.",
     offsetof(hy_stats_t, disk_errors), false},
    {"hyserve_grammar_requests_total", "counter",
     "Requests constrained by a grammar or JSON schema.",
     offsetof(hy_stats_t, grammar_requests), false},
    {"hyserve_grammar_compiles_total", "counter", "Grammars the engine compiled (cache misses).",
     offsetof(hy_stats_t, grammar_compiles), false},
    {"hyserve_grammar_cache_hits_total", "counter",
     "Constrained requests whose grammar was already compiled.",
     offsetof(hy_stats_t, grammar_cache_hits), false},
    {"hyserve_grammar_masks_total", "counter", "Vocabulary masks computed.",
     offsetof(hy_stats_t, grammar_masks), false},
    {"hyserve_grammar_closed_total", "counter",
     "Constrained answers the token budget closed within max_tokens (finish_reason length).",
     offsetof(hy_stats_t, grammar_closed), false},
};

/* A counter with one label and two values: label=names[0] and names[1]. */
static void mt_counter2(hy_jbuf_t *b, const char *name, const char *help, const char *label,
                        const char *const names[2], const _Atomic uint64_t *v0,
                        const _Atomic uint64_t *v1)
{
    mt_head(b, name, "counter", help);
    hy_jbuf_printf(b, "%s{%s=\"%s\"} %llu\n%s{%s=\"%s\"} %llu\n", name, label, names[0],
                   (unsigned long long)atomic_load(v0), name, label, names[1],
                   (unsigned long long)atomic_load(v1));
}

/* Finished requests' attention: tokens by path, blocks by where they were
 * read (the pool, or the out arena of a hot window, [cache]
 * hot_tokens_per_seq: its RAM, or its spill file for a block with a page
 * only there). */
static void mt_attention(hy_jbuf_t *b, const hy_stats_t *s)
{
    static const char *const path[2] = {"dense", "sparse"};

    mt_counter2(b, "hyserve_attention_tokens_total",
                "Computed tokens of finished requests by attention path.", "path", path,
                &s->attn_dense_tokens, &s->attn_sparse_tokens);
    mt_head(b, "hyserve_sparse_blocks_read_total", "counter",
            "Blocks block-sparse tokens read, summed over layers and KV heads, by tier.");
    hy_jbuf_printf(b, "hyserve_sparse_blocks_read_total{tier=\"hot\"} %llu\n"
                      "hyserve_sparse_blocks_read_total{tier=\"warm\"} %llu\n"
                      "hyserve_sparse_blocks_read_total{tier=\"cold\"} %llu\n",
                   (unsigned long long)atomic_load(&s->sparse_blocks_hot),
                   (unsigned long long)atomic_load(&s->sparse_blocks_warm),
                   (unsigned long long)atomic_load(&s->sparse_blocks_cold));
}

/* The out arena of the hot windows ([cache] hot_tokens_per_seq,
 * seq_warm_mb): its pages by where they are, its RAM and file, what moved
 * between them.  Used + free = the pages it can hold. */
static void mt_out_arena(hy_jbuf_t *b, const hy_stats_t *s)
{
    static const char *const op[2] = {"read", "write"};
    int64_t units = atomic_load(&s->out_units), warm = atomic_load(&s->out_warm_used),
            cold = atomic_load(&s->out_cold_used);
    uint64_t ub = atomic_load(&s->out_unit_bytes);

    mt_head(b, "hyserve_out_arena_pages", "gauge",
            "Pages of running sequences beyond their hot window: in RAM (warm), only in the "
            "spill file (cold), free.");
    hy_jbuf_printf(b, "hyserve_out_arena_pages{state=\"warm\"} %lld\n"
                      "hyserve_out_arena_pages{state=\"cold\"} %lld\n"
                      "hyserve_out_arena_pages{state=\"free\"} %lld\n",
                   (long long)warm, (long long)cold, (long long)HY_MAX(units - warm - cold, 0));
    mt_metric(b, "hyserve_out_arena_ram_bytes", "gauge",
              "RAM slots of the out arena, in bytes of pages.",
              (unsigned long long)atomic_load(&s->out_warm_slots) * ub);
    mt_metric(b, "hyserve_out_arena_file_bytes", "gauge",
              "The out arena's spill file (allocated whole at start).",
              (unsigned long long)atomic_load(&s->out_file_bytes));
    mt_metric(b, "hyserve_out_arena_promotions_total", "counter",
              "Cold out-arena pages that sparse attention read and that were brought up to RAM.",
              (unsigned long long)atomic_load(&s->out_promotions));
    mt_metric(b, "hyserve_out_arena_read_failures_total", "counter",
              "Cold out-arena pages the I/O thread could not read or found changed (they stay "
              "cold; a step that reads one fails its requests).",
              (unsigned long long)atomic_load(&s->out_read_failures));
    mt_metric(b, "hyserve_out_arena_spills_total", "counter",
              "Out-arena pages written to the spill file.",
              (unsigned long long)atomic_load(&s->out_spills));
    mt_counter2(b, "hyserve_out_arena_disk_bytes_total", "Bytes of the spill file read and "
                "written.", "op", op, &s->out_disk_read_bytes, &s->out_disk_write_bytes);
    mt_head(b, "hyserve_out_arena_read_seconds", "histogram",
            "Time to bring one cold out-arena page up from the spill file (read and check, "
            "on the I/O thread; consecutive pages are one read, each counting its share).");
    mt_hist_lines(b, "hyserve_out_arena_read_seconds", "", &s->out_read_time);
    mt_head(b, "hyserve_out_arena_write_seconds", "histogram",
            "Time to write one out-arena page to the spill file.");
    mt_hist_lines(b, "hyserve_out_arena_write_seconds", "", &s->out_write_time);
}

/* Time counters kept in microseconds (_Atomic uint64_t), shown in seconds:
 * what constrained decoding costs the engine thread (CPU time, so the
 * machine's other load does not count; per mask: mask seconds / masks). */
static const struct {
    const char *name, *help;
    size_t off;
} mt_seconds[] = {
    {"hyserve_grammar_mask_seconds_total",
     "Engine thread CPU time spent computing and applying vocabulary masks.",
     offsetof(hy_stats_t, grammar_mask_us)},
    {"hyserve_grammar_token_set_seconds_total",
     "Part of the mask time spent filling token sets of states reached for the first time.",
     offsetof(hy_stats_t, grammar_fill_us)},
    {"hyserve_grammar_compile_seconds_total", "Engine thread CPU time spent compiling grammars.",
     offsetof(hy_stats_t, grammar_compile_us)},
};

static void mt_counters(hy_jbuf_t *b, const hy_stats_t *s, const hy_shm_params_t *p)
{
    static const char *const why[HY_STATS_REQ_N] = {"stop", "length", "cancelled", "error",
                                                    "rejected"};
    const char *base = (const char *)s;
    size_t k;
    int i;

    mt_head(b, "hyserve_requests_total", "counter", "Finished requests by outcome.");
    for (i = 0; i < HY_STATS_REQ_N; i++)
        hy_jbuf_printf(b, "hyserve_requests_total{finish=\"%s\"} %llu\n", why[i],
                       (unsigned long long)atomic_load(&s->requests[i]));
    for (k = 0; k < HY_ARRAY_LEN(mt_plain); k++) {
        const void *f = base + mt_plain[k].off;
        unsigned long long v =
            mt_plain[k].i32 ? (unsigned long long)HY_MAX(atomic_load((_Atomic int32_t *)f), 0)
                            : (unsigned long long)atomic_load((_Atomic uint64_t *)f);

        mt_metric(b, mt_plain[k].name, mt_plain[k].type, mt_plain[k].help, v);
    }
    for (k = 0; k < HY_ARRAY_LEN(mt_seconds); k++) {
        mt_head(b, mt_seconds[k].name, "counter", mt_seconds[k].help);
        hy_jbuf_printf(b, "%s %.6f\n", mt_seconds[k].name,
                       (double)atomic_load((const _Atomic uint64_t *)(base + mt_seconds[k].off)) /
                           1e6);
    }
    mt_metric(b, "hyserve_request_slots_total", "gauge", "Request slots in the segment.",
              (unsigned long long)p->n_request_slots);
    mt_attention(b, s);
    mt_out_arena(b, s);
}

/* Streams paused because their client reads slower than they generate. */
static void mt_stalled(hy_jbuf_t *b, hy_shm_t *shm)
{
    mt_metric(b, "hyserve_num_requests_stalled", "gauge",
              "Running requests paused with a full token ring: their client is not reading.",
              (unsigned long long)hy_shm_count_stalled(shm));
}

/* The engine process the master supervises (server/engine_proc.h): who it
 * is and whether it serves, for `hyserve-ctl status` and alerts. */
static void mt_engine(hy_jbuf_t *b, hy_shm_t *shm)
{
    const hy_shm_header_t *h = hy_shm_header(shm);
    static const char *const states[] = {"starting", "running", "restarting", "failed"};
    uint32_t st = atomic_load(&h->engine_state);

    mt_metric(b, "hyserve_engine_pid", "gauge",
              "The engine process's pid (0 while none runs).",
              (unsigned long long)atomic_load(&h->engine_pid));
    mt_head(b, "hyserve_engine_state", "gauge",
            "1 for the engine process's state: starting, running, restarting (it died, "
            "requests wait and resume) or failed (a restart storm: requests get 503).");
    for (uint32_t i = 0; i < HY_ARRAY_LEN(states); i++)
        hy_jbuf_printf(b, "hyserve_engine_state{state=\"%s\"} %d\n", states[i], st == i);
}

static void mt_info(hy_jbuf_t *b, const hy_metrics_info_t *in)
{
    mt_head(b, "hyserve_info", "gauge", "What this instance serves (always 1).");
    hy_jbuf_cstr(b, "hyserve_info{hyserve_instance=\"");
    mt_label(b, in->instance);
    hy_jbuf_cstr(b, "\",model=\"");
    mt_label(b, in->model);
    hy_jbuf_cstr(b, "\",model_version=\"");
    mt_label(b, in->model_version);
    hy_jbuf_cstr(b, "\",version=\"");
    mt_label(b, in->version);
    hy_jbuf_cstr(b, "\"} 1\n");
    mt_metric(b, "hyserve_draining", "gauge", "1 while the server drains for shutdown.",
              (unsigned long long)(in->draining != 0));
}

int hy_metrics_render(hy_shm_t *shm, const hy_metrics_info_t *info, char **out, size_t *len)
{
    const hy_stats_t *s = hy_shm_stats(shm);
    const hy_shm_params_t *p = &hy_shm_header(shm)->params;
    int64_t now = hy_shm_now_ns();
    hy_pt_counts_t pc;
    hy_jbuf_t b;
    int rc;

    hy_pt_counts(hy_shm_pt(shm), &pc);
    hy_jbuf_init(&b);
    mt_info(&b, info);
    mt_counters(&b, s, p);
    mt_stalled(&b, shm);
    mt_engine(&b, shm);
    mt_http(&b, s);
    mt_latency(&b, s, now);
    mt_rates(&b, s, now);
    mt_pages(&b, &pc);
    mt_memory(&b, s, p, &pc);
    mt_tiers(&b, s, &pc);
    if ((rc = hy_jbuf_take(&b, out, len)) != HY_OK)
        hy_jbuf_free(&b);
    return rc;
}
