#include "client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>

#include "access_log.h"
#include "config.h"
#include "config_values.h"
#include "conn.h"
#include "exchange.h"
#include "http1.h"
#include "http1_resume.h"
#include "intercept.h"
#include "listener.h"
#include "log.h"
#include "max_forwards.h"
#include "metrics.h"
#include "proxy.h"
#include "registry.h"
#include "reply.h"
#include "retry_budget.h"
#include "route.h"
#include "timer.h"
#include "timeval.h"
#include "tls.h"
#include "tunnel.h"
#include "xmalloc.h"

/* Past this much queued output the exchange stops reading its upstream;
 * below the low mark it reads again. */
#define CLIENT_OUTPUT_LOW (64 * 1024)
#define CLIENT_INPUT_MIN_HIGH (256 * 1024)
/* Past this much output still queued when a response is done, a pipelined
 * next request waits until it drains to CLIENT_OUTPUT_LOW: responses never
 * pile up behind a client that sends requests and does not read. */
#define CLIENT_OUTPUT_HIGH (256 * 1024)

enum client_state {
	CLIENT_HANDSHAKE,    /* an intercepted CONNECT: TLS handshake with the client, or
			      * its first byte, which says whether it speaks TLS */
	CLIENT_READING_HEAD, /* waiting for the whole next request head */
	CLIENT_IN_EXCHANGE,  /* a request is being proxied */
	CLIENT_CLOSING,	     /* flushing the last response, then lingering */
	CLIENT_LINGERING,    /* output shut down; discarding input until EOF, or while it comes */
	CLIENT_ENDING,	     /* input done with; closing once our close_notify is gone */
	CLIENT_RESETTING, /* a response was cut: the client takes what came before, then a reset */
};

/* A closing connection keeps discarding what the client still sends, so
 * that its unread request does not make the kernel reset the connection
 * before the client has read our response: until nothing came for
 * CLIENT_LINGER_MS, at most CLIENT_LINGER_MAX_MS in all (nginx: lingering_timeout
 * 5 s, lingering_time 30 s). A client that
 * uploads a body before it reads the 413 sent ahead of it gets its answer. */
#define CLIENT_LINGER_MS 2000
#define CLIENT_LINGER_MAX_MS 30000

/* How often a connection to be reset looks whether the client has taken
 * what was sent before: the kernel tells no event when its queue empties. */
#define CLIENT_RESET_LOOK_MS 20

/* At max_connections an idle keep-alive connection is closed to make room
 * for a new one only once it has been idle this long: a client's next
 * request, sent right after a response, would otherwise meet the close. */
#define CLIENT_IDLE_CLOSE_MIN_MS 1000

struct client {
	struct proxy *proxy;
	struct config *config;		      /* held: the config this connection runs under */
	const struct listener_config *listen; /* inside config */
	struct conn *conn;		      /* its deadline is client_timeout for the next head */
	struct exchange *exchange;	      /* the request being proxied, if any */
	struct intercept *intercept;	      /* an intercepted CONNECT's tunnel, or NULL */
	/* The fields are laid out without holes: an idle keep-alive client
	 * costs this struct and its conn's (README: RSS per idle client). */
	enum client_state state;
	bool listener_gone;	  /* a reload removed its listener: close after this request */
	bool output_full;	  /* reading the next request waits for the output to drain */
	bool head_timer_at_flush; /* the next head's client_timeout starts once the
				     last response is written */
	bool blind_eof;		  /* an intercepted tunnel going blind: the client
				     half-closed before its connect ended */
	struct http1_resume head_resume;   /* how far the next head's bytes were looked at */
	struct conn_ack_watch reset_watch; /* CLIENT_RESETTING: what the client still takes */
	union {				   /* checked against allow_clients again after a reload */
		struct sockaddr sa;
		struct sockaddr_in sin;
		struct sockaddr_in6 sin6;
	} peer_addr;
	char peer[INET6_ADDRSTRLEN + 8];
	/* a head that came in pieces: its first read's time (the monotonic
	 * clock's milliseconds, modulo 2^32: durations, not dates), else 0 */
	uint32_t head_began_ms;
	struct registry_entry entry; /* in proxy->registry */
	/* in proxy->idle_clients while idle between requests (tqe_prev set):
	 * may close to make room at max_connections */
	TAILQ_ENTRY(client) idle_link;
};

/* One per keep-alive client, idle or not: 264 bytes is a 272-byte malloc
 * chunk, past it 288 (bench.py --points idle measures the sum). */
_Static_assert(sizeof(struct client) <= 264, "struct client outgrows its malloc size class");

/* The connection closes after the current request whatever the client asked
 * (drain, or a reload removed its listener). */
static bool client_closing_after_request(void *arg)
{
	struct client *client = arg;

	return client->proxy->draining || client->listener_gone;
}

/* Off the idle list: a request begins, or the connection closes. */
static void client_idle_ends(struct client *client)
{
	if (client->idle_link.tqe_prev == NULL)
		return;
	TAILQ_REMOVE(&client->proxy->idle_clients, client, idle_link);
	client->idle_link.tqe_prev = NULL;
}

/* After a response, all written: onto the idle list, whose connections
 * close to make room at max_connections, the longest idle first. One whose
 * next request has begun to arrive is taken off it when that is read
 * (client_read_head), and never closed meanwhile (client_close_longest_idle
 * looks). One in an intercepted tunnel stays off it: to its client that is
 * a tunnel, which the limit never closes. */
static inline void client_idle_begins(struct client *client)
{
	struct proxy *proxy = client->proxy;
	bool first;

	if (client->idle_link.tqe_prev != NULL || client->intercept != NULL)
		return;
	first = TAILQ_EMPTY(&proxy->idle_clients);
	TAILQ_INSERT_TAIL(&proxy->idle_clients, client, idle_link);
	if (first)
		listener_idle_available(proxy);
}

/* Release everything; the connection only when still ours. */
static void client_free(struct client *client)
{
	client_idle_ends(client);
	registry_remove(&client->entry);
	intercept_end(client->intercept, client->conn);
	intercept_free(client->intercept);
	if (client->conn != NULL)
		conn_free(client->conn);
	config_release(client->config);
	free(client);
}

void client_close(struct client *client, const char *reason)
{
	log_debug("client %s: closed: %s", client->peer, reason);
	if (client->exchange != NULL) {
		struct exchange *ex = client->exchange;

		client->exchange = NULL;
		exchange_abort(ex, reason);
	}
	client_free(client);
}

/* Close with a reset: what the client was sent is cut short (a response
 * not all written, a request aborted), and a clean close after a
 * close-delimited body would let it take that body for a whole one. */
static void client_close_reset(struct client *client, const char *reason)
{
	struct conn *conn = client->conn;

	intercept_count(client->intercept, conn);
	client->conn = NULL;
	client_close(client, reason);
	if (conn != NULL)
		conn_free_reset(conn);
}

/* One look of a connection in CLIENT_RESETTING: reset once the client has
 * everything sent before the cut, or took none of it for client_timeout. */
static void client_reset_look(struct client *client)
{
	if (conn_ack_watch_done(&client->reset_watch, client->conn, timer_now_ms(),
				client->config->limits.client_timeout_ms)) {
		client_close_reset(client, "response cut short");
		return;
	}
	conn_set_deadline(client->conn, CLIENT_RESET_LOOK_MS);
}

/* A close-delimited body was cut short: the connection ends with a reset,
 * so the client sees an error and not a complete response. A reset throws
 * away what is still queued for the client, here and in the kernel, and
 * with it the pipelined responses before this one, whole as they are: so
 * it waits until the client has taken them (the cut body's bytes too). */
static void client_reset_after_flush(struct client *client)
{
	client->state = CLIENT_RESETTING;
	conn_read_enable(client->conn, false);
	conn_set_timeouts(client->conn, 0, 0);
	client->reset_watch = (struct conn_ack_watch){ .least_unacked = SIZE_MAX };
	client_reset_look(client);
}

/* Start the client_timeout clock for the next request head. */
static void client_arm_head_timer(struct client *client)
{
	conn_set_deadline(client->conn, client->config->limits.client_timeout_ms);
}

/* Our close_notify (in an intercepted tunnel) waits for the socket, and
 * nothing more is read: close once it is gone (client_write_cb), while the
 * client takes what was sent within client_timeout, 30 s at most. Without
 * it a strict client would see a truncation. */
static void client_end_after_close_notify(struct client *client, const char *reason)
{
	log_debug("client %s: closing once the close_notify is sent: %s", client->peer, reason);
	client_idle_ends(client);
	client->state = CLIENT_ENDING;
	conn_read_enable(client->conn, false);
	conn_set_timeouts(client->conn, 0, client->config->limits.client_timeout_ms);
	conn_set_deadline(client->conn, CLIENT_LINGER_MAX_MS);
}

/* Everything is written: half-close, then discard input for a while. */
static void client_linger(struct client *client)
{
	struct evbuffer *in = conn_input(client->conn);

	client->state = CLIENT_LINGERING;
	conn_shutdown_write(client->conn);
	/* the client's FIN came before (it closed in the middle of a request
	 * head, or after the requests whose answers went out): nothing more
	 * will come to discard, and its place among max_connections is free
	 * once our close_notify (in a tunnel) is gone */
	if (conn_input_ended(client->conn)) {
		if (conn_output_ending(client->conn))
			client_end_after_close_notify(client, "client closed the connection");
		else
			client_free(client);
		return;
	}
	evbuffer_drain(in, evbuffer_get_length(in));
	conn_set_input_limit(client->conn, 0);
	conn_read_enable(client->conn, true);
	conn_set_timeouts(client->conn, CLIENT_LINGER_MS, client->config->limits.client_timeout_ms);
	conn_set_deadline(client->conn, CLIENT_LINGER_MAX_MS);
}

/* Close between requests. In an intercepted tunnel nothing is cut then:
 * our close_notify goes first (RFC 8446 section 6.1), so that a client sees
 * a clean end, not a truncation, whoever ends it (the client, client_timeout,
 * a drain), and one the socket cannot take at once waits for it; not when
 * the place is needed now (at_once: max_connections). Under a request,
 * none: a body cut by the close must not look whole. */
static void client_close_between(struct client *client, const char *reason, bool at_once)
{
	if (client->intercept != NULL && client->state == CLIENT_READING_HEAD) {
		conn_shutdown_write(client->conn);
		if (!at_once && conn_output_ending(client->conn)) {
			client_end_after_close_notify(client, reason);
			return;
		}
	}
	client_close(client, reason);
}

/* Stop reading and close once everything queued has been written. */
static void client_close_after_flush(struct client *client)
{
	client->state = CLIENT_CLOSING;
	conn_set_deadline(client->conn, 0);
	conn_read_enable(client->conn, false);
	if (conn_output_length(client->conn) == 0) {
		client_linger(client);
		return;
	}
	/* called back once the output is empty */
	conn_set_output_low(client->conn, 0);
}

/* Set the read (body) and write timeouts; the head has the deadline. */
static void client_set_timeouts(struct client *client, bool watch_reads)
{
	uint64_t ms = client->config->limits.client_timeout_ms;

	/* a client that stops reading our output for this long is gone too */
	conn_set_timeouts(client->conn, watch_reads ? ms : 0, ms);
}

/* While on, a request body that stops arriving for client_timeout closes the
 * connection (a slow-body attack, or a client that went away). */
static void client_watch_body(void *arg, bool on)
{
	client_set_timeouts(arg, on);
}

/* The access-log line of a request the proxy answers itself, before any
 * exchange exists (head NULL: one whose method could not be read; a head
 * without a target: one refused before any of it was read). Inside an
 * intercepted tunnel the logged target says which one, as for the requests
 * it proxies: https://host:port before an origin-form target, or alone for
 * "*" and when no target was read. */
static void client_log_own_answer(struct client *client, const struct http1_head *head, int status,
				  const char *text, uint64_t bytes)
{
	struct access_record record = {
		.client = client->peer,
		.method = "-",
		.method_len = 1,
		.target = "-",
		.target_len = 1,
		.route = "-",
		.status = status,
		.attempts = 0,
		.bytes = bytes,
		.note = text,
	};
	const char *prefix = client->intercept != NULL ? intercept_prefix(client->intercept) : NULL;
	char *target = NULL;

	/* answered as its head completed, or, for a head that came in pieces
	 * and was cut or refused, since its first piece */
	if (client->head_began_ms != 0) {
		record.duration_ms = (uint32_t)timer_now_ms() - client->head_began_ms;
		client->head_began_ms = 0;
	}
	if (head != NULL && head->method_len > 0) {
		record.method = head->method;
		record.method_len = head->method_len;
	}
	if (head != NULL && head->target_len > 0) {
		record.target = head->target;
		record.target_len = head->target_len;
		if (prefix != NULL && head->target[0] == '/') {
			size_t prefix_len = strlen(prefix);

			target = xmalloc(prefix_len + head->target_len);
			memcpy(target, prefix, prefix_len);
			memcpy(target + prefix_len, head->target, head->target_len);
			record.target = target;
			record.target_len = prefix_len + head->target_len;
		} else if (prefix != NULL && head->target_len == 1 && head->target[0] == '*') {
			record.target = prefix;
			record.target_len = strlen(prefix);
		}
	} else if (prefix != NULL) {
		record.target = prefix;
		record.target_len = strlen(prefix);
	}
	access_log_write(&record);
	free(target);
	/* a final response to a client as much as a relayed one (SPEC:
	 * requests_total), under route "-" as in the log: none was chosen; a
	 * client that left with nothing answered (status 0) counts nowhere */
	if (status != 0)
		metrics_request_done(client->proxy->metrics,
				     metrics_unrouted(client->proxy->metrics), status,
				     (double)record.duration_ms / 1000.0, 0);
}

/* The longest run of empty lines the parser skips before a request line
 * (RFC 9112 section 2.2), in bytes: eight CRLFs. */
#define CLIENT_EMPTY_LINES_MAX (2 * 8)

/* Copy the input's first bytes, up to room, into peek; *skipped: how many
 * of them are empty lines a request line may follow. Returns the bytes
 * copied. */
static size_t client_peek_input(const struct client *client, char *peek, size_t room,
				size_t *skipped)
{
	size_t len = conn_input_length(client->conn);
	size_t i = 0;

	if (len > room)
		len = room;
	evbuffer_copyout(conn_input(client->conn), peek, len);
	while (i < len && (peek[i] == '\r' || peek[i] == '\n'))
		i++;
	*skipped = i;
	return len;
}

/* Whether the input starts with a HEAD request line (after the empty lines
 * one may follow), parsed or not: a head the parser refused, or not whole,
 * is still a HEAD to the client, which reads no body after the answer's head
 * (RFC 9110 section 9.3.2) and would take one for the next response. */
static bool client_input_is_head(const struct client *client)
{
	char peek[CLIENT_EMPTY_LINES_MAX + 5]; /* then "HEAD " */
	size_t i;
	size_t len = client_peek_input(client, peek, sizeof(peek), &i);

	return len - i >= 5 && memcmp(peek + i, "HEAD ", 5) == 0;
}

/* Whether the input starts as a TLS handshake record does (content type 22,
 * version 3.x): a client that takes this plain HTTP listener for a TLS one
 * (an https:// proxy URL, or an https:// URL to a sidecar port). */
static bool client_input_is_tls(const struct client *client)
{
	unsigned char peek[2];

	return evbuffer_copyout(conn_input(client->conn), peek, sizeof(peek)) == 2 &&
	       peek[0] == 0x16 && peek[1] == 0x03;
}

/* Whether the input is nothing or only the empty lines a request line may
 * follow: a client idle after a stray CRLF. */
static bool client_input_is_empty_lines(const struct client *client)
{
	char peek[CLIENT_EMPTY_LINES_MAX]; /* a longer run is refused by the parser */
	size_t skipped;

	if (conn_input_length(client->conn) > sizeof(peek))
		return false;
	return client_peek_input(client, peek, sizeof(peek), &skipped) == skipped;
}

/* Whether the input, empty lines and then a CR, ended there with the
 * client's FIN: no LF can follow, so that CR is a bare one (RFC 9112 section
 * 2.2: invalid), no empty line, and a request line was begun. (The parser
 * refuses a CR or LF out of place at once, and a ninth line.) */
static bool client_input_ends_in_bare_cr(const struct client *client)
{
	char peek[CLIENT_EMPTY_LINES_MAX];
	size_t skipped;
	size_t len;

	if (!conn_input_ended(client->conn) || conn_input_length(client->conn) > sizeof(peek))
		return false;
	len = client_peek_input(client, peek, sizeof(peek), &skipped);
	return len > 0 && skipped == len && peek[len - 1] == '\r';
}

/* Refuse a request before any exchange exists: log, answer, close. */
static void client_refuse(struct client *client, const struct http1_head *head, int status,
			  const char *text)
{
	bool head_request = head != NULL
				    ? head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0
				    : client_input_is_head(client);

	client_log_own_answer(
		client, head, status, text,
		reply_error(conn_output(client->conn), status, text, 0, REPLY_CLOSE, head_request));
	client_close_after_flush(client);
}

/* Drop the empty lines the input starts with (those a request line may
 * follow, RFC 9112 section 2.2), which the parser counted toward the head's
 * size: max_header_bytes is the head's. Returns whether there were any; not
 * for a run longer than the parser takes, or ending in a bare CR or LF,
 * which it refuses, or with nothing after it, so that the head's next parse
 * drops none. */
static bool client_drop_empty_lines(struct client *client)
{
	char peek[CLIENT_EMPTY_LINES_MAX + 1];
	size_t skipped;
	size_t pairs = 0;

	size_t copied = client_peek_input(client, peek, sizeof(peek), &skipped);

	while (pairs + 2 <= skipped && peek[pairs] == '\r' && peek[pairs + 1] == '\n')
		pairs += 2;
	/* (a ninth CRLF, or a CR or LF left over, is in peek: skipped says;
	 * so is whether a request line follows: empty lines alone over the
	 * limit are the head's size, and dropping them each time would let
	 * runs of them come for ever unanswered) */
	if (pairs == 0 || skipped > pairs || copied == skipped)
		return false;
	evbuffer_drain(conn_input(client->conn), pairs);
	/* the bytes the head's parse had looked at moved */
	memset(&client->head_resume, 0, sizeof(client->head_resume));
	return true;
}

static bool client_allowed(const struct config *config, const struct sockaddr *peer);
static struct exchange_owner client_exchange_owner(struct client *client);

/* The listener of config at the address listen has, or NULL. */
static const struct listener_config *client_find_listener(const struct config *config,
							  const struct listener_config *listen)
{
	size_t i;

	for (i = 0; i < config->listener_count; i++)
		if (config_values_same_address(&config->listeners[i].addr, &listen->addr))
			return &config->listeners[i];
	return NULL;
}

/* Bounded input: a client cannot make the proxy buffer more than a head
 * one byte over max_header_bytes (enough for the parser to say 431) after
 * the empty lines a request line may follow, or a chunked body's trailer
 * section, which is held until it ends: as long, and its final empty line. */
static void client_set_input_limit(struct client *client)
{
	size_t input_high = client->config->limits.max_header_bytes + 2 + CLIENT_EMPTY_LINES_MAX;

	if (input_high < CLIENT_INPUT_MIN_HIGH)
		input_high = CLIENT_INPUT_MIN_HIGH;
	conn_set_input_limit(client->conn, input_high);
}

/* Between requests: after a reload, the next request runs under the live
 * config, as part of the listener that now has this address. A connection
 * whose listener is gone keeps the old config and closes after its request. */
static void client_adopt_config(struct client *client)
{
	struct config *live = client->proxy->config;
	const struct listener_config *listen;

	if (client->config == live || client->listener_gone)
		return;
	listen = client_find_listener(live, client->listen);
	if (listen == NULL) {
		client->listener_gone = true;
		return;
	}
	config_release(client->config);
	client->config = config_hold(live);
	client->listen = listen;
	client_set_timeouts(client, false);
	client_set_input_limit(client);
}

/* A head is parsed and used before control returns to the event loop, so
 * one scratch head serves every connection without an allocation per
 * request. */
static struct http1_head client_request_head;

static void client_read_head(struct client *client);

static void client_exchange_tunnel(struct client *client, struct conn *upstream,
				   struct access_record *tunnel_log);

/* The deadline of an intercepted tunnel before its TLS handshake ends:
 * client_timeout from the CONNECT's answer (from_answer), or from now
 * (a reload changed it), and until the client's first byte
 * intercept.server_first_after from the answer if that ends sooner (a
 * client waiting for its server to speak first is tunnelled blind then). */
static void client_arm_handshake_timer(struct client *client, bool from_answer)
{
	uint64_t ms = client->config->limits.client_timeout_ms;
	uint64_t first = client->config->intercept.server_first_after_ms;
	uint64_t age = intercept_age_ms(client->intercept);

	/* at least 1 ms: 0 would be no deadline at all */
	if (from_answer)
		ms = ms > age ? ms - age : 1;
	if (!intercept_begun(client->intercept) && first > 0) {
		first = first > age ? first - age : 1;
		if (first < ms)
			ms = first;
	}
	conn_set_deadline(client->conn, ms);
}

/* The blind tunnel's connect ended: the tunnel takes the connections, or
 * the client, which was answered 200, can only be closed. */
static void client_blind_connected(struct conn *upstream, const char *reason, void *arg)
{
	struct client *client = arg;

	if (upstream == NULL) {
		log_warn("intercept: client %s: no blind tunnel to %s: %s", client->peer,
			 intercept_prefix(client->intercept) + 8, reason);
		client_close(client, "blind tunnel not connected");
		return;
	}
	client_exchange_tunnel(client, upstream, intercept_take_log(client->intercept));
}

/* Why an intercepted tunnel carries nothing more once a reload gave its
 * listener's address to a sidecar listener, which intercepts nothing: as
 * for a host no longer listed. */
static void client_tunnel_on_sidecar(const struct client *client, char *reason, size_t size)
{
	snprintf(reason, size,
		 "host %s no longer intercepted (config reloaded: listener %s is a sidecar now)",
		 intercept_host(client->intercept), client->listen->address);
}

/* Neither TLS nor HTTP in an intercepted tunnel (an SSH banner, a Redis
 * command, or nothing while the client waits for the server to speak
 * first): tunnelled blind to the CONNECT host and port, as a host not
 * listed is, unless the live config or a drain refuses it now. What the
 * client sends meanwhile waits in its input for the tunnel. */
static void client_intercept_blind(struct client *client)
{
	const char *host = intercept_host(client->intercept);
	char reason[320];

	/* decided now, under the live config and its timeouts: a reload since
	 * the 200 that took the host out of access.allow_hosts or
	 * intercept.hosts refuses it, as it refuses the next request in an
	 * intercepted tunnel (route_check_tunnel_host()) */
	reason[0] = '\0';
	client_adopt_config(client);
	if (client->proxy->draining)
		snprintf(reason, sizeof(reason), "the proxy is draining");
	else if (client->listener_gone)
		snprintf(reason, sizeof(reason), "its listener was removed by a reload");
	else if (client->listen->upstream != NULL)
		client_tunnel_on_sidecar(client, reason, sizeof(reason));
	else if (!client_allowed(client->config, (const struct sockaddr *)&client->peer_addr))
		snprintf(reason, sizeof(reason),
			 "client address no longer allowed by access.allow_clients (config "
			 "reloaded)");
	else
		route_check_tunnel_host(client->config, host, reason, sizeof(reason));
	if (reason[0] != '\0') {
		/* the client has its 200: closing is all that can tell it */
		log_warn("intercept: client %s: no blind tunnel to %s: %s", client->peer,
			 intercept_prefix(client->intercept) + 8, reason);
		intercept_blind_refused(client->intercept, reason);
		client_close(client, "blind tunnel refused");
		return;
	}
	log_info("intercept: client %s: tunnel to %s: %s", client->peer,
		 intercept_prefix(client->intercept) + 8,
		 intercept_blind_why_text(client->intercept));
	/* read on: what the client sends meanwhile waits in its input (up to
	 * its limit), and its close is seen (client_handshake_done) */
	conn_set_deadline(client->conn, 0);
	intercept_connect_blind(client->intercept, client->proxy, client->config,
				client_blind_connected, client);
}

/* The client's first byte in an intercepted tunnel: TLS, whose handshake
 * starts, or plain HTTP, whose requests are read as a sidecar's to
 * http://host:port (both within the client_timeout that started with the
 * CONNECT's answer), or neither (or no byte came within
 * intercept.server_first_after, or too few to tell before the client's
 * half-close), tunnelled blind. */
static void client_intercept_begin(struct client *client, enum intercept_look look)
{
	bool was_begun = intercept_begun(client->intercept);
	enum intercept_begun start = intercept_begin(client->intercept, client->conn, look);

	/* a half-close noted for a blind tunnel is the tunnel's alone */
	if (start != INTERCEPT_BLIND)
		client->blind_eof = false;
	switch (start) {
	case INTERCEPT_WAITING:
		return;
	case INTERCEPT_TLS:
		/* the first byte came: client_timeout alone bounds the rest */
		if (!was_begun)
			client_arm_handshake_timer(client, true);
		return;
	case INTERCEPT_BLIND:
		if (!was_begun)
			client_intercept_blind(client);
		return;
	case INTERCEPT_FAILED:
		client_close(client, "no TLS server side for the tunnel, or the answer to the "
				     "CONNECT could not be written");
		return;
	case INTERCEPT_PLAIN:
		log_debug("client %s: plain HTTP in the intercepted tunnel to %s", client->peer,
			  intercept_prefix(client->intercept));
		client->state = CLIENT_READING_HEAD;
		if (!was_begun)
			client_arm_handshake_timer(client, true);
		client_read_head(client);
		return;
	}
}

/* A CONNECT to a host intercept: lists: if access allows the host, answer
 * it ourselves and become the TLS server toward the client, or read its
 * plain HTTP (client_intercept_begin()). */
static void client_intercept(struct client *client, const struct http1_head *head)
{
	struct route_destination dest;
	struct access_record record = {
		.client = client->peer,
		.method = head->method,
		.method_len = head->method_len,
		.target = head->target,
		.target_len = head->target_len,
		.route = "-",
		.status = 200,
		.note = "intercepted",
	};
	char reason[256];
	int status;

	/* access: comes before anything else, as for a tunnel */
	status = route_destination(client->config, NULL, &head->parsed_target, NULL, 0,
				   head->method, head->method_len, &dest, reason, sizeof(reason));
	if (status != 0) {
		log_warn("client %s: refused host %.*s: not in access.allow_hosts", client->peer,
			 (int)(dest.host_len > 200 ? 200 : dest.host_len), dest.host);
		client_refuse(client, head, status, reason);
		return;
	}
	record.route = dest.route->name;
	client->intercept = intercept_start(client->proxy, client->config, client->conn, head,
					    &status, reason, sizeof(reason));
	if (client->intercept == NULL) {
		client_refuse(client, head, status, reason);
		return;
	}
	/* the head is gone from the input now: the log takes the copies */
	record.method = "CONNECT";
	record.target = intercept_prefix(client->intercept) + 8;
	record.target_len = strlen(record.target);
	/* written when the tunnel ends, with its life and bytes */
	intercept_log_at_end(client->intercept, &record, client->conn);
	metrics_request_done(client->proxy->metrics, dest.route->series, 200, 0.0, 0);
	client->state = CLIENT_HANDSHAKE;
	/* the handshake, like a request head, must finish within client_timeout */
	client_arm_handshake_timer(client, true);
	/* a ClientHello sent right behind the CONNECT is in the input already */
	if (conn_input_length(client->conn) > 0)
		client_intercept_begin(client, INTERCEPT_LOOK_NOW);
}

/* Why an intercepted tunnel closes before its first request for an event
 * its handshake's own failure does not cover, for the CONNECT's line. */
static const char *client_handshake_end_why(const struct client *client, short what)
{
	bool begun = intercept_begun(client->intercept);
	/* bytes too few to tell what the client speaks ("G": TLS, plain HTTP
	 * or another protocol?) are not "no byte" */
	bool some = !begun && client->conn != NULL && conn_input_length(client->conn) > 0;

	if (what & CONN_TIMEOUT)
		return begun  ? "TLS handshake not done within client_timeout"
		       : some ? "too few bytes from the client within client_timeout to tell what "
				"it speaks"
			      : "no byte from the client within client_timeout";
	if (begun)
		return "connection ended during the TLS handshake";
	if (some)
		return "client connection lost before its bytes told what it speaks";
	return (what & CONN_EOF) ? "client closed the connection before its first byte"
				 : "client connection lost before its first byte";
}

/* The client's TLS handshake in an intercepted tunnel ended. */
static void client_handshake_done(struct client *client, short what)
{
	if (what & CONN_CONNECTED) {
		const char *sni =
			SSL_get_servername(conn_ssl(client->conn), TLSEXT_NAMETYPE_host_name);

		/* the certificate is the CONNECT host's whatever the client
		 * named in SNI; a difference is worth a note when debugging */
		if (sni != NULL && strcasecmp(sni, intercept_host(client->intercept)) != 0)
			log_debug("client %s: SNI %s in a tunnel to %s", client->peer, sni,
				  intercept_prefix(client->intercept));
		client->state = CLIENT_READING_HEAD;
		client_arm_head_timer(client);
		return;
	}
	if (what & CONN_HANDSHAKE) {
		unsigned long tls_error = conn_tls_error(client->conn);
		bool hung_up = tls_failure_is_close(tls_error);
		char reason[320];
		bool verify_failed;

		if (hung_up && !tls_server_certificate_sent(conn_ssl(client->conn))) {
			/* a client that hangs up before it saw the certificate
			 * (or a port scanner), or in a resumed handshake, which
			 * sends none, has not refused anything: neither counted
			 * nor warned about. One that hangs up after it did may
			 * have refused it without an alert: that counts */
			int error = conn_error(client->conn);
			const char *kind =
				SSL_session_reused(conn_ssl(client->conn)) ? "resumed " : "";

			if (error == 0 || error == ECONNRESET)
				snprintf(reason, sizeof(reason),
					 "client %s the connection during the %sTLS handshake",
					 error == 0 ? "closed" : "reset", kind);
			else
				snprintf(reason, sizeof(reason),
					 "connection lost during the %sTLS handshake: %s", kind,
					 strerror(error));
			intercept_handshake_ended(client->intercept, reason);
			client_close(client, reason);
			return;
		}
		if (hung_up)
			snprintf(
				reason, sizeof(reason),
				"client hung up after receiving the certificate, without an alert");
		else
			tls_failure_reason(conn_ssl(client->conn), tls_error, &verify_failed,
					   reason, sizeof(reason));
		log_warn("intercept: client %s refused the certificate for %s or failed its "
			 "handshake: %s",
			 client->peer, intercept_prefix(client->intercept), reason);
		metrics_intercept_failure(client->proxy->metrics);
		intercept_handshake_ended(client->intercept, reason);
		client_close(client, "TLS handshake failed");
		return;
	}
	if (intercept_blind(client->intercept)) {
		/* the blind tunnel's connect is under way. A half-close behind
		 * the client's bytes is passed on once it is connected, as a
		 * blind tunnel does */
		if ((what & CONN_EOF) && conn_input_length(client->conn) > 0) {
			client->blind_eof = true;
			return;
		}
		/* a client that closes having sent nothing (as one waiting for
		 * the server's first words would close during the wait) or
		 * that is lost: gone, and the connect is given up */
		intercept_blind_refused(
			client->intercept,
			(what & CONN_EOF) ? "client closed before the blind tunnel was connected"
					  : "client connection lost before the blind tunnel was "
					    "connected");
		client_close(client, "client gone before the blind tunnel was connected");
		return;
	}
	if ((what & CONN_EOF) && !intercept_begun(client->intercept) &&
	    conn_input_length(client->conn) > 0) {
		/* too few bytes to tell, and no more to come: blind, the
		 * half-close passed on (or closed, if the blind tunnel is
		 * refused) */
		client->blind_eof = true;
		client_intercept_begin(client, INTERCEPT_LOOK_ENDED);
		return;
	}
	if ((what & CONN_TIMEOUT) && !(what & CONN_WRITING) &&
	    !intercept_begun(client->intercept) &&
	    client->config->intercept.server_first_after_ms > 0) {
		/* nothing, or too little to tell, from the client since the 200 */
		client_intercept_begin(client, INTERCEPT_LOOK_WAITED);
		return;
	}
	if (what & CONN_TIMEOUT)
		log_info("client %s: no TLS handshake or request for %s within client_timeout",
			 client->peer, intercept_prefix(client->intercept));
	intercept_handshake_ended(client->intercept, client_handshake_end_why(client, what));
	client_close(client, "intercepted tunnel closed during the handshake");
}

/* Parse the next head if it is all here, and start its exchange (or, for a
 * CONNECT to a host intercept: lists, the interception). */
static void client_read_head(struct client *client)
{
	struct evbuffer *in = conn_input(client->conn);
	const struct limits *limits;
	struct http1_limits parse_limits;
	struct http1_head *head = &client_request_head;
	struct http1_framing framing;
	enum http1_error error = HTTP1_ERR_NONE;
	size_t len = evbuffer_get_length(in);
	size_t want, seen;
	enum http1_parse parsed;
	struct exchange_owner owner;
	struct exchange *ex;
	int status = 0;
	char reason[256];

	if (len == 0)
		return;
	client_adopt_config(client);
	if (!client_allowed(client->config, (const struct sockaddr *)&client->peer_addr)) {
		client_idle_ends(client);
		/* accepted before a reload that took this client's access away */
		log_warn("client %s: refused%s%s: no longer in access.allow_clients", client->peer,
			 client->intercept != NULL ? " a request in the tunnel to " : "",
			 client->intercept != NULL ? intercept_prefix(client->intercept) : "");
		client_refuse(client, NULL, 403,
			      "client address not allowed by access.allow_clients");
		return;
	}
	limits = &client->config->limits;
	parse_limits.max_head_bytes = limits->max_header_bytes;
	parse_limits.max_target_bytes = limits->max_uri_bytes;
	/* one byte over the limit is enough for the parser to say 431 */
	want = len < limits->max_header_bytes + 1 ? len : limits->max_header_bytes + 1;
	/* as for a response head: the input's first block first, the whole
	 * window (a copy) only for a head that runs past it */
	seen = evbuffer_get_contiguous_space(in);
	if (seen > want)
		seen = want;
	parsed = http1_resume_request_head(&client->head_resume,
					   (const char *)evbuffer_pullup(in, (ev_ssize_t)seen),
					   seen, &parse_limits, head, &error);
	if (parsed == HTTP1_PARSE_MORE && seen < want)
		parsed = http1_resume_request_head(
			&client->head_resume, (const char *)evbuffer_pullup(in, (ev_ssize_t)want),
			want, &parse_limits, head, &error);
	switch (parsed) {
	case HTTP1_PARSE_MORE:
		/* the empty lines a request line may follow (RFC 9112 section
		 * 2.2: a stray CRLF after a body) begin no request: the
		 * connection stays idle, for a drain and max_connections too */
		if (client_input_is_empty_lines(client))
			return;
		client_idle_ends(client);
		/* a head in pieces (never on the hot path: heads come whole in
		 * one read): its answer, should it be cut, lasted from here */
		if (client->head_began_ms == 0) {
			uint32_t now = (uint32_t)timer_now_ms();

			/* 0 is "none": a clock at 0 modulo 2^32 counts as 1 */
			client->head_began_ms = now != 0 ? now : 1;
		}
		return;
	case HTTP1_PARSE_ERROR:
		if (error == HTTP1_ERR_HEAD_TOO_LARGE && client_drop_empty_lines(client)) {
			/* the head proper may still be within the limit */
			client_read_head(client);
			return;
		}
		/* a head refused once its method was read names it in the log,
		 * as a head refused for its framing does, and its target as far
		 * as the parser read it (http1_parse_request_head()) */
		client_idle_ends(client);
		client_refuse(client, head->method_len > 0 ? head : NULL, http1_error_status(error),
			      error == HTTP1_ERR_BAD_METHOD && client_input_is_tls(client)
				      ? "TLS handshake on a plain HTTP listener"
				      : http1_error_text(error));
		return;
	case HTTP1_PARSE_DONE:
		break;
	}
	client_idle_ends(client);
	client->head_began_ms = 0;
	if (http1_request_framing(head, &framing, &error) < 0) {
		client_refuse(client, head, http1_error_status(error), http1_error_text(error));
		return;
	}
	if (client->intercept == NULL && intercept_wanted(client->config, client->listen, head)) {
		client_intercept(client, head);
		return;
	}
	if (client->intercept != NULL && client->listen->upstream != NULL) {
		client_tunnel_on_sidecar(client, reason, sizeof(reason));
		log_warn("client %s: refused a request in the tunnel to %s: %s", client->peer,
			 intercept_host(client->intercept), reason);
		client_refuse(client, head, 403, reason);
		return;
	}
	owner = client_exchange_owner(client);
	if (max_forwards_of(head, NULL) == 0) {
		/* a TRACE or OPTIONS that may go no further: its final recipient,
		 * once it is a request this connection may carry */
		if (client->intercept != NULL &&
		    (status = exchange_check_tunnel(&owner, head, &framing, reason,
						    sizeof(reason))) != 0) {
			client_refuse(client, head, status, reason);
			return;
		}
		client_log_own_answer(client, head, 200, "Max-Forwards: 0, answered by the proxy",
				      max_forwards_answer(conn_output(client->conn), head));
		client_close_after_flush(client);
		return;
	}
	conn_set_deadline(client->conn, 0);
	client->head_timer_at_flush = false;
	ex = exchange_new(client->proxy, &owner, head, &framing, &status, reason, sizeof(reason));
	if (ex == NULL) {
		client_refuse(client, head, status, reason);
		return;
	}
	evbuffer_drain(in, head->head_len);
	client->state = CLIENT_IN_EXCHANGE;
	client->exchange = ex;
	exchange_run(ex);
}

static void client_read_cb(struct conn *conn, void *arg)
{
	struct client *client = arg;

	switch (client->state) {
	case CLIENT_READING_HEAD:
		client_read_head(client);
		break;
	case CLIENT_IN_EXCHANGE:
		exchange_client_readable(client->exchange);
		break;
	case CLIENT_CLOSING:
	case CLIENT_LINGERING:
		evbuffer_drain(conn_input(conn), conn_input_length(conn));
		break;
	case CLIENT_HANDSHAKE:
		client_intercept_begin(client, INTERCEPT_LOOK_NOW);
		break;
	case CLIENT_ENDING:
	case CLIENT_RESETTING:
		break;
	}
}

/* Wait for the next request head: a pipelined one may be in the input. Its
 * client_timeout counts from the end of the previous response: once that is
 * written (client_write_cb), not when it was queued, so that a client slow to
 * read a large response still has the whole idle time after it. */
static void client_read_next(struct client *client)
{
	conn_read_enable(client->conn, true);
	client->head_timer_at_flush = conn_output_length(client->conn) > 0;
	if (!client->head_timer_at_flush) {
		client_arm_head_timer(client);
		client_idle_begins(client);
	}
	if (conn_input_length(client->conn) > 0)
		conn_read_again(client->conn);
}

static void client_write_cb(struct conn *conn, void *arg)
{
	struct client *client = arg;

	switch (client->state) {
	case CLIENT_IN_EXCHANGE:
		exchange_client_drained(client->exchange);
		break;
	case CLIENT_CLOSING:
		if (conn_output_length(conn) == 0)
			client_linger(client);
		break;
	case CLIENT_READING_HEAD:
		if (client->output_full) {
			client->output_full = false;
			client_read_next(client);
		} else if (client->head_timer_at_flush && conn_output_length(conn) == 0) {
			client->head_timer_at_flush = false;
			client_arm_head_timer(client);
			client_idle_begins(client);
		}
		break;
	case CLIENT_ENDING:
		/* the close_notify that waited for the socket is gone */
		if (!conn_output_ending(conn))
			client_free(client);
		break;
	case CLIENT_LINGERING:
	case CLIENT_HANDSHAKE:
	case CLIENT_RESETTING:
		break;
	}
}

/* The client closed its side. Its close_notify between requests in an
 * intercepted tunnel is answered with ours (client_close_between). */
static void client_closed(struct client *client)
{
	client_close_between(client, "client closed the connection", false);
}

/* The head of a request cut by client_timeout, parsed again from what came
 * (the shared head holds another client's by now): when its request line
 * was read whole, its method and target name it in the access line, as for
 * a head refused for one of its fields; else NULL. */
static const struct http1_head *client_cut_head(struct client *client)
{
	struct evbuffer *in = conn_input(client->conn);
	const struct limits *limits = &client->config->limits;
	struct http1_limits parse_limits = {
		.max_head_bytes = limits->max_header_bytes,
		.max_target_bytes = limits->max_uri_bytes,
	};
	enum http1_error error;

	if (http1_parse_request_head((const char *)evbuffer_pullup(in, -1), evbuffer_get_length(in),
				     &parse_limits, &client_request_head,
				     &error) != HTTP1_PARSE_MORE)
		return NULL;
	return client_request_head.parsed_target.path != NULL ? &client_request_head : NULL;
}

/* client_timeout passed without a whole request head. A head begun and not
 * finished is a request that timed out: it gets a 408 and an access line
 * (RFC 9110 section 15.5.9). A connection that sent no request since its
 * last response is only idle, and closes silently (RFC 9112 section 9.5): a
 * 408 there could be taken for the answer to a request sent meanwhile. */
static void client_head_timeout(struct client *client)
{
	if (client_input_is_empty_lines(client)) {
		client_close_between(client, "client_timeout", false);
		return;
	}
	log_info("client %s: request head not complete within client_timeout; answering 408",
		 client->peer);
	client_refuse(client, client_cut_head(client), 408,
		      "request head not complete within client_timeout");
}

/* How the client's connection ended (what: CONN_EOF, or CONN_ERROR) in the
 * middle of its request's head, or of its body: the note of its line. */
static const char *client_cut_why(const struct client *client, short what, bool body)
{
	if (what & CONN_EOF)
		return body ? "client closed the connection during the request body"
			    : "client closed the connection during the request head";
	if (conn_error(client->conn) == ECONNRESET)
		return body ? "client reset the connection during the request body"
			    : "client reset the connection during the request head";
	return body ? "client connection lost during the request body"
		    : "client connection lost during the request head";
}

/* The client's connection ended (what: CONN_EOF, or CONN_ERROR) with a
 * request head begun and not whole: a request all the same, which gets its
 * access line (nginx logs it as a 400). After a FIN the client may only
 * have half-closed and still read: it is answered 400, as a head cut by
 * client_timeout gets its 408 (RFC 9112 section 8 lets a server answer an
 * incomplete request before it closes). A reset takes nothing more:
 * status 0, what the client got, as for a request whose client left. */
static void client_head_cut(struct client *client, short what)
{
	const char *text = client_cut_why(client, what, false);

	if (what & CONN_EOF) {
		client_refuse(client, client_cut_head(client), 400, text);
		return;
	}
	client_log_own_answer(client, client_cut_head(client), 0, text, 0);
	client_close(client, text);
}

/* The drain's answer time with a request head begun and not finished: as
 * client_timeout would, a 408 while there is time left to write it, rather
 * than a bare close at drain_timeout (RFC 9110 section 15.5.9). A
 * connection with nothing of a request closed when the drain began. */
static void client_head_drained(struct client *client)
{
	if (client->state != CLIENT_READING_HEAD || client->conn == NULL || client->output_full ||
	    client_input_is_empty_lines(client))
		return;
	log_info("client %s: request head not complete when the drain ended; answering 408",
		 client->peer);
	client_refuse(client, client_cut_head(client), 408,
		      "request head not complete before the proxy shut down");
}

static void client_event_cb(struct conn *conn, short what, void *arg)
{
	struct client *client = arg;

	if (client->state == CLIENT_HANDSHAKE) {
		client_handshake_done(client, what);
		return;
	}
	if (client->state == CLIENT_LINGERING && conn_output_ending(conn) &&
	    ((what & CONN_EOF) || what == (CONN_TIMEOUT | CONN_READING))) {
		/* the linger is over (the client's FIN, or its quiet), our
		 * close_notify not yet: wait for it, within the linger's bounds */
		client->state = CLIENT_ENDING;
		conn_read_enable(conn, false);
		return;
	}
	if (client->state == CLIENT_LINGERING || client->state == CLIENT_ENDING) {
		client_free(client);
		return;
	}
	if (client->state == CLIENT_RESETTING) {
		if (what == CONN_TIMEOUT)
			client_reset_look(client);
		else
			client_close_reset(client, "client connection error");
		return;
	}
	if ((what & CONN_TIMEOUT) && (what & CONN_READING)) {
		/* a response begun is cut short as a broken one is; else a 408 */
		if (client->exchange != NULL)
			exchange_body_stalled(client->exchange,
					      "request body stalled for client_timeout");
		else
			client_close(client, "request body stalled for client_timeout");
	} else if ((what & CONN_TIMEOUT) && (what & CONN_WRITING))
		client_close_reset(client, "client stopped reading");
	else if (what & CONN_TIMEOUT)
		client_head_timeout(client);
	else if (client->state == CLIENT_READING_HEAD &&
		 (client->head_began_ms != 0 || client_input_ends_in_bare_cr(client)))
		client_head_cut(client, what); /* a head in pieces, ended before it was whole */
	else if (client->exchange != NULL && exchange_request_body_owed(client->exchange))
		/* gone as any client whose request is under way, and its line
		 * says its body was cut (not a client that left waiting) */
		client_close(client, client_cut_why(client, what, true));
	else if ((what & CONN_EOF) && client->state == CLIENT_READING_HEAD &&
		 conn_output_length(conn) > 0)
		client_close_after_flush(client); /* the last response still goes out */
	else if (what & CONN_EOF)
		client_closed(client);
	else
		client_close(client, "client connection error");
}

/* The response is queued: read the next request or, without keep_alive,
 * close once the output is flushed. */
static void client_exchange_done(struct client *client, bool keep_alive)
{
	client_adopt_config(client);
	if (!keep_alive || client->proxy->draining || client->listener_gone) {
		client_close_after_flush(client);
		return;
	}
	client->state = CLIENT_READING_HEAD;
	if (conn_output_length(client->conn) > CLIENT_OUTPUT_HIGH) {
		/* client_write_cb goes on once it drains to CLIENT_OUTPUT_LOW */
		client->output_full = true;
		conn_read_enable(client->conn, false);
		return;
	}
	client_read_next(client);
}

/* The exchange turned into a tunnel to upstream (a CONNECT, or a switch of
 * protocols): the connection goes to a tunnel, and this client is gone. */
static void client_exchange_tunnel(struct client *client, struct conn *upstream,
				   struct access_record *tunnel_log)
{
	struct proxy *proxy = client->proxy;
	struct conn *conn = client->conn;
	uint64_t idle_ms = client->config->limits.tunnel_idle_timeout_ms;
	bool client_eof = client->blind_eof;

	client->conn = NULL;
	registry_remove(&client->entry);
	/* an intercepted tunnel ends here: the switched protocol's own line
	 * comes when its tunnel ends */
	intercept_end(client->intercept, conn);
	intercept_free(client->intercept);
	config_release(client->config);
	free(client);
	/* the tunnel takes over the connection, and its place among those
	 * max_connections counts */
	tunnel_new(proxy, conn, upstream, idle_ms, tunnel_log, client_eof);
}

/* How the exchange ended decides what becomes of the connection. The
 * exchange frees itself; it must not be touched after this. */
static void client_exchange_ended(void *arg, enum exchange_end end, struct conn *tunnel,
				  struct access_record *tunnel_log)
{
	struct client *client = arg;

	client->exchange = NULL;
	switch (end) {
	case EXCHANGE_END_KEEP_ALIVE:
		client_exchange_done(client, true);
		break;
	case EXCHANGE_END_CLOSE:
	case EXCHANGE_END_BROKEN:
		client_exchange_done(client, false);
		break;
	case EXCHANGE_END_RESET:
		client_reset_after_flush(client);
		break;
	case EXCHANGE_END_TUNNEL:
		client_exchange_tunnel(client, tunnel, tunnel_log);
		break;
	case EXCHANGE_END_CLIENT_GONE:
		break;
	}
}

/* What an exchange of this client needs from it. */
static struct exchange_owner client_exchange_owner(struct client *client)
{
	struct exchange_owner owner = {
		.conn = client->conn,
		.config = client->config,
		.upstream = client->listen->upstream,
		.tunnel_host = NULL,
		.target_prefix = NULL,
		.peer = client->peer,
		.watch_body = client_watch_body,
		.closing = client_closing_after_request,
		.ended = client_exchange_ended,
		.arg = client,
	};

	if (client->intercept != NULL) {
		/* inside an intercepted tunnel: a sidecar for https://host:port */
		owner.upstream = intercept_upstream(client->intercept);
		owner.tunnel_host = intercept_host(client->intercept);
		owner.target_prefix = intercept_prefix(client->intercept);
	}
	return owner;
}

/* Waiting for a request, with nothing of one read yet (the empty lines a
 * request line may follow are none of it). */
static bool client_idle(const struct client *client)
{
	return client->state == CLIENT_READING_HEAD && client->conn != NULL &&
	       client_input_is_empty_lines(client);
}

/* Close a connection waiting for its next request: now, or once the last
 * response, which may still be going out, is written. */
static void client_close_idle(struct client *client, const char *why)
{
	if (conn_output_length(client->conn) > 0)
		client_close_after_flush(client);
	else
		client_close_between(client, why, false);
}

/* When an idle client became idle: its head timer was set to
 * client_timeout from then (client_arm_head_timer). */
static uint64_t client_idle_since(const struct client *client)
{
	uint64_t deadline = conn_deadline_at(client->conn);
	uint64_t timeout = client->config->limits.client_timeout_ms;

	return deadline > timeout ? deadline - timeout : 0;
}

bool client_close_longest_idle(struct proxy *proxy, uint64_t *closable_at)
{
	uint64_t now = timeval_now_coarse_ms();
	struct client *client;

	*closable_at = 0;
	while ((client = TAILQ_FIRST(&proxy->idle_clients)) != NULL) {
		uint64_t since;

		/* a next request begun, or a close under way: not idle */
		if (!client_idle(client) || conn_output_length(client->conn) > 0) {
			client_idle_ends(client);
			continue;
		}
		/* idle since a moment: its next request may be on its way, and
		 * would be lost to the close; the longest idle is the oldest */
		since = client_idle_since(client);
		if (now < since + CLIENT_IDLE_CLOSE_MIN_MS) {
			*closable_at = since + CLIENT_IDLE_CLOSE_MIN_MS;
			return false;
		}
		client_idle_ends(client);
		log_info("max_connections (%u) reached: closed the idle keep-alive connection of "
			 "client %s to accept a new one",
			 proxy->config->limits.max_connections, client->peer);
		client_close_between(client, "idle at max_connections: closed to make room", true);
		return true;
	}
	return false;
}

/* A drain begins: an idle connection closes now, and so does a client
 * still silent in an intercepted tunnel (it would go blind after the
 * wait); a request whose next try would start after the drain gets its
 * answer now. */
static void client_drain_begins(void *self)
{
	struct client *client = self;

	if (client_idle(client))
		client_close_idle(client, "draining");
	else if (client->state == CLIENT_HANDSHAKE && !intercept_begun(client->intercept) &&
		 conn_input_length(client->conn) == 0)
		client_close(client, "draining");
	else if (client->exchange != NULL)
		exchange_drain_begins(client->exchange);
}

/* Does a reload to live change the deadline of a client in an intercepted
 * CONNECT's handshake: its client_timeout, or, while it is still silent,
 * intercept.server_first_after? */
static bool client_handshake_timer_changed(const struct client *client, const struct config *live)
{
	return client->config->limits.client_timeout_ms != live->limits.client_timeout_ms ||
	       (!intercept_begun(client->intercept) &&
		client->config->intercept.server_first_after_ms !=
			live->intercept.server_first_after_ms);
}

/* The live config changed (reload). The connection takes it at its next
 * request, an idle one's client_timeout at once; if its listener's address
 * is gone it closes now when idle, or after its current request. */
static void client_config_changed(void *self)
{
	struct client *client = self;
	const struct config *live = client->proxy->config;

	if (client_find_listener(live, client->listen) == NULL) {
		client->listener_gone = true;
		if (client_idle(client))
			client_close_idle(client, "its listener was removed by a reload");
	} else if (client_idle(client) &&
		   !client_allowed(live, (const struct sockaddr *)&client->peer_addr)) {
		/* its next request would get a 403 */
		client_close_idle(client, "no longer in access.allow_clients");
	} else if (client->state == CLIENT_READING_HEAD && client->conn != NULL &&
		   conn_input_length(client->conn) > 0) {
		bool rearm =
			!client->head_timer_at_flush && !client->output_full &&
			client->config->limits.client_timeout_ms != live->limits.client_timeout_ms;

		/* a head under way may have stopped at the old max_header_bytes:
		 * the new limit lets it be read on; and it must still arrive
		 * whole within client_timeout, the new one, counted from the
		 * reload as for an idle connection */
		client_adopt_config(client);
		if (rearm && client->config == live)
			client_arm_head_timer(client);
	} else if (client->state == CLIENT_HANDSHAKE && !intercept_blind(client->intercept) &&
		   client_handshake_timer_changed(client, live)) {
		bool timeout_changed =
			client->config->limits.client_timeout_ms != live->limits.client_timeout_ms;

		/* an intercepted CONNECT's TLS handshake must end within
		 * client_timeout as a head must: the new one, from the reload;
		 * a client still silent goes blind after the new
		 * server_first_after, counted from the 200 as ever: the silence
		 * it kept counts */
		client_adopt_config(client);
		if (client->config == live)
			client_arm_handshake_timer(client, !timeout_changed);
	} else if (client_idle(client) && !client->head_timer_at_flush && !client->output_full &&
		   client->config->limits.client_timeout_ms != live->limits.client_timeout_ms) {
		/* waiting for its next request under the old client_timeout: a
		 * lowered one would not close it for as long as the old one ran;
		 * the new one counts from the reload */
		client_adopt_config(client);
		client_arm_head_timer(client);
	}
}

/* Close, for the registry (shutdown, drain timeout). A request cut short,
 * or a response whose tail is still queued, is reset, as
 * exchange_break_response() does, so that the client sees an error and
 * never takes a cut close-delimited body for a whole one. */
static void client_close_cb(void *self, const char *reason)
{
	struct client *client = self;

	if (client->exchange != NULL)
		exchange_proxy_ends(client->exchange);
	if (client->conn != NULL &&
	    (client->exchange != NULL || client->state == CLIENT_RESETTING ||
	     conn_output_length(client->conn) > 0))
		client_close_reset(client, reason);
	else
		client_close(client, reason);
}

/* The drain's answer time: a request waiting for its next try is answered,
 * a request head not finished gets its 408; the connection closes once the
 * answer is written (a drain keeps no connection alive). The client may be
 * gone when this returns. */
static void client_drain_answer(void *self)
{
	struct client *client = self;

	if (client->exchange != NULL)
		exchange_drain_answer(client->exchange);
	else
		client_head_drained(client);
}

static const struct registry_ops client_registry_ops = {
	.close = client_close_cb,
	.drain_begins = client_drain_begins,
	.drain_answer = client_drain_answer,
	.config_changed = client_config_changed,
};

/* Are the address bytes a (of c's family) inside network c? */
static bool client_in_cidr(const struct cidr *c, const unsigned char *a)
{
	const unsigned char *n;
	unsigned bits = c->prefix_len;
	unsigned bytes = bits / 8;

	if (c->addr.ss_family == AF_INET)
		n = (const unsigned char *)&((const struct sockaddr_in *)&c->addr)->sin_addr;
	else
		n = (const unsigned char *)&((const struct sockaddr_in6 *)&c->addr)->sin6_addr;
	if (memcmp(a, n, bytes) != 0)
		return false;
	if (bits % 8 != 0) {
		unsigned char mask = (unsigned char)(0xff << (8 - bits % 8));

		if ((a[bytes] & mask) != (n[bytes] & mask))
			return false;
	}
	return true;
}

/* Is the peer inside access.allow_clients? */
static bool client_allowed(const struct config *config, const struct sockaddr *peer)
{
	struct in6_addr as_v6; /* an IPv4 peer, as ::ffff:a.b.c.d */
	const unsigned char *v4;
	size_t i;

	if (peer->sa_family == AF_INET) {
		memset(&as_v6, 0, sizeof(as_v6));
		as_v6.s6_addr[10] = 0xff;
		as_v6.s6_addr[11] = 0xff;
		memcpy(&as_v6.s6_addr[12], &((const struct sockaddr_in *)peer)->sin_addr, 4);
	} else {
		as_v6 = ((const struct sockaddr_in6 *)peer)->sin6_addr;
	}
	/* an IPv4 client of a dual-stack listener is ::ffff:a.b.c.d: the
	 * IPv4 entries decide, and of the IPv6 ones only those inside
	 * ::ffff:0:0/96, IPv4 networks spelt as the log shows such a client
	 * (::/0 does not let in every IPv4 client) */
	v4 = IN6_IS_ADDR_V4MAPPED(&as_v6) ? &as_v6.s6_addr[12] : NULL;
	for (i = 0; i < config->allow_client_count; i++) {
		const struct cidr *c = &config->allow_clients[i];
		const struct in6_addr *net = &((const struct sockaddr_in6 *)&c->addr)->sin6_addr;

		if (c->addr.ss_family == AF_INET) {
			if (v4 != NULL && client_in_cidr(c, v4))
				return true;
			continue;
		}
		if (v4 != NULL && !(c->prefix_len >= 96 && IN6_IS_ADDR_V4MAPPED(net)))
			continue;
		if (client_in_cidr(c, as_v6.s6_addr))
			return true;
	}
	return false;
}

/* "127.0.0.1:5555" or "[::1]:5555" for logs. */
static void client_format_peer(const struct sockaddr *peer, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (peer->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)peer;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(sin->sin_port));
	} else if (peer->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)peer;

		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(sin6->sin6_port));
	} else {
		snprintf(buf, len, "unknown");
	}
}

void client_new(struct proxy *proxy, struct config *config, const struct listener_config *listen,
		evutil_socket_t fd, const struct sockaddr *peer, socklen_t peer_len)
{
	struct client *client = xcalloc(1, sizeof(*client));
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	client->proxy = proxy;
	client->config = config_hold(config);
	client->listen = listen;
	if (peer_len <= sizeof(client->peer_addr))
		memcpy(&client->peer_addr, peer, peer_len);
	client_format_peer(peer, client->peer, sizeof(client->peer));
	client->conn = conn_new(proxy->loop, fd);
	client->state = CLIENT_READING_HEAD;
	registry_add(&proxy->registry, &client->entry, &client_registry_ops, client);
	client_set_input_limit(client);
	conn_set_output_low(client->conn, CLIENT_OUTPUT_LOW);
	client_set_timeouts(client, false);
	conn_setcb(client->conn, client_read_cb, client_write_cb, client_event_cb, client);
	if (!client_allowed(config, peer)) {
		log_warn("client %s: refused: not in access.allow_clients", client->peer);
		client_refuse(client, NULL, 403,
			      "client address not allowed by access.allow_clients");
		return;
	}
	conn_read_enable(client->conn, true);
	client_arm_head_timer(client);
}
