#include "tunnel.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "proxy.h"
#include "xmalloc.h"
#include "timeval.h"

/* Past this much unsent data toward one side, stop reading the other. */
#define TUNNEL_HIGH (256 * 1024)
#define TUNNEL_LOW (64 * 1024)

/* One direction of the tunnel. */
struct tunnel_side {
	struct tunnel *tunnel;
	struct bufferevent *bev;
	struct tunnel_side *peer;
	bool eof;        /* this side sent EOF */
};

struct tunnel {
	struct proxy *proxy;
	struct tunnel_side client;
	struct tunnel_side upstream;
	struct event *idle_timer;
	uint64_t idle_ms;
	LIST_ENTRY(tunnel) link;
};

static void tunnel_touch(struct tunnel *tunnel)
{
	struct timeval tv = timeval_from_ms(tunnel->idle_ms);

	evtimer_add(tunnel->idle_timer, &tv);
}

void tunnel_close(struct tunnel *tunnel)
{
	struct proxy *proxy = tunnel->proxy;

	LIST_REMOVE(tunnel, link);
	bufferevent_free(tunnel->client.bev);
	bufferevent_free(tunnel->upstream.bev);
	proxy->upstream_count--;
	event_free(tunnel->idle_timer);
	free(tunnel);
	proxy_connection_closed(proxy);
}

/* Close when both directions are finished: each side has sent EOF and what
 * it sent has been written to its peer. */
static void tunnel_maybe_close(struct tunnel *tunnel)
{
	struct tunnel_side *c = &tunnel->client;
	struct tunnel_side *u = &tunnel->upstream;

	if ((c->eof || u->eof) &&
	    evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(u->bev)) == 0)
		tunnel_close(tunnel);
}

/* Move what one side sent to the other; stop reading it while the other
 * side's output is full. */
static void tunnel_read_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel_side *side = arg;
	struct evbuffer *out = bufferevent_get_output(side->peer->bev);

	tunnel_touch(side->tunnel);
	evbuffer_add_buffer(out, bufferevent_get_input(bev));
	if (evbuffer_get_length(out) >= TUNNEL_HIGH)
		bufferevent_disable(bev, EV_READ);
}

/* A side's output drained: read from its peer again, or finish closing. */
static void tunnel_write_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel_side *side = arg;

	tunnel_touch(side->tunnel);
	if (side->peer->eof) {
		tunnel_maybe_close(side->tunnel);
		return;
	}
	bufferevent_enable(side->peer->bev, EV_READ);
}

static void tunnel_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct tunnel_side *side = arg;
	struct tunnel *tunnel = side->tunnel;

	if (what & BEV_EVENT_ERROR) {
		tunnel_close(tunnel);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* pass on what is left, then close once it is written: either
		 * side's close ends the tunnel */
		side->eof = true;
		evbuffer_add_buffer(bufferevent_get_output(side->peer->bev), bufferevent_get_input(bev));
		bufferevent_disable(bev, EV_READ);
		bufferevent_disable(side->peer->bev, EV_READ);
		bufferevent_setwatermark(side->peer->bev, EV_WRITE, 0, 0);
		tunnel_maybe_close(tunnel);
	}
}

static void tunnel_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel *tunnel = arg;

	log_debug("tunnel idle for tunnel_idle_timeout; closing");
	tunnel_close(tunnel);
}

/* Wire one side's callbacks and marks. */
static void tunnel_side_init(struct tunnel *tunnel, struct tunnel_side *side,
			     struct bufferevent *bev, struct tunnel_side *peer)
{
	side->tunnel = tunnel;
	side->bev = bev;
	side->peer = peer;
	bufferevent_setcb(bev, tunnel_read_cb, tunnel_write_cb, tunnel_event_cb, side);
	bufferevent_setwatermark(bev, EV_READ, 0, TUNNEL_HIGH);
	bufferevent_setwatermark(bev, EV_WRITE, TUNNEL_LOW, 0);
	bufferevent_set_timeouts(bev, NULL, NULL);
}

void tunnel_new(struct proxy *proxy, struct bufferevent *client, struct bufferevent *upstream,
		uint64_t idle_timeout_ms)
{
	struct tunnel *tunnel = xcalloc(1, sizeof(*tunnel));

	tunnel->proxy = proxy;
	tunnel->idle_ms = idle_timeout_ms;
	tunnel->idle_timer = evtimer_new(proxy->base, tunnel_idle_cb, tunnel);
	tunnel_side_init(tunnel, &tunnel->client, client, &tunnel->upstream);
	tunnel_side_init(tunnel, &tunnel->upstream, upstream, &tunnel->client);
	LIST_INSERT_HEAD(&proxy->tunnels, tunnel, link);
	tunnel_touch(tunnel);
	bufferevent_enable(client, EV_READ | EV_WRITE);
	bufferevent_enable(upstream, EV_READ | EV_WRITE);
	/* the client may have sent its first bytes (a TLS ClientHello) with the
	 * CONNECT request */
	if (evbuffer_get_length(bufferevent_get_input(client)) > 0)
		tunnel_read_cb(client, &tunnel->client);
}
