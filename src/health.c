#include "health.h"

#include <limits.h>
#include <string.h>

void health_init(struct health *h)
{
	memset(h, 0, sizeof(*h));
	h->state = HEALTH_UP;
}

/* a + b, saturating instead of wrapping to a time in the past. */
static uint64_t health_add_ms(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Start a probe now, or arm the timer for when the next one is due. Only
 * while down with no probe in flight. */
static void health_schedule_probe(struct health *h, const struct health_policy *policy,
				  uint64_t now_ms, struct health_actions *act)
{
	if (h->next_probe_ms > now_ms) {
		act->arm_timer = true;
		act->timer_ms = h->next_probe_ms;
		return;
	}
	act->start_probe = true;
	h->probing = true;
	h->next_probe_ms = health_add_ms(now_ms, policy->probe_interval_ms);
}

/* DOWN -> UP. */
static void health_go_up(struct health *h, struct health_actions *act)
{
	h->state = HEALTH_UP;
	h->failures = 0;
	act->went_up = true;
	act->cancel_timer = true;
	act->release = true;
}

/* UP -> DOWN. A probe left over from an earlier down spell still counts as
 * the one in flight: its result comes next, and no timer is needed. */
static void health_go_down(struct health *h, const struct health_policy *policy, uint64_t now_ms,
			   struct health_actions *act)
{
	h->state = HEALTH_DOWN;
	act->went_down = true;
	if (h->probing)
		return;
	/* the connect that just failed was this interval's attempt */
	h->next_probe_ms = health_add_ms(now_ms, policy->probe_interval_ms);
	health_schedule_probe(h, policy, now_ms, act);
}

struct health_actions health_step(struct health *h, const struct health_policy *policy,
				  enum health_event event, uint64_t now_ms)
{
	struct health_actions act;

	memset(&act, 0, sizeof(act));
	/* health turned off by a reload: nothing may stay held for it */
	if (policy->down_after == 0 && h->state == HEALTH_DOWN)
		health_go_up(h, &act);
	switch (event) {
	case HEALTH_CONNECT_FAILED:
		if (h->failures < UINT_MAX)
			h->failures++;
		/* a request that was already connecting when it went down may
		 * fail too: counted, but it is down already */
		if (h->state == HEALTH_UP && policy->down_after > 0 &&
		    h->failures >= policy->down_after)
			health_go_down(h, policy, now_ms, &act);
		break;
	case HEALTH_CONNECTED:
		/* a request that was already connecting when it went down may
		 * still get through: that is as good as a probe */
		h->failures = 0;
		if (h->state == HEALTH_DOWN)
			health_go_up(h, &act);
		break;
	case HEALTH_RESPONSE_HEAD:
		/* not up, though: while down, a response can only come on a
		 * connection made before (one made since marked it up), and an
		 * origin that stopped listening may still finish those */
		h->failures = 0;
		break;
	case HEALTH_PROBE_DUE:
		if (h->state == HEALTH_DOWN && !h->probing)
			health_schedule_probe(h, policy, now_ms, &act);
		break;
	case HEALTH_PROBE_CONNECTED:
		h->probing = false;
		if (h->state == HEALTH_DOWN)
			health_go_up(h, &act);
		break;
	case HEALTH_PROBE_FAILED:
	/* no verdict: the upstream stays as it was, and the next probe comes
	 * when due, as after a failed one (a shortage seldom passes at once) */
	case HEALTH_PROBE_ABANDONED:
		h->probing = false;
		if (h->state == HEALTH_DOWN)
			health_schedule_probe(h, policy, now_ms, &act);
		break;
	case HEALTH_POLICY_CHANGED:
		/* a probe set for the old interval may be far off: an operator
		 * who shortened it during an outage expects it now */
		if (h->state == HEALTH_DOWN && !h->probing &&
		    h->next_probe_ms > health_add_ms(now_ms, policy->probe_interval_ms)) {
			h->next_probe_ms = health_add_ms(now_ms, policy->probe_interval_ms);
			act.arm_timer = true;
			act.timer_ms = h->next_probe_ms;
		}
		break;
	}
	return act;
}

bool health_may_connect(const struct health *h)
{
	return h->state == HEALTH_UP;
}

bool health_hold(const struct health *h, const struct health_policy *policy)
{
	return h->state == HEALTH_DOWN && policy->hold;
}

const char *health_state_name(enum health_state state)
{
	switch (state) {
	case HEALTH_UP:
		return "up";
	case HEALTH_DOWN:
		return "down";
	}
	return "unknown";
}
