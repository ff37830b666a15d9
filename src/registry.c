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

void registry_drain_begins(struct registry *registry)
{
	struct registry_entry *entry = LIST_FIRST(&registry->entries);

	while (entry != NULL) {
		/* taken first: closing removes the entry from the list */
		struct registry_entry *next = LIST_NEXT(entry, link);

		if (entry->ops->drain_begins != NULL)
			entry->ops->drain_begins(entry->self);
		entry = next;
	}
}

void registry_drain_answer(struct registry *registry)
{
	struct registry_entry *entry = LIST_FIRST(&registry->entries);

	while (entry != NULL) {
		/* taken first: an answer may close the connection it is on */
		struct registry_entry *next = LIST_NEXT(entry, link);

		if (entry->ops->drain_answer != NULL)
			entry->ops->drain_answer(entry->self);
		entry = next;
	}
}

void registry_config_changed(struct registry *registry)
{
	struct registry_entry *entry = LIST_FIRST(&registry->entries);

	while (entry != NULL) {
		struct registry_entry *next = LIST_NEXT(entry, link);

		if (entry->ops->config_changed != NULL)
			entry->ops->config_changed(entry->self);
		entry = next;
	}
}
