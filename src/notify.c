#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define NOTIFY_SOCKET_ENV "NOTIFY_SOCKET"

/* Send one message to $NOTIFY_SOCKET, if set. */
static void notify_send(const char *message)
{
	const char *name = getenv(NOTIFY_SOCKET_ENV);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t name_len;
	socklen_t addr_len;
	int fd = -1;

	if (name == NULL || name[0] == '\0')
		return;
	name_len = strlen(name);
	/* systemd hands out absolute paths and '@' abstract names only */
	if ((name[0] != '/' && name[0] != '@') || name_len >= sizeof(addr.sun_path)) {
		log_warn("notify: %s=%s is not an absolute socket path or an @abstract name",
			 NOTIFY_SOCKET_ENV, name);
		return;
	}
	memcpy(addr.sun_path, name, name_len);
	if (name[0] == '@') {
		/* an abstract name is exactly its bytes, no terminating NUL */
		addr.sun_path[0] = '\0';
		addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + name_len);
	} else {
		addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + name_len + 1);
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	/* never block the event loop on a supervisor whose queue is full */
	if (sendto(fd, message, strlen(message), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (const struct sockaddr *)&addr, addr_len) < 0)
		goto fail;
	close(fd);
	return;
fail:
	log_warn("notify: cannot send to %s: %s", name, strerror(errno));
	if (fd >= 0)
		close(fd);
}

void notify_ready(const char *status)
{
	char message[512];

	snprintf(message, sizeof(message), "READY=1\nSTATUS=%s\n", status);
	notify_send(message);
}

void notify_reloading(void)
{
	struct timespec now;
	char message[128];

	/* the manager uses the timestamp to tell this reload's READY=1 from
	 * an earlier one */
	clock_gettime(CLOCK_MONOTONIC, &now);
	snprintf(message, sizeof(message), "RELOADING=1\nMONOTONIC_USEC=%llu\n",
		 (unsigned long long)now.tv_sec * 1000000ull +
			 (unsigned long long)now.tv_nsec / 1000);
	notify_send(message);
}

void notify_stopping(void)
{
	notify_send("STOPPING=1\n");
}
