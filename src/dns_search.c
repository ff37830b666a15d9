#include "dns_search.h"

#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>

#include "resolv_conf.h"
#include "xmalloc.h"

static size_t dns_search_dots(const char *name)
{
	size_t dots = 0;

	for (; *name != '\0'; name++)
		dots += *name == '.';
	return dots;
}

/* name.domain; a domain written with a trailing dot (or "." alone) gives
 * the same question without it */
static char *dns_search_join(const char *name, const char *domain)
{
	size_t name_len = strlen(name), domain_len = strlen(domain);
	char *joined;

	if (domain_len > 0 && domain[domain_len - 1] == '.')
		domain_len--;
	joined = xmalloc(name_len + 1 + domain_len + 1);
	memcpy(joined, name, name_len);
	if (domain_len > 0) {
		joined[name_len] = '.';
		memcpy(joined + name_len + 1, domain, domain_len);
		joined[name_len + 1 + domain_len] = '\0';
	} else {
		joined[name_len] = '\0';
	}
	return joined;
}

size_t dns_search_candidates(const struct resolv_conf *conf, const char *name, bool absolute,
			     char ***names)
{
	size_t domains = conf != NULL && !absolute ? conf->domain_count : 0;
	char **list = xmalloc((domains + 1) * sizeof(*list));
	size_t count = 0;
	/* evdns compares the count of dots, an int, with ndots, which may be
	 * written negative */
	bool as_is_first =
		domains == 0 || conf->ndots <= 0 || dns_search_dots(name) >= (size_t)conf->ndots;

	if (as_is_first)
		list[count++] = xstrdup(name);
	for (size_t i = 0; i < domains; i++)
		list[count++] = dns_search_join(name, conf->domains[i]);
	if (!as_is_first)
		list[count++] = xstrdup(name);
	*names = list;
	return count;
}

void dns_search_free(char **names, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
}

bool dns_search_goes_on(int error)
{
	/* reply_handle(): every error of an answer goes on to the next
	 * candidate, but SERVFAIL is taken as a timeout, and a timeout ends
	 * the lookup (evdns_request_timeout_callback) */
	switch (error) {
	case DNS_ERR_NOTEXIST:
	case DNS_ERR_NODATA:
	case DNS_ERR_TRUNCATED:
	case DNS_ERR_FORMAT:
	case DNS_ERR_NOTIMPL:
	case DNS_ERR_REFUSED:
	case DNS_ERR_UNKNOWN:
		return true;
	default:
		return false;
	}
}
