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
	void (*close_if_idle)(void *self);	       /* drain; NULL: never idle */
	void (*config_changed)(void *self);	       /* reload; NULL: nothing to do */
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

/* Close every connection waiting for a request (a drain begins). */
void registry_close_idle(struct registry *registry);

/* The live config changed: each connection takes it as it can. */
void registry_config_changed(struct registry *registry);

#endif
