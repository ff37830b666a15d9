#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "exchange_private.h"
#include "idempotency.h"
#include "max_forwards.h"
#include "idempotency_key.h"
#include "log.h"
#include "proxy.h"
#include "resume.h"
#include "retry_budget.h"
#include "route.h"
#include "timer.h"
#include "xmalloc.h"

/*
 * The request side of an exchange: where the request goes, the head sent
 * upstream, and the body, read whole into the replay buffer when a retry
 * might need it, else streamed once.
 */

/* Does this field line go upstream as it is? hop says whether it is
 * hop-by-hop; *seen_length keeps only the first of identical Content-Lengths.
 * The parser recognised the names that matter (http1_field.known). */
static bool exchange_forward_request_field(const struct http1_field *f, bool hop,
					   bool expect_forwarded, bool *seen_length)
{
	if (f->known == HTTP1_FIELD_TRANSFER_ENCODING)
		return true; /* the body is forwarded in the coding it came in */
	if (hop)
		return false;
	switch (f->known) {
	case HTTP1_FIELD_HOST:
		return false; /* replaced by the upstream's authority */
	case HTTP1_FIELD_EXPECT:
		/* a kept body is the proxy's to ask for: it answers 100-continue
		 * itself and sends the body whole with each try */
		return expect_forwarded;
	case HTTP1_FIELD_CONTENT_LENGTH:
		if (*seen_length)
			return false; /* identical repeats were checked; one is enough */
		*seen_length = true;
		return true;
	default:
		return true;
	}
}

/* Does the client's TE field say it takes a trailer section ("trailers",
 * RFC 9110 section 10.1.4)? */
static bool exchange_te_trailers(const struct http1_field *f)
{
	const char *p = f->value;
	const char *elem;
	size_t elem_len;

	while (http1_list_next(&p, f->value + f->value_len, &elem, &elem_len))
		if (http1_name_equals(elem, elem_len, "trailers"))
			return true;
	return false;
}

/* Does an Expect field go upstream? */
static bool exchange_expect_sent(const struct http1_head *head, const bool *forward)
{
	for (size_t i = 0; i < head->field_count; i++)
		if (forward[i] && head->fields[i].known == HTTP1_FIELD_EXPECT)
			return true;
	return false;
}

/* Does an Upgrade field list h2c? */
static bool exchange_upgrade_lists_h2c(const struct http1_field *f)
{
	const char *p = f->value;
	const char *elem;
	size_t elem_len;

	while (http1_list_next(&p, f->value + f->value_len, &elem, &elem_len))
		if (http1_upgrade_is_h2c(elem, elem_len))
			return true;
	return false;
}

/* The Upgrade line that goes upstream for a field listing h2c: its other
 * protocols, or no line when none is left (the proxy speaks no HTTP/2, so
 * an upstream must not be asked to switch to it). Written to out unless
 * NULL; returns the line's length. */
static size_t exchange_upgrade_without_h2c(const struct http1_field *f, char *out)
{
	static const char name[] = "Upgrade: ";
	const char *p = f->value;
	const char *elem;
	size_t elem_len;
	size_t len = 0;

	while (http1_list_next(&p, f->value + f->value_len, &elem, &elem_len)) {
		const char *sep = len == 0 ? name : ", ";
		size_t sep_len = len == 0 ? sizeof(name) - 1 : 2;

		if (elem_len == 0 || http1_upgrade_is_h2c(elem, elem_len))
			continue;
		if (out != NULL) {
			memcpy(out + len, sep, sep_len);
			memcpy(out + len + sep_len, elem, elem_len);
		}
		len += sep_len + elem_len;
	}
	if (len == 0)
		return 0;
	if (out != NULL)
		memcpy(out + len, "\r\n", 2);
	return len + 2;
}

/* The request head as it goes upstream: origin-form target, Host of the
 * upstream, the client's fields minus hop-by-hop ones, and Via. */
static void exchange_build_request_head(struct exchange *ex, const struct http1_head *head,
					const struct http1_framing *framing, const char *path,
					size_t path_len, const char *authority,
					size_t authority_len)
{
	static const char version_host[] = " HTTP/1.1\r\nHost: ";
	static const char via[] = "\r\nVia: 1.1 retryproxy\r\n\r\n";
	static const char key_name[] = IDEMPOTENCY_KEY_HEADER ": ";
	static const char max_forwards_name[] = "Max-Forwards: ";
	static const char connection_upgrade[] = "Connection: upgrade\r\n";
	static const char te_trailers[] = "TE: trailers\r\nConnection: TE\r\n";
	bool hop[HTTP1_MAX_FIELDS];
	/* TE is hop-by-hop, but a client that takes trailers gets the ones the
	 * upstream sends (an HTTP/1.1 client: chunked passes as it came), so
	 * the proxy asks for them on its own hop */
	bool trailers = false;
	bool forward[HTTP1_MAX_FIELDS];
	bool seen_length = false;
	size_t max_forwards_at = 0;
	/* a TRACE or OPTIONS goes on with Max-Forwards one less (at 0 the
	 * client answered it), after the other fields */
	long max_forwards = max_forwards_of(head, &max_forwards_at);
	char max_forwards_text[24];
	int max_forwards_len = 0;
	/* an empty path goes as "/", or for OPTIONS with no query as "*"
	 * (RFC 9112 section 3.2.4): the server itself, not its root */
	bool star =
		path_len == 0 && head->method_len == 7 && memcmp(head->method, "OPTIONS", 7) == 0;
	bool slash = path_len == 0 || path[0] == '?';
	size_t size = head->method_len + 1 + slash + path_len + sizeof(version_host) - 1 +
		      authority_len + sizeof(via) - 1;
	size_t key_line = sizeof(key_name) - 1 + IDEMPOTENCY_KEY_LEN + 2;
	char *p;
	size_t i;

	http1_hop_by_hop_marks(head, hop);
	for (i = 0; i < head->field_count; i++) {
		forward[i] = exchange_forward_request_field(&head->fields[i], hop[i],
							    ex->expect_forwarded, &seen_length);
		if (forward[i])
			size += head->fields[i].line_len;
		else if (head->fields[i].known == HTTP1_FIELD_TE && head->version_minor == 1 &&
			 !trailers)
			trailers = exchange_te_trailers(&head->fields[i]);
	}
	if (trailers)
		size += sizeof(te_trailers) - 1;
	/* an Expect the client named in Connection stays here: then the
	 * proxy's own 100 is the only one the client can get */
	if (ex->expect_forwarded)
		ex->expect_forwarded = exchange_expect_sent(head, forward);
	/* a Content-Length list goes on shorter, as one number */
	if (framing->length_repeated)
		for (i = 0; i < head->field_count; i++)
			if (forward[i])
				size -= head->fields[i].line_len -
					exchange_field_size(&head->fields[i]);
	if (ex->key_injected)
		size += key_line;
	if (ex->upgrade) {
		/* the proxy takes part in the switch: its own hop asks for it,
		 * byte-exact but for h2c; a field listing h2c is left out of
		 * forward and written anew after the others, and so is every
		 * Upgrade field after it, which keeps the fields' order (the
		 * protocols' order of preference: RFC 9110 sections 5.3, 7.8) */
		bool moved = false;

		for (i = 0; i < head->field_count; i++) {
			const struct http1_field *f = &head->fields[i];

			if (f->known != HTTP1_FIELD_UPGRADE || forward[i])
				continue;
			if (exchange_upgrade_lists_h2c(f)) {
				moved = true;
				size += exchange_upgrade_without_h2c(f, NULL);
			} else {
				forward[i] = !moved;
				size += f->line_len;
			}
		}
		size += sizeof(connection_upgrade) - 1;
	}
	if (max_forwards > 0 && !forward[max_forwards_at])
		max_forwards = -1; /* named in Connection: dropped, as the client asked */
	if (max_forwards > 0) {
		forward[max_forwards_at] = false;
		size -= head->fields[max_forwards_at].line_len;
		max_forwards_len = snprintf(max_forwards_text, sizeof(max_forwards_text), "%ld\r\n",
					    max_forwards - 1);
		size += sizeof(max_forwards_name) - 1 + (size_t)max_forwards_len;
	}
	p = exchange_block(&ex->request_head, &ex->request_head_room, size);
	p = exchange_put(p, head->method, head->method_len);
	*p++ = ' ';
	if (slash)
		*p++ = star ? '*' : '/';
	p = exchange_put(p, path, path_len);
	p = EXCHANGE_PUT_LITERAL(p, version_host);
	p = exchange_put(p, authority, authority_len);
	/* via starts with the Host line's CRLF */
	p = exchange_put(p, via, 2);
	p = exchange_put_fields(p, head, forward, framing->length_repeated);
	if (max_forwards > 0) {
		p = EXCHANGE_PUT_LITERAL(p, max_forwards_name);
		p = exchange_put(p, max_forwards_text, (size_t)max_forwards_len);
	}
	if (ex->upgrade) {
		for (i = 0; i < head->field_count; i++) {
			const struct http1_field *f = &head->fields[i];

			if (f->known != HTTP1_FIELD_UPGRADE || forward[i])
				continue;
			if (exchange_upgrade_lists_h2c(f))
				p += exchange_upgrade_without_h2c(f, p);
			else
				p = exchange_put(p, f->line, f->line_len);
		}
		p = EXCHANGE_PUT_LITERAL(p, connection_upgrade);
	}
	if (trailers)
		p = EXCHANGE_PUT_LITERAL(p, te_trailers);
	if (ex->key_injected) {
		/* made here, once per request: every try sends this head */
		p = EXCHANGE_PUT_LITERAL(p, key_name);
		idempotency_key_new(&ex->proxy->rng, p);
		p += IDEMPOTENCY_KEY_LEN;
		p = EXCHANGE_PUT_LITERAL(p, "\r\n");
	}
	exchange_put(p, via + 2, sizeof(via) - 3);
	/* Via names the version the client's message came in (RFC 9110
	 * section 7.6.3): "Via: 1.0" for HTTP/1.0 */
	p[sizeof("Via: 1.") - 1] = (char)('0' + head->version_minor);
	ex->request_head_len = size;
}

/* A request not safe by its method, but perhaps by a precondition or a key:
 * give it an Idempotency-Key when retry.idempotency_key: inject says so and
 * it has none, and note whether one goes upstream (a 409 may then be
 * ambiguous). Runs before the request head is built, which carries the key.
 * A key the client named in Connection is removed on the way: it does not
 * count, and inject gives the request one of its own. An empty one of the
 * client's is no key, but it is passed on as sent, and a second beside it
 * would make the pair mean nothing. Observe mode retries nothing, so it
 * adds nothing either. */
static void exchange_decide_key(struct exchange *ex, const struct http1_head *head)
{
	enum idempotency_field key = idempotency_forwarded_field(head, IDEMPOTENCY_KEY_HEADER);

	ex->keyed = key == IDEMPOTENCY_FIELD_VALUE;
	if (key != IDEMPOTENCY_FIELD_ABSENT ||
	    ex->route->retry.idempotency_key != IDEMPOTENCY_KEY_INJECT || ex->observe)
		return;
	ex->key_injected = true;
	ex->keyed = true;
}

/* A chunked body's size shows only as it arrives: one no retry needs is
 * still read whole before the first try when max_body_bytes fits in the
 * replay buffer, so that one over it gets its 413 before any try and
 * nothing of it reaches the upstream (SPEC). It still goes once, as if
 * streamed: no pooled connection, no spool, no second send. A larger limit
 * is found out only as the body streams (README, "Limits"). */
static void exchange_keep_for_limit(struct exchange *ex, const struct http1_framing *framing)
{
	const struct limits *limits = &ex->config->limits;

	if (framing->body == HTTP1_BODY_CHUNKED && limits->max_body_bytes > 0 &&
	    limits->max_body_bytes <= limits->replay_buffer && ex->replay == NULL) {
		ex->replay = evbuffer_new();
		ex->body_once = true;
	}
}

/* Decide whether the request could be tried again, and so whether its body
 * must be kept to be re-sent. */
static void exchange_decide_replay(struct exchange *ex, const struct http1_head *head,
				   const struct http1_framing *framing, const char *path,
				   size_t path_len)
{
	const struct retry_policy *policy = &ex->route->retry;
	const char *query = memchr(path, '?', path_len);
	size_t query_len = 0;
	bool has_body = framing->body != HTTP1_BODY_NONE;
	size_t limit = ex->config->limits.replay_buffer;
	struct idempotency_why why;

	if (query != NULL) {
		query++;
		query_len = path_len - (size_t)(query - path);
	}
	switch (idempotency_decide_head(&ex->route->idempotent, policy->idempotency_key,
					head->method, head->method_len, query, query_len, head,
					has_body, &why)) {
	case IDEMPOTENCY_YES:
		ex->idempotent = true;
		ex->conditional = why.reason != IDEMPOTENCY_REASON_METHOD;
		break;
	case IDEMPOTENCY_NEEDS_BODY:
		ex->json_pending = true;
		break;
	case IDEMPOTENCY_NO:
		break;
	}
	ex->observe = policy->mode == RETRY_MODE_OBSERVE;
	if (ex->conditional || ex->json_pending)
		exchange_decide_key(ex, head);
	/* observe injects no key: a request safe only by one goes without it,
	 * and must not be sent twice even as connection upkeep */
	ex->observe_unkeyed = ex->observe && why.reason == IDEMPOTENCY_REASON_KEY && !ex->keyed;
	/* observe keeps no body, and a json_field condition needs it whole */
	if (ex->observe)
		ex->json_pending = false;
	/* Only a request that may be sent again after its body left needs the
	 * body kept: a connect failure happens before any body byte is taken
	 * from the client, so other requests stream. */
	if (!has_body || ex->route->retry.max_attempts < 2 ||
	    !(ex->idempotent || ex->json_pending)) {
		exchange_keep_for_limit(ex, framing);
		return;
	}
	if (framing->body == HTTP1_BODY_LENGTH && framing->content_length > limit) {
		/* too large for memory, not for the spool: kept on disk; observe
		 * keeps nothing, and counts what the spool would have kept */
		if (framing->content_length <= ex->config->limits.spool_max &&
		    (ex->observe ? ex->idempotent
				 : exchange_spool_start(ex, framing->content_length))) {
			ex->observe_replayable = ex->observe;
			return;
		}
		ex->body_too_large = true;
		log_info("%.*s %.*s: body of %llu bytes is over replay_buffer (%zu): sent once, "
			 "not retried",
			 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			 (unsigned long long)framing->content_length, limit);
		return;
	}
	if (ex->observe) {
		/* streamed like a body no retry could need; counted as kept */
		ex->observe_replayable = true;
		exchange_keep_for_limit(ex, framing);
		return;
	}
	if (framing->body == HTTP1_BODY_LENGTH &&
	    !exchange_memory_room(ex, framing->content_length)) {
		/* the memory for kept bodies is taken by other requests: the
		 * spool, when on, keeps it on disk; else it goes once */
		if (exchange_spool_start(ex, framing->content_length))
			return;
		ex->body_too_large = true;
		log_info(
			"%.*s %.*s: body of %llu bytes would take what retries keep in memory past "
			"retry_memory (%llu): sent once, not retried",
			(int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			(unsigned long long)framing->content_length,
			(unsigned long long)ex->config->limits.retry_memory);
		return;
	}
	ex->replay = evbuffer_new();
	if (framing->body == HTTP1_BODY_LENGTH) {
		/* counted whole at once, so that bodies arriving side by side
		 * cannot together pass retry_memory */
		ex->replay_claim = framing->content_length;
		exchange_memory_recount(ex);
	}
}

/* Is the kept body a JSON object with a member a json_field condition names? */
static bool exchange_json_makes_idempotent(struct exchange *ex)
{
	struct evbuffer *decoded = ex->replay;
	bool yes;

	/* the replay buffer keeps the chunked framing to re-send it as is;
	 * the JSON is in the chunk data */
	if (ex->request_body.mode == BODY_MODE_CHUNKED &&
	    (decoded = exchange_replay_decoded(ex)) == NULL)
		return false;
	yes = idempotency_check_json_body(&ex->route->idempotent,
					  (const char *)evbuffer_pullup(decoded, -1),
					  evbuffer_get_length(decoded));
	if (decoded != ex->replay)
		evbuffer_free(decoded);
	return yes;
}

/* The body is over max_body_bytes? Answer 413 if nothing was answered yet. */
static bool exchange_body_over_limit(struct exchange *ex)
{
	uint64_t max_body = ex->config->limits.max_body_bytes;

	if (max_body == 0 || ex->request_body.payload_bytes <= max_body)
		return false;
	if (ex->state == EXCHANGE_RELAYING)
		exchange_break_response(ex, "request body over max_body_bytes");
	else
		exchange_respond_error(ex, 413, "request body is over max_body_bytes");
	return true;
}

/* With max_body_bytes at most replay_buffer a chunked body is read whole
 * before the first try, so that one over the limit gets its 413 before any
 * of it leaves (README, "Limits"). Its chunk framing may take it past
 * replay_buffer while its data is still within the limit: it is still read
 * whole then, the data bounded by the limit, the framing by replay_buffer
 * (long chunk extensions), and sent once. */
static bool exchange_read_whole_for_limit(const struct exchange *ex)
{
	const struct limits *limits = &ex->config->limits;
	uint64_t framing = evbuffer_get_length(ex->replay) - ex->request_body.payload_bytes;

	return limits->max_body_bytes > 0 && limits->max_body_bytes <= limits->replay_buffer &&
	       framing <= limits->replay_buffer;
}

void exchange_read_request_body(struct exchange *ex)
{
	struct evbuffer *in = conn_input(ex->owner.conn);
	enum http1_error error = HTTP1_ERR_NONE;
	bool over_memory;
	bool over;

	if (body_relay_move(&ex->request_body, in, ex->replay, &error) < 0) {
		exchange_respond_error(ex, 400, http1_error_text(error));
		return;
	}
	exchange_memory_recount(ex);
	if (exchange_body_over_limit(ex))
		return;
	/* a chunked body's bytes count as they come (one of known length was
	 * counted whole): past retry_memory, it is not kept in memory */
	over_memory = ex->replay_claim == 0 && !exchange_memory_room(ex, 0);
	over = evbuffer_get_length(ex->replay) > ex->config->limits.replay_buffer || over_memory;
	if (ex->spool != NULL || (over && !ex->body_once && exchange_spool_start(ex, 0))) {
		/* on disk as it arrives; a body the file cannot take goes at once */
		int written = exchange_spool_body(ex);

		exchange_memory_recount(ex);
		if (written == 0 && !ex->request_body.done)
			return;
	} else if (over) {
		/* a chunked body turned out larger than replay_buffer (perhaps
		 * only in its last read), or than the room left in retry_memory:
		 * what is kept goes first, any rest streams, and it is sent once */
		if (!ex->body_too_large)
			log_info(
				"%.*s %.*s: chunked body is over %s (%llu): sent once, not retried",
				(int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
				over_memory ? "the room left in retry_memory" : "replay_buffer",
				over_memory ? (unsigned long long)ex->config->limits.retry_memory
					    : (unsigned long long)ex->config->limits.replay_buffer);
		ex->body_too_large = true;
		ex->body_once = true;
		if (!ex->request_body.done && !over_memory && exchange_read_whole_for_limit(ex))
			return;
	} else if (!ex->request_body.done) {
		return; /* more to come */
	} else if (ex->json_pending) {
		ex->idempotent = exchange_json_makes_idempotent(ex);
		ex->conditional = ex->idempotent;
	}
	exchange_start_try(ex);
}

/* retry.mode: observe streams every body, so a chunked body's size shows
 * only as it passes: once it is over what enforce would have kept
 * (replay_buffer, or spool_max when the spool would have taken it), a retry
 * would have been refused as body_too_large. Counted as enforce counts:
 * both limits against the bytes with their chunk framing, which the replay
 * buffer and the spool file keep (exchange_spool_body()). */
static void exchange_observe_streamed(struct exchange *ex, size_t moved)
{
	const struct limits *limits = &ex->config->limits;

	ex->observe_streamed += moved;
	if (ex->observe_streamed <= limits->replay_buffer)
		return;
	if (limits->spool_max > 0 && ex->idempotent && ex->observe_streamed <= limits->spool_max)
		return;
	ex->observe_replayable = false;
	ex->body_too_large = true;
}

void exchange_pump_request_body(struct exchange *ex)
{
	struct conn *cconn = ex->owner.conn;
	struct exchange_try *t = ex->current;
	struct evbuffer *in;
	struct evbuffer *out;
	enum http1_error error = HTTP1_ERR_NONE;
	size_t before = 0;

	if (ex->request_body.done || t == NULL || t->up == NULL || conn_input_length(cconn) == 0)
		return;
	/* the file's part first (a body that went once after its spool
	 * failed), or what memory held of a body going once */
	if (exchange_body_queue_pending(t))
		return;
	in = conn_input(cconn);
	out = conn_output(t->up);
	ex->request_body_started = true;
	if (ex->observe_replayable)
		before = evbuffer_get_length(in);
	if (body_relay_move(&ex->request_body, in, out, &error) < 0) {
		if (ex->state == EXCHANGE_RELAYING)
			exchange_break_response(ex, "malformed chunked request body");
		else
			exchange_respond_error(ex, 400, http1_error_text(error));
		return;
	}
	if (t->body_awaited && t->state == EXCHANGE_TRY_WAITING)
		exchange_request_progress(t);
	if (ex->observe_replayable && ex->request_body.mode == BODY_MODE_CHUNKED)
		exchange_observe_streamed(ex, before - evbuffer_get_length(in));
	if (exchange_body_over_limit(ex))
		return;
	if (!ex->request_body.done && evbuffer_get_length(out) > EXCHANGE_OUTPUT_HIGH) {
		ex->client_read_paused = true;
		conn_read_enable(cconn, false);
	}
}

void exchange_send_request(struct exchange_try *t)
{
	struct exchange *ex = t->ex;
	struct evbuffer *out = conn_output(t->up);

	bool resuming = ex->resumable && ex->resume->pending;
	bool numbered = t->number > 1 && ex->route->retry.attempt_header;

	/* references, not copies: the same bytes go out again on the next try
	 * (the exchange outlives every try's connection and its output) */
	if (resuming || numbered) {
		/* the head without its blank line, then the try's own fields:
		 * Range and If-Range for a resume, Retry-Attempt */
		evbuffer_add_reference(out, ex->request_head, ex->request_head_len - 2, NULL, NULL);
		if (resuming)
			evbuffer_add_reference(out, ex->resume->lines, ex->resume->lines_len - 2,
					       NULL, NULL);
		if (numbered)
			evbuffer_add_printf(out, "Retry-Attempt: %u\r\n", t->number);
		EXCHANGE_ADD_LITERAL(out, "\r\n");
	} else {
		evbuffer_add_reference(out, ex->request_head, ex->request_head_len, NULL, NULL);
	}
	if (ex->spool != NULL) {
		ex->spool_sent = 0;
		ex->spool_queued = false;
		if (ex->body_once)
			ex->request_body_started = true;
		exchange_spool_feed(t);
		return;
	}
	if (ex->replay != NULL && ex->body_once) {
		/* never sent again: what memory held goes as the upstream
		 * takes it, its room in retry_memory coming free as it does */
		exchange_memory_feed(ex, ex->replay, out);
	} else if (ex->replay != NULL) {
		evbuffer_add_buffer_reference(out, ex->replay);
	}
	/* a body over replay_buffer goes once: from here on it cannot be sent
	 * again (before here, a try that never connected may still be redone) */
	if (ex->body_once)
		ex->request_body_started = true;
	exchange_pump_request_body(ex);
}

void exchange_client_readable(struct exchange *ex)
{
	exchange_enter(ex);
	/* While a retryable response is kept, or between tries, the body stays
	 * with the client: the next try may still need all of it. */
	if (ex->state == EXCHANGE_READING_BODY)
		exchange_read_request_body(ex);
	else if (ex->state == EXCHANGE_RELAYING ||
		 (ex->current != NULL && ex->current->state == EXCHANGE_TRY_WAITING))
		exchange_pump_request_body(ex);
	else if (ex->state == EXCHANGE_HELD && conn_input_at_limit(ex->owner.conn))
		exchange_held_input_full(ex);
	else if (ex->state == EXCHANGE_QUEUED && conn_input_at_limit(ex->owner.conn))
		exchange_queue_input_full(ex);
	exchange_leave(ex);
}

/* Point the exchange at its destination, and copy the method, the target and
 * the destination host into its text block with the pool key after them: the
 * head they point into is gone after this request's head is parsed. */
static void exchange_set_destination(struct exchange *ex, const struct http1_head *head,
				     const struct route_destination *dest)
{
	const struct tls_policy *tls = &ex->route->tls;
	const char *ca = dest->tls && tls->ca_file != NULL ? tls->ca_file : "";
	/* the log's target inside an intercepted tunnel: the tunnel's origin
	 * before an origin-form target, alone for "*" (its absolute form,
	 * RFC 9112 section 3.2.4); an absolute-form one names it itself */
	const char *prefix =
		ex->owner.target_prefix != NULL && head->parsed_target.form != HTTP1_TARGET_ABSOLUTE
			? ex->owner.target_prefix
			: "";
	size_t prefix_len = strlen(prefix);
	size_t target_len = prefix_len > 0 && head->parsed_target.form == HTTP1_TARGET_ASTERISK
				    ? 0
				    : head->target_len;
	/* an IPv6 literal may come out of its one spelling longer */
	bool ipv6 = dest->host_len <= UPSTREAM_IPV6_TEXT_MAX &&
		    memchr(dest->host, ':', dest->host_len) != NULL;
	size_t host_room = ipv6 ? UPSTREAM_IPV6_TEXT_MAX : dest->host_len;
	/* "https://" host ":" port "|" ca "|1" (an absolute host's dot is in
	 * host_len) */
	size_t key_room = 8 + host_room + 6 + 1 + strlen(ca) + 2 + 1;
	size_t size = head->method_len + 1 + prefix_len + target_len + 1 + host_room + 1 + key_room;
	char *p = exchange_block(&ex->text, &ex->text_room, size);
	size_t host_len;

	ex->tls = tls;
	ex->endpoint.tls = dest->tls;
	ex->endpoint.port = dest->port;
	ex->method = p;
	ex->method_len = head->method_len;
	p = exchange_put(p, head->method, head->method_len);
	*p++ = '\0';
	/* the target as the log shows it: inside an intercepted tunnel with
	 * the scheme and authority the client asked for */
	ex->target = p;
	ex->target_len = prefix_len + target_len;
	p = exchange_put(p, prefix, prefix_len);
	p = exchange_put(p, head->target, target_len);
	*p++ = '\0';
	ex->endpoint_host = p;
	p = exchange_put(p, dest->host, dest->host_len);
	/* one spelling per upstream: its pool key, its record and its cap; the
	 * trailing dot normalising drops marks the name absolute, for the
	 * resolver (and so another upstream than the name without it) */
	host_len = upstream_host_spelling(ex->endpoint_host, dest->host_len, ipv6,
					  &ex->endpoint.absolute);
	p = ex->endpoint_host + host_len;
	*p++ = '\0';
	ex->endpoint.host = ex->endpoint_host;
	ex->pool_key = p;
	upstream_pool_key(&ex->endpoint, ex->tls, p, key_room);
}

int exchange_check_tunnel(const struct exchange_owner *owner, const struct http1_head *head,
			  const struct http1_framing *framing, char *reason, size_t reason_len)
{
	/* the tunnel runs under the live config since its last request: a
	 * reload may have taken its host away */
	int status = route_check_tunnel_host(owner->config, owner->tunnel_host, reason, reason_len);

	if (status != 0) {
		log_warn("client %s: refused a request in the tunnel to %s: %s", owner->peer,
			 owner->tunnel_host, reason);
		return status;
	}
	return route_check_tunnel(owner->tunnel_host, owner->upstream->port, owner->upstream->tls,
				  head, framing, reason, reason_len);
}

/* The route and where the request goes, or the status to refuse it with. */
static int exchange_route(const struct exchange_owner *owner, const struct http1_head *head,
			  const struct http1_framing *framing, struct route_destination *dest,
			  char *reason, size_t reason_len)
{
	const struct http1_target *target = &head->parsed_target;
	struct http1_target as_origin;
	const char *host = framing->host_name;
	size_t host_len = framing->host_name_len;
	int status;

	if (owner->tunnel_host != NULL) {
		status = exchange_check_tunnel(owner, head, framing, reason, reason_len);
		if (status != 0)
			return status;
		host = owner->tunnel_host;
		host_len = strlen(host);
		/* an absolute-form target named the tunnel's origin: it goes
		 * where its origin-form equivalent goes */
		if (target->form == HTTP1_TARGET_ABSOLUTE) {
			as_origin = *target;
			as_origin.form = HTTP1_TARGET_ORIGIN;
			target = &as_origin;
		}
	}
	status = route_destination(owner->config, owner->upstream, target, host, host_len,
				   head->method, head->method_len, dest, reason, reason_len);
	if (status == 403)
		log_warn("client %s: refused host %.*s: not in access.allow_hosts", owner->peer,
			 (int)(dest->host_len > 200 ? 200 : dest->host_len), dest->host);
	return status;
}

struct exchange *exchange_new(struct proxy *proxy, const struct exchange_owner *owner,
			      const struct http1_head *head, const struct http1_framing *framing,
			      int *status, char *reason, size_t reason_len)
{
	struct config *config = owner->config;
	const struct http1_target *target = &head->parsed_target;
	struct route_destination dest;
	struct exchange *ex;

	*status = exchange_route(owner, head, framing, &dest, reason, reason_len);
	if (*status != 0)
		return NULL;

	ex = exchange_alloc(proxy);
	ex->is_connect = target->form == HTTP1_TARGET_AUTHORITY;
	ex->route = dest.route;
	ex->proxy = proxy;
	ex->owner = *owner;
	ex->config = config_hold(config);
	ex->state = EXCHANGE_TRYING;
	ex->started_ms = timer_now_ms();
	ex->client_minor = head->version_minor;
	/* an HTTP/1.0 keep-alive persists only where its recipient is not a
	 * proxy (RFC 9112 section 9.3): an older proxy in front may have passed
	 * the client's Connection: keep-alive on without knowing it, and would
	 * wait for a close that never comes. An absolute-form request outside
	 * an intercepted tunnel came to this one as a proxy. */
	ex->client_keep_alive = framing->keep_alive && (head->version_minor >= 1 ||
							target->form != HTTP1_TARGET_ABSOLUTE ||
							owner->tunnel_host != NULL);
	ex->head_request = head->method_len == 4 && memcmp(head->method, "HEAD", 4) == 0;
	ex->expect_continue = framing->expect_continue;
	ex->has_body = framing->body != HTTP1_BODY_NONE;
	ex->upgrade = framing->upgrade;
	exchange_set_destination(ex, head, &dest);
	body_relay_init_framing(&ex->request_body, framing, false, config->limits.max_header_bytes);
	if (framing->body == HTTP1_BODY_CHUNKED && framing->connection_options)
		body_relay_trailer_named(&ex->request_body, head);
	/* refused by exchange_run() under its route, as a chunked body found
	 * over the limit is: nothing to decide, build or count for it */
	ex->body_over_limit = framing->body == HTTP1_BODY_LENGTH &&
			      config->limits.max_body_bytes > 0 &&
			      framing->content_length > config->limits.max_body_bytes;
	if (!ex->is_connect && !ex->body_over_limit) {
		/* the decision first: it may give the head an Idempotency-Key */
		exchange_decide_replay(ex, head, framing, target->path, target->path_len);
		/* RFC 9110 section 10.1.1: a proxy forwards the expectation of a
		 * body it streams, so that the upstream, not the proxy, decides
		 * whether the client sends it (a body kept to be re-sent is read
		 * whole before the first try: SPEC; README, "Where the product deviates") */
		ex->expect_forwarded =
			ex->expect_continue && ex->replay == NULL && ex->spool == NULL;
		exchange_build_request_head(ex, head, framing, target->path, target->path_len,
					    dest.authority, dest.authority_len);
		ex->budget = ex->route->budget;
		retry_budget_note_request(ex->budget, timer_now_ms());
	}
	return ex;
}
