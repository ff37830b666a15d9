#include "listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "client.h"
#include "config.h"
#include "config_values.h"
#include "conn.h"
#include "listen_socket.h"
#include "log.h"
#include "proxy.h"
#include "retry_budget.h"
#include "timer.h"
#include "timeval.h"
#include "xmalloc.h"

/* After accept() fails (out of file descriptors), pause this long before
 * accepting again instead of spinning on the same error. */
#define LISTENER_ERROR_PAUSE_MS 100
/* Reaching max_connections is warned about at most this often. */
#define LISTENER_WARN_EVERY_MS 10000

/* The proxy's open listeners. */
struct listener_set {
	struct listener *first;
	bool paused; /* at max_connections: not accepting */
	/* paused, and a connection waited with no idle client connection to
	 * close for it: waiting is watched again once one becomes idle */
	bool idle_wanted;
	/* the warning that the limit was reached, at most once per
	 * LISTENER_WARN_EVERY_MS: under steady pressure every new connection
	 * reaches it again */
	uint64_t warned_ms;
	unsigned reached_unwarned; /* times reached since the last warning */
	/* paused, a connection waiting, and the idle ones too recently idle
	 * to close: waiting is watched again when the longest idle may be
	 * closed; made on first use */
	struct event *idle_timer;
};

struct listener {
	struct proxy *proxy;
	struct config *config;		      /* held: the config this listener runs under */
	const struct listener_config *listen; /* inside config */
	struct evconnlistener *evl;
	struct event *waiting;	    /* with evl: while paused, a connection waits to be accepted */
	struct event *resume_timer; /* ends the pause after an accept error */
	struct listener *next;
};

static void listener_accept_cb(struct evconnlistener *evl, evutil_socket_t fd,
			       struct sockaddr *peer, int peer_len, void *arg)
{
	struct listener *l = arg;
	struct proxy *proxy = l->proxy;

	if (proxy->draining) {
		evutil_closesocket(fd);
		return;
	}
	client_new(proxy, l->config, l->listen, fd, peer, (socklen_t)peer_len);
	listener_check_accepting(proxy);
}

/* Paused at max_connections, and a connection waits to be accepted: close
 * idle client connections, the longest idle first, until there is room;
 * the close resumes accepting at the end of this event's handling
 * (listener_check_accepting), and the new connection is taken. */
static void listener_idle_timer_cb(evutil_socket_t fd, short what, void *arg);

static void listener_waiting_cb(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	struct proxy *proxy = l->proxy;
	struct listener_set *set = proxy->listeners;
	uint64_t closable_at;

	while (conn_loop_open(proxy->loop, CONN_ACCEPTED) >=
	       proxy->config->limits.max_connections) {
		if (client_close_longest_idle(proxy, &closable_at))
			continue;
		if (closable_at == 0) {
			set->idle_wanted = true;
			return;
		}
		if (set->idle_timer == NULL)
			set->idle_timer = evtimer_new(proxy->base, listener_idle_timer_cb, proxy);
		if (!evtimer_pending(set->idle_timer, NULL)) {
			uint64_t now = timeval_now_coarse_ms();
			struct timeval tv =
				timeval_from_ms(closable_at > now ? closable_at - now : 0);

			evtimer_add(set->idle_timer, &tv);
		}
		return;
	}
}

/* Watch for a connection waiting to be accepted (on) or stop. */
static void listener_watch_waiting(struct listener *l, bool on)
{
	if (l->evl == NULL)
		return;
	if (on)
		event_add(l->waiting, NULL);
	else
		event_del(l->waiting);
}

/* The longest idle connection may now be closed for a waiting one. */
static void listener_idle_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy *proxy = arg;

	if (proxy->listeners == NULL || !proxy->listeners->paused)
		return;
	for (struct listener *l = proxy->listeners->first; l != NULL; l = l->next)
		listener_watch_waiting(l, true);
}

void listener_idle_available(struct proxy *proxy)
{
	struct listener *l;

	if (proxy->listeners == NULL || !proxy->listeners->paused || !proxy->listeners->idle_wanted)
		return; /* NULL: shutting down */
	proxy->listeners->idle_wanted = false;
	for (l = proxy->listeners->first; l != NULL; l = l->next)
		listener_watch_waiting(l, true);
}

static void listener_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	if (!l->proxy->listeners->paused)
		evconnlistener_enable(l->evl);
}

void listener_accept_failed(struct proxy *proxy, struct evconnlistener *evl, const char *kind,
			    const char *address, struct event *resume_timer)
{
	struct timeval tv = timeval_from_ms(LISTENER_ERROR_PAUSE_MS);
	int err = EVUTIL_SOCKET_ERROR();

	if (conn_loop_fd_shortage(proxy->loop, err))
		return;
	log_error("accept on %s %s failed: %s; pausing accepts for %d ms", kind, address,
		  evutil_socket_error_to_string(err), LISTENER_ERROR_PAUSE_MS);
	evconnlistener_disable(evl);
	evtimer_add(resume_timer, &tv);
}

static void listener_error_cb(struct evconnlistener *evl, void *arg)
{
	struct listener *l = arg;

	listener_accept_failed(l->proxy, evl, "listener", l->listen->address, l->resume_timer);
}

/* Close l's socket. */
static void listener_unbind(struct listener *l)
{
	event_free(l->waiting);
	l->waiting = NULL;
	evconnlistener_free(l->evl);
	l->evl = NULL;
}

/* Close one listener. */
static void listener_free(struct listener *l)
{
	if (l->evl != NULL)
		listener_unbind(l);
	event_free(l->resume_timer);
	config_release(l->config);
	free(l);
}

/* Bind l's address and listen on it. -1 with errno set. */
static int listener_bind(struct listener *l)
{
	l->evl = listen_socket_open(l->proxy->base, listener_accept_cb, l,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 1024,
				    (const struct sockaddr *)&l->listen->addr, l->listen->addr_len);
	if (l->evl == NULL)
		return -1;
	evconnlistener_set_error_cb(l->evl, listener_error_cb);
	l->waiting = event_new(l->proxy->base, evconnlistener_get_fd(l->evl), EV_READ,
			       listener_waiting_cb, l);
	if (l->proxy->listeners->paused) {
		evconnlistener_disable(l->evl);
		listener_watch_waiting(l, true);
	}
	return 0;
}

/* Bind one listener. NULL after logging why not, except for an address in
 * use when quiet_in_use (errno says EADDRINUSE then). */
static struct listener *listener_open(struct proxy *proxy, struct config *config,
				      const struct listener_config *lc, bool quiet_in_use)
{
	struct listener *l = xcalloc(1, sizeof(*l));

	l->proxy = proxy;
	l->listen = lc;
	if (listener_bind(l) < 0) {
		int err = errno;

		/* named where it is written, as a config error would be */
		if (quiet_in_use && err == EADDRINUSE)
			;
		else if (lc->line != 0)
			log_error("%s:%u:%u: listen[%zu].address: cannot listen on %s: %s",
				  config->source, lc->line, lc->column,
				  (size_t)(lc - config->listeners), lc->address, strerror(err));
		else
			log_error("cannot listen on %s: %s", lc->address, strerror(err));
		free(l);
		errno = err;
		return NULL;
	}
	l->resume_timer = evtimer_new(proxy->base, listener_resume_cb, l);
	l->config = config_hold(config);
	log_info("listening on %s (%s)", lc->address,
		 lc->upstream != NULL ? lc->upstream->text : "forward proxy");
	return l;
}

/* Does listener l listen where lc says? */
static bool listener_same_address(const struct listener *l, const struct listener_config *lc)
{
	return l->listen->addr_len == lc->addr_len &&
	       memcmp(&l->listen->addr, &lc->addr, lc->addr_len) == 0;
}

/* The open listener on lc's address, unlinked from the list, or NULL. */
static struct listener *listener_take(struct listener **list, const struct listener_config *lc)
{
	struct listener **link;

	for (link = list; *link != NULL; link = &(*link)->next) {
		if (listener_same_address(*link, lc)) {
			struct listener *l = *link;

			*link = l->next;
			l->next = NULL;
			return l;
		}
	}
	return NULL;
}

struct listener_set *listener_set_new(void)
{
	return xcalloc(1, sizeof(struct listener_set));
}

void listener_set_free(struct listener_set *set)
{
	if (set->idle_timer != NULL)
		event_free(set->idle_timer);
	free(set);
}

static void listener_set_accepting(struct proxy *proxy, bool accepting);

/* False while accepting is paused (max_connections). */
static bool listener_accepting(const struct proxy *proxy)
{
	return !proxy->listeners->paused;
}

/* The limit was reached: warn, unless a warning went out within
 * LISTENER_WARN_EVERY_MS; the next one says how often it was reached
 * meanwhile. */
static void listener_note_limit_reached(struct listener_set *set, unsigned max)
{
	uint64_t now = timer_now_ms();

	if (set->warned_ms != 0 && now - set->warned_ms < LISTENER_WARN_EVERY_MS) {
		set->reached_unwarned++;
		log_debug("max_connections (%u) reached again", max);
		return;
	}
	if (set->reached_unwarned > 0)
		log_warn("max_connections (%u) reached: a new connection waits until one closes, "
			 "or an idle keep-alive one is closed for it (reached %u more times since "
			 "the last warning)",
			 max, set->reached_unwarned);
	else
		log_warn("max_connections (%u) reached: a new connection waits until one closes, "
			 "or an idle keep-alive one is closed for it",
			 max);
	set->warned_ms = now;
	set->reached_unwarned = 0;
}

void listener_check_accepting(struct proxy *proxy)
{
	unsigned max = proxy->config->limits.max_connections;
	bool below = conn_loop_open(proxy->loop, CONN_ACCEPTED) < max;

	if (proxy->draining || listener_accepting(proxy) == below)
		return;
	if (below)
		log_debug("below max_connections (%u) again: accepting", max);
	else
		listener_note_limit_reached(proxy->listeners, max);
	listener_set_accepting(proxy, below);
}

/* The port of an AF_INET or AF_INET6 address. */
static in_port_t listener_port(const struct sockaddr_storage *addr)
{
	if (addr->ss_family == AF_INET6)
		return ((const struct sockaddr_in6 *)addr)->sin6_port;
	return ((const struct sockaddr_in *)addr)->sin_port;
}

/* Is listener l dropped by config (no listener there in it)? */
static bool listener_dropped(const struct listener *l, const struct config *config)
{
	for (size_t i = 0; i < config->listener_count; i++)
		if (listener_same_address(l, &config->listeners[i]))
			return false;
	return true;
}

size_t listener_unbind_port(struct proxy *proxy, const struct config *config,
			    const struct sockaddr_storage *addr, const char *address)
{
	size_t closed = 0;

	for (struct listener *l = proxy->listeners->first; l != NULL; l = l->next) {
		if (l->evl == NULL || listener_port(&l->listen->addr) != listener_port(addr) ||
		    !listener_dropped(l, config))
			continue;
		log_info("closed listener %s to listen on %s, on the same port", l->listen->address,
			 address);
		listener_unbind(l);
		closed++;
	}
	return closed;
}

void listener_rebind(struct proxy *proxy)
{
	struct listener **link = &proxy->listeners->first;

	while (*link != NULL) {
		struct listener *l = *link;

		if (l->evl == NULL) {
			if (listener_bind(l) < 0) {
				log_error("cannot listen on %s again: %s", l->listen->address,
					  strerror(errno));
				*link = l->next;
				listener_free(l);
				continue;
			}
			log_info("listening on %s again", l->listen->address);
		}
		link = &l->next;
	}
}

int listener_apply(struct proxy *proxy, struct config *config)
{
	struct listener *opened = NULL;
	struct listener *next_list = NULL;
	struct listener *l;
	size_t i;

	/* First bind what is new, so a failure leaves everything as it was.
	 * An address in use only because a dropped listener holds its port
	 * (0.0.0.0:P in place of 127.0.0.1:P) is bound after that listener is
	 * closed, which the caller binds again if the reload fails
	 * (listener_rebind). SO_REUSEPORT would avoid the short gap but also
	 * let another process's socket share the port and take connections. */
	for (int pass = 0; pass < 2; pass++) {
		for (i = 0; i < config->listener_count; i++) {
			const struct listener_config *lc = &config->listeners[i];
			bool exists = false;

			for (l = proxy->listeners->first; l != NULL; l = l->next)
				exists = exists || listener_same_address(l, lc);
			for (l = opened; l != NULL; l = l->next)
				exists = exists || listener_same_address(l, lc);
			if (exists)
				continue;
			if (pass == 1)
				listener_unbind_port(proxy, config, &lc->addr, lc->address);
			l = listener_open(proxy, config, lc, pass == 0);
			if (l == NULL) {
				if (pass == 0 && errno == EADDRINUSE)
					continue; /* tried again in the second pass */
				goto fail;
			}
			l->next = opened;
			opened = l;
		}
	}
	/* then move addresses that stay under the new config: their sockets
	 * stay open, so no connection is refused while reloading */
	for (i = 0; i < config->listener_count; i++) {
		const struct listener_config *lc = &config->listeners[i];

		l = listener_take(&proxy->listeners->first, lc);
		if (l == NULL)
			l = listener_take(&opened, lc);
		if (l == NULL)
			continue; /* a repeated address: config validation prevents it */
		config_release(l->config);
		l->config = config_hold(config);
		l->listen = lc;
		l->next = next_list;
		next_list = l;
	}
	listener_close_all(proxy); /* what is left were dropped */
	proxy->listeners->first = next_list;
	return 0;
fail:
	while (opened != NULL) {
		l = opened;
		opened = l->next;
		listener_free(l);
	}
	return -1;
}

int listener_is_address(const struct proxy *proxy, const struct sockaddr *addr, socklen_t len)
{
	int told = 0;

	if (proxy->listeners == NULL)
		return 0;
	for (const struct listener *l = proxy->listeners->first; l != NULL; l = l->next) {
		int reaches = l->evl != NULL
				      ? config_values_connect_reaches(&l->listen->addr, addr, len)
				      : 0;

		if (reaches > 0)
			return 1;
		if (reaches < 0)
			told = -1;
	}
	return told;
}

void listener_close_all(struct proxy *proxy)
{
	while (proxy->listeners->first != NULL) {
		struct listener *l = proxy->listeners->first;

		proxy->listeners->first = l->next;
		/* one whose socket a reload closed already, to make way for an
		 * address on its port, said so then */
		if (l->evl != NULL)
			log_info("closed listener %s", l->listen->address);
		listener_free(l);
	}
}

/* Stop or resume accepting on every listener. */
static void listener_set_accepting(struct proxy *proxy, bool accepting)
{
	struct listener *l;

	proxy->listeners->paused = !accepting;
	proxy->listeners->idle_wanted = false;
	for (l = proxy->listeners->first; l != NULL; l = l->next) {
		if (accepting)
			evconnlistener_enable(l->evl);
		else
			evconnlistener_disable(l->evl);
		listener_watch_waiting(l, !accepting);
	}
}
