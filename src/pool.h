#ifndef RETRYPROXY_POOL_H
#define RETRYPROXY_POOL_H

/*
 * Idle keep-alive upstream connections per (scheme, host, port, trust
 * policy). An idle connection that the upstream closes, that receives
 * unexpected bytes, or that stays idle too long is closed here.
 */

#include <stdbool.h>
#include <stdint.h>

struct conn;
struct pool;
struct tls_store;

struct pool *pool_new(void);

/* Close every idle connection and free the pool. */
void pool_free(struct pool *pool);

/* Keep conn idle under key; closed at once if key already holds max_idle.
 * http10: its last response came in HTTP/1.0, so the server is not known
 * to take a chunked request (RFC 9112 section 6.1). True when it was kept. */
bool pool_put(struct pool *pool, const char *key, struct conn *conn, bool http10, unsigned max_idle,
	      uint64_t idle_timeout_ms);

/* The most recently idled connection for key, or NULL; the caller owns it.
 * Idle connections go first in a loop pass (conn_handle_first), so one that
 * got bytes or a close in the pass that brings the request taking it is
 * closed before; one whose readiness still waits then (it came before the
 * connection could be moved first) is closed here and the next one looked
 * at. Its callbacks are cleared but reading stays on, so
 * that taking it costs no syscall: give it callbacks before returning to the
 * loop. *http10 says what pool_put() was told of it. */
struct conn *pool_take(struct pool *pool, const char *key, bool *http10);

/* How many keys the pool has an entry for: those with idle connections, and
 * a bounded number of others (see POOL_EMPTY_SLACK in pool.c). */
unsigned pool_key_count(const struct pool *pool);

/* Close the least recently used idle connection for key, to make room for a
 * new one (max_upstream_connections); when key has none, one to the same
 * upstream (scheme, host and port) under another key (another route's
 * tls.ca_file or tls.verify), which holds a place under the same cap.
 * False when there is none. */
bool pool_close_one(struct pool *pool, const char *key);

/* Close up to n idle connections, those idle longest first, whatever their
 * upstream: the process is out of file descriptors, and an idle connection
 * is the one descriptor it can give back without failing anyone. Returns
 * how many it closed. */
unsigned pool_close_oldest(struct pool *pool, unsigned n);

/* Close every idle connection verified under a trust a reload replaced
 * (tls_store_current()): one whose trust the reload kept stays pooled. */
void pool_close_stale_tls(struct pool *pool, const struct tls_store *tls);

/* A reload's new limits for connections already idle: each upstream keeps
 * at most max_idle of them (those idle longest close), and with
 * restart_timeouts each left has idle_timeout_ms from now (a lowered
 * pool_idle_timeout would otherwise wait out the old one). */
void pool_apply_limits(struct pool *pool, unsigned max_idle, uint64_t idle_timeout_ms,
		       bool restart_timeouts);

#endif
