#include "conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>

#include "config_values.h"
#include "timer.h"
#include "timeval.h"
#include "tls.h"
#include "xmalloc.h"

/* Read sizes adapt to each connection's traffic between these bounds; each
 * is a power of two minus room for libevent's chain header, so a read buffer
 * is one allocation of a power of two. */
#define CONN_READ_MIN (1024 - 64)
#define CONN_READ_START (4096 - 64)
/* Not larger: against nginx on loopback, reads of 40 KiB and up made the
 * origin copy each 64 KiB response into colder memory (1.6 us more) and
 * left its core idle 2-5 % of the time waiting on us; reads of 24 or 32 KiB
 * did not. Likely why: the kernel builds a sender's data in 32 KiB pages,
 * and reads of one page at most free them while the sender still writes. */
#define CONN_READ_MAX (32 * 1024 - 64)
#define CONN_SMALL_READS 8 /* small reads in a row before the read size halves */

#define CONN_WRITE_IOVECS 64	      /* buffer pieces per sendmsg */
#define CONN_WRITE_GATHER 2048	      /* outputs up to this size go out as one piece */
#define CONN_TLS_WRITE (16 * 1024)    /* one TLS record's worth per SSL_write */
#define CONN_READ_BUDGET (256 * 1024) /* per readiness event, so one peer cannot hog a pass */

/* Empty buffers kept for reuse: an idle connection holds none of its own. */
#define CONN_SPARE_BUFFERS 1024

struct conn_loop {
	struct event_base *base;
	LIST_HEAD(, conn) pass;		  /* output queued, input to recheck, or a read to replay */
	bool flushing;			  /* inside conn_loop_pass_end */
	unsigned open[2];		  /* by enum conn_side */
	unsigned accepted_closed_pending; /* closes not told to accepted_closed yet */
	void (*accepted_closed)(void *);
	void *accepted_closed_arg;
	uint64_t coarse_slack_ms;    /* timer_coarse_slack_ms(): timeouts are noted on the
				      * coarse clock, and fire once the precise one is this
				      * far past them */
	bool (*fd_shortage)(void *); /* gives descriptors back; true when it did */
	void *fd_shortage_arg;
	unsigned spare_count;
	struct evbuffer *spare[CONN_SPARE_BUFFERS]; /* empty buffers */
	char scratch[CONN_READ_START];		    /* small reads land here first */
};

struct conn {
	struct conn_loop *loop;
	enum conn_side side;
	int fd;
	SSL *ssl;
	struct evbuffer *input;	 /* NULL while empty: taken from the loop's spares */
	struct evbuffer *output; /* likewise */
	struct event *io;	 /* registered for io_events */
	short io_events;	 /* EV_READ and EV_WRITE as registered now */
	short handshake_wants;	 /* EV_READ or EV_WRITE for the TLS handshake */
	unsigned small_reads;	 /* reads in a row that used under 1/8 of read_size */
	struct event *timer;	 /* made on first use: timeouts and the deadline */
	uint64_t timer_at;	 /* when the pending timer fires, 0 when none is */
	conn_data_cb read_cb;
	conn_data_cb write_cb;
	conn_event_cb event_cb;
	void *arg;
	size_t input_limit;
	size_t output_low;
	size_t read_size;     /* the next read's buffer */
	size_t tls_write_len; /* an SSL_write to repeat with this length */
	uint64_t read_timeout_ms;
	uint64_t write_timeout_ms;
	uint64_t deadline_at;
	uint64_t read_active_at;  /* last read, or when reading started */
	uint64_t write_active_at; /* last write, or when writing blocked */
	int64_t acked_seen;	  /* bytes the peer acknowledged, when last looked at */
	uint64_t written;	  /* bytes handed to the kernel (to OpenSSL for TLS), in all */
	unsigned long tls_error;
	int error;
	int pending_error; /* an error (a reset) to report after the data: the kernel says it once */
	uint16_t busy;	   /* callbacks on the stack: freeing waits for them */
	bool acked_noted;  /* acked_seen looked at since writing blocked */
	bool reading;	   /* conn_read_enable(true) */
	bool eof;	   /* the peer closed: nothing more to read */
	bool pending_eof;  /* the close came with data: report it after the data */
	bool eof_unclean;  /* TLS: the peer closed without a close_notify */
	bool connecting;
	bool handshaking;
	bool handshake_kick;	   /* run the handshake at the end of the pass */
	bool early_rbio;	   /* OpenSSL reads bytes read before TLS began first */
	bool write_blocked;	   /* the kernel's buffer is full: waiting to be writable */
	bool tls_write_wants_read; /* an SSL_write waits for the peer's bytes */
	bool tls_read_wants_write; /* an SSL_read waits to write */
	bool read_again;	   /* call the read callback at the end of the pass */
	bool shutdown_pending;	   /* FIN once the output is written */
	bool end_cut;		   /* TLS: that FIN comes without a close_notify */
	bool close_notify_blocked; /* the TLS close_notify waits for the socket */
	bool failed;		   /* an error was reported: no more I/O */
	/* a send was reset (errno in error): nothing more is written, the
	 * peer's last bytes are read, then the reset is told (conn_write_reset) */
	bool write_reset;
	bool freed; /* conn_free during a callback: free when it returns */
	bool reset_on_free;
	bool in_pass;
	bool first; /* its readiness is handled before others' (conn_handle_first) */
	LIST_ENTRY(conn) pass_link;
	void (*on_closed)(void *arg); /* conn_on_closed(): told when the socket is closed */
	void *on_closed_arg;
};

/* Every idle keep-alive client holds one: at 264 bytes it is a 272-byte
 * malloc chunk, past it 288 (bench.py --points idle measures the sum). */
_Static_assert(sizeof(struct conn) <= 264, "struct conn outgrows its malloc size class");

static void conn_io_cb(evutil_socket_t fd, short what, void *arg);

/* The loop's two priorities: readiness of a conn that goes first in a pass
 * (conn_handle_first), and everything else. libevent gives a new event the
 * middle one, CONN_PRIORITY_USUAL. */
enum { CONN_PRIORITY_FIRST, CONN_PRIORITY_USUAL, CONN_PRIORITIES };

struct conn_loop *conn_loop_new(void)
{
	struct event_config *cfg = event_config_new();
	struct conn_loop *loop;
	struct event_base *base;

	/* interest added and removed within one pass then costs no syscall */
	event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (base == NULL)
		return NULL;
	if (event_base_priority_init(base, CONN_PRIORITIES) < 0) {
		event_base_free(base);
		return NULL;
	}
	loop = xcalloc(1, sizeof(*loop));
	loop->base = base;
	loop->coarse_slack_ms = timer_coarse_slack_ms();
	LIST_INIT(&loop->pass);
	return loop;
}

void conn_loop_free(struct conn_loop *loop)
{
	if (loop == NULL)
		return;
	while (loop->spare_count > 0)
		evbuffer_free(loop->spare[--loop->spare_count]);
	event_base_free(loop->base);
	free(loop);
}

struct event_base *conn_loop_base(struct conn_loop *loop)
{
	return loop->base;
}

unsigned conn_loop_open(const struct conn_loop *loop, enum conn_side side)
{
	return loop->open[side];
}

void conn_loop_on_accepted_closed(struct conn_loop *loop, void (*closed)(void *), void *arg)
{
	loop->accepted_closed = closed;
	loop->accepted_closed_arg = arg;
}

void conn_loop_on_fd_shortage(struct conn_loop *loop, bool (*shortage)(void *), void *arg)
{
	loop->fd_shortage = shortage;
	loop->fd_shortage_arg = arg;
}

bool conn_loop_fd_shortage(struct conn_loop *loop, int err)
{
	return (err == EMFILE || err == ENFILE) && loop != NULL && loop->fd_shortage != NULL &&
	       loop->fd_shortage(loop->fd_shortage_arg);
}

bool conn_error_is_local_shortage(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM ||
	       err == EADDRNOTAVAIL;
}

int conn_loop_socket(struct conn_loop *loop, int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0 && conn_loop_fd_shortage(loop, errno))
		fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	return fd;
}

void conn_loop_run(struct conn_loop *loop, void (*pass_end)(void *), void *arg)
{
	for (;;) {
		int r = event_base_loop(loop->base, EVLOOP_ONCE);

		conn_loop_pass_end(loop);
		if (pass_end != NULL)
			pass_end(arg);
		if (r != 0 || event_base_got_exit(loop->base) || event_base_got_break(loop->base))
			break;
	}
}

/* An empty buffer, from the spares when there is one. */
static struct evbuffer *conn_buffer_take(struct conn_loop *loop)
{
	if (loop->spare_count > 0)
		return loop->spare[--loop->spare_count];
	return evbuffer_new();
}

/* Give back *buf when it is empty, so that an idle connection holds no
 * buffer. */
static void conn_buffer_release(struct conn_loop *loop, struct evbuffer **buf)
{
	if (*buf == NULL || evbuffer_get_length(*buf) != 0)
		return;
	if (loop->spare_count < CONN_SPARE_BUFFERS)
		loop->spare[loop->spare_count++] = *buf;
	else
		evbuffer_free(*buf);
	*buf = NULL;
}

/* Bytes held by a buffer that may not exist. */
static size_t conn_length(const struct evbuffer *buf)
{
	return buf != NULL ? evbuffer_get_length(buf) : 0;
}

/* Look at conn when the pass ends. */
static void conn_pass_add(struct conn *c)
{
	if (!c->in_pass) {
		c->in_pass = true;
		LIST_INSERT_HEAD(&c->loop->pass, c, pass_link);
	}
}

/* SSL_get_error needs an empty error queue, and it nearly always is: in
 * OpenSSL 3 clearing it costs about 840 instructions (all 16 of its slots),
 * looking at it about 200, so it is cleared only when something is in it. */
static void conn_tls_empty_error_queue(void)
{
	if (ERR_peek_error() != 0)
		ERR_clear_error();
}

/* A TLS upstream connection closed without conn_shutdown_write() (pooled,
 * or its exchange is over, any at exit) still tells the upstream it ends on
 * purpose: one close_notify if the socket takes it at once, never a wait for
 * room or for the peer's. Not before a reset, whose point is that the peer
 * sees the end as an error; never on a client's connection, which the client
 * module ends cleanly itself (conn_shutdown_write): a client's freed without
 * it was cut off, and a close_notify would make a cut close-delimited body
 * look whole. Nor after a send the upstream reset: nothing reaches it, nor
 * after conn_shutdown_write_cut(). */
static void conn_close_notify_once(struct conn *c)
{
	if (c->side != CONN_OUTGOING || c->reset_on_free || c->failed || c->write_reset ||
	    c->end_cut || c->fd < 0 || !SSL_is_init_finished(c->ssl) ||
	    (SSL_get_shutdown(c->ssl) & SSL_SENT_SHUTDOWN))
		return;
	ERR_clear_error();
	(void)SSL_shutdown(c->ssl);
	ERR_clear_error();
}

/* Really free, once no callback of the conn is on the stack. */
static void conn_destroy(struct conn *c)
{
	struct conn_loop *loop = c->loop;
	bool accepted = c->side == CONN_ACCEPTED;

	if (c->in_pass)
		LIST_REMOVE(c, pass_link);
	event_free(c->io);
	if (c->timer != NULL)
		event_free(c->timer);
	if (c->ssl != NULL) {
		conn_close_notify_once(c);
		SSL_free(c->ssl);
	}
	if (c->fd >= 0) {
		if (c->reset_on_free) {
			struct linger hard = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
		}
		close(c->fd);
	}
	if (c->input != NULL)
		evbuffer_free(c->input);
	if (c->output != NULL)
		evbuffer_free(c->output);
	loop->open[c->side]--;
	if (c->on_closed != NULL)
		c->on_closed(c->on_closed_arg);
	free(c);
	/* told at the end of this event's handling, never inside a conn_* call */
	if (accepted)
		loop->accepted_closed_pending++;
}

/* A callback returned: finish a conn_free that happened inside it. Returns
 * false when the conn is gone. */
static bool conn_release(struct conn *c)
{
	c->busy--;
	if (c->freed) {
		if (c->busy == 0)
			conn_destroy(c);
		return false;
	}
	return true;
}

void conn_free(struct conn *c)
{
	if (c == NULL)
		return;
	if (c->busy > 0) {
		/* a callback of this conn is running: stop all I/O now, free
		 * when it returns */
		c->freed = true;
		event_del(c->io);
		if (c->timer != NULL)
			evtimer_del(c->timer);
		if (c->in_pass) {
			c->in_pass = false;
			LIST_REMOVE(c, pass_link);
		}
		return;
	}
	conn_destroy(c);
}

void conn_on_closed(struct conn *c, void (*closed)(void *arg), void *arg)
{
	c->on_closed = closed;
	c->on_closed_arg = arg;
}

void conn_on_closed_now(struct conn *c)
{
	void (*closed)(void *arg) = c->on_closed;

	c->on_closed = NULL;
	if (closed != NULL)
		closed(c->on_closed_arg);
}

void conn_free_reset(struct conn *c)
{
	c->reset_on_free = true;
	conn_free(c);
}

/* Is the input at its limit? */
static bool conn_input_full(const struct conn *c)
{
	return c->input_limit != 0 && conn_length(c->input) >= c->input_limit;
}

/* The readiness the conn needs from the kernel now. */
static short conn_wanted_events(const struct conn *c)
{
	short events = 0;

	if (c->failed || c->freed)
		return 0;
	if (c->connecting)
		return EV_WRITE;
	if (c->handshaking)
		return c->handshake_wants;
	if ((c->reading && !c->eof && !conn_input_full(c)) || c->tls_write_wants_read)
		events |= EV_READ;
	/* an SSL_read that waits to write is taken up again only once there
	 * is room for what it reads: at the input limit conn_read() returns
	 * before it, and a writable socket would wake the loop at once, again
	 * and again, until the input drains (conn_input() then looks again) */
	if (c->write_blocked || (c->tls_read_wants_write && !conn_input_full(c)))
		events |= EV_WRITE;
	return events;
}

/* The write timeout tells a peer that reads slowly from one that stopped by
 * what its kernel acknowledged, not by writability: the kernel reports a
 * full socket writable only once a third of its buffer drained, which a slow
 * reader may take longer than the timeout to read. A quarter of the timeout
 * after writing blocked, the bytes acknowledged so far are noted (the bytes
 * in flight then have landed by that time); when the timeout falls due,
 * more mean the peer took some, and the clock starts again. An ioctl at
 * those two times, none on a write. The peer's kernel acknowledges what its
 * reader freed only in window updates, so a reader must free about a
 * sixteenth of its receive window per timeout to be seen. */
static uint64_t conn_write_due(const struct conn *c)
{
	return c->write_active_at +
	       (c->acked_noted ? c->write_timeout_ms : c->write_timeout_ms / 4);
}

/* Start the write timeout's clock: a write went out, or writing blocked. */
static void conn_write_clock_start(struct conn *c, uint64_t now)
{
	c->write_active_at = now;
	c->acked_noted = false;
}

/* Bytes of the connection the peer acknowledged, in all: those handed to the
 * socket (for TLS, what OpenSSL wrote to it, parts of records included) less
 * those the kernel still holds for the peer (SIOCOUTQ); -1 when the kernel
 * cannot say. */
static int64_t conn_acked(const struct conn *c)
{
	uint64_t sent = c->ssl != NULL ? BIO_number_written(SSL_get_wbio(c->ssl)) : c->written;
	int unacked;

	if (ioctl(c->fd, SIOCOUTQ, &unacked) != 0 || unacked < 0)
		return -1;
	return (int64_t)(sent - (uint64_t)unacked);
}

/* A look at the kernel when the write timeout's clock says so: true when
 * the peer took none of the output for the whole timeout. */
static bool conn_write_timed_out(struct conn *c, uint64_t now)
{
	int64_t acked = conn_acked(c);
	bool noted = c->acked_noted;
	bool took = noted && acked >= 0 && c->acked_seen >= 0 && acked > c->acked_seen;

	c->acked_seen = acked;
	c->acked_noted = true;
	if (!noted)
		return false; /* only noted: the timeout runs on from the block */
	/* taken or not, the next look is a whole timeout from now */
	c->write_active_at = now;
	return !took;
}

/* When the conn's earliest timeout or deadline falls, 0 for none. */
static uint64_t conn_timer_due(const struct conn *c)
{
	uint64_t due = c->deadline_at;

	if (c->read_timeout_ms != 0 && (c->io_events & EV_READ) && c->reading) {
		uint64_t at = c->read_active_at + c->read_timeout_ms;

		if (due == 0 || at < due)
			due = at;
	}
	if (c->write_timeout_ms != 0 && c->write_blocked) {
		uint64_t at = conn_write_due(c);

		if (due == 0 || at < due)
			due = at;
	}
	return due;
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg);

/* Make sure the timer fires no later than the earliest due time. It is not
 * moved later when activity pushes a timeout out: it fires, finds nothing
 * due, and is set again, so reads and writes never touch the timer heap.
 * The due times are noted on the coarse clock, which may lag the moment
 * they were noted by its slack: the timer is set that much later, so that
 * a timeout never ends before its time (conn_timer_cb). */
static void conn_timer_schedule(struct conn *c)
{
	uint64_t due = conn_timer_due(c);
	uint64_t fire;
	uint64_t now;
	struct timeval tv;

	if (c->freed || c->failed)
		return;
	if (due == 0 || (c->timer_at != 0 && c->timer_at <= due))
		return;
	if (c->timer == NULL)
		c->timer = evtimer_new(c->loop->base, conn_timer_cb, c);
	now = timeval_now_coarse_ms();
	fire = due + c->loop->coarse_slack_ms;
	tv = timeval_from_ms(fire > now ? fire - now : 0);
	evtimer_add(c->timer, &tv);
	c->timer_at = due;
}

/* Register what the conn needs now, if that changed. */
static void conn_update_interest(struct conn *c)
{
	short want = conn_wanted_events(c);

	if (want == c->io_events)
		return;
	if ((want & EV_READ) && !(c->io_events & EV_READ))
		c->read_active_at = c->read_timeout_ms != 0 ? timeval_now_coarse_ms() : 0;
	event_del(c->io);
	if (want != 0) {
		event_assign(c->io, c->loop->base, c->fd, (short)(want | EV_PERSIST), conn_io_cb,
			     c);
		/* assigned anew, it has the usual priority */
		if (c->first)
			event_priority_set(c->io, CONN_PRIORITY_FIRST);
		event_add(c->io, NULL);
	}
	c->io_events = want;
	conn_timer_schedule(c);
}

/* Report an event; false when the callback freed the conn. */
static bool conn_report(struct conn *c, short what)
{
	if (c->event_cb == NULL)
		return true;
	c->busy++;
	c->event_cb(c, what, c->arg);
	return conn_release(c);
}

/* Stop all I/O after an error and report it. */
static void conn_fail(struct conn *c, short what, int error)
{
	c->failed = true;
	c->error = error;
	conn_update_interest(c);
	conn_report(c, (short)(CONN_ERROR | what));
}

/* The output is done: on TLS a close_notify first, so that a peer reading a
 * body that ends with the connection sees a clean end rather than a cut,
 * then FIN. A close_notify the kernel cannot take yet waits for the socket to
 * be writable, and the FIN with it. */
static void conn_end_output(struct conn *c)
{
	if (c->ssl != NULL && !c->failed && !c->end_cut && SSL_is_init_finished(c->ssl) &&
	    (!(SSL_get_shutdown(c->ssl) & SSL_SENT_SHUTDOWN) || c->close_notify_blocked)) {
		int r;

		ERR_clear_error();
		r = SSL_shutdown(c->ssl);
		c->close_notify_blocked = r < 0 && SSL_get_error(c->ssl, r) == SSL_ERROR_WANT_WRITE;
		/* any other failure leaves the plain FIN: nothing more can be
		 * said over TLS */
		ERR_clear_error();
		if (c->close_notify_blocked) {
			bool was_blocked = c->write_blocked;

			c->shutdown_pending = true;
			c->write_blocked = true;
			if (!was_blocked && c->write_timeout_ms != 0)
				conn_write_clock_start(c, timeval_now_coarse_ms());
			conn_update_interest(c);
			return;
		}
	}
	c->shutdown_pending = false;
	shutdown(c->fd, SHUT_WR);
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	uint64_t now = timeval_now_coarse_ms();
	/* libevent may fire the timer a few ms early, and a time noted on the
	 * coarse clock may be up to its slack before the moment it was noted:
	 * one is surely past once the precise clock is that far beyond it */
	uint64_t passed = timer_now_ms() - c->loop->coarse_slack_ms;

	c->timer_at = 0;
	if (c->failed)
		return;
	if (c->deadline_at != 0 && passed >= c->deadline_at) {
		c->deadline_at = 0;
		if (!conn_report(c, CONN_TIMEOUT))
			return;
	} else if (c->read_timeout_ms != 0 && (c->io_events & EV_READ) && c->reading &&
		   passed >= c->read_active_at + c->read_timeout_ms) {
		c->read_active_at = now;
		if (!conn_report(c, CONN_TIMEOUT | CONN_READING))
			return;
	} else if (c->write_timeout_ms != 0 && c->write_blocked && passed >= conn_write_due(c)) {
		if (conn_write_timed_out(c, now) && !conn_report(c, CONN_TIMEOUT | CONN_WRITING))
			return;
	}
	conn_timer_schedule(c);
}

/* Plain read of up to room bytes: > 0 bytes added, 0 nothing yet, -1 EOF,
 * -2 error (errno set). Each recv goes into buffer space of the conn's read
 * size; one that fills it grows the size and reads on, so that once the size
 * has adapted a response takes one call, and a short read says the kernel
 * has nothing more. */
static ssize_t conn_read_plain(struct conn *c, size_t room)
{
	size_t budget = room < CONN_READ_BUDGET ? room : CONN_READ_BUDGET;
	size_t total = 0;

	if (c->input == NULL)
		c->input = conn_buffer_take(c->loop);
	while (total < budget) {
		struct evbuffer_iovec vec;
		size_t want = budget - total < c->read_size ? budget - total : c->read_size;
		/* a small read is copied in from the loop's scratch area: that
		 * costs less than reserving buffer space and committing it */
		bool small = want <= sizeof(c->loop->scratch);
		ssize_t n;

		if (small) {
			vec.iov_base = c->loop->scratch;
			vec.iov_len = want;
		} else {
			evbuffer_reserve_space(c->input, (ev_ssize_t)want, &vec, 1);
			if (vec.iov_len > budget - total)
				vec.iov_len = budget - total;
			want = vec.iov_len;
		}
		do {
			n = recv(c->fd, vec.iov_base, want, 0);
		} while (n < 0 && errno == EINTR);
		if (n <= 0) {
			bool again = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);

			/* after some bytes, the data goes up first and the close or
			 * error after it: a reset is reported only once by the
			 * kernel, so it is kept, never left for the next read */
			if (total > 0) {
				if (n == 0)
					c->pending_eof = true;
				else if (!again)
					c->pending_error = errno;
				break;
			}
			if (n == 0)
				return -1;
			return again ? 0 : -2;
		}
		vec.iov_len = (size_t)n;
		if (small)
			evbuffer_add(c->input, vec.iov_base, vec.iov_len);
		else
			evbuffer_commit_space(c->input, &vec, 1);
		total += (size_t)n;
		if ((size_t)n < want) {
			/* shrink only after several small reads in a row: a head
			 * often arrives alone just before its large body */
			if ((size_t)n >= c->read_size / 8)
				c->small_reads = 0;
			else if (++c->small_reads >= CONN_SMALL_READS &&
				 c->read_size > CONN_READ_MIN) {
				c->read_size = (c->read_size + 64) / 2 - 64;
				c->small_reads = 0;
			}
			break;
		}
		c->small_reads = 0;
		if (c->read_size < CONN_READ_MAX)
			c->read_size = (c->read_size + 64) * 2 - 64;
	}
	return (ssize_t)total;
}

/* A close without close_notify: an EOF still (many servers end so), but
 * one that cannot tell a body that ends with the connection from a cut
 * one (RFC 9112 section 9.8): conn_eof_clean says which it was. */
static ssize_t conn_read_tls_unclean_eof(struct conn *c, size_t total)
{
	c->eof_unclean = true;
	if (total == 0)
		return -1;
	c->pending_eof = true;
	return (ssize_t)total;
}

/* An EOF taken for a close_notify (SSL_OP_IGNORE_UNEXPECTED_EOF) sets the
 * shutdown state to received alone, forgetting that ours was sent: a
 * close_notify still waiting for the socket would then be queued anew
 * behind itself and never written (SSL_shutdown() fails, the FIN goes
 * without it). Only while ours waits, a rare path. */
static void conn_tls_keep_sent_shutdown(struct conn *c)
{
	if (c->close_notify_blocked)
		SSL_set_shutdown(c->ssl, SSL_get_shutdown(c->ssl) | SSL_SENT_SHUTDOWN);
}

/* TLS read of up to room bytes; same results as conn_read_plain. */
static ssize_t conn_read_tls(struct conn *c, size_t room)
{
	size_t total = 0;
	size_t budget = room < CONN_READ_BUDGET ? room : CONN_READ_BUDGET;

	c->tls_read_wants_write = false;
	/* an SSL_write that waits for the peer's records may find them read
	 * here, outside the readable event that retries it first: it is
	 * retried at the end of the pass, not left for another event */
	if (c->tls_write_wants_read)
		conn_pass_add(c);
	if (c->input == NULL)
		c->input = conn_buffer_take(c->loop);
	/* successful calls add nothing to the queue: once per event is enough */
	conn_tls_empty_error_queue();
	while (total < budget) {
		struct evbuffer_iovec vec;
		size_t want = budget - total < c->read_size ? budget - total : c->read_size;
		size_t got = 0;
		int r;

		if (evbuffer_reserve_space(c->input, (ev_ssize_t)want, &vec, 1) < 1)
			return -2;
		r = SSL_read_ex(c->ssl, vec.iov_base, vec.iov_len < want ? vec.iov_len : want,
				&got);
		if (r == 1) {
			vec.iov_len = got;
			evbuffer_commit_space(c->input, &vec, 1);
			total += got;
			/* nothing more inside OpenSSL: a further call would only
			 * find the socket empty; the loop wakes us for more */
			if (!SSL_has_pending(c->ssl))
				break;
			continue;
		}
		switch (SSL_get_error(c->ssl, r)) {
		case SSL_ERROR_WANT_READ:
			return (ssize_t)total;
		case SSL_ERROR_WANT_WRITE:
			c->tls_read_wants_write = true;
			return (ssize_t)total;
		case SSL_ERROR_ZERO_RETURN:
			/* close_notify (or, where the peer's closes are all taken
			 * as EOFs, a close without it) */
			conn_tls_keep_sent_shutdown(c);
			if (total > 0) {
				c->pending_eof = true;
				return (ssize_t)total;
			}
			return -1;
		case SSL_ERROR_SYSCALL:
			if (ERR_peek_error() == 0 && errno == 0)
				return conn_read_tls_unclean_eof(c, total);
			c->tls_error = ERR_get_error();
			if (total == 0)
				return -2;
			c->pending_error = errno != 0 ? errno : EPROTO;
			return (ssize_t)total;
		default:
			if (ERR_GET_LIB(ERR_peek_error()) == ERR_LIB_SSL &&
			    ERR_GET_REASON(ERR_peek_error()) ==
				    SSL_R_UNEXPECTED_EOF_WHILE_READING) {
				ERR_clear_error();
				return conn_read_tls_unclean_eof(c, total);
			}
			c->tls_error = ERR_get_error();
			errno = 0;
			if (total == 0)
				return -2;
			c->pending_error = EPROTO;
			return (ssize_t)total;
		}
	}
	/* what OpenSSL already holds will not wake the loop: come back at the
	 * end of the pass */
	if (SSL_has_pending(c->ssl))
		conn_pass_add(c);
	return (ssize_t)total;
}

/* Read what is there and pass it on; EOF and errors are reported. */
static void conn_read(struct conn *c)
{
	size_t room = SIZE_MAX;
	ssize_t n;

	if (c->input_limit != 0) {
		size_t len = conn_length(c->input);

		if (len >= c->input_limit) {
			conn_update_interest(c);
			return;
		}
		room = c->input_limit - len;
	}
	n = c->ssl != NULL ? conn_read_tls(c, room) : conn_read_plain(c, room);
	if (n > 0) {
		if (c->read_timeout_ms != 0)
			c->read_active_at = timeval_now_coarse_ms();
		if (c->read_cb != NULL) {
			c->busy++;
			c->read_cb(c, c->arg);
			if (!conn_release(c))
				return;
		}
		conn_buffer_release(c->loop, &c->input);
		if (c->pending_eof || c->pending_error != 0) {
			conn_pass_add(c);
			return;
		}
		if (conn_input_full(c))
			conn_update_interest(c);
		return;
	}
	if (n == 0) {
		conn_buffer_release(c->loop, &c->input);
		conn_update_interest(c);
		return;
	}
	conn_buffer_release(c->loop, &c->input);
	if (n == -1 && c->write_reset) {
		conn_fail(c, CONN_READING, c->error);
		return;
	}
	if (n == -1) {
		c->eof = true;
		conn_update_interest(c);
		conn_report(c, CONN_EOF | CONN_READING);
		return;
	}
	conn_fail(c, CONN_READING, errno);
}

/* Plain write of the output: > 0 progress, 0 blocked with nothing written,
 * -1 error. Sets write_blocked when the kernel's buffer is full. */
static ssize_t conn_write_plain(struct conn *c)
{
	size_t left = conn_length(c->output);
	ssize_t written = 0;

	while (left > 0) {
		struct evbuffer_iovec vec[CONN_WRITE_IOVECS];
		struct iovec iov[CONN_WRITE_IOVECS];
		struct msghdr msg;
		size_t attempted = 0;
		int count;
		int i;
		ssize_t n;

		if (left <= CONN_WRITE_GATHER) {
			/* a small output in pieces (a head, then a short body) is
			 * made one piece: copying a few hundred bytes costs less
			 * than a sendmsg */
			iov[0].iov_base = evbuffer_pullup(c->output, -1);
			iov[0].iov_len = left;
			attempted = left;
			count = 1;
		} else {
			count = evbuffer_peek(c->output, -1, NULL, vec, CONN_WRITE_IOVECS);
			if (count > CONN_WRITE_IOVECS)
				count = CONN_WRITE_IOVECS;
			for (i = 0; i < count; i++) {
				iov[i].iov_base = vec[i].iov_base;
				iov[i].iov_len = vec[i].iov_len;
				attempted += vec[i].iov_len;
			}
		}
		if (count == 1) {
			/* most responses are one piece: send skips the iovec import */
			n = send(c->fd, iov[0].iov_base, iov[0].iov_len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		} else {
			memset(&msg, 0, sizeof(msg));
			msg.msg_iov = iov;
			msg.msg_iovlen = (size_t)count;
			n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->write_blocked = true;
				break;
			}
			return -1;
		}
		evbuffer_drain(c->output, (size_t)n);
		left -= (size_t)n;
		written += n;
		c->written += (uint64_t)n;
		if ((size_t)n < attempted) {
			/* a short write: the kernel's buffer is full */
			c->write_blocked = true;
			break;
		}
	}
	return written;
}

/* TLS write of the output, record by record; same results as plain. */
static ssize_t conn_write_tls(struct conn *c)
{
	ssize_t written = 0;

	c->tls_write_wants_read = false;
	conn_tls_empty_error_queue();
	for (;;) {
		size_t len = conn_length(c->output);
		size_t n;
		size_t done = 0;
		unsigned char *data;
		int r;

		if (len == 0)
			break;
		/* a repeated SSL_write must ask for the same bytes again */
		n = c->tls_write_len != 0 ? c->tls_write_len
					  : (len < CONN_TLS_WRITE ? len : CONN_TLS_WRITE);
		data = evbuffer_pullup(c->output, (ev_ssize_t)n);
		r = SSL_write_ex(c->ssl, data, n, &done);
		if (r == 1) {
			c->tls_write_len = 0;
			evbuffer_drain(c->output, done);
			written += (ssize_t)done;
			c->written += done;
			continue;
		}
		switch (SSL_get_error(c->ssl, r)) {
		case SSL_ERROR_WANT_WRITE:
			c->tls_write_len = n;
			c->write_blocked = true;
			return written;
		case SSL_ERROR_WANT_READ:
			c->tls_write_len = n;
			c->tls_write_wants_read = true;
			return written;
		case SSL_ERROR_SYSCALL:
			/* the socket failed (a reset, EPIPE): errno says how */
			c->tls_error = ERR_get_error();
			if (errno == 0)
				errno = EPIPE;
			return -1;
		default:
			c->tls_error = ERR_get_error();
			errno = EPROTO;
			return -1;
		}
	}
	return written;
}

/* A send to an upstream was reset. A peer that answers early and closes
 * without reading the rest of the request (a 413 for a body too large, a
 * 503 with Connection: close) makes its kernel reset the connection, and
 * what it sent before is still readable here: while the conn reads, the
 * output stays unsent and the reading goes on, so the answer goes up first
 * and the reset after it. The send took the kernel's one report of the
 * reset, so the read then sees an EOF: it is reported as the reset it is
 * (a body that ends with the connection must not look whole). A client's
 * connection fails at once: nobody reads what a client says after that.
 * TLS reads on the same way: a send that failed at the socket (not a TLS
 * protocol error, which conn_write_tls gives as EPROTO) leaves OpenSSL's
 * reading side whole, and the records the upstream sent before its reset
 * are decrypted as they come. False: fail now. */
static bool conn_write_reset(struct conn *c, int error)
{
	if (c->side != CONN_OUTGOING || (error != ECONNRESET && error != EPIPE) || !c->reading ||
	    c->eof || conn_input_full(c))
		return false;
	c->write_reset = true;
	c->error = error;
	c->write_blocked = false;
	conn_update_interest(c);
	return true;
}

/* Write what the output holds; report progress to the write callback. */
static void conn_write(struct conn *c)
{
	bool was_blocked = c->write_blocked;
	bool ended = false;
	ssize_t n;

	c->write_blocked = false;
	n = c->ssl != NULL ? conn_write_tls(c) : conn_write_plain(c);
	if (n < 0) {
		if (!conn_write_reset(c, errno))
			conn_fail(c, CONN_WRITING, errno);
		return;
	}
	if (c->write_timeout_ms != 0 && (n > 0 || (c->write_blocked && !was_blocked)))
		conn_write_clock_start(c, timeval_now_coarse_ms());
	conn_buffer_release(c->loop, &c->output);
	conn_update_interest(c);
	/* blocked again after some bytes: the clock's first look may now fall
	 * before the timer, which the interest left alone */
	if (c->write_blocked)
		conn_timer_schedule(c);
	/* before the check for progress: a blocked close_notify is written
	 * with no output left, and its going is progress the owner may wait
	 * for (conn_output_ending) */
	if (c->shutdown_pending && c->output == NULL) {
		conn_end_output(c);
		ended = !c->shutdown_pending;
	}
	if (n == 0 && !ended)
		return;
	if (c->write_cb != NULL && conn_length(c->output) <= c->output_low) {
		c->busy++;
		c->write_cb(c, c->arg);
		conn_release(c);
	}
}

/* Ready for traffic: output queued while connecting goes out when this
 * pass ends, like any other. */
static void conn_connected(struct conn *c)
{
	conn_update_interest(c);
	/* with read-ahead the handshake may have read what the peer sent right
	 * behind it (TLS 1.3 lets a client send its request with its Finished):
	 * no readiness will announce those bytes */
	if (conn_length(c->output) > 0 || c->shutdown_pending ||
	    (c->ssl != NULL && SSL_has_pending(c->ssl)))
		conn_pass_add(c);
	conn_report(c, CONN_CONNECTED);
}

/* The TLS handshake made progress, finished or failed. */
static void conn_handshake(struct conn *c)
{
	int r;

	ERR_clear_error();
	r = SSL_do_handshake(c->ssl);
	if (r == 1) {
		c->handshaking = false;
		conn_connected(c);
		return;
	}
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		if (c->early_rbio && BIO_ctrl_pending(SSL_get_rbio(c->ssl)) == 0) {
			/* the bytes that came before TLS began are used up: from
			 * now on OpenSSL reads the socket */
			c->early_rbio = false;
			SSL_set0_rbio(c->ssl, BIO_new_socket(c->fd, BIO_NOCLOSE));
			conn_handshake(c);
			return;
		}
		c->handshake_wants = EV_READ;
		conn_update_interest(c);
		return;
	case SSL_ERROR_WANT_WRITE:
		c->handshake_wants = EV_WRITE;
		conn_update_interest(c);
		return;
	default:
		c->tls_error = ERR_get_error();
		ERR_clear_error();
		conn_fail(c, CONN_HANDSHAKE, errno);
		return;
	}
}

bool conn_self_connected(int fd)
{
	struct sockaddr_storage local, peer;
	socklen_t local_len = sizeof(local), peer_len = sizeof(peer);

	return getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 &&
	       getpeername(fd, (struct sockaddr *)&peer, &peer_len) == 0 &&
	       config_values_same_address(&local, &peer);
}

/* The connect finished, one way or the other. */
static void conn_connect_done(struct conn *c)
{
	int error = 0;
	int one = 1;
	socklen_t len = sizeof(error);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
		error = errno;
	if (error == EINPROGRESS)
		return;
	c->connecting = false;
	if (error == 0 && conn_self_connected(c->fd))
		error = ECONNREFUSED;
	if (error != 0) {
		/* a reset of a connection that was made, before the handshake
		 * could start, is the handshake's failure, not a refusal */
		conn_fail(c, c->ssl != NULL && error == ECONNRESET ? CONN_HANDSHAKE : 0, error);
		return;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (c->ssl == NULL) {
		conn_connected(c);
		return;
	}
	SSL_set_fd(c->ssl, c->fd);
	SSL_set_connect_state(c->ssl);
	tls_client_begin(c->ssl);
	c->handshaking = true;
	conn_handshake(c);
}

bool conn_connect_pending(const struct conn *c)
{
	return c->connecting;
}

static void conn_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct conn_loop *loop = c->loop;
	bool write_now, read_now;

	c->busy++;
	if (c->connecting) {
		conn_connect_done(c);
	} else if (c->handshaking) {
		conn_handshake(c);
	} else {
		write_now = ((what & EV_WRITE) && c->write_blocked) ||
			    ((what & EV_READ) && c->tls_write_wants_read);
		if (write_now && !c->failed)
			conn_write(c);
		read_now = ((what & EV_WRITE) && c->tls_read_wants_write) ||
			   ((what & EV_READ) && c->reading && !c->eof);
		if (read_now && !c->failed && !c->freed)
			conn_read(c);
	}
	conn_release(c);
	/* what this event produced goes out now, not after the whole pass:
	 * the peers can start on it while the pass goes on */
	conn_loop_pass_end(loop);
}

/* The end-of-pass work for one conn: write, resume reading, replay. */
static void conn_pass_one(struct conn *c)
{
	if (c->handshaking && c->handshake_kick && !c->failed) {
		c->handshake_kick = false;
		conn_handshake(c);
		return;
	}
	if (c->connecting || c->handshaking || c->failed)
		return;
	if (conn_length(c->output) > 0 && !c->write_blocked && !c->write_reset) {
		/* conn_write registers the interest that follows from it */
		conn_write(c);
		if (c->freed || c->failed)
			return;
	} else {
		conn_update_interest(c);
	}
	if (c->pending_error != 0) {
		int error = c->pending_error;

		c->pending_error = 0;
		c->pending_eof = false;
		conn_fail(c, CONN_READING, error);
		return;
	}
	if (c->pending_eof && c->write_reset) {
		c->pending_eof = false;
		conn_fail(c, CONN_READING, c->error);
		return;
	}
	if (c->pending_eof) {
		c->pending_eof = false;
		c->eof = true;
		conn_update_interest(c);
		conn_report(c, CONN_EOF | CONN_READING);
		return;
	}
	if (c->shutdown_pending && conn_length(c->output) == 0 && !c->write_blocked)
		conn_end_output(c);
	if (c->read_again) {
		c->read_again = false;
		if (c->reading && c->read_cb != NULL && conn_length(c->input) > 0)
			c->read_cb(c, c->arg);
		if (!c->freed)
			conn_buffer_release(c->loop, &c->input);
		return;
	}
	if (c->ssl != NULL && c->reading && !c->eof && !conn_input_full(c) &&
	    SSL_has_pending(c->ssl))
		conn_read(c);
}

void conn_loop_pass_end(struct conn_loop *loop)
{
	struct conn *c;

	if (loop->flushing)
		return;
	loop->flushing = true;
	while ((c = LIST_FIRST(&loop->pass)) != NULL || loop->accepted_closed_pending > 0) {
		if (c == NULL) {
			loop->accepted_closed_pending--;
			if (loop->accepted_closed != NULL)
				loop->accepted_closed(loop->accepted_closed_arg);
			continue;
		}
		LIST_REMOVE(c, pass_link);
		c->in_pass = false;
		c->busy++;
		conn_pass_one(c);
		conn_release(c);
	}
	loop->flushing = false;
}

/* A conn around fd with empty buffers and no interest yet. */
static struct conn *conn_alloc(struct conn_loop *loop, int fd, enum conn_side side)
{
	struct conn *c = xcalloc(1, sizeof(*c));

	c->loop = loop;
	c->side = side;
	loop->open[side]++;
	c->fd = fd;
	c->io = event_new(loop->base, fd, EV_PERSIST, conn_io_cb, c);
	c->read_size = CONN_READ_START;
	return c;
}

struct conn *conn_new(struct conn_loop *loop, int fd)
{
	evutil_make_socket_nonblocking(fd);
	return conn_alloc(loop, fd, CONN_ACCEPTED);
}

struct conn *conn_connect(struct conn_loop *loop, const struct sockaddr *addr, socklen_t len,
			  SSL *ssl)
{
	int fd = conn_loop_socket(loop, addr->sa_family);
	struct conn *c;

	if (fd < 0 || (connect(fd, addr, len) < 0 && errno != EINPROGRESS)) {
		int error = errno;

		if (fd >= 0)
			close(fd);
		if (ssl != NULL)
			SSL_free(ssl);
		errno = error;
		return NULL;
	}
	c = conn_alloc(loop, fd, CONN_OUTGOING);
	if (ssl != NULL) {
		c->ssl = ssl;
		/* the bytes of a repeated SSL_write may have moved in the buffer */
		SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
		/* records are read as much at a time as the socket has, not
		 * header and body in two calls each */
		SSL_set_read_ahead(ssl, 1);
	}
	c->connecting = true;
	conn_update_interest(c);
	return c;
}

int conn_start_tls_server(struct conn *c, SSL *ssl)
{
	size_t early = conn_length(c->input);

	/* what is queued (the answer to CONNECT) goes out in plaintext first */
	if (conn_length(c->output) > 0) {
		if (conn_write_plain(c) < 0 || conn_length(c->output) > 0) {
			c->write_blocked = false;
			SSL_free(ssl);
			return -1;
		}
		conn_buffer_release(c->loop, &c->output);
	}
	c->ssl = ssl;
	SSL_set_fd(ssl, c->fd);
	if (early > 0) {
		/* a client that sent its ClientHello right behind the CONNECT:
		 * those bytes were read already and go to OpenSSL first */
		BIO *rbio = BIO_new(BIO_s_mem());

		BIO_write(rbio, evbuffer_pullup(c->input, (ev_ssize_t)early), (int)early);
		BIO_set_mem_eof_return(rbio, -1);
		evbuffer_drain(c->input, early);
		conn_buffer_release(c->loop, &c->input);
		SSL_set0_rbio(ssl, rbio);
		c->early_rbio = true;
	}
	SSL_set_accept_state(ssl);
	SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_set_read_ahead(ssl, 1);
	/* a client that closes without close_notify has closed all the same */
	SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
	c->handshaking = true;
	c->handshake_wants = EV_READ;
	/* never inside this call: the handshake runs when the pass ends, or
	 * when the ClientHello arrives */
	c->handshake_kick = early > 0;
	if (c->handshake_kick)
		conn_pass_add(c);
	conn_update_interest(c);
	return 0;
}

void conn_setcb(struct conn *c, conn_data_cb read_cb, conn_data_cb write_cb, conn_event_cb event_cb,
		void *arg)
{
	c->read_cb = read_cb;
	c->write_cb = write_cb;
	c->event_cb = event_cb;
	c->arg = arg;
}

struct evbuffer *conn_input(struct conn *c)
{
	/* the caller may take bytes: a conn stopped at its input limit then
	 * reads again */
	if (c->input_limit != 0 && !(c->io_events & EV_READ) && c->reading)
		conn_pass_add(c);
	if (c->input == NULL)
		c->input = conn_buffer_take(c->loop);
	return c->input;
}

struct evbuffer *conn_output(struct conn *c)
{
	conn_pass_add(c);
	if (c->output == NULL)
		c->output = conn_buffer_take(c->loop);
	return c->output;
}

size_t conn_input_length(const struct conn *c)
{
	return conn_length(c->input);
}

size_t conn_output_length(const struct conn *c)
{
	return conn_length(c->output);
}

bool conn_handle_first(struct conn *c, bool first)
{
	c->first = first;
	/* libevent will not move an event that waits to be handled: its
	 * readiness came in this pass */
	return event_priority_set(c->io, first ? CONN_PRIORITY_FIRST : CONN_PRIORITY_USUAL) == 0;
}

bool conn_tls_partial_record(const struct conn *c)
{
	/* reads stop at a whole record or a want-read, so what OpenSSL still
	 * holds after the last one is either decrypted data nobody took (the
	 * read callback had it) or part of the next record */
	return c->ssl != NULL && SSL_has_pending(c->ssl);
}

/* The socket's TCP state (TCP_ESTABLISHED, TCP_CLOSE_WAIT...), or -1 when
 * the kernel cannot say. */
static int conn_tcp_state(const struct conn *c)
{
	struct tcp_info info;
	socklen_t len = sizeof(info);

	return getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 ? info.tcpi_state : -1;
}

size_t conn_output_unacked(const struct conn *c)
{
	int in_kernel = 0;

	if (c->fd < 0)
		return conn_output_length(c);
	/* a peer that reset the connection takes nothing more; SIOCOUTQ
	 * still counts what it never acknowledged */
	if (conn_tcp_state(c) == TCP_CLOSE)
		return 0;
	if (ioctl(c->fd, SIOCOUTQ, &in_kernel) != 0 || in_kernel < 0)
		in_kernel = 0; /* the kernel cannot say: nothing known to wait for */
	return conn_output_length(c) + (size_t)in_kernel;
}

bool conn_ack_watch_done(struct conn_ack_watch *watch, const struct conn *c, uint64_t now_ms,
			 uint64_t still_max_ms)
{
	size_t unacked = conn_output_unacked(c);

	if (unacked < watch->least_unacked) {
		watch->least_unacked = unacked;
		watch->still_since_ms = now_ms;
	}
	return unacked == 0 || now_ms - watch->still_since_ms >= still_max_ms;
}

bool conn_input_at_limit(const struct conn *c)
{
	return conn_input_full(c);
}

bool conn_notice_hangup(struct conn *c)
{
	int state;

	/* found already in this pass (by a look, or with the last bytes
	 * read): it is reported when the pass ends, and is a close all the
	 * same to a caller about to send on the client's behalf */
	if (c->pending_eof)
		return true;
	if (c->fd < 0 || c->eof || c->failed || !conn_input_full(c))
		return false;
	/* CLOSE_WAIT: its FIN came; CLOSE: it reset the connection */
	state = conn_tcp_state(c);
	if (state != TCP_CLOSE_WAIT && state != TCP_CLOSE)
		return false;
	c->pending_eof = true;
	conn_pass_add(c);
	return true;
}

uint64_t conn_bytes_written(const struct conn *c)
{
	return c->written;
}

uint64_t conn_bytes_mark(const struct conn *c)
{
	return c->written + conn_length(c->output);
}

uint64_t conn_bytes_written_since(const struct conn *c, uint64_t mark)
{
	return c->written > mark ? c->written - mark : 0;
}

int64_t conn_bytes_acked(const struct conn *c)
{
	return c->fd >= 0 ? conn_acked(c) : -1;
}

void conn_read_enable(struct conn *c, bool on)
{
	if (c->reading == on)
		return;
	c->reading = on;
	if (c->connecting || c->handshaking)
		return;
	conn_update_interest(c);
	/* TLS bytes already decrypted will not wake the loop */
	if (on && c->ssl != NULL && SSL_has_pending(c->ssl))
		conn_pass_add(c);
}

void conn_read_again(struct conn *c)
{
	c->read_again = true;
	conn_pass_add(c);
}

void conn_set_input_limit(struct conn *c, size_t bytes)
{
	if (c->input_limit == bytes)
		return;
	c->input_limit = bytes;
	if (!c->connecting && !c->handshaking)
		conn_pass_add(c);
}

void conn_set_output_low(struct conn *c, size_t bytes)
{
	c->output_low = bytes;
}

void conn_set_timeouts(struct conn *c, uint64_t read_ms, uint64_t write_ms)
{
	/* a timeout taken away or left as it was never needs the timer sooner:
	 * a timer set for it fires, finds nothing due, and is set again */
	bool sooner = (read_ms != 0 && read_ms != c->read_timeout_ms) ||
		      (write_ms != 0 && write_ms != c->write_timeout_ms);
	uint64_t now = sooner ? timeval_now_coarse_ms() : 0;

	if (read_ms != c->read_timeout_ms)
		c->read_active_at = now;
	if (write_ms != c->write_timeout_ms)
		conn_write_clock_start(c, now);
	c->read_timeout_ms = read_ms;
	c->write_timeout_ms = write_ms;
	if (sooner)
		conn_timer_schedule(c);
}

uint64_t conn_deadline_at(const struct conn *c)
{
	return c->deadline_at;
}

void conn_set_deadline(struct conn *c, uint64_t ms)
{
	/* likewise a deadline taken away */
	c->deadline_at = ms != 0 ? timeval_now_coarse_ms() + ms : 0;
	if (ms != 0)
		conn_timer_schedule(c);
}

void conn_shutdown_write(struct conn *c)
{
	if (conn_length(c->output) == 0 && !c->connecting && !c->handshaking)
		conn_end_output(c);
	else
		c->shutdown_pending = true;
}

void conn_shutdown_write_cut(struct conn *c)
{
	c->end_cut = true;
	conn_shutdown_write(c);
}

bool conn_input_ended(const struct conn *c)
{
	return c->eof;
}

bool conn_output_ending(const struct conn *c)
{
	return c->shutdown_pending;
}

bool conn_eof_clean(const struct conn *c)
{
	return !c->eof_unclean;
}

int conn_error(const struct conn *c)
{
	return c->error;
}

SSL *conn_ssl(struct conn *c)
{
	return c->ssl;
}

unsigned long conn_tls_error(const struct conn *c)
{
	return c->tls_error;
}
