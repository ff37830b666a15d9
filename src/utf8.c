#include "utf8.h"

size_t utf8_char_length(const unsigned char *s, size_t len)
{
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0; /* a continuation byte, an overlong lead, or past U+10FFFF */
	/* the lead bytes whose second byte is narrower (RFC 3629 section 4) */
	if (s[0] == 0xe0)
		lo = 0xa0; /* no overlong three-byte forms */
	else if (s[0] == 0xed)
		hi = 0x9f; /* no surrogates */
	else if (s[0] == 0xf0)
		lo = 0x90; /* no overlong four-byte forms */
	else if (s[0] == 0xf4)
		hi = 0x8f; /* nothing past U+10FFFF */
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}
