/*
 * The POSIX behaviour suite (suite.c) against the local file system under
 * $LODE_TEST_TMP, through plain system calls (backend_sys.c).
 *
 * This checks the suite, not Lode: every case states what Linux does, so
 * it must pass on a kernel file system (ext4, xfs, tmpfs) before its
 * verdicts on liblodefs and the FUSE mount can be trusted. A file system
 * without user extended attributes, or with another longest name, fails
 * the cases that look at those; run it on one that has them.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "suite.h"

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 ? -1 : 0;
}

int main(void)
{
	const char *base = getenv("LODE_TEST_TMP");
	char dir[PATH_MAX];
	void *b = NULL;
	int failed, rc;

	umask(0);
	if (base && base[0])
		mkdir(base, 0755);
	snprintf(dir, sizeof(dir), "%s/lode-pxlocal-XXXXXX", base && base[0] ? base : "/tmp");
	if (!mkdtemp(dir) || chmod(dir, 0755) < 0) {
		perror("posix_local_test: scratch directory");
		return 1;
	}
	if ((rc = px_sys_create(dir, &b)) < 0) {
		fprintf(stderr, "posix_local_test: backend: %s\n", strerror(-rc));
		return 1;
	}
	failed = px_suite_run("local", &px_sys_ops, b);
	px_sys_destroy(b);
	if (!getenv("LODE_TEST_KEEP"))
		nftw(dir, rm_one, 64, FTW_DEPTH | FTW_PHYS);
	return failed ? 1 : 0;
}
