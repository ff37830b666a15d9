#include "yaml_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "file_read.h"
#include "xmalloc.h"

/* Deeper than any config needs; keeps hostile input from exhausting memory or
 * the stack of whoever walks the tree recursively. */
#define YAML_TREE_MAX_DEPTH 64
/* The largest file read as YAML: a config is kilobytes; a log or /dev/zero
 * named by mistake must not be read into memory whole, nor hold a reload's
 * loop pass for long. */
#define YAML_TREE_FILE_MAX (16u << 20)

struct yaml_tree_frame {
	struct yaml_tree_node *node; /* an open sequence or mapping */
	struct yaml_tree_node *key;  /* mapping: a key still waiting for its value */
};

struct yaml_tree_builder {
	const char *name; /* the file, for messages */
	FILE *errors;
	unsigned error_count;
	struct yaml_tree_rule_errors rules; /* kept for the caller to sort in */
	unsigned documents;
	struct yaml_tree_node *root;
	struct yaml_tree_frame stack[YAML_TREE_MAX_DEPTH];
	size_t depth;
	/* A node refused whole (a complex key, one nested too deep) is read
	 * past rather than ending the document, so that the errors after it
	 * are reported too: skip counts the collections open inside it, and
	 * skip_value says the refused key's value is to be read past next. */
	size_t skip;
	bool skip_value;
};

const char *yaml_tree_kind_name(enum yaml_tree_kind kind)
{
	switch (kind) {
	case YAML_TREE_SCALAR:
		return "a scalar";
	case YAML_TREE_SEQUENCE:
		return "a list";
	case YAML_TREE_MAPPING:
		return "a mapping";
	}
	return "a node";
}

/* Whether a node is a plain null: empty, "~" or "null". */
bool yaml_tree_is_null(const struct yaml_tree_node *node)
{
	if (node->kind != YAML_TREE_SCALAR || !node->plain)
		return false;
	return node->text_len == 0 || strcmp(node->text, "~") == 0 ||
	       strcmp(node->text, "null") == 0 || strcmp(node->text, "Null") == 0 ||
	       strcmp(node->text, "NULL") == 0;
}

const struct yaml_tree_entry *yaml_tree_find(const struct yaml_tree_node *mapping, const char *key)
{
	if (mapping == NULL || mapping->kind != YAML_TREE_MAPPING)
		return NULL;
	for (size_t i = 0; i < mapping->count; i++)
		if (strcmp(mapping->entries[i].key->text, key) == 0)
			return &mapping->entries[i];
	return NULL;
}

/* Free a node and everything under it. */
void yaml_tree_free(struct yaml_tree_node *node)
{
	if (node == NULL)
		return;
	for (size_t i = 0; node->items != NULL && i < node->count; i++)
		yaml_tree_free(node->items[i]);
	for (size_t i = 0; node->entries != NULL && i < node->count; i++) {
		yaml_tree_free(node->entries[i].key);
		yaml_tree_free(node->entries[i].value);
	}
	free(node->items);
	free(node->entries);
	free(node->text);
	free(node);
}

/* Append the path of the node about to be attached to the innermost open
 * node: "routes[1].retry". Inner frames point at their last child, the
 * innermost at the child being added. */
static void yaml_tree_path(const struct yaml_tree_builder *b, char *buf, size_t size)
{
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < b->depth && len < size; i++) {
		const struct yaml_tree_frame *f = &b->stack[i];
		bool innermost = i + 1 == b->depth;
		int n = 0;

		if (f->node->kind == YAML_TREE_SEQUENCE) {
			n = snprintf(buf + len, size - len, "[%zu]",
				     innermost ? f->node->count : f->node->count - 1);
		} else {
			const struct yaml_tree_node *key =
				innermost ? f->key : f->node->entries[f->node->count - 1].key;
			char escaped[256];

			if (key != NULL)
				n = snprintf(
					buf + len, size - len, "%s%s", len ? "." : "",
					yaml_tree_escape(key->text, 120, escaped, sizeof(escaped)));
		}
		if (n > 0)
			len += (size_t)n;
	}
}

char *yaml_tree_one_line(const char *message)
{
	size_t len = 0;
	char *out = xmalloc(strlen(message) * 4 + 1);

	for (const char *p = message; *p != '\0'; p++) {
		unsigned char c = (unsigned char)*p;

		if (c < 0x20 || c == 0x7f)
			len += (size_t)sprintf(out + len, "\\x%02x", c);
		else
			out[len++] = (char)c;
	}
	out[len] = '\0';
	return out;
}

const char *yaml_tree_escape(const char *text, size_t limit, char *buf, size_t size)
{
	size_t len = 0;

	for (size_t i = 0; text[i] != '\0'; i++) {
		unsigned char c = (unsigned char)text[i];
		char piece[8];
		int n;

		if (c == '\\' || c == '"')
			n = snprintf(piece, sizeof(piece), "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			n = snprintf(piece, sizeof(piece), "\\x%02x", c);
		else
			n = snprintf(piece, sizeof(piece), "%c", c);
		/* keep room for "..." and the NUL */
		if (i == limit || len + (size_t)n + 4 > size) {
			memcpy(buf + len, "...", 3);
			len += 3;
			break;
		}
		memcpy(buf + len, piece, (size_t)n);
		len += (size_t)n;
	}
	buf[len] = '\0';
	return buf;
}

const char *yaml_tree_quote(const char *text, size_t limit, char *buf, size_t size)
{
	size_t len;

	buf[0] = '"';
	yaml_tree_escape(text, limit, buf + 1, size - 2);
	len = strlen(buf);
	buf[len] = '"';
	buf[len + 1] = '\0';
	return buf;
}

/* Keep one rule error; extra is appended to the path, for a key not yet
 * open. */
static void yaml_tree_error(struct yaml_tree_builder *b, yaml_mark_t mark, const char *extra,
			    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void yaml_tree_error(struct yaml_tree_builder *b, yaml_mark_t mark, const char *extra,
			    const char *fmt, ...)
{
	char text[1024], escaped[256], *line;
	size_t len;
	va_list ap;

	/* the path takes at most half, so the message is never cut away */
	yaml_tree_path(b, text, sizeof(text) / 2);
	len = strlen(text);
	if (extra != NULL)
		snprintf(text + len, sizeof(text) / 2 - len, "%s%s", len ? "." : "",
			 yaml_tree_escape(extra, 120, escaped, sizeof(escaped)));
	len = strlen(text);
	if (len > 0) {
		memcpy(text + len, ": ", 3);
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(text + len, sizeof(text) - len, fmt, ap);
	va_end(ap);
	line = yaml_tree_one_line(text);
	b->rules.errors =
		xrealloc(b->rules.errors, (b->rules.count + 1) * sizeof(*b->rules.errors));
	b->rules.errors[b->rules.count++] = (struct yaml_tree_rule_error){
		.line = (unsigned)mark.line + 1, .column = (unsigned)mark.column + 1, .text = line
	};
	b->error_count++;
}

/* Print the rule errors kept so far (the document is not read through, so
 * no walk sorts them in) and forget them. */
static void yaml_tree_print_rules(struct yaml_tree_builder *b)
{
	for (size_t i = 0; i < b->rules.count; i++)
		fprintf(b->errors, "%s:%u:%u: %s\n", b->name, b->rules.errors[i].line,
			b->rules.errors[i].column, b->rules.errors[i].text);
	yaml_tree_rule_errors_free(&b->rules);
}

void yaml_tree_rule_errors_free(struct yaml_tree_rule_errors *rules)
{
	for (size_t i = 0; i < rules->count; i++)
		free(rules->errors[i].text);
	free(rules->errors);
	rules->errors = NULL;
	rules->count = 0;
}

/* A new empty node at a libyaml mark, made 1-based. */
static struct yaml_tree_node *yaml_tree_node_new(enum yaml_tree_kind kind, yaml_mark_t mark)
{
	struct yaml_tree_node *node = xcalloc(1, sizeof(*node));

	node->kind = kind;
	node->line = (unsigned)mark.line + 1;
	node->column = (unsigned)mark.column + 1;
	return node;
}

/* Hang a new node under the innermost open node, or make it the root.
 * Returns 1 when the node was refused and freed instead (a complex key). */
static int yaml_tree_attach(struct yaml_tree_builder *b, struct yaml_tree_node *node,
			    yaml_mark_t mark)
{
	struct yaml_tree_frame *f;
	struct yaml_tree_node *parent;

	if (b->depth == 0) {
		b->root = node;
		return 0;
	}
	f = &b->stack[b->depth - 1];
	parent = f->node;
	if (parent->kind == YAML_TREE_SEQUENCE) {
		parent->items =
			xrealloc(parent->items, (parent->count + 1) * sizeof(*parent->items));
		parent->items[parent->count++] = node;
		return 0;
	}
	if (f->key != NULL) {
		parent->entries =
			xrealloc(parent->entries, (parent->count + 1) * sizeof(*parent->entries));
		parent->entries[parent->count].key = f->key;
		parent->entries[parent->count].value = node;
		parent->count++;
		f->key = NULL;
		return 0;
	}
	if (node->kind != YAML_TREE_SCALAR) {
		/* A complex key names no setting: it and its value are read past
		 * (the caller skips the key's own items), nothing attached. */
		yaml_tree_error(b, mark, NULL, "a mapping key must be a scalar, not %s",
				yaml_tree_kind_name(node->kind));
		yaml_tree_free(node);
		b->skip_value = true;
		return 1;
	}
	for (size_t i = 0; i < parent->count; i++) {
		const struct yaml_tree_node *other = parent->entries[i].key;

		if (strcmp(other->text, node->text) == 0) {
			yaml_tree_error(b, mark, node->text, "duplicate key, first at line %u",
					other->line);
			node->duplicate = true;
			break;
		}
	}
	f->key = node;
	return 0;
}

/* Tags would ask for a meaning the config reader does not give; refuse them
 * rather than silently ignore them. */
static void yaml_tree_check_tag(struct yaml_tree_builder *b, const yaml_char_t *tag,
				yaml_mark_t mark)
{
	char quoted[128];

	if (tag != NULL)
		yaml_tree_error(b, mark, NULL, "tags are not supported (found %s)",
				yaml_tree_quote((const char *)tag, 60, quoted, sizeof(quoted)));
}

/* Add a scalar, refusing tags and NUL bytes. */
static int yaml_tree_scalar(struct yaml_tree_builder *b, const yaml_event_t *ev)
{
	struct yaml_tree_node *node = yaml_tree_node_new(YAML_TREE_SCALAR, ev->start_mark);
	size_t len = ev->data.scalar.length;

	yaml_tree_check_tag(b, ev->data.scalar.tag, ev->start_mark);
	/* A NUL would silently cut the value short in every C string use. */
	if (memchr(ev->data.scalar.value, '\0', len) != NULL)
		yaml_tree_error(b, ev->start_mark, NULL, "NUL bytes are not allowed in a value");
	node->text = xstrndup((const char *)ev->data.scalar.value, len);
	node->text_len = len;
	node->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	return yaml_tree_attach(b, node, ev->start_mark);
}

/* Open a sequence or mapping: attach it and descend into it. */
static int yaml_tree_open(struct yaml_tree_builder *b, const yaml_event_t *ev,
			  enum yaml_tree_kind kind)
{
	const yaml_char_t *tag = kind == YAML_TREE_MAPPING ? ev->data.mapping_start.tag
							   : ev->data.sequence_start.tag;
	struct yaml_tree_node *node;

	if (b->depth == YAML_TREE_MAX_DEPTH) {
		yaml_tree_error(b, ev->start_mark, NULL, "nested deeper than %d levels",
				YAML_TREE_MAX_DEPTH);
		/* a null stands in its place, as for an alias, and its items
		 * are read past */
		node = yaml_tree_node_new(YAML_TREE_SCALAR, ev->start_mark);
		node->text = xstrdup("");
		node->plain = true;
		b->skip = 1;
		return yaml_tree_attach(b, node, ev->start_mark);
	}
	yaml_tree_check_tag(b, tag, ev->start_mark);
	node = yaml_tree_node_new(kind, ev->start_mark);
	if (yaml_tree_attach(b, node, ev->start_mark) > 0) {
		b->skip = 1; /* the complex key's own items */
		return 0;
	}
	b->stack[b->depth].node = node;
	b->stack[b->depth].key = NULL;
	b->depth++;
	return 0;
}

/* Build the tree from one parser event. Returns -1 to stop reading, 1 to
 * stop reading but keep the tree read so far for checking. */
static int yaml_tree_event(struct yaml_tree_builder *b, const yaml_event_t *ev)
{
	bool opens = ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT;
	bool closes = ev->type == YAML_SEQUENCE_END_EVENT || ev->type == YAML_MAPPING_END_EVENT;

	if (b->skip > 0) {
		b->skip += opens ? 1 : 0;
		b->skip -= closes ? 1 : 0;
		return 0;
	}
	if (b->skip_value &&
	    (opens || ev->type == YAML_SCALAR_EVENT || ev->type == YAML_ALIAS_EVENT)) {
		/* the value of a refused key: a scalar is dropped, a list or a
		 * mapping read past */
		b->skip_value = false;
		b->skip = opens ? 1 : 0;
		return 0;
	}
	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++b->documents > 1) {
			yaml_tree_error(b, ev->start_mark, NULL,
					"only one YAML document is allowed in a config");
			/* the first is whole: its errors are reported too */
			return 1;
		}
		return 0;
	case YAML_ALIAS_EVENT:
		/* Report it and stand a null in its place so that the rest of
		 * the document is still checked. */
		yaml_tree_error(b, ev->start_mark, NULL,
				"aliases are not supported (found \"*%s\"); write the value out",
				(const char *)ev->data.alias.anchor);
		{
			struct yaml_tree_node *node =
				yaml_tree_node_new(YAML_TREE_SCALAR, ev->start_mark);

			node->text = xstrdup("");
			node->plain = true;
			return yaml_tree_attach(b, node, ev->start_mark);
		}
	case YAML_SCALAR_EVENT:
		return yaml_tree_scalar(b, ev);
	case YAML_SEQUENCE_START_EVENT:
		return yaml_tree_open(b, ev, YAML_TREE_SEQUENCE);
	case YAML_MAPPING_START_EVENT:
		return yaml_tree_open(b, ev, YAML_TREE_MAPPING);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		if (b->depth > 0)
			b->depth--;
		return 0;
	default:
		return 0;
	}
}

/* The length of a UTF-8 byte order mark at the start of text: libyaml
 * skips it, and its marks count no character for it. */
static size_t yaml_tree_bom(const char *text, size_t len)
{
	return len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
}

/* The mark of a byte offset into text: libyaml's reader names only the
 * offset of a bad byte, decoding ahead of where the parser stands. Columns
 * count characters, as libyaml's marks do: the bytes before the bad one
 * decoded, so only UTF-8 continuation bytes (and a BOM) are skipped. */
static yaml_mark_t yaml_tree_mark_at(const char *text, size_t len, size_t offset)
{
	yaml_mark_t mark = { .index = offset };

	for (size_t i = yaml_tree_bom(text, len); i < offset && i < len; i++) {
		if (text[i] == '\n') {
			mark.line++;
			mark.column = 0;
		} else if (((unsigned char)text[i] & 0xc0) != 0x80) {
			mark.column++;
		}
	}
	return mark;
}

/* The byte a parser mark points at in UTF-8 text, or NUL past its end: a
 * mark's index counts characters after the BOM, not bytes, so a BOM or an
 * "é" before it would put text[index] off. */
static char yaml_tree_char_at(const char *text, size_t len, size_t index)
{
	size_t n = 0;

	for (size_t i = yaml_tree_bom(text, len); i < len; i++) {
		if (((unsigned char)text[i] & 0xc0) == 0x80)
			continue; /* inside a character */
		if (n++ == index)
			return text[i];
	}
	return '\0';
}

/* libyaml's own words for a syntax error, at the place it names. */
static void yaml_tree_syntax_error(struct yaml_tree_builder *b, const yaml_parser_t *parser,
				   const char *text, size_t len)
{
	yaml_mark_t mark = parser->problem_mark;
	const char *problem = parser->problem != NULL ? parser->problem : "invalid YAML";

	switch (parser->error) {
	case YAML_MEMORY_ERROR:
		problem = "out of memory";
		mark = parser->mark;
		break;
	case YAML_READER_ERROR:
		/* The reader leaves no mark of its own, only the offset. */
		mark = yaml_tree_mark_at(text, len, parser->problem_offset);
		break;
	default:
		break;
	}
	/* what broke a rule came before what stopped the reading */
	yaml_tree_print_rules(b);
	fprintf(b->errors, "%s:%zu:%zu: ", b->name, mark.line + 1, mark.column + 1);
	if (parser->context != NULL)
		fprintf(b->errors, "%s (%s at line %zu)", problem, parser->context,
			parser->context_mark.line + 1);
	else
		fputs(problem, b->errors);
	/* In [a, b] libyaml reads every ':' as a key indicator, so an
	 * unquoted IPv6 address there fails with a puzzling message. */
	if (parser->error == YAML_PARSER_ERROR && parser->encoding == YAML_UTF8_ENCODING &&
	    yaml_tree_char_at(text, len, mark.index) == ':')
		fputs("; quote a value that starts with ':', like \"::1/128\"", b->errors);
	/* A tab looks like spaces in an editor, and libyaml mostly says only
	 * that a character cannot start a token: name it. */
	else if (parser->error == YAML_SCANNER_ERROR && parser->encoding == YAML_UTF8_ENCODING &&
		 strstr(problem, "tab") == NULL && yaml_tree_char_at(text, len, mark.index) == '\t')
		fputs("; a tab cannot indent YAML: use spaces", b->errors);
	fputc('\n', b->errors);
	b->error_count++;
}

/* Parse one document from memory; NULL after printing the errors. */
struct yaml_tree_node *yaml_tree_parse_text(const char *text, size_t len, const char *name,
					    FILE *errors, struct yaml_tree_rule_errors *rules)
{
	struct yaml_tree_builder b = { .name = name, .errors = errors };
	yaml_parser_t parser;
	bool done = false;

	*rules = (struct yaml_tree_rule_errors){ NULL, 0 };
	if (!yaml_parser_initialize(&parser)) {
		fprintf(errors, "%s: out of memory\n", name);
		return NULL;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	while (!done) {
		yaml_event_t ev;
		int rc;

		if (!yaml_parser_parse(&parser, &ev)) {
			yaml_tree_syntax_error(&b, &parser, text, len);
			goto fail;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		rc = yaml_tree_event(&b, &ev);
		yaml_event_delete(&ev);
		if (rc < 0)
			goto fail;
		if (rc > 0)
			break;
	}
	if (b.root == NULL || yaml_tree_is_null(b.root)) {
		if (b.error_count == 0)
			fprintf(errors, "%s:1:1: the configuration is empty\n", name);
		goto fail;
	}
	yaml_parser_delete(&parser);
	*rules = b.rules;
	return b.root;
fail:
	yaml_tree_print_rules(&b);
	/* Every node hangs under the root as soon as it is made, except keys
	 * still waiting for their value. */
	for (size_t i = 0; i < b.depth; i++)
		yaml_tree_free(b.stack[i].key);
	yaml_tree_free(b.root);
	yaml_parser_delete(&parser);
	return NULL;
}

/* Read a whole file and parse it; NULL after printing the errors. With
 * regular_only the file is opened without waiting and must be a regular
 * file: the open of a FIFO nobody writes to, or a read of /dev/zero, would
 * never end. */
struct yaml_tree_node *yaml_tree_parse_file(const char *path, bool regular_only, FILE *errors,
					    struct yaml_tree_rule_errors *rules)
{
	struct yaml_tree_node *root;
	int fd = open(path, O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
	struct stat st;
	FILE *f;
	char *text;
	size_t len;

	*rules = (struct yaml_tree_rule_errors){ NULL, 0 };
	if (fd < 0) {
		fprintf(errors, "%s: cannot open: %s\n", path, strerror(errno));
		return NULL;
	}
	if (regular_only && fstat(fd, &st) < 0) {
		fprintf(errors, "%s: cannot read: %s\n", path, strerror(errno));
		close(fd);
		return NULL;
	}
	if (regular_only && !S_ISREG(st.st_mode)) {
		fprintf(errors,
			"%s: cannot read: not a regular file (a reload does not wait on a FIFO or "
			"a device)\n",
			path);
		close(fd);
		return NULL;
	}
	f = fdopen(fd, "rb");
	if (f == NULL) {
		fprintf(errors, "%s: cannot read: %s\n", path, strerror(errno));
		close(fd);
		return NULL;
	}
	text = file_read_all(f, YAML_TREE_FILE_MAX + 1, &len);
	if (text == NULL) {
		fprintf(errors, "%s: cannot read: %s\n", path, strerror(errno));
		fclose(f);
		return NULL;
	}
	fclose(f);
	if (len > YAML_TREE_FILE_MAX) {
		fprintf(errors, "%s: cannot read: over %u MiB, more than any config holds\n", path,
			YAML_TREE_FILE_MAX >> 20);
		free(text);
		return NULL;
	}
	root = yaml_tree_parse_text(text, len, path, errors, rules);
	free(text);
	return root;
}
