/*
 * `lode bench`: the fio-like load generator of the `lode` command, on the
 * native client API (lode/lode.h). bench.c has the usage and how a run goes.
 */
#ifndef LODE_CLI_BENCH_H
#define LODE_CLI_BENCH_H

/*
 * Run `lode bench` with argv[0] "bench" and the options after it. Prints the
 * report (text, or one JSON object with --json) on stdout, messages on
 * stderr. Blocks for the whole run. Returns the process exit status: 0; 1 on
 * an I/O error, a verify mismatch or a failure to connect or set up; 2 on a
 * bad argument; 130 when interrupted by SIGINT or SIGTERM.
 */
int lode_bench_main(int argc, char **argv);

#endif
