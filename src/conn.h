#ifndef RETRYPROXY_CONN_H
#define RETRYPROXY_CONN_H

/*
 * One non-blocking socket, plain or TLS, with an input and an output
 * evbuffer: the proxy's own buffered connection, built on libevent's event
 * and evbuffer layers rather than on bufferevents so that a request costs as
 * few syscalls as possible:
 * - read interest stays registered while reading is on, so passing a
 *   connection between a client, an exchange and the pool costs no
 *   epoll_ctl;
 * - a read takes what the kernel has in one recv into a buffer sized from
 *   the connection's recent reads (no FIONREAD, no 4 KiB cap);
 * - output queued while one event is handled is written when that handling
 *   ends (output queued by timers and other callbacks, when the loop pass
 *   ends), in one send per connection (small outputs are made one piece
 *   first); write interest is registered only when the kernel's buffer is
 *   full;
 * - timeouts are checked lazily by one timer per connection that is re-armed
 *   when it fires, not on every read or write;
 * - a connection holds its input and output buffers only while they hold
 *   bytes: idle keep-alive connections cost little memory.
 *
 * Callbacks never run inside a conn_* call, only from the event loop (a read,
 * a connect, a timeout) or from conn_loop_pass_end() (writes and their
 * outcome), so a caller never sees its own state change under it.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <openssl/ssl.h>

struct conn;
struct conn_loop;
struct event_base;
struct evbuffer;

/* What an event callback reports; READING or WRITING says which side. */
#define CONN_EOF 0x01	    /* the peer closed its side */
#define CONN_ERROR 0x02	    /* the socket or TLS failed; conn_error() says why */
#define CONN_TIMEOUT 0x04   /* a read or write timeout, or with neither flag the deadline */
#define CONN_CONNECTED 0x08 /* an outgoing connection (and its TLS handshake) is ready */
#define CONN_READING 0x10
#define CONN_WRITING 0x20
#define CONN_HANDSHAKE 0x40 /* the error ended the TLS handshake (a reset included) */

typedef void (*conn_data_cb)(struct conn *conn, void *arg);
typedef void (*conn_event_cb)(struct conn *conn, short what, void *arg);

/* Which way a connection was made: conn_new (accepted) or conn_connect. */
enum conn_side {
	CONN_ACCEPTED, /* a client's connection (a tunnel's client side too) */
	CONN_OUTGOING, /* to an upstream, pooled or not (a tunnel's upstream side too) */
};

/* An event loop whose passes end with every connection's queued output
 * written. Its event base uses epoll's changelist, so interest changes made
 * and undone within a pass cost no syscall. */
struct conn_loop *conn_loop_new(void);
void conn_loop_free(struct conn_loop *loop);
struct event_base *conn_loop_base(struct conn_loop *loop);

/* Connections of a side open now: the loop is the one place that counts
 * them. */
unsigned conn_loop_open(const struct conn_loop *loop, enum conn_side side);

/* Call closed(arg) whenever an accepted connection is gone for good, at the
 * end of the handling in which it closed. */
void conn_loop_on_accepted_closed(struct conn_loop *loop, void (*closed)(void *), void *arg);

/* Call shortage(arg) when the process is out of file descriptors (a
 * connect's socket, or an accept, failed with EMFILE or ENFILE); it gives
 * some back if it can and says whether it did. conn_loop_fd_shortage() is
 * that call for a failure seen elsewhere (an accept, a look at this host's
 * addresses), its errno err: true when err is EMFILE or ENFILE and
 * descriptors came back (loop may be NULL: no one to ask). */
void conn_loop_on_fd_shortage(struct conn_loop *loop, bool (*shortage)(void *), void *arg);
bool conn_loop_fd_shortage(struct conn_loop *loop, int err);

/* A non-blocking stream socket of family for a connect; out of
 * descriptors, the loop's owner is asked to give some back (idle pooled
 * connections) and the socket is tried once more. loop NULL: no one to
 * ask. -1 with errno on failure. */
int conn_loop_socket(struct conn_loop *loop, int family);

/* Did the connect of the socket fd meet itself? When the kernel picks the
 * destination's own port as the source port of a connect to an address of
 * this host where nothing listens, TCP's simultaneous open connects the
 * socket to itself: what is sent comes back as the answer (a request read
 * as its own response, a CONNECT tunnelled to itself, a probe that finds a
 * down upstream back, a Redis command read as its reply). Nothing listens
 * there: a refusal, as any other such connect gets. */
bool conn_self_connected(int fd);

/* Did a socket() or connect() fail (errno err) for want of the proxy's own
 * descriptors, memory or local ports (EADDRNOTAVAIL: no ephemeral port
 * left, or no source address of the family here), before anything was
 * sent? Then it is no verdict on the peer. */
bool conn_error_is_local_shortage(int err);

/* Run until event_base_loopexit(): each pass runs the ready callbacks, then
 * writes queued output, then calls pass_end (NULL: none). */
void conn_loop_run(struct conn_loop *loop, void (*pass_end)(void *), void *arg);

/* Write what connections queued and handle what follows from it (callbacks
 * included). Runs after each event a conn handles, and after every pass. */
void conn_loop_pass_end(struct conn_loop *loop);

/* Take over a connected socket (accepted, or connected by someone else).
 * Reading is off until conn_read_enable(). */
struct conn *conn_new(struct conn_loop *loop, int fd);

/* Start a non-blocking connection to addr; with ssl the TLS client handshake
 * follows. The event callback reports CONN_CONNECTED or CONN_ERROR (with
 * CONN_HANDSHAKE for TLS failures). NULL when the socket cannot even be made
 * or the connect fails at once; errno says why. ssl is the conn's either way
 * (freed with it, or at once on failure). */
struct conn *conn_connect(struct conn_loop *loop, const struct sockaddr *addr, socklen_t len,
			  SSL *ssl);

/* An outgoing connection whose TCP connect has not ended yet (with TLS: the
 * handshake has not begun). */
bool conn_connect_pending(const struct conn *c);

/* Make an open plain connection the server side of TLS with ssl (the conn
 * takes it): what is queued goes out in plaintext first (the answer to a
 * CONNECT), and bytes already read (a ClientHello sent right behind it) go to
 * OpenSSL before the socket's. The event callback reports CONN_CONNECTED when
 * the handshake is done, or CONN_ERROR | CONN_HANDSHAKE. Returns -1 (ssl
 * freed) when the queued plaintext cannot be written at once. */
int conn_start_tls_server(struct conn *conn, SSL *ssl);

/* Close the socket and free everything; safe inside the conn's own callbacks. */
void conn_free(struct conn *conn);

/* Call closed(arg) once the socket is closed for good, wherever the conn is
 * then (an exchange, the pool): the upstreams count their open connections
 * by it. Called from conn_free() or the end of a callback, never later. */
void conn_on_closed(struct conn *conn, void (*closed)(void *arg), void *arg);

/* Tell the conn_on_closed() callback now, and not again: the connection,
 * still open, no longer counts where it did. */
void conn_on_closed_now(struct conn *conn);

/* Close with a TCP reset instead of a FIN, so that a peer reading a body
 * whose end is its close sees an error, not a complete body. */
void conn_free_reset(struct conn *conn);

void conn_setcb(struct conn *conn, conn_data_cb read_cb, conn_data_cb write_cb,
		conn_event_cb event_cb, void *arg);

/* The bytes read and not yet taken. Looking at it lets a connection that
 * stopped reading at its input limit read again once the pass ends. */
struct evbuffer *conn_input(struct conn *conn);

/* The bytes to send: whatever is added is written when this pass ends. */
struct evbuffer *conn_output(struct conn *conn);

size_t conn_input_length(const struct conn *conn);
size_t conn_output_length(const struct conn *conn);

/* Handle the conn's readiness before every other conn's in a loop pass
 * (first), or with theirs. An idle pooled connection goes first: bytes or
 * a close that reach it in the same pass as a request that would reuse it
 * are handled before that request can take it. False when its readiness
 * already waits to be handled in this pass (libevent cannot move it then):
 * something came on it. No syscall. */
bool conn_handle_first(struct conn *conn, bool first);

/* True when OpenSSL holds bytes it has not handed out: part of a TLS record
 * that has not arrived whole, or decrypted data nobody read. On an idle
 * connection, the start of something nobody asked for (a read gives
 * nothing until a partial record's rest comes). False for plain ones. */
bool conn_tls_partial_record(const struct conn *conn);

/* Bytes of the output written so far, over the connection's life: handed to
 * the kernel (for TLS, taken by a successful SSL_write, which writes them to
 * the socket). A peer may have read them; bytes still queued it cannot. */
uint64_t conn_bytes_written(const struct conn *conn);

/* A mark in the output stream: the bytes written once what is queued now
 * has gone. conn_bytes_written_since() then counts what was written past
 * it, 0 while (or if, the connection ending first) the queued bytes have
 * not all gone: what came after them, a tunnel's bytes behind its 200. */
uint64_t conn_bytes_mark(const struct conn *conn);
uint64_t conn_bytes_written_since(const struct conn *conn, uint64_t mark);

/* Bytes of the output the peer has not acknowledged yet: those still
 * queued here and those the kernel holds for it (SIOCOUTQ, for TLS whole
 * records). 0 means the peer has everything, or reset the connection and
 * can take nothing more: a reset now loses nothing sent before. */
size_t conn_output_unacked(const struct conn *conn);

/* Watching, a look every look_ms, whether a peer is owed nothing more
 * before its connection is reset: start with least_unacked SIZE_MAX and
 * still_ms 0. */
struct conn_ack_watch {
	size_t least_unacked;	 /* the least output seen unacknowledged */
	uint64_t still_since_ms; /* the look since which the peer took none of it */
};

/* One look, at now_ms (timer_now_ms()): true when the peer has acknowledged
 * everything, or took none of it for still_max_ms; false to look again.
 * The stillness is timed on the clock, not counted in looks: a look may
 * come early or late (timer.h). */
bool conn_ack_watch_done(struct conn_ack_watch *watch, const struct conn *conn, uint64_t now_ms,
			 uint64_t still_max_ms);

/* Is the input at its limit, so that the conn reads nothing more? */
bool conn_input_at_limit(const struct conn *conn);

/* At its input limit a conn reads nothing, and sees no close behind the
 * bytes it has not read. When the peer has closed (its FIN or reset is
 * in: TCP_INFO says so), report CONN_EOF at the end of this pass, before
 * those bytes, and return true; true as well for a close already found in
 * this pass, still to be reported. */
bool conn_notice_hangup(struct conn *conn);

/* Bytes the peer has acknowledged, over the connection's life: those handed
 * to the socket (for TLS, the records OpenSSL wrote) less those the kernel
 * still holds for it; -1 when the kernel cannot say. It grows while a peer
 * reads, however slowly, even when nothing is written here. */
int64_t conn_bytes_acked(const struct conn *conn);

/* Reading on or off (backpressure). Turning it on does not call the read
 * callback for bytes already in the input; conn_read_again() does. */
void conn_read_enable(struct conn *conn, bool on);

/* Call the read callback from the loop for what the input already holds
 * (a pipelined request), without waiting for new bytes. */
void conn_read_again(struct conn *conn);

/* Stop reading while the input holds this much or more (0: no limit);
 * reading resumes once it is taken below that. */
void conn_set_input_limit(struct conn *conn, size_t bytes);

/* Call the write callback after each write that leaves at most this much
 * queued (0: only when everything is written). */
void conn_set_output_low(struct conn *conn, size_t bytes);

/* Idle timeouts in milliseconds, 0 for none: no byte read for read_ms while
 * reading is on, or none of the output taken by the peer for write_ms while
 * output waits (no more of it acknowledged by the peer's kernel). */
void conn_set_timeouts(struct conn *conn, uint64_t read_ms, uint64_t write_ms);

/* A deadline ms from now (0: none), reported as CONN_TIMEOUT alone,
 * whatever the traffic. */
void conn_set_deadline(struct conn *conn, uint64_t ms);

/* When the deadline falls (timeval_now_coarse_ms), 0 for none. */
uint64_t conn_deadline_at(const struct conn *conn);

/* Send FIN once the output is written (at once when it is empty); on TLS a
 * close_notify goes first. Reading goes on. */
void conn_shutdown_write(struct conn *conn);

/* As conn_shutdown_write, but on TLS the FIN comes without a close_notify,
 * so that the peer sees a cut, not an end: for a stream whose own source
 * was cut (a TLS peer that closed without one). */
void conn_shutdown_write_cut(struct conn *conn);

/* Whether the peer's end of the input (CONN_EOF) has been read. */
bool conn_input_ended(const struct conn *conn);

/* Whether a conn_shutdown_write() still waits: for the output to be written,
 * or for the socket to take a TLS close_notify. The write callback is told
 * when it has gone. */
bool conn_output_ending(const struct conn *conn);

/* After CONN_EOF: false when a TLS peer closed without a close_notify (an
 * upstream's; a client's close is taken as an EOF like any other), which
 * does not say that a body ending with the connection is whole. */
bool conn_eof_clean(const struct conn *conn);

/* The errno of the last CONN_ERROR (0 for TLS protocol errors). */
int conn_error(const struct conn *conn);

/* The TLS connection, or NULL for plain ones. */
SSL *conn_ssl(struct conn *conn);

/* The first OpenSSL error code of the last TLS failure, or 0. */
unsigned long conn_tls_error(const struct conn *conn);

#endif
