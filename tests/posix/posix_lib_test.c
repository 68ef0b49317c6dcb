/*
 * The POSIX behaviour suite (suite.c) against liblodefs: a real loded of
 * three RAM targets started by the harness, one fresh container per
 * transport, mounted with lodefs_mount() and driven through the
 * lodefs_path_* and lodefs_file_* calls (backend_lib.c).
 *
 * The suite runs once per transport in $LODE_TEST_TRANSPORTS (default
 * "tcp shm"); the server offers every transport and the mount asks for
 * the one under test. The run also checks that lodefs_umount() and the
 * server's own SIGTERM shutdown report success afterwards.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "harness.h"
#include "lode/lodefs.h"
#include "suite.h"

#define NTARGETS 3

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Mount a fresh container over transport tp and run the suite; returns the failures. */
static int run_transport(struct hs_server *srv, lode_conn_t *conn, const char *tp)
{
	struct lodefs_opts o = {.transport = tp};
	char cont[64], label[64];
	lodefs_t *fs = NULL;
	double t0 = now_s();
	void *b = NULL;
	int rc, failed;

	snprintf(cont, sizeof(cont), "px-lib-%s", tp);
	snprintf(label, sizeof(label), "lib/%s", tp);
	if ((rc = lode_cont_create(conn, cont, NULL)) < 0) {
		fprintf(stderr, "posix_lib_test: create container %s: %s\n", cont,
			lode_strerror(rc));
		return 1;
	}
	if ((rc = lodefs_mount(hs_addr(srv), cont, &o, &fs)) < 0) {
		fprintf(stderr, "posix_lib_test: lodefs_mount over %s: %s\n", tp,
			lode_strerror(rc));
		hs_dump_log(srv, 4096);
		return 1;
	}
	if ((rc = px_lib_create(fs, &b)) < 0) {
		lodefs_umount(fs);
		return 1;
	}
	failed = px_suite_run(label, &px_lib_ops, b);
	px_lib_destroy(b);
	if ((rc = lodefs_umount(fs)) < 0) {
		fprintf(stderr, "posix_lib_test: lodefs_umount over %s: %s\n", tp,
			lode_strerror(rc));
		failed++;
	}
	printf("posix_lib_test: %s: %d case(s) failed, %.1f s\n", label, failed, now_s() - t0);
	return failed;
}

int main(void)
{
	const char *env = getenv("LODE_TEST_TRANSPORTS");
	struct hs_opts o = {.transport = "auto", .targets = NTARGETS, .ram = true};
	struct hs_server srv = {0};
	lode_conn_t *conn = NULL;
	char list[256], *save = NULL;
	int failed = 0, rc;

	/* Modes are compared as given: the library applies no umask, the kernel would. */
	umask(0);
	if ((rc = hs_start(&srv, &o)) < 0) {
		fprintf(stderr, "posix_lib_test: cannot start loded: %s\n", lode_strerror(rc));
		hs_cleanup(&srv);
		return 1;
	}
	if ((rc = hs_connect(&srv, NULL, 0, &conn)) < 0) {
		fprintf(stderr, "posix_lib_test: connect: %s\n", lode_strerror(rc));
		hs_cleanup(&srv);
		return 1;
	}
	snprintf(list, sizeof(list), "%s", env && env[0] ? env : "tcp shm");
	for (char *w = strtok_r(list, " ,", &save); w; w = strtok_r(NULL, " ,", &save))
		failed += run_transport(&srv, conn, w);
	lode_disconnect(conn);
	if ((rc = hs_stop(&srv)) != 0) {
		fprintf(stderr, "posix_lib_test: loded exited with %d\n", rc);
		hs_dump_log(&srv, 8192);
		failed++;
	}
	hs_cleanup(&srv);
	return failed ? 1 : 0;
}
