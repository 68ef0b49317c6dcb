/*
 * The control-plane commands of `lode` (admin.c): login, whoami, pools,
 * containers' properties, tenants, users, groups, ACLs, system status and
 * key rotation. lode.c's command table names them, gives their synopsis,
 * argument counts and help, and hands them over here with the flag
 * CMD_ADMIN; admin.c parses their options and runs them.
 */
#ifndef LODE_CLI_ADMIN_H
#define LODE_CLI_ADMIN_H

#include "lode/lode.h"

/* What lode.c's table says about the command being run. */
struct admin_cmd {
	const char *name;    /* its words: "pool create" */
	const char *args;    /* its synopsis, for usage errors */
	int min_args;
	int max_args;        /* -1: any number */
};

/* admin_main's answer to --help: print the command's help, exit 0. */
#define ADMIN_HELP (-1)

/*
 * Run the admin command cmd with the arguments that follow its words (argv,
 * argc of them: options and positionals mixed, "--" ends the options). addr
 * and opts are the global --addr (NULL: the default) and --transport /
 * --timeout. Returns the exit status (0, 1 failure, 2 usage error; the
 * message is printed) or ADMIN_HELP. Blocks.
 */
int admin_main(const struct admin_cmd *cmd, const char *addr, const struct lode_conn_opts *opts,
	       int argc, char **argv);

#endif
