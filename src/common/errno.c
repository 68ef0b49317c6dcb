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
	[LODE_EAUTH - LODE_ERR_BASE] = "authentication failed: wrong user or secret, or no credentials",
	[LODE_ECAPMISSING - LODE_ERR_BASE] = "request carries no capability",
	[LODE_ECAPFORGED - LODE_ERR_BASE] = "capability signature does not verify",
	[LODE_ECAPEXPIRED - LODE_ERR_BASE] = "capability expired",
	[LODE_ECAPREVOKED - LODE_ERR_BASE] = "capability revoked",
	[LODE_ECAPSCOPE - LODE_ERR_BASE] = "capability is for another container, pool or client",
	[LODE_ECAPRIGHTS - LODE_ERR_BASE] = "capability does not grant the rights this needs",
	[LODE_ESTALEMAP - LODE_ERR_BASE] = "request placed with an older pool map",
	[LODE_EFENCED - LODE_ERR_BASE] = "engine is not serving (excluded from the pool map, or cut off from the management service)",
	[LODE_ENOTLEADER - LODE_ERR_BASE] = "not the leader: the request must go to the leader replica",
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
