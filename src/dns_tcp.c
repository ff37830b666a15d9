#include "dns_tcp.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "conn.h"
#include "dns_message.h"
#include "name_lookup.h"
#include "resolv_conf.h"
#include "timeval.h"
#include "xmalloc.h"

struct dns_tcp_query {
	struct event_base *base;
	struct evdns_base *dns;
	struct conn_loop *loop; /* gives descriptors back; may be NULL */
	char *name;
	uint16_t qtype;
	uint16_t id;
	uint64_t timeout_ms;
	int attempts;	/* how many may be made */
	int attempt;	/* how many were begun */
	int last_error; /* the latest attempt's failure */
	dns_tcp_cb cb;
	void *arg;
	/* the attempt under way */
	evutil_socket_t fd;
	struct event *io;
	struct event *timer; /* the attempt's deadline; at once for the first */
	unsigned char query[2 + DNS_MESSAGE_QUERY_MAX];
	size_t query_len, sent;
	unsigned char *reply; /* the length prefix and the message */
	size_t reply_want, received;
};

static void dns_tcp_attempt(struct dns_tcp_query *q);

static void dns_tcp_close(struct dns_tcp_query *q)
{
	if (q->io != NULL) {
		event_free(q->io);
		q->io = NULL;
	}
	if (q->fd >= 0) {
		evutil_closesocket(q->fd);
		q->fd = -1;
	}
	free(q->reply);
	q->reply = NULL;
	q->received = 0;
	q->sent = 0;
}

static void dns_tcp_free(struct dns_tcp_query *q)
{
	dns_tcp_close(q);
	event_free(q->timer);
	free(q->name);
	free(q);
}

static void dns_tcp_finish(struct dns_tcp_query *q, int error, struct dns_message_answer *answer)
{
	dns_tcp_cb cb = q->cb;
	void *arg = q->arg;

	dns_tcp_free(q);
	cb(error, answer, arg);
}

/* This attempt failed: the next, to the next nameserver, or the end. */
static void dns_tcp_failed(struct dns_tcp_query *q, int error)
{
	dns_tcp_close(q);
	q->last_error = error;
	if (q->attempt >= q->attempts) {
		dns_tcp_finish(q, error, NULL);
		return;
	}
	dns_tcp_attempt(q);
}

static void dns_tcp_read_answer(struct dns_tcp_query *q)
{
	struct dns_message_answer answer;
	int error = dns_message_answer(q->reply + 2, q->reply_want - 2, q->id, q->name, q->qtype,
				       &answer);

	/* an answer that is no answer (another ID, another question, a
	 * broken message) says nothing of the name: the next nameserver is
	 * asked, as after a close; what the server said is final */
	if (error == DNS_MESSAGE_MALFORMED) {
		free(answer.addresses);
		dns_tcp_failed(q, error);
		return;
	}
	dns_tcp_finish(q, error, &answer);
	free(answer.addresses);
}

static void dns_tcp_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_tcp_query *q = arg;
	ssize_t n;

	if (q->sent < q->query_len) {
		int so_error = 0;
		socklen_t len = sizeof(so_error);

		/* a connect to a port of this host where nothing listens may
		 * meet itself (TCP self-connect): its own question would come
		 * back as an ill-formed answer; it is the refusal it stands for */
		if (q->sent == 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) < 0 ||
				     so_error != 0 || conn_self_connected(fd))) {
			dns_tcp_failed(q, DNS_TCP_CONNECT_FAILED);
			return;
		}
		n = send(fd, q->query + q->sent, q->query_len - q->sent, MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0) {
			dns_tcp_failed(q, q->sent == 0 ? DNS_TCP_CONNECT_FAILED : DNS_TCP_CLOSED);
			return;
		}
		q->sent += (size_t)n;
		if (q->sent < q->query_len)
			return;
		/* all sent: from now on, wait for the answer */
		event_free(q->io);
		q->io = event_new(q->base, fd, EV_READ | EV_PERSIST, dns_tcp_io_cb, q);
		event_add(q->io, NULL);
		return;
	}
	if (q->reply == NULL) {
		q->reply = xmalloc(2);
		q->reply_want = 2;
	}
	n = recv(fd, q->reply + q->received, q->reply_want - q->received, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		dns_tcp_failed(q, DNS_TCP_CLOSED);
		return;
	}
	q->received += (size_t)n;
	if (q->received < q->reply_want)
		return;
	if (q->reply_want == 2) {
		size_t len = (size_t)q->reply[0] << 8 | q->reply[1];

		/* a message of 0 bytes is no message */
		if (len == 0) {
			dns_tcp_failed(q, DNS_MESSAGE_MALFORMED);
			return;
		}
		q->reply_want = 2 + len;
		q->reply = xrealloc(q->reply, q->reply_want);
		return;
	}
	dns_tcp_read_answer(q);
}

static void dns_tcp_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_tcp_query *q = arg;

	if (q->attempt == 0 && q->query_len == 2)
		dns_tcp_finish(q, DNS_MESSAGE_MALFORMED, NULL);
	else if (q->attempt == 0)
		dns_tcp_attempt(q);
	else
		dns_tcp_failed(q, DNS_TCP_TIMEOUT);
}

/* Begin an attempt, to the next nameserver in turn: connect, and send the
 * question once connected. */
static void dns_tcp_attempt(struct dns_tcp_query *q)
{
	struct sockaddr_storage ss;
	struct timeval tv = timeval_from_ms(q->timeout_ms);
	int servers = evdns_base_count_nameservers(q->dns);
	int len;

	for (;;) {
		if (q->attempt >= q->attempts) {
			dns_tcp_finish(q, q->last_error, NULL);
			return;
		}
		q->attempt++;
		len = servers > 0
			      ? evdns_base_get_nameserver_addr(q->dns, (q->attempt - 1) % servers,
							       (struct sockaddr *)&ss, sizeof(ss))
			      : -1;
		if (len <= 0 || (size_t)len > sizeof(ss)) {
			q->last_error = DNS_TCP_CONNECT_FAILED;
			continue;
		}
		q->fd = conn_loop_socket(q->loop, ss.ss_family);
		if (q->fd < 0) {
			q->last_error = conn_error_is_local_shortage(errno)
						? DNS_TCP_LOCAL_SHORTAGE
						: DNS_TCP_CONNECT_FAILED;
			continue;
		}
		if (connect(q->fd, (struct sockaddr *)&ss, (socklen_t)len) < 0 &&
		    errno != EINPROGRESS) {
			int err = errno;

			dns_tcp_close(q);
			q->last_error = conn_error_is_local_shortage(err) ? DNS_TCP_LOCAL_SHORTAGE
									  : DNS_TCP_CONNECT_FAILED;
			continue;
		}
		break;
	}
	q->io = event_new(q->base, q->fd, EV_WRITE | EV_PERSIST, dns_tcp_io_cb, q);
	event_add(q->io, NULL);
	evtimer_add(q->timer, &tv);
}

struct dns_tcp_query *dns_tcp_query_start(const struct name_resolver *resolver, const char *name,
					  int family, dns_tcp_cb cb, void *arg)
{
	const struct resolv_conf *conf = resolver->conf;
	struct dns_tcp_query *q = xcalloc(1, sizeof(*q));
	struct timeval now = { 0, 0 };
	size_t len;

	q->base = resolver->base;
	q->dns = resolver->dns;
	q->loop = resolver->loop;
	q->name = xstrdup(name);
	q->qtype = family == AF_INET6 ? DNS_MESSAGE_TYPE_AAAA : DNS_MESSAGE_TYPE_A;
	q->timeout_ms = conf != NULL ? conf->timeout_ms : 5000;
	q->attempts = conf != NULL ? conf->attempts : 3;
	/* evdns sends a question once however few attempts: so does this */
	if (q->attempts < 1)
		q->attempts = 1;
	q->last_error = DNS_TCP_CONNECT_FAILED;
	q->cb = cb;
	q->arg = arg;
	q->fd = -1;
	evutil_secure_rng_get_bytes(&q->id, sizeof(q->id));
	len = dns_message_query(q->query + 2, q->id, name, q->qtype);
	q->query[0] = (unsigned char)(len >> 8);
	q->query[1] = (unsigned char)len;
	q->query_len = 2 + len;
	q->timer = evtimer_new(q->base, dns_tcp_timer_cb, q);
	/* the first attempt from the loop, so that cb never runs inside
	 * this call; a name without a wire form (which evdns would not have
	 * asked over UDP) is told from there too */
	evtimer_add(q->timer, &now);
	return q;
}

void dns_tcp_query_cancel(struct dns_tcp_query *query)
{
	if (query != NULL)
		dns_tcp_free(query);
}
