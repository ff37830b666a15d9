#ifndef RETRYPROXY_TIMER_H
#define RETRYPROXY_TIMER_H

/*
 * Timers for the durations the config sets (try_timeout, hedge.after, a
 * backoff, the retry deadline, drain_timeout, tunnel_idle_timeout), whose
 * callback must never run before the duration has passed.
 *
 * libevent 2.1 fires a timer once its cached, coarse monotonic clock (4 ms
 * steps on many kernels) reaches the time it worked out when the timer was
 * added, from the time it cached when the loop last woke: up to a few ms
 * early. A timer here notes when its duration ends on the precise clock, and
 * one that fires before then is set again for the rest. The check is on the
 * firing path only: starting a timer reads no clock (the caller passes the
 * time it has).
 */

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

struct timer;

/* The monotonic clock in milliseconds, precise (rounded down): the one
 * clock of durations, retry budgets and deadlines, which timer_start()
 * takes its now from. */
uint64_t timer_now_ms(void);

/* How far behind the precise clock a reading of the coarse one
 * (timeval_now_coarse_ms()) may be: a time noted on it may be this much
 * before the moment it was read. Twice the coarse clock's step (a tick may
 * come late: 4.2 ms behind on a 4 ms tick has been seen), and the
 * millisecond the reading drops. */
uint64_t timer_coarse_slack_ms(void);

/* A timer that calls cb(-1, EV_TIMEOUT, arg) once its duration has passed. */
struct timer *timer_new(struct event_base *base, event_callback_fn cb, void *arg);

/* Stop it and free it; NULL is nothing. */
void timer_free(struct timer *t);

/* Another callback, for a timer that serves several waits in turn; it is
 * stopped first. */
void timer_set_cb(struct timer *t, event_callback_fn cb, void *arg);

/* Call back once ms have passed since now_ms, a timer_now_ms() reading the
 * caller took just now (or at the moment the duration counts from); a
 * pending one starts again. */
void timer_start(struct timer *t, uint64_t now_ms, uint64_t ms);

/* Call back after about ms, unchecked (no clock is read, and libevent may
 * fire it a few ms early): for a look that ends nothing by itself. */
void timer_start_look(struct timer *t, uint64_t ms);

void timer_stop(struct timer *t);
bool timer_pending(const struct timer *t);

#endif
