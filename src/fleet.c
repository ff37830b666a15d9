#include "fleet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libevent.h>

#include "conn.h"
#include "dns_cache.h"
#include "fleet_lease.h"
#include "happy_eyeballs.h"
#include "hash.h"
#include "name_index.h"
#include "log.h"
#include "name_lookup.h"
#include "retry.h"
#include "timeval.h"
#include "upstream.h"
#include "xmalloc.h"

/* A connect, a command of logging in, or a sync round, that Redis has not
 * answered within twice the sync interval, and never less than this,
 * counts as Redis being down: a frozen Redis keeps its connections open,
 * so only a deadline finds out. */
#define FLEET_REPLY_TIMEOUT_MIN_MS 500

/* Reconnects back off from the first to the last, doubling, with up to
 * half again of jitter so a fleet of sidecars does not come back at once. */
#define FLEET_RECONNECT_FIRST_MS 100
#define FLEET_RECONNECT_MAX_MS 5000

/* A name's lookups, one per family, asked apart and answered as an
 * upstream's are (name_lookup.c: the hosts file, localhost as loopback,
 * DNS): one evdns lookup for both, once one family answered, waits up to
 * 3 s for the other, and a resolver that drops AAAA queries would hold
 * every (re)connect that long. IPv6 is asked first and its addresses go
 * first. */
enum { FLEET_LOOKUP_V6, FLEET_LOOKUP_V4, FLEET_LOOKUPS };

/* How long, once one family answered, the other's answer is waited for
 * before connecting without it: RFC 8305's Resolution Delay, as for an
 * upstream. It is waited for the A answer too (which nearly always comes
 * with the AAAA one): a connect tries the addresses one after another, and
 * the IPv4 ones are then among them. */
#define FLEET_RESOLUTION_DELAY_MS 50

/* A connection that carried no command for this long gets a PING: a Redis
 * whose `timeout` config is shorter than sync_interval (it counts whole
 * seconds, 1 at least) would close it between syncs, and each sync would
 * find it closed and connect again. Syncs this frequent need none. */
#define FLEET_KEEPALIVE_MS 500

/* The distinct reasons for Redis being down that are each warned about
 * once while it stays down (refused, then NOAUTH, then ...). */
#define FLEET_REASONS 8

enum fleet_state {
	FLEET_WAITING,	  /* the reconnect backoff runs */
	FLEET_RESOLVING,  /* the Redis host name is being resolved */
	FLEET_CONNECTING, /* connecting, then loading the script */
	FLEET_TRYING,	  /* the script loaded, the first sync round out: a Redis
			   * may load scripts yet refuse to run them (a read-only
			   * replica), so the local budget decides until it answers */
	FLEET_CONNECTED,  /* leases in use: the fleet decides */
};

struct fleet_route {
	struct fleet *fleet;
	char *route;
	uint64_t window_ms;
	double ratio;
	double min_per_second;
	char *key;		/* the route's Redis hash */
	bool live;		/* the running config has the route: it is synced */
	bool in_flight;		/* a sync of it awaits its reply, which names it */
	bool closing;		/* a reload dropped it while connected: its last sync,
				 * which hands its lease back and reports its counts,
				 * goes with the next round, then it goes */
	uint64_t tokens;	/* leased at the last sync and not yet spent */
	bool leased;		/* a sync granted it a lease since it went live or Redis came
				 * back: until then the local budget decides for it */
	uint64_t asked;		/* retries made or refused since the last sync */
	long long grant_epoch;	/* the Redis bucket they were granted in */
	uint64_t unreported;	/* requests since the last sync */
	uint64_t sent_requests; /* what the sync in flight carries, to send again */
	uint64_t sent_want;	/* after a NOSCRIPT (Redis restarted, or flushed) */
	uint64_t sent_back;	/* tokens held when it was sent, handed back */
	long long sent_epoch;
	/* Retries made with tokens handed back while the sync was out, that
	 * the reply's grant did not cover, or whose sync went unanswered:
	 * Redis has not counted them, the next sync reports them. */
	uint64_t owed;
	uint64_t sent_owed;
	struct fleet_route *next;
};

struct fleet_lookup {
	struct fleet *fleet;
	struct name_lookup *request;	   /* while its question is out */
	struct evutil_addrinfo *addresses; /* its answer (dns_addresses_add()); NULL for none */
	int error;			   /* DNS_ERR_* (or NAME_LOOKUP_NOT_ASKED) when it failed */
	bool done;
};

struct fleet {
	struct event_base *base;
	struct name_resolver resolver; /* hosts file, nameservers, search list */
	bool absolute;		       /* written with a trailing dot: no search list */
	char *redis;		       /* as written, for log lines */
	char *host;		       /* NULL for a unix socket */
	char *lookup; /* host as the resolver is asked it: normalised, no trailing dot */
	uint16_t port;
	char *socket;
	char *name;
	char *username; /* AUTH username password, or AUTH password; NULL: no AUTH */
	char *password;
	uint64_t sync_interval_ms;
	uint64_t reply_timeout_ms;
	enum fleet_state state;
	redisAsyncContext *ac; /* the connection in use, or NULL */
	/* the reply reader's functions: hiredis's own, and those the
	 * connection's reader calls, which refuse an unrequested reply */
	const redisReplyObjectFunctions *hiredis_replies;
	redisReplyObjectFunctions replies;
	bool unrequested; /* the connection got one, and is dropped for it */
	bool met_itself;  /* its connect met itself: refused once hiredis returns */
	struct fleet_lookup lookups[FLEET_LOOKUPS];
	struct event *resolution_delay; /* from the first answer with addresses */
	bool resolving_inline;		/* inside name_lookup_start(), which may answer at once */
	char sha[41];			/* the script's SHA1, as SCRIPT LOAD said */
	struct event *sync_timer;	/* every sync_interval */
	struct event *deadline;		/* the connect or the sync round in flight */
	struct event *reconnect;	/* the backoff before the next connect */
	struct event *keepalive;	/* a PING after FLEET_KEEPALIVE_MS without a sync */
	uint64_t backoff_ms;
	/* A name's addresses for the connect under way, in the order they are
	 * tried (RFC 8305's: the families alternate, IPv6 first): one whose
	 * connect fails hands over to the next at once, and Redis counts as
	 * down only when none is left. None for an address or a socket. */
	char (*addresses)[INET6_ADDRSTRLEN];
	unsigned address_count;
	unsigned address_next;		 /* the next of them to try */
	char address_failures[320];	 /* "address: why; ..." of those tried */
	unsigned address_turn;		 /* shifts the order: the next connect starts after
					  * the address the last one ended on */
	unsigned pending;		 /* replies the sync round in flight still awaits */
	bool down_logged;		 /* "local budgets" was said; said again only after an up */
	bool send_failed_logged;	 /* a sync could not be queued, and that was said */
	bool unqueued;			 /* the latest round left a route's sync unqueued: its
					  * budget is local, and the fleet not connected for it */
	char *short_windows_said;	 /* the routes last warned about for a window under
					  * four sync intervals, as listed; NULL: none */
	uint64_t reasons[FLEET_REASONS]; /* why it is down, each warned once: hashes */
	unsigned reasons_said;
	struct retry_rng rng;
	struct fleet_route *routes;
	struct name_index *route_index; /* the routes by name and window */
};

static void fleet_connect(struct fleet *fleet);
static void fleet_open(struct fleet *fleet, const char *address);
static void fleet_reply_cb(redisAsyncContext *ac, void *r, void *privdata);
static void fleet_up(struct fleet *fleet);
static void fleet_lookups_end(struct fleet *fleet);
static void fleet_route_free(struct fleet_route *fr);

/* Arm the deadline for what was just sent. */
static void fleet_arm_deadline(struct fleet *fleet)
{
	struct timeval tv = timeval_from_ms(fleet->reply_timeout_ms);

	evtimer_add(fleet->deadline, &tv);
}

/* Tokens of the lease handed back that were spent while the sync was out. */
static uint64_t fleet_route_spent_in_flight(const struct fleet_route *fr)
{
	return fr->sent_back > fr->tokens ? fr->sent_back - fr->tokens : 0;
}

/* A sync that got no usable answer: Redis may or may not have run it, so
 * what it reported as owed, and the tokens it handed back that were spent
 * since, are owed again. Counting them twice errs on the strict side;
 * missing them would let the fleet overspend. Taken once: a second call
 * for the same sync (fleet_lost, then its callback) adds nothing. */
static void fleet_route_unanswered(struct fleet_route *fr)
{
	fr->owed += fr->sent_owed + fleet_route_spent_in_flight(fr);
	fr->sent_owed = 0;
	fr->sent_back = 0;
}

/* Whether this reason for Redis being unusable was warned about since the
 * fleet went down; noted if not. Reasons are kept as hashes; past
 * FLEET_REASONS of them, the rest count as said (a debug line each). */
static bool fleet_reason_said(struct fleet *fleet, const char *why)
{
	uint64_t hash = hash_string(why);

	for (unsigned i = 0; i < fleet->reasons_said; i++)
		if (fleet->reasons[i] == hash)
			return true;
	if (fleet->reasons_said == FLEET_REASONS)
		return true;
	fleet->reasons[fleet->reasons_said++] = hash;
	return false;
}

/* Redis cannot be used: drop the connection (unless hiredis is freeing it
 * already) and the leases, let the local budgets decide, say so once, and
 * try again after a backoff. */
static void fleet_lost(struct fleet *fleet, const char *why, bool free_connection)
{
	redisAsyncContext *ac = fleet->ac;
	struct timeval tv;
	uint64_t wait;

	fleet->ac = NULL;
	if (ac != NULL && free_connection)
		redisAsyncFree(ac);
	/* A free from inside a reply callback is put off until it returns, and
	 * with it the other routes' callbacks: what their syncs owe is taken
	 * now, while the tokens they handed back are still known. */
	for (struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next)
		if (fr->in_flight)
			fleet_route_unanswered(fr);
	/* a dropped route's last sync cannot go: its lease is void now */
	for (struct fleet_route **p = &fleet->routes; *p != NULL;) {
		struct fleet_route *fr = *p;

		if (fr->closing && !fr->in_flight) {
			*p = fr->next;
			fleet_route_free(fr);
			continue;
		}
		p = &fr->next;
	}
	fleet_lookups_end(fleet);
	evtimer_del(fleet->deadline);
	evtimer_del(fleet->keepalive);
	fleet->pending = 0;
	fleet->unqueued = false;
	for (struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next) {
		fr->tokens = 0;
		fr->leased = false;
	}
	if (!fleet->down_logged) {
		log_warn("fleet %s: redis %s: %s; retry budgets are local until it answers",
			 fleet->name, fleet->redis, why);
		fleet->reasons_said = 0;
		fleet_reason_said(fleet, why);
	} else if (!fleet_reason_said(fleet, why)) {
		/* another reason (refused, then NOAUTH): the operator's fix
		 * changes with it */
		log_warn("fleet %s: redis %s: %s; retry budgets are still local", fleet->name,
			 fleet->redis, why);
	} else {
		log_debug("fleet %s: redis %s: %s", fleet->name, fleet->redis, why);
	}
	fleet->down_logged = true;
	fleet->state = FLEET_WAITING;
	wait = fleet->backoff_ms + retry_rng_uniform(&fleet->rng, fleet->backoff_ms / 2);
	fleet->backoff_ms *= 2;
	if (fleet->backoff_ms > FLEET_RECONNECT_MAX_MS)
		fleet->backoff_ms = FLEET_RECONNECT_MAX_MS;
	tv = timeval_from_ms(wait);
	evtimer_add(fleet->reconnect, &tv);
}

/* Connect to the name's next address. */
static void fleet_open_next(struct fleet *fleet)
{
	/* one that Redis refused to work with (AUTH, a replica) is not taken
	 * first again: the next connect starts after it */
	fleet->address_turn++;
	fleet_open(fleet, fleet->addresses[fleet->address_next++]);
}

/* A connect to one address failed (refused, unreachable, not answered in
 * time): the name's next address is tried at once, as an upstream's
 * would be; when every one failed, Redis is down, for all their reasons.
 * The connection is gone already. */
static void fleet_connect_failed(struct fleet *fleet, const char *why)
{
	char *failures = fleet->address_failures;
	size_t len = strlen(failures);
	char all[sizeof(fleet->address_failures) + 32];

	if (fleet->address_count <= 1) {
		fleet_lost(fleet, why, false);
		return;
	}
	snprintf(failures + len, sizeof(fleet->address_failures) - len, "%s%s: %s",
		 len > 0 ? "; " : "", fleet->addresses[fleet->address_next - 1], why);
	if (fleet->address_next < fleet->address_count) {
		log_debug("fleet %s: redis %s: %s: %s; trying the next address", fleet->name,
			  fleet->redis, fleet->addresses[fleet->address_next - 1], why);
		fleet_open_next(fleet);
		return;
	}
	snprintf(all, sizeof(all), "every address failed: %s", failures);
	fleet_lost(fleet, all, false);
}

/* The reconnect backoff passed. */
static void fleet_reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	fleet_connect(arg);
}

/* Nothing came back in time: a frozen or overloaded Redis. */
static void fleet_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fleet *fleet = arg;
	redisAsyncContext *ac = fleet->ac;
	char why[96];

	snprintf(why, sizeof(why), "no answer within %llu ms",
		 (unsigned long long)fleet->reply_timeout_ms);
	if (fleet->met_itself && ac != NULL) {
		fleet->met_itself = false;
		fleet->ac = NULL;
		redisAsyncFree(ac);
		fleet_connect_failed(fleet, strerror(ECONNREFUSED));
		return;
	}
	if (fleet->state == FLEET_CONNECTING && ac != NULL && !(ac->c.flags & REDIS_CONNECTED)) {
		/* the address never answered the connect: another may */
		fleet->ac = NULL;
		redisAsyncFree(ac);
		fleet_connect_failed(fleet, why);
		return;
	}
	fleet_lost(fleet, why, true);
}

/* hiredis would not queue a route's sync (out of memory, or the
 * connection going away): Redis ran nothing of it, so its requests and the
 * retries it owed wait for the next sync. The tokens it held are dropped,
 * not handed back (counted as granted: the strict side), so that none is
 * spent past its sync interval; the local budget decides for the route
 * until a sync answers. Said once until a sync is queued again. */
static void fleet_route_unsent(struct fleet_route *fr)
{
	struct fleet *fleet = fr->fleet;

	fr->unreported += fr->sent_requests;
	fr->owed += fr->sent_owed;
	fr->sent_requests = 0;
	fr->sent_owed = 0;
	fr->sent_back = 0;
	fr->tokens = 0;
	fr->leased = false;
	fleet->unqueued = true;
	if (!fleet->send_failed_logged)
		log_warn("fleet %s: redis %s: cannot queue the sync of route %s (%s); its counts "
			 "wait for the next sync, its budget is local until then",
			 fleet->name, fleet->redis, fr->route,
			 fleet->ac != NULL && fleet->ac->errstr[0] != '\0' ? fleet->ac->errstr
									   : "out of memory");
	fleet->send_failed_logged = true;
}

/* Send one route's sync: its requests since the last, and the tokens it
 * wants. EVALSHA normally; EVAL with the script's text after a NOSCRIPT,
 * which also caches it again. False when it could not be queued. */
static bool fleet_route_send(struct fleet_route *fr, bool with_text)
{
	struct fleet *fleet = fr->fleet;
	char requests[24], want[24], ratio[32], floor[32], window[24], back[24], epoch[24],
		owed[24];
	const char *argv[] = { with_text ? "EVAL" : "EVALSHA",
			       with_text ? fleet_lease_script : fleet->sha,
			       "1",
			       fr->key,
			       requests,
			       want,
			       ratio,
			       floor,
			       window,
			       back,
			       epoch,
			       owed };

	snprintf(requests, sizeof(requests), "%llu", (unsigned long long)fr->sent_requests);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)fr->sent_want);
	snprintf(ratio, sizeof(ratio), "%.17g", fr->ratio);
	snprintf(floor, sizeof(floor), "%.17g", fr->min_per_second);
	snprintf(window, sizeof(window), "%llu", (unsigned long long)fr->window_ms);
	snprintf(back, sizeof(back), "%llu", (unsigned long long)fr->sent_back);
	snprintf(epoch, sizeof(epoch), "%lld", fr->sent_epoch);
	snprintf(owed, sizeof(owed), "%llu", (unsigned long long)fr->sent_owed);
	if (redisAsyncCommandArgv(fleet->ac, fleet_reply_cb, fr,
				  (int)(sizeof(argv) / sizeof(argv[0])), argv, NULL) != REDIS_OK) {
		fleet_route_unsent(fr);
		return false;
	}
	fleet->send_failed_logged = false;
	fr->in_flight = true;
	return true;
}

static void fleet_route_free(struct fleet_route *fr)
{
	name_index_remove(fr->fleet->route_index, fr->route, fr->window_ms);
	free(fr->route);
	free(fr->key);
	free(fr);
}

/* Unlink and free a lease a reload dropped. */
static void fleet_route_drop(struct fleet *fleet, struct fleet_route *fr)
{
	for (struct fleet_route **p = &fleet->routes; *p != NULL; p = &(*p)->next) {
		if (*p == fr) {
			*p = fr->next;
			break;
		}
	}
	fleet_route_free(fr);
}

/* One reply of the round in flight is in; the last ends the round, and the
 * first round to end makes the fleet connected. */
static void fleet_round_answered(struct fleet *fleet)
{
	if (fleet->pending > 0 && --fleet->pending == 0) {
		evtimer_del(fleet->deadline);
		if (fleet->state == FLEET_TRYING)
			fleet_up(fleet);
	}
}

/* Every live route's sync, sent together; one deadline covers them.
 * Whether every one was queued. */
static bool fleet_sync_round(struct fleet *fleet)
{
	bool all = true;
	bool was_unqueued = fleet->unqueued;

	fleet->unqueued = false;

	for (struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next) {
		uint64_t asked = fr->asked;

		if (!fr->live && !(fr->closing && !fr->in_flight))
			continue;
		fr->sent_requests = fr->unreported;
		/* a dropped route's last sync wants nothing; its reply drops it */
		fr->sent_want =
			fr->live ? fleet_lease_target(fr->ratio, fr->unreported, fr->asked) : 0;
		fr->asked = 0;
		fr->sent_back = fr->tokens;
		fr->sent_epoch = fr->grant_epoch;
		fr->sent_owed = fr->owed;
		fr->owed = 0;
		fr->unreported = 0;
		if (!fleet_route_send(fr, false)) {
			/* the demand it reported is still to be reported */
			fr->asked = asked;
			all = false;
			continue;
		}
		fleet->pending++;
	}
	if (all && was_unqueued)
		log_info("fleet %s: redis %s: the syncs are queued again; retry budgets are the "
			 "fleet's once they answer",
			 fleet->name, fleet->redis);
	if (fleet->pending > 0) {
		struct timeval tv = timeval_from_ms(FLEET_KEEPALIVE_MS);

		fleet_arm_deadline(fleet);
		evtimer_add(fleet->keepalive, &tv);
	}
	return all;
}

/* A sync's reply holds a grant and its bucket. */
static bool fleet_reply_usable(const redisReply *reply)
{
	return reply->type == REDIS_REPLY_ARRAY && reply->elements >= 4 &&
	       reply->element[0]->type == REDIS_REPLY_INTEGER &&
	       reply->element[3]->type == REDIS_REPLY_INTEGER;
}

/* A route's sync answered: {granted, requests in the window, retries
 * granted in the window, the bucket}. The grant replaces the lease handed
 * back; tokens of it spent while the round was out are taken off the new
 * one, since Redis took them back. */
static void fleet_reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct fleet_route *fr = privdata;
	struct fleet *fleet = fr->fleet;
	redisReply *reply = r;
	uint64_t granted, spent;
	/* NULL: the connection is going away, and whoever drops it says why */
	bool current = reply != NULL && ac == fleet->ac &&
		       (fleet->state == FLEET_CONNECTED || fleet->state == FLEET_TRYING);

	fr->in_flight = false;
	/* the script was not run (Redis restarted, or its scripts were
	 * flushed): sent again with its text, a dropped route's last sync too,
	 * which hands its lease back and reports what it owes */
	if (current && reply->type == REDIS_REPLY_ERROR &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0) {
		if (fleet_route_send(fr, true))
			return;
		/* not run, and not sent again: its counts wait for the next
		 * round (a dropped route's last sync is sent with it) */
		if (!fr->live)
			fr->closing = true;
		fleet_round_answered(fleet);
		return;
	}
	if (!fr->live && (!current || fr->sent_want == 0 || !fleet_reply_usable(reply))) {
		/* the route's last sync, or one that went unanswered: the
		 * lease goes now */
		fleet_route_drop(fleet, fr);
		if (current)
			fleet_round_answered(fleet);
		return;
	}
	if (!current) {
		fleet_route_unanswered(fr);
		return;
	}
	if (!fleet_reply_usable(reply)) {
		/* the key named: an error may be this key's alone (WRONGTYPE:
		 * another program's key of the same name), which only the
		 * operator can delete */
		char why[512];

		snprintf(why, sizeof(why), "key %s: %s", fr->key,
			 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		fleet_route_unanswered(fr);
		fleet_lost(fleet, why, true);
		return;
	}
	granted = reply->element[0]->integer > 0 ? (uint64_t)reply->element[0]->integer : 0;
	spent = fleet_route_spent_in_flight(fr);
	if (granted >= spent) {
		fr->tokens = granted - spent;
	} else {
		fr->tokens = 0;
		fr->owed += spent - granted;
	}
	fr->grant_epoch = reply->element[3]->integer;
	fr->leased = true;
	/* a reload dropped the route while this was out: its last sync, with
	 * the next round, hands this grant back and reports what came since */
	if (!fr->live)
		fr->closing = true;
	log_debug("fleet %s: route %s: reported %llu requests, granted %lld of %llu tokens",
		  fleet->name, fr->route, (unsigned long long)fr->sent_requests,
		  reply->element[0]->integer, (unsigned long long)fr->sent_want);
	fleet_round_answered(fleet);
}

/* A PING's answer: nothing to do with it (a frozen Redis is found by the
 * syncs' deadline). */
static void fleet_ping_cb(redisAsyncContext *ac, void *r, void *privdata)
{
}

/* No sync for FLEET_KEEPALIVE_MS: a PING, so that Redis does not take the
 * connection for idle, and again after as long. */
static void fleet_keepalive_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fleet *fleet = arg;
	struct timeval tv = timeval_from_ms(FLEET_KEEPALIVE_MS);

	if (fleet->state != FLEET_CONNECTED || fleet->ac == NULL)
		return;
	(void)redisAsyncCommand(fleet->ac, fleet_ping_cb, NULL, "PING");
	evtimer_add(fleet->keepalive, &tv);
}

/* Every sync_interval: a new round, unless the last is still out (its
 * deadline decides about that one). */
static void fleet_sync_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fleet *fleet = arg;

	if (fleet->state == FLEET_CONNECTED && fleet->pending == 0)
		(void)fleet_sync_round(fleet);
}

/* A whole sync round answered: the fleet decides from now on. Only now is
 * Redis known to work, so only now is the backoff reset and a later
 * failure worth a new warning. */
static void fleet_up(struct fleet *fleet)
{
	fleet->state = FLEET_CONNECTED;
	fleet->backoff_ms = FLEET_RECONNECT_FIRST_MS;
	if (fleet->down_logged)
		log_info("fleet %s: redis %s answers again; retry budgets are the fleet's",
			 fleet->name, fleet->redis);
	else
		log_info("fleet %s: connected to redis %s", fleet->name, fleet->redis);
	fleet->down_logged = false;
}

/* The script is loaded: try a first sync round. Counts from before are
 * dropped (they were the local budget's), and so are old leases; retries
 * owed stay, since they were spent from leases Redis may not count. A
 * round that fails counts as a failed connect. */
static void fleet_try(struct fleet *fleet)
{
	evtimer_del(fleet->deadline);
	fleet->state = FLEET_TRYING;
	for (struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next) {
		fr->tokens = 0;
		fr->leased = false;
		fr->unreported = 0;
		fr->asked = 0;
	}
	if (!fleet_sync_round(fleet) && fleet->pending == 0)
		fleet_lost(fleet, "cannot queue a sync", true);
	else if (fleet->pending == 0)
		fleet_up(fleet);
}

/* SCRIPT LOAD answered with the script's SHA1. */
static void fleet_script_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct fleet *fleet = privdata;
	redisReply *reply = r;

	if (reply == NULL || ac != fleet->ac)
		return;
	if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
		fleet_lost(fleet,
			   reply->type == REDIS_REPLY_ERROR ? reply->str
							    : "unexpected reply to SCRIPT LOAD",
			   true);
		return;
	}
	memcpy(fleet->sha, reply->str, 40);
	fleet->sha[40] = '\0';
	fleet_try(fleet);
}

/* Load the script: the first command once logged in. Each step of a
 * connect (the connection, AUTH, SCRIPT LOAD) has its own deadline: one
 * for all three would give up on a Redis that answers each in time. */
static void fleet_load_script(struct fleet *fleet)
{
	fleet_arm_deadline(fleet);
	redisAsyncCommand(fleet->ac, fleet_script_cb, fleet, "SCRIPT LOAD %s", fleet_lease_script);
}

/* AUTH answered: OK, or why not (WRONGPASS, or a Redis with no password
 * set). The reply names no password, so it may be logged. */
static void fleet_auth_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct fleet *fleet = privdata;
	redisReply *reply = r;
	char why[160];

	if (reply == NULL || ac != fleet->ac)
		return;
	if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0) {
		fleet_load_script(fleet);
		return;
	}
	snprintf(why, sizeof(why), "AUTH refused: %s",
		 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
	fleet_lost(fleet, why, true);
}

/* The connection is made, or failed (then hiredis frees it). */
static void fleet_connect_cb(const redisAsyncContext *c, int status)
{
	struct fleet *fleet = c->data;
	const char *argv[3] = { "AUTH" };
	size_t argc = 1;

	if (c != fleet->ac)
		return;
	if (status != REDIS_OK) {
		fleet->ac = NULL;
		fleet_connect_failed(fleet, c->errstr[0] != '\0' ? c->errstr : "cannot connect");
		return;
	}
	/* nothing listens where a connect met itself: a refusal, not a Redis
	 * whose replies are its own commands. hiredis goes on with the
	 * connection once this returns: it is dropped from the loop */
	if (fleet->socket == NULL && conn_self_connected(c->c.fd)) {
		struct timeval now = { 0, 0 };

		fleet->met_itself = true;
		evtimer_add(fleet->deadline, &now);
		return;
	}
	if (fleet->password == NULL) {
		fleet_load_script(fleet);
		return;
	}
	/* as arguments, not a format: a password may hold any byte but NUL */
	if (fleet->username != NULL)
		argv[argc++] = fleet->username;
	argv[argc++] = fleet->password;
	fleet_arm_deadline(fleet);
	redisAsyncCommandArgv(fleet->ac, fleet_auth_cb, fleet, (int)argc, argv, NULL);
}

/* Redis closed the connection, or it broke; hiredis frees it. One we
 * dropped ourselves is no longer fleet->ac. */
static void fleet_disconnect_cb(const redisAsyncContext *c, int status)
{
	struct fleet *fleet = c->data;

	if (c != fleet->ac)
		return;
	fleet->ac = NULL;
	if (fleet->unrequested)
		fleet_lost(fleet, "an unrequested reply (not Redis, or a proxy in front of it?)",
			   false);
	else
		fleet_lost(fleet,
			   c->err != 0 && c->errstr[0] != '\0' ? c->errstr : "connection closed",
			   false);
}

/* hiredis's own functions for the reply whose top level the reader is
 * building now, if it was asked for, else NULL. hiredis 0.14 asserts,
 * aborting the process, on a reply that is not an error when no command
 * waits for one (a Redis proxy, or a server that speaks RESP, sending one
 * of its own): refused here, the reader fails and hiredis drops the
 * connection as for any bad reply. An error it handles itself (it drops
 * the connection naming the error). */
static const redisReplyObjectFunctions *fleet_reply_functions(const redisReadTask *task)
{
	redisAsyncContext *ac = task->privdata;
	struct fleet *fleet = ac->data;

	if (task->parent != NULL || ac->replies.head != NULL || task->type == REDIS_REPLY_ERROR)
		return fleet->hiredis_replies;
	fleet->unrequested = true;
	return NULL;
}

static void *fleet_reply_string(const redisReadTask *task, char *str, size_t len)
{
	const redisReplyObjectFunctions *fn = fleet_reply_functions(task);

	return fn != NULL ? fn->createString(task, str, len) : NULL;
}

static void *fleet_reply_array(const redisReadTask *task, int elements)
{
	const redisReplyObjectFunctions *fn = fleet_reply_functions(task);

	return fn != NULL ? fn->createArray(task, elements) : NULL;
}

static void *fleet_reply_integer(const redisReadTask *task, long long value)
{
	const redisReplyObjectFunctions *fn = fleet_reply_functions(task);

	return fn != NULL ? fn->createInteger(task, value) : NULL;
}

static void *fleet_reply_nil(const redisReadTask *task)
{
	const redisReplyObjectFunctions *fn = fleet_reply_functions(task);

	return fn != NULL ? fn->createNil(task) : NULL;
}

/* Connect to a numeric address (or the socket); hiredis resolves nothing
 * then, so this does not block. */
static void fleet_open(struct fleet *fleet, const char *address)
{
	redisAsyncContext *ac;
	char why[160];

	if (fleet->socket != NULL)
		ac = redisAsyncConnectUnix(fleet->socket);
	else
		ac = redisAsyncConnect(address, fleet->port);
	if (ac == NULL || ac->err != 0) {
		snprintf(why, sizeof(why), "cannot connect: %s",
			 ac != NULL ? ac->errstr : "out of memory");
		if (ac != NULL)
			redisAsyncFree(ac);
		fleet_connect_failed(fleet, why);
		return;
	}
	ac->data = fleet;
	/* the same functions for every reader: hiredis's defaults */
	fleet->hiredis_replies = ac->c.reader->fn;
	fleet->replies = *ac->c.reader->fn;
	fleet->replies.createString = fleet_reply_string;
	fleet->replies.createArray = fleet_reply_array;
	fleet->replies.createInteger = fleet_reply_integer;
	fleet->replies.createNil = fleet_reply_nil;
	ac->c.reader->fn = &fleet->replies;
	ac->c.reader->privdata = ac;
	fleet->unrequested = false;
	fleet->met_itself = false;
	redisLibeventAttach(ac, fleet->base);
	redisAsyncSetConnectCallback(ac, fleet_connect_cb);
	redisAsyncSetDisconnectCallback(ac, fleet_disconnect_cb);
	fleet->ac = ac;
	fleet->state = FLEET_CONNECTING;
	fleet_arm_deadline(fleet);
}

/* Cancel the lookups still running, free their answers and the delay. */
static void fleet_lookups_end(struct fleet *fleet)
{
	for (size_t i = 0; i < FLEET_LOOKUPS; i++) {
		struct fleet_lookup *l = &fleet->lookups[i];

		name_lookup_cancel(l->request);
		l->request = NULL;
		dns_addresses_free(l->addresses);
		l->addresses = NULL;
		l->done = false;
		l->error = 0;
	}
	evtimer_del(fleet->resolution_delay);
}

/* Connect to the answers' addresses one after another (IPv6 first, the
 * families alternating), or say the name did not resolve. */
static void fleet_resolved(struct fleet *fleet)
{
	const struct fleet_lookup *v4 = &fleet->lookups[FLEET_LOOKUP_V4];
	const struct fleet_lookup *v6 = &fleet->lookups[FLEET_LOOKUP_V6];
	struct evutil_addrinfo **answers;
	struct evutil_addrinfo *ai;
	size_t *order;
	int *families;
	char why[160];
	unsigned count = 0;

	for (size_t i = 0; i < FLEET_LOOKUPS; i++)
		for (ai = fleet->lookups[i].addresses; ai != NULL; ai = ai->ai_next)
			count++;
	if (count == 0) {
		/* in an upstream's 502's words */
		snprintf(why, sizeof(why), "cannot resolve %s: %s", fleet->host,
			 name_lookup_failure(v4->error, v6->error));
		fleet_lookups_end(fleet);
		fleet_lost(fleet, why, false);
		return;
	}
	answers = xcalloc(count, sizeof(*answers));
	families = xcalloc(count, sizeof(*families));
	order = xcalloc(count, sizeof(*order));
	count = 0;
	for (size_t i = 0; i < FLEET_LOOKUPS; i++)
		for (ai = fleet->lookups[i].addresses; ai != NULL; ai = ai->ai_next) {
			answers[count] = ai;
			families[count++] = ai->ai_family;
		}
	happy_eyeballs_order(families, count, fleet->address_turn, order);
	free(fleet->addresses);
	fleet->addresses = xcalloc(count, sizeof(*fleet->addresses));
	for (unsigned i = 0; i < count; i++) {
		const struct evutil_addrinfo *pick = answers[order[i]];
		const void *in;

		if (pick->ai_family == AF_INET6)
			in = &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr;
		else
			in = &((const struct sockaddr_in *)pick->ai_addr)->sin_addr;
		evutil_inet_ntop(pick->ai_family, in, fleet->addresses[i],
				 sizeof(fleet->addresses[i]));
	}
	free(order);
	free(families);
	free(answers);
	fleet->address_count = count;
	fleet->address_next = 0;
	fleet->address_failures[0] = '\0';
	fleet_lookups_end(fleet);
	fleet_open_next(fleet);
}

/* Connect once both lookups ended, or once one has addresses and the
 * resolution delay passed without the other. */
static void fleet_resolution_step(struct fleet *fleet)
{
	const struct fleet_lookup *v4 = &fleet->lookups[FLEET_LOOKUP_V4];
	const struct fleet_lookup *v6 = &fleet->lookups[FLEET_LOOKUP_V6];
	struct timeval tv = timeval_from_ms(FLEET_RESOLUTION_DELAY_MS);

	if (v4->done && v6->done)
		fleet_resolved(fleet);
	else if ((v4->addresses != NULL || v6->addresses != NULL) &&
		 !evtimer_pending(fleet->resolution_delay, NULL))
		evtimer_add(fleet->resolution_delay, &tv);
}

/* One family's answer (or failure), without blocking the loop. */
static void fleet_resolved_cb(struct evutil_addrinfo *addresses, int error, uint64_t ttl_ms,
			      void *arg)
{
	struct fleet_lookup *l = arg;

	/* resolved again at every connect: the TTL plays no part */
	(void)ttl_ms;
	l->request = NULL;
	l->done = true;
	l->error = error;
	l->addresses = addresses; /* NULL when the hosts file has the other family only */
	/* answered inside name_lookup_start(): fleet_connect goes on */
	if (!l->fleet->resolving_inline)
		fleet_resolution_step(l->fleet);
}

/* The other family did not answer within the resolution delay. */
static void fleet_resolution_delay_cb(evutil_socket_t fd, short what, void *arg)
{
	fleet_resolved(arg);
}

/* Whether host is an IPv4 or IPv6 address, which needs no resolving. */
static bool fleet_is_numeric(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return evutil_inet_pton(AF_INET, host, buf) == 1 ||
	       evutil_inet_pton(AF_INET6, host, buf) == 1;
}

/* Start a connection: to the socket, the address, or what the name
 * resolves to. */
static void fleet_connect(struct fleet *fleet)
{
	static const int families[FLEET_LOOKUPS] = {
		[FLEET_LOOKUP_V6] = AF_INET6, [FLEET_LOOKUP_V4] = AF_INET
	};

	fleet->address_count = 0;
	if (fleet->socket != NULL || fleet_is_numeric(fleet->host)) {
		fleet_open(fleet, fleet->host);
		return;
	}
	/* No deadline here: a resolver's own timeouts end a lookup, and one
	 * that takes seconds (a slow DNS server) would be cut off at every
	 * attempt, and the fleet never connect. */
	fleet->state = FLEET_RESOLVING;
	fleet->resolving_inline = true;
	for (size_t i = 0; i < FLEET_LOOKUPS; i++) {
		struct fleet_lookup *l = &fleet->lookups[i];

		/* NULL when answered at once (the callback ran already) */
		l->request = name_lookup_start(&fleet->resolver, fleet->lookup, fleet->absolute,
					       families[i], fleet->port, fleet_resolved_cb, l);
	}
	fleet->resolving_inline = false;
	fleet_resolution_step(fleet);
}

struct fleet *fleet_new(struct event_base *base, const struct name_resolver *resolver,
			const struct fleet_config *config)
{
	struct fleet *fleet = xcalloc(1, sizeof(*fleet));
	struct timeval tv = timeval_from_ms(config->sync_interval_ms);

	fleet->base = base;
	if (resolver != NULL)
		fleet->resolver = *resolver;
	fleet->redis = xstrdup(config->redis);
	if (config->redis_host != NULL) {
		size_t written = strlen(config->redis_host), len;

		fleet->host = xstrdup(config->redis_host);
		/* as an upstream's host: what normalising leaves is asked, and a
		 * trailing dot it drops makes the name absolute (no search list) */
		fleet->lookup = xstrdup(config->redis_host);
		len = upstream_host_normalise(fleet->lookup, written);
		fleet->lookup[len] = '\0';
		fleet->absolute = len < written;
	}
	fleet->port = config->redis_port;
	fleet->socket = config->redis_socket != NULL ? xstrdup(config->redis_socket) : NULL;
	fleet->name = xstrdup(config->name);
	fleet->username = config->username != NULL ? xstrdup(config->username) : NULL;
	fleet->password = config->password != NULL ? xstrdup(config->password) : NULL;
	fleet->sync_interval_ms = config->sync_interval_ms;
	fleet->reply_timeout_ms = 2 * config->sync_interval_ms;
	if (fleet->reply_timeout_ms < FLEET_REPLY_TIMEOUT_MIN_MS)
		fleet->reply_timeout_ms = FLEET_REPLY_TIMEOUT_MIN_MS;
	fleet->backoff_ms = FLEET_RECONNECT_FIRST_MS;
	retry_rng_seed(&fleet->rng);
	fleet->sync_timer = event_new(base, -1, EV_PERSIST, fleet_sync_cb, fleet);
	fleet->deadline = evtimer_new(base, fleet_deadline_cb, fleet);
	fleet->reconnect = evtimer_new(base, fleet_reconnect_cb, fleet);
	fleet->keepalive = evtimer_new(base, fleet_keepalive_cb, fleet);
	fleet->resolution_delay = evtimer_new(base, fleet_resolution_delay_cb, fleet);
	fleet->route_index = name_index_new(0);
	for (size_t i = 0; i < FLEET_LOOKUPS; i++)
		fleet->lookups[i].fleet = fleet;
	evtimer_add(fleet->sync_timer, &tv);
	fleet_connect(fleet);
	return fleet;
}

void fleet_free(struct fleet *fleet)
{
	redisAsyncContext *ac;

	if (fleet == NULL)
		return;
	event_free(fleet->sync_timer);
	event_free(fleet->deadline);
	event_free(fleet->reconnect);
	event_free(fleet->keepalive);
	fleet_lookups_end(fleet);
	event_free(fleet->resolution_delay);
	/* pending replies are called back with NULL while the routes still
	 * exist: dropped routes go then, the others below */
	ac = fleet->ac;
	fleet->ac = NULL;
	if (ac != NULL)
		redisAsyncFree(ac);
	while (fleet->routes != NULL) {
		struct fleet_route *fr = fleet->routes;

		fleet->routes = fr->next;
		fleet_route_free(fr);
	}
	name_index_free(fleet->route_index);
	free(fleet->addresses);
	free(fleet->redis);
	free(fleet->short_windows_said);
	free(fleet->host);
	free(fleet->lookup);
	free(fleet->socket);
	free(fleet->username);
	if (fleet->password != NULL) {
		explicit_bzero(fleet->password, strlen(fleet->password));
		free(fleet->password);
	}
	free(fleet->name);
	free(fleet);
}

/* Two strings both NULL or equal. */
static bool fleet_same_text(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool fleet_same(const struct fleet *fleet, const struct fleet_config *config)
{
	/* a new password (the file rewritten, then SIGHUP) logs in again */
	return fleet_same_text(fleet->redis, config->redis) &&
	       fleet_same_text(fleet->name, config->name) &&
	       fleet->sync_interval_ms == config->sync_interval_ms &&
	       fleet_same_text(fleet->username, config->username) &&
	       fleet_same_text(fleet->password, config->password);
}

/* The lease of a route and window, live or not. */
static struct fleet_route *fleet_route_lookup(struct fleet *fleet, const char *route,
					      uint64_t window_ms)
{
	return name_index_find(fleet->route_index, route, window_ms);
}

/* Make a route's lease live with the budget it has now. */
static void fleet_route_take(struct fleet *fleet, const struct route *route)
{
	const struct retry_budget *budget = &route->retry.budget;
	struct fleet_route *fr = fleet_route_lookup(fleet, route->name, budget->window_ms);

	if (fr == NULL) {
		size_t size = strlen(fleet->name) + strlen(route->name) + 48;

		fr = xcalloc(1, sizeof(*fr));
		fr->fleet = fleet;
		fr->route = xstrdup(route->name);
		fr->window_ms = budget->window_ms;
		fr->key = xmalloc(size);
		snprintf(fr->key, size, "retryproxy:{%s}:%s:%llu", fleet->name, route->name,
			 (unsigned long long)budget->window_ms);
		fr->next = fleet->routes;
		fleet->routes = fr;
		name_index_add(fleet->route_index, fr->route, fr->window_ms, fr);
	}
	fr->live = true;
	fr->closing = false;
	fr->ratio = budget->ratio;
	fr->min_per_second = budget->min_per_second;
}

/* Append ", name (N ms)" (no comma first) to the list at *list, of *len
 * bytes. */
static void fleet_list_route(char **list, size_t *len, const struct route *route)
{
	char window[32];
	size_t add;

	snprintf(window, sizeof(window), " (%llu ms)",
		 (unsigned long long)route->retry.budget.window_ms);
	add = (*len > 0 ? 2 : 0) + strlen(route->name) + strlen(window);
	*list = xrealloc(*list, *len + add + 1);
	snprintf(*list + *len, add + 1, "%s%s%s", *len > 0 ? ", " : "", route->name, window);
	*len += add;
}

/* Counts reach Redis one interval late and leases cover two: against a
 * window shorter than four sync intervals the fleet decides on stale
 * counts. One warning names every such route, when a config brings a list
 * other than the one warned about last: not again at an unchanged reload. */
static void fleet_warn_short_windows(struct fleet *fleet, const struct config *config)
{
	char *list = NULL;
	size_t len = 0, count = 0;

	for (size_t i = 0; i <= config->route_count; i++) {
		const struct route *route =
			i == 0 ? &config->default_route : &config->routes[i - 1];

		if (fleet->sync_interval_ms * 4 > route->retry.budget.window_ms) {
			fleet_list_route(&list, &len, route);
			count++;
		}
	}
	if (list != NULL &&
	    (fleet->short_windows_said == NULL || strcmp(list, fleet->short_windows_said) != 0))
		log_warn("fleet %s: sync_interval %llu ms is more than a quarter of the budget "
			 "window of route%s %s; the fleet's counts lag behind %s",
			 fleet->name, (unsigned long long)fleet->sync_interval_ms,
			 count > 1 ? "s" : "", list, count > 1 ? "those windows" : "the window");
	free(fleet->short_windows_said);
	fleet->short_windows_said = list;
}

void fleet_set_routes(struct fleet *fleet, const struct config *config)
{
	for (struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next)
		fr->live = false;
	fleet_route_take(fleet, &config->default_route);
	for (size_t i = 0; i < config->route_count; i++)
		fleet_route_take(fleet, &config->routes[i]);
	fleet_warn_short_windows(fleet, config);
	/* leases of routes dropped go; one a reply in flight still names goes
	 * after it, as below when that reply grants a lease (no retry can
	 * spend the tokens it holds meanwhile). While connected, one with
	 * tokens, requests or retries Redis has not been told of goes after a
	 * last sync with the next round, which hands the tokens back and
	 * reports the rest: else its tokens would stay counted as granted for
	 * a window, and its retries owed never be. */
	for (struct fleet_route **p = &fleet->routes; *p != NULL;) {
		struct fleet_route *fr = *p;

		if (!fr->live && !fr->in_flight && fleet->state == FLEET_CONNECTED &&
		    (fr->tokens > 0 || fr->unreported > 0 || fr->owed > 0))
			fr->closing = true;
		if (fr->live || fr->in_flight || fr->closing) {
			p = &fr->next;
			continue;
		}
		*p = fr->next;
		fleet_route_free(fr);
	}
}

size_t fleet_routes_kept(const struct fleet *fleet)
{
	size_t n = 0;

	for (const struct fleet_route *fr = fleet->routes; fr != NULL; fr = fr->next)
		n++;
	return n;
}

bool fleet_connected(const struct fleet *fleet)
{
	/* a round hiredis would not queue (out of memory) left its routes to
	 * their local budgets, connection or not */
	return fleet->state == FLEET_CONNECTED && !fleet->unqueued;
}

struct fleet_route *fleet_route_find(struct fleet *fleet, const char *route, uint64_t window_ms)
{
	struct fleet_route *fr = fleet_route_lookup(fleet, route, window_ms);

	return fr != NULL && fr->live ? fr : NULL;
}

bool fleet_route_active(const struct fleet_route *fr)
{
	return fr->fleet->state == FLEET_CONNECTED && fr->leased;
}

bool fleet_route_allows(const struct fleet_route *fr)
{
	return fr->tokens > 0;
}

void fleet_route_note_refused(struct fleet_route *fr)
{
	/* the next lease asks for the demand the last one did not meet */
	if (fr->fleet->state == FLEET_CONNECTED)
		fr->asked++;
}

void fleet_route_note_request(struct fleet_route *fr)
{
	fr->unreported++;
}

void fleet_route_spend(struct fleet_route *fr)
{
	if (fr->fleet->state != FLEET_CONNECTED)
		return;
	fr->asked++;
	/* a retry the local budget allowed before the route's first lease
	 * came (a reload added it) is reported to Redis as spent */
	if (fr->tokens > 0)
		fr->tokens--;
	else
		fr->owed++;
}
