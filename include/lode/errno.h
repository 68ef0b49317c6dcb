/*
 * Lode's one error convention.
 *
 * Every Lode function that can fail returns 0 (or a non-negative count) on
 * success and a negative error code on failure. The code is either a negated
 * errno value (-ENOENT, -ENOSPC, ...) or a negated Lode code from the table
 * below; the two ranges never overlap because Lode's codes start at 4096,
 * above every errno Linux defines. lode_strerror() gives a message for both.
 */
#ifndef LODE_ERRNO_H
#define LODE_ERRNO_H

#include <errno.h> /* the negated errno values are part of the convention */

#ifdef __cplusplus
extern "C" {
#endif

enum lode_err {
	LODE_ERR_BASE = 4096,
	LODE_ECSUM,    /* stored data failed its checksum; the bytes are withheld */
	LODE_ENOCONT,  /* no such container */
	LODE_ENOSNAP,  /* no such snapshot */
	LODE_EKEYEMPTY,/* a dkey or akey of length zero */
	LODE_ETYPE,    /* single value vs byte array mismatch on one akey */
	LODE_ECORRUPT, /* on-media metadata is damaged beyond recovery */
	LODE_EBADTGT,  /* the target failed an earlier flush and refuses writes */
	LODE_EAUTH,       /* wrong user name or secret, or no credentials to present */
	LODE_ECAPMISSING, /* the request carries no capability */
	LODE_ECAPFORGED,  /* the capability's signature does not verify (or it is malformed) */
	LODE_ECAPEXPIRED, /* the capability has expired */
	LODE_ECAPREVOKED, /* the capability's user was revoked after it was issued */
	LODE_ECAPSCOPE,   /* the capability is for another container, pool or client */
	LODE_ECAPRIGHTS,  /* the capability does not grant the rights the request needs */
	LODE_ESTALEMAP,   /* placed with an older pool map; the reply's val is the engine's version */
	LODE_EFENCED,     /* the engine is out of the pool map's layout (DOWN or OUT) or has lost
			   * the management service for longer than the grace period */
	LODE_ENOTLEADER,  /* this replica is not the leader of its group; ask the one it names */
	LODE_ERR_LAST
};

/*
 * A message for a Lode return code: negative errno values, negative Lode
 * codes and 0. Never returns NULL; the string is static.
 */
const char *lode_strerror(int rc);

#ifdef __cplusplus
}
#endif
#endif
