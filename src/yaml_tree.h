#ifndef RETRYPROXY_YAML_TREE_H
#define RETRYPROXY_YAML_TREE_H

/*
 * One YAML document as a tree of nodes that remember where they were written,
 * so that whoever reads the tree can point at the offending node. Knows no
 * configuration keys. Refuses what a config has no use for and would only
 * make it ambiguous: aliases, tags, several documents, duplicate keys,
 * non-scalar keys, NUL bytes in scalars.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum yaml_tree_kind {
	YAML_TREE_SCALAR,   /* text; numbers and booleans are left to the reader */
	YAML_TREE_SEQUENCE, /* items in document order */
	YAML_TREE_MAPPING,  /* entries in document order, keys unique */
};

struct yaml_tree_node;

struct yaml_tree_entry {
	struct yaml_tree_node *key; /* always a scalar; its position is the key's */
	struct yaml_tree_node *value;
};

struct yaml_tree_node {
	enum yaml_tree_kind kind;
	unsigned line;	 /* from 1 */
	unsigned column; /* from 1 */
	char *text;	 /* scalar: NUL-terminated, no NUL inside */
	size_t text_len;
	bool plain;			 /* scalar written without quotes */
	bool duplicate;			 /* a mapping key met before in its mapping: reported, and
			 * its entry is not read (the first one is) */
	struct yaml_tree_node **items;	 /* sequence */
	struct yaml_tree_entry *entries; /* mapping */
	size_t count;			 /* items or entries */
};

/* An error against a rule of the tree (a duplicate key, an alias, a tag, a
 * NUL byte, a second document) met in a document read through: where it
 * is (1-based) and "[path: ]message". */
struct yaml_tree_rule_error {
	unsigned line;
	unsigned column;
	char *text;
};

/* The rule errors of a tree read through; the caller frees them with
 * yaml_tree_rule_errors_free() or takes each text. */
struct yaml_tree_rule_errors {
	struct yaml_tree_rule_error *errors;
	size_t count;
};

/* Parse a file into a tree. NULL when the document could not be read
 * through (a syntax error, an empty file), after printing every error found
 * to errors as "file:line:col: [path: ]message". A document read through
 * that breaks a rule of the tree is still returned, with the errors in
 * *rules, not printed, so that the rest of it can be checked too and every
 * error reported in the file's order; it must not be used then. With
 * regular_only, anything but a regular file is refused without waiting
 * (the event loop's reload must never block on a FIFO or a device). */
struct yaml_tree_node *yaml_tree_parse_file(const char *path, bool regular_only, FILE *errors,
					    struct yaml_tree_rule_errors *rules);

/* The same from memory; name stands for the file in messages. */
struct yaml_tree_node *yaml_tree_parse_text(const char *text, size_t len, const char *name,
					    FILE *errors, struct yaml_tree_rule_errors *rules);

void yaml_tree_rule_errors_free(struct yaml_tree_rule_errors *rules);

void yaml_tree_free(struct yaml_tree_node *node);

/* A plain scalar that YAML reads as null: empty, "~" or "null". */
bool yaml_tree_is_null(const struct yaml_tree_node *node);

/* The entry of a mapping with this key, or NULL. */
const struct yaml_tree_entry *yaml_tree_find(const struct yaml_tree_node *mapping, const char *key);

/* A malloc'd copy of an error message with control bytes written as \xNN:
 * a key, tag or path from the file ("a\nb" in YAML) must not split an
 * error into lines that no longer start with file:line:column. */
char *yaml_tree_one_line(const char *message);

/* Write text from the file into buf for an error message, escaped as C
 * writes a string: \\ for a backslash, \" for a quote, \xNN for a control
 * byte, so that what the file holds can be told from an escape. At most
 * limit bytes of text are shown, then "...". Never writes past size (at
 * least 8); returns buf. */
const char *yaml_tree_escape(const char *text, size_t limit, char *buf, size_t size);

/* The same between double quotes: a value named in a message. */
const char *yaml_tree_quote(const char *text, size_t limit, char *buf, size_t size);

/* "a scalar", "a list", "a mapping": for messages. */
const char *yaml_tree_kind_name(enum yaml_tree_kind kind);

#endif
