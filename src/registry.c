#include "registry.h"

#include <stddef.h>

void registry_init(struct registry *registry)
{
	LIST_INIT(&registry->entries);
}

void registry_add(struct registry *registry, struct registry_entry *entry,
		  const struct registry_ops *ops, void *self)
{
	entry->ops = ops;
	entry->self = self;
	LIST_INSERT_HEAD(&registry->entries, entry, link);
}

void registry_remove(struct registry_entry *entry)
{
	LIST_REMOVE(entry, link);
}

void registry_close_all(struct registry *registry, const char *reason)
{
	/* each close removes its own entry */
	while (!LIST_EMPTY(&registry->entries)) {
		struct registry_entry *entry = LIST_FIRST(&registry->entries);

		entry->ops->close(entry->self, reason);
	}
}

/* The optional ops, all of this type. */
typedef void (*registry_fn)(void *self);

/* Call an optional op (its offset in struct registry_ops) on every entry
 * that has it; the next entry is taken first, as an op may close the entry
 * it is on. */
static void registry_each(struct registry *registry, size_t op)
{
	struct registry_entry *entry = LIST_FIRST(&registry->entries);

	while (entry != NULL) {
		struct registry_entry *next = LIST_NEXT(entry, link);
		registry_fn call = *(const registry_fn *)((const char *)entry->ops + op);

		if (call != NULL)
			call(entry->self);
		entry = next;
	}
}

void registry_drain_begins(struct registry *registry)
{
	registry_each(registry, offsetof(struct registry_ops, drain_begins));
}

void registry_drain_answer(struct registry *registry)
{
	registry_each(registry, offsetof(struct registry_ops, drain_answer));
}

void registry_config_changed(struct registry *registry)
{
	registry_each(registry, offsetof(struct registry_ops, config_changed));
}
