#include "log.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

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

/* Escape a message for a JSON string: quotes, backslashes and control bytes. */
static void log_json_escape(FILE *out, const char *s)
{
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
}

static void log_emit(enum log_level level, const char *fmt, va_list ap)
{
	char msg[2048];
	char stamp[32];
	struct timeval tv;
	struct tm tm;

	if (!log_enabled(level))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	if (log_format_now == LOG_FORMAT_JSON) {
		fprintf(stderr, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":\"", stamp,
			(long)(tv.tv_usec / 1000), log_level_names[level]);
		log_json_escape(stderr, msg);
		fputs("\"}\n", stderr);
	} else {
		fprintf(stderr, "%s.%03ldZ %s %s\n", stamp, (long)(tv.tv_usec / 1000),
			log_level_names[level], msg);
	}
	fflush(stderr);
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

void log_write_line(const char *line, size_t len)
{
	fwrite(line, 1, len, stderr);
	fputc('\n', stderr);
	fflush(stderr);
}
