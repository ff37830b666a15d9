#ifndef RETRYPROXY_LOG_H
#define RETRYPROXY_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum log_level {
	LOG_LEVEL_ERROR, /* the proxy cannot do something it was asked to */
	LOG_LEVEL_WARN,	 /* something is wrong but serving goes on */
	LOG_LEVEL_INFO,	 /* start, stop, reload, access lines */
	LOG_LEVEL_DEBUG, /* per-connection detail */
};

enum log_format {
	LOG_FORMAT_TEXT, /* one human line per event */
	LOG_FORMAT_JSON, /* one JSON object per line, stable keys */
};

/* Set the threshold and format for everything written from now on. */
void log_configure(enum log_level level, enum log_format format);
enum log_format log_get_format(void);
int log_enabled(enum log_level level);

void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Every line's time, UTC to the millisecond: "2026-11-29T13:04:45.123Z"
 * (LOG_STAMP_LEN bytes, no NUL), written at out. */
#define LOG_STAMP_LEN 24
void log_stamp(char *out);

/* Write one finished line (no trailing newline) as it is, ignoring the level:
 * access lines are always written. The line is never cut, however long. */
void log_write_line(const char *line, size_t len);

/* Off (the default): every line goes to fd 2 at once, as start-up, config
 * errors and --check need. On: lines wait in one process-wide buffer, in the
 * order they were logged, until log_flush(), the buffer nearing 64 KiB, or
 * exit. Turning it off flushes first. */
void log_set_buffered(bool on);

/* Write everything buffered to fd 2 in as few write(2) calls as possible;
 * cheap when nothing is buffered, so the event loop can call it every pass. */
void log_flush(void);

/* Bytes waiting for log_flush(). */
size_t log_pending(void);

#endif
