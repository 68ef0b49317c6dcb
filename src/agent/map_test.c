/*
 * Tests for lode-agent's map (map.c): what each kind of key matches, the
 * order a uid is looked up in, and every malformed line refused with the
 * line it is on. The text handed to the parser is malloc'ed to its exact
 * length with no NUL, so that AddressSanitizer catches a read past it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/map.h"

/* Parse text (no NUL at its end); msg gets the parser's message. */
static int parse(const char *text, struct agent_map **m, char *msg, size_t cap)
{
	size_t n = strlen(text);
	char *exact = malloc(n ? n : 1);
	int rc;

	assert_non_null(exact);
	memcpy(exact, text, n);
	msg[0] = 0;
	rc = agent_map_parse(exact, n, "map", m, msg, cap);
	free(exact);
	return rc;
}

static void lookups(void **state)
{
	struct agent_map *m;
	char msg[256];

	(void)state;
	assert_int_equal(parse("# who is whom on this node\n"
			       "0: system/admin\n"
			       "  1000 :\tt1/alice   # a trailing comment\n"
			       "\n"
			       "bob: t2/bob\n"
			       "svc_run$: t2/svc\n"
			       "*: t3/guest\r\n",
			       &m, msg, sizeof(msg)),
			 0);
	assert_int_equal(agent_map_size(m), 5);
	assert_string_equal(agent_map_lookup(m, 0, "root"), "system/admin");
	assert_string_equal(agent_map_lookup(m, 1000, "alice"), "t1/alice");
	/* the uid's own line wins over its login's */
	assert_string_equal(agent_map_lookup(m, 1000, "bob"), "t1/alice");
	assert_string_equal(agent_map_lookup(m, 1001, "bob"), "t2/bob");
	assert_string_equal(agent_map_lookup(m, 1002, "svc_run$"), "t2/svc");
	/* the login's line wins over "*", which takes everyone else */
	assert_string_equal(agent_map_lookup(m, 1003, "carol"), "t3/guest");
	assert_string_equal(agent_map_lookup(m, 1004, NULL), "t3/guest");
	agent_map_free(m);
}

static void unknown_refused(void **state)
{
	struct agent_map *m;
	char msg[256];

	(void)state;
	assert_int_equal(parse("0: system/admin\nbob: t2/bob", &m, msg, sizeof(msg)), 0);
	assert_null(agent_map_lookup(m, 65534, "nobody"));
	assert_null(agent_map_lookup(m, 1, NULL));
	/* a login is its name exactly: no prefix, no case folding */
	assert_null(agent_map_lookup(m, 7, "bo"));
	assert_null(agent_map_lookup(m, 7, "Bob"));
	agent_map_free(m);
	/* an empty map grants nothing */
	assert_int_equal(parse("# nobody yet\n\n", &m, msg, sizeof(msg)), 0);
	assert_int_equal(agent_map_size(m), 0);
	assert_null(agent_map_lookup(m, 0, "root"));
	agent_map_free(m);
}

static void bad_lines(void **state)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
		{"0 system/admin\n", "map:1: expected"},
		{"0: admin\n", "map:1: the Lode user must be TENANT/USER"},
		{"0: /admin\n", "map:1: TENANT and USER"},
		{"0: system/\n", "map:1: TENANT and USER"},
		{"0: sys tem/admin\n", "map:1: TENANT and USER"},
		{"0: system/ad/min\n", "map:1: TENANT and USER"},
		{"\n\n0: system/admin\n0: t1/alice\n", "map:4: the same key as line 3"},
		{"bob: t1/a\n bob : t1/b\n", "map:2: the same key as line 1"},
		{"*: t1/a\n*: t1/b\n", "map:2: the same key as line 1"},
		{"4294967295: t1/a\n", "map:1: uid out of range"},
		{"99999999999999999999999: t1/a\n", "map:1: uid out of range"},
		{"-1: t1/a\n", "map:1: the key is not"},
		{"1bob: t1/a\n", "map:1: the key is not"},
		{"a b: t1/a\n", "map:1: the key is not"},
		{": t1/a\n", "map:1: the key is not"},
		{"**: t1/a\n", "map:1: the key is not"},
		{"bob$x: t1/a\n", "map:1: the key is not"},
		{"averyveryveryverylongloginnamebeyond32: t1/a\n", "map:1: the key is not"},
	};
	struct agent_map *m;
	char msg[256], text[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = (struct agent_map *)&m; /* must come back NULL */
		if (parse(bad[i].text, &m, msg, sizeof(msg)) != -EINVAL || m != NULL ||
		    strncmp(msg, bad[i].want, strlen(bad[i].want)) != 0)
			fail_msg("case %zu (%s): msg '%s', want '%s'", i, bad[i].text, msg, bad[i].want);
	}
	/* a name of 128 bytes is one too long; 127 is fine */
	snprintf(text, sizeof(text), "0: t/%0128d\n", 0);
	assert_int_equal(parse(text, &m, msg, sizeof(msg)), -EINVAL);
	snprintf(text, sizeof(text), "0: t/%0127d\n", 0);
	assert_int_equal(parse(text, &m, msg, sizeof(msg)), 0);
	agent_map_free(m);
	/* a NUL inside a line */
	assert_int_equal(agent_map_parse("0: t/a\0b\n", 9, "map", &m, msg, sizeof(msg)), -EINVAL);
	assert_null(m);
}

static void files(void **state)
{
	char path[] = "/tmp/agent-map-test.XXXXXX", msg[256];
	struct agent_map *m;
	FILE *f;
	int fd;

	(void)state;
	assert_int_equal(agent_map_load("/nonexistent/map", &m, msg, sizeof(msg)), -ENOENT);
	assert_null(m);
	assert_non_null(strstr(msg, "/nonexistent/map"));
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_non_null(f = fdopen(fd, "w"));
	fputs("root: system/admin\nnope\n", f);
	fclose(f);
	assert_int_equal(agent_map_load(path, &m, msg, sizeof(msg)), -EINVAL);
	/* the message names the file and the line */
	assert_non_null(strstr(msg, path));
	assert_non_null(strstr(msg, ":2: "));
	assert_non_null(f = fopen(path, "w"));
	fputs("root: system/admin\n", f);
	fclose(f);
	assert_int_equal(agent_map_load(path, &m, msg, sizeof(msg)), 0);
	assert_string_equal(agent_map_lookup(m, 12345, "root"), "system/admin");
	agent_map_free(m);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lookups),
		cmocka_unit_test(unknown_refused),
		cmocka_unit_test(bad_lines),
		cmocka_unit_test(files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
