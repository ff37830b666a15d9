#include "http_date.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A read position in a date; end is one past the last byte. */
struct http_date_cursor {
	const char *p;
	const char *end;
};

/* A broken-down UTC time as read from an HTTP-date. */
struct http_date_fields {
	int year;
	int month; /* 1..12 */
	int day;
	int hour;
	int minute;
	int second; /* 0..60: a leap second is allowed by RFC 9110 */
};

static const char *const http_date_day_short[] = {
	"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"
};
static const char *const http_date_day_long[] = { "Monday", "Tuesday",	"Wednesday", "Thursday",
						  "Friday", "Saturday", "Sunday" };
static const char *const http_date_month_name[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
						    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

/* Consume lit if the cursor is at it. */
static bool http_date_literal(struct http_date_cursor *c, const char *lit)
{
	size_t len = strlen(lit);

	if ((size_t)(c->end - c->p) < len || memcmp(c->p, lit, len) != 0)
		return false;
	c->p += len;
	return true;
}

/* Consume exactly count digits into *out. */
static bool http_date_digits(struct http_date_cursor *c, int count, int *out)
{
	int value = 0;

	if (c->end - c->p < count)
		return false;
	for (int i = 0; i < count; i++) {
		if (c->p[i] < '0' || c->p[i] > '9')
			return false;
		value = value * 10 + (c->p[i] - '0');
	}
	c->p += count;
	*out = value;
	return true;
}

/* Consume one of names; *index is its position, 1-based. */
static bool http_date_name(struct http_date_cursor *c, const char *const *names, int count,
			   int *index)
{
	for (int i = 0; i < count; i++) {
		if (http_date_literal(c, names[i])) {
			*index = i + 1;
			return true;
		}
	}
	return false;
}

/* Consume "HH:MM:SS". */
static bool http_date_time_of_day(struct http_date_cursor *c, struct http_date_fields *d)
{
	return http_date_digits(c, 2, &d->hour) && http_date_literal(c, ":") &&
	       http_date_digits(c, 2, &d->minute) && http_date_literal(c, ":") &&
	       http_date_digits(c, 2, &d->second);
}

/* Gregorian leap year. */
static bool http_date_leap_year(int64_t year)
{
	return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/* Days from 1970-01-01 to year-month-day; year 0..9999 and a valid date.
 * Counting is done 400 years later so every division is of a positive
 * number: a 400-year cycle has the same number of days wherever it starts. */
static int64_t http_date_days_from_epoch(int64_t year, int month, int day)
{
	static const int before_month[] = { 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334 };
	int64_t y = year + 400 - 1;
	int64_t epoch = 1970 + 400 - 1;
	int64_t days = 365 * y + y / 4 - y / 100 + y / 400;
	int64_t epoch_days = 365 * epoch + epoch / 4 - epoch / 100 + epoch / 400;

	days += before_month[month - 1] + (month > 2 && http_date_leap_year(year)) + day - 1;
	return days - epoch_days;
}

/* The UTC calendar year of a time, clamped to 1970..9999. */
static int http_date_year_of(time_t now)
{
	int64_t days;
	int64_t year;

	if (now <= 0)
		return 1970;
	days = (int64_t)now / 86400;
	year = 1970 + days / 366; /* an underestimate, walked up below */
	if (year > 9999)
		return 9999;
	while (year < 9999 && http_date_days_from_epoch(year + 1, 1, 1) <= days)
		year++;
	return (int)year;
}

/* Range checks for a date read from text: Feb 30 and 25:00:00 are errors. */
static bool http_date_date_valid(const struct http_date_fields *d)
{
	static const int month_days[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

	if (d->day < 1 || d->day > month_days[d->month - 1])
		return false;
	if (d->month == 2 && d->day == 29 && !http_date_leap_year(d->year))
		return false;
	return d->hour <= 23 && d->minute <= 59 && d->second <= 60;
}

/* "Sun, 06 Nov 1994 08:49:37 GMT", after the day name. */
static bool http_date_imf_fixdate(struct http_date_cursor *c, struct http_date_fields *d)
{
	return http_date_literal(c, ", ") && http_date_digits(c, 2, &d->day) &&
	       http_date_literal(c, " ") &&
	       http_date_name(c, http_date_month_name, 12, &d->month) &&
	       http_date_literal(c, " ") && http_date_digits(c, 4, &d->year) &&
	       http_date_literal(c, " ") && http_date_time_of_day(c, d) &&
	       http_date_literal(c, " GMT");
}

/* "Sunday, 06-Nov-94 08:49:37 GMT", after the day name. The two-digit year is
 * the one in the 100 years ending 50 years after now's: never more than 50
 * years ahead (RFC 9110 section 5.6.7), and at the turn of a century "00"
 * is the coming year, not one 99 years ago. */
static bool http_date_rfc850(struct http_date_cursor *c, time_t now, struct http_date_fields *d)
{
	int current;

	if (!(http_date_literal(c, ", ") && http_date_digits(c, 2, &d->day) &&
	      http_date_literal(c, "-") && http_date_name(c, http_date_month_name, 12, &d->month) &&
	      http_date_literal(c, "-") && http_date_digits(c, 2, &d->year) &&
	      http_date_literal(c, " ") && http_date_time_of_day(c, d) &&
	      http_date_literal(c, " GMT")))
		return false;
	current = http_date_year_of(now);
	d->year += current - current % 100;
	if (d->year > current + 50)
		d->year -= 100;
	else if (d->year <= current - 50)
		d->year += 100;
	return true;
}

/* "Sun Nov  6 08:49:37 1994", after the day name; the day is two digits or
 * a space and one digit. */
static bool http_date_asctime(struct http_date_cursor *c, struct http_date_fields *d)
{
	if (!(http_date_literal(c, " ") && http_date_name(c, http_date_month_name, 12, &d->month) &&
	      http_date_literal(c, " ")))
		return false;
	if (c->p < c->end && *c->p == ' ') {
		c->p++;
		if (!http_date_digits(c, 1, &d->day))
			return false;
	} else if (!http_date_digits(c, 2, &d->day)) {
		return false;
	}
	return http_date_literal(c, " ") && http_date_time_of_day(c, d) &&
	       http_date_literal(c, " ") && http_date_digits(c, 4, &d->year);
}

int http_date_parse(const char *s, size_t len, time_t now, int64_t *when)
{
	struct http_date_cursor c = { s, s + len };
	struct http_date_fields d = { 0, 0, 0, 0, 0, 0 };
	int weekday;
	bool ok;

	if (http_date_name(&c, http_date_day_long, 7, &weekday))
		ok = http_date_rfc850(&c, now, &d);
	else if (http_date_name(&c, http_date_day_short, 7, &weekday))
		ok = c.p < c.end && *c.p == ',' ? http_date_imf_fixdate(&c, &d)
						: http_date_asctime(&c, &d);
	else
		return -1;
	if (!ok || c.p != c.end || !http_date_date_valid(&d))
		return -1;
	*when = http_date_days_from_epoch(d.year, d.month, d.day) * 86400 + d.hour * 3600 +
		d.minute * 60 + d.second;
	return 0;
}

void http_date_format(time_t t, char *out)
{
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 0)
		return;
	/* tm_wday counts from Sunday, the names from Monday */
	snprintf(out, HTTP_DATE_LEN + 1, "%s, %02d %s %04d %02d:%02d:%02d GMT",
		 http_date_day_short[(tm.tm_wday + 6) % 7], tm.tm_mday,
		 http_date_month_name[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
		 tm.tm_sec);
}

time_t http_date_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

const char *http_date_now(void)
{
	static char text[HTTP_DATE_LEN + 1] = "Thu, 01 Jan 1970 00:00:00 GMT";
	static time_t formatted = (time_t)-1;
	time_t now = http_date_clock();

	if (now != formatted) {
		/* a clock gmtime() cannot place keeps the last good date */
		http_date_format(now, text);
		formatted = now;
	}
	return text;
}
