#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "conn.h"
#include "exchange_private.h"
#include "log.h"
#include "metrics.h"
#include "proxy.h"
#include "resume.h"

/*
 * Range resume on the exchange (retry.resume): a GET whose 200 offered it
 * (resume.c) and whose body broke off after K bytes reached the client is
 * tried again, under the usual verdict (attempts, deadline, budget), with
 * Range: bytes=K- and If-Range. Only a 206 that continues the same body
 * exactly is spliced on, its head unseen by the client; anything else ends
 * the client's connection with the body short, as a break without resume
 * does. Nothing of the body is kept: K is what was queued to the client.
 */

void exchange_resume_offer(struct exchange_try *t, const struct http1_head *head)
{
	struct exchange *ex = t->ex;

	/* the cheap facts first: most responses stop here. A request body
	 * that was not kept (over replay_buffer, or the spool failed) went
	 * once and cannot go with a resume: as retry_decide() says of any
	 * retry, body_too_large. Under observe the offer is read too, so that
	 * a break enforce would resume counts as would_retry; a body there
	 * streams, and counts as kept when enforce would have kept it */
	if (ex->resumable || t->framing.body != HTTP1_BODY_LENGTH ||
	    t->framing.content_length == 0 || !ex->idempotent ||
	    ex->route->retry.max_attempts < 2 || ex->method_len != 3 ||
	    memcmp(ex->method, "GET", 3) != 0 ||
	    (ex->request_body_started && !(ex->observe && ex->observe_replayable)) ||
	    ex->body_too_large)
		return;
	/* a body that arrived whole with its head cannot break off: most small
	 * responses stop here, before their fields are read */
	if (evbuffer_get_length(conn_input(t->up)) - head->head_len >= t->framing.content_length)
		return;
	/* whether the request had a Range of its own is asked only if the body
	 * breaks: the head stays in request_head */
	ex->resumable = resume_read_offer(&ex->resume, head, t->framing.content_length);
}

void exchange_resume_give_up(struct exchange *ex, const char *why)
{
	struct resume *resume = ex->resume;

	metrics_resume(ex->route->series, false);
	resume->pending = false;
	/* kept with the resume: why may be the caller's own buffer */
	snprintf(resume->note, sizeof(resume->note), "not resumed at %llu: %s",
		 (unsigned long long)resume->at, why);
	exchange_break_response(ex, resume->note);
}

void exchange_resume_broken(struct exchange_try *t, enum try_outcome outcome, const char *why)
{
	struct exchange *ex = t->ex;
	struct resume *resume = ex->resume;
	uint64_t at = resume->length - ex->response_body.remaining;
	struct retry_verdict verdict;

	/* a Range of the client's own was answered as the client asked; a
	 * second one of ours would contradict it */
	if (resume_request_has_range(ex->request_head, ex->request_head_len)) {
		exchange_break_response(ex, why);
		return;
	}
	if (ex->try_count > 0)
		ex->tries[ex->try_count - 1].broken = try_outcome_name(outcome);
	exchange_end_try(t, false);
	if (ex->observe) {
		/* decided as enforce would, a resume counted and logged as
		 * would_retry (or gave_up); none is made, none fails, and the
		 * body ends short as without resume */
		exchange_set_state(ex, EXCHANGE_TRYING);
		exchange_decide(ex, outcome, 0, false, 0, false);
		exchange_break_response(ex, why);
		return;
	}
	/* the response waits for its rest: no try relays it now, and the
	 * verdict is that of a try whose answer the client has not seen */
	exchange_set_state(ex, EXCHANGE_TRYING);
	resume_prepare(resume, at);
	resume->pending = true;
	/* a response kept from before the 200 can never follow it */
	if (ex->kept != NULL) {
		evbuffer_free(ex->kept);
		ex->kept = NULL;
		exchange_memory_recount(ex);
	}
	verdict = exchange_decide(ex, outcome, 0, false, 0, false);
	log_debug("%.*s %.*s: body broke off at %llu of %llu bytes: %s", (int)ex->method_len,
		  ex->method, (int)ex->target_len, ex->target, (unsigned long long)at,
		  (unsigned long long)resume->length, why);
	switch (verdict.kind) {
	case RETRY_VERDICT_RETRY:
		exchange_schedule_retry(ex);
		return;
	case RETRY_VERDICT_HOLD:
		/* the upstream is down: wait for it like any other try, not on a
		 * pooled connection to it (exchange_start_try() would take one) */
		exchange_hold_retry(ex, verdict.cause);
		return;
	case RETRY_VERDICT_FINAL:
		/* retry.on does not name this break: no resume was ever due, and
		 * none is counted or logged as failed; the body ends short as
		 * without resume */
		resume->pending = false;
		exchange_break_response(ex, why);
		return;
	case RETRY_VERDICT_GIVE_UP:
		break;
	}
	exchange_resume_give_up(ex, why);
}

void exchange_resume_answer(struct exchange_try *t, const struct http1_head *head)
{
	struct exchange *ex = t->ex;
	struct resume *resume = ex->resume;
	enum resume_answer answer = resume_check_answer(resume, head, &t->framing);
	enum retry_should should;
	struct retry_verdict verdict = { .kind = RETRY_VERDICT_FINAL };
	char note[160];

	if (answer == RESUME_ANSWER_SPLICE) {
		log_debug("%.*s %.*s: resumed at %llu", (int)ex->method_len, ex->method,
			  (int)ex->target_len, ex->target, (unsigned long long)resume->at);
		metrics_resume(ex->route->series, true);
		resume->pending = false;
		ex->winner = t;
		evbuffer_drain(conn_input(t->up), head->head_len);
		exchange_try_set_state(t, EXCHANGE_TRY_RELAYING);
		exchange_set_state(ex, EXCHANGE_RELAYING);
		exchange_relay_response(ex);
		return;
	}
	/* a retryable answer is retried as it would be before any byte went
	 * out, x-should-retry included; its body is not kept, the client can
	 * never get it */
	if (exchange_response_retryable(ex, head, &should)) {
		verdict = exchange_decide_response(ex, head->status, exchange_retry_after(head),
						   false, should);
		if (verdict.kind == RETRY_VERDICT_RETRY) {
			exchange_end_try(t, false);
			exchange_schedule_retry(ex);
			return;
		}
		/* marked down since the resume went out (a response does not
		 * mark it up): wait for it, as the break's resume would have */
		if (verdict.kind == RETRY_VERDICT_HOLD) {
			exchange_end_try(t, false);
			exchange_hold_retry(ex, verdict.cause);
			return;
		}
	}
	exchange_end_try(t, false);
	/* not a changed download: a retryable answer with no retry left, or
	 * one the upstream said not to retry */
	if (verdict.kind == RETRY_VERDICT_GIVE_UP)
		snprintf(note, sizeof(note), "resume answered %d, not retried (gave up: %s)",
			 head->status, retry_give_up_name(verdict.reason));
	else if (should == RETRY_SHOULD_FALSE)
		snprintf(note, sizeof(note),
			 "resume answered %d, not retried (x-should-retry: false)", head->status);
	else
		snprintf(note, sizeof(note), "%s (status %d)", resume_answer_text(answer),
			 head->status);
	exchange_resume_give_up(ex, note);
}
