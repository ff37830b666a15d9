#ifndef RETRYPROXY_NAME_INDEX_H
#define RETRYPROXY_NAME_INDEX_H

/*
 * A table from a name and a number to an entry, for looking many names up
 * among many entries (a config's routes, at a start or a reload, among the
 * metrics series, budgets or fleet leases kept from before), where a walk
 * of a list for each would take time in the square of their number:
 * 12,000 routes took over a second, the event loop stopped meanwhile.
 * Names are borrowed: each must outlive its place in the index.
 */

#include <stddef.h>
#include <stdint.h>

struct name_index;

/* An empty index sized for about expected entries (it grows past them). */
struct name_index *name_index_new(size_t expected);
void name_index_free(struct name_index *index);

/* Add entry under (name, number), a pair not in the index yet. */
void name_index_add(struct name_index *index, const char *name, uint64_t number, void *entry);

/* Take the entry under (name, number) out, if there is one. */
void name_index_remove(struct name_index *index, const char *name, uint64_t number);

/* The entry under (name, number), or NULL. */
void *name_index_find(const struct name_index *index, const char *name, uint64_t number);

#endif
