/* Run by test_tls_renegotiation.py: a TLS 1.2 origin that, as Apache does
 * for a per-location client certificate or cipher change, reads a request
 * head, asks for a renegotiation (HelloRequest) and answers only once the
 * client has renegotiated. Usage: renegserver CERT KEY; prints its port,
 * then one line per connection: "renegotiated" or "not renegotiated". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

/* Read until the end of a request head; false at EOF or error. */
static int read_head(SSL *ssl)
{
	char buf[4096];
	size_t len = 0;

	while (len < sizeof(buf) - 1) {
		int n = SSL_read(ssl, buf + len, (int)(sizeof(buf) - 1 - len));

		if (n <= 0)
			return 0;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") != NULL)
			return 1;
	}
	return 0;
}

/* Ask for a renegotiation and wait (up to the socket's receive timeout)
 * until the client has made it. */
static int renegotiate(SSL *ssl, int want_certificate)
{
	char byte;

	if (want_certificate) {
		/* a full handshake, as Apache asks for one */
		SSL_set_verify(ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
		SSL_set_options(ssl, SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
	}
	if (SSL_renegotiate(ssl) != 1 || SSL_do_handshake(ssl) != 1)
		return 0;
	/* without auto-retry a read returns once the handshake messages the
	 * client sent are taken, even with no application data */
	SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
	for (int i = 0; i < 50 && SSL_renegotiate_pending(ssl); i++) {
		int r = SSL_peek(ssl, &byte, 1);

		if (r <= 0 && SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ)
			return 0;
	}
	return !SSL_renegotiate_pending(ssl) && SSL_is_init_finished(ssl);
}

int main(int argc, char **argv)
{
	static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
				     "Connection: close\r\n\r\nrenegotiated\n";
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t addr_len = sizeof(addr);
	struct timeval timeout = { .tv_sec = 3 };
	SSL_CTX *ctx;
	int listener;

	if (argc != 3 && argc != 4)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, argv[1]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[2], SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION) != 1)
		return 2;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(listener, 16) != 0 ||
	    getsockname(listener, (struct sockaddr *)&addr, &addr_len) != 0)
		return 2;
	printf("%d\n", ntohs(addr.sin_port));
	fflush(stdout);
	for (;;) {
		int fd = accept(listener, NULL, NULL);
		SSL *ssl;
		int done;

		if (fd < 0)
			return 1;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
		ssl = SSL_new(ctx);
		SSL_set_fd(ssl, fd);
		done = SSL_accept(ssl) == 1 && read_head(ssl) && renegotiate(ssl, argc == 4);
		if (done)
			SSL_write(ssl, answer, sizeof(answer) - 1);
		printf("%s\n", done ? "renegotiated" : "not renegotiated");
		fflush(stdout);
		SSL_shutdown(ssl);
		SSL_free(ssl);
		close(fd);
		ERR_clear_error();
	}
}
