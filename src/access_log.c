#include "access_log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "word_scan.h"
#include "xmalloc.h"

/* The line being built. One buffer serves every line (lines are written
 * before control returns to the event loop) and grows to the longest line
 * seen, so a line is never cut and JSON lines always parse. */
struct access_line {
	char *data;
	size_t len;
	size_t cap;
};

static struct access_line access_line_shared;

/* Grow the buffer to take n more bytes: rare, once the longest line was seen. */
static void access_line_grow(struct access_line *line, size_t n)
{
	size_t cap = line->cap > 0 ? line->cap : 512;

	while (cap - line->len < n)
		cap *= 2;
	line->data = xrealloc(line->data, cap);
	line->cap = cap;
}

/* Make room for n more bytes and return where they go. Inline: it runs for
 * every piece of every line, and the room is nearly always there. */
static inline char *access_line_room(struct access_line *line, size_t n)
{
	if (line->data == NULL || line->cap - line->len < n)
		access_line_grow(line, n);
	return line->data + line->len;
}

/* Append len bytes as they are. */
static inline void access_line_bytes(struct access_line *line, const char *s, size_t len)
{
	memcpy(access_line_room(line, len), s, len);
	line->len += len;
}

/* Append a NUL-terminated string as it is (a literal's length folds away). */
static inline void access_line_str(struct access_line *line, const char *s)
{
	access_line_bytes(line, s, strlen(s));
}

/* Append v in decimal with no printf: count the digits, then make them back
 * to front in place, two at a time from a table (half the divisions, no
 * copy). */
static void access_line_uint(struct access_line *line, uint64_t v)
{
	static const char pairs[] = "00010203040506070809"
				    "10111213141516171819"
				    "20212223242526272829"
				    "30313233343536373839"
				    "40414243444546474849"
				    "50515253545556575859"
				    "60616263646566676869"
				    "70717273747576777879"
				    "80818283848586878889"
				    "90919293949596979899";
	size_t n = 1;
	char *p;

	for (uint64_t rest = v; rest >= 10; rest /= 10)
		n++;
	p = access_line_room(line, n) + n;
	line->len += n;
	while (v >= 100) {
		unsigned pair = (unsigned)(v % 100) * 2;

		v /= 100;
		p -= 2;
		p[0] = pairs[pair];
		p[1] = pairs[pair + 1];
	}
	if (v >= 10) {
		p -= 2;
		p[0] = pairs[v * 2];
		p[1] = pairs[v * 2 + 1];
	} else {
		p[-1] = (char)('0' + v);
	}
}

/* Append v in decimal with its sign, as %d would. */
static void access_line_int(struct access_line *line, int v)
{
	if (v < 0) {
		access_line_bytes(line, "-", 1);
		/* Through int64_t so INT_MIN negates without overflow. */
		access_line_uint(line, (uint64_t)(-(int64_t)v));
		return;
	}
	access_line_uint(line, (uint64_t)v);
}

/* How many bytes at the start of s go into a value as they are: all but
 * controls, DEL, non-ASCII and the quote, and in text the space, in JSON
 * the backslash. Eight at a time: a target or a route name is nearly
 * always one such run. */
static size_t access_plain_run(const char *s, size_t len, bool json)
{
	size_t i = 0;

	for (; len - i >= 8; i += 8) {
		uint64_t x;

		memcpy(&x, s + i, 8);
		if ((WORD_HAS_LESS(x, json ? 0x20 : 0x21) | WORD_HAS_BYTE(x, 0x7f) |
		     WORD_HAS_BYTE(x, '"') | WORD_HAS_BYTE(x, json ? '\\' : ' ') |
		     (x & WORD_HIGHS)) != 0)
			break;
	}
	return i;
}

/* Append s so it stays one token in text (no spaces, quotes or controls:
 * %XX) or one JSON string body (\" \\ and \u00XX). */
static void access_line_escaped(struct access_line *line, const char *s, size_t len, bool json)
{
	static const char upper[] = "0123456789ABCDEF";
	static const char lower[] = "0123456789abcdef";
	/* Room for the worst case up front keeps the loop free of checks. */
	char *p = access_line_room(line, len * (json ? 6 : 3));
	char *start = p;
	size_t i = access_plain_run(s, len, json);

	if (i > 0) {
		memcpy(p, s, i);
		p += i;
	}
	for (; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (json && (c == '"' || c == '\\')) {
			*p++ = '\\';
			*p++ = (char)c;
		} else if (c < 0x20 || c >= 0x7f || (!json && (c == ' ' || c == '"'))) {
			if (json) {
				memcpy(p, "\\u00", 4);
				p[4] = lower[c >> 4];
				p[5] = lower[c & 0xf];
				p += 6;
			} else {
				p[0] = '%';
				p[1] = upper[c >> 4];
				p[2] = upper[c & 0xf];
				p += 3;
			}
		} else {
			*p++ = (char)c;
		}
	}
	line->len += (size_t)(p - start);
}

/* The time a request waited after its last try in a backoff, a hold or a
 * queue that no try ended (its deadline, the drain, its client's leaving):
 * the last try's wait, which the trail itself gives as none. */
static uint64_t access_waited_after_ms(const struct access_record *r)
{
	return r->try_count > 0 ? r->tries[r->try_count - 1].wait_ms : 0;
}

/* "1.2s" or "250ms": the compact wait form of the retry trail. Waits come
 * only with retries, so printf keeps its exact rounding for seconds. */
static void access_line_wait(struct access_line *line, uint64_t ms)
{
	char seconds[48];

	if (ms >= 1000) {
		int n = snprintf(seconds, sizeof(seconds), "%.1fs", (double)ms / 1000.0);

		access_line_bytes(line, seconds, (size_t)n);
		return;
	}
	access_line_uint(line, ms);
	access_line_bytes(line, "ms", 2);
}

/* Append the time, as every log line starts with it. */
static void access_line_stamp(struct access_line *line)
{
	log_stamp(access_line_room(line, LOG_STAMP_LEN));
	line->len += LOG_STAMP_LEN;
}

/* Hand the finished line to the log and empty the buffer for the next one. */
static void access_line_write(struct access_line *line)
{
	log_write_line(line->data, line->len);
	line->len = 0;
}

/* The text line: key=value tokens, the retry trail quoted. */
static void access_log_text(const struct access_record *r)
{
	struct access_line *line = &access_line_shared;
	size_t i;

	access_line_stamp(line);
	access_line_str(line, " access client=");
	access_line_str(line, r->client);
	access_line_str(line, " method=");
	access_line_escaped(line, r->method, r->method_len, false);
	access_line_str(line, " target=");
	access_line_escaped(line, r->target, r->target_len, false);
	access_line_str(line, " route=");
	access_line_str(line, r->route);
	access_line_str(line, " status=");
	access_line_int(line, r->status);
	access_line_str(line, " attempts=");
	access_line_uint(line, r->attempts);
	access_line_str(line, " bytes=");
	access_line_uint(line, r->bytes);
	if (r->tunnel) {
		access_line_str(line, " bytes_in=");
		access_line_uint(line, r->bytes_in);
	}
	access_line_str(line, " duration_ms=");
	access_line_uint(line, r->duration_ms);
	access_line_str(line, " tries=\"");
	/* the retry trail: 503 -> wait 1.2s -> 503 -> wait 2.7s -> 200 */
	if (r->try_count == 0)
		access_line_str(line, "-");
	for (i = 0; i < r->try_count; i++) {
		const struct access_try *t = &r->tries[i];

		if (t->hedge)
			access_line_str(line, "hedge:");
		if (t->error != NULL)
			access_line_escaped(line, t->error, strlen(t->error), false);
		else
			access_line_int(line, t->status);
		if (t->resumed) {
			access_line_str(line, " resumed_at=");
			access_line_uint(line, t->resumed_at);
		}
		if (t->broken != NULL) {
			access_line_str(line, " broken=");
			access_line_str(line, t->broken);
		}
		if (i + 1 < r->try_count) {
			access_line_str(line, " -> wait ");
			access_line_wait(line, t->wait_ms);
			access_line_str(line, " -> ");
		}
	}
	access_line_str(line, "\"");
	if (r->waited_ms > 0) {
		access_line_str(line, " waited_ms=");
		access_line_uint(line, r->waited_ms);
	}
	if (access_waited_after_ms(r) > 0) {
		access_line_str(line, " waited_after_ms=");
		access_line_uint(line, access_waited_after_ms(r));
	}
	if (r->gave_up != NULL) {
		access_line_str(line, " gave_up=");
		access_line_str(line, r->gave_up);
	}
	if (r->would_retry != NULL) {
		access_line_str(line, " would_retry=");
		access_line_str(line, r->would_retry);
	}
	if (r->ambiguous)
		access_line_str(line, " ambiguous=true");
	if (r->note != NULL) {
		access_line_str(line, " note=");
		access_line_escaped(line, r->note, strlen(r->note), false);
	}
	access_line_write(line);
}

/* The JSON line: one object with stable keys, the tries as an array. */
static void access_log_json(const struct access_record *r)
{
	struct access_line *line = &access_line_shared;
	size_t i;

	access_line_str(line, "{\"time\":\"");
	access_line_stamp(line);
	access_line_str(line, "\",\"type\":\"access\",\"client\":\"");
	access_line_str(line, r->client);
	access_line_str(line, "\",\"method\":\"");
	access_line_escaped(line, r->method, r->method_len, true);
	access_line_str(line, "\",\"target\":\"");
	access_line_escaped(line, r->target, r->target_len, true);
	access_line_str(line, "\",\"route\":\"");
	access_line_escaped(line, r->route, strlen(r->route), true);
	access_line_str(line, "\",\"status\":");
	access_line_int(line, r->status);
	access_line_str(line, ",\"attempts\":");
	access_line_uint(line, r->attempts);
	access_line_str(line, ",\"bytes\":");
	access_line_uint(line, r->bytes);
	if (r->tunnel) {
		access_line_str(line, ",\"bytes_in\":");
		access_line_uint(line, r->bytes_in);
	}
	access_line_str(line, ",\"duration_ms\":");
	access_line_uint(line, r->duration_ms);
	access_line_str(line, ",\"tries\":[");
	for (i = 0; i < r->try_count; i++) {
		const struct access_try *t = &r->tries[i];

		if (i > 0)
			access_line_str(line, ",");
		if (t->error != NULL) {
			access_line_str(line, "{\"error\":\"");
			access_line_escaped(line, t->error, strlen(t->error), true);
			access_line_str(line, "\"");
		} else {
			access_line_str(line, "{\"status\":");
			access_line_int(line, t->status);
		}
		if (t->hedge)
			access_line_str(line, ",\"hedge\":true");
		if (t->resumed) {
			access_line_str(line, ",\"resumed_at\":");
			access_line_uint(line, t->resumed_at);
		}
		if (t->broken != NULL) {
			access_line_str(line, ",\"broken\":\"");
			access_line_str(line, t->broken);
			access_line_str(line, "\"");
		}
		/* the last is 0 (SPEC): a wait no try ended is told apart */
		access_line_str(line, ",\"wait_ms\":");
		access_line_uint(line, i + 1 < r->try_count ? t->wait_ms : 0);
		access_line_str(line, "}");
	}
	access_line_str(line, "]");
	if (r->waited_ms > 0) {
		access_line_str(line, ",\"waited_ms\":");
		access_line_uint(line, r->waited_ms);
	}
	if (access_waited_after_ms(r) > 0) {
		access_line_str(line, ",\"waited_after_ms\":");
		access_line_uint(line, access_waited_after_ms(r));
	}
	if (r->gave_up != NULL) {
		access_line_str(line, ",\"gave_up\":\"");
		access_line_str(line, r->gave_up);
		access_line_str(line, "\"");
	}
	if (r->would_retry != NULL) {
		access_line_str(line, ",\"would_retry\":\"");
		access_line_str(line, r->would_retry);
		access_line_str(line, "\"");
	}
	if (r->ambiguous)
		access_line_str(line, ",\"ambiguous\":true");
	if (r->note != NULL) {
		access_line_str(line, ",\"note\":\"");
		access_line_escaped(line, r->note, strlen(r->note), true);
		access_line_str(line, "\"");
	}
	access_line_str(line, "}");
	access_line_write(line);
}

void access_log_write(const struct access_record *record)
{
	if (log_get_format() == LOG_FORMAT_JSON)
		access_log_json(record);
	else
		access_log_text(record);
}

/* The copy's strings: the record's own may point into a request head, a
 * config or a buffer that is gone by the time the line is written. The
 * names of tries, gave_up and would_retry are static. */
struct access_record *access_record_dup(const struct access_record *record)
{
	struct access_record *copy = xmalloc(sizeof(*copy));

	*copy = *record;
	copy->client = xstrdup(record->client);
	copy->method = xstrndup(record->method, record->method_len);
	copy->target = xstrndup(record->target, record->target_len);
	copy->route = xstrdup(record->route);
	copy->note = record->note != NULL ? xstrdup(record->note) : NULL;
	copy->tries = NULL;
	if (record->try_count > 0) {
		struct access_try *tries = xcalloc(record->try_count, sizeof(*tries));

		memcpy(tries, record->tries, record->try_count * sizeof(*tries));
		copy->tries = tries;
	}
	return copy;
}

void access_record_free(struct access_record *record)
{
	if (record == NULL)
		return;
	free((char *)record->client);
	free((char *)record->method);
	free((char *)record->target);
	free((char *)record->route);
	free((char *)record->note);
	free((struct access_try *)record->tries);
	free(record);
}
