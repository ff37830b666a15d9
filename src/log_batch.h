#ifndef RETRYPROXY_LOG_BATCH_H
#define RETRYPROXY_LOG_BATCH_H

#include <event2/event.h>

/* When the event loop writes the log lines it buffered (log.h): at once when
 * the log has been quiet, and at most once a millisecond while it is busy. */
struct log_batch;

/* NULL when out of memory; the loop then writes at the end of every pass. */
struct log_batch *log_batch_new(struct event_base *base);
void log_batch_free(struct log_batch *batch);

/* Called at the end of each loop pass, after connections wrote their
 * output: writes the lines logged during it now or schedules them. */
void log_batch_pass_end(struct log_batch *batch);

#endif
