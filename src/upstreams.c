#include "upstreams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "health.h"
#include "http1_chars.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "retry_budget.h"
#include "timer.h"
#include "timeval.h"
#include "xmalloc.h"

#define UPSTREAMS_BUCKETS 256 /* hash buckets for upstream names */
/* Upstreams remembered with nothing attached; beyond, the least recently
 * used of those is forgotten, even one with a failure or two on record (a
 * forward proxy's clients choose the hosts, so the set must stay bounded).
 * What a record in use has attached is never freed. */
#define UPSTREAMS_KEEP 1024

struct upstream {
	struct upstreams *set;
	char *name; /* "http://host:port" */
	char *host; /* behind endpoint.host */
	struct upstream_endpoint endpoint;
	struct health health;
	struct health_policy policy;	       /* the latest a request brought: probes go by it */
	unsigned users;			       /* holders: exchanges that go there */
	unsigned connecting;		       /* admitted connects under way */
	bool proven;			       /* a connection was made since the last failure */
	bool answered_http10;		       /* upstream_note_http10() */
	bool version_heard;		       /* a response head came: its version is known */
	bool asked;			       /* a request held it since the last probe started */
	TAILQ_HEAD(, upstream_waiter) waiters; /* oldest first */
	unsigned waiting;
	uint64_t next_seq;		/* the next waiter's arrival number */
	struct event *probe_timer;	/* made on first use */
	struct upstream_connect *probe; /* the probe in flight */
	unsigned probe_shift;		/* the next probe's first address */
	uint64_t probes_ok;
	uint64_t probes_failed;
	uint64_t probes_short; /* not made for want of the proxy's descriptors or ports */
	bool probe_short_said; /* ... and that was warned about since a probe was made or
				* the upstream last went up or down */
	unsigned open;	       /* connections open or opening */
	unsigned max_open;     /* the live config's limit */
	TAILQ_HEAD(, upstream_waiter) slot_waiters; /* waiting for a connection, oldest first */
	unsigned slot_waiting;
	unsigned pooled_unclaimed;  /* idle connections pooled while requests waited */
	struct event *slot_event;   /* releases waiting requests from the loop; made on first use */
	unsigned walked;	    /* the last set->walk that reached it */
	TAILQ_ENTRY(upstream) link; /* in set->all, most recently used first */
	struct upstream *next;	    /* in its bucket */
};

struct upstreams {
	struct proxy *proxy;
	TAILQ_HEAD(upstream_list, upstream) all;
	unsigned count;
	unsigned waiting;
	unsigned slot_waiting;	       /* over all upstreams */
	struct event *trim_event;      /* trims from the loop; made on first use */
	struct health_policy reloaded; /* the policy the last reload put in force */
	bool was_reloaded;
	unsigned walk; /* numbers upstreams_health_policy()'s walks */
	bool walking;  /* ... in one now: nothing is forgotten */
	struct upstream *buckets[UPSTREAMS_BUCKETS];
};

struct upstreams *upstreams_new(struct proxy *proxy)
{
	struct upstreams *set = xcalloc(1, sizeof(*set));

	set->proxy = proxy;
	TAILQ_INIT(&set->all);
	return set;
}

/* FNV-1a over an endpoint's scheme, host and port; a host name's case
 * does not make another upstream (API.example and api.example are one). */
static unsigned upstreams_hash(const struct upstream_endpoint *e)
{
	uint32_t h = 2166136261u;
	const char *p;

	for (p = e->host; *p != '\0'; p++)
		h = (h ^ http1_lower((unsigned char)*p)) * 16777619u;
	h = (h ^ e->port) * 16777619u;
	h = (h ^ (unsigned)e->tls) * 16777619u;
	h = (h ^ (unsigned)e->absolute) * 16777619u;
	return h % UPSTREAMS_BUCKETS;
}

static bool upstreams_same(const struct upstream_endpoint *a, const struct upstream_endpoint *b)
{
	return a->port == b->port && a->tls == b->tls && a->absolute == b->absolute &&
	       strcasecmp(a->host, b->host) == 0;
}

/* Forget an upstream: nothing may refer to it any more. */
static void upstream_destroy(struct upstream *u)
{
	struct upstreams *set = u->set;
	struct upstream **link = &set->buckets[upstreams_hash(&u->endpoint)];

	while (*link != u)
		link = &(*link)->next;
	*link = u->next;
	TAILQ_REMOVE(&set->all, u, link);
	set->count--;
	if (u->probe != NULL)
		upstream_connect_cancel(u->probe);
	if (u->probe_timer != NULL)
		event_free(u->probe_timer);
	if (u->slot_event != NULL)
		event_free(u->slot_event);
	free(u->name);
	free(u->host);
	free(u);
}

void upstreams_free(struct upstreams *set)
{
	if (set == NULL)
		return;
	while (!TAILQ_EMPTY(&set->all))
		upstream_destroy(TAILQ_FIRST(&set->all));
	if (set->trim_event != NULL)
		event_free(set->trim_event);
	free(set);
}

/* Nothing is attached to it: no holder, no waiting request, no connection
 * open, pooled or being opened, no probe in flight. */
static bool upstream_unattached(const struct upstream *u)
{
	return u->users == 0 && u->waiting == 0 && u->connecting == 0 && u->probe == NULL &&
	       u->open == 0 && u->slot_waiting == 0;
}

/* Is u the upstream url names (its host compared without case, a trailing
 * dot making another upstream, as requests make it)? */
static bool upstream_is_url(const struct upstream *u, const struct upstream_url *url)
{
	char v6[UPSTREAM_IPV6_TEXT_MAX + 1];
	const char *host = url->host;
	size_t len = strlen(host);
	bool absolute = len > 1 && host[len - 1] == '.';

	len -= absolute;
	/* a request's record names an IPv6 address the short way ([::1] for
	 * [0:0::1]): the config's spelling is compared the same way */
	if (len <= UPSTREAM_IPV6_TEXT_MAX && memchr(host, ':', len) != NULL) {
		memcpy(v6, host, len);
		len = upstream_host_canonical_ipv6(v6, len);
		host = v6;
	}
	return url->port == u->endpoint.port && url->tls == u->endpoint.tls &&
	       absolute == u->endpoint.absolute && strlen(u->host) == len &&
	       strncasecmp(host, u->host, len) == 0;
}

/* Does the running config name u as a listener's or a route's upstream:?
 * Such an upstream is never forgotten, down or not: its line on
 * /upstreams and its retryproxy_upstream_up are what an operator watches,
 * and its next request is held or refused at once, not sent to find out. */
static bool upstream_configured(const struct upstream *u)
{
	const struct config *config = u->set->proxy->config;

	for (size_t i = 0; i < config->listener_count; i++)
		if (config->listeners[i].upstream != NULL &&
		    upstream_is_url(u, config->listeners[i].upstream))
			return true;
	for (size_t i = 0; i < config->route_count; i++)
		if (config->routes[i].upstream != NULL &&
		    upstream_is_url(u, config->routes[i].upstream))
			return true;
	return config->default_route.upstream != NULL &&
	       upstream_is_url(u, config->default_route.upstream);
}

/* The least recently used unattached upstream, down or not as asked. */
static struct upstream *upstreams_oldest_unattached(struct upstreams *set, bool down)
{
	struct upstream *u;

	TAILQ_FOREACH_REVERSE(u, &set->all, upstream_list, link)
		if (upstream_unattached(u) && (u->health.state == HEALTH_DOWN) == down &&
		    !upstream_configured(u))
			return u;
	return NULL;
}

/* Keep the set bounded: forget the least recently used unattached
 * upstreams, up ones first (a partial failure count is little to lose);
 * a down one only when no up one is left to forget, since it tells
 * requests to wait or fail fast (one nobody asks for goes at a probe
 * anyway). */
static void upstreams_trim(struct upstreams *set)
{
	if (set->walking)
		return;
	while (set->count > UPSTREAMS_KEEP) {
		struct upstream *u = upstreams_oldest_unattached(set, false);

		if (u == NULL)
			u = upstreams_oldest_unattached(set, true);
		if (u == NULL)
			return;
		upstream_destroy(u);
	}
}

/* "http://host:port", with brackets around an IPv6 literal and the trailing
 * dot of an absolute name. */
static char *upstreams_name(const struct upstream_endpoint *e)
{
	bool v6 = strchr(e->host, ':') != NULL;
	size_t len = strlen(e->host) + 32;
	char *name = xmalloc(len);

	snprintf(name, len, "%s://%s%s%s%s:%u", e->tls ? "https" : "http", v6 ? "[" : "", e->host,
		 v6 ? "]" : "", e->absolute ? "." : "", e->port);
	return name;
}

static void upstreams_trim_cb(evutil_socket_t fd, short what, void *arg)
{
	upstreams_trim(arg);
}

/* u may just have let go of its last request or connection. Past
 * UPSTREAMS_KEEP, records kept only because something was attached (a
 * forward proxy's pooled connections to many hosts) are trimmed now, not
 * at the next new upstream, which a quiet proxy may never see. From the
 * loop: the caller may still be using u. */
static void upstream_maybe_trim(struct upstream *u)
{
	struct upstreams *set = u->set;

	if (set->count <= UPSTREAMS_KEEP || !upstream_unattached(u))
		return;
	if (set->trim_event == NULL)
		set->trim_event = event_new(set->proxy->base, -1, 0, upstreams_trim_cb, set);
	event_active(set->trim_event, 0, 0);
}

struct upstream *upstreams_hold(struct upstreams *set, const struct upstream_endpoint *endpoint)
{
	unsigned b = upstreams_hash(endpoint);
	struct upstream *u;

	/* every request comes here: found without building its name */
	for (u = set->buckets[b]; u != NULL; u = u->next)
		if (upstreams_same(&u->endpoint, endpoint))
			break;
	if (u != NULL) {
		if (u != TAILQ_FIRST(&set->all)) {
			TAILQ_REMOVE(&set->all, u, link);
			TAILQ_INSERT_HEAD(&set->all, u, link);
		}
		u->users++;
		u->asked = true;
		return u;
	}
	u = xcalloc(1, sizeof(*u));
	u->set = set;
	u->name = upstreams_name(endpoint);
	u->host = xstrdup(endpoint->host);
	u->endpoint = *endpoint;
	u->endpoint.host = u->host;
	health_init(&u->health);
	TAILQ_INIT(&u->waiters);
	TAILQ_INIT(&u->slot_waiters);
	u->next = set->buckets[b];
	set->buckets[b] = u;
	set->count++;
	TAILQ_INSERT_HEAD(&set->all, u, link);
	u->users++;
	u->asked = true;
	upstreams_trim(set);
	return u;
}

void upstream_release(struct upstream *u)
{
	if (u != NULL && u->users > 0) {
		u->users--;
		upstream_maybe_trim(u);
	}
}

const char *upstream_name(const struct upstream *u)
{
	return u->name;
}

bool upstream_down(const struct upstream *u)
{
	return u->health.state == HEALTH_DOWN;
}

void upstream_note_http10(struct upstream *u, bool http10)
{
	u->answered_http10 = http10;
}

bool upstream_version_heard(const struct upstream *u)
{
	return u->version_heard;
}

bool upstream_answered_http10(const struct upstream *u)
{
	return u->answered_http10;
}

/* Take a waiter off its upstream's queue. */
static void upstream_take_waiter(struct upstream *u, struct upstream_waiter *w)
{
	TAILQ_REMOVE(&u->waiters, w, link);
	u->waiting--;
	u->set->waiting--;
	w->upstream = NULL;
}

/* Start every waiting request's try, oldest first. A request the release
 * makes wait again joins the queue behind the others and is not released
 * twice; one that stops waiting meanwhile is simply gone from the queue. */
static void upstream_release_all(struct upstream *u)
{
	uint64_t end = u->next_seq;
	struct upstream_waiter *w;

	while ((w = TAILQ_FIRST(&u->waiters)) != NULL && w->seq < end) {
		upstream_take_waiter(u, w);
		w->release(w);
	}
}

/* Let the oldest waiting request make the next connect. One that ends
 * instead (answered by a drain) leaves the turn to the next in line, or
 * the rest would wait for a connect nobody makes. */
static void upstream_release_one(struct upstream *u)
{
	uint64_t end = u->next_seq;
	struct upstream_waiter *w;

	while ((w = TAILQ_FIRST(&u->waiters)) != NULL && w->seq < end) {
		upstream_take_waiter(u, w);
		if (w->release(w))
			return;
	}
}

static void upstream_apply(struct upstream *u, struct health_actions act);

/* A probe is due: a down upstream nobody asked for nor used since the last
 * one (a whole probe interval or more) is not worth probing and is
 * forgotten, unless the config names it; one still asked for stays known
 * down (its requests refused or held at once, not each finding out again),
 * and one that connections still count on is kept. False when forgotten. */
static bool upstream_probe_wanted(struct upstream *u)
{
	bool attached = !upstream_unattached(u);

	if (!attached && !u->asked && !upstream_configured(u)) {
		log_info("upstream %s: down and unused; forgotten", u->name);
		upstream_destroy(u);
		return false;
	}
	/* a request held until now counts as asking for this interval */
	u->asked = attached;
	return true;
}

static void upstream_probe_cb(struct conn *conn, enum try_outcome failure, bool local,
			      const char *reason, void *arg)
{
	struct upstream *u = arg;
	uint64_t now = timer_now_ms();

	u->probe = NULL;
	if (conn != NULL) {
		conn_free(conn);
		u->probes_ok++;
		u->probe_short_said = false;
		log_debug("upstream %s: probe connected", u->name);
		upstream_apply(u, health_step(&u->health, &u->policy, HEALTH_PROBE_CONNECTED, now));
	} else {
		struct health_actions act;

		if (local) {
			/* the proxy's own shortage: no verdict on the upstream,
			 * which stays down until a probe is made; warned once a
			 * spell, as every probe_interval would repeat it */
			u->probes_short++;
			if (!u->probe_short_said)
				log_warn("upstream %s: probe not made: the proxy is short of file "
					 "descriptors or local ports (%s); no verdict on the "
					 "upstream, the next probe in %llu ms",
					 u->name, reason,
					 (unsigned long long)u->policy.probe_interval_ms);
			else
				log_debug("upstream %s: probe not made: %s", u->name, reason);
			u->probe_short_said = true;
			act = health_step(&u->health, &u->policy, HEALTH_PROBE_ABANDONED, now);
		} else {
			u->probes_failed++;
			u->probe_short_said = false;
			log_debug("upstream %s: probe failed: %s", u->name, reason);
			act = health_step(&u->health, &u->policy, HEALTH_PROBE_FAILED, now);
		}
		/* a probe slower than probe_interval is followed at once by the
		 * next: the same check as when the timer starts one */
		if (act.start_probe && !upstream_probe_wanted(u))
			return;
		upstream_apply(u, act);
	}
}

static void upstream_probe_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream *u = arg;
	struct health_actions act;

	act = health_step(&u->health, &u->policy, HEALTH_PROBE_DUE, timer_now_ms());
	/* an interval is from one probe to the next: a timer that woke a
	 * little early (libevent's coarse clock) and is only set again does
	 * not start a new one */
	if (act.start_probe && !upstream_probe_wanted(u))
		return;
	upstream_apply(u, act);
}

/* One connect to see whether the upstream listens again: TCP only, so that
 * no route's TLS settings decide it. Each probe starts one address further
 * than the last, so that no one address decides every probe. */
static void upstream_probe_start(struct upstream *u)
{
	struct proxy *proxy = u->set->proxy;
	struct upstream_endpoint plain = u->endpoint;

	plain.tls = false;
	u->probe = upstream_connect_start(proxy, &plain, &proxy->config->tls, u->name,
					  timer_now_ms(), proxy->config->limits.connect_timeout_ms,
					  u->probe_shift++, upstream_probe_cb, u);
}

/* Do what the health machine says. */
static void upstream_apply(struct upstream *u, struct health_actions act)
{
	if (act.went_down)
		log_warn("upstream %s is down: %u connects failed in a row; %s its requests, "
			 "probing every %llu ms",
			 u->name, u->health.failures, u->policy.hold ? "holding" : "refusing",
			 (unsigned long long)u->policy.probe_interval_ms);
	if (act.went_up)
		log_info("upstream %s is up%s", u->name,
			 u->waiting > 0 ? ": releasing its held requests" : "");
	if (act.cancel_timer && u->probe_timer != NULL)
		evtimer_del(u->probe_timer);
	if (act.went_up)
		u->proven = true;
	/* a shortage spell ends with the down spell it came in (a request's
	 * connect may end that, not only a probe): the next one is warned
	 * about afresh */
	if (act.went_up || act.went_down)
		u->probe_short_said = false;
	/* those waiting for the verdict get it: without hold a 502; with it,
	 * held for the down upstream, now taking places among the pending
	 * retries as every request held for it does */
	if (act.release || act.went_down)
		upstream_release_all(u);
	if (act.start_probe)
		upstream_probe_start(u);
	if (act.arm_timer) {
		uint64_t now = timer_now_ms();
		struct timeval tv = timeval_from_ms(act.timer_ms > now ? act.timer_ms - now : 0);

		if (u->probe_timer == NULL)
			u->probe_timer =
				evtimer_new(u->set->proxy->base, upstream_probe_timer_cb, u);
		evtimer_add(u->probe_timer, &tv);
	}
}

/* The policy an upstream's health goes by: the one the last reload put in
 * force, else the one requests bring (the same for every request until a
 * reload). A request from before a reload brings the old one: its own hold
 * or refusal goes by that, but taken as the upstream's it would put the old
 * probe_interval back for every probe after the next. */
static const struct health_policy *upstream_policy(const struct upstream *u,
						   const struct health_policy *brought)
{
	return u->set->was_reloaded ? &u->set->reloaded : brought;
}

enum upstream_admit upstream_admission(const struct upstream *u, const struct health_policy *policy)
{
	if (policy->down_after > 0) {
		if (u->health.state == HEALTH_DOWN)
			return policy->hold ? UPSTREAM_WAIT : UPSTREAM_REFUSE;
		/* in doubt: one connect finds out while the others wait for it */
		if (!u->proven && u->connecting > 0)
			return UPSTREAM_WAIT;
	}
	return UPSTREAM_GO;
}

enum upstream_admit upstream_admit(struct upstream *u, const struct health_policy *policy)
{
	enum upstream_admit admit = upstream_admission(u, policy);

	u->policy = *upstream_policy(u, policy);
	if (admit == UPSTREAM_GO)
		u->connecting++;
	return admit;
}

void upstream_admit_anyway(struct upstream *u)
{
	u->connecting++;
}

void upstream_wait(struct upstream *u, struct upstream_waiter *w)
{
	w->upstream = u;
	w->seq = u->next_seq++;
	TAILQ_INSERT_TAIL(&u->waiters, w, link);
	u->waiting++;
	u->set->waiting++;
}

static void upstream_slot_schedule(struct upstream *u);

/* Take a waiter off its upstream's connection queue. */
static void upstream_take_slot_waiter(struct upstream *u, struct upstream_waiter *w)
{
	TAILQ_REMOVE(&u->slot_waiters, w, link);
	u->slot_waiting--;
	u->set->slot_waiting--;
	w->upstream = NULL;
	w->for_connection = false;
}

void upstream_unwait(struct upstream_waiter *w)
{
	struct upstream *u = w->upstream;

	if (u == NULL)
		return;
	if (w->for_connection) {
		bool head = TAILQ_FIRST(&u->slot_waiters) == w;

		upstream_take_slot_waiter(u, w);
		/* the next in line may go where the head could not (a limit
		 * raised since, or a connection only the head may not reuse) */
		if (head)
			upstream_slot_schedule(u);
	} else
		upstream_take_waiter(w->upstream, w);
}

/* Release waiting requests, oldest first, while there is a place for one or
 * a pooled connection not yet offered. Each released request takes the
 * place (or the connection) at once, or goes another way (held for health,
 * refused), or, finding neither after all, waits again at the front, or
 * ends there (its deadline, a drain) taking nothing. */
static void upstream_slot_release_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream *u = arg;
	struct upstream_waiter *w;

	while ((w = TAILQ_FIRST(&u->slot_waiters)) != NULL &&
	       (u->open < u->max_open || u->pooled_unclaimed > 0)) {
		bool pooled = u->open >= u->max_open;

		if (pooled)
			u->pooled_unclaimed--;
		upstream_take_slot_waiter(u, w);
		/* a place not taken is still free; a pooled connection not
		 * taken is still idle: the next in line is offered it */
		if (!w->release(w) && pooled)
			u->pooled_unclaimed++;
	}
	u->pooled_unclaimed = 0;
}

/* Run the release from the loop, not inside whatever freed the place. */
static void upstream_slot_schedule(struct upstream *u)
{
	if (u->slot_waiting == 0)
		return;
	if (u->slot_event == NULL)
		u->slot_event = event_new(u->set->proxy->base, -1, 0, upstream_slot_release_cb, u);
	event_active(u->slot_event, 0, 0);
}

bool upstream_slot_take(struct upstream *u, unsigned max, bool first_in_line)
{
	u->max_open = max;
	if (u->open >= max || (u->slot_waiting > 0 && !first_in_line))
		return false;
	u->open++;
	return true;
}

bool upstream_slot_at_cap(const struct upstream *u, bool first_in_line)
{
	return u->open >= u->max_open && (u->slot_waiting == 0 || first_in_line);
}

bool upstream_slot_over_cap(const struct upstream *u)
{
	return u->open > u->max_open;
}

void upstream_slot_put(struct upstream *u)
{
	if (u->open > 0)
		u->open--;
	upstream_slot_schedule(u);
	upstream_maybe_trim(u);
}

void upstream_slot_closed(void *arg)
{
	upstream_slot_put(arg);
}

void upstream_slot_wait(struct upstream *u, struct upstream_waiter *w, bool front)
{
	w->upstream = u;
	w->for_connection = true;
	w->seq = u->next_seq++;
	if (front)
		TAILQ_INSERT_HEAD(&u->slot_waiters, w, link);
	else
		TAILQ_INSERT_TAIL(&u->slot_waiters, w, link);
	u->slot_waiting++;
	u->set->slot_waiting++;
}

void upstream_slot_pooled(struct upstream *u)
{
	if (u->slot_waiting == 0)
		return;
	u->pooled_unclaimed++;
	upstream_slot_schedule(u);
}

void upstreams_slot_limit(struct upstreams *set, unsigned max)
{
	struct upstream *u;

	TAILQ_FOREACH(u, &set->all, link) {
		u->max_open = max;
		upstream_slot_schedule(u);
	}
}

void upstreams_health_policy(struct upstreams *set, const struct health_policy *policy)
{
	uint64_t now = timer_now_ms();
	struct upstream *u;

	set->reloaded = *policy;
	set->was_reloaded = true;
	/* a release may answer a request whose client's next one asks for
	 * another upstream at once, which moves it to the front or makes a new
	 * one: after a release the walk starts over, passing those it has
	 * done, and nothing is forgotten until it ends */
	set->walk++;
	set->walking = true;
	u = TAILQ_FIRST(&set->all);
	while (u != NULL) {
		struct health_actions act;

		if (u->walked == set->walk) {
			u = TAILQ_NEXT(u, link);
			continue;
		}
		u->walked = set->walk;
		u->policy = *policy;
		act = health_step(&u->health, policy, HEALTH_POLICY_CHANGED, now);
		upstream_apply(u, act);
		u = act.release || act.went_down ? TAILQ_FIRST(&set->all) : TAILQ_NEXT(u, link);
	}
	set->walking = false;
	upstreams_trim(set);
}

bool upstream_slot_waiters(const struct upstream *u)
{
	return u->slot_waiting > 0;
}

unsigned upstreams_slot_waiting(const struct upstreams *set)
{
	return set->slot_waiting;
}

/* A connect failed: one more failure in a row; a request that waits for
 * the verdict may make the next connect. */
static void upstream_connect_failed(struct upstream *u, uint64_t now)
{
	u->proven = false;
	upstream_apply(u, health_step(&u->health, &u->policy, HEALTH_CONNECT_FAILED, now));
	if (u->health.state == HEALTH_UP && u->connecting == 0)
		upstream_release_one(u);
}

void upstream_handshake_refused(struct upstream *u, const struct health_policy *policy)
{
	u->policy = *upstream_policy(u, policy);
	upstream_connect_failed(u, timer_now_ms());
}

void upstream_connect_end(struct upstream *u, const struct health_policy *policy,
			  enum upstream_connect_result result)
{
	uint64_t now = timer_now_ms();

	if (u->connecting > 0)
		u->connecting--;
	u->policy = *upstream_policy(u, policy);
	switch (result) {
	case UPSTREAM_CONNECT_MADE:
		u->proven = true;
		upstream_apply(u, health_step(&u->health, &u->policy, HEALTH_CONNECTED, now));
		upstream_release_all(u);
		break;
	case UPSTREAM_CONNECT_MADE_IN_DOUBT:
		/* up again if it was down, but the failures in a row are not
		 * wiped out by a handshake the server may yet refuse: a
		 * response head does that */
		u->proven = true;
		if (u->health.state == HEALTH_DOWN)
			upstream_apply(u,
				       health_step(&u->health, &u->policy, HEALTH_CONNECTED, now));
		upstream_release_all(u);
		break;
	case UPSTREAM_CONNECT_FAILED:
		upstream_connect_failed(u, now);
		break;
	case UPSTREAM_CONNECT_ABANDONED:
		if (u->health.state == HEALTH_UP && !u->proven && u->connecting == 0)
			upstream_release_one(u);
		break;
	}
}

void upstream_response_seen(struct upstream *u, const struct health_policy *policy)
{
	/* the common case, on every response: nothing to learn */
	if (u->proven && u->health.state == HEALTH_UP && u->health.failures == 0 &&
	    u->waiting == 0 && u->version_heard)
		return;
	u->proven = true;
	u->version_heard = true;
	upstream_apply(u, health_step(&u->health, upstream_policy(u, policy), HEALTH_RESPONSE_HEAD,
				      timer_now_ms()));
	if (u->waiting > 0 && u->health.state == HEALTH_UP)
		upstream_release_all(u);
}

unsigned upstreams_waiting(const struct upstreams *set)
{
	return set->waiting;
}

void upstreams_render(const struct upstreams *set, struct evbuffer *out)
{
	const struct upstream *u;

	TAILQ_FOREACH(u, &set->all, link)
		evbuffer_add_printf(out, "%s %s failures=%u held=%u\n", u->name,
				    health_state_name(u->health.state), u->health.failures,
				    u->waiting);
}

/* name{upstream="<name>" (the caller closes the braces). */
static void upstreams_series(struct evbuffer *out, const char *name, const struct upstream *u)
{
	evbuffer_add_printf(out, "%s{upstream=\"", name);
	metrics_label_value(out, u->name);
	evbuffer_add(out, "\"", 1);
}

void upstreams_render_metrics(const struct upstreams *set, struct evbuffer *out)
{
	const struct upstream *u;

	evbuffer_add_printf(out, "# HELP retryproxy_upstream_up 1 while the upstream is up, "
				 "0 while it is down.\n"
				 "# TYPE retryproxy_upstream_up gauge\n");
	TAILQ_FOREACH(u, &set->all, link) {
		upstreams_series(out, "retryproxy_upstream_up", u);
		evbuffer_add_printf(out, "} %d\n", u->health.state == HEALTH_UP);
	}
	evbuffer_add_printf(out,
			    "# HELP retryproxy_held_requests Requests waiting for an "
			    "upstream now.\n"
			    "# TYPE retryproxy_held_requests gauge\n"
			    "retryproxy_held_requests %u\n",
			    set->waiting);
	evbuffer_add_printf(out,
			    "# HELP retryproxy_upstream_waiting Requests waiting for a "
			    "connection under limits.max_upstream_connections now.\n"
			    "# TYPE retryproxy_upstream_waiting gauge\n"
			    "retryproxy_upstream_waiting %u\n",
			    set->slot_waiting);
	evbuffer_add_printf(out, "# HELP retryproxy_probes_total Probe connects to down "
				 "upstreams, by result (local_shortage: not made for want "
				 "of the proxy's own descriptors or ports).\n"
				 "# TYPE retryproxy_probes_total counter\n");
	TAILQ_FOREACH(u, &set->all, link) {
		upstreams_series(out, "retryproxy_probes_total", u);
		evbuffer_add_printf(out, ",result=\"ok\"} %llu\n",
				    (unsigned long long)u->probes_ok);
		upstreams_series(out, "retryproxy_probes_total", u);
		evbuffer_add_printf(out, ",result=\"fail\"} %llu\n",
				    (unsigned long long)u->probes_failed);
		upstreams_series(out, "retryproxy_probes_total", u);
		evbuffer_add_printf(out, ",result=\"local_shortage\"} %llu\n",
				    (unsigned long long)u->probes_short);
	}
}

void upstreams_each(const struct upstreams *set,
		    void (*fn)(const struct upstream_view *view, void *arg), void *arg)
{
	const struct upstream *u;

	TAILQ_FOREACH(u, &set->all, link) {
		struct upstream_view view = {
			.name = u->name,
			.down = u->health.state == HEALTH_DOWN,
			.failures = u->health.failures,
			.held = u->waiting,
			.waiting = u->slot_waiting,
			.probes_ok = u->probes_ok,
			.probes_failed = u->probes_failed,
			.probes_short = u->probes_short,
		};

		fn(&view, arg);
	}
}
