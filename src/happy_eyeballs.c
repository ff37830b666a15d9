#include "happy_eyeballs.h"

#include <stdbool.h>

uint64_t happy_eyeballs_delay_ms(uint64_t connect_timeout_ms)
{
	uint64_t delay = HAPPY_EYEBALLS_DELAY_MS;

	if (delay > connect_timeout_ms / 2)
		delay = connect_timeout_ms / 2;
	if (delay < HAPPY_EYEBALLS_MIN_DELAY_MS)
		delay = HAPPY_EYEBALLS_MIN_DELAY_MS;
	return delay;
}

/* The next index from `from` on whose family is (or, with same false, is
 * not) family; n for none. */
static size_t happy_eyeballs_next(const int *families, size_t n, size_t from, int family, bool same)
{
	while (from < n && (families[from] == family) != same)
		from++;
	return from;
}

void happy_eyeballs_order(const int *families, size_t n, unsigned shift, size_t *order)
{
	size_t first;
	size_t other;
	size_t start;
	size_t k;
	bool take_first = true;

	if (n == 0)
		return;
	/* every family but the first counts as "the other" one: a resolver
	 * asked for TCP gives IPv6 and IPv4, nothing else */
	first = 0;
	other = happy_eyeballs_next(families, n, 0, families[0], false);
	start = shift % n;
	for (k = 0; k < n; k++) {
		size_t pick;

		if (other == n || (take_first && first < n)) {
			pick = first;
			first = happy_eyeballs_next(families, n, first + 1, families[0], true);
		} else {
			pick = other;
			other = happy_eyeballs_next(families, n, other + 1, families[0], false);
		}
		take_first = !take_first;
		/* the k-th of the interleaved order goes k - start places in */
		order[(k + n - start) % n] = pick;
	}
}
