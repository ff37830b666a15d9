#include "log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"

/* Lines are collected up to this size, then written with one write(2). */
#define LOG_OUT_SIZE 65536

/* How long a full non-blocking stderr may stall us before output is dropped:
 * blocking the loop a little is better than losing lines, forever is not. */
#define LOG_OUT_STALL_MS 1000

/* A log_error/warn/info/debug message is cut to this size, as before. */
#define LOG_MSG_SIZE 2048

/* The one process-wide output buffer: access lines and messages share it so
 * their relative order on fd 2 is the order they were logged in. */
struct log_out {
	char data[LOG_OUT_SIZE];
	size_t len;
	bool buffered;	 /* hold lines until log_flush(); off before the loop runs */
	bool exit_flush; /* log_exit is registered with atexit */
	size_t dropped;	 /* bytes lost to write errors since the last good write */
	int drop_errno;	 /* why the last bytes were lost */
};

static struct log_out log_out;

static enum log_level log_threshold = LOG_LEVEL_INFO;
static enum log_format log_format_now = LOG_FORMAT_TEXT;

static const char *const log_level_names[] = {
	[LOG_LEVEL_ERROR] = "error",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_DEBUG] = "debug",
};

void log_configure(enum log_level level, enum log_format format)
{
	log_threshold = level;
	log_format_now = format;
}

enum log_format log_get_format(void)
{
	return log_format_now;
}

int log_enabled(enum log_level level)
{
	return level <= log_threshold;
}

static const char log_hex[] = "0123456789abcdef";

/* Escape a message for a JSON string body into out (room for 6 bytes per
 * input byte): quotes, backslashes and control bytes; a byte that is not
 * part of a UTF-8 character (a Latin-1 path, say) as the code point of its
 * value, so that the line stays valid JSON. Returns the length. */
static size_t log_json_escape(char *out, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t left = strlen(s);
	char *p = out;

	while (left > 0) {
		unsigned char c = *u;
		size_t n = c < 0x80 ? 1 : utf8_char_length(u, left);

		if (c == '"' || c == '\\') {
			*p++ = '\\';
			*p++ = (char)c;
		} else if (c < 0x20 || n == 0) {
			memcpy(p, "\\u00", 4);
			p[4] = log_hex[c >> 4];
			p[5] = log_hex[c & 0xf];
			p += 6;
		} else {
			memcpy(p, u, n);
			p += n;
			u += n;
			left -= n;
			continue;
		}
		u++;
		left--;
	}
	return (size_t)(p - out);
}

/* Copy a message for a text line into out (room for 4 bytes per input
 * byte), control bytes as \xNN: a newline in what a client sent (a name
 * in its TLS hello, say) must not start a line of its own. */
static size_t log_text_escape(char *out, const char *s)
{
	char *p = out;

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c == 0x7f) {
			memcpy(p, "\\x", 2);
			p[2] = log_hex[c >> 4];
			p[3] = log_hex[c & 0xf];
			p += 4;
		} else {
			*p++ = (char)c;
		}
	}
	return (size_t)(p - out);
}

/* Wait until fd 2 takes more bytes; false if it stays full too long. */
static bool log_out_wait_writable(void)
{
	struct pollfd pfd = { .fd = STDERR_FILENO, .events = POLLOUT };

	for (;;) {
		int n = poll(&pfd, 1, LOG_OUT_STALL_MS);

		if (n > 0)
			return true;
		if (n == 0 || errno != EINTR)
			return false;
	}
}

/* Write all of iov to fd 2, resuming after partial writes and signals.
 * Returns how many bytes at the end could not be written (0 on success). */
static size_t log_out_writev(struct iovec *iov, int count)
{
	size_t left = 0;
	int i;

	for (i = 0; i < count; i++)
		left += iov[i].iov_len;
	while (left > 0) {
		ssize_t n = writev(STDERR_FILENO, iov, count);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && log_out_wait_writable())
			continue;
		/* Any other error, a stall, or a write of nothing would repeat
		 * forever: give the rest up and let the caller account for it. */
		if (n <= 0) {
			log_out.drop_errno = n < 0 ? errno : EIO;
			return left;
		}
		left -= (size_t)n;
		while (count > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			count--;
		}
		if (count > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

void log_stamp(char *out)
{
	/* an access line per request: the date and time are formatted once a
	 * second, the milliseconds each time */
	static time_t second = -1;
	static char whole[sizeof("2026-11-29T13:04:45")];
	struct timespec now;
	unsigned ms;

	clock_gettime(CLOCK_REALTIME, &now);
	if (now.tv_sec != second) {
		struct tm tm;

		gmtime_r(&now.tv_sec, &tm);
		strftime(whole, sizeof(whole), "%Y-%m-%dT%H:%M:%S", &tm);
		second = now.tv_sec;
	}
	ms = (unsigned)(now.tv_nsec / 1000000);
	memcpy(out, whole, sizeof(whole) - 1);
	out += sizeof(whole) - 1;
	out[0] = '.';
	out[1] = (char)('0' + ms / 100);
	out[2] = (char)('0' + ms / 10 % 10);
	out[3] = (char)('0' + ms % 10);
	out[4] = 'Z';
}

/* Format one message line (no newline) into out, which holds at least
 * 6 * strlen(msg) + 128 bytes. Returns its length. */
static size_t log_format(char *out, enum log_level level, const char *msg)
{
	char stamp[LOG_STAMP_LEN + 1];
	int n;

	log_stamp(stamp);
	stamp[LOG_STAMP_LEN] = '\0';
	if (log_format_now == LOG_FORMAT_JSON) {
		size_t len;

		n = snprintf(out, 128, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", stamp,
			     log_level_names[level]);
		len = (size_t)n + log_json_escape(out + n, msg);
		memcpy(out + len, "\"}", 2);
		return len + 2;
	}
	n = snprintf(out, 128, "%s %s ", stamp, log_level_names[level]);
	return (size_t)n + log_text_escape(out + n, msg);
}

/* Write a then b to fd 2. Output lost to a failing stderr is not dropped
 * silently: the next write that works is preceded by a line saying how much
 * was lost and why. */
static void log_out_send(const char *a, size_t alen, const char *b, size_t blen)
{
	char msg[128];
	char notice[6 * sizeof(msg) + 128 + 1];
	struct iovec iov[3];
	int count = 0;
	size_t lost;

	if (log_out.dropped > 0) {
		size_t len;

		snprintf(msg, sizeof(msg), "log output: %zu bytes lost writing to stderr: %s",
			 log_out.dropped, strerror(log_out.drop_errno));
		len = log_format(notice, LOG_LEVEL_ERROR, msg);
		notice[len] = '\n';
		iov[count++] = (struct iovec){ .iov_base = notice, .iov_len = len + 1 };
	}
	iov[count++] = (struct iovec){ .iov_base = (void *)a, .iov_len = alen };
	if (blen > 0)
		iov[count++] = (struct iovec){ .iov_base = (void *)b, .iov_len = blen };
	lost = log_out_writev(iov, count);
	if (lost == 0)
		log_out.dropped = 0;
	else
		/* An unwritten notice is not output of its own: it is made
		 * again, with the new total, next time. */
		log_out.dropped += lost < alen + blen ? lost : alen + blen;
}

void log_flush(void)
{
	size_t len = log_out.len;

	if (len == 0)
		return;
	/* Empty first: whatever happens to the write, these bytes are done. */
	log_out.len = 0;
	log_out_send(log_out.data, len, NULL, 0);
}

size_t log_pending(void)
{
	return log_out.len;
}

/* The atexit handler: write what is left and write at once from then on,
 * since nothing would flush lines logged by later exit handlers. */
static void log_exit(void)
{
	log_flush();
	log_out.buffered = false;
}

void log_set_buffered(bool on)
{
	if (!on)
		log_flush();
	if (on && !log_out.exit_flush) {
		log_out.exit_flush = atexit(log_exit) == 0;
		/* Without the exit flush, buffering could lose the last lines. */
		if (!log_out.exit_flush)
			return;
	}
	log_out.buffered = on;
}

void log_write_line(const char *line, size_t len)
{
	if (log_out.len + len + 1 > LOG_OUT_SIZE)
		log_flush();
	if (len + 1 > LOG_OUT_SIZE) {
		/* Too long to buffer: write it whole from where it is, after
		 * everything logged before it. */
		log_out_send(line, len, "\n", 1);
		return;
	}
	memcpy(log_out.data + log_out.len, line, len);
	log_out.data[log_out.len + len] = '\n';
	log_out.len += len + 1;
	if (!log_out.buffered)
		log_flush();
}

/* Format a message line if its level is on and hand it to the output buffer. */
static void log_emit(enum log_level level, const char *fmt, va_list ap)
{
	char msg[LOG_MSG_SIZE];
	char line[LOG_MSG_SIZE * 6 + 128];

	if (!log_enabled(level))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	log_write_line(line, log_format(line, level, msg));
}

void log_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LEVEL_ERROR, fmt, ap);
	va_end(ap);
}

void log_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LEVEL_WARN, fmt, ap);
	va_end(ap);
}

void log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LEVEL_INFO, fmt, ap);
	va_end(ap);
}

void log_debug(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(LOG_LEVEL_DEBUG, fmt, ap);
	va_end(ap);
}
