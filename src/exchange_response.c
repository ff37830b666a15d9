#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "dns_cache.h"
#include "exchange_private.h"
#include "http_date.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "resume.h"
#include "retry_budget.h"
#include "timer.h"
#include "tls.h"
#include "xmalloc.h"

/*
 * The response side of an exchange: parse a try's response head, then
 * either relay the response to the client (it is final) or keep it whole,
 * unseen, while another try is made (the verdict says retry). A kept
 * response is what the client gets if no later try does better.
 */

/* Heads are parsed and used before control returns to the event loop, so one
 * scratch head serves every exchange without an allocation per response. */
static struct http1_head exchange_response_head;

/* Every response head the client gets, interim or final, starts alike. */
static const char exchange_via_attempts[] = "Via: 1.1 retryproxy\r\nRetry-Attempts: ";

/* Room for what exchange_put_head_start() writes, fields aside:
 * "HTTP/1.1 200 " reason CRLF, Via, Retry-Attempts (10 digits at most)
 * CRLF. */
static inline size_t exchange_head_start_room(const struct http1_head *head)
{
	return 13 + head->reason_len + 2 + sizeof(exchange_via_attempts) - 1 + 10 + 2;
}

/* "Date: " and an IMF-fixdate, for a response that came without one (RFC
 * 9110 section 6.6.1); kept apart from the head's writing, since most
 * upstreams send their own. */
static char *exchange_put_date(char *p, const char *date)
{
	p = EXCHANGE_PUT_LITERAL(p, "Date: ");
	p = exchange_put(p, date, HTTP_DATE_LEN);
	return EXCHANGE_PUT_LITERAL(p, "\r\n");
}

/* Our status line, the upstream's fields marked in forward, then Via (in
 * the version the upstream's message came in, RFC 9110 section 7.6.3:
 * "Via: 1.0" for HTTP/1.0), Retry-Attempts, and a Date unless date is NULL. */
static inline char *exchange_put_head_start(char *p, const struct exchange *ex,
					    const struct http1_head *head, const bool *forward,
					    bool length_repeated, const char *date)
{
	char *via_at;

	p = EXCHANGE_PUT_LITERAL(p, "HTTP/1.1 ");
	*p++ = (char)('0' + head->status / 100);
	*p++ = (char)('0' + head->status / 10 % 10);
	*p++ = (char)('0' + head->status % 10);
	*p++ = ' ';
	p = exchange_put(p, head->reason, head->reason_len);
	p = EXCHANGE_PUT_LITERAL(p, "\r\n");
	p = exchange_put_fields(p, head, forward, length_repeated);
	via_at = p;
	p = EXCHANGE_PUT_LITERAL(p, exchange_via_attempts);
	via_at[sizeof("Via: 1.") - 1] = (char)('0' + head->version_minor);
	p = exchange_put_uint(p, ex->attempts);
	p = EXCHANGE_PUT_LITERAL(p, "\r\n");
	return date != NULL ? exchange_put_date(p, date) : p;
}

/* A chunked response decoded for an HTTP/1.0 client loses its trailer
 * section, and a bodiless one (HEAD, 304) says how a chunked body would
 * come to a client that gets none (its Transfer-Encoding goes only to
 * HTTP/1.1): no Trailer field may announce either. A pass of its own, kept out
 * of the field loop every response takes, since it is rare; the head's room
 * was counted with the field (some to spare). */
static void exchange_drop_trailer_field(const struct http1_head *head, bool *forward)
{
	size_t i;

	for (i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (f->known == HTTP1_FIELD_OTHER && f->name_len == 7 &&
		    strncasecmp(f->name, "Trailer", 7) == 0)
			forward[i] = false;
	}
}

/* Write the response head of try number to the client: our HTTP version,
 * the upstream's fields minus hop-by-hop ones, Via and Retry-Attempts, a
 * Date if it has none (the second received, when not now: a kept
 * response's), and our own Connection; set up the body's relay toward the
 * client. */
static void exchange_send_response_head(struct exchange *ex, const struct http1_head *head,
					const struct http1_framing *rf, unsigned number,
					time_t received)
{
	static const char close[] = "Connection: close\r\n";
	static const char keep_alive[] = "Connection: keep-alive\r\n";
	static const char upgrade[] = "Connection: upgrade\r\n";
	static const char ambiguous[] = "Retry-Ambiguous: true\r\n";
	struct evbuffer *out = conn_output(ex->owner.conn);
	/* an HTTP/1.0 client cannot read chunked: decode and close instead */
	bool pass_chunked = rf->body == HTTP1_BODY_CHUNKED && ex->client_minor >= 1;
	/* a 101 names the protocol switched to: Upgrade goes on with it */
	bool upgrading = head->status == 101;
	/* RFC 9110 section 8.6: never a Content-Length on a 1xx or 204, which
	 * have no content whatever an upstream's says */
	bool no_length = head->status < 200 || head->status == 204;
	bool no_trailer = ex->client_minor == 0 &&
			  (rf->body == HTTP1_BODY_CHUNKED || rf->body == HTTP1_BODY_NONE);
	/* a HEAD's or 304's Transfer-Encoding says how a GET's body would
	 * come (RFC 9112 section 6.1): it goes on, but only to HTTP/1.1, never
	 * on a 1xx or 204, and never from HTTP/1.0, where it is faulty */
	bool pass_coding = pass_chunked || (rf->body == HTTP1_BODY_NONE && !no_length &&
					    ex->client_minor >= 1 && head->version_minor >= 1);
	bool hop[HTTP1_MAX_FIELDS];
	bool forward[HTTP1_MAX_FIELDS];
	bool seen_length = false;
	bool has_date = false;
	char received_date[HTTP_DATE_LEN + 1];
	const char *date = NULL;
	/* the start, fields, Connection, CRLF */
	size_t size = exchange_head_start_room(head) + sizeof(keep_alive) - 1 + 2;
	struct evbuffer_iovec vec;
	char *p;
	size_t i;

	/* a response before the request body is all read ends the connection
	 * (exchange_close()): the body's unread rest would be taken for the
	 * next request, so the head says close */
	ex->client_keep_after =
		ex->client_keep_alive && ex->request_body.done && !ex->owner.closing(ex->owner.arg);
	/* SPEC "Ambiguous outcome": the precondition or key may have failed
	 * because an earlier try that got no answer did succeed; a response
	 * from before the first such try (kept, then delivered) cannot be the
	 * effect of any of them */
	if (ex->lost_after_send != 0 && number > ex->lost_after_send) {
		ex->ambiguous = head->status == 412 || (head->status == 409 && ex->keyed);
		size += sizeof(ambiguous) - 1; /* room enough either way */
	}
	body_relay_release(&ex->response_body);
	body_relay_init_framing(&ex->response_body, rf, !pass_chunked,
				ex->config->limits.max_header_bytes);
	if (pass_chunked && rf->connection_options)
		body_relay_trailer_named(&ex->response_body, head);
	if (rf->body == HTTP1_BODY_UNTIL_CLOSE || (rf->body == HTTP1_BODY_CHUNKED && !pass_chunked))
		ex->client_keep_after = false;
	http1_hop_by_hop_marks(head, hop);
	for (i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];
		/* the count the client gets is this proxy's: one an upstream (a
		 * proxy of its own) sent would stand first and say another */
		bool fwd = f->known != HTTP1_FIELD_RETRY_ATTEMPTS &&
			   (!hop[i] || (pass_coding && f->known == HTTP1_FIELD_TRANSFER_ENCODING) ||
			    (upgrading && f->known == HTTP1_FIELD_UPGRADE));

		/* identical Content-Lengths were checked: one goes on */
		if (rf->length_repeated && f->known == HTTP1_FIELD_CONTENT_LENGTH) {
			fwd = fwd && !seen_length;
			seen_length = true;
		}
		if (no_length && f->known == HTTP1_FIELD_CONTENT_LENGTH)
			fwd = false;
		forward[i] = fwd;
		if (fwd)
			size += f->line_len;
		has_date |= fwd & (f->known == HTTP1_FIELD_DATE);
	}
	/* RFC 9110 section 6.6.1: a response forwarded without a Date gets
	 * one, the time it was received */
	if (!has_date) {
		size += sizeof("Date: \r\n") - 1 + HTTP_DATE_LEN;
		date = http_date_now();
		if (received != 0) {
			memcpy(received_date, date, sizeof(received_date));
			http_date_format(received, received_date);
			date = received_date;
		}
	}
	if (no_trailer)
		exchange_drop_trailer_field(head, forward);
	evbuffer_reserve_space(out, (ev_ssize_t)size, &vec, 1);
	p = exchange_put_head_start(vec.iov_base, ex, head, forward, rf->length_repeated, date);
	if (ex->ambiguous)
		p = EXCHANGE_PUT_LITERAL(p, ambiguous);
	if (upgrading)
		p = EXCHANGE_PUT_LITERAL(p, upgrade);
	else if (!ex->client_keep_after)
		p = EXCHANGE_PUT_LITERAL(p, close);
	else if (ex->client_minor == 0)
		p = EXCHANGE_PUT_LITERAL(p, keep_alive);
	p = EXCHANGE_PUT_LITERAL(p, "\r\n");
	vec.iov_len = (size_t)(p - (char *)vec.iov_base);
	evbuffer_commit_space(out, &vec, 1);
	ex->status = head->status;
}

/* Write an upstream's interim response to the client as RFC 9110 section
 * 15.2 asks of a proxy: our HTTP version, its fields minus hop-by-hop ones
 * (and any Content-Length: a 1xx has no content), Via and Retry-Attempts as
 * on every response. Nothing else of the exchange changes: the final
 * response, and the client's pipelined next one, still follow it. */
static void exchange_send_interim(struct exchange *ex, const struct http1_head *head)
{
	struct evbuffer *out = conn_output(ex->owner.conn);
	bool hop[HTTP1_MAX_FIELDS];
	bool forward[HTTP1_MAX_FIELDS];
	/* the start, fields, CRLF */
	size_t size = exchange_head_start_room(head) + 2;
	struct evbuffer_iovec vec;
	char *p;
	size_t i;

	http1_hop_by_hop_marks(head, hop);
	for (i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		forward[i] = !hop[i] && f->known != HTTP1_FIELD_RETRY_ATTEMPTS &&
			     f->known != HTTP1_FIELD_CONTENT_LENGTH;
		if (forward[i])
			size += f->line_len;
	}
	evbuffer_reserve_space(out, (ev_ssize_t)size, &vec, 1);
	p = exchange_put_head_start(vec.iov_base, ex, head, forward, false, NULL);
	p = EXCHANGE_PUT_LITERAL(p, "\r\n");
	vec.iov_len = (size_t)(p - (char *)vec.iov_base);
	evbuffer_commit_space(out, &vec, 1);
}

/* May the try's connection serve another request once body is read? */
static bool exchange_upstream_reusable(struct exchange_try *t, const struct body_relay *body)
{
	struct exchange *ex = t->ex;

	return t->framing.keep_alive && body->mode != BODY_MODE_UNTIL_CLOSE && !t->parked_closed &&
	       ex->request_body.done && conn_input_length(t->up) == 0 &&
	       conn_output_length(t->up) == 0 && !exchange_body_queue_pending(t) &&
	       !ex->proxy->draining;
}

/* The whole response is queued for the client. */
static void exchange_response_complete(struct exchange *ex)
{
	struct exchange_try *t = ex->winner;

	if (t != NULL && t->up != NULL)
		exchange_end_try(t, exchange_upstream_reusable(t, &ex->response_body));
	exchange_finish(ex);
}

void exchange_relay_resumed(struct exchange_try *t)
{
	t->read_paused = false;
	conn_read_enable(t->up, true);
	exchange_relay_response(t->ex);
}

void exchange_relay_response(struct exchange *ex)
{
	struct exchange_try *t = ex->winner;
	struct evbuffer *out = conn_output(ex->owner.conn);
	enum http1_error error = HTTP1_ERR_NONE;

	if (t != NULL && t->up != NULL &&
	    body_relay_move(&ex->response_body, conn_input(t->up), out, &error) < 0) {
		metrics_upstream_error(ex->proxy->metrics, TRY_MALFORMED);
		exchange_break_response(ex, "malformed chunked response body");
		return;
	}
	if (ex->response_body.done) {
		exchange_response_complete(ex);
		return;
	}
	if (t != NULL && t->up != NULL && evbuffer_get_length(out) > EXCHANGE_OUTPUT_HIGH) {
		t->read_paused = true;
		conn_read_enable(t->up, false);
	}
}

/* Send a response of try number held in buf (head of head_len bytes, then as
 * much body as buf has), whose head came at received, to the client: the
 * head to its connection, the body in the client's framing to body_to.
 * Returns -1 if the head no longer parses. */
static int exchange_send_buffered(struct exchange *ex, struct evbuffer *buf, size_t head_len,
				  unsigned number, time_t received, struct evbuffer *body_to)
{
	struct http1_head *head = &exchange_response_head;
	struct http1_framing rf;
	enum http1_error error = HTTP1_ERR_NONE;
	const char *data = (const char *)evbuffer_pullup(buf, (ev_ssize_t)head_len);

	/* it parsed when it arrived; parse again to point into this buffer */
	if (http1_parse_response_head(data, head_len, head_len, head, &error) != HTTP1_PARSE_DONE ||
	    http1_response_framing(head, ex->head_request, &rf, &error) < 0)
		return -1;
	exchange_send_response_head(ex, head, &rf, number, received);
	evbuffer_drain(buf, head_len);
	body_relay_move(&ex->response_body, buf, body_to, &error);
	return 0;
}

/* A TLS upstream closed a body that ends with the connection without a
 * close_notify: whole or cut, nothing tells (RFC 9112 section 9.8). */
#define EXCHANGE_UNCLEAN_CLOSE_TEXT "upstream closed without TLS close_notify mid-body"

static void exchange_closed_while_relaying(struct exchange_try *t, short what);

void exchange_deliver_kept(struct exchange *ex)
{
	struct evbuffer *rest;

	if (ex->resumable && ex->resume->pending) {
		exchange_resume_give_up(ex, "resume given up");
		return;
	}
	/* the response is final: a retry's try still under way (the drain's
	 * answer gives it before the try ends) is cancelled now, not left to
	 * answer while this one is fed to the client */
	exchange_cancel_tries(ex, true);
	rest = evbuffer_new();
	if (exchange_send_buffered(ex, ex->kept, ex->kept_head_len, ex->kept_number,
				   ex->kept_received, rest) < 0) {
		evbuffer_free(rest);
		exchange_respond_error(ex, 502, "502 kept upstream response could not be re-read");
		return;
	}
	/* the body goes as the client takes it, not queued whole: a client
	 * that does not read would hold up to retry_response_buffer here,
	 * counted nowhere; it counts in retry_memory until it is written */
	evbuffer_free(ex->kept);
	ex->kept = rest;
	ex->kept_feeding = true;
	exchange_count_kept_hedge(ex, true);
	/* nothing follows it: no try relays (exchange_feed_kept()) */
	ex->winner = NULL;
	/* given while held or queued (the drain's answer): out of the
	 * upstream's queue now, as exchange_close() would have taken it,
	 * not left there while the client reads; and no retry follows, so
	 * a place among the pending retries a queued retry kept goes back
	 * (its wait ended by try_timeout or the deadline) */
	exchange_stop_waiting(ex);
	exchange_release_retry(ex);
	exchange_gauges_update(ex);
	exchange_set_state(ex, EXCHANGE_RELAYING);
	exchange_feed_kept(ex);
}

void exchange_feed_kept(struct exchange *ex)
{
	struct exchange_try *t;

	exchange_memory_feed(ex, ex->kept, conn_output(ex->owner.conn));
	if (evbuffer_get_length(ex->kept) > 0)
		return; /* more once the client drained it (exchange_client_drained()) */
	ex->kept_feeding = false;
	t = ex->winner;
	if (t != NULL) {
		/* passed on as final while its body came: the rest is its
		 * upstream's */
		evbuffer_free(ex->kept);
		ex->kept = NULL;
		exchange_memory_recount(ex);
		exchange_relay_resumed(t);
		/* its connection ended while it waited, all of it held: the
		 * close that ends a body without framing was seen then, not
		 * again now */
		if (ex->kept_closed_what != 0 && ex->state == EXCHANGE_RELAYING && ex->winner == t)
			exchange_closed_while_relaying(t, ex->kept_closed_what);
		return;
	}
	/* an https upstream's close-delimited body that ended without its
	 * close_notify may have been cut: never passed on as whole */
	if (ex->kept_unclean) {
		metrics_upstream_error(ex->proxy->metrics, TRY_RESET);
		exchange_break_response(ex, EXCHANGE_UNCLEAN_CLOSE_TEXT);
		return;
	}
	/* a close-delimited body ends here; the client connection closes after it */
	exchange_finish(ex);
}

/* The response being kept turned out too large to keep: it becomes the
 * final response after all, what was read of it first. */
static void exchange_pass_on_overflow(struct exchange_try *t, bool draining)
{
	struct exchange *ex = t->ex;
	bool closed = t->parked_closed;
	struct evbuffer *rest;

	if (t->parked) {
		t->parked = false;
		conn_read_enable(t->up, true);
	}
	log_info("%.*s %.*s: retryable response %s: passed on as final", (int)ex->method_len,
		 ex->method, (int)ex->target_len, ex->target,
		 t->keeping_no_room ? "does not fit in what retry_memory leaves"
				    : "is over retry_response_buffer");
	/* the retry it was kept for will not happen: its place goes back; a
	 * drain's answer gives up on the tries it cuts */
	ex->note = draining		? "draining"
		   : t->keeping_no_room ? "retryable response over the room left in retry_memory"
					: "retryable response over retry_response_buffer";
	ex->gave_up = draining ? RETRY_GIVE_UP_DEADLINE : RETRY_GIVE_UP_NONE;
	/* one that came while other tries raced it was not decided on: one
	 * that no retry would have followed anyway (no attempt, time or
	 * budget left) says why, as one that came alone does
	 * (retry_decide()), and the size is then no note */
	if (!draining && t->verdict_pending &&
	    exchange_decide_response(ex, t->keeping_status,
				     exchange_wait_left(t->keeping_retry_after_until), true,
				     t->keeping_should)
			    .kind == RETRY_VERDICT_GIVE_UP)
		ex->note = NULL;
	exchange_release_retry(ex);
	exchange_cancel_racing(ex, t);
	ex->winner = t;
	exchange_try_set_state(t, EXCHANGE_TRY_RELAYING);
	exchange_set_state(ex, EXCHANGE_RELAYING);
	rest = evbuffer_new();
	if (exchange_send_buffered(ex, t->keeping, t->keeping_head_len, t->number,
				   t->keeping_received, rest) < 0) {
		evbuffer_free(rest);
		exchange_break_response(ex, "kept response could not be re-read");
		return;
	}
	evbuffer_free(t->keeping);
	t->keeping = NULL;
	/* an earlier try's answer kept can no longer be the client's */
	if (ex->kept != NULL) {
		exchange_count_kept_hedge(ex, false);
		evbuffer_free(ex->kept);
	}
	/* what was read of it goes as the client takes it, counted until
	 * then, and its upstream's rest after it (exchange_feed_kept()) */
	ex->kept = rest;
	ex->kept_unclean = false;
	ex->kept_feeding = true;
	ex->kept_closed_what = closed ? CONN_EOF | CONN_READING : 0;
	t->read_paused = true;
	conn_read_enable(t->up, false);
	exchange_feed_kept(ex);
}

/* Tries in flight other than t that have no answer too large to keep. */
static unsigned exchange_tries_unparked(const struct exchange *ex, const struct exchange_try *t)
{
	unsigned n = 0;
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		n += &ex->slots[i] != t && ex->slots[i].state != EXCHANGE_TRY_IDLE &&
		     !ex->slots[i].parked;
	return n;
}

/* A retryable response too large to keep can be neither retried on nor
 * returned once retries end, so it ends retrying. But while another try
 * is in flight, that one may still bring an answer that is not retryable
 * (SPEC: a retryable answer waits for the others): until then this one
 * waits unread, its head and what came of its body held, its connection
 * open. */
static void exchange_keep_overflow(struct exchange_try *t)
{
	if (exchange_tries_unparked(t->ex, t) > 0) {
		t->parked = true;
		conn_read_enable(t->up, false);
		return;
	}
	exchange_pass_on_overflow(t, false);
}

/* The first try waiting with an answer too large to keep, or NULL. */
static struct exchange_try *exchange_first_parked(struct exchange *ex)
{
	size_t i;

	for (i = 0; i < EXCHANGE_TRY_SLOTS; i++)
		if (ex->slots[i].parked)
			return &ex->slots[i];
	return NULL;
}

bool exchange_pass_on_parked(struct exchange *ex)
{
	struct exchange_try *parked;

	if (exchange_tries_unparked(ex, NULL) > 0 || (parked = exchange_first_parked(ex)) == NULL)
		return false;
	exchange_pass_on_overflow(parked, false);
	return true;
}

bool exchange_give_held(struct exchange *ex)
{
	struct exchange_try *parked = exchange_first_parked(ex);

	if (parked != NULL) {
		exchange_pass_on_overflow(parked, true);
		return true;
	}
	/* kept while another try raced it, or from an earlier try while a
	 * retry's try is in flight: the last response received, as a request
	 * in backoff gets it */
	if (ex->kept == NULL)
		return false;
	ex->kept_undecided = false;
	ex->note = "draining";
	ex->gave_up = RETRY_GIVE_UP_DEADLINE;
	exchange_cancel_racing(ex, NULL);
	exchange_deliver_kept(ex);
	return true;
}

/* A kept response waits through a whole backoff, thousands of them at once:
 * a small one is moved from its read buffers (1 KiB or more each) into one
 * block of its own size. */
#define EXCHANGE_COMPACT_MAX 4096

static void exchange_free_block(const void *data, size_t len, void *arg)
{
	free((void *)data);
}

static void exchange_compact_kept(struct evbuffer *kept)
{
	size_t len = evbuffer_get_length(kept);
	char *block;

	if (len == 0 || len > EXCHANGE_COMPACT_MAX)
		return;
	block = xmalloc(len);
	evbuffer_remove(kept, block, len);
	evbuffer_add_reference(kept, block, len, exchange_free_block, NULL);
}

/* The response being kept is complete: it replaces the older kept one, and
 * the next try waits for its backoff. */
static void exchange_keep_complete(struct exchange_try *t, bool reusable)
{
	struct exchange *ex = t->ex;
	bool verdict_pending = t->verdict_pending;
	int status = t->keeping_status;
	uint64_t retry_after_until = t->keeping_retry_after_until;
	enum retry_should should = t->keeping_should;
	struct retry_verdict verdict;

	if (ex->kept != NULL)
		evbuffer_free(ex->kept);
	exchange_count_kept_hedge(ex, false);
	exchange_compact_kept(t->keeping);
	ex->kept = t->keeping;
	ex->kept_head_len = t->keeping_head_len;
	ex->kept_unclean = t->keeping_unclean;
	ex->kept_number = t->number;
	ex->kept_received = t->keeping_received;
	t->keeping = NULL;
	exchange_memory_recount(ex);
	/* a hedge's answer may yet be the client's (exchange_deliver_kept()):
	 * counted won or lost then, not as its try ends */
	ex->kept_hedge = t->hedge;
	t->hedge = false;
	exchange_end_try(t, reusable);
	if (!verdict_pending) {
		exchange_schedule_retry(ex);
		return;
	}
	/* it came while other tries raced it: the last of them to end decides
	 * (exchange_try_failed() on this one's facts, if it ends without a
	 * response), unless those left are too large to keep: one of them ends
	 * retrying */
	if (exchange_pass_on_parked(ex))
		return;
	if (exchange_tries_left(ex) > 0) {
		ex->kept_undecided = true;
		ex->kept_status = status;
		ex->kept_retry_after_until = retry_after_until;
		ex->kept_should = should;
		return;
	}
	verdict = exchange_decide_response(ex, status, exchange_wait_left(retry_after_until), false,
					   should);
	if (verdict.kind == RETRY_VERDICT_RETRY)
		exchange_schedule_retry(ex);
	else if (verdict.kind == RETRY_VERDICT_HOLD)
		/* marked down since its head came (others' connects failed):
		 * wait for it, as the retry's own connect would have */
		exchange_hold_retry(ex, verdict.cause);
	else
		exchange_deliver_kept(ex);
}

/* The bytes of an announced body not yet kept, 0 when none is announced. */
static uint64_t exchange_keeping_rest(const struct exchange_try *t)
{
	uint64_t have = evbuffer_get_length(t->keeping) - t->keeping_head_len;

	if (t->framing.body != HTTP1_BODY_LENGTH || have >= t->framing.content_length)
		return 0;
	return t->framing.content_length - have;
}

void exchange_keep_response(struct exchange_try *t)
{
	struct exchange *ex = t->ex;
	enum http1_error error = HTTP1_ERR_NONE;

	if (t->parked)
		return;
	if (body_relay_move(&t->keeping_body, conn_input(t->up), t->keeping, &error) < 0) {
		exchange_try_failed(t, TRY_MALFORMED, http1_error_text(error));
		return;
	}
	exchange_memory_recount(ex);
	/* the size first: a large body may arrive whole in one read, or be
	 * announced */
	if (evbuffer_get_length(t->keeping) - t->keeping_head_len >
		    ex->config->limits.retry_response_buffer ||
	    (t->framing.body == HTTP1_BODY_LENGTH &&
	     t->framing.content_length > ex->config->limits.retry_response_buffer)) {
		exchange_keep_overflow(t);
		return;
	}
	/* then the room all kept bodies and responses leave: an announced
	 * body's rest must fit too */
	if (!exchange_memory_room(ex, exchange_keeping_rest(t))) {
		t->keeping_no_room = true;
		exchange_keep_overflow(t);
		return;
	}
	if (t->keeping_body.done)
		exchange_keep_complete(t, exchange_upstream_reusable(t, &t->keeping_body));
}

/* Begin keeping a retryable response whose head is at the front of the
 * try's input. */
static void exchange_start_keeping(struct exchange_try *t, const struct http1_head *head)
{
	struct evbuffer *in = conn_input(t->up);

	t->keeping = evbuffer_new();
	t->keeping_head_len = head->head_len;
	t->keeping_received = http_date_clock();
	t->keeping_unclean = false;
	t->keeping_no_room = false;
	evbuffer_remove_buffer(in, t->keeping, head->head_len);
	/* kept as received: a chunked body keeps its framing */
	body_relay_init_framing(&t->keeping_body, &t->framing, false,
				t->ex->config->limits.max_header_bytes);
	exchange_try_set_state(t, EXCHANGE_TRY_KEEPING);
	exchange_keep_response(t);
}

/* Keep a retryable response to decide on once it is whole: what its head
 * said is noted now, its Retry-After as a time (the wait runs from the
 * head). */
static void exchange_keep_undecided(struct exchange_try *t, const struct http1_head *head,
				    uint64_t retry_after_ms, enum retry_should should)
{
	t->verdict_pending = true;
	t->keeping_status = head->status;
	t->keeping_retry_after_until = 0;
	if (retry_after_ms > 0) {
		uint64_t now = timer_now_ms();

		/* a wait past 64 bits of time stays past every deadline */
		t->keeping_retry_after_until =
			retry_after_ms > UINT64_MAX - now ? UINT64_MAX : now + retry_after_ms;
	}
	t->keeping_should = should;
	exchange_start_keeping(t, head);
}

/* Now, in milliseconds since the epoch. CLOCK_REALTIME, not time() (the
 * coarse clock, a tick behind): a date in Retry-After is wall-clock time. */
static int64_t exchange_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The wait a response asks for in milliseconds: the longest of its
 * Retry-After and retry-after-ms fields, 0 when all are absent or invalid.
 * Each copy of a repeated field counts: the proxy comes back no sooner than
 * any of them asks. */
uint64_t exchange_retry_after(const struct http1_head *head)
{
	int64_t wall_ms = -1; /* read once, for the first Retry-After */
	uint64_t ms = 0;

	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];
		uint64_t asked;

		if (http1_name_equals(f->name, f->name_len, "retry-after")) {
			if (wall_ms < 0)
				wall_ms = exchange_wall_ms();
			if (retry_after_parse(f->value, f->value_len, wall_ms, &asked) < 0)
				continue;
		} else if (http1_name_equals(f->name, f->name_len, "retry-after-ms")) {
			if (retry_after_ms_parse(f->value, f->value_len, &asked) != 0)
				continue;
		} else {
			continue;
		}
		if (asked > ms)
			ms = asked;
	}
	return ms;
}

/* The response's x-should-retry. Copies that disagree leave the answer in
 * doubt, and then it is not retried: a false in any copy wins. */
static enum retry_should exchange_should_retry(const struct http1_head *head)
{
	enum retry_should should = RETRY_SHOULD_UNSET;

	for (size_t i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];

		if (!http1_name_equals(f->name, f->name_len, "x-should-retry"))
			continue;
		switch (retry_should_parse(f->value, f->value_len)) {
		case RETRY_SHOULD_FALSE:
			return RETRY_SHOULD_FALSE;
		case RETRY_SHOULD_TRUE:
			should = RETRY_SHOULD_TRUE;
			break;
		case RETRY_SHOULD_UNSET:
			break;
		}
	}
	return should;
}

/* exchange_response_retryable(), inlined where every response head passes. */
static inline bool exchange_head_retryable(const struct exchange *ex, const struct http1_head *head,
					   enum retry_should *should)
{
	bool retryable = retry_on_status(&ex->route->retry, head->status);

	/* most responses are not retryable: x-should-retry is looked for only
	 * on an error status or one retry.on names */
	*should = RETRY_SHOULD_UNSET;
	if (retryable || head->status >= 400) {
		*should = exchange_should_retry(head);
		retryable = retry_response_retryable(&ex->route->retry, head->status, *should);
	}
	return retryable;
}

bool exchange_response_retryable(const struct exchange *ex, const struct http1_head *head,
				 enum retry_should *should)
{
	return exchange_head_retryable(ex, head, should);
}

/* This try's response goes to the client: head now, body as it comes. */
static void exchange_relay_from(struct exchange_try *t, const struct http1_head *head)
{
	struct exchange *ex = t->ex;

	if (t->framing.body == HTTP1_BODY_CHUNKED) {
		struct body_relay check;
		enum http1_error error = HTTP1_ERR_NONE;

		/* body bytes that came with the head may already show the framing
		 * broken: then nothing of this response reaches the client */
		body_relay_init(&check, BODY_MODE_CHUNKED, 0, ex->config->limits.max_header_bytes);
		if (body_relay_check(&check, conn_input(t->up), head->head_len, &error) < 0) {
			/* the head's record, the trail's last, goes: the try is
			 * one malformed entry, as attempts counts it */
			if (t->record + 1 == ex->try_count)
				ex->try_count--;
			exchange_try_failed(t, TRY_MALFORMED, http1_error_text(error));
			return;
		}
	}
	exchange_cancel_racing(ex, t);
	ex->winner = t;
	exchange_send_response_head(ex, head, &t->framing, t->number, 0);
	evbuffer_drain(conn_input(t->up), head->head_len);
	exchange_try_set_state(t, EXCHANGE_TRY_RELAYING);
	exchange_set_state(ex, EXCHANGE_RELAYING);
	/* a retryable answer kept from an earlier try can no longer be the
	 * client's: its memory and its room in retry_memory go now, not when
	 * this response ends (a long download) */
	if (ex->kept != NULL) {
		evbuffer_free(ex->kept);
		ex->kept = NULL;
		exchange_memory_recount(ex);
	}
	exchange_relay_response(ex);
}

/* Did the request's Upgrade fields (in the head sent upstream, as the
 * client wrote them) list this protocol? Names compare without regard to
 * case (RFC 9110 section 7.8). */
static bool exchange_upgrade_asked(const struct exchange *ex, const char *proto, size_t len)
{
	const char *p = ex->request_head;
	const char *end = p + ex->request_head_len;

	/* line by line: the fields are well formed, each ends in CRLF */
	while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL && ++p < end) {
		const char *eol = memchr(p, '\r', (size_t)(end - p));
		const char *list = p + 8;
		const char *elem;
		size_t elem_len;

		if (eol == NULL || eol - p < 8 || strncasecmp(p, "upgrade:", 8) != 0)
			continue;
		while (http1_list_next(&list, eol, &elem, &elem_len))
			if (http1_equal_nocase(elem, elem_len, proto, len))
				return true;
	}
	return false;
}

/* Does the response head's Upgrade name a protocol, each one the request
 * asked for? A server must not switch to another (RFC 9110 section 7.8). */
static bool exchange_switch_asked(const struct exchange *ex, const struct http1_head *head)
{
	bool named = false;
	size_t i;

	for (i = 0; i < head->field_count; i++) {
		const struct http1_field *f = &head->fields[i];
		const char *list = f->value;
		const char *elem;
		size_t elem_len;

		if (f->known != HTTP1_FIELD_UPGRADE)
			continue;
		while (http1_list_next(&list, f->value + f->value_len, &elem, &elem_len)) {
			if (elem_len == 0)
				continue;
			if (!exchange_upgrade_asked(ex, elem, elem_len))
				return false;
			named = true;
		}
	}
	return named;
}

/* 101: the upstream switched to a protocol the request's Upgrade asked
 * for. The head goes to the client with this hop's own Connection: upgrade,
 * and from its last byte on both connections belong to a tunnel: what the
 * upstream sent behind the head goes first. Final as any response is; an
 * upgrade the request did not ask for (or from an HTTP/1.0 server, or one
 * naming no protocol, or one the request did not list: RFC 9110 section
 * 7.8) is malformed. */
static void exchange_switch_protocols(struct exchange_try *t, const struct http1_head *head)
{
	struct exchange *ex = t->ex;
	struct http1_framing none = { .body = HTTP1_BODY_NONE };

	/* a resume's try asks for the rest of a body the client is reading */
	if (!ex->upgrade || (ex->resumable && ex->resume->pending)) {
		exchange_try_failed(t, TRY_MALFORMED,
				    "101 Switching Protocols without an Upgrade request");
		return;
	}
	if (head->version_minor == 0 || !exchange_switch_asked(ex, head)) {
		exchange_try_failed(
			t, TRY_MALFORMED,
			"101 Switching Protocols to a protocol the request did not name");
		return;
	}
	exchange_try_timeout_stop(t);
	upstream_response_seen(ex->upstream, &ex->config->health);
	t->record = ex->try_count;
	exchange_record_try(ex, head->status, NULL, t->hedge);
	exchange_cancel_racing(ex, t);
	exchange_send_response_head(ex, head, &none, t->number, 0);
	evbuffer_drain(conn_input(t->up), head->head_len);
	ex->tunnel = t->up;
	t->up = NULL;
	exchange_end_try(t, false);
	/* as a CONNECT tunnel's, it holds no place among the upstream's
	 * connections from now on: a WebSocket may last for hours, and the
	 * requests waiting for a place would wait for it */
	conn_on_closed_now(ex->tunnel);
	exchange_finish_tunnel(ex);
}

/* A complete response head arrived: keep it for a retry, or pass it on. */
static void exchange_on_response_head(struct exchange_try *t, const struct http1_head *head)
{
	struct exchange *ex = t->ex;
	const struct http1_framing *rf = &t->framing;
	enum retry_should should;
	bool retryable;

	exchange_try_timeout_stop(t);
	/* a body that stops arriving for a whole try_timeout is dead */
	conn_set_timeouts(t->up, ex->route->retry.try_timeout_ms, 0);
	upstream_response_seen(ex->upstream, &ex->config->health);
	t->record = ex->try_count;
	exchange_record_try(ex, head->status, NULL, t->hedge);
	if (ex->resumable && ex->resume->pending) {
		/* the client has a head and part of a body: only their rest fits */
		exchange_resume_answer(t, head);
		return;
	}
	/* most responses are not retryable: no clock or budget is read for them */
	retryable = exchange_head_retryable(ex, head, &should);
	if (retryable) {
		bool too_large = rf->body == HTTP1_BODY_LENGTH &&
				 rf->content_length > ex->config->limits.retry_response_buffer;
		uint64_t retry_after_ms = exchange_retry_after(head);
		struct retry_verdict verdict;

		/* a retry must not send it Transfer-Encoding (RFC 9112 6.1) */
		if (head->version_minor == 0)
			ex->upstream_http10 = true;

		/* SPEC: a retryable answer while another try is in flight waits
		 * for the other; it is kept meanwhile (or, too large to keep,
		 * waits unread), and no more hedges start */
		if (exchange_tries_left(ex) > 1) {
			exchange_stop_hedging(ex);
			exchange_keep_undecided(t, head, retry_after_ms, should);
			return;
		}
		verdict = exchange_decide_response(ex, head->status, retry_after_ms, too_large,
						   should);
		if (verdict.kind == RETRY_VERDICT_RETRY) {
			exchange_start_keeping(t, head);
			return;
		}
		if (verdict.kind == RETRY_VERDICT_HOLD) {
			/* the upstream is down (this came on a connection made
			 * before): the retry waits for it; decided again once the
			 * response is whole, as one kept while others raced */
			exchange_keep_undecided(t, head, retry_after_ms, should);
			return;
		}
		if (verdict.too_large)
			ex->note = "retryable response over retry_response_buffer";
	}
	if (head->status == 200 && ex->route->retry.resume)
		exchange_resume_offer(t, head);
	exchange_relay_from(t, head);
}

/* A response in a transfer coding before chunked (gzip, chunked), for an
 * HTTP/1.0 client: undoing chunked alone would pass the coded bytes off as
 * the content. The upstream answered, and would answer the same again: a
 * 502 that says so, with no retry, not one that calls it unreachable. */
static void exchange_refuse_coding(struct exchange_try *t)
{
	struct exchange *ex = t->ex;
	char text[256];

	exchange_try_timeout_stop(t);
	upstream_response_seen(ex->upstream, &ex->config->health);
	t->record = ex->try_count;
	exchange_record_try(ex, 0, try_outcome_name(TRY_MALFORMED), t->hedge);
	metrics_upstream_error(ex->proxy->metrics, TRY_MALFORMED);
	exchange_cancel_racing(ex, t);
	/* its body is not read: the connection goes with it */
	exchange_end_try(t, false);
	if (ex->kept != NULL) {
		/* the most recent response beats an error of our own */
		exchange_deliver_kept(ex);
		return;
	}
	snprintf(text, sizeof(text),
		 "502 upstream response in a transfer coding an HTTP/1.0 client cannot read "
		 "(%u attempt%s)",
		 ex->attempts, ex->attempts == 1 ? "" : "s");
	exchange_respond_error(ex, 502, text);
}

/* Why a try failed whose interim heads ran past max_header_bytes. */
static const char exchange_interim_over_text[] =
	"interim (1xx) responses over max_header_bytes, no final one";

void exchange_read_response_head(struct exchange_try *t)
{
	struct exchange *ex = t->ex;
	struct evbuffer *in = conn_input(t->up);
	struct http1_head *head = &exchange_response_head;
	size_t max_head = ex->config->limits.max_header_bytes;

	for (;;) {
		enum http1_error error = HTTP1_ERR_NONE;
		size_t len = evbuffer_get_length(in);
		size_t want = len < max_head + 1 ? len : max_head + 1;
		/* the head is looked for in the input's first block, where it
		 * nearly always is whole; only one that runs past it costs a
		 * copy of the window (with a body behind, up to max_head) */
		size_t seen = evbuffer_get_contiguous_space(in);
		enum http1_parse r;

		if (len == 0)
			return;
		t->byte_seen = true;
		if (seen > want)
			seen = want;
		r = http1_parse_response_head((const char *)evbuffer_pullup(in, (ev_ssize_t)seen),
					      seen, max_head, head, &error);
		if (r == HTTP1_PARSE_MORE && seen < want)
			r = http1_parse_response_head(
				(const char *)evbuffer_pullup(in, (ev_ssize_t)want), want, max_head,
				head, &error);
		switch (r) {
		case HTTP1_PARSE_MORE:
			return;
		case HTTP1_PARSE_ERROR:
			exchange_try_failed(t, TRY_MALFORMED, http1_error_text(error));
			return;
		case HTTP1_PARSE_DONE:
			break;
		}
		if (head->status < 200) {
			if (head->status == 101) {
				exchange_switch_protocols(t, head);
				return;
			}
			/* a try's interim heads together are bounded as one head
			 * is: an upstream that sends them for ever (a 103 or 100
			 * in a loop) gives an invalid response, not a try that
			 * runs to try_timeout relaying them */
			t->interim_bytes += head->head_len;
			if (t->interim_bytes > max_head) {
				exchange_try_failed(t, TRY_MALFORMED, exchange_interim_over_text);
				return;
			}
			/* RFC 9110 section 15.2: a proxy forwards 1xx (103 Early
			 * Hints, 102 Processing), each try's, to an HTTP/1.1
			 * client only. A 100 too: the answer to an Expect the
			 * proxy passed on with a streamed body, or one it did not
			 * ask for (after the proxy's own 100 for a kept body: any
			 * number of 1xx may come). Not to a client whose
			 * response is under way (a resume's try); not past the
			 * output mark: a hint is advisory, and an upstream's
			 * stream of them must not pile up for a client that does
			 * not read */
			if (ex->client_minor >= 1 && ex->state == EXCHANGE_TRYING &&
			    !(ex->resumable && ex->resume->pending) &&
			    conn_output_length(ex->owner.conn) <= EXCHANGE_OUTPUT_HIGH) {
				exchange_send_interim(ex, head);
				ex->continue_relayed = ex->continue_relayed || head->status == 100;
			}
			evbuffer_drain(in, head->head_len);
			continue;
		}
		/* a 408 first thing on a pooled connection is the upstream
		 * closing it for idling as the request came (RFC 9110 15.5.9):
		 * the request was not read, so the connection was stale */
		if (head->status == 408 && t->reused && t->interim_bytes == 0 &&
		    exchange_may_replace_stale(ex)) {
			if (head->version_minor == 0)
				ex->upstream_http10 = true;
			exchange_try_failed(t, TRY_STALE,
					    "pooled connection timed out by the upstream (408)");
			return;
		}
		if (http1_response_framing(head, ex->head_request, &t->framing, &error) < 0) {
			exchange_try_failed(t, TRY_MALFORMED, http1_error_text(error));
			return;
		}
		t->answered_http10 = head->version_minor == 0;
		/* remembered past this connection for a chunked body's first
		 * try on a new one (exchange_start_try()) */
		if (ex->upstream != NULL &&
		    (t->answered_http10 || ex->request_body.mode == BODY_MODE_CHUNKED))
			upstream_note_http10(ex->upstream, t->answered_http10);
		/* an HTTP/1.0 client gets a chunked body decoded, without
		 * Transfer-Encoding; a coding before chunked (gzip) the proxy
		 * cannot undo, and its bytes would be taken for the content */
		if (t->framing.coded_before_chunked && ex->client_minor == 0) {
			exchange_refuse_coding(t);
			return;
		}
		exchange_on_response_head(t, head);
		return;
	}
}

/* What ended the upstream's connection when TLS did (an alert, such as a
 * TLS 1.3 server's refusal of the handshake that comes only after the
 * request went; a record that does not decrypt): "TLS error <where>:
 * <OpenSSL's words>" in buf, else NULL (a reset or close at the socket). */
static const char *exchange_tls_failure(const struct exchange_try *t, const char *where, char *buf,
					size_t len)
{
	char detail[256];

	if (t->up == NULL || !tls_error_text(conn_tls_error(t->up), detail, sizeof(detail)))
		return NULL;
	snprintf(buf, len, "TLS error %s: %s", where, detail);
	return buf;
}

/* A TLS 1.3 server refused the handshake after the proxy's side of it
 * ended: a failed handshake, not a reset after the request may have been
 * taken; as one, it counts toward the upstream's health and forgets the
 * name. */
static void exchange_handshake_refused(struct exchange_try *t, const char *why)
{
	struct exchange *ex = t->ex;

	if (!ex->is_connect && ex->upstream != NULL)
		upstream_handshake_refused(ex->upstream, &ex->config->health);
	if (ex->proxy->dns_cache != NULL)
		dns_cache_forget(ex->proxy->dns_cache, ex->endpoint.host);
	exchange_try_failed(t, TRY_TLS, why);
}

/* The upstream closed (or failed) before the response head was complete.
 * An alert that refuses a handshake is the handshake's failure only where
 * the server could still refuse it: a new TLS 1.3 connection whose server
 * asked for a certificate. After a TLS 1.2 handshake, such an alert ends
 * a renegotiation the server asked for once it had read the request. */
static void exchange_closed_before_head(struct exchange_try *t, bool eof)
{
	char tls[320];
	const char *tls_why =
		eof ? NULL : exchange_tls_failure(t, "before the response head", tls, sizeof(tls));

	if (t->reused && !t->byte_seen)
		exchange_try_failed(t, TRY_STALE, "pooled connection closed by the upstream");
	else if (tls_why != NULL && !t->reused && !t->byte_seen &&
		 tls_client_may_be_refused(conn_ssl(t->up)) &&
		 tls_error_is_handshake_refusal(conn_tls_error(t->up)))
		exchange_handshake_refused(t, tls_why);
	else
		exchange_try_failed(t, TRY_RESET,
				    tls_why != NULL ? tls_why
				    : eof	    ? "connection closed before the response head"
						    : "connection reset before the response head");
}

/* The upstream closed a parked try's connection: the close read with the
 * bytes that parked it (reads are off since). Those bytes are all there
 * will be: an answer they hold whole still waits to be passed on; a cut
 * one is lost with its connection. */
static void exchange_closed_while_parked(struct exchange_try *t, short what)
{
	enum http1_error error = HTTP1_ERR_NONE;

	if (body_relay_move(&t->keeping_body, conn_input(t->up), t->keeping, &error) < 0) {
		exchange_try_failed(t, TRY_MALFORMED, http1_error_text(error));
		return;
	}
	exchange_memory_recount(t->ex);
	if (t->keeping_body.done || ((what & CONN_EOF) && !(what & (CONN_ERROR | CONN_TIMEOUT)) &&
				     t->keeping_body.mode == BODY_MODE_UNTIL_CLOSE)) {
		t->parked_closed = true;
		return;
	}
	exchange_try_failed(t, TRY_RESET, "connection closed in the response body");
}

/* The upstream closed while a retryable response was being kept. */
static void exchange_closed_while_keeping(struct exchange_try *t, short what)
{
	if (t->parked) {
		exchange_closed_while_parked(t, what);
		return;
	}
	/* a body that stalled is a timeout, as for one being relayed (and
	 * named so by retry.on): not a reset */
	if (what & CONN_TIMEOUT) {
		exchange_try_failed(t, TRY_TIMEOUT, "upstream stopped sending the response body");
		return;
	}
	exchange_keep_response(t);
	if (t->state != EXCHANGE_TRY_KEEPING)
		return;
	/* a retryable answer is kept to decide on its status: one whose
	 * close came without a TLS close_notify is taken as it is, like a
	 * plain one (its status, not its body, is what a retry goes by) */
	if ((what & CONN_EOF) && t->keeping_body.mode == BODY_MODE_UNTIL_CLOSE) {
		t->keeping_body.done = true;
		/* ... but if it is what the client gets in the end, its body may
		 * be a cut one, and is broken off as a relayed one would be */
		t->keeping_unclean = !conn_eof_clean(t->up);
		exchange_keep_complete(t, false);
		return;
	}
	exchange_try_failed(t, TRY_RESET, "connection closed in the response body");
}

/* The upstream closed while the response was being relayed. */
static void exchange_closed_while_relaying(struct exchange_try *t, short what)
{
	struct exchange *ex = t->ex;
	bool eof = (what & CONN_EOF) != 0;
	char tls[320];
	const char *tls_why;

	if (ex->kept_feeding) {
		/* what was read before goes first: the end is taken after it
		 * (exchange_feed_kept()), the bytes it may end being all there */
		ex->kept_closed_what = what;
		return;
	}
	if (what & CONN_TIMEOUT) {
		metrics_upstream_error(ex->proxy->metrics, TRY_TIMEOUT);
		if (ex->resumable)
			exchange_resume_broken(t, TRY_TIMEOUT,
					       "upstream stopped sending the response body");
		else
			exchange_break_response(ex, "upstream stopped sending the response body");
		return;
	}
	exchange_relay_response(ex);
	if (ex->state != EXCHANGE_RELAYING)
		return;
	if (eof && ex->response_body.mode == BODY_MODE_UNTIL_CLOSE) {
		if (conn_eof_clean(t->up)) {
			ex->response_body.done = true;
			exchange_response_complete(ex);
			return;
		}
		/* no framing and no close_notify: the end may be a cut */
		metrics_upstream_error(ex->proxy->metrics, TRY_RESET);
		exchange_break_response(ex, EXCHANGE_UNCLEAN_CLOSE_TEXT);
		return;
	}
	metrics_upstream_error(ex->proxy->metrics, TRY_RESET);
	tls_why = eof ? NULL : exchange_tls_failure(t, "mid-body", tls, sizeof(tls));
	if (tls_why == NULL)
		tls_why = eof ? "upstream closed mid-body" : "upstream reset mid-body";
	if (ex->resumable)
		exchange_resume_broken(t, TRY_RESET, tls_why);
	else
		exchange_break_response(ex, tls_why);
}

void exchange_upstream_closed(struct exchange_try *t, short what)
{
	/* the exchange is entered by the caller: reading its state after a
	 * step that may have ended it is safe, it is freed only on leaving */
	if (t->state == EXCHANGE_TRY_WAITING && what == CONN_TIMEOUT) {
		/* the deadline alone: try_timeout on a pooled connection */
		exchange_try_failed(t, TRY_TIMEOUT, EXCHANGE_TRY_TIMEOUT_TEXT);
		return;
	}
	if (t->state == EXCHANGE_TRY_WAITING) {
		/* bytes that came with the close may hold a whole response */
		if (conn_input_length(t->up) > 0)
			exchange_read_response_head(t);
		if (t->state == EXCHANGE_TRY_WAITING) {
			exchange_closed_before_head(t, (what & CONN_EOF) != 0);
			return;
		}
	}
	if (t->state == EXCHANGE_TRY_KEEPING)
		exchange_closed_while_keeping(t, what);
	else if (t->state == EXCHANGE_TRY_RELAYING)
		exchange_closed_while_relaying(t, what);
}
