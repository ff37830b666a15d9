#include "admin_conns.h"

#include <stdbool.h>
#include <stdlib.h>

#include <event2/bufferevent.h>

#include "timeval.h"
#include "xmalloc.h"

/* How soon a closed connection's place is found free. evhttp tells nobody
 * when it lets go of a connection it accepted (a close callback exists
 * only where its own code already has the connection), so the count looks
 * at each connection's bufferevent: evhttp clears its callbacks when it
 * frees it, and a reference of ours keeps it readable until then. */
#define ADMIN_CONNS_CHECK_MS 250

/* Input a connection buffers at most, above the admin's largest request
 * (8 KiB of head, 4 KiB of body): it also bounds what reaches one evhttp
 * let go of in the time until the next check. */
#define ADMIN_CONNS_READ_MAX (64 * 1024)

struct admin_conns {
	struct bufferevent *open[ADMIN_CONNS_MAX];
	unsigned count;
	struct event *check; /* runs while any connection is open */
	void (*changed)(void *arg);
	void *arg;
};

/* Has evhttp let go of bev? A connection it serves has its callbacks set
 * from the accept to the free. */
static bool admin_conns_released(struct bufferevent *bev)
{
	bufferevent_data_cb readcb, writecb;
	bufferevent_event_cb eventcb;

	bufferevent_getcb(bev, &readcb, &writecb, &eventcb, NULL);
	return readcb == NULL && writecb == NULL && eventcb == NULL;
}

/* Drop the connections evhttp let go of; true when any was. */
static bool admin_conns_prune(struct admin_conns *conns)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < conns->count; i++) {
		if (admin_conns_released(conns->open[i]))
			bufferevent_decref(conns->open[i]);
		else
			conns->open[kept++] = conns->open[i];
	}
	if (kept == conns->count)
		return false;
	conns->count = kept;
	return true;
}

static void admin_conns_arm(struct admin_conns *conns)
{
	struct timeval tv = timeval_from_ms(ADMIN_CONNS_CHECK_MS);

	if (conns->count > 0 && !evtimer_pending(conns->check, NULL))
		evtimer_add(conns->check, &tv);
}

static void admin_conns_check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct admin_conns *conns = arg;

	if (admin_conns_prune(conns))
		conns->changed(conns->arg);
	admin_conns_arm(conns);
}

/* evhttp asks for the bufferevent of each connection it accepts (its
 * descriptor set by evhttp): counted, and held by a reference until evhttp
 * lets go of it. */
static struct bufferevent *admin_conns_bufferevent(struct event_base *base, void *arg)
{
	struct admin_conns *conns = arg;
	struct bufferevent *bev;

	admin_conns_prune(conns);
	/* the listener stops at the cap, so this is only a safeguard: an
	 * uncounted connection evhttp makes itself */
	if (conns->count == ADMIN_CONNS_MAX)
		return NULL;
	bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL)
		return NULL;
	bufferevent_setwatermark(bev, EV_READ, 0, ADMIN_CONNS_READ_MAX);
	bufferevent_incref(bev);
	conns->open[conns->count++] = bev;
	admin_conns_arm(conns);
	conns->changed(conns->arg);
	return bev;
}

struct admin_conns *admin_conns_new(struct event_base *base, struct evhttp *http,
				    void (*changed)(void *arg), void *arg)
{
	struct admin_conns *conns = xcalloc(1, sizeof(*conns));

	conns->check = evtimer_new(base, admin_conns_check_cb, conns);
	conns->changed = changed;
	conns->arg = arg;
	evhttp_set_bevcb(http, admin_conns_bufferevent, conns);
	return conns;
}

unsigned admin_conns_open(const struct admin_conns *conns)
{
	return conns->count;
}

void admin_conns_free(struct admin_conns *conns)
{
	if (conns == NULL)
		return;
	for (unsigned i = 0; i < conns->count; i++)
		bufferevent_decref(conns->open[i]);
	event_free(conns->check);
	free(conns);
}
