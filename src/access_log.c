#include "access_log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "log.h"

/* The line being built. One buffer serves every line (lines are written
 * before control returns to the event loop) and grows to the longest line
 * seen, so a line is never cut and JSON lines always parse. */
struct access_line {
	struct evbuffer *buf;
};

static void access_line_printf(struct access_line *line, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void access_line_printf(struct access_line *line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	evbuffer_add_vprintf(line->buf, fmt, ap);
	va_end(ap);
}

/* Append s so it stays one token in text (no spaces, quotes or controls) or
 * one JSON string body. */
static void access_line_escaped(struct access_line *line, const char *s, size_t len, bool json)
{
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (json && (c == '"' || c == '\\'))
			access_line_printf(line, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f || (!json && (c == ' ' || c == '"')))
			access_line_printf(line, json ? "\\u%04x" : "%%%02X", c);
		else
			access_line_printf(line, "%c", c);
	}
}

/* "1.2s" or "250ms": the compact wait form of the retry trail. */
static void access_line_wait(struct access_line *line, uint64_t ms)
{
	if (ms >= 1000)
		access_line_printf(line, "%.1fs", (double)ms / 1000.0);
	else
		access_line_printf(line, "%llums", (unsigned long long)ms);
}

/* The shared line buffer, made on first use. */
static struct evbuffer *access_line_buffer(void)
{
	static struct evbuffer *buf;

	if (buf == NULL)
		buf = evbuffer_new();
	return buf;
}

/* Write the finished line and empty the buffer for the next one. */
static void access_line_write(struct access_line *line)
{
	size_t len = evbuffer_get_length(line->buf);

	log_write_line((const char *)evbuffer_pullup(line->buf, -1), len);
	evbuffer_drain(line->buf, len);
}

static void access_log_text(const struct access_record *r)
{
	struct access_line line = { .buf = access_line_buffer() };
	size_t i;

	access_line_printf(&line, "access client=%s method=", r->client);
	access_line_escaped(&line, r->method, r->method_len, false);
	access_line_printf(&line, " target=");
	access_line_escaped(&line, r->target, r->target_len, false);
	access_line_printf(&line, " route=%s status=%d attempts=%u bytes=%llu duration_ms=%llu tries=\"",
			   r->route, r->status, r->attempts, (unsigned long long)r->bytes,
			   (unsigned long long)r->duration_ms);
	/* the retry trail: 503 -> wait 1.2s -> 503 -> wait 2.7s -> 200 */
	if (r->try_count == 0)
		access_line_printf(&line, "-");
	for (i = 0; i < r->try_count; i++) {
		const struct access_try *t = &r->tries[i];

		if (t->error != NULL)
			access_line_escaped(&line, t->error, strlen(t->error), false);
		else
			access_line_printf(&line, "%d", t->status);
		if (i + 1 < r->try_count) {
			access_line_printf(&line, " -> wait ");
			access_line_wait(&line, t->wait_ms);
			access_line_printf(&line, " -> ");
		}
	}
	access_line_printf(&line, "\"");
	if (r->gave_up != NULL)
		access_line_printf(&line, " gave_up=%s", r->gave_up);
	if (r->note != NULL) {
		access_line_printf(&line, " note=");
		access_line_escaped(&line, r->note, strlen(r->note), false);
	}
	access_line_write(&line);
}

static void access_log_json(const struct access_record *r)
{
	struct access_line line = { .buf = access_line_buffer() };
	size_t i;

	access_line_printf(&line, "{\"type\":\"access\",\"client\":\"%s\",\"method\":\"", r->client);
	access_line_escaped(&line, r->method, r->method_len, true);
	access_line_printf(&line, "\",\"target\":\"");
	access_line_escaped(&line, r->target, r->target_len, true);
	access_line_printf(&line, "\",\"route\":\"");
	access_line_escaped(&line, r->route, strlen(r->route), true);
	access_line_printf(&line,
			   "\",\"status\":%d,\"attempts\":%u,\"bytes\":%llu,\"duration_ms\":%llu,\"tries\":[",
			   r->status, r->attempts, (unsigned long long)r->bytes,
			   (unsigned long long)r->duration_ms);
	for (i = 0; i < r->try_count; i++) {
		const struct access_try *t = &r->tries[i];

		if (t->error != NULL) {
			access_line_printf(&line, "%s{\"error\":\"", i > 0 ? "," : "");
			access_line_escaped(&line, t->error, strlen(t->error), true);
			access_line_printf(&line, "\"");
		} else {
			access_line_printf(&line, "%s{\"status\":%d", i > 0 ? "," : "", t->status);
		}
		access_line_printf(&line, ",\"wait_ms\":%llu}", (unsigned long long)t->wait_ms);
	}
	access_line_printf(&line, "]");
	if (r->gave_up != NULL)
		access_line_printf(&line, ",\"gave_up\":\"%s\"", r->gave_up);
	if (r->note != NULL) {
		access_line_printf(&line, ",\"note\":\"");
		access_line_escaped(&line, r->note, strlen(r->note), true);
		access_line_printf(&line, "\"");
	}
	access_line_printf(&line, "}");
	access_line_write(&line);
}

void access_log_write(const struct access_record *record)
{
	if (log_get_format() == LOG_FORMAT_JSON)
		access_log_json(record);
	else
		access_log_text(record);
}
