#ifndef RETRYPROXY_CONFIG_DUMP_H
#define RETRYPROXY_CONFIG_DUMP_H

/*
 * The effective configuration written back as YAML (the admin /config page):
 * every key with the value in force, defaults filled in, each route with the
 * retry and idempotency policy it inherited resolved. The output loads with
 * config_load_text into an equal config, so it can be saved and reused.
 */

struct config;
struct evbuffer;

/* Append the YAML text of config to out. */
void config_dump_yaml(const struct config *config, struct evbuffer *out);

#endif
