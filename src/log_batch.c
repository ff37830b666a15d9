#include "log_batch.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "xmalloc.h"

/* How long lines may wait for others to share their write. A busy loop runs
 * a pass every few microseconds, and a write per pass was about one write(2)
 * per request; batched, a busy proxy writes at most a thousand times a
 * second, and a quiet one still writes each line in the pass that logged it. */
#define LOG_BATCH_US 1000

struct log_batch {
	struct event *timer;	/* writes a batch that waited LOG_BATCH_US */
	uint64_t last_write_us; /* when the last batch went out */
};

static uint64_t log_batch_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void log_batch_write(struct log_batch *batch, uint64_t now_us)
{
	log_flush();
	batch->last_write_us = now_us;
}

static void log_batch_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	log_batch_write(arg, log_batch_now_us());
}

struct log_batch *log_batch_new(struct event_base *base)
{
	struct log_batch *batch = xcalloc(1, sizeof(*batch));

	batch->timer = evtimer_new(base, log_batch_timer_cb, batch);
	if (batch->timer == NULL) {
		free(batch);
		return NULL;
	}
	return batch;
}

void log_batch_free(struct log_batch *batch)
{
	if (batch == NULL)
		return;
	event_free(batch->timer);
	free(batch);
}

void log_batch_pass_end(struct log_batch *batch)
{
	uint64_t now_us, since_us;
	struct timeval wait;

	if (log_pending() == 0)
		return;
	if (batch == NULL) {
		log_flush();
		return;
	}
	/* a batch is open: its timer writes these lines with it */
	if (evtimer_pending(batch->timer, NULL))
		return;
	now_us = log_batch_now_us();
	since_us = now_us - batch->last_write_us;
	if (since_us >= LOG_BATCH_US) {
		log_batch_write(batch, now_us);
		return;
	}
	wait = (struct timeval){ .tv_sec = 0, .tv_usec = (suseconds_t)(LOG_BATCH_US - since_us) };
	if (evtimer_add(batch->timer, &wait) < 0)
		log_batch_write(batch, now_us);
}
