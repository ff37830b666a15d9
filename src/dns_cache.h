#ifndef RETRYPROXY_DNS_CACHE_H
#define RETRYPROXY_DNS_CACHE_H

/*
 * Answers of upstream name lookups, kept for limits.dns_cache (or their
 * records' TTL when shorter: the caller's until_ms), so that a
 * request that needs a new connection (every non-idempotent one) does not
 * send the resolver two questions first. One answer per name, port (the
 * addresses carry it), family and resolver (with or without resolv.conf's
 * search list); an answer of no
 * address for a family (the name has A records only) is kept too, while
 * failures (NXDOMAIN, SERVFAIL, no answer) are not. A connect that used an
 * answer and failed forgets the name, so the next one asks again.
 */

#include <stdbool.h>
#include <stdint.h>

#include <event2/util.h>

struct dns_cache;
struct dns_cache_entry;

/* Address lists the cache takes are made here, node by node (libevent's
 * and getaddrinfo's own lists are copied: each frees its own way). Append
 * a copy of addr (an AF_INET or AF_INET6 address, with its port) to list;
 * returns the list. */
struct evutil_addrinfo *dns_addresses_add(struct evutil_addrinfo *list, const struct sockaddr *addr,
					  socklen_t len);

/* Append the address of family (AF_INET: the 4 bytes at ip; AF_INET6:
 * the 16) with port (host order) to list; returns the list. */
struct evutil_addrinfo *dns_addresses_add_ip(struct evutil_addrinfo *list, int family,
					     const void *ip, uint16_t port);

/* A copy of a list from libevent or getaddrinfo, made here; NULL for none. */
struct evutil_addrinfo *dns_addresses_copy(const struct evutil_addrinfo *list);

/* Free a list made here. */
void dns_addresses_free(struct evutil_addrinfo *list);

struct dns_cache *dns_cache_new(void);

/* Free the cache; entries still held are freed when released. */
void dns_cache_free(struct dns_cache *cache);

/* The answer for host (normalised: lower case, no trailing dot), port and
 * family (AF_INET or AF_INET6) from the resolver with (absolute false) or
 * without the search list, if it was kept and now_ms is before its end;
 * NULL otherwise. The entry is held for the caller until
 * dns_cache_release(). */
struct dns_cache_entry *dns_cache_find(struct dns_cache *cache, const char *host, uint16_t port,
				       bool absolute, int family, uint64_t now_ms);

/* Keep addresses (NULL: the name has none of this family; a list made by
 * dns_addresses_add()), which the cache owns from now on, until until_ms. Returns the entry, held for the caller. */
struct dns_cache_entry *dns_cache_put(struct dns_cache *cache, const char *host, uint16_t port,
				      bool absolute, int family, struct evutil_addrinfo *addresses,
				      uint64_t until_ms);

/* The addresses of a held entry (NULL: none of its family); valid until it
 * is released. */
struct evutil_addrinfo *dns_cache_addresses(const struct dns_cache_entry *entry);

/* Let go of an entry from dns_cache_find() or dns_cache_put(). */
void dns_cache_release(struct dns_cache_entry *entry);

/* Drop what is kept for host, every port, both families, from both
 * resolvers. */
void dns_cache_forget(struct dns_cache *cache, const char *host);

/* Drop everything kept (a reload read the resolver's files again); entries
 * still held are freed when released. */
void dns_cache_clear(struct dns_cache *cache);

/* Entries kept now (for tests). */
unsigned dns_cache_count(const struct dns_cache *cache);

#endif
