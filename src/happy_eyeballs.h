#ifndef RETRYPROXY_HAPPY_EYEBALLS_H
#define RETRYPROXY_HAPPY_EYEBALLS_H

/*
 * The order and the pace of connection attempts to the addresses a name
 * resolves to, after RFC 8305 (Happy Eyeballs v2): the families alternate,
 * and an attempt that neither connects nor fails within a short delay gets
 * the next address started beside it, so an address that silently drops
 * SYNs costs that delay, not the whole connect timeout. Pure: no clock, no
 * I/O, no allocation.
 */

#include <stddef.h>
#include <stdint.h>

/* RFC 8305's recommended Connection Attempt Delay. */
#define HAPPY_EYEBALLS_DELAY_MS 250
/* Its floor: never start attempts faster than this. */
#define HAPPY_EYEBALLS_MIN_DELAY_MS 10

/* How long an attempt may go unanswered before the next address is started
 * beside it: HAPPY_EYEBALLS_DELAY_MS, but at most half of connect_timeout
 * (so a second address still gets half of it), and never below
 * HAPPY_EYEBALLS_MIN_DELAY_MS. */
uint64_t happy_eyeballs_delay_ms(uint64_t connect_timeout_ms);

/* The order to try n addresses in, given their families in the resolver's
 * order: the resolver's first family first, then the families alternate,
 * each keeping the resolver's order within it (RFC 8305 section 4); that
 * order is then turned round to start shift places in (modulo n), so that
 * tries and probes that pass a growing shift start at each address in turn.
 * order[i] is the resolver's index of the i-th address to try. */
void happy_eyeballs_order(const int *families, size_t n, unsigned shift, size_t *order);

#endif
