#ifndef RETRYPROXY_ADMIN_CONNS_H
#define RETRYPROXY_ADMIN_CONNS_H

/* The admin listener's open connections, counted so that they can be
 * capped: evhttp (libevent 2.1) has no cap of its own, and every admin
 * client it accepts holds a descriptor the proxy's clients and upstreams
 * need too; and what came in on each that evhttp's parsed request cannot
 * show (a NUL byte). */

#include <stdbool.h>

#include <event2/event.h>
#include <event2/http.h>

/* Connections open at once at most; past it the listener stops accepting
 * and further clients wait in its listen queue. */
#define ADMIN_CONNS_MAX 64

struct admin_conns;

/* Count http's connections; changed(arg) is called after the count moved
 * (an accept's from inside the listener's accept). */
struct admin_conns *admin_conns_new(struct event_base *base, struct evhttp *http,
				    void (*changed)(void *arg), void *arg);

/* A request arrived on one of them: until its answer is written, the
 * connection is not cut for waiting too long for a request (20 s from its
 * accept or its last answer, whatever evhttp's per-read timeout lets
 * through). */
void admin_conns_request(struct admin_conns *conns, struct evhttp_request *req);

/* The refusal of req for the HTTP version its request line was written in
 * (400 for none at all, 505 for a major version other than 1), or 0. The
 * version is judged as written, before evhttp reads it as numbers; a
 * request refused reaches evhttp as HTTP/1.0, and evhttp's own answers to
 * it are written in HTTP/1.1. 0 for a connection not counted. */
int admin_conns_version_status(struct admin_conns *conns, struct evhttp_request *req);

/* Whether a NUL byte came in on req's connection in req's bytes (one in a
 * request pipelined behind it is that one's): evhttp's fields end at a
 * NUL, so the request it read may not be the one sent (RFC 9110 section
 * 5.5). */
bool admin_conns_read_nul(struct admin_conns *conns, struct evhttp_request *req);

/* Connections open now. */
unsigned admin_conns_open(const struct admin_conns *conns);

/* Connections open now whose answer is not all written. */
unsigned admin_conns_answering(struct admin_conns *conns);

/* After its evhttp was freed: let go of what is left. */
void admin_conns_free(struct admin_conns *conns);

#endif
