/*
 * Tests for loded's configuration (src/server/config.c): the defaults, a
 * full YAML file, size and boolean spellings, flags in both forms and their
 * precedence over the file wherever --config sits, every kind of bad input
 * (unknown key, bad boolean, bad number, overflow, bad size suffix,
 * malformed YAML, missing file, bad flags) with its error code and a
 * message naming the key or line, srv_config_check's rules, --help, and the
 * example files: etc/loded.example.yaml and the one printed by --help.
 *
 * YAML files are written under $LODE_TEST_TMP (or /tmp) and removed after.
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
#include <sys/stat.h>
#include <unistd.h>

#include "server/config.h"

#ifndef LODE_SOURCE_DIR
#error "LODE_SOURCE_DIR must name the source tree (see tests/CMakeLists.txt)"
#endif

/* Every YAML key, as config.h lists them. */
static const char *const keys[] = {
	"listen", "targets", "path", "ram", "capacity", "transport",
	"bulk", "inline_max", "poll_us", "pidfile", "addrfile",
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* ---- helpers ------------------------------------------------------------- */

/* Fail unless rc is want and the message contains needle. */
#define assert_err(rc, want, err, needle)                                                   \
	do {                                                                                \
		int rc_ = (rc);                                                             \
		if (rc_ != (want) || !strstr((err), (needle)))                              \
			fail_msg("rc %d (expected %d), message '%s' (expected it to contain " \
				 "'%s')",                                                   \
				 rc_, (want), (err), (needle));                             \
	} while (0)

static char *xstrdup(const char *s)
{
	char *p = strdup(s);

	assert_non_null(p);
	return p;
}

/* A new path under the scratch directory; malloc'd. */
static char *tmp_path(const char *tag)
{
	static unsigned seq;
	const char *dir = getenv("LODE_TEST_TMP");
	char buf[4096];

	if (!dir || !*dir)
		dir = "/tmp";
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		fail_msg("mkdir %s: %s", dir, strerror(errno));
	snprintf(buf, sizeof(buf), "%s/config_test-%d-%u-%s.yaml", dir, (int)getpid(), seq++, tag);
	return xstrdup(buf);
}

/* Write text to a new scratch file; returns its malloc'd path. */
static char *write_yaml(const char *tag, const char *text)
{
	char *path = tmp_path(tag);
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
	assert_int_equal(fclose(f), 0);
	return path;
}

/*
 * Load text as a YAML file into c (starting from c's contents); the file is
 * removed again. err receives the message.
 */
static int load_text(struct srv_config *c, const char *text, char *err, size_t errlen)
{
	char *path = write_yaml("load", text);
	int rc;

	err[0] = 0;
	rc = srv_config_load(c, path, err, errlen);
	unlink(path);
	free(path);
	return rc;
}

/* Expect text to fail to load with -EINVAL and a message containing each needle. */
static void expect_bad_yaml(const char *text, const char *needle1, const char *needle2)
{
	struct srv_config c, before;
	char err[1024];
	int rc;

	srv_config_defaults(&c);
	before = c;
	rc = load_text(&c, text, err, sizeof(err));
	assert_err(rc, -EINVAL, err, needle1);
	if (needle2)
		assert_err(rc, -EINVAL, err, needle2);
	/* The file names itself in every message about its content. */
	assert_err(rc, -EINVAL, err, "config_test-");
	/* A failed load leaves the structure as it was. */
	if (memcmp(&c, &before, sizeof(c)) != 0)
		fail_msg("a failed load of '%s' changed the configuration", text);
}

/* srv_config_parse_args on a NULL-terminated list of arguments after "loded". */
static int parse(struct srv_config *c, bool *help, char *err, size_t errlen, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)"loded";
	va_start(ap, errlen);
	for (char *a; (a = va_arg(ap, char *)) != NULL;) {
		assert_true(argc < 63);
		argv[argc++] = a;
	}
	va_end(ap);
	argv[argc] = NULL;
	err[0] = 0;
	return srv_config_parse_args(c, argc, argv, help, err, errlen);
}

/* Expect the arguments to fail with want and a message containing needle. */
#define expect_bad_args(want, needle, ...)                                                  \
	do {                                                                                \
		struct srv_config c_, before_;                                              \
		char err_[1024];                                                            \
		bool help_;                                                                 \
		srv_config_defaults(&c_);                                                   \
		before_ = c_;                                                               \
		assert_err(parse(&c_, &help_, err_, sizeof(err_), __VA_ARGS__, NULL), (want), \
			   err_, (needle));                                                 \
		assert_false(help_);                                                        \
		assert_memory_equal(&c_, &before_, sizeof(c_));                             \
	} while (0)

static const char full_yaml[] = "# every setting, in an order unlike the header's\n"
				"addrfile: /run/lode/addr\n"
				"pidfile: \"/run/lode/loded.pid\"\n"
				"listen: '[::1]:7500'\n"
				"targets: 12\n"
				"path: /srv/lode\n"
				"ram: yes\n"
				"capacity: 2G   # per target\n"
				"transport: rdma\n"
				"bulk: rma\n"
				"inline_max: 16K\n"
				"poll_us: 250\n";

static void assert_full_yaml(const struct srv_config *c)
{
	assert_string_equal(c->listen, "[::1]:7500");
	assert_int_equal(c->targets, 12);
	assert_string_equal(c->path, "/srv/lode");
	assert_true(c->ram);
	assert_int_equal(c->capacity, 2ull << 30);
	assert_string_equal(c->transport, "rdma");
	assert_string_equal(c->bulk, "rma");
	assert_int_equal(c->inline_max, 16384);
	assert_int_equal(c->poll_us, 250);
	assert_string_equal(c->pidfile, "/run/lode/loded.pid");
	assert_string_equal(c->addrfile, "/run/lode/addr");
}

/* ---- defaults and loading ------------------------------------------------ */

static void test_defaults(void **state)
{
	struct srv_config c;
	char err[256] = "";

	memset(&c, 0xa5, sizeof(c));
	srv_config_defaults(&c);
	assert_string_equal(c.listen, "127.0.0.1:7420");
	assert_int_equal(c.targets, 1);
	assert_string_equal(c.path, "./lode-data");
	assert_false(c.ram);
	assert_int_equal(c.capacity, 0);
	assert_string_equal(c.transport, "auto");
	assert_string_equal(c.bulk, "auto");
	assert_int_equal(c.inline_max, 8192);
	assert_int_equal(c.poll_us, 1000);
	assert_string_equal(c.pidfile, "");
	assert_string_equal(c.addrfile, "");
	assert_true(c.foreground);
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
}

static void test_load_full(void **state)
{
	struct srv_config c;
	char err[1024];

	srv_config_defaults(&c);
	assert_int_equal(load_text(&c, full_yaml, err, sizeof(err)), 0);
	assert_full_yaml(&c);
	assert_true(c.foreground); /* not a file setting: untouched */
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
}

/* A file sets what it names and leaves the rest; nothing at all is fine. */
static void test_load_partial_and_empty(void **state)
{
	struct srv_config c, d;
	char err[1024];

	srv_config_defaults(&d);
	srv_config_defaults(&c);
	assert_int_equal(load_text(&c, "targets: 3\n", err, sizeof(err)), 0);
	assert_int_equal(c.targets, 3);
	d.targets = 3;
	assert_memory_equal(&c, &d, sizeof(c));

	srv_config_defaults(&c);
	srv_config_defaults(&d);
	assert_int_equal(load_text(&c, "", err, sizeof(err)), 0);
	assert_memory_equal(&c, &d, sizeof(c));
	assert_int_equal(load_text(&c, "# only a comment\n\n", err, sizeof(err)), 0);
	assert_memory_equal(&c, &d, sizeof(c));
	assert_int_equal(load_text(&c, "---\n", err, sizeof(err)), 0);
	assert_memory_equal(&c, &d, sizeof(c));

	/* "key:" and "key: ~" are YAML's null: an empty string. */
	strcpy(c.pidfile, "x");
	strcpy(c.addrfile, "y");
	assert_int_equal(load_text(&c, "pidfile:\naddrfile: ~\n", err, sizeof(err)), 0);
	assert_string_equal(c.pidfile, "");
	assert_string_equal(c.addrfile, "");
	/* ...but a quoted "~" is the string itself. */
	assert_int_equal(load_text(&c, "pidfile: \"~\"\n", err, sizeof(err)), 0);
	assert_string_equal(c.pidfile, "~");
}

static void test_load_sizes_and_bools(void **state)
{
	static const struct {
		const char *text;
		uint64_t want;
	} sizes[] = {
		{"0", 0},
		{"512", 512},
		{"1K", 1024},
		{"3k", 3072},
		{"2M", 2u << 20},
		{"3G", 3ull << 30},
		{"1T", 1ull << 40},
		{"16777215T", 16777215ull << 40},
		{"18446744073709551615", UINT64_MAX},
	};
	static const struct {
		const char *text;
		bool want;
	} bools[] = {
		{"true", true}, {"false", false}, {"yes", true}, {"no", false},
		{"1", true}, {"0", false}, {"True", true}, {"NO", false},
	};
	struct srv_config c;
	char text[128], err[1024];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		srv_config_defaults(&c);
		snprintf(text, sizeof(text), "capacity: %s\n", sizes[i].text);
		if (load_text(&c, text, err, sizeof(err)) != 0)
			fail_msg("capacity %s: %s", sizes[i].text, err);
		if (c.capacity != sizes[i].want)
			fail_msg("capacity %s read as %llu", sizes[i].text,
				 (unsigned long long)c.capacity);
	}
	srv_config_defaults(&c);
	assert_int_equal(load_text(&c, "inline_max: 1M\n", err, sizeof(err)), 0);
	assert_int_equal(c.inline_max, 1u << 20);

	for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
		srv_config_defaults(&c);
		c.ram = !bools[i].want;
		snprintf(text, sizeof(text), "ram: %s\n", bools[i].text);
		if (load_text(&c, text, err, sizeof(err)) != 0)
			fail_msg("ram %s: %s", bools[i].text, err);
		if (c.ram != bools[i].want)
			fail_msg("ram %s read as %d", bools[i].text, c.ram);
	}
}

/* ---- bad files ----------------------------------------------------------- */

static void test_load_missing_file(void **state)
{
	struct srv_config c, d;
	char err[1024] = "";
	char *path = tmp_path("missing");

	srv_config_defaults(&c);
	d = c;
	assert_err(srv_config_load(&c, path, err, sizeof(err)), -ENOENT, err, path);
	assert_memory_equal(&c, &d, sizeof(c));
	free(path);

	/* A directory is not a file either. */
	assert_err(srv_config_load(&c, LODE_SOURCE_DIR, err, sizeof(err)), -EISDIR, err,
		   LODE_SOURCE_DIR);
	assert_err(srv_config_load(&c, NULL, err, sizeof(err)), -EINVAL, err, "file");
}

static void test_load_unknown_key(void **state)
{
	expect_bad_yaml("targets: 2\nbogus: 1\n", ":2:", "unknown key 'bogus'");
	/* The flag's spelling gets a hint towards the key's. */
	expect_bad_yaml("inline-max: 4K\n", ":1:", "did you mean 'inline_max'");
	/* Case matters, as in every YAML key. */
	expect_bad_yaml("\n\nTargets: 2\n", ":3:", "'Targets'");
}

static void test_load_bad_bool(void **state)
{
	expect_bad_yaml("targets: 2\nram: maybe\n", ":2: ram:", "maybe");
	expect_bad_yaml("ram: 2\n", ":1: ram:", "not a boolean");
	expect_bad_yaml("ram: \"\"\n", ":1: ram:", "no value");
	expect_bad_yaml("ram:\n", ":1: ram:", "no value");
}

static void test_load_bad_number(void **state)
{
	expect_bad_yaml("targets: four\n", ":1: targets:", "'four' is not a whole number");
	expect_bad_yaml("path: /x\npoll_us: -1\n", ":2: poll_us:", "-1");
	expect_bad_yaml("poll_us: \" 5\"\n", ":1: poll_us:", "not a whole number");
	expect_bad_yaml("poll_us: 0x10\n", ":1: poll_us:", "0x10");
	expect_bad_yaml("targets:\n", ":1: targets:", "no value");
	/* Suffixes are for sizes only. */
	expect_bad_yaml("targets: 4K\n", ":1: targets:", "not a whole number");
	/* A number that parses but breaks the setting's rule. */
	expect_bad_yaml("targets: 0\n", ":1: targets:", "out of range");
	expect_bad_yaml("targets: 65\n", ":1: targets:", "1..64");
	expect_bad_yaml("inline_max: 1025K\n", ":1: inline_max:", "too large");
}

/* Joining another engine's service: the address and credentials go together;
 * heartbeats and the grace period have ranges and a relation. */
static void test_join_and_heartbeat(void **state)
{
	struct srv_config c;
	char err[512];
	bool help;

	(void)state;
	/* These depend on each other, so srv_config_check judges them. */
	srv_config_defaults(&c);
	strcpy(c.join, "127.0.0.1:7000");
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "join needs join_cred");
	strcpy(c.join_cred, "/x");
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
	strcpy(c.join, "nohost");
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "not HOST:PORT");
	c.join[0] = 0;
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "set join too");
	c.join_cred[0] = 0;
	c.heartbeat_ms = 10;
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "out of range (50..10000)");
	c.heartbeat_ms = 500;
	c.grace_ms = 900;
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err,
		   "more than two heartbeats (1000 ms)");
	srv_config_defaults(&c);
	assert_int_equal(c.heartbeat_ms, 500);
	assert_int_equal(c.grace_ms, 3000);
	assert_string_equal(c.join, "");
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--join", "10.0.0.1:7421",
			       "--join-cred", "/etc/lode/engine.cred", "--heartbeat-ms", "100",
			       "--grace-ms", "250", NULL),
			 0);
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
	assert_string_equal(c.join, "10.0.0.1:7421");
	assert_string_equal(c.join_cred, "/etc/lode/engine.cred");
	assert_int_equal(c.heartbeat_ms, 100);
	assert_int_equal(c.grace_ms, 250);
}

static void test_mgmt_replicas(void **state)
{
	struct srv_replica r[SRV_REPLICAS_MAX];
	struct srv_config c;
	char err[512];
	bool help;

	(void)state;
	assert_int_equal(srv_replicas_parse("1=127.0.0.1:7601@127.0.0.1:7501,"
					    "2=127.0.0.1:7602@host-b:7502, 3=10.0.0.3:7603@[::1]:7503",
					    r, err, sizeof(err)),
			 3);
	assert_int_equal(r[1].id, 2);
	assert_string_equal(r[1].raft, "127.0.0.1:7602");
	assert_string_equal(r[1].grpc, "host-b:7502");
	assert_string_equal(r[2].grpc, "[::1]:7503");
	assert_int_equal(srv_replicas_parse("7=127.0.0.1:1@a:2", r, err, sizeof(err)), 1);
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a:2,2=127.0.0.1:2@a:3", r, err, sizeof(err)),
		   -EINVAL, err, "2 replicas: a group has 1, 3 or 5");
	assert_err(srv_replicas_parse("1=127.0.0.1:1", r, err, sizeof(err)), -EINVAL, err,
		   "is not ID=RAFT_IP:PORT@GRPC_HOST:PORT");
	assert_err(srv_replicas_parse("0=127.0.0.1:1@a:2", r, err, sizeof(err)), -EINVAL, err,
		   "replica id \"0\"");
	assert_err(srv_replicas_parse("x=127.0.0.1:1@a:2", r, err, sizeof(err)), -EINVAL, err,
		   "replica id \"x\"");
	assert_err(srv_replicas_parse("1=localhost:1@a:2", r, err, sizeof(err)), -EINVAL, err,
		   "raft address \"localhost:1\" is not A.B.C.D:PORT");
	assert_err(srv_replicas_parse("1=127.0.0.1:70000@a:2", r, err, sizeof(err)), -EINVAL, err,
		   "is not A.B.C.D:PORT");
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a", r, err, sizeof(err)), -EINVAL, err,
		   "gRPC address \"a\" is not HOST:PORT");
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a:1,1=127.0.0.1:2@a:2,3=127.0.0.1:3@a:3", r,
				      err, sizeof(err)),
		   -EINVAL, err, "replica 1 repeats replica 1's id");
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a:1,2=127.0.0.1:1@a:2,3=127.0.0.1:3@a:3", r,
				      err, sizeof(err)),
		   -EINVAL, err, "repeats replica 1's raft address");
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a:1,2=127.0.0.1:2@a:1,3=127.0.0.1:3@a:3", r,
				      err, sizeof(err)),
		   -EINVAL, err, "repeats replica 1's gRPC address");
	assert_err(srv_replicas_parse("1=127.0.0.1:1@a:1,2=127.0.0.1:2@a:2,3=127.0.0.1:3@a:3,"
				      "4=127.0.0.1:4@a:4,5=127.0.0.1:5@a:5,6=127.0.0.1:6@a:6",
				      r, err, sizeof(err)),
		   -EINVAL, err, "more than 5 replicas");

	/* Together: the id must be one of them, and no join beside them. */
	srv_config_defaults(&c);
	assert_int_equal(c.mgmt_election_ms, 1000);
	c.mgmt_replica_id = 2;
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "set mgmt_replicas too");
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--mgmt-replicas",
			       "1=127.0.0.1:7601@127.0.0.1:7501", "--mgmt-replica-id", "1",
			       "--mgmt-election-ms", "300", NULL),
			 0);
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
	assert_int_equal(c.mgmt_election_ms, 300);
	c.mgmt_replica_id = 4;
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err,
		   "mgmt_replica_id 4 is not one of mgmt_replicas' ids");
	c.mgmt_replica_id = 1;
	strcpy(c.join, "127.0.0.1:7000");
	strcpy(c.join_cred, "/x");
	assert_err(srv_config_check(&c, err, sizeof(err)), -EINVAL, err, "exclude each other");
	srv_config_defaults(&c);
	assert_err(parse(&c, &help, err, sizeof(err), "--mgmt-replicas", "1=nope", NULL), -EINVAL,
		   err, "--mgmt-replicas: \"1=nope\" is not ID=");
	assert_err(parse(&c, &help, err, sizeof(err), "--mgmt-election-ms", "10", NULL), -EINVAL,
		   err, "out of range (50..60000 ms)");
}

static void test_load_overflow(void **state)
{
	expect_bad_yaml("capacity: 18446744073709551616\n", ":1: capacity:", "out of range");
	expect_bad_yaml("capacity: 99999999999999999999999\n", "capacity", "out of range");
	expect_bad_yaml("capacity: 16777216T\n", ":1: capacity:", "out of range");
	expect_bad_yaml("capacity: 18014398509481984K\n", "capacity", "out of range");
	/* 32-bit fields stop at their own width, not at 64 bits. */
	expect_bad_yaml("targets: 4294967297\n", ":1: targets:", "at most 4294967295");
	expect_bad_yaml("poll_us: 4294967296\n", ":1: poll_us:", "out of range");
	expect_bad_yaml("inline_max: 4G\n", ":1: inline_max:", "out of range");
}

static void test_load_bad_suffix(void **state)
{
	expect_bad_yaml("capacity: 4X\n", ":1: capacity:", "suffix");
	expect_bad_yaml("capacity: 4KB\n", ":1: capacity:", "suffix");
	expect_bad_yaml("capacity: 4 K\n", ":1: capacity:", "suffix");
	expect_bad_yaml("capacity: 1.5G\n", ":1: capacity:", "suffix");
	expect_bad_yaml("inline_max: 8KiB\n", ":1: inline_max:", "suffix");
	expect_bad_yaml("capacity: G\n", ":1: capacity:", "not a size");
}

static void test_load_bad_strings(void **state)
{
	char text[400];

	/* One byte over the 256-byte field (with its terminator). */
	snprintf(text, sizeof(text), "listen: %0256d\n", 0);
	expect_bad_yaml(text, ":1: listen:", "too long");
	expect_bad_yaml("transport: udp\n", ":1: transport:", "'udp'");
	expect_bad_yaml("bulk: dma\n", ":1: bulk:", "'dma'");
	expect_bad_yaml("path: \"\"\n", ":1: path:", "empty");
	expect_bad_yaml("listen: host:99999\n", ":1: listen:", "port");
	expect_bad_yaml("pidfile: \"a\\0b\"\n", ":1: pidfile:", "NUL");
}

static void test_load_malformed_yaml(void **state)
{
	/* A scanner error, at the line where the quote is still open. */
	expect_bad_yaml("targets: 2\nlisten: \"unterminated\n", "bad YAML", "quoted scalar");
	/* A parser error on line 2. */
	expect_bad_yaml("targets: 2\n- x\n", ":2:", "bad YAML");
	expect_bad_yaml("targets: 2\npath: x: y\n", ":2:", "bad YAML: mapping values");
	expect_bad_yaml("\ttargets: 2\n", ":1:", "bad YAML");
	/* Well-formed YAML that is not a flat mapping of scalars. */
	expect_bad_yaml("- targets\n- 2\n", ":1:", "expected a mapping");
	expect_bad_yaml("just words\n", ":1:", "expected a mapping");
	expect_bad_yaml("targets: 2\nlisten:\n  host: x\n", ":3: listen:", "not a mapping");
	expect_bad_yaml("targets: [1, 2]\n", ":1: targets:", "not a list");
	expect_bad_yaml("? [a, b]\n: 1\n", ":1:", "keys must be plain names");
	expect_bad_yaml("path: &p /x\npidfile: *p\n", ":2: pidfile:", "aliases");
	expect_bad_yaml("targets: 1\n---\ntargets: 2\n", ":2:", "one YAML document");
	expect_bad_yaml("targets: 1\npath: /a\ntargets: 2\n", ":3: targets:",
			"set twice (first on line 1)");
}

/* ---- flags --------------------------------------------------------------- */

static void test_flags_both_forms(void **state)
{
	struct srv_config c, d;
	char err[1024];
	bool help = true;

	srv_config_defaults(&c);
	d = c;
	assert_int_equal(parse(&c, &help, err, sizeof(err), NULL), 0);
	assert_false(help);
	assert_memory_equal(&c, &d, sizeof(c));

	assert_int_equal(parse(&c, &help, err, sizeof(err), "--listen", "0.0.0.0:9000",
			       "--targets=8", "--path", "/data", "--ram", "--capacity=1G",
			       "--transport", "tcp", "--bulk=am", "--inline-max", "4K",
			       "--poll-us=7", "--pidfile", "/p", "--addrfile=/a", NULL),
			 0);
	assert_string_equal(c.listen, "0.0.0.0:9000");
	assert_int_equal(c.targets, 8);
	assert_string_equal(c.path, "/data");
	assert_true(c.ram);
	assert_int_equal(c.capacity, 1ull << 30);
	assert_string_equal(c.transport, "tcp");
	assert_string_equal(c.bulk, "am");
	assert_int_equal(c.inline_max, 4096);
	assert_int_equal(c.poll_us, 7);
	assert_string_equal(c.pidfile, "/p");
	assert_string_equal(c.addrfile, "/a");
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);

	/* Later flags win over earlier ones; a boolean takes =VALUE. */
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--ram", "--ram=no", "--targets", "2",
			       "--targets", "3", "--pidfile=", NULL),
			 0);
	assert_false(c.ram);
	assert_int_equal(c.targets, 3);
	assert_string_equal(c.pidfile, "");
}

static void test_flags_override_file(void **state)
{
	struct srv_config c;
	char err[1024], arg[4200];
	char *path = write_yaml("override", full_yaml);
	bool help;

	srv_config_defaults(&c);
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--config", path, "--targets", "5",
			       "--ram=false", "--transport=shm", NULL),
			 0);
	assert_int_equal(c.targets, 5);
	assert_false(c.ram);
	assert_string_equal(c.transport, "shm");
	/* What no flag named comes from the file. */
	assert_string_equal(c.path, "/srv/lode");
	assert_int_equal(c.capacity, 2ull << 30);
	assert_string_equal(c.listen, "[::1]:7500");

	/* --config=FILE alone gives exactly the file. */
	srv_config_defaults(&c);
	snprintf(arg, sizeof(arg), "--config=%s", path);
	assert_int_equal(parse(&c, &help, err, sizeof(err), arg, NULL), 0);
	assert_full_yaml(&c);
	unlink(path);
	free(path);
}

static void test_config_last_still_loses(void **state)
{
	struct srv_config c;
	char err[1024];
	char *path = write_yaml("last", full_yaml);
	bool help;

	srv_config_defaults(&c);
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--listen", "h:1", "--targets=9",
			       "--inline-max", "100", "--config", path, NULL),
			 0);
	assert_string_equal(c.listen, "h:1");
	assert_int_equal(c.targets, 9);
	assert_int_equal(c.inline_max, 100);
	assert_string_equal(c.path, "/srv/lode");
	assert_string_equal(c.bulk, "rma");
	unlink(path);
	free(path);
}

static void test_flags_bad(void **state)
{
	char *missing = tmp_path("missing");
	char *bad = write_yaml("bad", "targets: 2\nram: perhaps\n");
	char *good = write_yaml("good", "targets: 2\n");

	expect_bad_args(-EINVAL, "unknown option '--bogus'", "--bogus");
	expect_bad_args(-EINVAL, "unknown option '--bogus=1'", "--targets", "2", "--bogus=1");
	expect_bad_args(-EINVAL, "'-x'", "-x");
	expect_bad_args(-EINVAL, "--targets needs a value", "--targets");
	expect_bad_args(-EINVAL, "--config needs a value", "--config");
	expect_bad_args(-EINVAL, "--help takes no value", "--help=1");
	expect_bad_args(-EINVAL, "--targets: 'abc' is not a whole number", "--targets", "abc");
	expect_bad_args(-EINVAL, "--targets: 0 is out of range", "--targets=0");
	expect_bad_args(-EINVAL, "--capacity: '5Q' has a bad size suffix", "--capacity", "5Q");
	expect_bad_args(-EINVAL, "--inline-max: '4294967296' is out of range", "--inline-max",
			"4294967296");
	expect_bad_args(-EINVAL, "--ram: 'perhaps' is not a boolean", "--ram=perhaps");
	expect_bad_args(-EINVAL, "--transport: 'udp'", "--transport", "udp");
	expect_bad_args(-EINVAL, "--listen: '[::1'", "--listen=[::1");
	expect_bad_args(-EINVAL, "unexpected argument 'yes'", "--ram", "yes");
	expect_bad_args(-ENOENT, missing, "--targets", "2", "--config", missing);
	expect_bad_args(-EINVAL, ":2: ram:", "--config", bad);
	expect_bad_args(-EINVAL, "--config given twice", "--config", good, "--config", good);
	/* A good file and a bad flag: nothing is kept. */
	expect_bad_args(-EINVAL, "--poll-us", "--config", good, "--poll-us", "x");

	unlink(bad);
	unlink(good);
	free(missing);
	free(bad);
	free(good);
}

static void test_help(void **state)
{
	struct srv_config c, d;
	char err[1024];
	char *missing = tmp_path("missing");
	bool help = false;

	srv_config_defaults(&c);
	d = c;
	assert_int_equal(parse(&c, &help, err, sizeof(err), "-h", NULL), 0);
	assert_true(help);
	help = false;
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--targets", "3", "--help", NULL), 0);
	assert_true(help);
	/* Help needs neither a readable file nor good values, and sets nothing. */
	help = false;
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--config", missing, "--targets=0",
			       "--help", NULL),
			 0);
	assert_true(help);
	assert_memory_equal(&c, &d, sizeof(c));
	/* Without it, help is cleared. */
	assert_int_equal(parse(&c, &help, err, sizeof(err), "--targets", "3", NULL), 0);
	assert_false(help);
	assert_int_equal(c.targets, 3);
	free(missing);
}

/* ---- check --------------------------------------------------------------- */

static void check_expect(const struct srv_config *c, int want, const char *needle)
{
	char err[1024] = "";
	int rc = srv_config_check(c, err, sizeof(err));

	if (want == 0) {
		if (rc != 0)
			fail_msg("check failed: %d %s", rc, err);
	} else {
		assert_err(rc, want, err, needle);
	}
}

static void test_check(void **state)
{
	static const char *const good_listen[] = {
		"127.0.0.1:7420", "localhost", "host.example.com:0", "h:65535",
		"[::1]:7420", "[::1]", "[fe80::1%eth0]:1", "my_host-1:80",
	};
	static const char *const bad_listen[] = {
		"", ":7420", "host:", "host:65536", "host:12a", "host:-1", "host:+80",
		"::1", "fe80::1:7420", "[::1", "[::1]x", "[::1]:", "[]:1", "[host]:1",
		"ho st:1", "h/x:1",
	};
	struct srv_config c;

	srv_config_defaults(&c);
	check_expect(&c, 0, NULL);

	strcpy(c.transport, "udp");
	check_expect(&c, -EINVAL, "transport: 'udp' is not one of auto, tcp, shm, rdma");
	for (const char *const *t = (const char *const[]){"auto", "tcp", "shm", "rdma", NULL}; *t;
	     t++) {
		strcpy(c.transport, *t);
		check_expect(&c, 0, NULL);
	}
	strcpy(c.transport, "");
	check_expect(&c, -EINVAL, "transport");
	srv_config_defaults(&c);

	strcpy(c.bulk, "dma");
	check_expect(&c, -EINVAL, "bulk: 'dma'");
	strcpy(c.bulk, "AM");
	check_expect(&c, -EINVAL, "bulk");
	strcpy(c.bulk, "am");
	check_expect(&c, 0, NULL);
	strcpy(c.bulk, "rma");
	check_expect(&c, 0, NULL);
	srv_config_defaults(&c);

	c.targets = 0;
	check_expect(&c, -EINVAL, "targets");
	c.targets = SRV_TARGETS_MAX + 1;
	check_expect(&c, -EINVAL, "targets: 65 is out of range");
	c.targets = SRV_TARGETS_MAX;
	check_expect(&c, 0, NULL);
	c.targets = 1;

	c.inline_max = (1u << 20) + 1;
	check_expect(&c, -EINVAL, "inline_max");
	c.inline_max = 1u << 20;
	check_expect(&c, 0, NULL);
	c.inline_max = 0;
	check_expect(&c, 0, NULL);

	c.path[0] = 0;
	check_expect(&c, -EINVAL, "path: must not be empty");
	srv_config_defaults(&c);

	/* A string filled in by code without its terminator. */
	memset(c.bulk, 'a', sizeof(c.bulk));
	check_expect(&c, -EINVAL, "bulk: not NUL-terminated");
	srv_config_defaults(&c);

	for (size_t i = 0; i < sizeof(good_listen) / sizeof(good_listen[0]); i++) {
		char err[1024] = "";

		strcpy(c.listen, good_listen[i]);
		if (srv_config_check(&c, err, sizeof(err)) != 0)
			fail_msg("listen '%s' refused: %s", good_listen[i], err);
	}
	for (size_t i = 0; i < sizeof(bad_listen) / sizeof(bad_listen[0]); i++) {
		char err[1024] = "";

		strcpy(c.listen, bad_listen[i]);
		if (srv_config_check(&c, err, sizeof(err)) != -EINVAL || !strstr(err, "listen: "))
			fail_msg("listen '%s' was not refused with a message: '%s'",
				 bad_listen[i], err);
	}
	/* A bare IPv6 address is refused for what it is, not for a bad port. */
	strcpy(c.listen, "fe80::1:7420");
	check_expect(&c, -EINVAL, "needs brackets");
	assert_int_equal(srv_config_check(NULL, NULL, 0), -EINVAL);
}

/* ---- --help and the example files ---------------------------------------- */

/* Expect every key at the start of a line of text (after indent spaces). */
static void assert_every_key(const char *text, unsigned indent, const char *what)
{
	for (size_t i = 0; i < NKEYS; i++) {
		char needle[64];

		snprintf(needle, sizeof(needle), "\n%*s%s:", (int)indent, "", keys[i]);
		if (!strstr(text, needle))
			fail_msg("%s does not set '%s'", what, keys[i]);
	}
}

static void test_usage(void **state)
{
	static const char *const needles[] = {
		"Usage: loded [--config FILE] [options]\n",
		"serves Lode storage targets over UCX",
		"--config FILE",
		"-h, --help",
		"SIGTERM",
		"SIGINT",
		"drain",
		"--listen HOST[:PORT]",
		"--targets N",
		"--path DIR",
		"--ram[=BOOL]",
		"--capacity SIZE",
		"--transport NAME",
		"--bulk NAME",
		"--inline-max SIZE",
		"--poll-us USEC",
		"--pidfile FILE",
		"--addrfile FILE",
		"(default: 127.0.0.1:7420)",
		"(default: ./lode-data)",
		"(default: 8192)",
		"(default: 1000)",
	};
	struct srv_config c, d;
	char *text = NULL, *example, *path, err[1024];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	assert_non_null(f);
	srv_config_usage(f);
	assert_int_equal(fclose(f), 0);
	for (size_t i = 0; i < sizeof(needles) / sizeof(needles[0]); i++)
		if (!strstr(text, needles[i]))
			fail_msg("--help lacks '%s':\n%s", needles[i], text);
	/* Each key beside its flag, on one line. */
	for (size_t i = 0; i < NKEYS; i++) {
		char needle[64];

		snprintf(needle, sizeof(needle), " %s ", keys[i]);
		if (!strstr(text, needle))
			fail_msg("--help does not name the key '%s'", keys[i]);
	}

	/* The example at the end is a file loded accepts, setting every key. */
	example = strstr(text, "Example configuration file");
	assert_non_null(example);
	example = strchr(example, '\n');
	assert_non_null(example);
	assert_every_key(example, 2, "--help's example");
	path = write_yaml("usage", example + 1);
	srv_config_defaults(&c);
	d = c;
	err[0] = 0;
	if (srv_config_load(&c, path, err, sizeof(err)) != 0)
		fail_msg("--help's example does not load: %s", err);
	assert_int_equal(srv_config_check(&c, err, sizeof(err)), 0);
	assert_memory_not_equal(&c, &d, sizeof(c));
	unlink(path);
	free(path);
	free(text);
}

static void test_example_file(void **state)
{
	const char *path = LODE_SOURCE_DIR "/etc/loded.example.yaml";
	struct srv_config c;
	char err[1024] = "", *text;
	long n;
	FILE *f;

	srv_config_defaults(&c);
	if (srv_config_load(&c, path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	if (srv_config_check(&c, err, sizeof(err)) != 0)
		fail_msg("%s: %s", path, err);

	/* Every key is there, uncommented, so the file documents them all. */
	f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	text = calloc(1, (size_t)n + 2);
	assert_non_null(text);
	text[0] = '\n'; /* so the first line starts after a newline too */
	assert_int_equal(fread(text + 1, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	assert_every_key(text, 0, path);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_load_full),
		cmocka_unit_test(test_load_partial_and_empty),
		cmocka_unit_test(test_load_sizes_and_bools),
		cmocka_unit_test(test_load_missing_file),
		cmocka_unit_test(test_load_unknown_key),
		cmocka_unit_test(test_load_bad_bool),
		cmocka_unit_test(test_load_bad_number),
		cmocka_unit_test(test_join_and_heartbeat),
		cmocka_unit_test(test_mgmt_replicas),
		cmocka_unit_test(test_load_overflow),
		cmocka_unit_test(test_load_bad_suffix),
		cmocka_unit_test(test_load_bad_strings),
		cmocka_unit_test(test_load_malformed_yaml),
		cmocka_unit_test(test_flags_both_forms),
		cmocka_unit_test(test_flags_override_file),
		cmocka_unit_test(test_config_last_still_loses),
		cmocka_unit_test(test_flags_bad),
		cmocka_unit_test(test_help),
		cmocka_unit_test(test_check),
		cmocka_unit_test(test_usage),
		cmocka_unit_test(test_example_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
