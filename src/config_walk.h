#ifndef RETRYPROXY_CONFIG_WALK_H
#define RETRYPROXY_CONFIG_WALK_H

/*
 * Read a yaml_tree with tables of keys: each key names the node kind it wants
 * and a handler that reads the value into a field at an offset of the struct
 * being filled. Keeps the dotted key path ("routes[1].retry.max_backoff"),
 * reports unknown keys with a suggestion, and collects every error so that
 * they print in document order whatever order the tables are read in.
 * Knows no configuration key itself; config.c holds the tables.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "yaml_tree.h"

struct config_walk;

/* Read one value into field, the address of what the key fills. */
typedef void (*config_walk_handler)(struct config_walk *walk, const struct yaml_tree_node *node,
				    void *field);

struct config_walk_type {
	enum yaml_tree_kind
		kind;	  /* what the node must be; a null passes for an empty list or mapping */
	const char *what; /* "a duration like 32s": for a node of the wrong kind */
	config_walk_handler handler;
};

struct config_walk_key {
	const char *name;
	const struct config_walk_type *type;   /* NULL for a section */
	size_t offset;			       /* of the field in the struct being filled */
	const struct config_walk_key *section; /* a mapping read with these keys into the field */
	bool required;			       /* missing is an error */
};

/* Start a walk: file names the source in messages, relative file paths in
 * values are relative to base_dir (NULL: the working directory), data is
 * for the handlers. */
struct config_walk *config_walk_new(const char *file, const char *base_dir, void *data);

/* The data given to config_walk_new. */
void *config_walk_data(const struct config_walk *walk);

/* Print the errors in document order as "file:line:col: key: message", free
 * the walk and return how many errors there were. */
size_t config_walk_finish(struct config_walk *walk, FILE *errors);

size_t config_walk_error_count(const struct config_walk *walk);

/* Was key's value in mapping refused (an error at its node)? A refused key
 * keeps its default, and a check that compares it with another key would
 * blame a value nobody wrote. False when mapping does not set key. */
bool config_walk_refused(const struct config_walk *walk, const struct yaml_tree_node *mapping,
			 const char *key);

/* Read a mapping with a table of keys (ended by a NULL name) into base. */
void config_walk_mapping(struct config_walk *walk, const struct yaml_tree_node *node,
			 const struct config_walk_key *keys, void *base);

/* Record an error at node under the current key path. */
void config_walk_error(struct config_walk *walk, const struct yaml_tree_node *node, const char *fmt,
		       ...) __attribute__((format(printf, 3, 4)));

/* Record an error found before the walk (text: "[path: ]message", taken
 * over), to be reported in the file's order among the walk's own. */
void config_walk_add_error(struct config_walk *walk, unsigned line, unsigned column, char *text);

/* Record that a list's entry repeats the one at index first: a mistake (a
 * typo for another, a merge gone wrong), refused as a key given twice is. */
void config_walk_repeated(struct config_walk *walk, const struct yaml_tree_node *node,
			  size_t first);

/* Record "expected <what>, got "<scalar>"". */
void config_walk_bad_value(struct config_walk *walk, const struct yaml_tree_node *node,
			   const char *what);

/* config_walk_bad_value() for a key that takes a duration (what says how
 * it is written); a bare number, the likeliest mistake, is told to add a
 * unit. */
void config_walk_bad_duration(struct config_walk *walk, const struct yaml_tree_node *node,
			      const char *what);

/* Record "unknown key", with a suggestion among known when one is close. */
void config_walk_unknown_key(struct config_walk *walk, const struct yaml_tree_node *key,
			     const char *const *known, size_t count);

/* A scalar quoted for a message: one line, escaped, cut when long. */
const char *config_walk_quote(const struct yaml_tree_node *node, char *buf, size_t size);

/* A path quoted for a message, whole and escaped: malloc'd. */
char *config_walk_quote_path(const char *path);

/* Descend into a key or a list index; give the result to config_walk_pop. */
size_t config_walk_push(struct config_walk *walk, const char *name);
size_t config_walk_push_index(struct config_walk *walk, size_t index);
void config_walk_pop(struct config_walk *walk, size_t mark);

/* Item i of a list if it is a scalar; otherwise NULL after an error. */
const struct yaml_tree_node *config_walk_scalar_item(struct config_walk *walk,
						     const struct yaml_tree_node *list, size_t i,
						     const char *what);

/* The index of the scalar's text among names, or -1 after an error. */
int config_walk_choice(struct config_walk *walk, const struct yaml_tree_node *node,
		       const char *const *names, size_t count, const char *what);

/* Value types shared by many keys. */
extern const struct config_walk_type config_walk_duration;	 /* uint64_t ms, 0 allowed */
extern const struct config_walk_type config_walk_timeout;	 /* uint64_t ms, above 0 */
extern const struct config_walk_type config_walk_size;		 /* size_t bytes */
extern const struct config_walk_type config_walk_size_positive;	 /* size_t bytes, above 0 */
extern const struct config_walk_type config_walk_size64;	 /* uint64_t bytes */
extern const struct config_walk_type config_walk_count;		 /* unsigned */
extern const struct config_walk_type config_walk_count_positive; /* unsigned, at least 1 */
extern const struct config_walk_type config_walk_bool;		 /* bool */
extern const struct config_walk_type config_walk_multiplier;	 /* double, at least 1 */
extern const struct config_walk_type config_walk_rate;		 /* double, at least 0 */
extern const struct config_walk_type config_walk_file;		 /* char *, absolute, readable */
extern const struct config_walk_type config_walk_file_required;	 /* the same; null refused */
extern const struct config_walk_type config_walk_directory;	 /* char *, absolute, a directory */
extern const struct config_walk_type config_walk_upstream;	 /* struct upstream_url * */

#endif
