#include "metrics.h"

#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "name_index.h"
#include "xmalloc.h"

/* Upper bounds of the request duration histogram, in seconds: from a fast
 * local hit to a request that used a long retry deadline. */
static const double metrics_duration_bounds[] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
};
#define METRICS_DURATION_BUCKETS \
	(sizeof(metrics_duration_bounds) / sizeof(metrics_duration_bounds[0]))

/* Upper bounds of the tries-per-request histogram. */
static const double metrics_tries_bounds[] = { 1, 2, 3, 4, 5, 6, 8, 10, 15, 20 };
#define METRICS_TRIES_BUCKETS (sizeof(metrics_tries_bounds) / sizeof(metrics_tries_bounds[0]))

/* The kind labels of upstream_errors_total in the order they are listed,
 * each always present; which outcomes a kind counts is retry.c's
 * try_outcome_error_kind(). */
static const char *const metrics_error_kinds[] = {
	"dns", "connect", "tls", "reset", "timeout", "malformed",
};
#define METRICS_ERROR_KINDS (sizeof(metrics_error_kinds) / sizeof(metrics_error_kinds[0]))

#define METRICS_CAUSES 4 /* enum retry_cause */

/* One response code's count on one route. */
struct metrics_code {
	int code;
	uint64_t count;
};

struct metrics_route {
	char *name;
	struct metrics_code *codes; /* sorted by code */
	size_t code_count;
	uint64_t tries;
	uint64_t retries[METRICS_CAUSES];
	uint64_t gave_up[RETRY_GIVE_UP_COUNT]; /* by enum retry_give_up; NONE unused */
	uint64_t hedges[2];		       /* lost, won */
	uint64_t resumes[2];		       /* failed, ok */
	uint64_t would_retry[METRICS_CAUSES];  /* retry.mode: observe, by enum retry_cause */
	unsigned backoff_pending;	       /* gauge: requests in backoff now */
	unsigned held;			       /* gauge: requests waiting for their upstream now */
	unsigned queued;		       /* gauge: requests waiting for a connection now */
	bool used;			       /* counted something: shown from then on */
	struct metrics_route *next;
};

/* A histogram; each bucket holds its own count, made cumulative when rendered. */
struct metrics_histogram {
	const double *bounds;
	size_t bucket_count;
	uint64_t *buckets;
	double sum;
	uint64_t count;
};

struct metrics {
	struct metrics_route *routes;		     /* in the order they were made */
	struct metrics_route *unrouted;		     /* "-", in routes once made */
	uint64_t upstream_errors[TRY_OUTCOME_COUNT]; /* by enum try_outcome, summed by kind */
	uint64_t pool_reuse;
	uint64_t intercept_failures;
	uint64_t reloads[2];	 /* SIGHUP reloads: failed, ok */
	bool last_reload_failed; /* the running config is not the file's */
	uint64_t duration_buckets[METRICS_DURATION_BUCKETS];
	uint64_t tries_buckets[METRICS_TRIES_BUCKETS];
	struct metrics_histogram duration;
	struct metrics_histogram tries;
};

struct metrics *metrics_new(void)
{
	struct metrics *metrics = xcalloc(1, sizeof(struct metrics));

	metrics->duration.bounds = metrics_duration_bounds;
	metrics->duration.bucket_count = METRICS_DURATION_BUCKETS;
	metrics->duration.buckets = metrics->duration_buckets;
	metrics->tries.bounds = metrics_tries_bounds;
	metrics->tries.bucket_count = METRICS_TRIES_BUCKETS;
	metrics->tries.buckets = metrics->tries_buckets;
	return metrics;
}

/* Count one observation. */
static void metrics_observe(struct metrics_histogram *h, double value)
{
	size_t i;

	for (i = 0; i < h->bucket_count; i++) {
		if (value <= h->bounds[i]) {
			h->buckets[i]++;
			break;
		}
	}
	h->sum += value;
	h->count++;
}

void metrics_free(struct metrics *metrics)
{
	if (metrics == NULL)
		return;
	while (metrics->routes != NULL) {
		struct metrics_route *r = metrics->routes;

		metrics->routes = r->next;
		free(r->codes);
		free(r->name);
		free(r);
	}
	free(metrics);
}

/* The first series from r on that counted something: a route made when a
 * config went live shows once it is used, as if it had been made then. */
static const struct metrics_route *metrics_shown(const struct metrics_route *r)
{
	while (r != NULL && !r->used)
		r = r->next;
	return r;
}

/* A new series, last in the list where *tail is the end. */
static struct metrics_route *metrics_series_add(struct metrics_route **tail, const char *name)
{
	*tail = xcalloc(1, sizeof(**tail));
	(*tail)->name = xstrdup(name);
	return *tail;
}

/* A list: looked up when a config goes live, never per request. */
struct metrics_route *metrics_series(struct metrics *metrics, const char *name)
{
	struct metrics_route **link;

	for (link = &metrics->routes; *link != NULL; link = &(*link)->next)
		if (strcmp((*link)->name, name) == 0)
			return *link;
	return metrics_series_add(link, name);
}

struct metrics_route *metrics_unrouted(struct metrics *metrics)
{
	if (metrics->unrouted == NULL)
		metrics->unrouted = metrics_series(metrics, "-");
	return metrics->unrouted;
}

void metrics_attach(struct metrics *metrics, struct config *config)
{
	/* the series kept from before, each found by its name rather than by
	 * a walk of the list for every route */
	struct name_index *series = name_index_new(config_route_total(config));
	struct metrics_route **tail = &metrics->routes;

	for (; *tail != NULL; tail = &(*tail)->next)
		name_index_add(series, (*tail)->name, 0, *tail);
	for (size_t i = 0; i < config_route_total(config); i++) {
		struct route *route = config_route_at(config, i);

		route->series = name_index_find(series, route->name, 0);
		if (route->series == NULL) {
			route->series = metrics_series_add(tail, route->name);
			tail = &route->series->next;
			name_index_add(series, route->series->name, 0, route->series);
		}
	}
	name_index_free(series);
}

void metrics_request_done(struct metrics *metrics, struct metrics_route *r, int code,
			  double duration_seconds, unsigned tries)
{
	size_t i;

	r->used = true;
	for (i = 0; i < r->code_count && r->codes[i].code < code; i++)
		;
	if (i == r->code_count || r->codes[i].code != code) {
		r->codes = xrealloc(r->codes, (r->code_count + 1) * sizeof(*r->codes));
		memmove(&r->codes[i + 1], &r->codes[i], (r->code_count - i) * sizeof(*r->codes));
		r->codes[i].code = code;
		r->codes[i].count = 0;
		r->code_count++;
	}
	r->codes[i].count++;
	metrics_observe(&metrics->duration, duration_seconds);
	metrics_observe(&metrics->tries, (double)tries);
}

void metrics_try(struct metrics_route *series)
{
	series->tries++;
	series->used = true;
}

void metrics_retry(struct metrics_route *series, enum retry_cause cause)
{
	if ((unsigned)cause < METRICS_CAUSES) {
		series->retries[cause]++;
		series->used = true;
	}
}

void metrics_would_retry(struct metrics_route *series, enum retry_cause cause)
{
	if ((unsigned)cause < METRICS_CAUSES) {
		series->would_retry[cause]++;
		series->used = true;
	}
}

void metrics_gave_up(struct metrics_route *series, enum retry_give_up reason)
{
	if (reason > RETRY_GIVE_UP_NONE && (unsigned)reason < RETRY_GIVE_UP_COUNT) {
		series->gave_up[reason]++;
		series->used = true;
	}
}

void metrics_hedge(struct metrics_route *series, bool won)
{
	series->hedges[won]++;
	series->used = true;
}

void metrics_resume(struct metrics_route *series, bool ok)
{
	series->resumes[ok]++;
	series->used = true;
}

void metrics_route_gauges(struct metrics_route *series, int backoff_pending, int held)
{
	series->backoff_pending += (unsigned)backoff_pending;
	series->held += (unsigned)held;
	series->used = true;
}

void metrics_route_queued(struct metrics_route *series, int queued)
{
	series->queued += (unsigned)queued;
	series->used = true;
}

unsigned metrics_backoff_pending(const struct metrics *metrics)
{
	const struct metrics_route *r;
	unsigned n = 0;

	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next))
		n += r->backoff_pending;
	return n;
}

void metrics_upstream_error(struct metrics *metrics, enum try_outcome outcome)
{
	if (outcome != TRY_RESPONSE && (unsigned)outcome < TRY_OUTCOME_COUNT)
		metrics->upstream_errors[outcome]++;
}

void metrics_pool_reuse(struct metrics *metrics)
{
	metrics->pool_reuse++;
}

void metrics_intercept_failure(struct metrics *metrics)
{
	metrics->intercept_failures++;
}

void metrics_reload(struct metrics *metrics, bool ok)
{
	metrics->reloads[ok]++;
	metrics->last_reload_failed = !ok;
}

bool metrics_last_reload_failed(const struct metrics *metrics)
{
	return metrics->last_reload_failed;
}

void metrics_label_value(struct evbuffer *out, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(out, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, s, 1);
	}
}

/* Start a per-route series: name{route="r" (the caller closes the braces). */
static void metrics_route_series(struct evbuffer *out, const char *name, const char *route)
{
	evbuffer_add_printf(out, "%s{route=\"", name);
	metrics_label_value(out, route);
	evbuffer_add(out, "\"", 1);
}

static void metrics_header(struct evbuffer *out, const char *name, const char *type,
			   const char *help)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One counter per route: name{route="r"} value. */
static void metrics_route_counter(struct evbuffer *out, const struct metrics *metrics,
				  const char *name, const char *help,
				  uint64_t (*value)(const struct metrics_route *))
{
	const struct metrics_route *r;

	metrics_header(out, name, "counter", help);
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, name, r->name);
		evbuffer_add_printf(out, "} %llu\n", (unsigned long long)value(r));
	}
}

static uint64_t metrics_route_tries(const struct metrics_route *r)
{
	return r->tries;
}

/* A histogram's cumulative buckets, +Inf, _sum and _count. */
static void metrics_render_histogram(struct evbuffer *out, const char *name, const char *help,
				     const struct metrics_histogram *h)
{
	uint64_t cumulative = 0;
	size_t i;

	metrics_header(out, name, "histogram", help);
	for (i = 0; i < h->bucket_count; i++) {
		cumulative += h->buckets[i];
		evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
				    (unsigned long long)cumulative);
	}
	evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
			    (unsigned long long)h->count, name, h->sum, name,
			    (unsigned long long)h->count);
}

/* The failed tries of one upstream_errors_total kind: the sum over the
 * outcomes of that kind (a scrape's work, never a request's). */
static uint64_t metrics_error_count(const struct metrics *metrics, const char *kind)
{
	uint64_t count = 0;
	size_t o;

	for (o = 0; o < TRY_OUTCOME_COUNT; o++) {
		const char *k = try_outcome_error_kind((enum try_outcome)o);

		if (k != NULL && strcmp(k, kind) == 0)
			count += metrics->upstream_errors[o];
	}
	return count;
}

void metrics_render(const struct metrics *metrics, const struct metrics_gauges *gauges,
		    struct evbuffer *out)
{
	const struct metrics_route *r;
	size_t i;

	metrics_header(out, "retryproxy_requests_total", "counter",
		       "Final responses sent to clients, by route and status code.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		for (i = 0; i < r->code_count; i++) {
			metrics_route_series(out, "retryproxy_requests_total", r->name);
			evbuffer_add_printf(out, ",code=\"%d\"} %llu\n", r->codes[i].code,
					    (unsigned long long)r->codes[i].count);
		}
	}
	metrics_route_counter(out, metrics, "retryproxy_tries_total",
			      "Upstream tries, first tries included.", metrics_route_tries);
	metrics_header(
		out, "retryproxy_retries_total", "counter",
		"Retries scheduled (or held for a down upstream), by route and the cause of the "
		"failed try.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		for (i = 0; i < METRICS_CAUSES; i++) {
			metrics_route_series(out, "retryproxy_retries_total", r->name);
			evbuffer_add_printf(out, ",cause=\"%s\"} %llu\n",
					    retry_cause_name((enum retry_cause)i),
					    (unsigned long long)r->retries[i]);
		}
	}
	metrics_header(out, "retryproxy_retries_given_up_total", "counter",
		       "Requests whose retrying stopped short, by route and reason.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		for (i = RETRY_GIVE_UP_NONE + 1; i < RETRY_GIVE_UP_COUNT; i++) {
			metrics_route_series(out, "retryproxy_retries_given_up_total", r->name);
			evbuffer_add_printf(out, ",reason=\"%s\"} %llu\n",
					    retry_give_up_name((enum retry_give_up)i),
					    (unsigned long long)r->gave_up[i]);
		}
	}
	metrics_header(out, "retryproxy_hedges_total", "counter",
		       "Hedged tries, by route and whether their response won.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, "retryproxy_hedges_total", r->name);
		evbuffer_add_printf(out, ",result=\"won\"} %llu\n",
				    (unsigned long long)r->hedges[1]);
		metrics_route_series(out, "retryproxy_hedges_total", r->name);
		evbuffer_add_printf(out, ",result=\"lost\"} %llu\n",
				    (unsigned long long)r->hedges[0]);
	}
	metrics_header(out, "retryproxy_resumes_total", "counter",
		       "Broken downloads continued with a Range request (retry.resume), by route "
		       "and whether the rest was spliced on (ok) or the response ended short "
		       "(failed).");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, "retryproxy_resumes_total", r->name);
		evbuffer_add_printf(out, ",result=\"ok\"} %llu\n",
				    (unsigned long long)r->resumes[1]);
		metrics_route_series(out, "retryproxy_resumes_total", r->name);
		evbuffer_add_printf(out, ",result=\"failed\"} %llu\n",
				    (unsigned long long)r->resumes[0]);
	}
	metrics_header(out, "retryproxy_would_retry_total", "counter",
		       "Failures retry.mode: observe let through that would have been retried, "
		       "by route and cause.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		for (i = 0; i < METRICS_CAUSES; i++) {
			metrics_route_series(out, "retryproxy_would_retry_total", r->name);
			evbuffer_add_printf(out, ",cause=\"%s\"} %llu\n",
					    retry_cause_name((enum retry_cause)i),
					    (unsigned long long)r->would_retry[i]);
		}
	}
	metrics_header(out, "retryproxy_backoff_pending", "gauge",
		       "Requests waiting on a backoff timer now.");
	evbuffer_add_printf(out, "retryproxy_backoff_pending %u\n", gauges->backoff_pending);
	metrics_header(out, "retryproxy_route_backoff_pending", "gauge",
		       "Requests waiting on a backoff timer now, by route.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, "retryproxy_route_backoff_pending", r->name);
		evbuffer_add_printf(out, "} %u\n", r->backoff_pending);
	}
	metrics_header(out, "retryproxy_route_held_requests", "gauge",
		       "Requests waiting for their upstream now, by route.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, "retryproxy_route_held_requests", r->name);
		evbuffer_add_printf(out, "} %u\n", r->held);
	}
	metrics_header(out, "retryproxy_route_queued", "gauge",
		       "Requests waiting for a connection under max_upstream_connections now, "
		       "by route.");
	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		metrics_route_series(out, "retryproxy_route_queued", r->name);
		evbuffer_add_printf(out, "} %u\n", r->queued);
	}

	metrics_render_histogram(out, "retryproxy_request_duration_seconds",
				 "Whole request duration, retries and backoff included.",
				 &metrics->duration);
	metrics_render_histogram(out, "retryproxy_tries_per_request",
				 "Upstream tries each request took, the first included.",
				 &metrics->tries);

	metrics_header(out, "retryproxy_upstream_errors_total", "counter",
		       "Failed upstream tries, by kind of failure.");
	for (i = 0; i < METRICS_ERROR_KINDS; i++) {
		const char *kind = metrics_error_kinds[i];

		evbuffer_add_printf(out, "retryproxy_upstream_errors_total{kind=\"%s\"} %llu\n",
				    kind, (unsigned long long)metrics_error_count(metrics, kind));
	}

	metrics_header(out, "retryproxy_connections", "gauge", "Open connections, by side.");
	evbuffer_add_printf(out,
			    "retryproxy_connections{side=\"client\"} %u\n"
			    "retryproxy_connections{side=\"upstream\"} %u\n",
			    gauges->client_connections, gauges->upstream_connections);

	metrics_header(out, "retryproxy_pool_reuse_total", "counter",
		       "Requests sent on a pooled upstream connection.");
	evbuffer_add_printf(out, "retryproxy_pool_reuse_total %llu\n",
			    (unsigned long long)metrics->pool_reuse);

	metrics_header(out, "retryproxy_intercept_failures_total", "counter",
		       "Client TLS handshakes in intercepted CONNECT tunnels that failed; a client "
		       "that only closed or reset the connection is not counted.");
	evbuffer_add_printf(out, "retryproxy_intercept_failures_total %llu\n",
			    (unsigned long long)metrics->intercept_failures);
}

void metrics_render_fleet(bool connected, struct evbuffer *out)
{
	metrics_header(out, "retryproxy_fleet_connected", "gauge",
		       "1 while the fleet's Redis answers and the route budgets are shared; 0 "
		       "while they are local.");
	evbuffer_add_printf(out, "retryproxy_fleet_connected %d\n", connected ? 1 : 0);
}

void metrics_render_reloads(const struct metrics *metrics, struct evbuffer *out)
{
	metrics_header(out, "retryproxy_config_reloads_total", "counter",
		       "Config reloads (SIGHUP), by whether the new config went live (ok) or was "
		       "refused and the running one kept (failed).");
	evbuffer_add_printf(out,
			    "retryproxy_config_reloads_total{result=\"ok\"} %llu\n"
			    "retryproxy_config_reloads_total{result=\"failed\"} %llu\n",
			    (unsigned long long)metrics->reloads[1],
			    (unsigned long long)metrics->reloads[0]);
	metrics_header(out, "retryproxy_config_last_reload_successful", "gauge",
		       "0 while the last reload was refused (the running config is not the "
		       "file's), else 1.");
	evbuffer_add_printf(out, "retryproxy_config_last_reload_successful %d\n",
			    metrics->last_reload_failed ? 0 : 1);
}

void metrics_render_kept(uint64_t memory_bytes, uint64_t spool_bytes, struct evbuffer *out)
{
	metrics_header(out, "retryproxy_retry_memory_bytes", "gauge",
		       "Bytes of request bodies (limits.replay_buffer) and retryable responses "
		       "(limits.retry_response_buffer) kept in memory for retries now, against "
		       "limits.retry_memory.");
	evbuffer_add_printf(out, "retryproxy_retry_memory_bytes %llu\n",
			    (unsigned long long)memory_bytes);
	metrics_header(out, "retryproxy_spool_bytes", "gauge",
		       "Bytes in request body spool files now, a body of known length counted "
		       "whole from its head (limits.spool_max), against limits.spool_total.");
	evbuffer_add_printf(out, "retryproxy_spool_bytes %llu\n", (unsigned long long)spool_bytes);
}

/* The status page's view has a slot for each cause this file counts. */
_Static_assert(RETRY_CAUSE_TIMEOUT + 1 == METRICS_CAUSES, "one retries slot per cause");

void metrics_each_route(const struct metrics *metrics,
			void (*fn)(const struct metrics_route_view *view, void *arg), void *arg)
{
	const struct metrics_route *r;
	size_t i;

	for (r = metrics_shown(metrics->routes); r != NULL; r = metrics_shown(r->next)) {
		struct metrics_route_view view = {
			.name = r->name,
			.tries = r->tries,
			.hedges_won = r->hedges[1],
			.hedges_lost = r->hedges[0],
			.backoff_pending = r->backoff_pending,
			.held = r->held,
			.queued = r->queued,
		};

		for (i = 0; i < r->code_count; i++) {
			int code = r->codes[i].code;

			view.requests += r->codes[i].count;
			/* a 101 is the switch the request asked for (a WebSocket's
			 * handshake), as much an answer as a 2xx */
			if (code == 101 || (code >= 200 && code < 400))
				view.succeeded += r->codes[i].count;
		}
		memcpy(view.retries, r->retries, sizeof(view.retries));
		memcpy(view.gave_up, r->gave_up, sizeof(view.gave_up));
		fn(&view, arg);
	}
}
