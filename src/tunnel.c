#include "tunnel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access_log.h"
#include "config.h"
#include "conn.h"
#include "log.h"
#include "proxy.h"
#include "registry.h"
#include "retry_budget.h"
#include "xmalloc.h"
#include "timer.h"

/* Past this much unsent data toward one side, stop reading the other. */
#define TUNNEL_HIGH (256 * 1024)
#define TUNNEL_LOW (64 * 1024)
/* How often a tunnel one side of which failed looks whether the other side
 * has taken what it was owed: the kernel tells no event when its queue
 * empties. */
#define TUNNEL_ABORT_LOOK_MS 20

/* One direction of the tunnel. */
struct tunnel_side {
	struct tunnel *tunnel;
	struct conn *conn;
	struct tunnel_side *peer;
	bool eof; /* this side sent EOF */
};

struct tunnel {
	struct proxy *proxy;
	struct tunnel_side client;
	struct tunnel_side upstream;
	struct timer *idle_timer;
	uint64_t idle_ms;
	bool looked;   /* the idle timer looked at the peers since the last read or write */
	int64_t taken; /* what the peers had acknowledged then (tunnel_taken) */
	/* one side failed (a reset): the other is owed what it sent, then a
	 * reset (tunnel_abort) */
	struct tunnel_side *aborting;
	struct conn_ack_watch abort_watch; /* what the side left still takes */
	struct registry_entry entry;	   /* in proxy->registry */
	/* its access line, written when it ends: the request's, with the
	 * tunnel's life and bytes */
	struct access_record *log;
	uint64_t opened_ms;	/* when the tunnel took over (monotonic) */
	uint64_t client_base;	/* what the client conn had written before, or queued */
	uint64_t upstream_base; /* ... the upstream conn */
	uint64_t to_client;	/* counted when the client's conn goes */
	uint64_t from_client;	/* counted when the upstream's conn goes */
};

/* Traffic: the idle timeout starts again. A quarter of it later the timer
 * notes what the peers have taken (tunnel_idle_cb). */
static void tunnel_touch(struct tunnel *tunnel)
{
	tunnel->looked = false;
	timer_start_look(tunnel->idle_timer, tunnel->idle_ms / 4);
}

/* The bytes both peers acknowledged, in all. */
static int64_t tunnel_taken(const struct tunnel *tunnel)
{
	return conn_bytes_acked(tunnel->client.conn) + conn_bytes_acked(tunnel->upstream.conn);
}

/* What went through a side's conn, noted before it is freed: the bytes
 * written to the client are what the tunnel carried to it, those written to
 * the upstream what it carried from the client. */
static void tunnel_count(struct tunnel *tunnel, const struct tunnel_side *side)
{
	if (side->conn == NULL)
		return;
	/* the base marks what was queued when the tunnel began (its 200 or
	 * 101, a pipelined response's tail): a side that goes before all of
	 * that was written carried nothing through the tunnel */
	if (side == &tunnel->client)
		tunnel->to_client = conn_bytes_written_since(side->conn, tunnel->client_base);
	else
		tunnel->from_client = conn_bytes_written_since(side->conn, tunnel->upstream_base);
}

/* The tunnel's one access line, as it ends: the request's duration up to
 * the tunnel's start and its life since; why, when it did not end by the
 * peers' own closes. */
static void tunnel_log(struct tunnel *tunnel, const char *why)
{
	struct access_record *record = tunnel->log;
	uint64_t now = timer_now_ms();

	if (record == NULL)
		return;
	tunnel_count(tunnel, &tunnel->client);
	tunnel_count(tunnel, &tunnel->upstream);
	record->bytes = tunnel->to_client;
	record->bytes_in = tunnel->from_client;
	record->duration_ms += now > tunnel->opened_ms ? now - tunnel->opened_ms : 0;
	if (record->note == NULL) {
		record->note = why;
	} else if (why != NULL) {
		/* a note from before the tunnel (why an intercepted one went
		 * blind) keeps its place, and why it ended follows */
		size_t size = strlen(record->note) + strlen(why) + sizeof("; ");
		char *note = xmalloc(size);

		snprintf(note, size, "%s; %s", record->note, why);
		free((char *)record->note);
		record->note = note;
	}
	access_log_write(record);
	if (record->note == why)
		record->note = NULL; /* not the copy's own */
	access_record_free(record);
	tunnel->log = NULL;
}

static void tunnel_close_why(struct tunnel *tunnel, const char *why)
{
	tunnel_log(tunnel, why);
	registry_remove(&tunnel->entry);
	conn_free(tunnel->client.conn);
	conn_free(tunnel->upstream.conn);
	timer_free(tunnel->idle_timer);
	free(tunnel);
}

void tunnel_close(struct tunnel *tunnel)
{
	tunnel_close_why(tunnel, NULL);
}

/* The note of an aborting tunnel's line: which side failed first. */
static const char *tunnel_abort_why(const struct tunnel *tunnel)
{
	return tunnel->aborting == &tunnel->client ? "upstream reset the tunnel"
						   : "client reset the tunnel";
}

/* One look of an aborting tunnel: reset the side left once it has taken
 * everything the failed side sent before its failure, or took none of it
 * for tunnel_idle_timeout. */
static void tunnel_abort_look(struct tunnel *tunnel)
{
	struct tunnel_side *side = tunnel->aborting;

	if (conn_ack_watch_done(&tunnel->abort_watch, side->conn, timer_now_ms(),
				tunnel->idle_ms)) {
		tunnel_count(tunnel, side);
		conn_free_reset(side->conn);
		side->conn = NULL;
		tunnel_close_why(tunnel, tunnel_abort_why(tunnel));
		return;
	}
	timer_start_look(tunnel->idle_timer, TUNNEL_ABORT_LOOK_MS);
}

/* A side failed (it reset the connection): the other side gets the bytes
 * the failed one sent before, then a reset, not a FIN, so that a stream cut
 * here (a close-delimited body) does not look whole to it. */
static void tunnel_abort(struct tunnel *tunnel, struct tunnel_side *failed)
{
	struct tunnel_side *side = failed->peer;

	tunnel_count(tunnel, failed);
	conn_free(failed->conn);
	failed->conn = NULL;
	conn_read_enable(side->conn, false);
	tunnel->aborting = side;
	tunnel->abort_watch = (struct conn_ack_watch){ .least_unacked = SIZE_MAX };
	tunnel_abort_look(tunnel);
}

/* Close when both directions are finished: each side has sent EOF and what
 * it sent has been written to its peer. */
static void tunnel_maybe_close(struct tunnel *tunnel)
{
	struct tunnel_side *c = &tunnel->client;
	struct tunnel_side *u = &tunnel->upstream;

	if (c->eof && u->eof && conn_output_length(c->conn) == 0 &&
	    conn_output_length(u->conn) == 0)
		tunnel_close(tunnel);
}

/* Move what one side sent to the other; stop reading it while the other
 * side's output is full. */
static void tunnel_read_cb(struct conn *conn, void *arg)
{
	struct tunnel_side *side = arg;
	struct evbuffer *out;

	if (side->tunnel->aborting != NULL)
		return; /* its peer is gone */
	out = conn_output(side->peer->conn);
	tunnel_touch(side->tunnel);
	evbuffer_add_buffer(out, conn_input(conn));
	if (evbuffer_get_length(out) >= TUNNEL_HIGH)
		conn_read_enable(conn, false);
}

/* A side's output drained: read from its peer again, or finish closing. */
static void tunnel_write_cb(struct conn *conn, void *arg)
{
	struct tunnel_side *side = arg;

	if (side->tunnel->aborting != NULL)
		return; /* tunnel_abort_look() watches it */
	tunnel_touch(side->tunnel);
	if (side->eof && side->peer->eof) {
		tunnel_maybe_close(side->tunnel);
		return;
	}
	/* a peer that sent EOF has nothing more to read */
	if (!side->peer->eof)
		conn_read_enable(side->peer->conn, true);
}

static void tunnel_event_cb(struct conn *conn, short what, void *arg)
{
	struct tunnel_side *side = arg;
	struct tunnel *tunnel = side->tunnel;

	if (tunnel->aborting != NULL) {
		/* the side left: an EOF read before is of no use now */
		if (what & (CONN_ERROR | CONN_TIMEOUT))
			tunnel_close_why(tunnel, tunnel_abort_why(tunnel));
		return;
	}
	if (what & CONN_ERROR) {
		tunnel_abort(tunnel, side);
		return;
	}
	if (what & CONN_TIMEOUT) {
		tunnel_close_why(tunnel, "timeout");
		return;
	}
	if (what & CONN_EOF) {
		/* A half-close, passed on: what is left goes to the peer, then
		 * a FIN. The other direction goes on (a client may send its
		 * request, shut its side and read the answer) until the peer
		 * closes too, or the tunnel is idle for tunnel_idle_timeout. */
		side->eof = true;
		evbuffer_add_buffer(conn_output(side->peer->conn), conn_input(conn));
		conn_read_enable(conn, false);
		/* a TLS upstream that closed without a close_notify may have
		 * been cut: the client, over TLS too (wss), must not read the
		 * proxy's close_notify as a clean end */
		if (conn_eof_clean(conn))
			conn_shutdown_write(side->peer->conn);
		else
			conn_shutdown_write_cut(side->peer->conn);
		conn_set_output_low(conn, 0);
		conn_set_output_low(side->peer->conn, 0);
		tunnel_maybe_close(tunnel);
	}
}

/* A peer that reads slowly takes what the kernel holds for it (megabytes)
 * and what is queued here while neither callback runs: the write callback
 * waits for the output to drain to TUNNEL_LOW, and the other side is not
 * read meanwhile. That is traffic all the same, seen in what the peers
 * acknowledge: noted a quarter of the timeout after the last read or write
 * (no look at the kernel on every event), and the tunnel closes once the
 * timeout has passed with nothing more taken since the last look. */
static void tunnel_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel *tunnel = arg;
	int64_t taken;

	if (tunnel->aborting != NULL) {
		tunnel_abort_look(tunnel);
		return;
	}
	taken = tunnel_taken(tunnel);

	if (!tunnel->looked || taken != tunnel->taken) {
		/* the close may come once the timeout has passed whole since the
		 * last traffic: after the first look, the rest of it, and the
		 * time the look's unchecked timer may have fired early (the
		 * traffic's touch read no clock); after traffic seen at a later
		 * look, a whole timeout from that look */
		uint64_t ms = tunnel->looked ? tunnel->idle_ms
					     : tunnel->idle_ms - tunnel->idle_ms / 4 +
						       timer_coarse_slack_ms();

		tunnel->looked = true;
		tunnel->taken = taken;
		timer_start(tunnel->idle_timer, timer_now_ms(), ms);
		return;
	}
	log_debug("tunnel idle for tunnel_idle_timeout; closing");
	tunnel_close_why(tunnel, "tunnel_idle_timeout");
}

/* Wire one side's callbacks and marks. */
static void tunnel_side_init(struct tunnel *tunnel, struct tunnel_side *side, struct conn *conn,
			     struct tunnel_side *peer)
{
	side->tunnel = tunnel;
	side->conn = conn;
	side->peer = peer;
	conn_setcb(conn, tunnel_read_cb, tunnel_write_cb, tunnel_event_cb, side);
	conn_set_input_limit(conn, TUNNEL_HIGH);
	conn_set_output_low(conn, TUNNEL_LOW);
	conn_set_timeouts(conn, 0, 0);
	conn_set_deadline(conn, 0);
}

/* Close, for the registry (shutdown, drain timeout): the proxy cuts the
 * tunnel, and a FIN would tell each peer that the other had finished, so
 * that a stream cut here (a close-delimited body, an upload ended by a
 * FIN) would look whole. Each side gets a reset, as a client connection
 * with a response under way does then (client_close_cb). */
static void tunnel_close_cb(void *self, const char *reason)
{
	struct tunnel *tunnel = self;
	struct tunnel_side *sides[] = { &tunnel->client, &tunnel->upstream };

	for (size_t i = 0; i < sizeof(sides) / sizeof(sides[0]); i++) {
		if (sides[i]->conn == NULL)
			continue;
		tunnel_count(tunnel, sides[i]);
		conn_free_reset(sides[i]->conn);
		sides[i]->conn = NULL;
	}
	tunnel_close_why(tunnel, reason);
}

/* A reload: a changed tunnel_idle_timeout applies to this tunnel too,
 * counted from now, as a changed client_timeout does to an idle client
 * connection (a lowered one would otherwise keep it open as long as the
 * old one ran, a raised one not save it). An aborting tunnel keeps its
 * own watch. */
static void tunnel_config_changed(void *self)
{
	struct tunnel *tunnel = self;
	uint64_t ms = tunnel->proxy->config->limits.tunnel_idle_timeout_ms;

	if (ms == tunnel->idle_ms || tunnel->aborting != NULL)
		return;
	tunnel->idle_ms = ms;
	tunnel_touch(tunnel);
}

/* A tunnel is never idle for a drain: its bytes are in flight. */
static const struct registry_ops tunnel_registry_ops = {
	.close = tunnel_close_cb,
	.config_changed = tunnel_config_changed,
};

void tunnel_new(struct proxy *proxy, struct conn *client, struct conn *upstream,
		uint64_t idle_timeout_ms, struct access_record *log, bool client_eof)
{
	struct tunnel *tunnel = xcalloc(1, sizeof(*tunnel));

	tunnel->log = log;
	tunnel->opened_ms = timer_now_ms();
	/* the 200 or the 101 may still be queued: not the tunnel's bytes */
	tunnel->client_base = conn_bytes_mark(client);
	tunnel->upstream_base = conn_bytes_mark(upstream);

	tunnel->proxy = proxy;
	tunnel->idle_ms = idle_timeout_ms;
	tunnel->idle_timer = timer_new(proxy->base, tunnel_idle_cb, tunnel);
	tunnel_side_init(tunnel, &tunnel->client, client, &tunnel->upstream);
	tunnel_side_init(tunnel, &tunnel->upstream, upstream, &tunnel->client);
	registry_add(&proxy->registry, &tunnel->entry, &tunnel_registry_ops, tunnel);
	tunnel_touch(tunnel);
	conn_read_enable(client, true);
	conn_read_enable(upstream, true);
	/* the client may have sent its first bytes (a TLS ClientHello) with the
	 * CONNECT request; an upstream that switched protocols, its first with
	 * the 101 */
	if (client_eof)
		tunnel_event_cb(client, CONN_EOF | CONN_READING, &tunnel->client);
	else if (conn_input_length(client) > 0)
		tunnel_read_cb(client, &tunnel->client);
	if (conn_input_length(upstream) > 0)
		tunnel_read_cb(upstream, &tunnel->upstream);
}
