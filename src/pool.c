#include "pool.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "conn.h"
#include "tls.h"
#include "xmalloc.h"

#define POOL_BUCKET_BITS 8
#define POOL_BUCKETS (1u << POOL_BUCKET_BITS) /* hash buckets for upstream keys */
#define POOL_SPARES 64 /* idle entries kept for reuse: a put per request needs no malloc */
/* Keys with no idle connection left keep their entry (the next put of a
 * busy upstream needs no malloc) until there are this many entries more
 * than twice those the last sweep kept: a forward proxy that meets a new
 * host with every request stays bounded, at a sweep per so many new keys. */
#define POOL_EMPTY_SLACK 256

struct pool_upstream;

struct pool_idle {
	struct pool *pool;
	struct pool_upstream *upstream;
	struct conn *conn;
	bool http10;			 /* its last response came in HTTP/1.0 */
	TAILQ_ENTRY(pool_idle) link;	 /* in its upstream's list */
	TAILQ_ENTRY(pool_idle) all_link; /* in the pool's list */
	struct pool_idle *next_spare;
};

struct pool_upstream {
	char *key;
	unsigned idle_count;
	TAILQ_HEAD(pool_idle_list, pool_idle) idle; /* most recently idled first */
	struct pool_upstream *next;		    /* in the bucket */
};

struct pool {
	unsigned idle_count;
	TAILQ_HEAD(pool_all_list, pool_idle)
	all;		    /* every idle connection, most recently idled first */
	unsigned key_count; /* entries in the buckets */
	unsigned sweep_at;  /* key_count at which entries without idle connections go */
	unsigned spare_count;
	struct pool_idle *spares;
	struct pool_upstream *buckets[POOL_BUCKETS];
};

struct pool *pool_new(void)
{
	struct pool *pool = xcalloc(1, sizeof(struct pool));

	TAILQ_INIT(&pool->all);
	pool->sweep_at = POOL_EMPTY_SLACK;
	return pool;
}

unsigned pool_key_count(const struct pool *pool)
{
	return pool->key_count;
}

/* Forget every key that has no idle connection: nothing points at its
 * entry (an idle connection's bookkeeping does only while it is listed). */
static void pool_forget_empty(struct pool *pool)
{
	unsigned b;

	for (b = 0; b < POOL_BUCKETS; b++) {
		struct pool_upstream **link = &pool->buckets[b];

		while (*link != NULL) {
			struct pool_upstream *u = *link;

			if (u->idle_count > 0) {
				link = &u->next;
				continue;
			}
			*link = u->next;
			free(u->key);
			free(u);
			pool->key_count--;
		}
	}
	pool->sweep_at = 2 * pool->key_count + POOL_EMPTY_SLACK;
}

/* FNV-1a over 8-byte words rather than bytes: a key of some 40 bytes is
 * hashed twice per request (put and take), and the spread of any hash will
 * do. The bucket comes from the top bits, which the multiplications fill
 * from every byte of the key. */
static unsigned pool_hash(const char *key)
{
	size_t len = strlen(key);
	const char *end = key + len;
	uint64_t h = 14695981039346656037u;
	uint64_t word = 0;

	for (; end - key > (ptrdiff_t)sizeof(word); key += sizeof(word)) {
		memcpy(&word, key, sizeof(word));
		h = (h ^ word) * 1099511628211u;
	}
	/* the last word ends with the key, overlapping the one before: a load
	 * of fixed size, not a copy of the 1 to 8 bytes left */
	if (len >= sizeof(word))
		memcpy(&word, end - sizeof(word), sizeof(word));
	else
		memcpy(&word, key, len);
	h = (h ^ word) * 1099511628211u;
	return (unsigned)(h >> (64 - POOL_BUCKET_BITS));
}

static struct pool_upstream *pool_find(struct pool *pool, const char *key, int create)
{
	unsigned b = pool_hash(key);
	struct pool_upstream *u;

	for (u = pool->buckets[b]; u != NULL; u = u->next)
		if (strcmp(u->key, key) == 0)
			return u;
	if (!create)
		return NULL;
	if (pool->key_count >= pool->sweep_at)
		pool_forget_empty(pool);
	u = xcalloc(1, sizeof(*u));
	u->key = xstrdup(key);
	TAILQ_INIT(&u->idle);
	u->next = pool->buckets[b];
	pool->buckets[b] = u;
	pool->key_count++;
	return u;
}

/* Unlink an idle entry and free its bookkeeping, returning its connection. */
static struct conn *pool_detach(struct pool *pool, struct pool_idle *idle)
{
	struct conn *conn = idle->conn;

	TAILQ_REMOVE(&idle->upstream->idle, idle, link);
	TAILQ_REMOVE(&pool->all, idle, all_link);
	idle->upstream->idle_count--;
	pool->idle_count--;
	if (pool->spare_count < POOL_SPARES) {
		idle->next_spare = pool->spares;
		pool->spares = idle;
		pool->spare_count++;
	} else {
		free(idle);
	}
	conn_setcb(conn, NULL, NULL, NULL, NULL);
	conn_set_deadline(conn, 0);
	return conn;
}

/* Close an idle connection for good. */
static void pool_close(struct pool *pool, struct pool_idle *idle)
{
	conn_free(pool_detach(pool, idle));
}

/* Any byte on an idle connection ends it: no request asked for it. */
static void pool_idle_read_cb(struct conn *conn, void *arg)
{
	struct pool_idle *idle = arg;

	pool_close(idle->pool, idle);
}

/* The upstream closed or reset the idle connection, or it stayed idle for
 * pool_idle_timeout (its deadline). */
static void pool_idle_event_cb(struct conn *conn, short what, void *arg)
{
	struct pool_idle *idle = arg;

	pool_close(idle->pool, idle);
}

bool pool_put(struct pool *pool, const char *key, struct conn *conn, bool http10, unsigned max_idle,
	      uint64_t idle_timeout_ms)
{
	struct pool_upstream *u = pool_find(pool, key, 1);
	struct pool_idle *idle;

	if (u->idle_count >= max_idle) {
		conn_free(conn);
		return false;
	}
	idle = pool->spares;
	if (idle != NULL) {
		pool->spares = idle->next_spare;
		pool->spare_count--;
	} else {
		idle = xmalloc(sizeof(*idle));
	}
	idle->pool = pool;
	idle->upstream = u;
	idle->conn = conn;
	idle->http10 = http10;
	TAILQ_INSERT_HEAD(&u->idle, idle, link);
	TAILQ_INSERT_HEAD(&pool->all, idle, all_link);
	u->idle_count++;
	pool->idle_count++;
	conn_setcb(conn, pool_idle_read_cb, NULL, pool_idle_event_cb, idle);
	/* fails only when its readiness already waits in this pass: then
	 * pool_take() finds it still waiting */
	conn_handle_first(conn, true);
	conn_set_timeouts(conn, 0, 0);
	conn_set_deadline(conn, idle_timeout_ms);
	conn_read_enable(conn, true);
	return true;
}

struct conn *pool_take(struct pool *pool, const char *key, bool *http10)
{
	struct pool_upstream *u = pool_find(pool, key, 0);

	if (u == NULL)
		return NULL;
	while (!TAILQ_EMPTY(&u->idle)) {
		struct pool_idle *idle = TAILQ_FIRST(&u->idle);

		/* Bytes that came while it idled end it (pool_idle_read_cb)
		 * when the loop reads them, ahead of any request of the same
		 * pass (pool_put made it go first): read as that request's
		 * response they would reach a client who never asked. One whose
		 * readiness still waits goes too: its readiness was waiting when
		 * it was pooled (so it kept the usual priority), or the take
		 * comes from within another first connection's handling. Part
		 * of a TLS record that came while it idled is the start of such
		 * bytes: a read finds nothing until the rest arrives, which
		 * would then be read as the new request's response. */
		if (conn_handle_first(idle->conn, false) && !conn_tls_partial_record(idle->conn)) {
			*http10 = idle->http10;
			return pool_detach(pool, idle);
		}
		pool_close(pool, idle);
	}
	return NULL;
}

bool pool_close_one(struct pool *pool, const char *key)
{
	struct pool_upstream *u = pool_find(pool, key, 0);
	/* a key is "scheme://host:port", then "|ca_file|verify" for TLS */
	size_t n = strcspn(key, "|");
	unsigned b;

	if (u != NULL && !TAILQ_EMPTY(&u->idle)) {
		pool_close(pool, TAILQ_LAST(&u->idle, pool_idle_list));
		return true;
	}
	if (pool->idle_count == 0)
		return false;
	for (b = 0; b < POOL_BUCKETS; b++)
		for (u = pool->buckets[b]; u != NULL; u = u->next)
			if (!TAILQ_EMPTY(&u->idle) && strncmp(u->key, key, n) == 0 &&
			    (u->key[n] == '\0' || u->key[n] == '|')) {
				pool_close(pool, TAILQ_LAST(&u->idle, pool_idle_list));
				return true;
			}
	return false;
}

unsigned pool_close_oldest(struct pool *pool, unsigned n)
{
	unsigned closed = 0;

	while (closed < n && !TAILQ_EMPTY(&pool->all)) {
		pool_close(pool, TAILQ_LAST(&pool->all, pool_all_list));
		closed++;
	}
	return closed;
}

/* The first of u's idle connections verified under a trust that is not
 * tls's now. */
static struct pool_idle *pool_first_stale_tls(struct pool_upstream *u, const struct tls_store *tls)
{
	struct pool_idle *idle;

	TAILQ_FOREACH(idle, &u->idle, link)
		if (conn_ssl(idle->conn) != NULL && !tls_store_current(tls, conn_ssl(idle->conn)))
			return idle;
	return NULL;
}

void pool_close_stale_tls(struct pool *pool, const struct tls_store *tls)
{
	struct pool_idle *idle;

	/* looked for from the start after each close, so that nothing a close
	 * sets off can leave the walk on a freed entry (a place given back is
	 * handed on from the loop, later, as it is now) */
	for (unsigned b = 0; b < POOL_BUCKETS; b++)
		for (struct pool_upstream *u = pool->buckets[b]; u != NULL; u = u->next)
			while ((idle = pool_first_stale_tls(u, tls)) != NULL)
				pool_close(pool, idle);
}

void pool_apply_limits(struct pool *pool, unsigned max_idle, uint64_t idle_timeout_ms,
		       bool restart_timeouts)
{
	struct pool_idle *idle;

	if (pool->idle_count == 0)
		return;
	for (unsigned b = 0; b < POOL_BUCKETS; b++)
		for (struct pool_upstream *u = pool->buckets[b]; u != NULL; u = u->next)
			while (u->idle_count > max_idle)
				pool_close(pool, TAILQ_LAST(&u->idle, pool_idle_list));
	if (restart_timeouts)
		TAILQ_FOREACH(idle, &pool->all, all_link)
			conn_set_deadline(idle->conn, idle_timeout_ms);
}

void pool_free(struct pool *pool)
{
	unsigned b;

	if (pool == NULL)
		return;
	for (b = 0; b < POOL_BUCKETS; b++) {
		while (pool->buckets[b] != NULL) {
			struct pool_upstream *u = pool->buckets[b];

			while (!TAILQ_EMPTY(&u->idle))
				pool_close(pool, TAILQ_FIRST(&u->idle));
			pool->buckets[b] = u->next;
			free(u->key);
			free(u);
		}
	}
	while (pool->spares != NULL) {
		struct pool_idle *spare = pool->spares;

		pool->spares = spare->next_spare;
		free(spare);
	}
	free(pool);
}
