/*
 * metrics.h - what an operator watches: every HTTP answer counted by
 * endpoint and status (hyserve's own, and nginx's own refusals, which the
 * site hands to a worker to answer as OpenAI-shaped JSON and to count),
 * the memory the instance holds by kind and tier, and the Prometheus text
 * that /metrics serves from the shared segment's stats (lock-free: a scrape
 * never waits on the engine).
 */
#ifndef HY_SERVER_METRICS_H
#define HY_SERVER_METRICS_H

#include <stddef.h>

#include "ipc/shm.h"
#include "server/api.h"

typedef enum {
    HY_METRICS_HYSERVE = 0, /* a worker's own answer */
    HY_METRICS_NGINX = 1,   /* nginx refused the request itself (error_page) */
} hy_metrics_origin_t;

/* The endpoint label of a request path: one of the API routes, or "other"
 * (unknown paths and requests nginx refused before it parsed a path). */
int hy_metrics_endpoint(const char *path);
const char *hy_metrics_endpoint_name(int endpoint);

/* Counts one answer; statuses outside 100..599 are not counted. */
void hy_metrics_count(hy_stats_t *st, hy_metrics_origin_t origin, const char *path, int status);

/* The answer to a refusal nginx made itself and handed over through its
 * error_page location (FastCGI parameter HYSERVE_NGINX_STATUS): the same
 * status, as OpenAI's error object.  HY_EINVAL (and a 500 in e) for a
 * status nginx does not produce. */
int hy_metrics_nginx_error(int status, hy_api_error_t *e);

/* Coordinator, once before the segment is marked ready: bytes of the
 * weights, of one KV page of each group (full attention, sliding window)
 * and the backend's state allocation (state bytes cover the live state
 * slots followed by the checkpoint slots). */
void hy_metrics_set_memory(hy_shm_t *shm, uint64_t weights_bytes, uint64_t page_bytes,
                           uint64_t swa_page_bytes, uint64_t state_bytes);

/* What /metrics says about the instance itself (hyserve_info). */
typedef struct {
    const char *instance;
    const char *model;
    const char *model_version;
    const char *version;
    int draining;
} hy_metrics_info_t;

/* The whole exposition (Prometheus text format 0.0.4), malloc'd. */
int hy_metrics_render(hy_shm_t *shm, const hy_metrics_info_t *info, char **out, size_t *len);

#endif
