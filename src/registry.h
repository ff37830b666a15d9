#ifndef RETRYPROXY_REGISTRY_H
#define RETRYPROXY_REGISTRY_H

/*
 * Every open client connection and tunnel, so that a shutdown, a drain and a
 * reload can reach them all: each registers itself with the operations it
 * answers to, and the registry knows nothing else about it. proxy.c holds
 * one; it never calls into client.c or tunnel.c for these.
 */

#include <sys/queue.h>

/* What a registered connection does when everything is acted on. */
struct registry_ops {
	void (*close)(void *self, const char *reason); /* now, in any state */
	/* a drain begins: close if idle, answer what cannot finish in time;
	 * NULL: nothing to do */
	void (*drain_begins)(void *self);
	/* the drain's answer time: answer a request waiting for a try; NULL:
	 * nothing to do */
	void (*drain_answer)(void *self);
	void (*config_changed)(void *self); /* reload; NULL: nothing to do */
};

/* Embedded in each registered connection. */
struct registry_entry {
	LIST_ENTRY(registry_entry) link;
	const struct registry_ops *ops;
	void *self;
};

struct registry {
	LIST_HEAD(, registry_entry) entries;
};

void registry_init(struct registry *registry);

void registry_add(struct registry *registry, struct registry_entry *entry,
		  const struct registry_ops *ops, void *self);

/* Leave the registry (the connection is closing). */
void registry_remove(struct registry_entry *entry);

/* Close every connection now (shutdown, drain timeout). */
void registry_close_all(struct registry *registry, const char *reason);

/* A drain begins: each connection closes if it waits for a request, and
 * answers a request that cannot finish before the drain ends. */
void registry_drain_begins(struct registry *registry);

/* The drain's answer time: requests waiting for a try are answered; every
 * connection stays open (until drain_timeout's registry_close_all). */
void registry_drain_answer(struct registry *registry);

/* The live config changed: each connection takes it as it can. */
void registry_config_changed(struct registry *registry);

#endif
