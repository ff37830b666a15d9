#ifndef RETRYPROXY_NOTIFY_H
#define RETRYPROXY_NOTIFY_H

/*
 * The service manager's readiness protocol (systemd's sd_notify, spoken
 * natively so there is no libsystemd dependency): one datagram of
 * newline-separated VARIABLE=value lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET, a path or an abstract name written with a leading '@'.
 * Without the variable every call does nothing. A failure is logged as a
 * warning and nothing more: a proxy must not stop serving, or block, because
 * its supervisor is not listening.
 */

/* READY=1: start-up or a reload is over; status is a line for humans. */
void notify_ready(const char *status);

/* RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload wants it, before
 * a reload starts. */
void notify_reloading(void);

/* STOPPING=1: draining has started. */
void notify_stopping(void);

#endif
