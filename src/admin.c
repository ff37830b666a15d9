#include "admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "admin_conns.h"
#include "config.h"
#include "conn.h"
#include "config_dump.h"
#include "config_values.h"
#include "fleet.h"
#include "http1_chars.h"
#include "http1_target.h"
#include "listen_socket.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "status_page.h"
#include "timeval.h"
#include "upstreams.h"
#include "xmalloc.h"

/* An admin client that sends nothing for this long is dropped. */
#define ADMIN_TIMEOUT_S 10
/* Admin requests are a line and a few fields; nothing needs more. */
#define ADMIN_MAX_HEADERS 8192
#define ADMIN_MAX_BODY 4096
/* A listener a reload moved or dropped finishes the answers it is writing
 * for at most this long, looking every ADMIN_RETIRE_CHECK_MS. */
#define ADMIN_RETIRE_MAX_MS 30000
#define ADMIN_RETIRE_CHECK_MS 100

struct admin {
	struct proxy *proxy;
	struct evhttp *http;
	char *address;		      /* as written in the config, for logs */
	struct sockaddr_storage addr; /* what the socket is bound to */
	socklen_t addr_len;
	const char *query;	    /* the request being answered's query, or NULL */
	struct evconnlistener *evl; /* owned by http; NULL once retired */
	struct evhttp_bound_socket *bound;
	struct event *retire_timer; /* while retired: frees it once its answers are written */
	uint64_t retire_until_ms;
	struct event *resume_timer; /* ends the pause after an accept error */
	struct admin_conns *conns;  /* accepting stops at ADMIN_CONNS_MAX */
	struct admin *next_open;    /* in admin_open_list */
};

/* The pages: a path and what writes its body. */
/* What the status page may load or run: its inline <style>, nothing more. */
#define ADMIN_PAGE_CSP                                                                         \
	"default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; " \
	"frame-ancestors 'none'"

struct admin_page {
	const char *path;
	const char *content_type;
	int (*render)(struct admin *admin, struct evbuffer *body); /* returns the status */
};

/* /healthz: ok, or 503 while draining so load balancers move away. */
static int admin_render_healthz(struct admin *admin, struct evbuffer *body)
{
	if (admin->proxy->draining) {
		evbuffer_add_printf(body, "draining\n");
		return 503;
	}
	evbuffer_add_printf(body, "ok\n");
	return 200;
}

/* The gauges the proxy keeps itself, as /metrics and / show them. */
static struct metrics_gauges admin_gauges(const struct proxy *proxy)
{
	struct metrics_gauges gauges = {
		/* counted per route: a held request's place among the pending
		 * retries is not a backoff, and one waiting only for a connect in
		 * doubt has no place at all */
		.backoff_pending = metrics_backoff_pending(proxy->metrics),
		.client_connections = conn_loop_open(proxy->loop, CONN_ACCEPTED),
		.upstream_connections = conn_loop_open(proxy->loop, CONN_OUTGOING),
	};

	return gauges;
}

/* /metrics: the counters, with the gauges the proxy keeps itself. */
static int admin_render_metrics(struct admin *admin, struct evbuffer *body)
{
	const struct proxy *proxy = admin->proxy;
	struct metrics_gauges gauges = admin_gauges(proxy);

	metrics_render(proxy->metrics, &gauges, body);
	metrics_render_reloads(proxy->metrics, body);
	if (proxy->fleet != NULL)
		metrics_render_fleet(fleet_connected(proxy->fleet), body);
	metrics_render_kept(proxy->retry_memory_bytes, proxy->spool_usage.bytes, body);
	upstreams_render_metrics(proxy->upstreams, body);
	return 200;
}

/* The query (a=1&b) has the parameter name, with or without a value. */
static bool admin_query_has(const char *query, const char *name)
{
	size_t len = strlen(name);
	const char *p = query;

	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, len) == 0 &&
		    (p[len] == '\0' || p[len] == '&' || p[len] == '='))
			return true;
		p = strchr(p, '&');
		if (p != NULL)
			p++;
	}
	return false;
}

/* /: the status page, from the same counters and gauges as /metrics;
 * /?norefresh: the same without reloading itself (a snapshot). */
static int admin_render_status(struct admin *admin, struct evbuffer *body)
{
	const struct proxy *proxy = admin->proxy;
	struct metrics_gauges gauges = admin_gauges(proxy);
	struct status_page_state state = {
		.metrics = proxy->metrics,
		.gauges = &gauges,
		.upstreams = proxy->upstreams,
		.draining = proxy->draining,
		.now = time(NULL),
		.no_refresh = admin_query_has(admin->query, "norefresh"),
	};

	status_page_render(&state, body);
	return 200;
}

/* /upstreams: every upstream seen, up or down, with its held requests. */
static int admin_render_upstreams(struct admin *admin, struct evbuffer *body)
{
	upstreams_render(admin->proxy->upstreams, body);
	return 200;
}

/* /config: the config new requests run under now. */
static int admin_render_config(struct admin *admin, struct evbuffer *body)
{
	config_dump_yaml(admin->proxy->config, body);
	return 200;
}

static const struct admin_page admin_pages[] = {
	{ "/", "text/html; charset=utf-8", admin_render_status },
	{ "/healthz", "text/plain; charset=utf-8", admin_render_healthz },
	{ "/metrics", "text/plain; version=0.0.4; charset=utf-8", admin_render_metrics },
	{ "/config", "application/yaml; charset=utf-8", admin_render_config },
	{ "/upstreams", "text/plain; charset=utf-8", admin_render_upstreams },
};

/* The reason phrase of a status this file sends. */
static const char *admin_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}

/* Send status with body; HEAD gets the fields a GET would, without the body. */
static void admin_reply(struct evhttp_request *req, int status, const char *content_type,
			struct evbuffer *body)
{
	struct evkeyvalq *headers = evhttp_request_get_output_headers(req);

	evhttp_add_header(headers, "Content-Type", content_type);
	evhttp_add_header(headers, "Cache-Control", "no-store");
	evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
	/* the status page needs its inline CSS and nothing else: no script,
	 * nothing fetched, never framed */
	if (strncmp(content_type, "text/html", 9) == 0)
		evhttp_add_header(headers, "Content-Security-Policy", ADMIN_PAGE_CSP);
	/* evhttp gives the answer to a HEAD or a CONNECT no Content-Length: a
	 * HEAD's is the GET's, and a CONNECT's body (a 405's) needs one, or
	 * the client reads it until a close that does not come */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD ||
	    evhttp_request_get_command(req) == EVHTTP_REQ_CONNECT) {
		char length[32];

		snprintf(length, sizeof(length), "%zu", evbuffer_get_length(body));
		evhttp_add_header(headers, "Content-Length", length);
	}
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
		evbuffer_drain(body, evbuffer_get_length(body));
	/* evhttp answers in the request's version: a later 1.x (HTTP/1.2,
	 * which does not exist) gets the 1.1 spoken here (RFC 9110 section
	 * 2.5), which frames and keeps alive the same, and so does a request
	 * refused for its version (admin_request_cb() sets it) */
	if (req->major != 1 || req->minor < 0 || req->minor > 1) {
		req->major = 1;
		req->minor = 1;
	}
	evhttp_send_reply(req, status, admin_reason(status), body);
}

/* The refusal of a request for its HTTP version, or 0: 400 for no version
 * at all (RFC 9112 section 2.3: "HTTP/" DIGIT "." DIGIT), 505 for a major
 * version other than 1, one not spoken here, as a proxy listener answers.
 * The version is judged as its request line wrote it (admin_conns), since
 * evhttp reads it as "HTTP/%d.%d"; on a connection not counted there, only
 * as evhttp read it: a negative number (HTTP/1.-1, or a minor version read
 * past an int) is none. */
static int admin_version_status(struct admin *admin, struct evhttp_request *req)
{
	int status = admin_conns_version_status(admin->conns, req);

	if (status != 0)
		return status;
	if (req->major < 0 || req->minor < 0)
		return 400;
	return req->major != 1 ? 505 : 0;
}

/* Is a Host field's value uri-host [":" port] (RFC 9112 section 3.2)? Its
 * host is what the admin judges below. An empty one is not: RFC 9110
 * section 7.2 has it only for a target without an authority, and an http
 * URI's host is never empty (section 4.2.1), so it names no host at all. */
static bool admin_host_valid(const char *value)
{
	const char *host;
	size_t host_len;
	uint16_t port;
	bool routable;

	return http1_target_authority(value, strlen(value), &host, &host_len, &port, &routable);
}

/* Is s a token (RFC 9110 section 5.6.2), as a field name must be? evhttp
 * keeps what comes before the colon as the name, so "Content-Length : 5"
 * arrives as a name ending in a space, which it does not take for a
 * Content-Length. */
static bool admin_is_token(const char *s)
{
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++)
		if (!HTTP1_IS(*s, HTTP1_C_TCHAR))
			return false;
	return true;
}

/* Is s 1*DIGIT, a Content-Length (RFC 9110 section 8.6)? evhttp's strtoll
 * also takes "+5" and "-0". evhttp strips the spaces before a value but not
 * a tab, which is whitespace there too (OWS). */
static bool admin_is_digits(const char *s)
{
	s += strspn(s, " \t");
	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++)
		if (!HTTP1_IS_DIGIT(*s))
			return false;
	return true;
}

/* Can the request's body be told from what follows it as every reader
 * would tell it? Not when a field name is no token (whitespace before the
 * colon: RFC 9112 section 5.1 wants a 400), nor with a Content-Length that
 * is not digits or two that differ, nor with any Transfer-Encoding: a page
 * takes no content, and evhttp reads chunk sizes more loosely than RFC
 * 9112 section 7.1 allows ("0x5", "+5", "5 junk"), so a front end that
 * reads them strictly would frame the body otherwise. RFC 9112 section 6.3
 * wants a 400 and the connection closed then. Nor is a request with two
 * Host fields one to answer, nor an HTTP/1.1 one with none, nor one whose
 * Host is not a uri-host [":" port], an empty one included (section 3.2). */
static bool admin_framing_ok(struct evhttp_request *req)
{
	const struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
	const struct evkeyval *field;
	const char *length = NULL;
	unsigned hosts = 0;

	TAILQ_FOREACH(field, headers, next) {
		if (!admin_is_token(field->key))
			return false;
		if (evutil_ascii_strcasecmp(field->key, "Host") == 0 &&
		    (++hosts > 1 || !admin_host_valid(field->value)))
			return false;
		if (evutil_ascii_strcasecmp(field->key, "Content-Length") == 0) {
			if (!admin_is_digits(field->value) ||
			    (length != NULL && strcmp(length, field->value) != 0))
				return false;
			length = field->value;
		} else if (evutil_ascii_strcasecmp(field->key, "Transfer-Encoding") == 0) {
			return false;
		}
	}
	/* an HTTP/1.1 request must name its host (section 3.2) */
	return hosts > 0 || req->major != 1 || req->minor < 1;
}

/* Is host (a Host field's value, or an absolute-form target's host, with or
 * without a port) an address, localhost or a name under .localhost? Those
 * are what a browser asks the admin for: a page can make any other name
 * resolve to 127.0.0.1 (DNS rebinding) and then read the admin as its own
 * origin, while an address or localhost stays the browser's own machine. */
static bool admin_host_is_local(const char *host)
{
	char name[256];
	struct in6_addr addr6;
	struct in_addr addr4;
	const char *end;
	size_t len;

	if (host[0] == '[') {
		end = strchr(host, ']');
		if (end == NULL || (end[1] != '\0' && end[1] != ':'))
			return false;
		host++;
	} else {
		end = strchr(host, ':');
		if (end == NULL)
			end = host + strlen(host);
		else if (strchr(end + 1, ':') != NULL) /* an evhttp_uri's v6 host */
			end = host + strlen(host);
	}
	len = (size_t)(end - host);
	if (len == 0 || len >= sizeof(name))
		return false;
	memcpy(name, host, len);
	name[len] = '\0';
	if (inet_pton(AF_INET6, name, &addr6) == 1 || inet_pton(AF_INET, name, &addr4) == 1)
		return true;
	if (name[len - 1] == '.')
		name[--len] = '\0';
	return evutil_ascii_strcasecmp(name, "localhost") == 0 ||
	       (len > 10 && evutil_ascii_strcasecmp(name + len - 10, ".localhost") == 0);
}

/* May this request be answered? With access.admin_remote false the admin is
 * for this machine's users, and a web page one of them opens is not one:
 * only a local Host (or none, HTTP/1.0) is served. */
static bool admin_host_ok(const struct admin *admin, struct evhttp_request *req,
			  const struct evhttp_uri *uri)
{
	/* only an absolute-form target names a host: evhttp reads one in
	 * "//localhost/config" too, an origin-form path a browser sends for
	 * http://rebound.example//localhost/config with its own Host */
	const char *host =
		uri != NULL && evhttp_uri_get_scheme(uri) != NULL ? evhttp_uri_get_host(uri) : NULL;

	if (admin->proxy->config->admin_remote)
		return true;
	if (host == NULL)
		host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
	return host == NULL || admin_host_is_local(host);
}

/* The page a request-target (as sent, and as evhttp parsed it) names, or
 * NULL. A target that starts with "//" is an origin-form path of an empty
 * first segment (RFC 9112 section 3.2.1), which evhttp reads as a host and
 * a path: "//localhost/config" is no page. */
static const struct admin_page *admin_page_of(const char *target, const struct evhttp_uri *uri)
{
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;

	if (path == NULL || target == NULL || strncmp(target, "//", 2) == 0)
		return NULL;
	for (size_t i = 0; i < sizeof(admin_pages) / sizeof(admin_pages[0]); i++)
		if (strcmp(path, admin_pages[i].path) == 0)
			return &admin_pages[i];
	return NULL;
}

/* Every admin request: find the page, check the method, render. */
static void admin_request_cb(struct evhttp_request *req, void *arg)
{
	struct admin *admin = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	struct evbuffer *body = evbuffer_new();
	const struct admin_page *page = admin_page_of(evhttp_request_get_uri(req), uri);
	const char *content_type = "text/plain; charset=utf-8";
	int status, version_status = admin_version_status(admin, req);

	admin_conns_request(admin->conns, req);
	/* a CONNECT names an authority, never a page: its method is what is
	 * wrong */
	if (version_status != 0) {
		/* the rest of the request cannot be read in a version not known */
		status = version_status;
		/* answered in the version spoken here, whatever evhttp read */
		req->major = 1;
		req->minor = 1;
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		evbuffer_add_printf(body, "%s\n",
				    status == 505 ? "HTTP version not supported; use HTTP/1.1"
						  : "bad request: not an HTTP version");
	} else if (admin_conns_read_nul(admin->conns, req)) {
		/* evhttp read the fields only up to it: what it parsed may not
		 * be the request sent, nor its end where the next one starts */
		status = 400;
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		evbuffer_add_printf(body, "bad request: a NUL byte in the request\n");
	} else if (!admin_framing_ok(req)) {
		/* whatever follows may be this body or a next request */
		status = 400;
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		evbuffer_add_printf(body,
				    "bad request: no Host field, two, or an invalid one, or a "
				    "body length that is ambiguous\n");
	} else if (!admin_host_ok(admin, req, uri)) {
		status = 403;
		evbuffer_add_printf(
			body, "forbidden: the admin answers a Host that is an address or "
			      "localhost; set access.admin_remote: true to allow other names\n");
	} else if (page == NULL && method != EVHTTP_REQ_CONNECT) {
		status = 404;
		evbuffer_add_printf(
			body, "not found; try /, /healthz, /metrics, /config or /upstreams\n");
	} else if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
		/* the pages only show state; nothing here changes it */
		status = 405;
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		evbuffer_add_printf(body, "method not allowed; use GET\n");
	} else {
		admin->query = uri != NULL ? evhttp_uri_get_query(uri) : NULL;
		status = page->render(admin, body);
		admin->query = NULL;
		content_type = page->content_type;
	}
	/* a retired listener's connections serve no further request */
	if (admin->evl == NULL &&
	    evhttp_find_header(evhttp_request_get_output_headers(req), "Connection") == NULL)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	/* before replying: evhttp may free the request while sending */
	log_debug("admin: %s -> %d", evhttp_request_get_uri(req), status);
	admin_reply(req, status, content_type, body);
	evbuffer_free(body);
}

int admin_is_address(const struct admin *admin, const struct sockaddr *addr, socklen_t len)
{
	return admin != NULL ? config_values_connect_reaches(&admin->addr, addr, len) : 0;
}

/* The open admins (two at most, during a reload that moves the address):
 * a listener's callbacks get the evhttp as their argument. */
static struct admin *admin_open_list;

/* Stop serving: evhttp closes the listening socket and open connections. */
static void admin_free(struct admin *admin)
{
	struct admin **link = &admin_open_list;

	while (*link != NULL && *link != admin)
		link = &(*link)->next_open;
	if (*link != NULL)
		*link = admin->next_open;
	if (admin->resume_timer != NULL)
		event_free(admin->resume_timer);
	if (admin->retire_timer != NULL)
		event_free(admin->retire_timer);
	evhttp_free(admin->http);
	admin_conns_free(admin->conns);
	free(admin->address);
	free(admin);
}

static struct admin *admin_by_http(const struct evhttp *http)
{
	struct admin *admin;

	for (admin = admin_open_list; admin != NULL && admin->http != http;
	     admin = admin->next_open)
		;
	return admin;
}

/* A retired listener's answers are all written, or took too long: its
 * connections close now. */
static void admin_retire_cb(evutil_socket_t fd, short what, void *arg)
{
	struct admin *admin = arg;
	struct timeval tv = timeval_from_ms(ADMIN_RETIRE_CHECK_MS);

	if (admin_conns_answering(admin->conns) == 0 ||
	    timeval_now_coarse_ms() >= admin->retire_until_ms) {
		admin_free(admin);
		return;
	}
	evtimer_add(admin->retire_timer, &tv);
}

/* A reload moved or dropped the listener: its address is closed now, and
 * what it is answering is finished before its connections close (an
 * answer cut short would be a truncated scrape, or a /config that does
 * not load). */
static void admin_retire(struct admin *admin)
{
	struct timeval tv = timeval_from_ms(ADMIN_RETIRE_CHECK_MS);

	evhttp_del_accept_socket(admin->http, admin->bound);
	admin->bound = NULL;
	admin->evl = NULL;
	evtimer_del(admin->resume_timer);
	if (admin_conns_answering(admin->conns) == 0) {
		admin_free(admin);
		return;
	}
	admin->retire_until_ms = timeval_now_coarse_ms() + ADMIN_RETIRE_MAX_MS;
	admin->retire_timer = evtimer_new(admin->proxy->base, admin_retire_cb, admin);
	evtimer_add(admin->retire_timer, &tv);
}

static void admin_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct admin *admin = arg;

	if (admin->evl == NULL)
		return;
	if (admin_conns_open(admin->conns) < ADMIN_CONNS_MAX)
		evconnlistener_enable(admin->evl);
}

/* A connection opened or closed: accept while under the cap, unless an
 * accept error paused the listener (its timer resumes it). */
static void admin_conns_changed(void *arg)
{
	struct admin *admin = arg;

	if (admin->evl == NULL)
		return;
	if (admin_conns_open(admin->conns) >= ADMIN_CONNS_MAX)
		evconnlistener_disable(admin->evl);
	else if (!evtimer_pending(admin->resume_timer, NULL))
		evconnlistener_enable(admin->evl);
}

/* accept() failed: handled as on the proxy's listeners (evhttp sets no
 * error callback, and libevent's default would retry the accept in a busy
 * loop while out of file descriptors). */
static void admin_accept_error_cb(struct evconnlistener *evl, void *arg)
{
	struct admin *admin = admin_by_http(arg);

	if (admin != NULL)
		listener_accept_failed(admin->proxy, evl, "admin", admin->address,
				       admin->resume_timer);
}

/* Bind address and serve the pages there. NULL with errno set when the
 * address cannot be bound. */
static struct admin *admin_open(struct proxy *proxy, const char *address,
				const struct sockaddr_storage *addr, socklen_t addr_len)
{
	struct admin *admin;
	struct evconnlistener *evl;
	int err;

	/* no callback yet: evhttp_bind_listener sets its own */
	evl = listen_socket_open(proxy->base, NULL, NULL,
				 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
				 128, (const struct sockaddr *)addr, addr_len);
	if (evl == NULL)
		return NULL;
	admin = xcalloc(1, sizeof(*admin));
	admin->proxy = proxy;
	admin->address = xstrdup(address);
	admin->addr = *addr;
	admin->addr_len = addr_len;
	admin->http = evhttp_new(proxy->base);
	if (admin->http == NULL)
		goto fail;
	admin->bound = evhttp_bind_listener(admin->http, evl);
	if (admin->bound == NULL)
		goto fail;
	admin->evl = evl;
	admin->resume_timer = evtimer_new(proxy->base, admin_resume_cb, admin);
	admin->conns = admin_conns_new(proxy->base, admin->http, admin_conns_changed, admin);
	/* evhttp_bind_listener set no error callback (its argument is the
	 * evhttp, which admin_by_http() turns back into the admin) */
	evconnlistener_set_error_cb(evl, admin_accept_error_cb);
	admin->next_open = admin_open_list;
	admin_open_list = admin;
	/* every method reaches the callback, so that the answer is a 405
	 * naming what is allowed rather than evhttp's 501 */
	evhttp_set_allowed_methods(admin->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
							EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
							EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
							EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(admin->http, admin_request_cb, admin);
	evhttp_set_timeout(admin->http, ADMIN_TIMEOUT_S);
	evhttp_set_max_headers_size(admin->http, ADMIN_MAX_HEADERS);
	evhttp_set_max_body_size(admin->http, ADMIN_MAX_BODY);
	log_info("admin listening on %s (/, /healthz, /metrics, /config, /upstreams)", address);
	return admin;
fail:
	err = errno;
	if (admin->http != NULL)
		evhttp_free(admin->http);
	evconnlistener_free(evl);
	free(admin->address);
	free(admin);
	errno = err != 0 ? err : ENOMEM;
	return NULL;
}

int admin_apply(struct proxy *proxy, const struct config *config)
{
	struct admin *old = proxy->admin;
	struct admin *fresh;

	if (config->admin_address == NULL) {
		if (old != NULL) {
			log_info("admin listener %s closed: no admin address any more",
				 old->address);
			admin_retire(old);
			proxy->admin = NULL;
		}
		return 0;
	}
	if (old != NULL && config_values_same_address(&old->addr, &config->admin_addr)) {
		/* the same socket serves on; only the spelling may differ */
		free(old->address);
		old->address = xstrdup(config->admin_address);
		return 0;
	}
	fresh = admin_open(proxy, config->admin_address, &config->admin_addr,
			   config->admin_addr_len);
	if (fresh == NULL && errno == EADDRINUSE && old != NULL &&
	    config_values_addr_port(&old->addr) == config_values_addr_port(&config->admin_addr)) {
		/* 127.0.0.1:9901 to 0.0.0.0:9901: the old socket is in the new
		 * one's way, so it has to go first; put it back on failure */
		char *old_address = xstrdup(old->address);
		struct sockaddr_storage old_addr = old->addr;
		socklen_t old_len = old->addr_len;

		admin_retire(old);
		proxy->admin = old = NULL;
		fresh = admin_open(proxy, config->admin_address, &config->admin_addr,
				   config->admin_addr_len);
		if (fresh == NULL) {
			int err = errno;

			proxy->admin = admin_open(proxy, old_address, &old_addr, old_len);
			if (proxy->admin == NULL)
				log_error("admin listener %s could not be reopened: %s",
					  old_address, strerror(errno));
			errno = err;
		}
		free(old_address);
	}
	if (fresh == NULL) {
		/* named where it is written, as a config error would be */
		if (config->admin_line != 0)
			log_error("%s:%u:%u: admin: cannot listen on admin address %s: %s",
				  config->source, config->admin_line, config->admin_column,
				  config->admin_address, strerror(errno));
		else
			log_error("cannot listen on admin address %s: %s", config->admin_address,
				  strerror(errno));
		return -1;
	}
	if (old != NULL) {
		log_info("admin listener %s closed: moved to %s", old->address, fresh->address);
		admin_retire(old);
	}
	proxy->admin = fresh;
	return 0;
}

void admin_close(struct proxy *proxy)
{
	/* the running one, and any a reload retired */
	while (admin_open_list != NULL)
		admin_free(admin_open_list);
	proxy->admin = NULL;
}
