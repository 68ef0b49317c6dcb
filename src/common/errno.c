/*
 * Messages for Lode's error codes (see include/lode/errno.h): one table for
 * Lode's own codes, strerror() for the errno range.
 */
#include <string.h>

#include "lode/errno.h"

static const char *const lode_msgs[] = {
	[LODE_ECSUM - LODE_ERR_BASE] = "stored data failed its checksum",
	[LODE_ENOCONT - LODE_ERR_BASE] = "no such container",
	[LODE_ENOSNAP - LODE_ERR_BASE] = "no such snapshot",
	[LODE_EKEYEMPTY - LODE_ERR_BASE] = "key is empty",
	[LODE_ETYPE - LODE_ERR_BASE] = "value type mismatch (single value vs byte array)",
	[LODE_ECORRUPT - LODE_ERR_BASE] = "on-media metadata is corrupt",
	[LODE_EBADTGT - LODE_ERR_BASE] = "target failed a flush and refuses writes",
};

const char *lode_strerror(int rc)
{
	if (rc == 0)
		return "success";
	if (rc > 0)
		return "not an error code";
	rc = -rc;
	if (rc > LODE_ERR_BASE && rc < LODE_ERR_LAST)
		return lode_msgs[rc - LODE_ERR_BASE];
	if (rc < LODE_ERR_BASE)
		return strerror(rc);
	return "unknown error";
}
