#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "conn.h"
#include "exchange_private.h"
#include "log.h"
#include "proxy.h"
#include "spool.h"

/*
 * The spooled request body (limits.spool_max): a body over replay_buffer
 * that may be sent again is written to an unlinked file while it arrives,
 * and each try reads it back in pieces as its upstream connection drains,
 * so memory holds a few pieces whatever the body's size. When the file
 * cannot take the body (disk full, a file size limit, over spool_max), the
 * request goes once instead: the file's part, what was not written, then
 * the client's rest, streamed.
 */

/* Read back this much at a time; the upstream's output is refilled up to
 * EXCHANGE_OUTPUT_HIGH each time it drains to EXCHANGE_OUTPUT_LOW. */
#define EXCHANGE_SPOOL_PIECE (64 * 1024)

bool exchange_spool_start(struct exchange *ex, uint64_t length)
{
	const struct limits *limits = &ex->config->limits;

	/* only a request that may be repeated needs its body kept; one whose
	 * idempotency waits on a JSON field is decided within replay_buffer */
	if (limits->spool_max == 0 || !ex->idempotent)
		return false;
	/* a body of known length that cannot fit in what spool_total leaves
	 * would only be written until the cap stopped it, then go once */
	if (!spool_usage_allows(&ex->proxy->spool_usage, limits->spool_total, length)) {
		log_warn("%.*s %.*s: request body of %llu bytes would take the spool files past "
			 "spool_total: sent once, not retried",
			 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			 (unsigned long long)length);
		return false;
	}
	ex->spool = spool_open(limits->spool_dir);
	/* out of descriptors: idle pooled connections go for it, as for an
	 * upstream socket, rather than the body losing its retries */
	if (ex->spool == NULL && conn_loop_fd_shortage(ex->proxy->loop, errno))
		ex->spool = spool_open(limits->spool_dir);
	if (ex->spool == NULL) {
		log_warn("%.*s %.*s: cannot make a spool file in %s: %s: body sent once, not "
			 "retried",
			 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			 limits->spool_dir, strerror(errno));
		return false;
	}
	/* a body of known length counts whole from its head on, as in
	 * retry_memory: one announced after it finds the room it takes gone,
	 * rather than both being written until together they pass the cap */
	if (length > 0) {
		spool_count_in(ex->spool, &ex->proxy->spool_usage);
		spool_claim(ex->spool, length);
	}
	/* and takes its disk up front: one the disk cannot hold goes once at
	 * once, rather than filling the disk for nothing first */
	if (length > 0 && spool_reserve(ex->spool, length) < 0) {
		log_warn("%.*s %.*s: cannot take %llu bytes for the request body in %s: %s: sent "
			 "once, not retried",
			 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
			 (unsigned long long)length, limits->spool_dir, strerror(errno));
		spool_close(ex->spool);
		ex->spool = NULL;
		return false;
	}
	if (ex->replay == NULL)
		ex->replay = evbuffer_new();
	log_debug("%.*s %.*s: request body spooled to a file in %s", (int)ex->method_len,
		  ex->method, (int)ex->target_len, ex->target, limits->spool_dir);
	return true;
}

/* From here on the body goes once: the file's part and the rest. */
static void exchange_spool_give_up(struct exchange *ex, const char *why)
{
	ex->body_too_large = true;
	ex->body_once = true;
	/* the file takes no more: what it was to take comes free now */
	spool_claim(ex->spool, 0);
	log_warn("%.*s %.*s: request body not spooled after %llu bytes: %s: sent once, not "
		 "retried",
		 (int)ex->method_len, ex->method, (int)ex->target_len, ex->target,
		 (unsigned long long)spool_length(ex->spool), why);
}

int exchange_spool_body(struct exchange *ex)
{
	uint64_t spool_max = ex->config->limits.spool_max;
	struct spool_usage *usage = &ex->proxy->spool_usage;

	if (ex->body_once)
		return -1;
	/* a chunked body can turn out larger than it was allowed to be kept;
	 * the file holds its framing too, and a chunk line may be up to 4 KiB
	 * for a byte of data, so the file is what spool_max bounds */
	if (ex->request_body.payload_bytes > spool_max ||
	    spool_length(ex->spool) + evbuffer_get_length(ex->replay) > spool_max) {
		exchange_spool_give_up(ex, "the body is over spool_max");
		return -1;
	}
	/* every file counts toward spool_total from its first byte (or its
	 * head, for a body of known length) to its close; a body that would
	 * pass it is one the disk could not take */
	spool_count_in(ex->spool, usage);
	if (!spool_usage_allows(usage, ex->config->limits.spool_total,
				spool_growth(ex->spool, evbuffer_get_length(ex->replay)))) {
		exchange_spool_give_up(ex, "the spool files together would pass spool_total");
		return -1;
	}
	if (spool_write(ex->spool, ex->replay) < 0) {
		exchange_spool_give_up(ex, strerror(errno));
		return -1;
	}
	return 0;
}

/* The file could not be read back: nothing whole can reach the upstream. */
static void exchange_spool_unreadable(struct exchange *ex, int error)
{
	char text[256];

	log_error("%.*s %.*s: cannot read the spooled request body back: %s", (int)ex->method_len,
		  ex->method, (int)ex->target_len, ex->target, strerror(error));
	if (ex->state == EXCHANGE_RELAYING) {
		exchange_break_response(ex, "request body spool unreadable");
		return;
	}
	snprintf(text, sizeof(text), "500 request body spool unreadable: %s", strerror(error));
	exchange_respond_error(ex, 500, text);
}

void exchange_spool_feed(struct exchange_try *t)
{
	struct exchange *ex = t->ex;
	struct evbuffer *out = conn_output(t->up);
	uint64_t length = spool_length(ex->spool);

	while (ex->spool_sent < length && evbuffer_get_length(out) < EXCHANGE_OUTPUT_HIGH) {
		ssize_t n = spool_read(ex->spool, out, ex->spool_sent, EXCHANGE_SPOOL_PIECE);

		if (n < 0) {
			exchange_spool_unreadable(ex, errno);
			return;
		}
		ex->spool_sent += (uint64_t)n;
	}
	if (ex->spool_sent < length)
		return; /* more when the upstream has taken some */
	ex->spool_queued = true;
	/* a body going once never needs its file again, nor what the file
	 * could not take: the disk, its share of spool_total and the memory
	 * come free now, not when the client's rest has come */
	if (ex->body_once) {
		evbuffer_add_buffer(out, ex->replay);
		exchange_memory_recount(ex);
		spool_close_in_steps(ex->spool, ex->proxy->spool_reaper);
		ex->spool = NULL;
	} else {
		/* by reference, as a replay buffer: empty unless a write failed */
		evbuffer_add_buffer_reference(out, ex->replay);
	}
	exchange_pump_request_body(ex);
}
