/*
 * coordinator.h - `hyserve serve` (coordinator.c): the process that loads
 * the model, runs the engine thread on the shared segment and supervises
 * the FastCGI workers.  The hyserve binary's command table calls it.
 */
#ifndef HY_SERVER_COORDINATOR_H
#define HY_SERVER_COORDINATOR_H

int hy_cmd_serve(int argc, char **argv);

#endif
