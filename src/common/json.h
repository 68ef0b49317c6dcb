/* JSON output helpers shared by the benchmarks. */
#ifndef LODE_COMMON_JSON_H
#define LODE_COMMON_JSON_H

#include <stdio.h>

/* Write s as a JSON string (escaped, quoted) to out; NULL writes null. */
void lode_json_str(FILE *out, const char *s);

#endif
