#ifndef RETRYPROXY_CLIENT_H
#define RETRYPROXY_CLIENT_H

/*
 * One downstream connection: reads request heads (client_timeout bounds each
 * one), runs one exchange at a time so pipelined responses stay in order,
 * keeps the connection alive between requests, and writes the proxy's own
 * error responses.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

struct conn;
struct config;
struct listener_config;
struct proxy;
struct client;

/* Take over an accepted socket. config is the one the listener runs under. */
void client_new(struct proxy *proxy, struct config *config, const struct listener_config *listen,
		evutil_socket_t fd, const struct sockaddr *peer, socklen_t peer_len);

struct conn *client_conn(struct client *client);
struct proxy *client_proxy(struct client *client);
struct config *client_config(struct client *client);
const struct listener_config *client_listener(struct client *client);
const char *client_peer(struct client *client);

/* While on, a request body that stops arriving for client_timeout closes
 * the connection (a slow-body attack, or a client that went away). */
void client_watch_body(struct client *client, bool on);

/* True when the connection closes after the current request whatever the
 * client asked (drain, or a reload removed its listener), so the response
 * says Connection: close. */
bool client_closing_after_request(struct client *client);

/* Queue a proxy-generated response with a one-line text body. */
void client_write_error(struct client *client, int status, const char *text, unsigned attempts,
			bool close);

/* The exchange has queued its whole response. The client frees it, then reads
 * the next request or, without keep_alive, closes once the output is flushed.
 * The exchange must not touch anything after this call. */
void client_exchange_done(struct client *client, bool keep_alive);

/* The response broke off in a way a clean close would hide (an upstream that
 * reset a close-delimited body): free the exchange and reset the connection so
 * the client sees an error, not a complete response. */
void client_exchange_reset(struct client *client);

/* The exchange turned into a CONNECT tunnel to upstream: the client frees the
 * exchange and hands its socket to a tunnel. Nothing may touch the exchange
 * or the client after this call. */
void client_exchange_tunnel(struct client *client, struct conn *upstream);

/* The live config changed (reload). Connections take it at their next
 * request; those whose listener address it no longer has close now if idle,
 * or after their current request. */
void client_config_changed(struct proxy *proxy);

/* Close every idle client connection (drain). */
void client_close_idle(struct proxy *proxy);

/* Close a client connection now, for any state (drain timeout, shutdown). */
void client_close(struct client *client, const char *reason);

#endif
