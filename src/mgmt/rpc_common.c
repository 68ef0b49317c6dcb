/*
 * The parts of lode_rpc both ends use (rpc_internal.h): TLS files checked
 * with OpenSSL before gRPC sees them, protobuf-c messages in and out of
 * gRPC byte buffers, and the channel arguments.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "mgmt/rpc_internal.h"

/* Certificates and keys are a few KiB; anything this big is not one. */
#define PEM_FILE_MAX (1 << 20)

void rpc_msg_set(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (!dst || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
}

/* Read a whole PEM file into a NUL-terminated string. */
static int pem_read(const char *path, const char *what, char **out, char *msg, size_t msg_cap)
{
	FILE *f = fopen(path, "re");
	char *buf;
	size_t n;

	*out = NULL;
	if (!f) {
		rpc_msg_set(msg, msg_cap, "TLS %s %s: %s", what, path, strerror(errno));
		return -EINVAL;
	}
	buf = malloc(PEM_FILE_MAX + 1);
	if (!buf) {
		fclose(f);
		return -ENOMEM;
	}
	n = fread(buf, 1, PEM_FILE_MAX + 1, f);
	if (ferror(f) || n > PEM_FILE_MAX) {
		rpc_msg_set(msg, msg_cap, "TLS %s %s: %s", what, path,
			    ferror(f) ? "read error" : "larger than 1 MiB");
		fclose(f);
		free(buf);
		return -EINVAL;
	}
	fclose(f);
	buf[n] = '\0';
	*out = buf;
	return 0;
}

static X509 *pem_cert(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;

	BIO_free(b);
	return x;
}

/* An encrypted key would otherwise make OpenSSL prompt on the terminal. */
static int pem_no_passphrase(char *buf, int size, int rwflag, void *u)
{
	return -1;
}

static EVP_PKEY *pem_key(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, pem_no_passphrase, NULL) : NULL;

	BIO_free(b);
	return k;
}

static int pem_check(const struct rpc_tls *tls, struct rpc_pem *p, char *msg, size_t msg_cap)
{
	X509 *cert = NULL;
	EVP_PKEY *key = NULL;
	int rc = -EINVAL;

	if (p->cert && !(cert = pem_cert(p->cert))) {
		rpc_msg_set(msg, msg_cap, "TLS cert %s: no PEM certificate in it", tls->cert);
		goto out;
	}
	if (p->key && !(key = pem_key(p->key))) {
		rpc_msg_set(msg, msg_cap, "TLS key %s: no unencrypted PEM private key in it",
			    tls->key);
		goto out;
	}
	if (cert && key && X509_check_private_key(cert, key) != 1) {
		rpc_msg_set(msg, msg_cap, "TLS key %s does not match the certificate %s", tls->key,
			    tls->cert);
		goto out;
	}
	if (p->ca) {
		X509 *ca = pem_cert(p->ca);

		if (!ca) {
			rpc_msg_set(msg, msg_cap, "TLS ca %s: no PEM certificate in it", tls->ca);
			goto out;
		}
		X509_free(ca);
	}
	rc = 0;
out:
	X509_free(cert);
	EVP_PKEY_free(key);
	/* Leave no error on this thread's OpenSSL queue for gRPC to trip on. */
	ERR_clear_error();
	return rc;
}

int rpc_pem_load(const struct rpc_tls *tls, bool need_pair, struct rpc_pem *out, char *msg,
		 size_t msg_cap)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (!tls->cert != !tls->key || (need_pair && !tls->cert)) {
		rpc_msg_set(msg, msg_cap, "TLS needs both a certificate and its key%s",
			    need_pair ? " (the server)" : " (or neither)");
		return -EINVAL;
	}
	if (tls->cert && (rc = pem_read(tls->cert, "cert", &out->cert, msg, msg_cap)))
		return rc;
	if (tls->key && (rc = pem_read(tls->key, "key", &out->key, msg, msg_cap)))
		return rc;
	if (tls->ca && (rc = pem_read(tls->ca, "ca", &out->ca, msg, msg_cap)))
		return rc;
	return pem_check(tls, out, msg, msg_cap);
}

void rpc_pem_free(struct rpc_pem *p)
{
	free(p->cert);
	if (p->key) {
		/* A private key: do not leave it in freed memory. */
		explicit_bzero(p->key, strlen(p->key));
		free(p->key);
	}
	free(p->ca);
	memset(p, 0, sizeof(*p));
}

grpc_byte_buffer *rpc_msg_pack(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	grpc_slice s = n ? grpc_slice_malloc(n) : grpc_empty_slice();
	grpc_byte_buffer *bb;

	if (n)
		protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
	bb = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	return bb;
}

ProtobufCMessage *rpc_msg_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb)
{
	grpc_byte_buffer_reader r;
	ProtobufCMessage *m;
	grpc_slice s;

	if (!bb || !grpc_byte_buffer_reader_init(&r, bb))
		return NULL;
	s = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
	grpc_slice_unref(s);
	return m;
}

void rpc_args_fill(grpc_channel_args *ca, grpc_arg *args, bool server)
{
	static char max_recv[] = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
	static char max_send[] = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
	static char reuseport[] = GRPC_ARG_ALLOW_REUSEPORT;
	static char backoff[] = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;

	args[0] = (grpc_arg){ .type = GRPC_ARG_INTEGER, .key = max_recv,
			      .value.integer = RPC_MAX_MESSAGE };
	args[1] = (grpc_arg){ .type = GRPC_ARG_INTEGER, .key = max_send,
			      .value.integer = RPC_MAX_MESSAGE };
	if (server)
		args[2] = (grpc_arg){ .type = GRPC_ARG_INTEGER, .key = reuseport, .value.integer = 0 };
	else /* a service that was away is found again within 2 s of its return
	      * (gRPC's own default lets the wait grow to 120 s) */
		args[2] = (grpc_arg){ .type = GRPC_ARG_INTEGER, .key = backoff,
				      .value.integer = RPC_RECONNECT_MAX_MS };
	ca->args = args;
	ca->num_args = 3;
}
