#include "retry.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "http_date.h"

/* Rotate left; k is always in 1..63 here. */
static uint64_t retry_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* One splitmix64 step: spreads a counter into well-mixed words, which is how
 * xoshiro wants a single seed turned into its four words of state. */
static uint64_t retry_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

void retry_rng_seed_with(struct retry_rng *rng, uint64_t seed)
{
	for (size_t i = 0; i < 4; i++)
		rng->s[i] = retry_splitmix64(&seed);
}

void retry_rng_seed(struct retry_rng *rng)
{
	struct timespec real = { 0, 0 };
	struct timespec mono = { 0, 0 };
	uint64_t mix;
	ssize_t got;

	do
		got = getrandom(rng->s, sizeof(rng->s), 0);
	while (got < 0 && errno == EINTR);
	if (got == (ssize_t)sizeof(rng->s) && (rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]) != 0)
		return;
	/* No kernel randomness (old kernel, seccomp): jitter only has to keep
	 * clients from retrying in step, so anything that differs between
	 * processes and runs will do. */
	clock_gettime(CLOCK_REALTIME, &real);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	mix = (uint64_t)real.tv_sec * 1000000007u ^ (uint64_t)real.tv_nsec ^
	      retry_rotl((uint64_t)mono.tv_nsec, 32) ^ retry_rotl((uint64_t)getpid(), 48) ^
	      (uint64_t)(uintptr_t)rng;
	retry_rng_seed_with(rng, mix);
}

uint64_t retry_rng_next(struct retry_rng *rng)
{
	uint64_t *s = rng->s;
	uint64_t result = retry_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = retry_rotl(s[3], 45);
	return result;
}

uint64_t retry_rng_uniform(struct retry_rng *rng, uint64_t max)
{
	uint64_t range;
	uint64_t reject_below;
	uint64_t x;

	if (max == UINT64_MAX)
		return retry_rng_next(rng);
	range = max + 1;
	/* 2^64 mod range: draws below it are the incomplete last round of
	 * residues, and rejecting them leaves every residue equally likely. */
	reject_below = (0 - range) % range;
	do
		x = retry_rng_next(rng);
	while (x < reject_below);
	return x % range;
}

uint64_t retry_backoff_base_ms(const struct retry_policy *policy, unsigned n)
{
	double multiplier = policy->multiplier;
	double base;
	double rounded;
	uint64_t ms;

	if (policy->initial_backoff_ms == 0)
		return 0; /* 0 x inf would be NaN for a huge power */
	if (!(multiplier >= 1.0))
		multiplier = 1.0; /* config guarantees >= 1; this also stops NaN */
	/* In double the power saturates to +inf instead of wrapping, and the
	 * comparison below then caps it. */
	base = (double)policy->initial_backoff_ms * pow(multiplier, (double)n);
	if (!(base < (double)policy->max_backoff_ms))
		return policy->max_backoff_ms;
	rounded = floor(base + 0.5);
	/* base < max_backoff <= 2^64, so rounded fits in 64 bits; the double
	 * form of max_backoff may have rounded up, hence the integer min. */
	ms = (uint64_t)rounded;
	return ms < policy->max_backoff_ms ? ms : policy->max_backoff_ms;
}

struct retry_wait_range retry_wait_range(const struct retry_policy *policy, unsigned n)
{
	uint64_t base = retry_backoff_base_ms(policy, n);
	struct retry_wait_range range = { base, base, 0 };
	uint64_t hi;

	if (policy->jitter_full) {
		range.lo_ms = 0;
		range.spread_ms = base;
		return range;
	}
	if (base >= policy->max_backoff_ms)
		return range; /* at the cap already: jitter cannot add to it */
	hi = base + policy->jitter_ms;
	if (hi < base)
		hi = UINT64_MAX; /* wrapped */
	range.hi_ms = hi < policy->max_backoff_ms ? hi : policy->max_backoff_ms;
	range.spread_ms = policy->jitter_ms;
	return range;
}

uint64_t retry_backoff_ms(const struct retry_policy *policy, unsigned n, struct retry_rng *rng)
{
	struct retry_wait_range range = retry_wait_range(policy, n);
	uint64_t wait;

	if (range.lo_ms == range.hi_ms)
		return range.lo_ms;
	wait = range.lo_ms + retry_rng_uniform(rng, range.spread_ms);
	if (wait < range.lo_ms)
		wait = UINT64_MAX; /* wrapped */
	/* the SPEC's min(backoff + uniform(0, jitter), max_backoff): the cap
	 * takes every draw past it, so the range is cut, not rescaled */
	return wait < range.hi_ms ? wait : range.hi_ms;
}

const char *retry_cause_name(enum retry_cause cause)
{
	switch (cause) {
	case RETRY_CAUSE_STATUS:
		return "status";
	case RETRY_CAUSE_CONNECT:
		return "connect";
	case RETRY_CAUSE_RESET:
		return "reset";
	case RETRY_CAUSE_TIMEOUT:
		return "timeout";
	}
	return "unknown";
}

bool retry_on_status(const struct retry_policy *policy, int status)
{
	if (status < 100 || status > 599)
		return false;
	if ((policy->on & RETRY_ON_5XX) && status >= 500)
		return true;
	return (policy->on_codes[status / 8] & (1u << (status % 8))) != 0;
}

bool retry_on_failure(const struct retry_policy *policy, enum retry_cause cause)
{
	switch (cause) {
	case RETRY_CAUSE_CONNECT:
		return (policy->on & RETRY_ON_CONNECT_FAILURE) != 0;
	case RETRY_CAUSE_RESET:
		return (policy->on & RETRY_ON_RESET) != 0;
	case RETRY_CAUSE_TIMEOUT:
		return (policy->on & RETRY_ON_TIMEOUT) != 0;
	case RETRY_CAUSE_STATUS:
		break;
	}
	return false;
}

/* Trim SP/HTAB from both ends of [*value, *end). */
static void retry_trim(const char **value, const char **end)
{
	while (*value < *end && (**value == ' ' || **value == '\t'))
		(*value)++;
	while (*end > *value && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
		(*end)--;
}

/* Does [p, end) equal word, ignoring ASCII case? word is lower case. */
static bool retry_word_equals(const char *p, const char *end, const char *word)
{
	size_t len = strlen(word);

	if ((size_t)(end - p) != len)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((p[i] >= 'A' && p[i] <= 'Z' ? p[i] + ('a' - 'A') : p[i]) != word[i])
			return false;
	return true;
}

enum retry_should retry_should_parse(const char *value, size_t len)
{
	enum retry_should should = RETRY_SHOULD_UNSET;
	const char *end;

	if (len == 0)
		return RETRY_SHOULD_UNSET; /* value may be NULL */
	end = value + len;
	/* a line may hold several copies, comma-separated, as a recipient may
	 * join repeated lines into one (RFC 9110 section 5.3): each element is
	 * read as a copy of its own, and a false in any wins */
	while (value < end) {
		const char *comma = memchr(value, ',', (size_t)(end - value));
		const char *element_end = comma != NULL ? comma : end;
		const char *element = value;

		retry_trim(&element, &element_end);
		if (retry_word_equals(element, element_end, "false"))
			return RETRY_SHOULD_FALSE;
		if (retry_word_equals(element, element_end, "true"))
			should = RETRY_SHOULD_TRUE;
		value = comma != NULL ? comma + 1 : end;
	}
	return should;
}

bool retry_response_retryable(const struct retry_policy *policy, int status,
			      enum retry_should should)
{
	if (should == RETRY_SHOULD_FALSE)
		return false;
	if (retry_on_status(policy, status))
		return true;
	/* a success or a redirect is an answer, whatever the header says */
	return should == RETRY_SHOULD_TRUE && status >= 400 && status <= 599;
}

const char *try_outcome_name(enum try_outcome outcome)
{
	switch (outcome) {
	case TRY_RESPONSE:
		return "response";
	case TRY_DNS:
		return "dns";
	case TRY_REFUSED:
		return "refused";
	case TRY_CONNECT_TIMEOUT:
		return "connect-timeout";
	case TRY_TLS:
		return "tls";
	case TRY_TLS_VERIFY:
		return "tls-verify";
	case TRY_STALE:
		return "stale";
	case TRY_RESET:
		return "reset";
	case TRY_TIMEOUT:
		return "timeout";
	case TRY_MALFORMED:
		return "malformed";
	case TRY_FORBIDDEN:
		return "forbidden";
	}
	return "unknown";
}

const char *try_outcome_error_kind(enum try_outcome outcome)
{
	switch (outcome) {
	case TRY_RESPONSE:
		break;
	case TRY_DNS:
		return "dns";
	case TRY_REFUSED:
	case TRY_CONNECT_TIMEOUT:
		return "connect";
	case TRY_FORBIDDEN:
		break; /* the proxy refused it: no upstream failed */
	case TRY_TLS:
	case TRY_TLS_VERIFY:
		return "tls";
	case TRY_STALE:
	case TRY_RESET:
		return "reset";
	case TRY_TIMEOUT:
		return "timeout";
	case TRY_MALFORMED:
		return "malformed";
	}
	return NULL;
}

enum retry_cause try_outcome_cause(enum try_outcome outcome)
{
	switch (outcome) {
	case TRY_RESPONSE:
		return RETRY_CAUSE_STATUS;
	case TRY_DNS:
	case TRY_REFUSED:
	case TRY_CONNECT_TIMEOUT:
	case TRY_TLS:
	case TRY_TLS_VERIFY:
	case TRY_FORBIDDEN:
		return RETRY_CAUSE_CONNECT;
	case TRY_TIMEOUT:
		return RETRY_CAUSE_TIMEOUT;
	case TRY_STALE:
	case TRY_RESET:
	case TRY_MALFORMED:
		break;
	}
	/* a malformed response came from the connection, like a reset */
	return RETRY_CAUSE_RESET;
}

const char *retry_give_up_name(enum retry_give_up reason)
{
	switch (reason) {
	case RETRY_GIVE_UP_NONE:
		break;
	case RETRY_GIVE_UP_ATTEMPTS:
		return "attempts";
	case RETRY_GIVE_UP_DEADLINE:
		return "deadline";
	case RETRY_GIVE_UP_NOT_IDEMPOTENT:
		return "not_idempotent";
	case RETRY_GIVE_UP_BODY_TOO_LARGE:
		return "body_too_large";
	case RETRY_GIVE_UP_CLIENT_GONE:
		return "client_gone";
	case RETRY_GIVE_UP_BUDGET:
		return "budget";
	case RETRY_GIVE_UP_UPSTREAM_BUSY:
		return "upstream_busy";
	case RETRY_GIVE_UP_UPSTREAM_DOWN:
		return "upstream_down";
	case RETRY_GIVE_UP_UPSTREAM_HTTP10:
		return "upstream_http10";
	}
	return NULL;
}

bool retry_within_deadline(const struct retry_policy *policy, uint64_t elapsed_ms, uint64_t wait_ms)
{
	/* elapsed + wait <= deadline, without the sum wrapping */
	return wait_ms <= policy->deadline_ms && elapsed_ms <= policy->deadline_ms - wait_ms;
}

/* Did the request provably never reach the upstream: the try ended before
 * any byte of it was written? */
static bool retry_never_sent(const struct retry_facts *facts)
{
	switch (facts->outcome) {
	case TRY_DNS:
	case TRY_REFUSED:
	case TRY_CONNECT_TIMEOUT:
	case TRY_TLS:
	case TRY_TLS_VERIFY:
	case TRY_FORBIDDEN:
		return true;
	case TRY_TIMEOUT:
		return facts->connecting;
	case TRY_RESPONSE:
	case TRY_STALE:
	case TRY_RESET:
	case TRY_MALFORMED:
		break;
	}
	return false;
}

/* Is this a stale pooled connection that may be replaced at once? A pooled
 * connection the upstream had already closed says nothing about the
 * upstream, so neither retry.on, backoff nor the budget apply; only
 * idempotent requests use pooled connections, so this never repeats an
 * unsafe one, nor a body only chunked to an upstream that answered
 * HTTP/1.0 (its 408 on a kept-alive connection says so). */
bool retry_stale_replaceable(const struct retry_policy *policy, const struct retry_facts *facts)
{
	return facts->outcome == TRY_STALE && facts->idempotent && !facts->body_streamed &&
	       !facts->body_chunked_only && facts->attempts < policy->max_attempts &&
	       facts->elapsed_ms < policy->deadline_ms;
}

/* A verdict that gives up for reason. */
static struct retry_verdict retry_give_up(struct retry_verdict verdict, enum retry_give_up reason)
{
	verdict.kind = RETRY_VERDICT_GIVE_UP;
	verdict.reason = reason;
	return verdict;
}

struct retry_verdict retry_decide(const struct retry_policy *policy,
				  const struct retry_facts *facts, struct retry_rng *rng)
{
	struct retry_verdict verdict = {
		.kind = RETRY_VERDICT_FINAL,
		.reason = RETRY_GIVE_UP_NONE,
		.cause = try_outcome_cause(facts->outcome),
	};
	unsigned waited;
	uint64_t backoff;
	uint64_t wait;
	bool asked = false;
	bool hold;

	if (facts->outcome == TRY_RESPONSE &&
	    !retry_response_retryable(policy, facts->status, facts->should_retry))
		return verdict;
	/* a tunnel's bytes cannot be replayed, and a response the client has
	 * started to receive cannot be replaced */
	if (facts->is_connect || facts->response_started)
		return verdict;
	/* before retry.on: a stale connection is replaced whatever retry.on
	 * says, since its failure is not the upstream's */
	if (retry_stale_replaceable(policy, facts)) {
		verdict.kind = RETRY_VERDICT_RETRY;
		verdict.immediate = true;
		return verdict;
	}
	if (facts->outcome != TRY_RESPONSE && !retry_on_failure(policy, verdict.cause))
		return verdict;
	/* a certificate that fails verification is not a transient failure,
	 * nor is a destination the proxy will not connect to */
	if (facts->outcome == TRY_TLS_VERIFY || facts->outcome == TRY_FORBIDDEN)
		return verdict;
	/* a request that may have reached the upstream is repeated only when
	 * repeating it is safe; one whose safety was in a body too large to
	 * read was stopped by the body's size (with retries to make) */
	if (!facts->idempotent && !retry_never_sent(facts))
		return retry_give_up(verdict, facts->body_unread && policy->max_attempts > 1
						      ? RETRY_GIVE_UP_BODY_TOO_LARGE
						      : RETRY_GIVE_UP_NOT_IDEMPOTENT);
	/* a body not kept because no retry could follow it (max_attempts: 1)
	 * stopped nothing: the attempts did */
	if (facts->body_streamed && !facts->body_too_large &&
	    facts->attempts >= policy->max_attempts)
		return retry_give_up(verdict, RETRY_GIVE_UP_ATTEMPTS);
	if (facts->body_streamed)
		return retry_give_up(verdict, facts->body_too_large ? RETRY_GIVE_UP_BODY_TOO_LARGE
								    : RETRY_GIVE_UP_NOT_IDEMPOTENT);
	if (facts->attempts >= policy->max_attempts)
		return retry_give_up(verdict, RETRY_GIVE_UP_ATTEMPTS);
	/* SPEC: n = 0 for the first wait; a hedge or a stale connection's
	 * replacement is a try but followed no wait, so it does not count */
	waited = facts->attempts > facts->unwaited ? facts->attempts - facts->unwaited : 1;
	backoff = retry_backoff_ms(policy, waited - 1, rng);
	wait = backoff;
	if (facts->outcome == TRY_RESPONSE && policy->honor_retry_after &&
	    facts->retry_after_ms > wait) {
		wait = facts->retry_after_ms;
		asked = true;
	}
	/* SPEC: a wait that would start the next try after the deadline means
	 * answering now */
	if (!retry_within_deadline(policy, facts->elapsed_ms, wait))
		return retry_give_up(verdict, RETRY_GIVE_UP_DEADLINE);
	/* RFC 9112 section 6.1: no Transfer-Encoding to a server not known to
	 * handle HTTP/1.1, and an answer in HTTP/1.0 says it may not; a body
	 * the exchange cannot send with Content-Length is not sent again.
	 * After attempts and deadline, which stop a retry anyway */
	if (facts->body_chunked_only)
		return retry_give_up(verdict, RETRY_GIVE_UP_UPSTREAM_HTTP10);
	/* health.hold: false answers a request for a down upstream at once:
	 * no wait ends in a try while it stays down, and a backoff only
	 * delays the 502 (SPEC "Upstream health") */
	if (facts->upstream_down && !facts->hold_when_down)
		return retry_give_up(verdict, RETRY_GIVE_UP_UPSTREAM_DOWN);
	/* after attempts and deadline, so that holding never outlasts them. A
	 * response that asked for a longer wait than the backoff gets it: a
	 * probe that connects sooner does not say the origin wants to be asked
	 * again (the retry's try is held then if the upstream is still down).
	 * A held retry needs neither a pending place nor the budget */
	hold = facts->upstream_down && !asked;
	if (!hold) {
		/* each waiting retry keeps its request body and last response
		 * in memory: past the cap, answer now instead of piling up */
		if (facts->pending_retries >= facts->max_pending_retries)
			return retry_give_up(verdict, RETRY_GIVE_UP_BUDGET);
		/* the caller spends the budget only on a RETRY that is not
		 * immediate */
		if (!facts->budget_allows)
			return retry_give_up(verdict, RETRY_GIVE_UP_BUDGET);
	}
	/* a retryable response is kept whole until the next try has done
	 * better; one announced larger than that buffer is passed on. Asked
	 * only now: a request that would not be retried anyway (unsafe, out
	 * of attempts, time or budget) gives that reason, not the response's
	 * size */
	if (facts->outcome == TRY_RESPONSE && facts->response_too_large) {
		verdict.too_large = true;
		return verdict;
	}
	if (hold) {
		verdict.kind = RETRY_VERDICT_HOLD;
		return verdict;
	}
	verdict.kind = RETRY_VERDICT_RETRY;
	verdict.wait_ms = wait;
	verdict.asked = asked;
	verdict.backoff_ms = backoff;
	return verdict;
}

/* Is the method exactly GET or HEAD? Methods are case-sensitive. */
static bool retry_hedge_method(const char *method, size_t len)
{
	return (len == 3 && memcmp(method, "GET", 3) == 0) ||
	       (len == 4 && memcmp(method, "HEAD", 4) == 0);
}

bool retry_hedge_allowed(const struct retry_policy *policy, const struct hedge_policy *hedge,
			 const struct hedge_facts *facts)
{
	if (hedge->after_ms == 0)
		return false;
	/* two copies of the request reach the upstream at once: only a read
	 * that is safe by its method may run twice, never one made safe by a
	 * precondition or key (the two copies would race for it) nor one with
	 * a body to send twice. Nor one that carries a key anyway: a server
	 * that honours it answers a copy of a request still in progress 409,
	 * and that quick answer would win the race */
	if (!retry_hedge_method(facts->method, facts->method_len) || !facts->idempotent ||
	    facts->conditional || facts->body || facts->keyed)
		return false;
	/* the first head decides: it streams, or its retry waits for the
	 * others; a new try could then only be wasted */
	if (facts->head_seen || facts->response_started)
		return false;
	if (facts->in_flight >= 1 + (uint64_t)hedge->max)
		return false;
	if (facts->attempts >= policy->max_attempts || facts->elapsed_ms >= policy->deadline_ms)
		return false;
	return facts->budget_allows;
}

/* digits * 10 + digit, saturating at RETRY_AFTER_SATURATED_MS. */
static uint64_t retry_after_digit(uint64_t value, char digit)
{
	uint64_t d = (uint64_t)(digit - '0');

	if (value > (RETRY_AFTER_SATURATED_MS - d) / 10)
		return RETRY_AFTER_SATURATED_MS;
	return value * 10 + d;
}

int retry_after_parse(const char *value, size_t len, int64_t now_ms, uint64_t *wait_ms)
{
	/* floor, for a clock before 1970 too */
	time_t now = (time_t)(now_ms >= 0 ? now_ms / 1000 : -((-now_ms + 999) / 1000));
	const char *end;
	uint64_t seconds = 0;
	int64_t when;
	const char *p;

	if (len == 0)
		return -1; /* also keeps a NULL value out of pointer arithmetic */
	end = value + len;
	while (value < end && (*value == ' ' || *value == '\t'))
		value++;
	while (end > value && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (value == end)
		return -1;
	if (*value >= '0' && *value <= '9') {
		for (p = value; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			/* saturate while still checking that every byte is a digit */
			seconds = retry_after_digit(seconds, *p);
		}
	} else {
		if (http_date_parse(value, (size_t)(end - value), now, &when) < 0)
			return -1;
		/* when is within years 0..9999, so when * 1000 fits; the
		 * difference of two int64 values, the later first, fits in
		 * uint64 and comes out exact in unsigned arithmetic */
		if (when * 1000 > now_ms)
			*wait_ms = (uint64_t)(when * 1000) - (uint64_t)now_ms;
		else
			*wait_ms = 0;
		return 0;
	}
	*wait_ms = seconds > RETRY_AFTER_SATURATED_MS / 1000 ? RETRY_AFTER_SATURATED_MS
							     : seconds * 1000;
	return 0;
}

int retry_after_ms_parse(const char *value, size_t len, uint64_t *wait_ms)
{
	const char *end;
	const char *p;
	uint64_t ms = 0;
	bool fraction = false;

	if (len == 0)
		return -1;
	end = value + len;
	retry_trim(&value, &end);
	if (value == end || *value < '0' || *value > '9')
		return -1;
	for (p = value; p < end && *p >= '0' && *p <= '9'; p++)
		ms = retry_after_digit(ms, *p); /* saturates, still checking every byte */
	if (p < end && *p == '.') {
		if (++p == end)
			return -1;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			fraction = fraction || *p != '0';
		}
	}
	if (p != end)
		return -1;
	if (fraction && ms < RETRY_AFTER_SATURATED_MS)
		ms++;
	*wait_ms = ms;
	return 0;
}
