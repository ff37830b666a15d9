#include "name_index.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "xmalloc.h"

struct name_index_slot {
	const char *name; /* NULL: free */
	uint64_t number;
	void *entry;
};

/* Open addressing, at most half full. */
struct name_index {
	struct name_index_slot *slots;
	size_t mask;
	size_t count;
};

static size_t name_index_slot_of(const struct name_index *index, const char *name, uint64_t number)
{
	/* the number is mixed in so that one route's budgets of different
	 * windows do not all start at the same slot */
	return (size_t)(hash_string(name) ^ (number * 0x9e3779b97f4a7c15ULL)) & index->mask;
}

static void name_index_size(struct name_index *index, size_t size)
{
	index->slots = xcalloc(size, sizeof(*index->slots));
	index->mask = size - 1;
}

struct name_index *name_index_new(size_t expected)
{
	struct name_index *index = xcalloc(1, sizeof(*index));
	size_t size = 16;

	while (size < 2 * expected)
		size *= 2;
	name_index_size(index, size);
	return index;
}

void name_index_free(struct name_index *index)
{
	if (index == NULL)
		return;
	free(index->slots);
	free(index);
}

/* Place a slot's contents where a probe for them starts looking. */
static void name_index_place(struct name_index *index, const struct name_index_slot *from)
{
	size_t at = name_index_slot_of(index, from->name, from->number);

	while (index->slots[at].name != NULL)
		at = (at + 1) & index->mask;
	index->slots[at] = *from;
}

void name_index_add(struct name_index *index, const char *name, uint64_t number, void *entry)
{
	struct name_index_slot slot = { name, number, entry };

	if (2 * (index->count + 1) > index->mask + 1) {
		struct name_index_slot *old = index->slots;
		size_t old_size = index->mask + 1;

		name_index_size(index, 2 * old_size);
		for (size_t i = 0; i < old_size; i++)
			if (old[i].name != NULL)
				name_index_place(index, &old[i]);
		free(old);
	}
	name_index_place(index, &slot);
	index->count++;
}

void *name_index_find(const struct name_index *index, const char *name, uint64_t number)
{
	for (size_t at = name_index_slot_of(index, name, number); index->slots[at].name != NULL;
	     at = (at + 1) & index->mask)
		if (index->slots[at].number == number && strcmp(index->slots[at].name, name) == 0)
			return index->slots[at].entry;
	return NULL;
}

void name_index_remove(struct name_index *index, const char *name, uint64_t number)
{
	size_t hole = name_index_slot_of(index, name, number);

	for (; index->slots[hole].name != NULL; hole = (hole + 1) & index->mask)
		if (index->slots[hole].number == number &&
		    strcmp(index->slots[hole].name, name) == 0)
			break;
	if (index->slots[hole].name == NULL)
		return;
	index->count--;
	/* the entries after it in its run move back where their probe, which
	 * starts at or before the hole, would otherwise stop short of them */
	for (size_t next = hole;;) {
		const struct name_index_slot *slot;

		next = (next + 1) & index->mask;
		slot = &index->slots[next];
		if (slot->name == NULL)
			break;
		if (((next - name_index_slot_of(index, slot->name, slot->number)) & index->mask) >=
		    ((next - hole) & index->mask)) {
			index->slots[hole] = *slot;
			hole = next;
		}
	}
	index->slots[hole].name = NULL;
}
