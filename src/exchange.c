#include "exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "access_log.h"
#include "body.h"
#include "client.h"
#include "config.h"
#include "log.h"
#include "pool.h"
#include "proxy.h"
#include "request_target.h"
#include "route.h"
#include "upstream.h"
#include "xmalloc.h"

/* Backpressure marks: a side's queued output past HIGH stops reading the
 * other side until it drains below LOW. */
#define EXCHANGE_OUTPUT_HIGH (256 * 1024)
#define EXCHANGE_OUTPUT_LOW (64 * 1024)
#define EXCHANGE_UPSTREAM_READ_HIGH (256 * 1024)

#define EXCHANGE_ADD_LITERAL(buf, s) evbuffer_add((buf), (s), sizeof(s) - 1)

enum exchange_state {
	EXCHANGE_CONNECTING,   /* waiting for an upstream connection, new or pooled */
	EXCHANGE_WAITING_HEAD, /* the request is (being) sent; no response head yet */
	EXCHANGE_RELAYING,     /* the response head reached the client; body flowing */
	EXCHANGE_BACKOFF,      /* between tries, on the backoff timer */
	EXCHANGE_DONE,         /* the response is queued or the exchange was aborted */
};

static const char *const exchange_state_names[] = {
	[EXCHANGE_CONNECTING] = "connecting",
	[EXCHANGE_WAITING_HEAD] = "waiting-head",
	[EXCHANGE_RELAYING] = "relaying",
	[EXCHANGE_BACKOFF] = "backoff",
	[EXCHANGE_DONE] = "done",
};

/* Why a try ended without a usable response head. */
enum try_failure {
	TRY_DNS,          /* the upstream name did not resolve */
	TRY_REFUSED,      /* connect refused or unreachable */
	TRY_CONNECT_TIMEOUT, /* no connection within connect_timeout */
	TRY_TLS,          /* TLS handshake failed */
	TRY_TLS_VERIFY,   /* certificate verification failed: never retried */
	TRY_STALE,        /* a pooled connection closed before any response byte */
	TRY_RESET,        /* closed or reset before the whole response head */
	TRY_TIMEOUT,      /* no response head within try_timeout */
	TRY_MALFORMED,    /* the response head broke HTTP/1.1 */
};

static const char *const try_failure_names[] = {
	[TRY_DNS] = "dns",
	[TRY_REFUSED] = "refused",
	[TRY_CONNECT_TIMEOUT] = "connect-timeout",
	[TRY_TLS] = "tls",
	[TRY_TLS_VERIFY] = "tls-verify",
	[TRY_STALE] = "stale",
	[TRY_RESET] = "reset",
	[TRY_TIMEOUT] = "timeout",
	[TRY_MALFORMED] = "malformed",
};

struct exchange {
	struct proxy *proxy;
	struct client *client;
	struct config *config;          /* held: the request finishes under this one */
	const struct route *route;      /* inside config */
	enum exchange_state state;
	struct timeval started;

	/* the request as the client sent it */
	char *method;
	char *target;
	size_t method_len;
	size_t target_len;
	int client_minor;               /* HTTP/1.x of the client */
	bool client_keep_alive;         /* the client allows another request */
	bool head_request;
	bool is_connect;
	bool expect_continue;

	/* where it goes */
	struct upstream_endpoint endpoint;
	char *endpoint_host;
	const struct tls_policy *tls;
	char pool_key[600];
	struct evbuffer *request_head;  /* built once, sent again on every try */
	struct body_relay request_body;
	bool request_body_started;      /* body bytes left the client's input */
	bool client_read_paused;        /* upstream output full: client not read */

	/* the current try */
	unsigned attempts;
	struct upstream_connect *connecting;
	struct bufferevent *up;
	bool up_reused;                 /* the connection came from the pool */
	bool up_read_paused;            /* client output full: upstream not read */
	bool response_byte_seen;
	bool skip_pool;                 /* the next try takes a new connection */
	struct event *try_timer;        /* try_timeout until the response head */

	/* the response */
	struct http1_framing response_framing;
	struct body_relay response_body;
	bool client_keep_after;         /* the response's framing lets the client connection live */
	int status;                     /* what the client got */
	const char *note;

	struct access_try tries[ACCESS_LOG_MAX_TRIES];
	size_t try_count;
};

/* Heads are parsed and used before control returns to the event loop, so one
 * scratch head serves every exchange without an allocation per response. */
static struct http1_head exchange_response_head;

static void exchange_set_state(struct exchange *ex, enum exchange_state state)
{
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_debug("exchange %p %.*s %.*s: %s -> %s", (void *)ex, (int)ex->method_len,
			  ex->method, (int)ex->target_len, ex->target,
			  exchange_state_names[ex->state], exchange_state_names[state]);
	ex->state = state;
}

static struct timeval exchange_ms_to_tv(uint64_t ms)
{
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000 };

	return tv;
}

/* Is host allowed by access.allow_hosts? Checked before any DNS. */
static bool exchange_host_allowed(const struct config *config, const char *host, size_t len)
{
	size_t i;

	for (i = 0; i < config->allow_host_count; i++)
		if (route_host_pattern_matches(config->allow_hosts[i], host, len))
			return true;
	return false;
}

/* Copy one field line into the upstream head, unless the proxy owns it. */
static void exchange_copy_request_field(struct exchange *ex, const struct http1_head *head,
					const struct http1_field *f, bool *seen_length)
{
	if (http1_name_equals(f->name, f->name_len, "Transfer-Encoding")) {
		/* the body is forwarded in the coding it came in, so its
		 * Transfer-Encoding still describes it */
		evbuffer_add(ex->request_head, f->line, f->line_len);
		return;
	}
	if (http1_field_is_hop_by_hop(head, f))
		return;
	if (http1_name_equals(f->name, f->name_len, "Host"))
		return; /* replaced by the upstream's authority */
	if (http1_name_equals(f->name, f->name_len, "Expect"))
		return; /* the proxy answered 100-continue itself and sends the body at once */
	if (http1_name_equals(f->name, f->name_len, "Content-Length")) {
		if (*seen_length)
			return; /* identical repeats were checked; one is enough */
		*seen_length = true;
	}
	evbuffer_add(ex->request_head, f->line, f->line_len);
}

/* The request head as it goes upstream: origin-form target, Host of the
 * upstream, the client's fields minus hop-by-hop ones, and Via. */
static void exchange_build_request_head(struct exchange *ex, const struct http1_head *head,
					const char *path, size_t path_len, const char *authority,
					size_t authority_len)
{
	bool seen_length = false;
	size_t i;

	ex->request_head = evbuffer_new();
	evbuffer_add(ex->request_head, head->method, head->method_len);
	evbuffer_add(ex->request_head, " ", 1);
	if (path_len == 0 || path[0] == '?')
		evbuffer_add(ex->request_head, "/", 1);
	evbuffer_add(ex->request_head, path, path_len);
	evbuffer_add_printf(ex->request_head, " HTTP/1.1\r\nHost: %.*s\r\n", (int)authority_len,
			    authority);
	for (i = 0; i < head->field_count; i++)
		exchange_copy_request_field(ex, head, &head->fields[i], &seen_length);
	EXCHANGE_ADD_LITERAL(ex->request_head, "Via: 1.1 retryproxy\r\n\r\n");
}

struct exchange *exchange_new(struct client *client, const struct http1_head *head,
			      const struct http1_framing *framing, int *status, char *reason,
			      size_t reason_len)
{
	struct config *config = client_config(client);
	const struct listener_config *listen = client_listener(client);
	struct request_target target;
	const struct upstream_url *upstream = NULL;
	const char *match_host = "";
	size_t match_host_len = 0;
	const char *path;
	size_t path_len;
	bool origin_form = false;
	bool host_decides_upstream = false;
	struct exchange *ex;

	memset(&target, 0, sizeof(target));
	*status = 400;
	if (head->method_len == 7 && memcmp(head->method, "CONNECT", 7) == 0) {
		if (request_target_parse_authority(head->target, head->target_len, &target) < 0) {
			snprintf(reason, reason_len, "invalid CONNECT target");
			return NULL;
		}
		match_host = target.host;
		match_host_len = target.host_len;
		path = "";
		path_len = 0;
		host_decides_upstream = true;
	} else if (head->target[0] == '/' ||
		   (head->target_len == 1 && head->target[0] == '*')) {
		if (head->target[0] == '*' &&
		    !(head->method_len == 7 && memcmp(head->method, "OPTIONS", 7) == 0)) {
			snprintf(reason, reason_len, "asterisk-form target is only for OPTIONS");
			return NULL;
		}
		origin_form = true;
		if (framing->host != NULL &&
		    request_target_host_of(framing->host, framing->host_len, &match_host,
					   &match_host_len) < 0) {
			snprintf(reason, reason_len, "invalid Host");
			return NULL;
		}
		path = head->target;
		path_len = head->target_len;
	} else {
		if (request_target_parse_absolute(head->target, head->target_len, &target) < 0) {
			snprintf(reason, reason_len, "invalid request target");
			return NULL;
		}
		match_host = target.host;
		match_host_len = target.host_len;
		path = target.path;
		path_len = target.path_len;
	}

	if (framing->body == HTTP1_BODY_LENGTH && config->limits.max_body_bytes > 0 &&
	    framing->content_length > config->limits.max_body_bytes) {
		*status = 413;
		snprintf(reason, reason_len, "request body of %llu bytes is over max_body_bytes",
			 (unsigned long long)framing->content_length);
		return NULL;
	}

	ex = xcalloc(1, sizeof(*ex));
	ex->is_connect = head->method_len == 7 && memcmp(head->method, "CONNECT", 7) == 0;
	ex->route = route_match(config, match_host, match_host_len, path, path_len, head->method,
				head->method_len);
	/* a tunnel goes where the client asked; other requests to the route's
	 * upstream, else the listener's (sidecar), else the absolute URI's */
	if (!ex->is_connect && ex->route->upstream != NULL)
		upstream = ex->route->upstream;
	else if (origin_form)
		upstream = listen->upstream;
	if (upstream == NULL && origin_form) {
		free(ex);
		snprintf(reason, reason_len,
			 "origin-form request on a listener with no upstream (this is a forward proxy: send absolute-form)");
		return NULL;
	}
	if (upstream == NULL && !ex->is_connect)
		host_decides_upstream = true;
	if (host_decides_upstream && !exchange_host_allowed(config, match_host, match_host_len)) {
		free(ex);
		*status = 403;
		snprintf(reason, reason_len, "host %.*s not allowed by access.allow_hosts",
			 (int)(match_host_len > 200 ? 200 : match_host_len), match_host);
		log_warn("client %s: refused host %.*s: not in access.allow_hosts", client_peer(client),
			 (int)(match_host_len > 200 ? 200 : match_host_len), match_host);
		return NULL;
	}

	ex->proxy = client_proxy(client);
	ex->client = client;
	ex->config = config_hold(config);
	ex->state = EXCHANGE_CONNECTING;
	gettimeofday(&ex->started, NULL);
	ex->method = xstrndup(head->method, head->method_len);
	ex->method_len = head->method_len;
	ex->target = xstrndup(head->target, head->target_len);
	ex->target_len = head->target_len;
	ex->client_minor = head->version_minor;
	ex->client_keep_alive = framing->keep_alive;
	ex->head_request = head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0;
	ex->expect_continue = framing->expect_continue;
	ex->tls = &ex->route->tls;
	if (upstream != NULL) {
		ex->endpoint_host = xstrdup(upstream->host);
		ex->endpoint.tls = upstream->tls;
		ex->endpoint.port = upstream->port;
	} else {
		ex->endpoint_host = xstrndup(target.host, target.host_len);
		ex->endpoint.tls = target.tls;
		ex->endpoint.port = target.port;
	}
	ex->endpoint.host = ex->endpoint_host;
	upstream_pool_key(&ex->endpoint, ex->tls, ex->pool_key, sizeof(ex->pool_key));

	if (!ex->is_connect) {
		if (upstream != NULL)
			exchange_build_request_head(ex, head, path, path_len, upstream->authority,
						    strlen(upstream->authority));
		else
			exchange_build_request_head(ex, head, path, path_len, target.authority,
						    target.authority_len);
	}
	switch (framing->body) {
	case HTTP1_BODY_LENGTH:
		body_relay_init(&ex->request_body, BODY_MODE_LENGTH, framing->content_length, 0);
		break;
	case HTTP1_BODY_CHUNKED:
		body_relay_init(&ex->request_body, BODY_MODE_CHUNKED, 0,
				config->limits.max_header_bytes);
		break;
	default:
		body_relay_init(&ex->request_body, BODY_MODE_LENGTH, 0, 0);
		break;
	}
	return ex;
}

/* Access-log line for this exchange. */
static void exchange_log(struct exchange *ex)
{
	struct timeval now;
	struct access_record record;

	gettimeofday(&now, NULL);
	memset(&record, 0, sizeof(record));
	record.client = client_peer(ex->client);
	record.method = ex->method;
	record.method_len = ex->method_len;
	record.target = ex->target;
	record.target_len = ex->target_len;
	record.route = ex->route->name;
	record.status = ex->status;
	record.attempts = ex->attempts;
	record.bytes = ex->response_body.payload_bytes;
	record.duration_ms = (uint64_t)(now.tv_sec - ex->started.tv_sec) * 1000 +
			     (uint64_t)((now.tv_usec - ex->started.tv_usec) / 1000);
	record.note = ex->note;
	record.tries = ex->tries;
	record.try_count = ex->try_count;
	access_log_write(&record);
}

/* Note the outcome of the current try for the access log. */
static void exchange_record_try(struct exchange *ex, int status, const char *error)
{
	if (ex->try_count < ACCESS_LOG_MAX_TRIES) {
		ex->tries[ex->try_count].status = status;
		ex->tries[ex->try_count].error = error;
		ex->tries[ex->try_count].wait_ms = 0;
		ex->try_count++;
	}
}

/* Close the current try's upstream connection, if any. */
static void exchange_drop_upstream(struct exchange *ex)
{
	if (ex->connecting != NULL) {
		upstream_connect_cancel(ex->connecting);
		ex->connecting = NULL;
	}
	if (ex->up != NULL) {
		bufferevent_free(ex->up);
		ex->up = NULL;
		ex->proxy->upstream_count--;
	}
	ex->up_read_paused = false;
	if (ex->client_read_paused) {
		ex->client_read_paused = false;
		bufferevent_enable(client_bev(ex->client), EV_READ);
	}
}

void exchange_free(struct exchange *ex)
{
	if (ex == NULL)
		return;
	exchange_drop_upstream(ex);
	if (ex->try_timer != NULL)
		event_free(ex->try_timer);
	if (ex->request_head != NULL)
		evbuffer_free(ex->request_head);
	config_release(ex->config);
	free(ex->method);
	free(ex->target);
	free(ex->endpoint_host);
	free(ex);
}

/* The response is queued for the client: log, and hand the connection back. */
static void exchange_finish(struct exchange *ex, bool keep_alive)
{
	exchange_set_state(ex, EXCHANGE_DONE);
	evtimer_del(ex->try_timer);
	exchange_log(ex);
	/* the request's unread rest would be taken for the next request */
	if (!ex->request_body.done)
		keep_alive = false;
	client_exchange_done(ex->client, keep_alive);
}

/* Answer with the proxy's own error response; nothing of an upstream
 * response has reached the client. */
static void exchange_respond_error(struct exchange *ex, int status, const char *text)
{
	bool keep_alive = ex->client_keep_alive && ex->request_body.done && !ex->is_connect;

	exchange_drop_upstream(ex);
	ex->status = status;
	client_write_error(ex->client, status, text, ex->attempts, !keep_alive);
	exchange_finish(ex, keep_alive);
}

/* The response broke off after its head reached the client: the client must
 * see a truncated, closed response, never a complete-looking one. */
static void exchange_break_response(struct exchange *ex, const char *why)
{
	bool hard = ex->response_body.mode == BODY_MODE_UNTIL_CLOSE;

	log_warn("%.*s %.*s: response broken off: %s", (int)ex->method_len, ex->method,
		 (int)ex->target_len, ex->target, why);
	ex->note = why;
	exchange_set_state(ex, EXCHANGE_DONE);
	exchange_drop_upstream(ex);
	exchange_log(ex);
	if (hard)
		client_exchange_reset(ex->client);
	else
		client_exchange_done(ex->client, false);
}

static void exchange_start_try(struct exchange *ex);

/* A try ended without a response head. Retrying is legal here only because
 * nothing of a response has reached the client yet. */
static void exchange_try_failed(struct exchange *ex, enum try_failure failure, const char *reason)
{
	char text[512];
	int status = failure == TRY_TIMEOUT || failure == TRY_CONNECT_TIMEOUT ? 504 : 502;

	exchange_record_try(ex, 0, try_failure_names[failure]);
	exchange_drop_upstream(ex);
	evtimer_del(ex->try_timer);
	log_debug("%.*s %.*s: try %u failed: %s: %s", (int)ex->method_len, ex->method,
		  (int)ex->target_len, ex->target, ex->attempts, try_failure_names[failure], reason);
	/* A pooled connection the upstream had already closed says nothing about
	 * the upstream: take a new connection, as long as the request can still
	 * be sent whole. */
	if (failure == TRY_STALE && !ex->request_body_started) {
		ex->skip_pool = true;
		exchange_start_try(ex);
		return;
	}
	if (failure == TRY_TIMEOUT)
		snprintf(text, sizeof(text), "%d upstream timeout: %s (%u attempt%s)", status, reason,
			 ex->attempts, ex->attempts == 1 ? "" : "s");
	else
		snprintf(text, sizeof(text), "%d upstream unreachable: %s (%u attempt%s)", status,
			 reason, ex->attempts, ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, status, text);
}

/* Move request body bytes from the client to the upstream, within limits. */
static void exchange_pump_request_body(struct exchange *ex)
{
	struct bufferevent *cbev = client_bev(ex->client);
	struct evbuffer *in = bufferevent_get_input(cbev);
	struct evbuffer *out;
	enum http1_error error = HTTP1_ERR_NONE;
	uint64_t max_body = ex->config->limits.max_body_bytes;

	if (ex->request_body.done || ex->up == NULL || evbuffer_get_length(in) == 0)
		return;
	out = bufferevent_get_output(ex->up);
	ex->request_body_started = true;
	if (body_relay_move(&ex->request_body, in, out, &error) < 0) {
		if (ex->state == EXCHANGE_WAITING_HEAD) {
			exchange_respond_error(ex, 400, http1_error_text(error));
		} else {
			exchange_break_response(ex, "malformed chunked request body");
		}
		return;
	}
	if (max_body > 0 && ex->request_body.payload_bytes > max_body) {
		if (ex->state == EXCHANGE_WAITING_HEAD)
			exchange_respond_error(ex, 413, "request body is over max_body_bytes");
		else
			exchange_break_response(ex, "request body over max_body_bytes");
		return;
	}
	if (!ex->request_body.done && evbuffer_get_length(out) > EXCHANGE_OUTPUT_HIGH) {
		ex->client_read_paused = true;
		bufferevent_disable(cbev, EV_READ);
	}
}

void exchange_client_readable(struct exchange *ex)
{
	if (ex->state == EXCHANGE_WAITING_HEAD || ex->state == EXCHANGE_RELAYING)
		exchange_pump_request_body(ex);
}

/* Write the response head to the client: our HTTP version, the upstream's
 * fields minus hop-by-hop ones, Via and Retry-Attempts, and our own
 * Connection. */
static void exchange_send_response_head(struct exchange *ex, const struct http1_head *head)
{
	struct evbuffer *out = bufferevent_get_output(client_bev(ex->client));
	const struct http1_framing *rf = &ex->response_framing;
	enum body_mode mode = BODY_MODE_LENGTH;
	bool pass_chunked = false;
	size_t i;

	ex->client_keep_after = ex->client_keep_alive && !ex->proxy->draining;
	switch (rf->body) {
	case HTTP1_BODY_NONE:
		body_relay_init(&ex->response_body, BODY_MODE_LENGTH, 0, 0);
		break;
	case HTTP1_BODY_LENGTH:
		body_relay_init(&ex->response_body, BODY_MODE_LENGTH, rf->content_length, 0);
		break;
	case HTTP1_BODY_CHUNKED:
		/* an HTTP/1.0 client cannot read chunked: decode and close instead */
		pass_chunked = ex->client_minor >= 1;
		mode = pass_chunked ? BODY_MODE_CHUNKED : BODY_MODE_CHUNKED_DECODE;
		body_relay_init(&ex->response_body, mode, 0, ex->config->limits.max_header_bytes);
		if (!pass_chunked)
			ex->client_keep_after = false;
		break;
	case HTTP1_BODY_UNTIL_CLOSE:
		body_relay_init(&ex->response_body, BODY_MODE_UNTIL_CLOSE, 0, 0);
		ex->client_keep_after = false;
		break;
	}
	evbuffer_add_printf(out, "HTTP/1.1 %03d %.*s\r\n", head->status, (int)head->reason_len,
			    head->reason);
	for (i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (pass_chunked && http1_name_equals(f->name, f->name_len, "Transfer-Encoding"))
			evbuffer_add(out, f->line, f->line_len);
		else if (!http1_field_is_hop_by_hop(head, f))
			evbuffer_add(out, f->line, f->line_len);
	}
	evbuffer_add_printf(out, "Via: 1.1 retryproxy\r\nRetry-Attempts: %u\r\n", ex->attempts);
	if (!ex->client_keep_after)
		EXCHANGE_ADD_LITERAL(out, "Connection: close\r\n");
	else if (ex->client_minor == 0)
		EXCHANGE_ADD_LITERAL(out, "Connection: keep-alive\r\n");
	EXCHANGE_ADD_LITERAL(out, "\r\n");
	ex->status = head->status;
}

/* The whole response is queued: pool or close the upstream, finish. */
static void exchange_response_complete(struct exchange *ex)
{
	struct evbuffer *in = bufferevent_get_input(ex->up);
	bool reusable = ex->response_framing.keep_alive && ex->request_body.done &&
			evbuffer_get_length(in) == 0 && ex->response_body.mode != BODY_MODE_UNTIL_CLOSE &&
			!ex->proxy->draining;

	if (reusable) {
		struct bufferevent *bev = ex->up;

		ex->up = NULL;
		pool_put(ex->proxy->pool, ex->pool_key, bev, ex->config->limits.pool_max_idle,
			 ex->config->limits.pool_idle_timeout_ms);
	}
	exchange_drop_upstream(ex);
	exchange_finish(ex, ex->client_keep_after);
}

/* Move response body bytes to the client, with backpressure. */
static void exchange_relay_response(struct exchange *ex)
{
	struct bufferevent *cbev = client_bev(ex->client);
	struct evbuffer *out = bufferevent_get_output(cbev);
	enum http1_error error = HTTP1_ERR_NONE;

	if (body_relay_move(&ex->response_body, bufferevent_get_input(ex->up), out, &error) < 0) {
		exchange_break_response(ex, "malformed chunked response body");
		return;
	}
	if (ex->response_body.done) {
		exchange_response_complete(ex);
		return;
	}
	if (evbuffer_get_length(out) > EXCHANGE_OUTPUT_HIGH) {
		ex->up_read_paused = true;
		bufferevent_disable(ex->up, EV_READ);
	}
}

/* Parse the response head once it is all here; skip interim 1xx responses. */
static void exchange_read_response_head(struct exchange *ex)
{
	struct evbuffer *in = bufferevent_get_input(ex->up);
	struct http1_head *head = &exchange_response_head;
	size_t max_head = ex->config->limits.max_header_bytes;

	for (;;) {
		enum http1_error error = HTTP1_ERR_NONE;
		size_t len = evbuffer_get_length(in);
		size_t want = len < max_head + 1 ? len : max_head + 1;
		const char *data;

		if (len == 0)
			return;
		ex->response_byte_seen = true;
		data = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
		switch (http1_parse_response_head(data, want, max_head, head, &error)) {
		case HTTP1_PARSE_MORE:
			return;
		case HTTP1_PARSE_ERROR:
			exchange_try_failed(ex, TRY_MALFORMED, http1_error_text(error));
			return;
		case HTTP1_PARSE_DONE:
			break;
		}
		if (head->status < 200) {
			if (head->status == 101) {
				exchange_try_failed(ex, TRY_MALFORMED, "101 Switching Protocols without an Upgrade request");
				return;
			}
			/* the proxy already answered Expect itself; other interim
			 * responses carry nothing the client asked for */
			evbuffer_drain(in, head->head_len);
			continue;
		}
		if (http1_response_framing(head, ex->head_request, &ex->response_framing, &error) < 0) {
			exchange_try_failed(ex, TRY_MALFORMED, http1_error_text(error));
			return;
		}
		evtimer_del(ex->try_timer);
		exchange_record_try(ex, head->status, NULL);
		exchange_send_response_head(ex, head);
		evbuffer_drain(in, head->head_len);
		exchange_set_state(ex, EXCHANGE_RELAYING);
		{
			struct timeval tv = exchange_ms_to_tv(ex->config->limits.try_timeout_ms);

			/* a body that stops arriving for a whole try_timeout is dead */
			bufferevent_set_timeouts(ex->up, &tv, NULL);
		}
		exchange_relay_response(ex);
		return;
	}
}

static void exchange_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct exchange *ex = arg;

	if (ex->state == EXCHANGE_WAITING_HEAD)
		exchange_read_response_head(ex);
	else if (ex->state == EXCHANGE_RELAYING)
		exchange_relay_response(ex);
}

static void exchange_up_write_cb(struct bufferevent *bev, void *arg)
{
	struct exchange *ex = arg;

	if (ex->client_read_paused) {
		ex->client_read_paused = false;
		bufferevent_enable(client_bev(ex->client), EV_READ);
		exchange_pump_request_body(ex);
	}
}

static void exchange_up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct exchange *ex = arg;

	if (ex->state == EXCHANGE_WAITING_HEAD) {
		/* bytes that came with the close may hold a whole response */
		if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			exchange_read_response_head(ex);
		if (ex->state != EXCHANGE_WAITING_HEAD && ex->state != EXCHANGE_RELAYING)
			return;
	}
	if (ex->state == EXCHANGE_WAITING_HEAD) {
		if (ex->up_reused && !ex->response_byte_seen)
			exchange_try_failed(ex, TRY_STALE, "pooled connection closed by the upstream");
		else
			exchange_try_failed(ex, TRY_RESET,
					    (what & BEV_EVENT_EOF) ? "connection closed before the response head"
								   : "connection reset before the response head");
		return;
	}
	if (ex->state != EXCHANGE_RELAYING)
		return;
	if (what & BEV_EVENT_TIMEOUT) {
		exchange_break_response(ex, "upstream stopped sending the response body");
		return;
	}
	exchange_relay_response(ex);
	if (ex->state != EXCHANGE_RELAYING)
		return;
	if (ex->response_body.mode == BODY_MODE_UNTIL_CLOSE && (what & BEV_EVENT_EOF)) {
		ex->response_body.done = true;
		exchange_response_complete(ex);
		return;
	}
	exchange_break_response(ex, (what & BEV_EVENT_EOF) ? "upstream closed mid-body"
							   : "upstream reset mid-body");
}

/* try_timeout passed with no response head. */
static void exchange_try_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	if (ex->state == EXCHANGE_CONNECTING || ex->state == EXCHANGE_WAITING_HEAD)
		exchange_try_failed(ex, TRY_TIMEOUT, "no response head within try_timeout");
}

/* A connection for this try is ready: send the request head and what there is
 * of the body. */
static void exchange_upstream_ready(struct exchange *ex, struct bufferevent *bev, bool reused)
{
	ex->up = bev;
	ex->up_reused = reused;
	ex->response_byte_seen = false;
	bufferevent_setcb(bev, exchange_up_read_cb, exchange_up_write_cb, exchange_up_event_cb, ex);
	bufferevent_setwatermark(bev, EV_READ, 0, EXCHANGE_UPSTREAM_READ_HIGH);
	bufferevent_setwatermark(bev, EV_WRITE, EXCHANGE_OUTPUT_LOW, 0);
	bufferevent_set_timeouts(bev, NULL, NULL);
	exchange_set_state(ex, EXCHANGE_WAITING_HEAD);
	evbuffer_add_buffer_reference(bufferevent_get_output(bev), ex->request_head);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	exchange_pump_request_body(ex);
}

static void exchange_tunnel_connected(struct exchange *ex, struct bufferevent *bev)
{
	struct evbuffer *out = bufferevent_get_output(client_bev(ex->client));

	ex->status = 200;
	exchange_record_try(ex, 200, NULL);
	exchange_set_state(ex, EXCHANGE_DONE);
	evtimer_del(ex->try_timer);
	EXCHANGE_ADD_LITERAL(out, "HTTP/1.1 200 Connection established\r\nVia: 1.1 retryproxy\r\n\r\n");
	exchange_log(ex);
	client_exchange_tunnel(ex->client, bev);
}

static void exchange_connected_cb(struct bufferevent *bev, enum upstream_failure failure,
				  const char *reason, void *arg)
{
	struct exchange *ex = arg;

	ex->connecting = NULL;
	switch (failure) {
	case UPSTREAM_OK:
		if (ex->is_connect)
			exchange_tunnel_connected(ex, bev);
		else
			exchange_upstream_ready(ex, bev, false);
		return;
	case UPSTREAM_FAIL_DNS:
		exchange_try_failed(ex, TRY_DNS, reason);
		return;
	case UPSTREAM_FAIL_REFUSED:
		exchange_try_failed(ex, TRY_REFUSED, reason);
		return;
	case UPSTREAM_FAIL_CONNECT_TIMEOUT:
		exchange_try_failed(ex, TRY_CONNECT_TIMEOUT, reason);
		return;
	case UPSTREAM_FAIL_TLS_HANDSHAKE:
		exchange_try_failed(ex, TRY_TLS, reason);
		return;
	case UPSTREAM_FAIL_TLS_VERIFY:
		exchange_try_failed(ex, TRY_TLS_VERIFY, reason);
		return;
	}
}

/* Begin a try: a pooled connection if one is idle, else a new one. */
static void exchange_start_try(struct exchange *ex)
{
	struct timeval tv = exchange_ms_to_tv(ex->config->limits.try_timeout_ms);
	struct bufferevent *pooled = NULL;

	ex->attempts++;
	evtimer_add(ex->try_timer, &tv);
	exchange_set_state(ex, EXCHANGE_CONNECTING);
	if (!ex->is_connect && !ex->skip_pool)
		pooled = pool_take(ex->proxy->pool, ex->pool_key);
	ex->skip_pool = false;
	if (pooled != NULL) {
		exchange_upstream_ready(ex, pooled, true);
		return;
	}
	ex->connecting = upstream_connect_start(ex->proxy, &ex->endpoint, ex->tls, ex->pool_key,
						ex->config->limits.connect_timeout_ms,
						exchange_connected_cb, ex);
}

void exchange_run(struct exchange *ex)
{
	ex->try_timer = evtimer_new(ex->proxy->base, exchange_try_timeout_cb, ex);
	if (ex->expect_continue && !ex->request_body.done && ex->client_minor >= 1)
		EXCHANGE_ADD_LITERAL(bufferevent_get_output(client_bev(ex->client)),
				     "HTTP/1.1 100 Continue\r\n\r\n");
	exchange_start_try(ex);
}

void exchange_client_drained(struct exchange *ex)
{
	if (ex->state == EXCHANGE_RELAYING && ex->up_read_paused) {
		ex->up_read_paused = false;
		bufferevent_enable(ex->up, EV_READ);
		exchange_relay_response(ex);
	}
}

void exchange_abort(struct exchange *ex, const char *reason)
{
	if (ex->state != EXCHANGE_DONE) {
		ex->note = reason;
		exchange_log(ex);
	}
	exchange_free(ex);
}
