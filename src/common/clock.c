/* Monotonic time and waits (clock.h). */
#include "common/clock.h"

int64_t clock_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void clock_mono_after(struct timespec *ts, int64_t ms)
{
	if (ms < 0)
		ms = 0;
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int clock_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int rc = pthread_condattr_init(&a);

	if (rc)
		return rc;
	rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rc;
}
