#include "config_walk.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_values.h"
#include "xmalloc.h"

struct config_walk_error {
	unsigned line;
	unsigned column;
	size_t seq; /* order of discovery, to keep the sort stable */
	char *text; /* "key: message" */
};

struct config_walk {
	const char *file;     /* as named in messages */
	const char *base_dir; /* for relative paths; NULL: the working directory */
	void *data;	      /* for the handlers */
	char path[512];	      /* dotted key path of the node being read */
	size_t path_len;
	struct config_walk_error *errors;
	size_t error_count;
};

/* Start a walk with no errors and an empty key path. */
struct config_walk *config_walk_new(const char *file, const char *base_dir, void *data)
{
	struct config_walk *walk = xcalloc(1, sizeof(*walk));

	walk->file = file;
	walk->base_dir = base_dir;
	walk->data = data;
	return walk;
}

/* The data the handlers were given. */
void *config_walk_data(const struct config_walk *walk)
{
	return walk->data;
}

/* How many errors so far, to tell whether a handler added any. */
size_t config_walk_error_count(const struct config_walk *walk)
{
	return walk->error_count;
}

bool config_walk_refused(const struct config_walk *walk, const struct yaml_tree_node *mapping,
			 const char *key)
{
	const struct yaml_tree_entry *e = yaml_tree_find(mapping, key);

	for (size_t i = 0; e != NULL && i < walk->error_count; i++)
		if (walk->errors[i].line == e->value->line &&
		    walk->errors[i].column == e->value->column)
			return true;
	return false;
}

/* Order errors by line, column, then discovery. */
static int config_walk_error_cmp(const void *a, const void *b)
{
	const struct config_walk_error *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->column != y->column)
		return x->column < y->column ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Print the errors sorted, free the walk, return the count. */
size_t config_walk_finish(struct config_walk *walk, FILE *errors)
{
	size_t count = walk->error_count;

	/* Tables read sections in the order they depend on each other; the
	 * user reads the file top to bottom. */
	if (count > 0)
		qsort(walk->errors, count, sizeof(*walk->errors), config_walk_error_cmp);
	for (size_t i = 0; i < count; i++) {
		fprintf(errors, "%s:%u:%u: %s\n", walk->file, walk->errors[i].line,
			walk->errors[i].column, walk->errors[i].text);
		free(walk->errors[i].text);
	}
	free(walk->errors);
	free(walk);
	return count;
}

/* Record an error at a node, prefixed with the current key path. */
void config_walk_error(struct config_walk *walk, const struct yaml_tree_node *node, const char *fmt,
		       ...)
{
	char msg[1024];
	size_t len = 0;
	va_list ap;

	if (walk->path_len > 0)
		len = (size_t)snprintf(msg, sizeof(msg), "%s: ", walk->path);
	va_start(ap, fmt);
	vsnprintf(msg + len, sizeof(msg) - len, fmt, ap);
	va_end(ap);
	config_walk_add_error(walk, node->line, node->column, yaml_tree_one_line(msg));
}

void config_walk_add_error(struct config_walk *walk, unsigned line, unsigned column, char *text)
{
	struct config_walk_error *e;

	walk->errors = xrealloc(walk->errors, (walk->error_count + 1) * sizeof(*walk->errors));
	e = &walk->errors[walk->error_count];
	e->line = line;
	e->column = column;
	e->seq = walk->error_count++;
	e->text = text;
}

/* Append to the path, cutting rather than overflowing on absurd nesting. */
static void config_walk_append(struct config_walk *walk, const char *piece)
{
	size_t room = sizeof(walk->path) - 1 - walk->path_len, len = strlen(piece);

	if (len > room)
		len = room;
	memcpy(walk->path + walk->path_len, piece, len);
	walk->path_len += len;
	walk->path[walk->path_len] = '\0';
}

/* Descend into a key: "a" then "a.b". */
size_t config_walk_push(struct config_walk *walk, const char *name)
{
	size_t mark = walk->path_len;
	char escaped[256];

	if (mark > 0)
		config_walk_append(walk, ".");
	config_walk_append(walk, yaml_tree_escape(name, 120, escaped, sizeof(escaped)));
	return mark;
}

/* Descend into a list item: "a[2]". */
size_t config_walk_push_index(struct config_walk *walk, size_t index)
{
	size_t mark = walk->path_len;
	char piece[32];

	snprintf(piece, sizeof(piece), "[%zu]", index);
	config_walk_append(walk, piece);
	return mark;
}

/* Return to the path before the matching push. */
void config_walk_pop(struct config_walk *walk, size_t mark)
{
	walk->path_len = mark;
	walk->path[mark] = '\0';
}

const char *config_walk_quote(const struct yaml_tree_node *node, char *buf, size_t size)
{
	return yaml_tree_quote(node->text, 60, buf, size);
}

char *config_walk_quote_path(const char *path)
{
	size_t size = strlen(path) * 4 + 8;

	return (char *)yaml_tree_quote(path, SIZE_MAX, xmalloc(size), size);
}

void config_walk_repeated(struct config_walk *walk, const struct yaml_tree_node *node, size_t first)
{
	char quoted[128];

	config_walk_error(walk, node, "%s is already listed at [%zu]",
			  config_walk_quote(node, quoted, sizeof(quoted)), first);
}

/* Record "expected <what>, got "<text>"" at a scalar. */
void config_walk_bad_value(struct config_walk *walk, const struct yaml_tree_node *node,
			   const char *what)
{
	char quoted[128];

	config_walk_error(walk, node, "expected %s, got %s", what,
			  config_walk_quote(node, quoted, sizeof(quoted)));
}

/* Edit distance between two short strings; SIZE_MAX for long ones. */
static size_t config_walk_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[64];

	if (la >= 64 || lb >= 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Record "unknown key" at a key, suggesting a close known one. */
void config_walk_unknown_key(struct config_walk *walk, const struct yaml_tree_node *key,
			     const char *const *known, size_t count)
{
	const char *best = NULL;
	size_t best_distance = 3, mark = config_walk_push(walk, key->text);
	bool tie = false;

	/* YAML's merge key (only a plain <<: a quoted one is an ordinary key):
	 * no key of ours is what was meant */
	if (key->plain && strcmp(key->text, "<<") == 0) {
		config_walk_error(walk, key, "merge keys are not supported; write the keys out");
		config_walk_pop(walk, mark);
		return;
	}
	/* Suggest only when one key is clearly the closest, within two edits,
	 * and keeps something of what was written ("<<" is not a typo of "on"). */
	for (size_t i = 0; i < count; i++) {
		size_t d = config_walk_distance(key->text, known[i]);

		if (d >= strlen(key->text))
			continue;
		if (d < best_distance) {
			best = known[i];
			best_distance = d;
			tie = false;
		} else if (d == best_distance) {
			tie = true;
		}
	}
	if (best != NULL && !tie)
		config_walk_error(walk, key, "unknown key (did you mean \"%s\"?)", best);
	else
		config_walk_error(walk, key, "unknown key");
	config_walk_pop(walk, mark);
}

/* Whether a node has the kind a key wants; a null counts as an empty list or
 * mapping, so that a section whose keys are all commented out is valid. */
static bool config_walk_kind_ok(struct config_walk *walk, const struct yaml_tree_node *node,
				enum yaml_tree_kind kind, const char *what)
{
	if (node->kind == kind || (kind != YAML_TREE_SCALAR && yaml_tree_is_null(node)))
		return true;
	if (node->kind == YAML_TREE_SCALAR)
		config_walk_bad_value(walk, node, what);
	else
		config_walk_error(walk, node, "expected %s, got %s", what,
				  yaml_tree_kind_name(node->kind));
	return false;
}

/* Read the keys of a table from a mapping, then flag the keys it does not know. */
void config_walk_mapping(struct config_walk *walk, const struct yaml_tree_node *node,
			 const struct config_walk_key *keys, void *base)
{
	const char *known[32];
	size_t known_count = 0;

	if (!config_walk_kind_ok(walk, node, YAML_TREE_MAPPING, "a mapping"))
		return;
	for (const struct config_walk_key *k = keys; k->name != NULL; k++) {
		const struct yaml_tree_entry *e = yaml_tree_find(node, k->name);
		void *field = (char *)base + k->offset;
		size_t mark;

		if (known_count < sizeof(known) / sizeof(known[0]))
			known[known_count++] = k->name;
		if (e == NULL) {
			if (k->required)
				config_walk_error(walk, node, "missing key \"%s\"", k->name);
			continue;
		}
		mark = config_walk_push(walk, k->name);
		if (k->section != NULL)
			config_walk_mapping(walk, e->value, k->section, field);
		else if (config_walk_kind_ok(walk, e->value, k->type->kind, k->type->what))
			k->type->handler(walk, e->value, field);
		config_walk_pop(walk, mark);
	}
	for (size_t i = 0; node->kind == YAML_TREE_MAPPING && i < node->count; i++) {
		const struct yaml_tree_node *key = node->entries[i].key;
		const struct config_walk_key *k = keys;

		if (key->duplicate)
			continue;
		while (k->name != NULL && strcmp(k->name, key->text) != 0)
			k++;
		if (k->name == NULL)
			config_walk_unknown_key(walk, key, known, known_count);
	}
}

const struct yaml_tree_node *config_walk_scalar_item(struct config_walk *walk,
						     const struct yaml_tree_node *list, size_t i,
						     const char *what)
{
	const struct yaml_tree_node *item = list->items[i];

	if (item->kind == YAML_TREE_SCALAR)
		return item;
	config_walk_error(walk, item, "expected %s, got %s", what, yaml_tree_kind_name(item->kind));
	return NULL;
}

/* Which of a fixed set of words a scalar is, or -1 after an error. */
int config_walk_choice(struct config_walk *walk, const struct yaml_tree_node *node,
		       const char *const *names, size_t count, const char *what)
{
	for (size_t i = 0; i < count; i++)
		if (strcmp(node->text, names[i]) == 0)
			return (int)i;
	config_walk_bad_value(walk, node, what);
	return -1;
}

void config_walk_bad_duration(struct config_walk *walk, const struct yaml_tree_node *node,
			      const char *what)
{
	if (node->text_len > 0 && strspn(node->text, "0123456789") == node->text_len)
		config_walk_error(walk, node, "expected %s, got \"%s\" (add a unit: ms, s, m or h)",
				  what, node->text);
	else
		config_walk_bad_value(walk, node, what);
}

/* A duration in milliseconds; zero allowed. */
static void config_walk_set_duration(struct config_walk *walk, const struct yaml_tree_node *node,
				     void *field)
{
	uint64_t ms;

	if (config_values_duration(node->text, &ms) == 0) {
		*(uint64_t *)field = ms;
		return;
	}
	config_walk_bad_duration(walk, node, "a duration like 32s");
}

/* A duration in milliseconds that must not be zero. */
static void config_walk_set_timeout(struct config_walk *walk, const struct yaml_tree_node *node,
				    void *field)
{
	uint64_t ms;

	if (config_values_duration(node->text, &ms) < 0)
		config_walk_set_duration(walk, node, &ms);
	else if (ms == 0)
		config_walk_error(walk, node, "must be longer than 0s");
	else
		*(uint64_t *)field = ms;
}

/* A size in bytes up to max; false after an error. */
static bool config_walk_size_value(struct config_walk *walk, const struct yaml_tree_node *node,
				   uint64_t max, uint64_t *bytes)
{
	if (config_values_size(node->text, bytes) < 0) {
		config_walk_bad_value(walk, node, "a size like 64KiB (units: KiB, MiB, GiB)");
		return false;
	}
	if (*bytes > max) {
		config_walk_error(walk, node, "too large");
		return false;
	}
	return true;
}

/* A size into a size_t. */
static void config_walk_set_size(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	uint64_t bytes;

	if (config_walk_size_value(walk, node, SIZE_MAX, &bytes))
		*(size_t *)field = (size_t)bytes;
}

/* A size into a size_t, above zero. */
static void config_walk_set_size_positive(struct config_walk *walk,
					  const struct yaml_tree_node *node, void *field)
{
	uint64_t bytes;

	if (!config_walk_size_value(walk, node, SIZE_MAX, &bytes))
		return;
	if (bytes == 0)
		config_walk_error(walk, node, "must be more than 0");
	else
		*(size_t *)field = (size_t)bytes;
}

/* A size into a uint64_t. */
static void config_walk_set_size64(struct config_walk *walk, const struct yaml_tree_node *node,
				   void *field)
{
	uint64_t bytes;

	if (config_walk_size_value(walk, node, UINT64_MAX, &bytes))
		*(uint64_t *)field = bytes;
}

/* A count refused: digits alone are a whole number too large to hold, and
 * saying it is not a whole number would send the user looking elsewhere. */
static void config_walk_bad_count(struct config_walk *walk, const struct yaml_tree_node *node,
				  const char *what)
{
	if (node->text_len > 0 && strspn(node->text, "0123456789") == node->text_len)
		config_walk_error(walk, node, "too large (at most %u)", UINT_MAX);
	else
		config_walk_bad_value(walk, node, what);
}

/* A whole number into an unsigned. */
static void config_walk_set_count(struct config_walk *walk, const struct yaml_tree_node *node,
				  void *field)
{
	uint64_t n;

	if (config_values_unsigned(node->text, UINT_MAX, &n) < 0)
		config_walk_bad_count(walk, node, "a whole number");
	else
		*(unsigned *)field = (unsigned)n;
}

/* A whole number of at least 1 into an unsigned. */
static void config_walk_set_count_positive(struct config_walk *walk,
					   const struct yaml_tree_node *node, void *field)
{
	uint64_t n;

	if (config_values_unsigned(node->text, UINT_MAX, &n) < 0)
		config_walk_bad_count(walk, node, "a whole number of at least 1");
	else if (n == 0)
		config_walk_bad_value(walk, node, "a whole number of at least 1");
	else
		*(unsigned *)field = (unsigned)n;
}

/* true or false into a bool. */
static void config_walk_set_bool(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	if (config_values_bool(node->text, field) < 0)
		config_walk_bad_value(walk, node, "true or false");
}

/* A number of at least 1 into a double. */
static void config_walk_set_multiplier(struct config_walk *walk, const struct yaml_tree_node *node,
				       void *field)
{
	double value;

	if (config_values_number(node->text, &value) < 0 || value < 1)
		config_walk_bad_value(walk, node, "a number of at least 1, like 2 or 1.5");
	else
		*(double *)field = value;
}

/* A number of at least 0 into a double. */
static void config_walk_set_rate(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	double value;

	if (config_values_number(node->text, &value) < 0)
		config_walk_bad_value(walk, node, "a number of at least 0, like 0.2 or 3");
	else
		*(double *)field = value;
}

/* A path from the config as found from the working directory, which is
 * what the user can check with ls: malloc'd. */
static char *config_walk_shown_path(const struct config_walk *walk,
				    const struct yaml_tree_node *node)
{
	size_t size;
	char *shown;

	if (node->text[0] == '/' || walk->base_dir == NULL)
		return xstrdup(node->text);
	size = strlen(walk->base_dir) + node->text_len + 2;
	shown = xmalloc(size);
	snprintf(shown, size, "%s/%s", walk->base_dir, node->text);
	return shown;
}

/* Record "<doing> "<path>": <why>", or ""<path>" <why>" without doing. */
static void config_walk_path_error(struct config_walk *walk, const struct yaml_tree_node *node,
				   const char *doing, const char *path, const char *why)
{
	char *quoted = config_walk_quote_path(path);

	if (doing != NULL)
		config_walk_error(walk, node, "%s %s: %s", doing, quoted, why);
	else
		config_walk_error(walk, node, "%s %s", quoted, why);
	free(quoted);
}

/* A file the proxy will read later (ca_file): relative to the config file,
 * stored absolute, checked readable now rather than at first use. A null
 * clears an inherited one. */
static void config_walk_set_file(struct config_walk *walk, const struct yaml_tree_node *node,
				 void *field)
{
	char **ca_file = field, *shown, *resolved;
	struct stat st;

	if (yaml_tree_is_null(node)) {
		free(*ca_file);
		*ca_file = NULL;
		return;
	}
	if (node->text_len == 0) {
		config_walk_bad_value(walk, node, "a file path");
		return;
	}
	shown = config_walk_shown_path(walk, node);
	resolved = realpath(shown, NULL);
	if (resolved == NULL || stat(resolved, &st) < 0 || access(resolved, R_OK) < 0) {
		int err = errno;

		config_walk_path_error(walk, node, "cannot read", shown, strerror(err));
		free(resolved);
	} else if (!S_ISREG(st.st_mode)) {
		config_walk_path_error(walk, node, NULL, shown, "is not a regular file");
		free(resolved);
	} else {
		free(*ca_file);
		*ca_file = resolved;
	}
	free(shown);
}

/* A file that must be named: a null is a mistake here, not "none". */
static void config_walk_set_file_required(struct config_walk *walk,
					  const struct yaml_tree_node *node, void *field)
{
	if (yaml_tree_is_null(node))
		config_walk_bad_value(walk, node, "a file path");
	else
		config_walk_set_file(walk, node, field);
}

/* A directory the proxy will make files in later (spool_dir): relative to
 * the config file, stored absolute, checked now to exist. */
static void config_walk_set_directory(struct config_walk *walk, const struct yaml_tree_node *node,
				      void *field)
{
	char **dir = field, *shown, *resolved;
	struct stat st;

	if (node->text_len == 0) {
		config_walk_bad_value(walk, node, "a directory path");
		return;
	}
	shown = config_walk_shown_path(walk, node);
	resolved = realpath(shown, NULL);
	if (resolved == NULL || stat(resolved, &st) < 0) {
		int err = errno;

		config_walk_path_error(walk, node, "cannot use", shown, strerror(err));
		free(resolved);
	} else if (!S_ISDIR(st.st_mode)) {
		config_walk_path_error(walk, node, NULL, shown, "is not a directory");
		free(resolved);
	} else {
		free(*dir);
		*dir = resolved;
	}
	free(shown);
}

/* An upstream URL, replacing any inherited one. */
static void config_walk_set_upstream(struct config_walk *walk, const struct yaml_tree_node *node,
				     void *field)
{
	struct upstream_url **upstream = field, url;
	const char *why;
	char quoted[128];

	if (config_values_url(node->text, &url, &why) < 0) {
		config_walk_error(walk, node, "invalid URL %s: %s",
				  config_walk_quote(node, quoted, sizeof(quoted)), why);
		return;
	}
	if (*upstream != NULL)
		config_values_url_free(*upstream);
	else
		*upstream = xmalloc(sizeof(**upstream));
	**upstream = url;
}

const struct config_walk_type config_walk_duration = { YAML_TREE_SCALAR, "a duration like 32s",
						       config_walk_set_duration };
const struct config_walk_type config_walk_timeout = { YAML_TREE_SCALAR, "a duration like 30s",
						      config_walk_set_timeout };
const struct config_walk_type config_walk_size = { YAML_TREE_SCALAR, "a size like 64KiB",
						   config_walk_set_size };
const struct config_walk_type config_walk_size_positive = { YAML_TREE_SCALAR, "a size like 64KiB",
							    config_walk_set_size_positive };
const struct config_walk_type config_walk_size64 = { YAML_TREE_SCALAR, "a size like 64KiB",
						     config_walk_set_size64 };
const struct config_walk_type config_walk_count = { YAML_TREE_SCALAR, "a whole number",
						    config_walk_set_count };
const struct config_walk_type config_walk_count_positive = { YAML_TREE_SCALAR,
							     "a whole number of at least 1",
							     config_walk_set_count_positive };
const struct config_walk_type config_walk_bool = { YAML_TREE_SCALAR, "true or false",
						   config_walk_set_bool };
const struct config_walk_type config_walk_multiplier = { YAML_TREE_SCALAR, "a number of at least 1",
							 config_walk_set_multiplier };
const struct config_walk_type config_walk_rate = { YAML_TREE_SCALAR, "a number of at least 0",
						   config_walk_set_rate };
const struct config_walk_type config_walk_file = { YAML_TREE_SCALAR, "a file path",
						   config_walk_set_file };
const struct config_walk_type config_walk_file_required = { YAML_TREE_SCALAR, "a file path",
							    config_walk_set_file_required };
const struct config_walk_type config_walk_directory = { YAML_TREE_SCALAR, "a directory path",
							config_walk_set_directory };
const struct config_walk_type config_walk_upstream = { YAML_TREE_SCALAR,
						       "a URL like https://api.example.com",
						       config_walk_set_upstream };
