/*
 * UCX's messages go to stderr (src/net/ucx.c, log_to_stderr): a program's
 * stdout is its output (`lode --json`, or any program running the preload
 * library), and UCX writes there by default. The test makes a UCX context
 * the way loded and liblode do, sends messages through UCX's own logger
 * with stdout and stderr pointed at files, and reads both files back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucs/debug/log_def.h>

#include "net/net.h"

struct captured {
	char out[4096], err[4096];
};

static void file_read(int fd, char *buf, size_t cap)
{
	ssize_t n = pread(fd, buf, cap - 1, 0);

	assert_true(n >= 0);
	buf[n] = '\0';
}

/* Dispatch fmt at level through UCX with fds 1 and 2 captured. */
static void capture(struct captured *c, ucs_log_level_t level, const char *fmt, const char *arg)
{
	char out_path[] = "/tmp/lode-ucxlog-out.XXXXXX", err_path[] = "/tmp/lode-ucxlog-err.XXXXXX";
	int out = mkstemp(out_path), err = mkstemp(err_path);
	int saved_out = dup(1), saved_err = dup(2);

	assert_true(out >= 0 && err >= 0 && saved_out >= 0 && saved_err >= 0);
	unlink(out_path);
	unlink(err_path);
	fflush(stdout);
	fflush(stderr);
	dup2(out, 1);
	dup2(err, 2);
	ucs_log_dispatch(__FILE__, __LINE__, __func__, level, &ucs_global_opts.log_component, fmt,
			 arg);
	fflush(stdout);
	dup2(saved_out, 1);
	dup2(saved_err, 2);
	close(saved_out);
	close(saved_err);
	file_read(out, c->out, sizeof(c->out));
	file_read(err, c->err, sizeof(c->err));
	close(out);
	close(err);
}

static ucp_context_h g_ctx;

static int setup(void **state)
{
	(void)state;
	unsetenv("UCX_LOG_FILE");
	return net_context_create(NET_TP_TCP, true, &g_ctx) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	ucp_cleanup(g_ctx);
	return 0;
}

static void test_error_on_stderr(void **state)
{
	struct captured c;

	(void)state;
	capture(&c, UCS_LOG_LEVEL_ERROR, "shmget failed: %s", "No space left on device");
	assert_string_equal(c.out, "");
	assert_non_null(strstr(c.err, "UCX ERROR ucx_log_test.c:"));
	assert_non_null(strstr(c.err, "shmget failed: No space left on device\n"));
	/* One line, and it says which process wrote it. */
	assert_ptr_equal(strchr(c.err, '\n'), c.err + strlen(c.err) - 1);
	assert_int_equal(c.err[0], '[');
	assert_int_equal(atoi(c.err + 1), (int)getpid());
}

static void test_warning_on_stderr(void **state)
{
	struct captured c;

	(void)state;
	capture(&c, UCS_LOG_LEVEL_WARN, "unused env variable: %s", "UCX_X");
	assert_string_equal(c.out, "");
	assert_non_null(strstr(c.err, "UCX WARN "));
	assert_non_null(strstr(c.err, "unused env variable: UCX_X\n"));
}

/* A message longer than the line buffer is cut, and still ends its line. */
static void test_long_message_cut(void **state)
{
	char big[2048];
	struct captured c;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	capture(&c, UCS_LOG_LEVEL_ERROR, "%s", big);
	assert_string_equal(c.out, "");
	assert_true(strlen(c.err) > 100 && strlen(c.err) < sizeof(big));
	assert_ptr_equal(strchr(c.err, '\n'), c.err + strlen(c.err) - 1);
	assert_int_equal(c.err[strlen(c.err) - 2], 'x');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_on_stderr),
		cmocka_unit_test(test_warning_on_stderr),
		cmocka_unit_test(test_long_message_cut),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
