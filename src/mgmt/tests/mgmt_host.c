/*
 * A tiny host for the management service, for tests/mgmt/mgmt_test.py: it
 * starts the service the way loded does, with fake hooks reporting two
 * targets, prints "port N" as its first line of output and serves until
 * SIGTERM or SIGINT.
 *
 *   mgmt_host --listen HOST:PORT --state-dir DIR --admin-cred FILE
 *             [--tls-cert PEM --tls-key PEM] [--cap-lifetime S] [--key-rotate S]
 *             [--heartbeat-ms MS] [--grace-ms MS]
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lode/errno.h"
#include "mgmt/mgmt.h"

#define FAKE_TARGETS 2
#define FAKE_CAPACITY (1ull << 30) /* bytes per target */

static unsigned fake_targets(void *arg, struct mgmt_target_info *out, unsigned max)
{
	for (unsigned i = 0; i < FAKE_TARGETS && i < max; i++)
		out[i] = (struct mgmt_target_info){.id = i,
						   .capacity = FAKE_CAPACITY,
						   .used = (i + 1) * 4096ull,
						   .requests = 10 * i,
						   .load = 0.25,
						   .ram = true};
	return FAKE_TARGETS;
}

static void usage(void)
{
	fprintf(stderr, "usage: mgmt_host --listen HOST:PORT --state-dir DIR --admin-cred FILE\n"
			"                 [--tls-cert PEM --tls-key PEM] [--cap-lifetime S]\n"
			"                 [--key-rotate S] [--heartbeat-ms MS] [--grace-ms MS]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"state-dir", required_argument, NULL, 's'},
		{"admin-cred", required_argument, NULL, 'a'},
		{"tls-cert", required_argument, NULL, 'c'},
		{"tls-key", required_argument, NULL, 'k'},
		{"cap-lifetime", required_argument, NULL, 'L'},
		{"key-rotate", required_argument, NULL, 'R'},
		{"heartbeat-ms", required_argument, NULL, 'H'},
		{"grace-ms", required_argument, NULL, 'G'},
		{0},
	};
	struct mgmt_config cfg = {.engine_addr = "127.0.0.1:9999", .ntargets = FAKE_TARGETS};
	struct mgmt_hooks hooks = {.targets = fake_targets};
	char msg[512] = "";
	mgmt_t *m;
	sigset_t set;
	int opt, rc, sig;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			cfg.listen = optarg;
			break;
		case 's':
			cfg.state_dir = optarg;
			break;
		case 'a':
			cfg.admin_cred = optarg;
			break;
		case 'c':
			cfg.tls.cert = optarg;
			break;
		case 'k':
			cfg.tls.key = optarg;
			break;
		case 'L':
			cfg.cap_lifetime_s = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'R':
			cfg.key_rotate_s = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'H':
			cfg.heartbeat_ms = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'G':
			cfg.grace_ms = (unsigned)strtoul(optarg, NULL, 10);
			break;
		default:
			usage();
			return 2;
		}
	}
	if (!cfg.listen || !cfg.state_dir) {
		usage();
		return 2;
	}
	/* Block the signals before any thread starts, so that only sigwait sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	rc = mgmt_start(&cfg, &hooks, &m, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, "mgmt_host: %s (%s)\n", msg[0] ? msg : "cannot start",
			lode_strerror(rc));
		return 1;
	}
	printf("port %d\n", mgmt_port(m));
	fflush(stdout);
	sigwait(&set, &sig);
	mgmt_stop(m);
	return 0;
}
