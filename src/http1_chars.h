#ifndef RETRYPROXY_HTTP1_CHARS_H
#define RETRYPROXY_HTTP1_CHARS_H

/* The byte classes of RFC 9110 and 9112 grammar, shared by the head parser
 * (http1.c) and the chunked decoder (http1_chunked.c): one table lookup a
 * byte instead of a chain of comparisons. */

/* Byte classes, one bit each, looked up in http1_ctype. */
#define HTTP1_C_TCHAR 0x01   /* token character (RFC 9110 section 5.6.2) */
#define HTTP1_C_VALUE 0x02   /* field-vchar, obs-text, SP or HTAB: allowed in a field value */
#define HTTP1_C_TARGET 0x04  /* 0x21..0x7e: allowed in a request-target */
#define HTTP1_C_REGNAME 0x08 /* unreserved, sub-delims or '%': allowed in a reg-name */
#define HTTP1_C_HEX 0x10     /* hexadecimal digit */
#define HTTP1_C_QDTEXT 0x20  /* allowed unescaped inside a quoted-string */
#define HTTP1_C_SCHEME 0x40  /* allowed in a URI scheme after its first letter */

extern const unsigned char http1_ctype[256];

#define HTTP1_IS(c, class) ((http1_ctype[(unsigned char)(c)] & (class)) != 0)
#define HTTP1_IS_WS(c) ((c) == ' ' || (c) == '\t')
#define HTTP1_IS_DIGIT(c) ((unsigned char)((c) - '0') < 10)

#endif
