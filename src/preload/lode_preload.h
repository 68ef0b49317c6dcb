/*
 * What liblode-preload.so exports besides the calls it intercepts: its
 * counters, so that a test (or a curious user) can see that I/O really went
 * through liblodefs and not through the FUSE mount.
 *
 * A program need not link against the preload to read them: look the
 * symbol up at run time, and it is absent when the preload is not loaded:
 *
 *     void (*stats)(struct lode_preload_stats *) =
 *             (void (*)(struct lode_preload_stats *))dlsym(RTLD_DEFAULT,
 *                                                         "lode_preload_stats");
 *
 * With LODE_PRELOAD_DEBUG=1 in the environment the preload also prints the
 * same counters on stderr when the process exits, as one line starting
 * "lode-preload: stats".
 */
#ifndef LODE_PRELOAD_STATS_H
#define LODE_PRELOAD_STATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every counter counts since the process started (a forked child inherits them). */
struct lode_preload_stats {
	uint64_t opens;         /* opens of Lode files served by liblodefs */
	uint64_t opens_passed;  /* opens of Lode files left to the FUSE mount */
	uint64_t reads;         /* read-type calls served by liblodefs */
	uint64_t writes;        /* write-type calls served by liblodefs */
	uint64_t bytes_read;    /* bytes those reads returned */
	uint64_t bytes_written; /* bytes those writes wrote */
	uint64_t mounts;        /* liblodefs instances mounted */
	uint64_t reopens;       /* handles opened again after fork or a lost server */
	uint64_t errors;        /* calls that failed with an error from liblodefs */
};

/* Copy the counters into *out. Never blocks; thread-safe. */
void lode_preload_stats(struct lode_preload_stats *out);

#ifdef __cplusplus
}
#endif
#endif
