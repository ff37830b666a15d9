/* Preloaded into the proxy by test_fleet_send_failure.py: while the file
 * named by RETRYPROXY_REDISFAIL_FILE exists, hiredis refuses the sync
 * commands (EVALSHA, EVAL) as it does when out of memory or when the
 * connection is going away, without sending anything. */
#include <dlfcn.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include <hiredis/async.h>

typedef int command_argv_fn(redisAsyncContext *, redisCallbackFn *, void *, int, const char **,
			    const size_t *);

int redisAsyncCommandArgv(redisAsyncContext *ac, redisCallbackFn *fn, void *privdata, int argc,
			  const char **argv, const size_t *argvlen)
{
	static command_argv_fn *real;
	const char *file = getenv("RETRYPROXY_REDISFAIL_FILE");

	if (real == NULL)
		real = (command_argv_fn *)dlsym(RTLD_NEXT, "redisAsyncCommandArgv");
	if (file != NULL && argc > 0 &&
	    (strcasecmp(argv[0], "EVALSHA") == 0 || strcasecmp(argv[0], "EVAL") == 0) &&
	    access(file, F_OK) == 0)
		return REDIS_ERR;
	return real(ac, fn, privdata, argc, argv, argvlen);
}
