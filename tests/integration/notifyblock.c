/* Preloaded into the proxy by test_intercept_close_notify_blocked.py: when
 * the file named by RETRYPROXY_NOTIFYBLOCK_FILE exists, the next write of a
 * TLS 1.3 close_notify record is refused with EAGAIN, as a socket whose
 * buffer is full refuses it, and the file is taken away: the socket itself
 * is writable, so the write goes at the next try. While the file named by
 * RETRYPROXY_NOTIFYBLOCK_HOLD_FILE exists, every such write is refused: a
 * socket that stays full for as long. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

typedef ssize_t write_fn(int, const void *, size_t);

/* A TLS 1.3 record of 24 bytes: application data (the outer type of every
 * record once the handshake is done) holding 19, a two-byte alert and its
 * inner type under a 16-byte tag: the close_notify, no other alert is sent
 * on a connection that ends well, and no data of 2 bytes goes to a client
 * in these tests. */
static int is_close_notify(const unsigned char *p, size_t len)
{
	return len == 24 && p[0] == 0x17 && p[1] == 0x03 && p[2] == 0x03 && p[3] == 0 && p[4] == 19;
}

ssize_t write(int fd, const void *buf, size_t len)
{
	static write_fn *real;
	const char *file = getenv("RETRYPROXY_NOTIFYBLOCK_FILE");
	const char *hold = getenv("RETRYPROXY_NOTIFYBLOCK_HOLD_FILE");

	if (hold != NULL && is_close_notify(buf, len) && access(hold, F_OK) == 0) {
		errno = EAGAIN;
		return -1;
	}
	if (file != NULL && is_close_notify(buf, len) && unlink(file) == 0) {
		errno = EAGAIN;
		return -1;
	}
	if (real == NULL)
		real = (write_fn *)dlsym(RTLD_NEXT, "write");
	return real(fd, buf, len);
}
