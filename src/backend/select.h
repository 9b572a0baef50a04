/*
 * select.h - one place that turns a backend name ("cpu", "cuda") from the
 * command line (--backend) or the config file (engine.backend) into a
 * backend, so the tools and the coordinator share the names and messages.
 */
#ifndef HY_BACKEND_SELECT_H
#define HY_BACKEND_SELECT_H

#include "backend/backend.h"

/* The names hy_backend_new accepts, for help texts: "cpu|cuda". */
#define HY_BACKEND_NAMES "cpu|cuda"

/* name NULL or "" means "cpu".  Unknown names: HY_EINVAL naming the valid
 * ones; "cuda" without CUDA built or without a GPU: HY_EUNSUPPORTED. */
int hy_backend_new(hy_backend_t **out, const char *name, const hy_backend_opts_t *opts,
                   char *err);

#endif
