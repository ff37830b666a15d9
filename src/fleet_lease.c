#include "fleet_lease.h"

#include <math.h>

/* The buckets mirror retry_budget.c: 20 to a window and one more kept, so
 * the counted span covers at least a whole window (the strict side).
 * Tokens handed back go to the bucket that granted them, so they leave the
 * count when the grant would have: a bucket of the future would keep a
 * negative count after the grant's bucket left the window. Fields
 * older than that, or of a later bucket than now, are deleted as they are
 * met, and the key expires a little after a window with no sync, so
 * nothing accumulates in Redis. */
const char fleet_lease_script[] =
	/* Redis 3.2 and 4.0 refuse writes after TIME unless the script's
	 * effects, not the script, are replicated; from 5 on that is how
	 * scripts always replicate and the call is a no-op (a later Redis may
	 * drop it) */
	"if redis.replicate_commands then redis.replicate_commands() end\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local requests = tonumber(ARGV[1])\n"
	"local want = tonumber(ARGV[2])\n"
	"local ratio = tonumber(ARGV[3])\n"
	"local floor = tonumber(ARGV[4])\n"
	"local window = tonumber(ARGV[5])\n"
	"local back = tonumber(ARGV[6])\n"
	/* rounded up, as retry_budget.c does: 20 buckets span the window */
	"local bucket = math.max(1, math.ceil(window / 20))\n"
	"local epoch = math.floor(now / bucket)\n"
	"if back > 0 then\n"
	"  local granted = 'r' .. tonumber(ARGV[7])\n"
	"  back = math.min(back, tonumber(redis.call('HGET', KEYS[1], granted) or 0))\n"
	"  if back > 0 then\n"
	"    redis.call('HINCRBY', KEYS[1], granted, -back)\n"
	"  end\n"
	"end\n"
	"if requests > 0 then\n"
	"  redis.call('HINCRBY', KEYS[1], 'q' .. epoch, requests)\n"
	"end\n"
	/* retries made with tokens an earlier sync had handed back: counted
	 * now, so that they are not missing from the window (a proxy running
	 * an older script sends no ARGV[8]) */
	"local owed = tonumber(ARGV[8] or 0)\n"
	"if owed > 0 then\n"
	"  redis.call('HINCRBY', KEYS[1], 'r' .. epoch, owed)\n"
	"end\n"
	"local fields = redis.call('HGETALL', KEYS[1])\n"
	"local q, r = 0, 0\n"
	"for i = 1, #fields, 2 do\n"
	"  local e = tonumber(string.sub(fields[i], 2))\n"
	/* a bucket later than now is no proxy's of this version: Redis's
	 * clock stepped back (a failover to a server behind it), or an older
	 * proxy numbered shorter buckets; counted, it would stay until the
	 * clock reached it, and the key with it */
	"  if e == nil or epoch - e > 20 or e > epoch then\n"
	"    redis.call('HDEL', KEYS[1], fields[i])\n"
	"  elseif string.sub(fields[i], 1, 1) == 'q' then\n"
	"    q = q + tonumber(fields[i + 1])\n"
	"  else\n"
	"    r = r + tonumber(fields[i + 1])\n"
	"  end\n"
	"end\n"
	/* the config's decimals are not exact in binary (0.58 x 50 is
	 * 28.999999999999996): a relative slack of 1e-12 takes the rounding
	 * back, as retry_budget.c does */
	"local allowed = ratio * q + floor * window / 1000\n"
	"local left = math.floor(allowed + 1e-12 * math.max(1, allowed) - r)\n"
	"local grant = math.max(0, math.min(want, left))\n"
	"if grant > 0 then\n"
	"  redis.call('HINCRBY', KEYS[1], 'r' .. epoch, grant)\n"
	"end\n"
	"redis.call('PEXPIRE', KEYS[1], window + 2 * bucket)\n"
	"return {grant, q, r + grant, epoch}\n";

uint64_t fleet_lease_target(double ratio, uint64_t requests, uint64_t asked)
{
	uint64_t target = (uint64_t)ceil(2.0 * ratio * (double)requests);

	if (asked > UINT64_MAX / 2)
		asked = UINT64_MAX / 2;
	if (target < 2 * asked)
		target = 2 * asked;
	return target < 1 ? 1 : target;
}
