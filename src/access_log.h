#ifndef RETRYPROXY_ACCESS_LOG_H
#define RETRYPROXY_ACCESS_LOG_H

/* One line per request (SPEC "Logs"), text or JSON per the log format. */

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

/* One upstream try: a status, or an error when no response head came. */
struct access_try {
	int status;	     /* 0 when error is set */
	const char *error;   /* "connection refused", "timeout", ...; NULL with a status */
	uint64_t wait_ms;    /* backoff before the next try; 0 for the last */
	bool hedge;	     /* started beside a slow try (retry.hedge) */
	const char *broken;  /* its body broke off after reaching the client, and a
			     * resume was looked at: "reset", "timeout"; else NULL */
	bool resumed;	     /* asked for the rest of a broken body (retry.resume) */
	uint64_t resumed_at; /* ... from this body byte */
};

struct access_record {
	const char *client; /* peer address */
	const char *method; /* "-" when the request line was unreadable */
	size_t method_len;
	const char *target;
	size_t target_len;
	const char *route; /* "-" before routing */
	int status;	   /* what the client got; 0 if nothing */
	unsigned attempts;
	uint64_t bytes;	   /* response body bytes sent to the client; for a tunnel,
			 * the bytes it carried to the client */
	bool tunnel;	   /* a CONNECT tunnel or a switched protocol: bytes_in goes too */
	uint64_t bytes_in; /* a tunnel's bytes from the client to the upstream */
	uint64_t duration_ms;
	const char *note;    /* why the exchange ended unusually, or NULL */
	const char *gave_up; /* why retrying stopped short: attempts, deadline, ... or NULL */
	const struct access_try *tries;
	size_t try_count;
	uint64_t waited_ms;	 /* held or queued before the first try (not in the trail) */
	bool ambiguous;		 /* the client got Retry-Ambiguous: true */
	const char *would_retry; /* retry.mode: observe: the cause of the retry not made, or NULL */
};

void access_log_write(const struct access_record *record);

/* A copy that owns its strings and tries, to be written later (a tunnel's
 * line, when it ends); access_record_free() lets it go. */
struct access_record *access_record_dup(const struct access_record *record);
void access_record_free(struct access_record *record);

#endif
