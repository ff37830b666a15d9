#include "access_log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* Room for the longest line: targets are cut at ACCESS_LOG_MAX_TARGET bytes
 * (6 bytes each once escaped) and tries at ACCESS_LOG_MAX_TRIES, so a line
 * is never cut and JSON lines always parse. */
#define ACCESS_LOG_MAX_TARGET 2048
#define ACCESS_LOG_LINE 16384

/* A bounded line builder: output past the end is cut, never overflowed. */
struct access_line {
	char buf[ACCESS_LOG_LINE];
	size_t len;
};

static void access_line_printf(struct access_line *line, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void access_line_printf(struct access_line *line, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (line->len >= sizeof(line->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line->buf + line->len, sizeof(line->buf) - line->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		line->len += (size_t)n;
	if (line->len > sizeof(line->buf) - 1)
		line->len = sizeof(line->buf) - 1;
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

static void access_log_text(const struct access_record *r)
{
	struct access_line line = { .len = 0 };
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
	log_write_line(line.buf, line.len);
}

static void access_log_json(const struct access_record *r)
{
	struct access_line line = { .len = 0 };
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
	log_write_line(line.buf, line.len);
}

void access_log_write(const struct access_record *record)
{
	struct access_record r = *record;

	if (r.target_len > ACCESS_LOG_MAX_TARGET)
		r.target_len = ACCESS_LOG_MAX_TARGET;
	if (r.method_len > 64)
		r.method_len = 64;
	if (r.try_count > ACCESS_LOG_MAX_TRIES)
		r.try_count = ACCESS_LOG_MAX_TRIES;
	record = &r;
	if (log_get_format() == LOG_FORMAT_JSON)
		access_log_json(record);
	else
		access_log_text(record);
}
