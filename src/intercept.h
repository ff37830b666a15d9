#ifndef RETRYPROXY_INTERCEPT_H
#define RETRYPROXY_INTERCEPT_H

/*
 * HTTPS interception in forward mode (SPEC): a CONNECT to a host that
 * intercept: lists is answered by the proxy itself, which becomes the TLS
 * server toward the client with a leaf certificate the local CA made for
 * that host; the requests inside then go through the usual request path as
 * on a sidecar listener whose upstream is https://host:port.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

struct access_record;
struct config;
struct conn;
struct intercept;
struct listener_config;
struct proxy;
struct upstream_url;

/* Is this CONNECT to be intercepted: a forward listener, intercept:
 * configured, and its host listed? */
bool intercept_wanted(const struct config *config, const struct listener_config *listen,
		      const struct http1_head *head);

/* Intercept the CONNECT whose head is at the front of conn's input: take
 * the head and answer 200; intercept_begin() then makes the TLS server
 * side with a leaf for the CONNECT host, once the client's first byte says
 * it speaks TLS. NULL when the host can have no certificate: *status and
 * reason say what to answer (nothing was written). */
struct intercept *intercept_start(struct proxy *proxy, const struct config *config,
				  struct conn *conn, const struct http1_head *head, int *status,
				  char *reason, size_t reason_len);

enum intercept_begun {
	INTERCEPT_WAITING, /* no byte from the client yet (or too few to tell) */
	INTERCEPT_TLS,	   /* TLS server side started: conn's event callback reports the
			    * handshake */
	INTERCEPT_PLAIN,   /* plain HTTP: the requests go to http://host:port */
	INTERCEPT_BLIND,   /* neither (an SSH banner), or the client waits for the server to
			    * speak first: the caller tunnels it blind
			    * (intercept_connect_blind) */
	INTERCEPT_FAILED,  /* no TLS server side (no leaf: logged), or the answer to the
			    * CONNECT could not be written before TLS: the connection
			    * can only be closed */
};

/* When intercept_begin() looks. */
enum intercept_look {
	INTERCEPT_LOOK_NOW,    /* bytes came: too few to tell, wait for more */
	INTERCEPT_LOOK_WAITED, /* intercept.server_first_after (or client_timeout) has passed
				* since the 200 */
	INTERCEPT_LOOK_ENDED,  /* the client half-closed: no more bytes come */
};

/* Look at the client's first bytes in conn's input: a TLS record (the
 * client speaks https, as intercepting expects), the start of a request
 * line (a method and a space), plain HTTP (a browser's ws:// and curl -p
 * http:// go by CONNECT too), or anything else (an SSH banner, a Redis
 * command): blind. LOOK_WAITED: no byte at all then is a client waiting
 * for its server to speak first (SMTP): blind; too few to tell, plain
 * HTTP. LOOK_ENDED: too few to tell is blind (the caller passes the
 * half-close on). */
enum intercept_begun intercept_begin(struct intercept *intercept, struct conn *conn,
				     enum intercept_look look);

/* Has the client's first byte (or the wait) decided what the tunnel is? */
bool intercept_begun(const struct intercept *intercept);

/* Milliseconds since the CONNECT was answered. */
uint64_t intercept_age_ms(const struct intercept *intercept);

/* Called once by intercept_connect_blind(): with the connected upstream
 * conn (the caller's now), or NULL and why not. */
typedef void (*intercept_blind_cb)(struct conn *upstream, const char *reason, void *arg);

/* After INTERCEPT_BLIND: connect to the CONNECT host and port as a blind
 * CONNECT does (config's connect_timeout, which the caller gives as the
 * live one; the admin address refused); cb runs
 * later, never within this call, unless intercept_free() comes first. */
void intercept_connect_blind(struct intercept *intercept, struct proxy *proxy,
			     const struct config *config, intercept_blind_cb cb, void *arg);

/* After INTERCEPT_BLIND, when the blind tunnel is not made after all (its
 * connect failed, or the live config refuses it): the CONNECT's line
 * notes why it went blind and why not. */
void intercept_blind_refused(struct intercept *intercept, const char *reason);

/* The tunnel ends in its TLS handshake (refused, timed out, or the client
 * left): the CONNECT's line, whose 200 would otherwise look like a tunnel
 * that served, notes why after "intercepted". */
void intercept_handshake_ended(struct intercept *intercept, const char *why);

/* Why the tunnel goes blind (INTERCEPT_BLIND), for the log. */
const char *intercept_blind_why_text(const struct intercept *intercept);

/* Is the tunnel being made blind (intercept_connect_blind under way)? */
bool intercept_blind(const struct intercept *intercept);

/* The CONNECT's access line, for the blind tunnel to write when it ends:
 * its duration so far and a note saying why it went blind (when its
 * connect fails, the line is written as the tunnel closes, noting that).
 * The caller owns it. */
struct access_record *intercept_take_log(struct intercept *intercept);

/* The CONNECT's access line, written when the tunnel ends (intercept_end)
 * with the tunnel's life and the bytes the proxy sent the client inside it
 * from now on. */
void intercept_log_at_end(struct intercept *intercept, const struct access_record *record,
			  const struct conn *conn);

/* Note the bytes sent to the client through conn before it goes. */
void intercept_count(struct intercept *intercept, const struct conn *conn);

/* The tunnel ends: its CONNECT's line is written (conn: the client's, or
 * NULL when intercept_count() saw it last). NULL: nothing. */
void intercept_end(struct intercept *intercept, const struct conn *conn);

void intercept_free(struct intercept *intercept);

/* The CONNECT host (no port, no brackets): every request inside must name it. */
const char *intercept_host(const struct intercept *intercept);

/* "https://host:port" (or "http://" for plain HTTP in the tunnel) as the
 * client asked, put before targets in the log. */
const char *intercept_prefix(const struct intercept *intercept);

/* Where the requests inside go: https://host:port, verified as any https
 * upstream, or http://host:port for plain HTTP in the tunnel. */
const struct upstream_url *intercept_upstream(const struct intercept *intercept);

#endif
