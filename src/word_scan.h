#ifndef RETRYPROXY_WORD_SCAN_H
#define RETRYPROXY_WORD_SCAN_H

#include <stdint.h>

/* Word-at-a-time tests, eight bytes per step, for scanners that look for
 * the first byte of a few kinds in a run of ordinary ones (the head
 * parser, the access log's escaping): a byte below n (n <= 0x80), a zero
 * byte, a byte with the high bit set. Exact as to whether such a byte
 * exists, which is all a scanner needs before it looks at the word byte
 * by byte; a flag may also be set above the first true one. */
#define WORD_ONES UINT64_C(0x0101010101010101)
#define WORD_HIGHS UINT64_C(0x8080808080808080)
#define WORD_HAS_LESS(x, n) (((x)-WORD_ONES * (n)) & ~(x)&WORD_HIGHS)
#define WORD_HAS_ZERO(x) WORD_HAS_LESS(x, 1)
/* a byte equal to c */
#define WORD_HAS_BYTE(x, c) WORD_HAS_ZERO((x) ^ (WORD_ONES * (c)))

#endif
