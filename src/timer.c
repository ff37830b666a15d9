#include "timer.h"

#include <stdlib.h>
#include <time.h>

#include "timeval.h"
#include "xmalloc.h"

struct timer {
	struct event *ev;
	struct event_base *base;
	event_callback_fn cb;
	void *arg;
	uint64_t until_ms; /* the callback runs once timer_now_ms() reaches it */
};

uint64_t timer_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t timer_coarse_slack_ms(void)
{
	static uint64_t slack;

	if (slack == 0) {
		struct timespec res;
		uint64_t step_ms = 4; /* a 250 Hz kernel's, if the kernel cannot say */

		if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0)
			step_ms = ((uint64_t)res.tv_sec * 1000000000 + (uint64_t)res.tv_nsec +
				   999999) /
				  1000000;
		slack = 2 * step_ms + 1;
	}
	return slack;
}

/* Set ev to fire once the precise clock reaches until_ms. */
static void timer_event_until(struct event_base *base, struct event *ev, uint64_t until_ms)
{
	/* libevent counts tv from the coarse time it cached when the loop
	 * woke, which may be well before now: brought up to the coarse clock
	 * read first, it fires once that clock, never ahead of the precise
	 * one, reaches until_ms */
	uint64_t coarse = timeval_now_coarse_ms();
	uint64_t now = timer_now_ms();
	struct timeval tv;

	if (now >= until_ms) {
		tv = timeval_from_ms(0);
	} else {
		event_base_update_cache_time(base);
		tv = timeval_from_ms(until_ms > coarse ? until_ms - coarse : 1);
	}
	evtimer_add(ev, &tv);
}

/* libevent's callback: the timer's own once its time has come, else the
 * timer is set again for the rest. */
static void timer_fired(evutil_socket_t fd, short what, void *arg)
{
	struct timer *t = arg;

	if (timer_now_ms() < t->until_ms) {
		timer_event_until(t->base, t->ev, t->until_ms);
		return;
	}
	t->cb(fd, what, t->arg);
}

struct timer *timer_new(struct event_base *base, event_callback_fn cb, void *arg)
{
	struct timer *t = xcalloc(1, sizeof(*t));

	t->base = base;
	t->cb = cb;
	t->arg = arg;
	t->ev = evtimer_new(base, timer_fired, t);
	return t;
}

void timer_free(struct timer *t)
{
	if (t == NULL)
		return;
	event_free(t->ev);
	free(t);
}

void timer_set_cb(struct timer *t, event_callback_fn cb, void *arg)
{
	evtimer_del(t->ev);
	t->cb = cb;
	t->arg = arg;
}

void timer_start(struct timer *t, uint64_t now_ms, uint64_t ms)
{
	struct timeval tv = timeval_from_ms(ms);

	/* now_ms is rounded down: the duration may have begun as late as a
	 * millisecond after it. A wait of 0 is over whenever it fires: held to
	 * the next millisecond it would wait for the coarse clock's next step
	 * (a retry with no backoff would take up to 5 ms). */
	t->until_ms = ms == 0 ? 0 : now_ms + ms + 1;
	evtimer_add(t->ev, &tv);
}

void timer_start_look(struct timer *t, uint64_t ms)
{
	struct timeval tv = timeval_from_ms(ms);

	t->until_ms = 0;
	evtimer_add(t->ev, &tv);
}

void timer_stop(struct timer *t)
{
	evtimer_del(t->ev);
}

bool timer_pending(const struct timer *t)
{
	return evtimer_pending(t->ev, NULL);
}
