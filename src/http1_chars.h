#ifndef RETRYPROXY_HTTP1_CHARS_H
#define RETRYPROXY_HTTP1_CHARS_H

#include <stdbool.h>
#include <stddef.h>

/* The byte classes of RFC 9110 and 9112 grammar, shared by the head parser
 * (http1.c), the target grammar (http1_target.c) and the chunked decoder
 * (http1_chunked.c): one table lookup a byte instead of a chain of
 * comparisons; and case folding for names. */

/* Byte classes, one bit each, looked up in http1_ctype. */
#define HTTP1_C_TCHAR 0x01	/* token character (RFC 9110 section 5.6.2) */
#define HTTP1_C_VALUE 0x02	/* field-vchar, obs-text, SP or HTAB: allowed in a field value */
#define HTTP1_C_TARGET 0x04	/* 0x21..0x7e but backslash: allowed in a request-target */
#define HTTP1_C_REGNAME 0x08	/* unreserved, sub-delims or '%': allowed in a reg-name */
#define HTTP1_C_HEX 0x10	/* hexadecimal digit */
#define HTTP1_C_QDTEXT 0x20	/* allowed unescaped inside a quoted-string */
#define HTTP1_C_UNRESERVED 0x40 /* unreserved (RFC 3986 section 2.3): plain host names */

extern const unsigned char http1_ctype[256];

#define HTTP1_IS(c, class) ((http1_ctype[(unsigned char)(c)] & (class)) != 0)
#define HTTP1_IS_WS(c) ((c) == ' ' || (c) == '\t')
#define HTTP1_IS_DIGIT(c) ((unsigned char)((c) - '0') < 10)
/* A byte that ends the word after a request-target: whitespace, a control
 * byte or DEL. */
#define HTTP1_VERSION_WORD_END(c) ((unsigned char)(c) <= ' ' || (unsigned char)(c) == 0x7f)

/* The lower-case form of an ASCII letter, other bytes unchanged. */
static inline unsigned char http1_lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* Case-insensitive equality with a lower-case literal, which only s needs
 * folding for. */
static inline bool http1_equal_lower(const char *s, size_t len, const char *lit, size_t lit_len)
{
	if (len != lit_len)
		return false;
	for (size_t i = 0; i < len; i++)
		if (http1_lower((unsigned char)s[i]) != (unsigned char)lit[i])
			return false;
	return true;
}

#define HTTP1_IS_LIT(s, len, lit) http1_equal_lower(s, len, lit, sizeof(lit) - 1)

#endif
