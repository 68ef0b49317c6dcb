/*
 * Time for timeouts, waits and silences: CLOCK_MONOTONIC, which a step of
 * the wall clock (NTP's, an operator's `date`) does not move. With the wall
 * clock, an hour forward looked like an hour without a heartbeat, and an
 * hour back made a 250 ms wait last an hour. The wall clock stays for what
 * is shown or stored as a date, and for what another machine compares (a
 * capability's expiry).
 */
#ifndef LODE_COMMON_CLOCK_H
#define LODE_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ms. */
int64_t clock_mono_ms(void);

/* *ts = ms from now on CLOCK_MONOTONIC: a deadline for pthread_cond_timedwait
 * on a condition made by clock_cond_init (ms < 0 counts as 0). */
void clock_mono_after(struct timespec *ts, int64_t ms);

/* pthread_cond_init of a condition whose timed waits run on CLOCK_MONOTONIC.
 * 0 or an errno, as pthread_cond_init. */
int clock_cond_init(pthread_cond_t *cv);

#endif
