#include "admin_conns.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
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

/* How long a connection may wait for its next request, from its accept or
 * the end of its last answer, before it is closed. evhttp's own timeout
 * (10 s) is per read: a client that sends a byte now and then would
 * otherwise keep its place for ever. An admin request is at most 12 KiB. */
#define ADMIN_CONNS_REQUEST_MS 20000

/* Empty lines skipped before a request line at most, as a proxy listener
 * skips them (RFC 9112 section 2.2: a stray CRLF after a body); evhttp
 * itself takes one for a request line it cannot read, and refuses a 9th. */
#define ADMIN_CONNS_MAX_EMPTY_LINES 8

struct admin_conn {
	struct bufferevent *bev;
	uint64_t waiting_since_ms; /* its accept, or the end of its last answer */
	int version_status;	   /* 400 or 505: the request read now is refused for its version */
	bool answering;		   /* a request arrived; its answer is not all written */
	bool cut;		   /* shut down for taking too long; evhttp frees it */
	unsigned empty_lines;	   /* skipped before the request line looked for now */
	bool at_request_line;	   /* its input starts with a request line not looked at yet */
	bool rewriting;		   /* its request line is being put back: no new bytes */
	size_t nuls_read;	   /* NUL bytes that came in on it */
};

struct admin_conns {
	struct admin_conn open[ADMIN_CONNS_MAX];
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
		if (admin_conns_released(conns->open[i].bev))
			bufferevent_decref(conns->open[i].bev);
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

/* Shut down the connections that waited too long for a request: evhttp
 * then reads the end of its input (or fails to write) and frees them as
 * after any client's close. */
static void admin_conns_cut_slow(struct admin_conns *conns)
{
	uint64_t now = timeval_now_coarse_ms();

	for (unsigned i = 0; i < conns->count; i++) {
		struct admin_conn *c = &conns->open[i];

		if (c->answering || c->cut || now - c->waiting_since_ms < ADMIN_CONNS_REQUEST_MS)
			continue;
		c->cut = true;
		shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
	}
}

static void admin_conns_check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct admin_conns *conns = arg;

	admin_conns_cut_slow(conns);
	if (admin_conns_prune(conns))
		conns->changed(conns->arg);
	admin_conns_arm(conns);
}

/* The refusal of an HTTP-version (RFC 9112 section 2.3: "HTTP/" DIGIT "."
 * DIGIT, case-sensitive) of len bytes, or 0: 400 for no version at all, 505
 * for a major version other than 1. A later 1.x (HTTP/1.2) is served, in
 * HTTP/1.1 (RFC 9110 section 2.5). */
static int admin_conns_version_refusal(const char *version, size_t len)
{
	if (len != 8 || memcmp(version, "HTTP/", 5) != 0 || version[5] < '0' || version[5] > '9' ||
	    version[6] != '.' || version[7] < '0' || version[7] > '9')
		return 400;
	return version[5] == '1' ? 0 : 505;
}

/* c's input may hold the line of a request evhttp has not read: judge its
 * version as written. evhttp reads it as "HTTP/%d.%d" and answers in what
 * it read: HTTP/1.01 as 1.1, HTTP/1.4294967296 (past an int) as 1.0, served
 * both, and HTTP/2.0 with its own 400 page. A version refused goes on to
 * evhttp as HTTP/1.0, which reads the rest of the head as it always does
 * (and sends no 100 Continue in it), and the admin answers the refusal.
 * The empty lines before the line go first, up to 8: evhttp would take
 * the first for a request line it cannot read. */
static void admin_conns_look_at_request_line(struct admin_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	struct evbuffer_ptr eol;
	const char *line, *first_space, *last_space;
	size_t len, eol_len;
	char *kept;
	int status;

	for (;;) {
		eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_CRLF);
		if (eol.pos < 0)
			return; /* not whole yet: looked at again as more comes */
		if (eol.pos > 0 || c->empty_lines == ADMIN_CONNS_MAX_EMPTY_LINES)
			break;
		c->empty_lines++;
		evbuffer_drain(in, eol_len);
	}
	c->at_request_line = false;
	len = (size_t)eol.pos;
	line = len > 0 ? (const char *)evbuffer_pullup(in, (ev_ssize_t)len) : NULL;
	/* evhttp drops spaces at the end, then takes the version from the
	 * last space on; a line with no target refuses itself */
	while (len > 0 && line[len - 1] == ' ')
		len--;
	first_space = len > 0 ? memchr(line, ' ', len) : NULL;
	last_space = len > 0 ? memrchr(line, ' ', len) : NULL;
	if (first_space == NULL || last_space == first_space)
		return;
	status = admin_conns_version_refusal(last_space + 1, len - (size_t)(last_space + 1 - line));
	if (status == 0)
		return;
	c->version_status = status;
	len = (size_t)(last_space + 1 - line);
	kept = xmalloc(len + 8);
	memcpy(kept, line, len);
	memcpy(kept + len, "HTTP/1.0", 8);
	c->rewriting = true;
	evbuffer_drain(in, (size_t)eol.pos);
	evbuffer_prepend(in, kept, len + 8);
	c->rewriting = false;
	free(kept);
}

/* The connection whose input is in, or NULL. */
static struct admin_conn *admin_conns_by_input(struct admin_conns *conns, const struct evbuffer *in)
{
	for (unsigned i = 0; i < conns->count; i++)
		if (bufferevent_get_input(conns->open[i].bev) == in)
			return &conns->open[i];
	return NULL;
}

/* The NUL bytes among the last n of in. */
static size_t admin_conns_nuls_in_last(struct evbuffer *in, size_t n)
{
	size_t len = evbuffer_get_length(in), count = 0;
	struct evbuffer_ptr at;

	if (evbuffer_ptr_set(in, &at, n < len ? len - n : 0, EVBUFFER_PTR_SET) != 0)
		return 0;
	for (at = evbuffer_search(in, "", 1, &at); at.pos >= 0;
	     at = evbuffer_search(in, "", 1, &at)) {
		count++;
		if (evbuffer_ptr_set(in, &at, 1, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	return count;
}

/* Bytes came in on a connection (this runs as they are added, before the
 * read callback, so they are the last ones). The NULs among them are
 * counted, so that a request can be told whether one was in its bytes:
 * evhttp keeps fields as C strings, so "Host: 127.0.0.1\0.rebound.example"
 * reaches the admin as "127.0.0.1", and a line that starts with a NUL is
 * to evhttp the end of the head; RFC 9110 section 5.5 wants a request with
 * a NUL in a field refused (or the NUL made a space), which only the bytes
 * can show, and no admin request has a NUL anywhere, its body included. A
 * request line they complete is looked at before evhttp reads it; the
 * line put back then brings no new bytes. */
static void admin_conns_input_cb(struct evbuffer *in, const struct evbuffer_cb_info *info,
				 void *arg)
{
	struct admin_conn *c;

	if (info->n_added == 0)
		return;
	c = admin_conns_by_input(arg, in);
	if (c == NULL || c->rewriting)
		return;
	c->nuls_read += admin_conns_nuls_in_last(in, info->n_added);
	if (c->at_request_line)
		admin_conns_look_at_request_line(c);
}

/* What every admin answer carries (admin.c adds them to its own). */
#define ADMIN_CONNS_ERROR_FIELDS "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"

/* Replace the len bytes just added to out (an answer's first line, whose
 * version ends at version_end) by the same in HTTP/1.1, followed by fields
 * (fields_len bytes), in one add: the callback that add makes finds more
 * than a status line, or a line already in HTTP/1.1. */
static void admin_conns_rewrite(struct evbuffer *out, const char *line, size_t len,
				size_t version_end, const char *fields, size_t fields_len)
{
	char head[64 + sizeof(ADMIN_CONNS_ERROR_FIELDS)];
	size_t head_len = 8 + len - version_end;

	memcpy(head, "HTTP/1.1", 8);
	memcpy(head + 8, line + version_end, len - version_end);
	memcpy(head + head_len, fields, fields_len);
	evbuffer_drain(out, len);
	evbuffer_add(out, head, head_len + fields_len);
}

/* Bytes were added to a connection's output. evhttp's own refusals (400
 * for a request it cannot read, 413, 501 for a method it does not know)
 * come from evhttp_send_error, which clears the answer's fields and writes
 * them itself, with no hook in libevent 2.1: when the first bytes of an
 * answer the admin did not start (no request of it is being answered) are
 * a status line alone, as evhttp writes it, the two fields go after it,
 * before evhttp's own. A 1xx (the 100 Continue evhttp writes before it
 * reads a body) is written whole and gets no fields. The line is in the
 * request's version, as evhttp writes every answer, which may be one that
 * does not exist (a later 1.x, HTTP/1.2; HTTP/0.9; HTTP/1.-1, which evhttp
 * reads as numbers): any but HTTP/1.0 and HTTP/1.1 is made the 1.1 spoken
 * here, as admin_reply() does for the admin's own answers. */
static void admin_conns_output_cb(struct evbuffer *out, const struct evbuffer_cb_info *info,
				  void *arg)
{
	struct admin_conns *conns = arg;
	char line[64];
	size_t len = info->n_added;
	const char *version_end, *first_end;
	size_t at;
	bool kept;

	if (info->orig_size != 0 || len < 14 || len >= sizeof(line))
		return;
	for (unsigned i = 0; i < conns->count; i++) {
		if (bufferevent_get_output(conns->open[i].bev) != out)
			continue;
		if (conns->open[i].answering || evbuffer_copyout(out, line, len) != (ev_ssize_t)len)
			return;
		version_end = memchr(line, ' ', len);
		first_end = memchr(line, '\n', len);
		if (memcmp(line, "HTTP/", 5) != 0 || version_end == NULL || first_end == NULL ||
		    first_end < version_end + 4 || first_end[-1] != '\r')
			return;
		at = (size_t)(version_end - line);
		/* a request refused for its version went to evhttp as 1.0 */
		kept = at == 8 && conns->open[i].version_status == 0 &&
		       (memcmp(line, "HTTP/1.0", 8) == 0 || memcmp(line, "HTTP/1.1", 8) == 0);
		if (version_end[1] == '1') {
			/* the interim line and the empty line that ends it */
			if (!kept && first_end + 3 == line + len && first_end[1] == '\r' &&
			    first_end[2] == '\n')
				admin_conns_rewrite(out, line, len, at, "", 0);
			return;
		}
		if (first_end != line + len - 1)
			return;
		if (kept) {
			evbuffer_add(out, ADMIN_CONNS_ERROR_FIELDS,
				     sizeof(ADMIN_CONNS_ERROR_FIELDS) - 1);
			return;
		}
		admin_conns_rewrite(out, line, len, at, ADMIN_CONNS_ERROR_FIELDS,
				    sizeof(ADMIN_CONNS_ERROR_FIELDS) - 1);
		return;
	}
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
	evbuffer_add_cb(bufferevent_get_output(bev), admin_conns_output_cb, conns);
	evbuffer_add_cb(bufferevent_get_input(bev), admin_conns_input_cb, conns);
	bufferevent_incref(bev);
	conns->open[conns->count++] = (struct admin_conn){
		.bev = bev,
		.waiting_since_ms = timeval_now_coarse_ms(),
		.at_request_line = true,
	};
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

/* The connection req came on, or NULL when it is not counted. */
static struct admin_conn *admin_conns_of(struct admin_conns *conns, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;

	for (unsigned i = 0; i < conns->count; i++)
		if (conns->open[i].bev == bev)
			return &conns->open[i];
	return NULL;
}

/* Its answer is written: the wait for the next request starts. */
static void admin_conns_answered_cb(struct evhttp_request *req, void *arg)
{
	struct admin_conn *c = admin_conns_of(arg, req);

	if (c != NULL) {
		c->answering = false;
		c->waiting_since_ms = timeval_now_coarse_ms();
		/* evhttp reads the next request from what is left, which may
		 * hold its line already (pipelined) */
		c->version_status = 0;
		c->empty_lines = 0;
		c->at_request_line = true;
		admin_conns_look_at_request_line(c);
	}
}

void admin_conns_request(struct admin_conns *conns, struct evhttp_request *req)
{
	struct admin_conn *c = admin_conns_of(conns, req);

	if (c == NULL)
		return;
	c->answering = true;
	evhttp_request_set_on_complete_cb(req, admin_conns_answered_cb, conns);
}

int admin_conns_version_status(struct admin_conns *conns, struct evhttp_request *req)
{
	struct admin_conn *c = admin_conns_of(conns, req);

	return c != NULL ? c->version_status : 0;
}

bool admin_conns_read_nul(struct admin_conns *conns, struct evhttp_request *req)
{
	const struct admin_conn *c = admin_conns_of(conns, req);
	struct evbuffer *in;

	if (c == NULL || c->nuls_read == 0)
		return false;
	/* evhttp took this request's bytes out of the input, and nothing
	 * more: a NUL still there is a later request's, to be refused in its
	 * turn (a request with one is the connection's last) */
	in = bufferevent_get_input(c->bev);
	return c->nuls_read > admin_conns_nuls_in_last(in, evbuffer_get_length(in));
}

unsigned admin_conns_open(const struct admin_conns *conns)
{
	return conns->count;
}

unsigned admin_conns_answering(struct admin_conns *conns)
{
	unsigned n = 0;

	if (admin_conns_prune(conns))
		conns->changed(conns->arg);
	for (unsigned i = 0; i < conns->count; i++)
		if (conns->open[i].answering)
			n++;
	return n;
}

void admin_conns_free(struct admin_conns *conns)
{
	if (conns == NULL)
		return;
	for (unsigned i = 0; i < conns->count; i++)
		bufferevent_decref(conns->open[i].bev);
	event_free(conns->check);
	free(conns);
}
