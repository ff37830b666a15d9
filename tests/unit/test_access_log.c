/* Unit tests for access_log.c and the output side of log.c: exact text and
 * JSON access lines, escaping, lines longer than the output buffer, and
 * buffering that keeps every line, in order, until log_flush(). */

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "access_log.h"
#include "log.h"

/* Length of "2024-01-02T03:04:05.678Z", the stamp in front of a text message. */
#define STAMP_LEN 24

/* fd 2 pointed at a temporary file for the span of one check. */
struct capture {
	int saved; /* the real fd 2, put back by capture_end */
	int fd;	   /* the temporary file */
};

/* Send everything written to fd 2 from now on into a fresh temporary file. */
static void capture_start(struct capture *c)
{
	FILE *file = tmpfile();

	assert_non_null(file);
	c->fd = dup(fileno(file));
	fclose(file);
	c->saved = dup(STDERR_FILENO);
	assert_true(c->fd >= 0 && c->saved >= 0);
	assert_int_equal(dup2(c->fd, STDERR_FILENO), STDERR_FILENO);
}

/* Is p "2024-01-02T03:04:05.678Z"? */
static bool is_stamp(const char *p)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";

	for (size_t i = 0; i < STAMP_LEN; i++)
		if (shape[i] == 'd' ? p[i] < '0' || p[i] > '9' : p[i] != shape[i])
			return false;
	return true;
}

/* Take the time off every access line in text (of *len bytes), checking
 * that each has one: text "<stamp> access ..." and JSON
 * {"time":"<stamp>","type":"access",...} become the lines the checks
 * spell, which do not know the time. Message lines keep theirs. */
static void strip_access_stamps(char *text, size_t *len)
{
	static const char json_time[] = "{\"time\":\"";
	static const char json_type[] = "\",\"type\":\"access\"";
	char *line = text;

	while (line < text + *len) {
		char *end = memchr(line, '\n', (size_t)(text + *len - line));
		size_t cut = 0, at = 0;

		if (end == NULL)
			end = text + *len;
		if (strncmp(line, "access client=", 14) == 0 ||
		    strncmp(line, "{\"type\":\"access\"", 16) == 0)
			fail_msg("an access line without its time: %.*s", (int)(end - line), line);
		if (end - line > STAMP_LEN && is_stamp(line) &&
		    strncmp(line + STAMP_LEN, " access client=", 15) == 0) {
			cut = STAMP_LEN + 1;
		} else if (strncmp(line, json_time, sizeof(json_time) - 1) == 0 &&
			   is_stamp(line + sizeof(json_time) - 1) &&
			   strncmp(line + sizeof(json_time) - 1 + STAMP_LEN, json_type,
				   sizeof(json_type) - 1) == 0) {
			/* {"time":"<stamp>", goes; the { stays */
			at = 1;
			cut = sizeof(json_time) - 1 + STAMP_LEN + 2 - 1;
		}
		if (cut > 0) {
			memmove(line + at, line + at + cut,
				(size_t)(text + *len - (line + at + cut)));
			*len -= cut;
			end -= cut;
			text[*len] = '\0';
		}
		line = end + 1;
	}
}

/* Everything written to the capture so far, NUL-terminated, access lines
 * without their time (strip_access_stamps); len may be NULL. */
static char *capture_text(const struct capture *c, size_t *len)
{
	struct stat st;
	char *text;
	size_t n;

	assert_int_equal(fstat(c->fd, &st), 0);
	text = calloc(1, (size_t)st.st_size + 1);
	assert_non_null(text);
	assert_int_equal(pread(c->fd, text, (size_t)st.st_size, 0), st.st_size);
	n = (size_t)st.st_size;
	strip_access_stamps(text, &n);
	if (len != NULL)
		*len = n;
	return text;
}

/* Put fd 2 back and return what the capture got. */
static char *capture_end(struct capture *c, size_t *len)
{
	char *text;

	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	text = capture_text(c, len);
	close(c->fd);
	return text;
}

/* The output of one access_log_write in the given format, written at once. */
static char *access_line_of(const struct access_record *r, enum log_format format)
{
	struct capture c;

	log_configure(LOG_LEVEL_INFO, format);
	capture_start(&c);
	access_log_write(r);
	return capture_end(&c, NULL);
}

/* Check the line r makes in text and in JSON, each with its newline. */
static void assert_access_lines(const struct access_record *r, const char *text, const char *json)
{
	char *got = access_line_of(r, LOG_FORMAT_TEXT);
	char *want = malloc(strlen(text) + 2);

	sprintf(want, "%s\n", text);
	assert_string_equal(got, want);
	free(got);
	free(want);
	got = access_line_of(r, LOG_FORMAT_JSON);
	want = malloc(strlen(json) + 2);
	sprintf(want, "%s\n", json);
	assert_string_equal(got, want);
	free(got);
	free(want);
}

/* A one-try GET as most requests are logged. */
static struct access_record plain_record(const char *target)
{
	static const struct access_try ok[] = { { .status = 200 } };
	struct access_record r = {
		.client = "127.0.0.1:40000",
		.method = "GET",
		.method_len = 3,
		.target = target,
		.target_len = strlen(target),
		.route = "api",
		.status = 200,
		.attempts = 1,
		.bytes = 1234,
		.duration_ms = 7,
		.tries = ok,
		.try_count = 1,
	};

	return r;
}

static void test_plain_request(void **state)
{
	struct access_record r = plain_record("http://origin:8080/items?id=1");

	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=http://origin:8080/items?id=1"
		" route=api status=200 attempts=1 bytes=1234 duration_ms=7 tries=\"200\"",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"http://origin:8080/items?id=1\",\"route\":\"api\",\"status\":200,"
		"\"attempts\":1,\"bytes\":1234,\"duration_ms\":7,"
		"\"tries\":[{\"status\":200,\"wait_ms\":0}]}");
}

/* A tunnel's line, written from a copy when the tunnel ends: bytes_in
 * follows bytes, and the copy owns its strings. */
static void test_tunnel_line_from_copy(void **state)
{
	char target[] = "api.test:443";
	char note[] = "tunnel_idle_timeout";
	struct access_record r = plain_record(target);
	struct access_record *copy;

	r.method = "CONNECT";
	r.method_len = 7;
	r.note = note;
	r.tunnel = true;
	copy = access_record_dup(&r);
	memset(target, 'x', sizeof(target) - 1);
	memset(note, 'x', sizeof(note) - 1);
	copy->bytes = 5000;
	copy->bytes_in = 300;
	copy->duration_ms = 61000;
	assert_access_lines(
		copy,
		"access client=127.0.0.1:40000 method=CONNECT target=api.test:443 route=api"
		" status=200 attempts=1 bytes=5000 bytes_in=300 duration_ms=61000 tries=\"200\""
		" note=tunnel_idle_timeout",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"CONNECT\","
		"\"target\":\"api.test:443\",\"route\":\"api\",\"status\":200,"
		"\"attempts\":1,\"bytes\":5000,\"bytes_in\":300,\"duration_ms\":61000,"
		"\"tries\":[{\"status\":200,\"wait_ms\":0}],\"note\":\"tunnel_idle_timeout\"}");
	access_record_free(copy);
}

static void test_no_tries_and_extremes(void **state)
{
	struct access_record r = plain_record("/");

	r.status = 0;
	r.attempts = 4294967295u;
	r.bytes = UINT64_MAX;
	r.duration_ms = 0;
	r.try_count = 0;
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/ route=api status=0"
		" attempts=4294967295 bytes=18446744073709551615 duration_ms=0 tries=\"-\"",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/\",\"route\":\"api\",\"status\":0,\"attempts\":4294967295,"
		"\"bytes\":18446744073709551615,\"duration_ms\":0,\"tries\":[]}");
}

static void test_retry_trail_with_waits(void **state)
{
	static const struct access_try tries[] = {
		{ .status = 503, .wait_ms = 1200 },
		{ .status = 503, .wait_ms = 250 },
		{ .status = 200 },
	};
	struct access_record r = plain_record("/r");

	r.attempts = 3;
	r.duration_ms = 1460;
	r.tries = tries;
	r.try_count = 3;
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/r route=api status=200"
		" attempts=3 bytes=1234 duration_ms=1460"
		" tries=\"503 -> wait 1.2s -> 503 -> wait 250ms -> 200\"",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/r\",\"route\":\"api\",\"status\":200,\"attempts\":3,"
		"\"bytes\":1234,\"duration_ms\":1460,\"tries\":[{\"status\":503,\"wait_ms\":1200},"
		"{\"status\":503,\"wait_ms\":250},{\"status\":200,\"wait_ms\":0}]}");
}

/* A request held for its upstream before its first try: the time held is
 * in no trail wait, so it is logged apart. */
static void test_waited_before_first_try(void **state)
{
	struct access_record r = plain_record("/held");

	r.duration_ms = 3012;
	r.waited_ms = 3004;
	r.gave_up = "deadline";
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/held route=api status=200"
		" attempts=1 bytes=1234 duration_ms=3012 tries=\"200\" waited_ms=3004"
		" gave_up=deadline",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/held\",\"route\":\"api\",\"status\":200,\"attempts\":1,"
		"\"bytes\":1234,\"duration_ms\":3012,\"tries\":[{\"status\":200,\"wait_ms\":0}],"
		"\"waited_ms\":3004,\"gave_up\":\"deadline\"}");
}

/* A retry whose backoff the deadline cut: the trail's last wait_ms is 0
 * (SPEC), the time waited after that last try is logged apart. */
static void test_waited_after_last_try(void **state)
{
	static const struct access_try tries[] = { { .status = 503, .wait_ms = 200 },
						   { .status = 503, .wait_ms = 1296 } };
	struct access_record r = plain_record("/cut");

	r.status = 503;
	r.attempts = 2;
	r.duration_ms = 1501;
	r.tries = tries;
	r.try_count = 2;
	r.gave_up = "deadline";
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/cut route=api status=503"
		" attempts=2 bytes=1234 duration_ms=1501 tries=\"503 -> wait 200ms -> 503\""
		" waited_after_ms=1296 gave_up=deadline",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/cut\",\"route\":\"api\",\"status\":503,\"attempts\":2,"
		"\"bytes\":1234,\"duration_ms\":1501,\"tries\":[{\"status\":503,\"wait_ms\":200},"
		"{\"status\":503,\"wait_ms\":0}],\"waited_after_ms\":1296,\"gave_up\":"
		"\"deadline\"}");
}

static void test_wait_forms_round_as_printf(void **state)
{
	static const uint64_t waits[] = { 0, 999, 1000, 1049, 1050, 1150, 1250, 1350, 2449, 99950 };
	static const char *const forms[] = { "0ms",  "999ms", "1.0s", "1.0s", "1.1s",
					     "1.1s", "1.2s",  "1.4s", "2.4s", "100.0s" };
	size_t i;

	for (i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		struct access_try tries[] = { { .status = 502, .wait_ms = waits[i] },
					      { .status = 200 } };
		struct access_record r = plain_record("/w");
		char want[128];
		char *got;

		r.tries = tries;
		r.try_count = 2;
		got = access_line_of(&r, LOG_FORMAT_TEXT);
		snprintf(want, sizeof(want), "tries=\"502 -> wait %s -> 200\"\n", forms[i]);
		assert_non_null(strstr(got, want));
		free(got);
	}
}

static void test_escaping(void **state)
{
	static const char target[] = "/a b\"c\\d\x01\x1f\x7f\xc3\xa9%";
	struct access_record r = plain_record(target);

	r.method = "G T";
	r.method_len = 3;
	r.route = "r\"1";
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=G%20T"
		" target=/a%20b%22c\\d%01%1F%7F%C3%A9% route=r\"1 status=200 attempts=1"
		" bytes=1234 duration_ms=7 tries=\"200\"",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"G T\","
		"\"target\":\"/a b\\\"c\\\\d\\u0001\\u001f\\u007f\\u00c3\\u00a9%\","
		"\"route\":\"r\\\"1\",\"status\":200,\"attempts\":1,\"bytes\":1234,"
		"\"duration_ms\":7,\"tries\":[{\"status\":200,\"wait_ms\":0}]}");
}

/* The escaping rule byte by byte, as the reference the writer's faster
 * scan must agree with: text %XX, JSON \" \\ or \u00xx. */
static size_t reference_escape(const unsigned char *s, size_t len, bool json, char *out)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = s[i];

		if (json && (c == '"' || c == '\\'))
			n += (size_t)sprintf(out + n, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f || (!json && (c == ' ' || c == '"')))
			n += (size_t)sprintf(out + n, json ? "\\u%04x" : "%%%02X", c);
		else
			out[n++] = (char)c;
	}
	out[n] = '\0';
	return n;
}

/* Each byte that needs escaping, and some that do not, at every place of
 * targets up to 25 bytes long: before, across and after the 8-byte steps
 * of the scan for a plain run. */
static void test_escaping_at_every_position(void **state)
{
	static const unsigned char bytes[] = { ' ',  '"',  '\\', 0x00, 0x01, 0x1f, 0x7f,
					       0x80, 0xc3, 0xff, '%',  '~',  '!',  'a' };
	unsigned char target[25];
	char want[25 * 6 + 32];
	char piece[25 * 6 + 1];

	for (size_t len = 1; len <= sizeof(target); len++) {
		for (size_t at = 0; at < len; at++) {
			for (size_t b = 0; b < sizeof(bytes); b++) {
				struct access_record r = plain_record("");

				memset(target, '/', len);
				target[at] = bytes[b];
				r.target = (const char *)target;
				r.target_len = len;
				for (int json = 0; json <= 1; json++) {
					char *got = access_line_of(&r, json ? LOG_FORMAT_JSON
									    : LOG_FORMAT_TEXT);

					reference_escape(target, len, json, piece);
					snprintf(want, sizeof(want),
						 json ? "\"target\":\"%s\"," : " target=%s route=",
						 piece);
					if (strstr(got, want) == NULL)
						fail_msg("byte 0x%02x at %zu of %zu: %s", bytes[b],
							 at, len, got);
					free(got);
				}
			}
		}
	}
}

static void test_escaping_keeps_nul_bytes(void **state)
{
	static const char target[] = { '/', 'a', '\0', 'b' };
	struct access_record r = plain_record("");
	char *got;

	r.target = target;
	r.target_len = sizeof(target);
	got = access_line_of(&r, LOG_FORMAT_TEXT);
	assert_non_null(strstr(got, " target=/a%00b route="));
	free(got);
	got = access_line_of(&r, LOG_FORMAT_JSON);
	assert_non_null(strstr(got, "\"target\":\"/a\\u0000b\","));
	free(got);
}

static void test_gave_up_and_note(void **state)
{
	static const struct access_try tries[] = {
		{ .error = "refused", .wait_ms = 100 },
		{ .error = "timed out", .wait_ms = 200 },
		{ .status = 503 },
	};
	struct access_record r = plain_record("/g");

	r.method = "POST";
	r.method_len = 4;
	r.status = 503;
	r.attempts = 3;
	r.bytes = 0;
	r.duration_ms = 301;
	r.tries = tries;
	r.try_count = 3;
	r.gave_up = "deadline";
	r.note = "client went \"away\"\n";
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=POST target=/g route=api status=503"
		" attempts=3 bytes=0 duration_ms=301"
		" tries=\"refused -> wait 100ms -> timed%20out -> wait 200ms -> 503\""
		" gave_up=deadline note=client%20went%20%22away%22%0A",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"POST\","
		"\"target\":\"/g\",\"route\":\"api\",\"status\":503,\"attempts\":3,\"bytes\":0,"
		"\"duration_ms\":301,\"tries\":[{\"error\":\"refused\",\"wait_ms\":100},"
		"{\"error\":\"timed out\",\"wait_ms\":200},{\"status\":503,\"wait_ms\":0}],"
		"\"gave_up\":\"deadline\",\"note\":\"client went \\\"away\\\"\\u000a\"}");
}

/* retry.mode: observe's would_retry and the ambiguous outcome, after
 * gave_up and before note, in both formats. */
static void test_would_retry_and_ambiguous(void **state)
{
	static const struct access_try tries[] = { { .error = "reset", .wait_ms = 50 },
						   { .status = 412 } };
	struct access_record r = plain_record("/w");

	r.status = 503;
	r.tries = tries + 1;
	r.try_count = 1;
	r.would_retry = "status";
	r.note = "n";
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/w route=api status=503"
		" attempts=1 bytes=1234 duration_ms=7 tries=\"412\" would_retry=status note=n",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/w\",\"route\":\"api\",\"status\":503,\"attempts\":1,"
		"\"bytes\":1234,\"duration_ms\":7,\"tries\":[{\"status\":412,\"wait_ms\":0}],"
		"\"would_retry\":\"status\",\"note\":\"n\"}");
	r = plain_record("/a");
	r.status = 412;
	r.attempts = 2;
	r.tries = tries;
	r.try_count = 2;
	r.ambiguous = true;
	assert_access_lines(
		&r,
		"access client=127.0.0.1:40000 method=GET target=/a route=api status=412"
		" attempts=2 bytes=1234 duration_ms=7 tries=\"reset -> wait 50ms -> 412\""
		" ambiguous=true",
		"{\"type\":\"access\",\"client\":\"127.0.0.1:40000\",\"method\":\"GET\","
		"\"target\":\"/a\",\"route\":\"api\",\"status\":412,\"attempts\":2,"
		"\"bytes\":1234,\"duration_ms\":7,\"tries\":[{\"error\":\"reset\","
		"\"wait_ms\":50},{\"status\":412,\"wait_ms\":0}],\"ambiguous\":true}");
}

/* A target of len bytes, a space every 1000 so escaping grows it. */
static char *long_target(size_t len)
{
	char *target = malloc(len);
	size_t i;

	for (i = 0; i < len; i++)
		target[i] = i % 1000 == 999 ? ' ' : (char)('a' + i % 26);
	target[0] = '/';
	return target;
}

static void test_long_target_written_whole(void **state)
{
	size_t len = 200000;
	char *target = long_target(len);
	struct access_record r = plain_record("");
	size_t got_len, i, pos;
	char *got;

	r.target = target;
	r.target_len = len;
	got = access_line_of(&r, LOG_FORMAT_TEXT);
	got_len = strlen(got);
	assert_true(len > 65536 && got_len > len);
	assert_int_equal(got[got_len - 1], '\n');
	assert_ptr_equal(strchr(got, '\n'), got + got_len - 1);
	pos = (size_t)(strstr(got, " target=") - got) + strlen(" target=");
	for (i = 0; i < len; i++) {
		if (target[i] == ' ') {
			assert_memory_equal(got + pos, "%20", 3);
			pos += 3;
		} else {
			assert_int_equal(got[pos++], target[i]);
		}
	}
	assert_string_equal(
		got + pos,
		" route=api status=200 attempts=1 bytes=1234 duration_ms=7 tries=\"200\"\n");
	free(got);
	got = access_line_of(&r, LOG_FORMAT_JSON);
	got_len = strlen(got);
	assert_true(got_len > len);
	assert_ptr_equal(strchr(got, '\n'), got + got_len - 1);
	assert_memory_equal(strstr(got, "\"target\":\"") + strlen("\"target\":\""), target, len);
	free(got);
	free(target);
}

/* Whether line is a text message line of this level and text. */
static bool is_message_line(const char *line, size_t len, const char *level_and_text)
{
	return len == STAMP_LEN + 1 + strlen(level_and_text) && line[4] == '-' && line[10] == 'T' &&
	       line[STAMP_LEN - 1] == 'Z' && line[STAMP_LEN] == ' ' &&
	       memcmp(line + STAMP_LEN + 1, level_and_text, len - STAMP_LEN - 1) == 0;
}

static void test_buffered_waits_for_flush_in_order(void **state)
{
	struct access_record a = plain_record("/first");
	struct access_record b = plain_record("/second");
	struct capture c;
	char *got, *line;
	size_t len;

	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	capture_start(&c);
	log_set_buffered(true);
	access_log_write(&a);
	log_warn("between %d", 1);
	log_debug("below the threshold");
	access_log_write(&b);
	got = capture_text(&c, &len);
	assert_int_equal(len, 0);
	free(got);
	log_flush();
	log_flush();
	log_set_buffered(false);
	got = capture_end(&c, &len);
	line = strtok(got, "\n");
	assert_non_null(strstr(line, " target=/first "));
	line = strtok(NULL, "\n");
	assert_true(is_message_line(line, strlen(line), "warn between 1"));
	line = strtok(NULL, "\n");
	assert_non_null(strstr(line, " target=/second "));
	assert_null(strtok(NULL, "\n"));
	free(got);
}

static void test_unbuffered_writes_at_once(void **state)
{
	struct access_record a = plain_record("/now");
	struct capture c;
	char *got;

	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
	capture_start(&c);
	access_log_write(&a);
	got = capture_text(&c, NULL);
	assert_non_null(strstr(got, "\"target\":\"/now\""));
	free(got);
	log_info("said \"%s\"", "hi");
	got = capture_end(&c, NULL);
	assert_non_null(strstr(got, "\"level\":\"info\",\"msg\":\"said \\\"hi\\\"\"}\n"));
	free(got);
}

static void test_buffer_flushes_itself_when_full(void **state)
{
	char *target = long_target(1000);
	struct access_record r = plain_record("");
	struct capture c;
	size_t len, flushed, line_len, written_len;
	char *got;
	int i;

	r.target = target;
	r.target_len = 1000;
	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	capture_start(&c);
	log_set_buffered(true);
	for (i = 0; i < 100; i++)
		access_log_write(&r);
	got = capture_text(&c, &flushed);
	line_len = (size_t)(strchr(got, '\n') - got) + 1;
	written_len = STAMP_LEN + 1 + line_len; /* with its time, as written */
	/* Whole lines only, as many as fit in 64 KiB, before any log_flush(). */
	assert_int_equal(flushed, 65536 / written_len * line_len);
	free(got);
	log_set_buffered(false);
	got = capture_end(&c, &len);
	assert_int_equal(len, 100 * line_len);
	free(got);
	free(target);
}

static void test_long_line_keeps_order_when_buffered(void **state)
{
	size_t len = 100000;
	char *target = long_target(len);
	struct access_record a = plain_record("/before");
	struct access_record big = plain_record("");
	struct access_record b = plain_record("/after");
	struct capture c;
	char *got, *line;

	big.target = target;
	big.target_len = len;
	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	capture_start(&c);
	log_set_buffered(true);
	access_log_write(&a);
	access_log_write(&big);
	access_log_write(&b);
	log_set_buffered(false);
	got = capture_end(&c, NULL);
	line = strtok(got, "\n");
	assert_non_null(strstr(line, " target=/before "));
	line = strtok(NULL, "\n");
	assert_true(strlen(line) > len);
	line = strtok(NULL, "\n");
	assert_non_null(strstr(line, " target=/after "));
	assert_null(strtok(NULL, "\n"));
	free(got);
	free(target);
}

static void test_exit_flushes_buffered_lines(void **state)
{
	struct access_record a = plain_record("/at-exit");
	struct capture c;
	int status;
	pid_t pid;
	char *got;

	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	fflush(NULL);
	capture_start(&c);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		log_set_buffered(true);
		access_log_write(&a);
		log_error("last words");
		exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	got = capture_end(&c, NULL);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_non_null(strstr(got, " target=/at-exit "));
	assert_non_null(strstr(got, " error last words\n"));
	free(got);
}

static void test_partial_writes_to_nonblocking_pipe(void **state)
{
	size_t len = 300000;
	char *target = long_target(len);
	struct access_record r = plain_record("");
	struct capture c;
	int pipe_fds[2], status;
	char *got, buf[4096];
	pid_t pid;
	ssize_t n;

	r.target = target;
	r.target_len = len;
	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
	fflush(NULL);
	capture_start(&c);
	assert_int_equal(pipe(pipe_fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The reader: copy the pipe into the capture file, slowly. */
		close(pipe_fds[1]);
		while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) {
			usleep(100);
			if (write(STDERR_FILENO, buf, (size_t)n) != n)
				_exit(1);
		}
		_exit(0);
	}
	close(pipe_fds[0]);
	assert_int_equal(fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(dup2(pipe_fds[1], STDERR_FILENO), STDERR_FILENO);
	close(pipe_fds[1]);
	access_log_write(&r);
	dup2(c.saved, STDERR_FILENO);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	got = capture_end(&c, NULL);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_memory_equal(strstr(got, "\"target\":\"") + strlen("\"target\":\""), target, len);
	assert_string_equal(strstr(got, "\",\"route\":"),
			    "\",\"route\":\"api\",\"status\":200,\"attempts\":1,\"bytes\":1234,"
			    "\"duration_ms\":7,\"tries\":[{\"status\":200,\"wait_ms\":0}]}\n");
	free(got);
	free(target);
}

static void test_lost_output_is_reported(void **state)
{
	struct access_record a = plain_record("/lost");
	struct access_record b = plain_record("/kept");
	struct capture c;
	char *got, *line, want[128];
	int ro;

	log_configure(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	capture_start(&c);
	/* A descriptor that cannot be written: every write fails with EBADF. */
	ro = open("/dev/null", O_RDONLY);
	assert_true(ro >= 0);
	dup2(ro, STDERR_FILENO);
	access_log_write(&a);
	log_warn("also lost");
	dup2(c.fd, STDERR_FILENO);
	close(ro);
	access_log_write(&b);
	access_log_write(&b);
	got = capture_end(&c, NULL);
	line = strtok(got, "\n");
	snprintf(want, sizeof(want), "error log output: %zu bytes lost writing to stderr: %s",
		 STAMP_LEN +
			 strlen(" access client=127.0.0.1:40000 method=GET target=/lost route=api"
				" status=200 attempts=1 bytes=1234 duration_ms=7 tries=\"200\"\n") +
			 STAMP_LEN + strlen(" warn also lost\n"),
		 strerror(EBADF));
	assert_true(is_message_line(line, strlen(line), want));
	line = strtok(NULL, "\n");
	assert_non_null(strstr(line, " target=/kept "));
	line = strtok(NULL, "\n");
	assert_non_null(strstr(line, " target=/kept "));
	assert_null(strtok(NULL, "\n"));
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_request),
		cmocka_unit_test(test_waited_after_last_try),
		cmocka_unit_test(test_no_tries_and_extremes),
		cmocka_unit_test(test_tunnel_line_from_copy),
		cmocka_unit_test(test_retry_trail_with_waits),
		cmocka_unit_test(test_waited_before_first_try),
		cmocka_unit_test(test_wait_forms_round_as_printf),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_escaping_at_every_position),
		cmocka_unit_test(test_escaping_keeps_nul_bytes),
		cmocka_unit_test(test_gave_up_and_note),
		cmocka_unit_test(test_would_retry_and_ambiguous),
		cmocka_unit_test(test_long_target_written_whole),
		cmocka_unit_test(test_buffered_waits_for_flush_in_order),
		cmocka_unit_test(test_unbuffered_writes_at_once),
		cmocka_unit_test(test_buffer_flushes_itself_when_full),
		cmocka_unit_test(test_long_line_keeps_order_when_buffered),
		cmocka_unit_test(test_exit_flushes_buffered_lines),
		cmocka_unit_test(test_partial_writes_to_nonblocking_pipe),
		cmocka_unit_test(test_lost_output_is_reported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
