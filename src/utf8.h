#ifndef RETRYPROXY_UTF8_H
#define RETRYPROXY_UTF8_H

#include <stddef.h>

/* The length of the well-formed UTF-8 character at s (1 to 4 bytes, RFC
 * 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or 0 when
 * the bytes there are not one. len: the bytes available at s, at least 1. */
size_t utf8_char_length(const unsigned char *s, size_t len);

#endif
