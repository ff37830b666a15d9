#ifndef RETRYPROXY_HTTP1_TARGET_H
#define RETRYPROXY_HTTP1_TARGET_H

/* The request-target and uri-host grammar, shared by the head parser and the
 * framing check inside http1.c and http1_target.c, and by the admin's Host
 * check (evhttp parses its requests); other callers read
 * head->parsed_target. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http1.h"

/* Parse uri-host [":" port] (RFC 9110 section 7.2): *host without the
 * brackets of an IPv6 literal, *port 0 when there is none. *routable says
 * whether the proxy may match, resolve and connect to it. */
bool http1_target_authority(const char *s, size_t len, const char **host, size_t *host_len,
			    uint16_t *port, bool *routable);

/* Split head->target into head->parsed_target, checking that it has the form
 * its method calls for: authority-form with CONNECT and only with it,
 * asterisk-form only with OPTIONS. */
bool http1_target_parse(struct http1_head *head);

#endif
