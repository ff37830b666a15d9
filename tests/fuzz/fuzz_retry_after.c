/* The values an upstream's response sets the retry wait and verdict with:
 * Retry-After (delta-seconds or an HTTP-date in any of its three formats),
 * retry-after-ms and x-should-retry, and the HTTP-date parser under them
 * (also what Date and Last-Modified are read with for a resume). Each is
 * checked against a reference of its own written the slow way: an
 * HTTP-date matched position by position against the format's picture and
 * placed in time by timegm(), an RFC 850 year by counting centuries; and
 * every date that reads, formatted again, reads as the same second.
 *
 * The first input byte picks the clock (near today, anywhere from 1970 to
 * past 9999, or at the turn of a year), the next eight set it; the rest is
 * the field value. */

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_date.h"
#include "retry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fuzz_day_short[] = { "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun" };
static const char *const fuzz_day_long[] = { "Monday", "Tuesday",  "Wednesday", "Thursday",
					     "Friday", "Saturday", "Sunday" };
static const char *const fuzz_month[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

/* Is s[0..len) one of the count names, exactly? */
static bool fuzz_one_of(const char *s, size_t len, const char *const *names, int count, int *index)
{
	for (int i = 0; i < count; i++)
		if (strlen(names[i]) == len && memcmp(s, names[i], len) == 0) {
			*index = i;
			return true;
		}
	return false;
}

/* Does s[0..len) fit picture, where 'D' is a digit, '_' a digit or a
 * space, '*' any byte (of a day or month name, which the caller checks),
 * and any other byte itself? */
static bool fuzz_picture(const char *s, size_t len, const char *picture)
{
	if (len != strlen(picture))
		return false;
	for (size_t i = 0; i < len; i++) {
		bool digit = s[i] >= '0' && s[i] <= '9';
		bool fits;

		switch (picture[i]) {
		case 'D':
			fits = digit;
			break;
		case '_':
			fits = digit || s[i] == ' ';
			break;
		case '*':
			fits = true;
			break;
		default:
			fits = s[i] == picture[i];
		}
		if (!fits)
			return false;
	}
	return true;
}

/* The number in the digits (and a leading space) at s[0..n). */
static int fuzz_number(const char *s, size_t n)
{
	int v = 0;

	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ')
			v = v * 10 + (s[i] - '0');
	return v;
}

static bool fuzz_leap(int64_t y)
{
	return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* The reference reading of an HTTP-date: 0 and *when, or -1. */
static int fuzz_ref_date(const char *s, size_t len, time_t now, int64_t *when)
{
	static const int days_in[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int index, day, month, hour, minute, second;
	int64_t year;
	const char *rest;
	size_t rest_len;
	struct tm tm;
	time_t t;

	if (len >= 3 && fuzz_one_of(s, 3, fuzz_day_short, 7, &index) &&
	    fuzz_picture(s, len, "***, DD *** DDDD DD:DD:DD GMT") &&
	    fuzz_one_of(s + 8, 3, fuzz_month, 12, &month)) {
		/* IMF-fixdate */
		day = fuzz_number(s + 5, 2);
		year = fuzz_number(s + 12, 4);
		hour = fuzz_number(s + 17, 2);
		minute = fuzz_number(s + 20, 2);
		second = fuzz_number(s + 23, 2);
	} else if (len >= 3 && fuzz_one_of(s, 3, fuzz_day_short, 7, &index) &&
		   fuzz_picture(s, len, "*** *** _D DD:DD:DD DDDD") &&
		   fuzz_one_of(s + 4, 3, fuzz_month, 12, &month)) {
		/* asctime: the day is two digits or a space and one */
		day = fuzz_number(s + 8, 2);
		hour = fuzz_number(s + 11, 2);
		minute = fuzz_number(s + 14, 2);
		second = fuzz_number(s + 17, 2);
		year = fuzz_number(s + 20, 4);
	} else {
		/* RFC 850: a long day name, then a fixed picture */
		size_t name = 0;
		int64_t current;
		int yy;

		while (name < len && s[name] != ',')
			name++;
		if (!fuzz_one_of(s, name, fuzz_day_long, 7, &index))
			return -1;
		rest = s + name;
		rest_len = len - name;
		if (!fuzz_picture(rest, rest_len, ", DD-***-DD DD:DD:DD GMT") ||
		    !fuzz_one_of(rest + 5, 3, fuzz_month, 12, &month))
			return -1;
		day = fuzz_number(rest + 2, 2);
		yy = fuzz_number(rest + 9, 2);
		hour = fuzz_number(rest + 12, 2);
		minute = fuzz_number(rest + 15, 2);
		second = fuzz_number(rest + 18, 2);
		/* the year ending in yy among the 100 up to 50 after now's,
		 * now's year taken within 1970..9999 */
		if (now <= 0) {
			current = 1970;
		} else {
			if (gmtime_r(&now, &tm) == NULL)
				abort();
			current = (int64_t)tm.tm_year + 1900;
			if (current > 9999)
				current = 9999;
		}
		year = current - 49;
		while (year % 100 != yy)
			year++;
	}
	month += 1;
	if (day < 1 || day > days_in[month - 1] + (month == 2 && fuzz_leap(year)) || hour > 23 ||
	    minute > 59 || second > 60)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = (int)(year - 1900);
	tm.tm_mon = month - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = minute;
	tm.tm_sec = second; /* 60, a leap second, is the next minute's 0 */
	t = timegm(&tm);
	*when = (int64_t)t;
	return 0;
}

/* Trim SP and HTAB from both ends of s[0..*len); returns the start. */
static const char *fuzz_trim(const char *s, size_t *len)
{
	while (*len > 0 && (s[0] == ' ' || s[0] == '\t'))
		s++, (*len)--;
	while (*len > 0 && (s[*len - 1] == ' ' || s[*len - 1] == '\t'))
		(*len)--;
	return s;
}

/* The value of digits s[0..len) capped at cap (in 128 bits, so that no
 * step before the cap can wrap). */
static uint64_t fuzz_capped(const char *s, size_t len, uint64_t cap)
{
	unsigned __int128 v = 0;

	for (size_t i = 0; i < len; i++) {
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > cap)
			return cap;
	}
	return (uint64_t)v;
}

static bool fuzz_all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Reference Retry-After: 0 and *wait_ms, or -1. */
static int fuzz_ref_retry_after(const char *s, size_t len, int64_t now_ms, uint64_t *wait_ms)
{
	/* the second now_ms falls in */
	time_t now = (time_t)(now_ms / 1000 - (now_ms % 1000 < 0));
	int64_t when;
	__int128 wait;

	s = fuzz_trim(s, &len);
	if (len == 0)
		return -1;
	if (s[0] >= '0' && s[0] <= '9') {
		if (!fuzz_all_digits(s, len))
			return -1;
		/* exact, saturating past 64 bits of milliseconds */
		uint64_t seconds = fuzz_capped(s, len, UINT64_MAX / 1000 + 1);

		*wait_ms = seconds > UINT64_MAX / 1000 ? RETRY_AFTER_SATURATED_MS : seconds * 1000;
		return 0;
	}
	if (fuzz_ref_date(s, len, now, &when) < 0)
		return -1;
	/* a date is within years 0..9999: its wait fits, exact */
	wait = (__int128)when * 1000 - now_ms;
	*wait_ms = wait <= 0 ? 0 : (uint64_t)wait;
	return 0;
}

/* Reference retry-after-ms: digits, maybe a '.' and more digits. */
static int fuzz_ref_retry_after_ms(const char *s, size_t len, uint64_t *wait_ms)
{
	const uint64_t max_ms = RETRY_AFTER_SATURATED_MS;
	const char *dot;
	size_t whole;
	uint64_t ms;

	s = fuzz_trim(s, &len);
	dot = memchr(s, '.', len);
	whole = dot != NULL ? (size_t)(dot - s) : len;
	if (whole == 0 || !fuzz_all_digits(s, whole))
		return -1;
	ms = fuzz_capped(s, whole, max_ms);
	if (dot != NULL) {
		size_t frac = len - whole - 1;

		if (frac == 0 || !fuzz_all_digits(dot + 1, frac))
			return -1;
		for (size_t i = 0; i < frac; i++)
			if (dot[1 + i] != '0') {
				/* at least as long as asked, saturated as it is */
				if (ms < max_ms)
					ms++;
				break;
			}
	}
	*wait_ms = ms;
	return 0;
}

/* Reference x-should-retry: a false element wins, then a true one. */
static enum retry_should fuzz_ref_should(const char *s, size_t len)
{
	bool yes = false;
	size_t start = 0;

	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != ',')
			continue;
		size_t n = i - start;
		const char *e = fuzz_trim(s + start, &n);
		char low[6];

		if (n == 4 || n == 5) {
			for (size_t j = 0; j < n; j++)
				low[j] = (char)(e[j] >= 'A' && e[j] <= 'Z' ? e[j] + 32 : e[j]);
			if (n == 5 && memcmp(low, "false", 5) == 0)
				return RETRY_SHOULD_FALSE;
			if (n == 4 && memcmp(low, "true", 4) == 0)
				yes = true;
		}
		start = i + 1;
	}
	return yes ? RETRY_SHOULD_TRUE : RETRY_SHOULD_UNSET;
}

/* Second t (year 0 to 9999) formatted, then read back. */
static void fuzz_round_trip(int64_t t)
{
	char text[HTTP_DATE_LEN + 1];
	int64_t back;

	if (t < -62167219200 || t > 253402300799)
		return;
	memset(text, 0, sizeof(text));
	http_date_format((time_t)t, text);
	if (strlen(text) != HTTP_DATE_LEN || http_date_parse(text, HTTP_DATE_LEN, 0, &back) != 0 ||
	    back != t || fuzz_ref_date(text, HTTP_DATE_LEN, 0, &back) != 0 || back != t)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint64_t untouched = UINT64_C(0xdeadbeef);
	uint64_t raw;
	int64_t now_ms;
	time_t now;
	const char *value;
	size_t len;
	int64_t when, ref_when;
	uint64_t wait, ref_wait;
	int r, ref;

	if (size < 9)
		return 0;
	memcpy(&raw, data + 1, 8);
	switch (data[0] % 3) {
	case 0: /* 2020 to 2220 */
		now_ms = INT64_C(1577836800000) + (int64_t)(raw % (UINT64_C(200) * 31556952000));
		break;
	case 1: /* a clock anywhere: before 1970, past 9999 */
		now_ms = (int64_t)(raw % (UINT64_C(1) << 56)) - (INT64_C(1) << 52);
		break;
	default: { /* within a day of a new year's midnight, 1970 to 9999 */
		struct tm tm = { .tm_mday = 1 };

		tm.tm_year = (int)(raw % 8030) + 70;
		now_ms =
			(int64_t)timegm(&tm) * 1000 + (int64_t)((raw >> 16) % 172800000) - 86400000;
		break;
	}
	}
	now = (time_t)(now_ms / 1000 - (now_ms % 1000 < 0));
	value = (const char *)data + 9;
	len = size - 9;

	r = http_date_parse(value, len, now, &when);
	ref = fuzz_ref_date(value, len, now, &ref_when);
	if (r != ref || (r == 0 && when != ref_when))
		abort();
	if (r == 0)
		fuzz_round_trip(when);

	wait = untouched;
	r = retry_after_parse(value, len, now_ms, &wait);
	ref = fuzz_ref_retry_after(value, len, now_ms, &ref_wait);
	if (r != ref || (r == 0 ? wait != ref_wait : wait != untouched))
		abort();

	wait = untouched;
	r = retry_after_ms_parse(value, len, &wait);
	ref = fuzz_ref_retry_after_ms(value, len, &ref_wait);
	if (r != ref || (r == 0 ? wait != ref_wait : wait != untouched))
		abort();

	if (retry_should_parse(value, len) != fuzz_ref_should(value, len))
		abort();

	/* any second from year 0 to 9999 formats and reads back */
	fuzz_round_trip((int64_t)(raw % UINT64_C(315569520000)) - INT64_C(62167219200));
	return 0;
}
