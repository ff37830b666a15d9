#include "dns_cache.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hash.h"
#include "xmalloc.h"

/* Buckets of the name table, and the most answers kept: a forward proxy
 * whose clients name many hosts keeps the latest, the oldest going first. */
#define DNS_CACHE_BUCKETS 512
#define DNS_CACHE_MAX 1024

struct dns_cache_entry {
	struct dns_cache_entry *next_in_bucket;
	struct dns_cache_entry *older; /* in the order they were kept */
	struct dns_cache_entry *newer;
	char *host;
	uint16_t port;
	bool absolute;
	int family;
	struct evutil_addrinfo *addresses;
	uint64_t until_ms;
	unsigned refs; /* the cache's own one while kept, and each holder's */
};

struct dns_cache {
	struct dns_cache_entry *buckets[DNS_CACHE_BUCKETS];
	struct dns_cache_entry *oldest;
	struct dns_cache_entry *newest;
	unsigned count;
};

static size_t dns_cache_bucket(const char *host)
{
	return (size_t)(hash_string(host) % DNS_CACHE_BUCKETS);
}

/* One address of a list: the node and its address in one block. */
struct dns_address {
	struct evutil_addrinfo ai; /* first: the node's address is the block's */
	struct sockaddr_storage addr;
};

struct evutil_addrinfo *dns_addresses_add(struct evutil_addrinfo *list, const struct sockaddr *addr,
					  socklen_t len)
{
	struct dns_address *a = xcalloc(1, sizeof(*a));
	struct evutil_addrinfo **link = &list;

	if (len > sizeof(a->addr))
		len = sizeof(a->addr);
	memcpy(&a->addr, addr, len);
	a->ai.ai_family = addr->sa_family;
	a->ai.ai_socktype = SOCK_STREAM;
	a->ai.ai_protocol = IPPROTO_TCP;
	a->ai.ai_addrlen = len;
	a->ai.ai_addr = (struct sockaddr *)&a->addr;
	while (*link != NULL)
		link = &(*link)->ai_next;
	*link = &a->ai;
	return list;
}

struct evutil_addrinfo *dns_addresses_add_ip(struct evutil_addrinfo *list, int family,
					     const void *ip, uint16_t port)
{
	if (family == AF_INET6) {
		struct sockaddr_in6 sin6;

		memset(&sin6, 0, sizeof(sin6));
		sin6.sin6_family = AF_INET6;
		sin6.sin6_port = htons(port);
		memcpy(&sin6.sin6_addr, ip, sizeof(sin6.sin6_addr));
		return dns_addresses_add(list, (struct sockaddr *)&sin6, sizeof(sin6));
	} else {
		struct sockaddr_in sin;

		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		sin.sin_port = htons(port);
		memcpy(&sin.sin_addr, ip, sizeof(sin.sin_addr));
		return dns_addresses_add(list, (struct sockaddr *)&sin, sizeof(sin));
	}
}

struct evutil_addrinfo *dns_addresses_copy(const struct evutil_addrinfo *list)
{
	struct evutil_addrinfo *copy = NULL;

	for (; list != NULL; list = list->ai_next)
		copy = dns_addresses_add(copy, list->ai_addr, (socklen_t)list->ai_addrlen);
	return copy;
}

void dns_addresses_free(struct evutil_addrinfo *list)
{
	while (list != NULL) {
		struct evutil_addrinfo *next = list->ai_next;

		free(list);
		list = next;
	}
}

struct dns_cache *dns_cache_new(void)
{
	return xcalloc(1, sizeof(struct dns_cache));
}

void dns_cache_release(struct dns_cache_entry *entry)
{
	if (--entry->refs > 0)
		return;
	dns_addresses_free(entry->addresses);
	free(entry->host);
	free(entry);
}

/* Take entry out of the cache; its holders keep it until they release it. */
static void dns_cache_drop(struct dns_cache *cache, struct dns_cache_entry *entry)
{
	struct dns_cache_entry **link = &cache->buckets[dns_cache_bucket(entry->host)];

	while (*link != entry)
		link = &(*link)->next_in_bucket;
	*link = entry->next_in_bucket;
	if (entry->older != NULL)
		entry->older->newer = entry->newer;
	else
		cache->oldest = entry->newer;
	if (entry->newer != NULL)
		entry->newer->older = entry->older;
	else
		cache->newest = entry->older;
	cache->count--;
	dns_cache_release(entry);
}

void dns_cache_clear(struct dns_cache *cache)
{
	while (cache->oldest != NULL)
		dns_cache_drop(cache, cache->oldest);
}

void dns_cache_free(struct dns_cache *cache)
{
	if (cache == NULL)
		return;
	dns_cache_clear(cache);
	free(cache);
}

/* The kept entry for the key, expired or not, or NULL. */
static struct dns_cache_entry *dns_cache_lookup(struct dns_cache *cache, const char *host,
						uint16_t port, bool absolute, int family)
{
	struct dns_cache_entry *e = cache->buckets[dns_cache_bucket(host)];

	for (; e != NULL; e = e->next_in_bucket)
		if (e->port == port && e->family == family && e->absolute == absolute &&
		    strcmp(e->host, host) == 0)
			return e;
	return NULL;
}

struct dns_cache_entry *dns_cache_find(struct dns_cache *cache, const char *host, uint16_t port,
				       bool absolute, int family, uint64_t now_ms)
{
	struct dns_cache_entry *e = dns_cache_lookup(cache, host, port, absolute, family);

	if (e == NULL)
		return NULL;
	if (now_ms >= e->until_ms) {
		dns_cache_drop(cache, e);
		return NULL;
	}
	e->refs++;
	return e;
}

struct dns_cache_entry *dns_cache_put(struct dns_cache *cache, const char *host, uint16_t port,
				      bool absolute, int family, struct evutil_addrinfo *addresses,
				      uint64_t until_ms)
{
	struct dns_cache_entry *e = dns_cache_lookup(cache, host, port, absolute, family);
	struct dns_cache_entry **bucket;

	if (e != NULL)
		dns_cache_drop(cache, e);
	if (cache->count >= DNS_CACHE_MAX)
		dns_cache_drop(cache, cache->oldest);
	e = xcalloc(1, sizeof(*e));
	e->host = xstrdup(host);
	e->port = port;
	e->absolute = absolute;
	e->family = family;
	e->addresses = addresses;
	e->until_ms = until_ms;
	e->refs = 2;
	bucket = &cache->buckets[dns_cache_bucket(host)];
	e->next_in_bucket = *bucket;
	*bucket = e;
	e->older = cache->newest;
	if (cache->newest != NULL)
		cache->newest->newer = e;
	else
		cache->oldest = e;
	cache->newest = e;
	cache->count++;
	return e;
}

struct evutil_addrinfo *dns_cache_addresses(const struct dns_cache_entry *entry)
{
	return entry->addresses;
}

void dns_cache_forget(struct dns_cache *cache, const char *host)
{
	struct dns_cache_entry *e = cache->buckets[dns_cache_bucket(host)];

	while (e != NULL) {
		struct dns_cache_entry *next = e->next_in_bucket;

		if (strcmp(e->host, host) == 0)
			dns_cache_drop(cache, e);
		e = next;
	}
}

unsigned dns_cache_count(const struct dns_cache *cache)
{
	return cache->count;
}
