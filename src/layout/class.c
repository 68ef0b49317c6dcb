/*
 * Object classes: names, numeric ids, and what each means.
 *
 * A class is fixed by its numeric id (layout.h lists them), and the id is
 * what every object id carries, so the table here is a contract with every
 * object ever written: an id keeps its meaning forever, and a new class
 * takes an id from the reserved ranges. Names have exactly one spelling
 * each, so that a container property compares as a string.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "layout/layout.h"

/* The classes that are not S<n>: one row each. */
static const struct {
	const char *name;
	struct layout_class c;
} named[] = {
	{"SX", {LAYOUT_CLASS_SX, LAYOUT_R_NONE, 1, 0, 0, 1, 0}},
	{"RP_2", {LAYOUT_CLASS_RP_2, LAYOUT_R_REPLICA, 1, 1, 1, 2, 1}},
	{"RP_3", {LAYOUT_CLASS_RP_3, LAYOUT_R_REPLICA, 1, 2, 1, 3, 2}},
	{"EC_2P1", {LAYOUT_CLASS_EC_2P1, LAYOUT_R_EC, 2, 1, 1, 3, 1}},
	{"EC_4P2", {LAYOUT_CLASS_EC_4P2, LAYOUT_R_EC, 4, 2, 1, 6, 2}},
	{"EC_8P2", {LAYOUT_CLASS_EC_8P2, LAYOUT_R_EC, 8, 2, 1, 10, 2}},
};

#define NNAMED (sizeof(named) / sizeof(named[0]))

/* S<n>: n stripes of one shard each, no redundancy. */
static void class_striped(unsigned n, struct layout_class *c)
{
	*c = (struct layout_class){.id = (uint8_t)n, .redun = LAYOUT_R_NONE, .k = 1, .p = 0,
				   .groups = n, .group_size = 1, .tolerance = 0};
}

int layout_class_from_id(unsigned id, struct layout_class *c)
{
	if (id >= 1 && id <= LAYOUT_CLASS_S_MAX) {
		class_striped(id, c);
		return 0;
	}
	for (size_t i = 0; i < NNAMED; i++) {
		if (named[i].c.id == id) {
			*c = named[i].c;
			return 0;
		}
	}
	return -EINVAL;
}

int layout_class_from_oid(struct lode_oid oid, struct layout_class *c)
{
	unsigned id = lode_oid_class(oid);

	if (id == LAYOUT_CLASS_NONE)
		return -ENOENT;
	return layout_class_from_id(id, c);
}

int layout_class_parse(const char *name, struct layout_class *c)
{
	unsigned n = 0;
	const char *p;

	if (!name)
		return -EINVAL;
	for (size_t i = 0; i < NNAMED; i++) {
		if (strcmp(name, named[i].name) == 0) {
			*c = named[i].c;
			return 0;
		}
	}
	/* S<n>: decimal digits only, no leading zero, 1..LAYOUT_CLASS_S_MAX. */
	if (name[0] != 'S' || name[1] < '1' || name[1] > '9')
		return -EINVAL;
	for (p = name + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		n = n * 10 + (unsigned)(*p - '0');
		if (n > LAYOUT_CLASS_S_MAX)
			return -EINVAL;
	}
	class_striped(n, c);
	return 0;
}

int layout_class_name(unsigned id, char *buf, size_t cap)
{
	char tmp[LAYOUT_CLASS_NAME_MAX];
	struct layout_class c;
	size_t len;

	if (layout_class_from_id(id, &c))
		return -EINVAL;
	if (id <= LAYOUT_CLASS_S_MAX) {
		snprintf(tmp, sizeof(tmp), "S%u", id);
	} else {
		for (size_t i = 0; i < NNAMED; i++)
			if (named[i].c.id == id)
				snprintf(tmp, sizeof(tmp), "%s", named[i].name);
	}
	len = strlen(tmp);
	if (cap < len + 1)
		return -ENOBUFS;
	memcpy(buf, tmp, len + 1);
	return (int)len;
}
