/*
 * access.h - the instance's FastCGI secret and the privilege drop, the two
 * halves of "nginx is the only way in".  The FastCGI socket must be
 * reachable by nginx's group, so any process in that group could speak
 * FastCGI to it and claim any API key id (HYSERVE_KEY_ID) with no key; the
 * site therefore passes a per-instance secret (HYSERVE_SECRET) from a
 * root-only include, and a worker answers a request without it with 403.
 * The server reads the secret, opens its sockets and segment as whoever
 * started it, then runs as [server] user.
 */
#ifndef HY_SERVER_ACCESS_H
#define HY_SERVER_ACCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/hy.h"

#define HY_ACCESS_SECRET_MIN 32
#define HY_ACCESS_SECRET_MAX 128

/* Reads path, nginx's include for the instance: comment lines (#), blank
 * lines and exactly one `<name> "<secret>";`, where name is what the site's
 * map keys it by (the colour; the instance name in a packaged install).
 * Refused: a file group or others may read, a second entry, a secret
 * outside HY_ACCESS_SECRET_MIN..MAX of A-Z a-z 0-9 _ -.  out holds
 * HY_ACCESS_SECRET_MAX + 1 bytes, name name_cap. */
int hy_access_load_secret(const char *path, char *out, char *name, size_t name_cap, char *err);

/* Whether given (may be NULL) is the secret, in time that does not depend
 * on where they differ. */
bool hy_access_secret_equal(const char *secret, const char *given);

/* Becomes user (a name) for good: supplementary groups, gid, uid; the
 * paths given (sockets, the segment; NULL entries skipped) are chowned to
 * it first, so that it can remove them at shutdown.  Started as that user
 * already: nothing to do.  Started as another non-root user: an error. */
int hy_access_become(const char *user, const char *const *paths, int n_paths, char *err);

#endif
