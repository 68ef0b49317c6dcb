/*
 * Containers created with properties (cont_props.h).
 *
 * The order is lode_cont_create's (objects.c): the management service
 * first, which names the container, records its owner and properties, and
 * answers with its uuid; then each target, with a capability scoped to the
 * new container (OpenContainer). A crash in between leaves a name whose
 * container is missing on some targets; `lode cont destroy` then removes
 * the name (targets that lack the container are skipped) so it can be made
 * again.
 *
 * An encrypted container's data key is made here, wrapped with the
 * caller's tenant key, and handed to the service in that form only.
 */
#include "client/cont_props.h"

#include <errno.h>
#include <string.h>

#include "client/client.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"

/*
 * The container on every target we reach that done[] does not have yet,
 * one at a time: creating a container is rare, and a failure then names
 * the first target that refused. One there already (an earlier attempt)
 * is fine. done[] gains the targets that made it.
 */
static int targets_create(lode_conn_t *c, const struct net_args *a, bool *done)
{
	int rc = 0;

	for (unsigned i = 0; i < c->ntargets && rc == 0; i++) {
		if (done[i])
			continue;
		struct creq *r;

		if ((rc = conn_target_reach(c, i)) != 0) {
			/* DOWN or OUT: the walk of its targets makes it if it is
			 * ever back; lost while the map has it UP: it would miss it */
			rc = rc < 0 ? rc : 0;
			continue;
		}
		if (!(r = creq_new(c, NET_OP_CONT_CREATE, i)))
			return -ENOMEM;
		r->a = *a;
		rc = creq_submit(r, NULL, NULL);
		if (rc == -EEXIST)
			rc = 0;
		done[i] = rc == 0;
	}
	return rc;
}

int conn_cont_create_props(lode_conn_t *c, const char *label, const struct conn_cont_props *props,
			   struct lode_uuid *uuid_out)
{
	Lode__Mgmt__V1__ContCreateRequest req = LODE__MGMT__V1__CONT_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__ContProps p = LODE__MGMT__V1__CONT_PROPS__INIT;
	Lode__Mgmt__V1__ContInfo *rep = NULL;
	uint8_t wrapped[AUTH_WRAPPED_SIZE];
	struct net_args a = {0};
	bool done[CONN_TARGETS_MAX] = {false};
	int rc;

	if (!c || !label || !props)
		return -EFAULT;
	/* Encryption: a data key made here and sent only wrapped by the
	 * tenant key, which the service never sees (keys.c). No tenant key:
	 * -ENOKEY, and nothing is created. */
	if (props->encryption) {
		if ((rc = conn_data_key_new(c, wrapped)) < 0)
			return rc;
		req.wrapped_key.data = wrapped;
		req.wrapped_key.len = sizeof(wrapped);
	}
	p.object_class = (char *)(props->object_class ? props->object_class : "");
	p.chunk_size = props->chunk_size;
	p.checksum = (char *)(props->checksum ? props->checksum : "");
	p.encryption = props->encryption;
	p.crypt_block = props->crypt_block;
	req.pool = (char *)conn_pool(c);
	req.label = (char *)label;
	req.props = &p;
	rc = conn_mgmt_call(c, "/lode.mgmt.v1.Mgmt/ContCreate", &req.base,
			    &lode__mgmt__v1__cont_info__descriptor, (ProtobufCMessage **)&rep, -ENOENT);
	if (rc < 0)
		return rc;
	if (rep->uuid.len != sizeof(a.cont.b))
		rc = -EPROTO;
	else
		memcpy(a.cont.b, rep->uuid.data, sizeof(a.cont.b));
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	/* Registered, but nothing can be made of it: the service forgets it. */
	if (rc < 0 || (rc = conn_cont_acquire(c, label, &a.cont, NULL)) < 0) {
		conn_cont_unregister(c, label);
		return rc;
	}
	/* Every engine the map has now: one that joined after our last map,
	 * and walked its targets before the container was registered, would
	 * not get it otherwise (docs/decisions/0014). The targets we reach
	 * first, at once (an engine that joins later waits for the container
	 * to be on some target, 2 s at most, and then makes it itself), then
	 * those of the engines the fresh map adds. */
	if (!c->map_local)
		rc = conn_map_fetch(c);
	if (rc == 0)
		rc = targets_create(c, &a, done);
	/* Again once the engines the map names are connected: by us, or by
	 * the renewer, whose connect conn_engines_fresh waits for. One that
	 * the map has serving but that does not answer us fails the
	 * creation (-EHOSTDOWN, undone below): it would never have the
	 * container, and every write placed there would fail. */
	if (rc == 0 && !c->map_local && (rc = conn_engines_fresh(c)) == 0)
		rc = targets_create(c, &a, done);
	/* An engine that joined after that fetch walked its targets, and
	 * waited for the container on some target for 2 s at most: a second
	 * fetch names it, and it gets the container here (as does one being
	 * connected by the renewer during the rounds above). */
	if (rc == 0 && !c->map_local &&
	    (rc = conn_map_fetch(c)) == 0 && (rc = conn_engines_fresh(c)) == 0)
		rc = targets_create(c, &a, done);
	if (rc < 0) {
		/* Undo, so that the label can be created again: every target we
		 * reach drops it (a new engine's walk may have made it where we
		 * did not), then the service forgets it (best effort; the first
		 * error is what the caller gets). */
		conn_targets_undo(c, NET_OP_CONT_DESTROY, &a, NULL);
		conn_cont_release(c, &a.cont);
		conn_cont_unregister(c, label);
		return rc;
	}
	conn_cont_release(c, &a.cont);
	if (uuid_out)
		*uuid_out = a.cont;
	return 0;
}
