#include "resolv_conf.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_read.h"
#include "xmalloc.h"

/* A resolv.conf is a few lines: only this much of one is read (evdns reads
 * any size, so a larger file could differ past this point) */
#define RESOLV_CONF_MAX_BYTES (1 << 20)

static void resolv_conf_clear_search(struct resolv_conf *conf)
{
	for (size_t i = 0; i < conf->domain_count; i++)
		free(conf->domains[i]);
	free(conf->domains);
	conf->domains = NULL;
	conf->domain_count = 0;
	/* evdns starts a new search state, whose ndots is 1, at every domain
	 * or search line: an earlier "options ndots:" is lost */
	conf->ndots = 1;
}

static void resolv_conf_defaults(struct resolv_conf *conf)
{
	resolv_conf_clear_search(conf);
	conf->timeout_ms = 5000;
	conf->attempts = 3;
	conf->max_inflight = RESOLV_CONF_MAX_INFLIGHT;
}

struct resolv_conf *resolv_conf_new(void)
{
	struct resolv_conf *conf = xcalloc(1, sizeof(*conf));

	resolv_conf_defaults(conf);
	return conf;
}

void resolv_conf_free(struct resolv_conf *conf)
{
	if (conf == NULL)
		return;
	resolv_conf_clear_search(conf);
	free(conf);
}

static void resolv_conf_add_domain(struct resolv_conf *conf, const char *domain)
{
	while (domain[0] == '.')
		domain++;
	conf->domains = xrealloc(conf->domains, (conf->domain_count + 1) * sizeof(*conf->domains));
	conf->domains[conf->domain_count++] = xstrdup(domain);
}

/* evdns's strtoint: the whole text a number, else -1 */
static int resolv_conf_int(const char *text)
{
	char *end;
	long n = strtol(text, &end, 10);

	if (*end != '\0' || n < INT_MIN || n > INT_MAX)
		return -1;
	return (int)n;
}

/* evdns's str_matches_option: "name", "name:" or "name:anything" */
static bool resolv_conf_option_is(const char *option, const char *name)
{
	size_t len = strlen(name); /* with its colon */
	size_t given = strlen(option);

	if (given == len || given == len - 1)
		return strncmp(option, name, given) == 0;
	return given > len && strncmp(option, name, len) == 0;
}

static void resolv_conf_option(struct resolv_conf *conf, const char *option)
{
	const char *colon = strchr(option, ':');
	const char *value = colon != NULL ? colon + 1 : "";

	if (resolv_conf_option_is(option, "ndots:")) {
		int ndots = resolv_conf_int(value);

		if (ndots != -1)
			conf->ndots = ndots;
	} else if (resolv_conf_option_is(option, "timeout:")) {
		char *end;
		double seconds = strtod(value, &end);

		/* evdns refuses under a millisecond */
		if (*end == '\0' && seconds >= 0.001 && seconds < 1e9)
			conf->timeout_ms = (uint64_t)(seconds * 1000);
	} else if (resolv_conf_option_is(option, "attempts:")) {
		int attempts = resolv_conf_int(value);

		if (attempts != -1)
			conf->attempts = attempts > 255 ? 255 : attempts;
	} else if (resolv_conf_option_is(option, "max-inflight:")) {
		int max_inflight = resolv_conf_int(value);

		/* evdns's strtoint_clipped(1, 65000) */
		if (max_inflight != -1)
			conf->max_inflight = max_inflight < 1	    ? 1
					     : max_inflight > 65000 ? 65000
								    : max_inflight;
	}
}

static void resolv_conf_line(struct resolv_conf *conf, char *line)
{
	static const char delims[] = " \t";
	char *state;
	char *keyword = strtok_r(line, delims, &state);
	char *token;

	if (keyword == NULL)
		return;
	if (strcmp(keyword, "domain") == 0) {
		token = strtok_r(NULL, delims, &state);
		if (token != NULL) {
			resolv_conf_clear_search(conf);
			resolv_conf_add_domain(conf, token);
		}
	} else if (strcmp(keyword, "search") == 0) {
		resolv_conf_clear_search(conf);
		while ((token = strtok_r(NULL, delims, &state)) != NULL)
			resolv_conf_add_domain(conf, token);
	} else if (strcmp(keyword, "options") == 0) {
		while ((token = strtok_r(NULL, delims, &state)) != NULL)
			resolv_conf_option(conf, token);
	}
}

/* evdns's search_set_from_hostname: a new search state (ndots 1 again)
 * holding what follows the host name's first dot */
static void resolv_conf_hostname_domain(struct resolv_conf *conf, const char *hostname)
{
	const char *dot = hostname != NULL ? strchr(hostname, '.') : NULL;

	resolv_conf_clear_search(conf);
	if (dot != NULL)
		resolv_conf_add_domain(conf, dot);
}

void resolv_conf_parse(struct resolv_conf *conf, const char *text, const char *hostname)
{
	char *copy = xstrdup(text);
	char *line = copy;

	resolv_conf_defaults(conf);
	for (;;) {
		char *newline = strchr(line, '\n');

		if (newline != NULL)
			*newline = '\0';
		resolv_conf_line(conf, line);
		if (newline == NULL)
			break;
		line = newline + 1;
	}
	free(copy);
	if (conf->domain_count == 0)
		resolv_conf_hostname_domain(conf, hostname);
}

void resolv_conf_read(struct resolv_conf *conf, const char *path)
{
	char hostname[HOST_NAME_MAX + 1];
	FILE *f = fopen(path, "r");
	char *text;
	size_t len;

	if (gethostname(hostname, sizeof(hostname)) != 0)
		hostname[0] = '\0';
	hostname[sizeof(hostname) - 1] = '\0';
	if (f == NULL) {
		resolv_conf_defaults(conf);
		resolv_conf_hostname_domain(conf, hostname);
		return;
	}
	text = file_read_all(f, RESOLV_CONF_MAX_BYTES, &len);
	fclose(f);
	/* a file that fails midway reads as one with nothing in it */
	resolv_conf_parse(conf, text != NULL ? text : "", hostname);
	free(text);
}
