/*
 * Config loading: every file in tests/config/good/ loads; every
 * tests/config/bad/NAME.yaml fails with exactly the lines of NAME.expected;
 * config_load hands the same lines to its callback one by one; plus
 * defaults, inheritance, intercept:, the default path and the value parsers
 * by table. Fixtures are loaded as "good/NAME.yaml" and "bad/NAME.yaml" from
 * a copy of CONFIG_FIXTURES made beside the CA files the intercept fixtures
 * name (test_config_fixtures.h), so that the file names in messages do not
 * depend on the checkout's path.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#include "config.h"
#include "config_values.h"
#include "test_config_fixtures.h"

/* The whole of a small file, or NULL. */
static char *test_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long len;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	text = calloc(1, (size_t)len + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	return text;
}

/* A fixture's NAME.expected, with each @PID@ made this process's id: a
 * spool_dir under /proc/self is named by its real path, /proc/PID/... */
static char *test_read_expected(const char *path)
{
	char *text = test_read_file(path), *out, pid[24];
	size_t pid_len, len = 0;
	const char *p, *at;
	FILE *f;

	if (text == NULL)
		return NULL;
	pid_len = (size_t)snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	f = open_memstream(&out, &len);
	assert_non_null(f);
	for (p = text; (at = strstr(p, "@PID@")) != NULL; p = at + 5) {
		fwrite(p, 1, (size_t)(at - p), f);
		fwrite(pid, 1, pid_len, f);
	}
	fputs(p, f);
	fclose(f);
	free(text);
	return out;
}

/* The names in dir ending in suffix, sorted, NULL-terminated. */
static char **test_list(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, slen = strlen(suffix);

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (len <= slen || strcmp(e->d_name + len - slen, suffix) != 0)
			continue;
		names = realloc(names, (n + 2) * sizeof(*names));
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	for (size_t i = 0; i + 1 < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (strcmp(names[i], names[j]) > 0) {
				char *t = names[i];

				names[i] = names[j];
				names[j] = t;
			}
	if (names != NULL)
		names[n] = NULL;
	return names;
}

static void test_free_list(char **names)
{
	for (size_t i = 0; names != NULL && names[i] != NULL; i++)
		free(names[i]);
	free(names);
}

/* Load text as a config, with errors to a string the caller frees. */
static struct config *test_load(const char *text, char **errors)
{
	size_t len;
	FILE *out = open_memstream(errors, &len);
	struct config *config = config_load_text(text, strlen(text), "test.yaml", out);

	fclose(out);
	return config;
}

/* Load text that must be valid. */
static struct config *test_load_ok(const char *text)
{
	char *errors;
	struct config *config = test_load(text, &errors);

	if (config == NULL)
		fail_msg("unexpected errors:\n%s", errors);
	free(errors);
	return config;
}

/* Load text that must fail with exactly these errors. */
static void test_load_fails(const char *text, const char *expected)
{
	char *errors;
	struct config *config = test_load(text, &errors);

	assert_null(config);
	if (strcmp(errors, expected) != 0)
		fail_msg("errors differ.\nexpected:\n%s\ngot:\n%s", expected, errors);
	free(errors);
}

static int test_setup(void **state)
{
	test_fixtures_enter();
	return 0;
}

static int test_teardown(void **state)
{
	test_fixtures_leave();
	return 0;
}

static void test_good_fixtures(void **state)
{
	char **names = test_list("good", ".yaml");
	size_t count = 0;

	for (size_t i = 0; names != NULL && names[i] != NULL; i++, count++) {
		char path[PATH_MAX], *errors;
		size_t len;
		FILE *out = open_memstream(&errors, &len);
		struct config *config;

		snprintf(path, sizeof(path), "good/%s", names[i]);
		config = config_load_file(path, out);
		fclose(out);
		if (config == NULL)
			fail_msg("%s should load, got:\n%s", path, errors);
		free(errors);
		config_release(config);
	}
	assert_true(count >= 5);
	test_free_list(names);
}

static void test_bad_fixtures(void **state)
{
	char **names = test_list("bad", ".yaml");
	size_t count = 0, failures = 0;

	for (size_t i = 0; names != NULL && names[i] != NULL; i++, count++) {
		char path[PATH_MAX], expected_path[PATH_MAX], *errors, *expected;
		size_t len, base = strlen(names[i]) - strlen(".yaml");
		FILE *out = open_memstream(&errors, &len);
		struct config *config;

		snprintf(path, sizeof(path), "bad/%s", names[i]);
		snprintf(expected_path, sizeof(expected_path), "bad/%.*s.expected", (int)base,
			 names[i]);
		config = config_load_file(path, out);
		fclose(out);
		expected = test_read_expected(expected_path);
		if (config != NULL) {
			print_error("%s loaded but should fail\n", path);
			config_release(config);
			failures++;
		} else if (expected == NULL) {
			print_error("%s has no %s; it printed:\n%s", path, expected_path, errors);
			failures++;
		} else if (strcmp(errors, expected) != 0) {
			print_error("%s: errors differ.\nexpected:\n%sgot:\n%s", path, expected,
				    errors);
			failures++;
		}
		free(expected);
		free(errors);
	}
	test_free_list(names);
	assert_int_equal(failures, 0);
	assert_true(count >= 20);
}

/* Every .expected belongs to a .yaml, so that none is silently skipped. */
static void test_bad_fixtures_paired(void **state)
{
	char **names = test_list("bad", ".expected");

	for (size_t i = 0; names != NULL && names[i] != NULL; i++) {
		char path[PATH_MAX];
		size_t base = strlen(names[i]) - strlen(".expected");

		snprintf(path, sizeof(path), "bad/%.*s.yaml", (int)base, names[i]);
		if (access(path, R_OK) != 0)
			fail_msg("bad/%s has no %s", names[i], path);
	}
	test_free_list(names);
}

static void test_embedded_default(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_text(
		config_embedded_default, strlen(config_embedded_default), "<embedded>", out);
	const struct sockaddr_in *sin;

	fclose(out);
	if (config == NULL)
		fail_msg("the embedded default does not load:\n%s", errors);
	free(errors);
	assert_string_equal(config->source, "<embedded>");
	assert_int_equal(config->listener_count, 1);
	assert_string_equal(config->listeners[0].address, "127.0.0.1:3128");
	assert_null(config->listeners[0].upstream);
	sin = (const struct sockaddr_in *)&config->listeners[0].addr;
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(ntohs(sin->sin_port), 3128);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), 0x7f000001);
	assert_string_equal(config->admin_address, "127.0.0.1:9901");
	assert_int_equal(ntohs(((const struct sockaddr_in *)&config->admin_addr)->sin_port), 9901);
	assert_null(config->tls.ca_file);
	assert_true(config->tls.verify);
	assert_int_equal(config->route_count, 0);
	assert_int_equal(config->default_route.retry.max_attempts, 5);
	assert_int_equal(config->default_route.idempotent.when_present_count, 0);
	assert_int_equal(config->health.down_after, 3);
	assert_int_equal(config->health.probe_interval_ms, 500);
	assert_true(config->health.hold);
	assert_int_equal(config->default_route.retry.try_timeout_ms, 30000);
	assert_int_equal(config->default_route.retry.hedge.after_ms, 0);
	assert_false(config->default_route.retry.attempt_header);
	assert_int_equal(config->default_route.retry.idempotency_key, IDEMPOTENCY_KEY_NONE);
	assert_int_equal(config->default_route.retry.mode, RETRY_MODE_ENFORCE);
	config_release(config);
}

/* Errors name the file as given to config_load_text. */
static void test_text_name_in_errors(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	const char *text = "log:\n  level: loud\n";

	assert_null(config_load_text(text, strlen(text), "<embedded>", out));
	fclose(out);
	assert_string_equal(errors, "<embedded>:2:10: log.level: expected error, warn, info or "
				    "debug, got \"loud\"\n");
	free(errors);
}

static void test_missing_file(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);

	assert_null(config_load_file("no/such/file.yaml", out));
	fclose(out);
	assert_string_equal(errors, "no/such/file.yaml: cannot open: No such file or directory\n");
	free(errors);
}

/* What config_load handed its report callback. */
struct test_report {
	char *lines[64];
	size_t count;
};

/* A report callback keeping each line; a line never holds its newline. */
static void test_report_line(const char *line, void *arg)
{
	struct test_report *r = arg;

	assert_null(strchr(line, '\n'));
	assert_true(r->count < sizeof(r->lines) / sizeof(r->lines[0]));
	r->lines[r->count++] = strdup(line);
}

/* The lines joined, each ending in a newline, as config_load_file prints
 * them; the lines are freed. */
static char *test_report_text(struct test_report *r)
{
	char *text;
	size_t len;
	FILE *out = open_memstream(&text, &len);

	for (size_t i = 0; i < r->count; i++) {
		fprintf(out, "%s\n", r->lines[i]);
		free(r->lines[i]);
	}
	fclose(out);
	r->count = 0;
	return text;
}

/* config_load reports every bad fixture's errors one line per call, in
 * order, exactly as expected, and returns NULL. */
static void test_load_reports_lines(void **state)
{
	char **names = test_list("bad", ".yaml");
	size_t count = 0;

	for (size_t i = 0; names != NULL && names[i] != NULL; i++, count++) {
		char path[PATH_MAX], expected_path[PATH_MAX], *expected, *text;
		size_t base = strlen(names[i]) - strlen(".yaml"), newlines = 0;
		struct test_report r = { .count = 0 };

		snprintf(path, sizeof(path), "bad/%s", names[i]);
		snprintf(expected_path, sizeof(expected_path), "bad/%.*s.expected", (int)base,
			 names[i]);
		assert_null(config_load(path, CONFIG_SOURCE_ANY, test_report_line, &r));
		expected = test_read_expected(expected_path);
		assert_non_null(expected);
		for (const char *p = expected; *p != '\0'; p++)
			newlines += *p == '\n';
		if (r.count != newlines)
			fail_msg("%s: %zu calls for %zu lines", path, r.count, newlines);
		text = test_report_text(&r);
		if (strcmp(text, expected) != 0)
			fail_msg("%s: reported lines differ.\nexpected:\n%sgot:\n%s", path,
				 expected, text);
		free(text);
		free(expected);
	}
	test_free_list(names);
	assert_true(count >= 20);
}

/* Several errors in one file: one call each, in document order, though the
 * tables read them in another. */
static void test_load_reports_in_order(void **state)
{
	struct test_report r = { .count = 0 };

	assert_null(
		config_load("bad/several_errors.yaml", CONFIG_SOURCE_ANY, test_report_line, &r));
	assert_int_equal(r.count, 7);
	assert_string_equal(r.lines[0], "bad/several_errors.yaml:6:20: routes[0].retry."
					"max_backoff: expected a duration like 32s, got "
					"\"forever\"");
	assert_string_equal(r.lines[2], "bad/several_errors.yaml:9:14: listen[0].address: invalid "
					"address \"127.0.0.1:99999\": the port must be a number "
					"from 1 to 65535");
	assert_string_equal(r.lines[4], "bad/several_errors.yaml:12:3: limits.bogus: unknown key");
	assert_string_equal(r.lines[6], "bad/several_errors.yaml:17:10: log.level: expected error, "
					"warn, info or debug, got \"verbose\"");
	free(test_report_text(&r));
}

/* A file that cannot be read is one error line. */
static void test_load_missing_file(void **state)
{
	struct test_report r = { .count = 0 };

	assert_null(config_load("no/such/file.yaml", CONFIG_SOURCE_ANY, test_report_line, &r));
	assert_int_equal(r.count, 1);
	assert_string_equal(r.lines[0],
			    "no/such/file.yaml: cannot open: No such file or directory");
	free(test_report_text(&r));
}

/* A file over 16 MiB is no config: one error line, read no further (before,
 * -c /dev/zero read until memory ran out). */
static void test_load_oversized_file(void **state)
{
	struct test_report r = { .count = 0 };
	char path[] = "/tmp/retryproxy-oversized-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "listen: []\n", 11), 11);
	assert_int_equal(ftruncate(fd, (16 << 20) + 1), 0);
	close(fd);
	assert_null(config_load(path, CONFIG_SOURCE_REGULAR, test_report_line, &r));
	unlink(path);
	assert_int_equal(r.count, 1);
	assert_non_null(
		strstr(r.lines[0], ": cannot read: over 16 MiB, more than any config holds"));
	free(test_report_text(&r));

	assert_null(config_load("/dev/zero", CONFIG_SOURCE_ANY, test_report_line, &r));
	assert_int_equal(r.count, 1);
	assert_string_equal(r.lines[0],
			    "/dev/zero: cannot read: over 16 MiB, more than any config holds");
	free(test_report_text(&r));
}

/* A reload's load reads a regular file only: a device (or a FIFO) is one
 * error line, never waited on; a start's load reads it. */
static void test_load_regular_only(void **state)
{
	struct test_report r = { .count = 0 };
	struct config *config;

	assert_null(config_load("/dev/null", CONFIG_SOURCE_REGULAR, test_report_line, &r));
	assert_int_equal(r.count, 1);
	assert_string_equal(r.lines[0], "/dev/null: cannot read: not a regular file (a reload "
					"does not wait on a FIFO or a device)");
	free(test_report_text(&r));

	assert_null(config_load("/dev/null", CONFIG_SOURCE_ANY, test_report_line, &r));
	assert_int_equal(r.count, 1);
	assert_string_equal(r.lines[0], "/dev/null:1:1: the configuration is empty");
	free(test_report_text(&r));

	config = config_load("good/spec_example.yaml", CONFIG_SOURCE_REGULAR, test_report_line, &r);
	assert_non_null(config);
	assert_int_equal(r.count, 0);
	config_release(config);
}

/* A good file and the embedded default (path NULL) load without a call. */
static void test_load_good_and_embedded(void **state)
{
	struct test_report r = { .count = 0 };
	struct config *config =
		config_load("good/spec_example.yaml", CONFIG_SOURCE_ANY, test_report_line, &r);

	assert_non_null(config);
	assert_int_equal(r.count, 0);
	assert_string_equal(config->source, "good/spec_example.yaml");
	assert_int_equal(config->route_count, 2);
	config_release(config);

	config = config_load(NULL, CONFIG_SOURCE_ANY, test_report_line, &r);
	assert_non_null(config);
	assert_int_equal(r.count, 0);
	assert_string_equal(config->source, "<embedded>");
	assert_int_equal(config->listener_count, 1);
	assert_string_equal(config->listeners[0].address, "127.0.0.1:3128");
	assert_string_equal(config->admin_address, "127.0.0.1:9901");
	config_release(config);
}

/* ./conf/retryproxy.yaml comes first, then the one in /etc, then none. */
static void test_default_path(void **state)
{
	char cwd[PATH_MAX], dir[] = "/tmp/test_config.XXXXXX";
	const char *etc = "/etc/retryproxy/retryproxy.yaml";
	const char *path;
	FILE *f;

	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chdir(dir), 0);
	path = config_default_path();
	if (access(etc, F_OK) == 0)
		assert_string_equal(path, etc);
	else
		assert_null(path);
	assert_int_equal(mkdir("conf", 0700), 0);
	f = fopen("conf/retryproxy.yaml", "w");
	assert_non_null(f);
	fclose(f);
	assert_string_equal(config_default_path(), "./conf/retryproxy.yaml");
	assert_int_equal(unlink("conf/retryproxy.yaml"), 0);
	assert_int_equal(rmdir("conf"), 0);
	assert_int_equal(chdir(cwd), 0);
	assert_int_equal(rmdir(dir), 0);
}

static bool test_on_code(const struct retry_policy *retry, unsigned code)
{
	return retry->on_codes[code / 8] & (1u << (code % 8));
}

/* Every key left out takes the value SPEC gives it. */
static void test_defaults(void **state)
{
	struct config *config = test_load_ok("log: {format: json}\n");
	const struct route *d = &config->default_route;
	const struct limits *l = &config->limits;
	char text[INET6_ADDRSTRLEN];

	assert_int_equal(config->refs, 1);
	assert_int_equal(config->listener_count, 1);
	assert_string_equal(config->listeners[0].address, "127.0.0.1:3128");
	assert_null(config->admin_address);
	assert_int_equal(config->log_level, LOG_LEVEL_INFO);
	assert_int_equal(config->log_format, LOG_FORMAT_JSON);
	assert_int_equal(config->allow_client_count, 2);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&config->allow_clients[0].addr)->sin_addr, text,
		  sizeof(text));
	assert_string_equal(text, "127.0.0.0");
	assert_int_equal(config->allow_clients[0].prefix_len, 8);
	inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&config->allow_clients[1].addr)->sin6_addr,
		  text, sizeof(text));
	assert_string_equal(text, "::1");
	assert_int_equal(config->allow_clients[1].prefix_len, 128);
	assert_int_equal(config->allow_host_count, 1);
	assert_string_equal(config->allow_hosts[0], "*");
	assert_false(config->admin_remote);
	assert_null(config->tls.ca_file);
	assert_true(config->tls.verify);

	assert_int_equal(l->max_connections, 10000);
	assert_int_equal(l->max_header_bytes, 64 * 1024);
	assert_int_equal(l->max_uri_bytes, 8 * 1024);
	assert_int_equal(l->max_body_bytes, 0);
	assert_int_equal(l->replay_buffer, 8 * 1024 * 1024);
	assert_int_equal(l->client_timeout_ms, 60000);
	assert_int_equal(l->retry_response_buffer, 1024 * 1024);
	assert_int_equal(l->connect_timeout_ms, 5000);
	assert_int_equal(l->try_timeout_ms, 30000);
	assert_int_equal(l->drain_timeout_ms, 30000);
	assert_int_equal(l->pool_max_idle, 32);
	assert_int_equal(l->pool_idle_timeout_ms, 60000);
	assert_int_equal(l->tunnel_idle_timeout_ms, 300000);
	assert_int_equal(l->spool_max, 0);
	assert_string_equal(l->spool_dir, "/var/tmp");
	assert_int_equal(l->spool_total, 1ULL << 30);
	assert_int_equal(l->retry_memory, 256ULL << 20);
	assert_int_equal(l->max_upstream_connections, 256);

	assert_int_equal(config->health.down_after, 3);
	assert_int_equal(config->health.probe_interval_ms, 500);
	assert_true(config->health.hold);

	assert_string_equal(d->name, "default");
	assert_null(d->match_host);
	assert_null(d->match_path_prefix);
	assert_int_equal(d->match_method_count, 0);
	assert_null(d->upstream);
	assert_false(d->tls_overridden);
	assert_int_equal(d->retry.on, RETRY_ON_5XX | RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET |
					      RETRY_ON_TIMEOUT);
	for (unsigned code = 100; code < 600; code++)
		assert_int_equal(test_on_code(&d->retry, code), code == 408 || code == 429);
	assert_int_equal(d->retry.max_attempts, 5);
	assert_int_equal(d->retry.initial_backoff_ms, 1000);
	assert_true(d->retry.multiplier == 2);
	assert_int_equal(d->retry.max_backoff_ms, 32000);
	assert_false(d->retry.jitter_full);
	assert_int_equal(d->retry.jitter_ms, 1000);
	assert_int_equal(d->retry.deadline_ms, 120000);
	assert_true(d->retry.honor_retry_after);
	assert_true(d->retry.budget.ratio == 0.2);
	assert_true(d->retry.budget.min_per_second == 3);
	assert_int_equal(d->retry.budget.window_ms, 10000);
	assert_int_equal(d->retry.try_timeout_ms, 30000);
	assert_int_equal(d->retry.hedge.after_ms, 0);
	assert_int_equal(d->retry.hedge.max, 1);
	assert_int_equal(d->idempotent.method_count, 6);
	assert_string_equal(d->idempotent.methods[0], "GET");
	assert_string_equal(d->idempotent.methods[5], "DELETE");
	assert_int_equal(d->idempotent.when_present_count, 0);
	config_release(config);
}

/* A route starts from the defaults and overrides only the keys it names:
 * retry and budget key by key, tls key by key, idempotent list by list. */
static void test_inheritance(void **state)
{
	struct config *config = test_load_ok("tls:\n"
					     "  ca_file: good/ca.pem\n"
					     "defaults:\n"
					     "  retry:\n"
					     "    max_attempts: 7\n"
					     "    jitter: full\n"
					     "    budget: { ratio: 0.5 }\n"
					     "  idempotent:\n"
					     "    when_present: [header: If-Match]\n"
					     "routes:\n"
					     "  - name: partial\n"
					     "    retry:\n"
					     "      max_backoff: 64s\n"
					     "      budget: { window: 30s }\n"
					     "    tls: { verify: false }\n"
					     "    idempotent: { methods: [GET] }\n"
					     "  - name: untouched\n"
					     "  - name: replaced\n"
					     "    retry: { on: [503], jitter: 250ms }\n"
					     "    tls: { ca_file: ~ }\n"
					     "    idempotent: { when_present: [] }\n");
	const struct route *d = &config->default_route, *r;

	assert_int_equal(config->route_count, 3);
	assert_int_equal(d->retry.max_attempts, 7);
	assert_true(d->retry.jitter_full);
	assert_true(d->retry.budget.ratio == 0.5);
	assert_true(d->retry.budget.min_per_second == 3);
	assert_non_null(d->tls.ca_file);

	r = &config->routes[0];
	assert_string_equal(r->name, "partial");
	assert_int_equal(r->retry.max_backoff_ms, 64000);
	assert_int_equal(r->retry.max_attempts, 7);
	assert_int_equal(r->retry.initial_backoff_ms, 1000);
	assert_true(r->retry.jitter_full);
	assert_int_equal(r->retry.on, d->retry.on);
	assert_true(test_on_code(&r->retry, 429));
	assert_true(r->retry.budget.ratio == 0.5);
	assert_true(r->retry.budget.min_per_second == 3);
	assert_int_equal(r->retry.budget.window_ms, 30000);
	assert_true(r->tls_overridden);
	assert_false(r->tls.verify);
	assert_string_equal(r->tls.ca_file, config->tls.ca_file);
	assert_int_equal(r->idempotent.method_count, 1);
	assert_string_equal(r->idempotent.methods[0], "GET");
	assert_int_equal(r->idempotent.when_present_count, 1);
	assert_int_equal(r->idempotent.when_present[0].kind, WHEN_PRESENT_HEADER);
	assert_string_equal(r->idempotent.when_present[0].name, "If-Match");

	r = &config->routes[1];
	assert_false(r->tls_overridden);
	assert_true(r->tls.verify);
	assert_string_equal(r->tls.ca_file, config->tls.ca_file);
	assert_int_equal(r->retry.max_backoff_ms, 32000);
	assert_int_equal(r->retry.budget.window_ms, 10000);
	assert_int_equal(r->idempotent.method_count, 6);
	assert_int_equal(r->idempotent.when_present_count, 1);

	r = &config->routes[2];
	assert_int_equal(r->retry.on, 0);
	assert_true(test_on_code(&r->retry, 503));
	assert_false(test_on_code(&r->retry, 429));
	assert_false(r->retry.jitter_full);
	assert_int_equal(r->retry.jitter_ms, 250);
	assert_true(r->tls_overridden);
	assert_null(r->tls.ca_file);
	assert_true(r->tls.verify);
	assert_int_equal(r->idempotent.method_count, 6);
	assert_int_equal(r->idempotent.when_present_count, 0);
	config_release(config);
}

/* The defaults: section may come after the routes that inherit from it. */
static void test_inheritance_any_order(void **state)
{
	struct config *config = test_load_ok("routes:\n"
					     "  - name: r\n"
					     "    retry: { deadline: 5m }\n"
					     "defaults:\n"
					     "  retry: { max_attempts: 2 }\n"
					     "tls: { verify: false }\n");

	assert_int_equal(config->routes[0].retry.max_attempts, 2);
	assert_int_equal(config->routes[0].retry.deadline_ms, 300000);
	assert_false(config->routes[0].tls.verify);
	assert_false(config->routes[0].tls_overridden);
	assert_false(config->default_route.tls.verify);
	config_release(config);
}

/* retry.try_timeout: the route's own, else defaults.retry's, else
 * limits.try_timeout, which may come after both in the file. */
static void test_try_timeout_inheritance(void **state)
{
	struct config *config = test_load_ok("routes:\n"
					     "  - name: own\n"
					     "    retry: { try_timeout: 2s }\n"
					     "  - name: plain\n"
					     "  - name: other-keys\n"
					     "    retry: { max_attempts: 2 }\n"
					     "limits:\n"
					     "  try_timeout: 45s\n");

	assert_int_equal(config->default_route.retry.try_timeout_ms, 45000);
	assert_int_equal(config->routes[0].retry.try_timeout_ms, 2000);
	assert_int_equal(config->routes[1].retry.try_timeout_ms, 45000);
	assert_int_equal(config->routes[2].retry.try_timeout_ms, 45000);
	config_release(config);

	config = test_load_ok("limits: { try_timeout: 45s }\n"
			      "defaults:\n"
			      "  retry: { try_timeout: 10s }\n"
			      "routes:\n"
			      "  - name: own\n"
			      "    retry: { try_timeout: 1500ms }\n"
			      "  - name: plain\n");
	assert_int_equal(config->limits.try_timeout_ms, 45000);
	assert_int_equal(config->default_route.retry.try_timeout_ms, 10000);
	assert_int_equal(config->routes[0].retry.try_timeout_ms, 1500);
	assert_int_equal(config->routes[1].retry.try_timeout_ms, 10000);
	config_release(config);
}

/* retry.hedge: none unless set; a route takes the defaults' key by key,
 * and after: 0s turns it off. */
static void test_hedge_inheritance(void **state)
{
	struct config *config = test_load_ok("defaults:\n"
					     "  retry:\n"
					     "    hedge: { after: 300ms }\n"
					     "routes:\n"
					     "  - name: plain\n"
					     "  - name: more\n"
					     "    retry: { hedge: { max: 3 } }\n"
					     "  - name: later\n"
					     "    retry: { hedge: { after: 2s, max: 2 } }\n"
					     "  - name: empty\n"
					     "    retry: { hedge: {} }\n"
					     "  - name: off\n"
					     "    retry: { hedge: { after: 0s } }\n");
	const struct route *r;

	assert_int_equal(config->default_route.retry.hedge.after_ms, 300);
	assert_int_equal(config->default_route.retry.hedge.max, 1);
	r = &config->routes[0];
	assert_int_equal(r->retry.hedge.after_ms, 300);
	assert_int_equal(r->retry.hedge.max, 1);
	r = &config->routes[1];
	assert_int_equal(r->retry.hedge.after_ms, 300);
	assert_int_equal(r->retry.hedge.max, 3);
	r = &config->routes[2];
	assert_int_equal(r->retry.hedge.after_ms, 2000);
	assert_int_equal(r->retry.hedge.max, 2);
	r = &config->routes[3];
	assert_int_equal(r->retry.hedge.after_ms, 300);
	assert_int_equal(r->retry.hedge.max, 1);
	/* after: 0s is how a route turns inherited hedging off */
	r = &config->routes[4];
	assert_int_equal(r->retry.hedge.after_ms, 0);
	config_release(config);

	/* with none in the defaults, a route's own is its alone */
	config = test_load_ok("routes:\n"
			      "  - name: hedged\n"
			      "    retry: { hedge: { after: 1s } }\n"
			      "  - name: plain\n");
	assert_int_equal(config->default_route.retry.hedge.after_ms, 0);
	assert_int_equal(config->routes[0].retry.hedge.after_ms, 1000);
	assert_int_equal(config->routes[0].retry.hedge.max, 1);
	assert_int_equal(config->routes[1].retry.hedge.after_ms, 0);
	config_release(config);
}

/* hedge.after must be shorter than the try_timeout in effect, whichever
 * section that comes from; the error is at the key the route set. */
static void test_hedge_after_try_timeout(void **state)
{
	test_load_fails("defaults:\n"
			"  retry:\n"
			"    hedge: { after: 30s }\n",
			"test.yaml:3:21: defaults.retry.hedge.after: hedge.after (30s) must be "
			"shorter than try_timeout (30s)\n");
	test_load_fails("routes:\n"
			"  - name: r\n"
			"    retry: { hedge: { after: 2s } }\n"
			"limits: { try_timeout: 1s }\n",
			"test.yaml:3:30: routes[0].retry.hedge.after: hedge.after (2s) must be "
			"shorter than try_timeout (1s)\n");
	test_load_fails("defaults:\n"
			"  retry: { hedge: { after: 2s } }\n"
			"routes:\n"
			"  - name: r\n"
			"    retry: { try_timeout: 2s }\n",
			"test.yaml:5:27: routes[0].retry.try_timeout: try_timeout (2s) must be "
			"longer than hedge.after (2s), inherited from defaults.retry\n");
	/* a longer try_timeout makes room for a hedge limits: would not */
	config_release(test_load_ok("limits: { try_timeout: 1s }\n"
				    "defaults:\n"
				    "  retry: { try_timeout: 5s, hedge: { after: 2s } }\n"));
}

/* initial_backoff at or past the deadline leaves no retry after a wait:
 * refused naming the key that brought it into play (fixtures
 * bad/backoff_past_deadline*.yaml have the rest); one millisecond short of
 * it is room enough. */
static void test_backoff_past_deadline(void **state)
{
	test_load_fails(
		"defaults:\n"
		"  retry: { max_attempts: 1, initial_backoff: 2s, jitter: 0s, deadline: 1s }\n"
		"routes:\n"
		"  - name: r\n"
		"    retry: { max_attempts: 2 }\n",
		"test.yaml:5:28: routes[0].retry.max_attempts: initial_backoff (2s) is not "
		"shorter than deadline (1s): every retry would wait until the deadline or "
		"past it, so none would be made; shorten initial_backoff, lengthen deadline, "
		"or use jitter: full\n");
	test_load_fails(
		"defaults:\n"
		"  retry: { deadline: 1s }\n",
		"test.yaml:2:22: defaults.retry.deadline: initial_backoff (1s) is not "
		"shorter than deadline (1s): every retry would wait until the deadline or "
		"past it, so none would be made; shorten initial_backoff, lengthen deadline, "
		"or use jitter: full\n");
	config_release(test_load_ok("defaults:\n"
				    "  retry: { initial_backoff: 999ms, deadline: 1s }\n"));
	/* a hedge that starts before the deadline is a try that follows no
	 * wait: the policy retries by hedging, whatever the backoff */
	config_release(test_load_ok(
		"defaults:\n"
		"  retry: { deadline: 500ms, max_attempts: 2, hedge: { after: 100ms } }\n"));
	/* one that would start only at the deadline or after is none */
	test_load_fails(
		"defaults:\n"
		"  retry: { deadline: 500ms, try_timeout: 2s, hedge: { after: 500ms } }\n",
		"test.yaml:2:22: defaults.retry.deadline: initial_backoff (1s) is not "
		"shorter than deadline (500ms): every retry would wait until the deadline or "
		"past it, so none would be made; shorten initial_backoff, lengthen deadline, "
		"or use jitter: full\n");
	/* defaults that pass by their hedge, and a route that turns it off:
	 * the route's hedge is what makes it so */
	test_load_fails(
		"defaults:\n"
		"  retry: { deadline: 1s, hedge: { after: 300ms } }\n"
		"routes:\n"
		"  - name: r\n"
		"    retry: { hedge: { after: 0s } }\n",
		"test.yaml:5:21: routes[0].retry.hedge: initial_backoff (1s) is not "
		"shorter than deadline (1s): every retry would wait until the deadline or "
		"past it, so none would be made; shorten initial_backoff, lengthen deadline, "
		"or use jitter: full\n");
}

/* A relative ca_file is relative to the config file and stored absolute. */
static void test_relative_ca_file(void **state)
{
	char *errors, *expected = realpath("good/ca.pem", NULL);
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/spec_example.yaml", out);

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	assert_non_null(expected);
	assert_true(config->tls.ca_file[0] == '/');
	assert_string_equal(config->tls.ca_file, expected);
	assert_string_equal(config->default_route.tls.ca_file, expected);
	assert_string_equal(config->routes[0].tls.ca_file, expected);
	config_release(config);

	/* From memory, a relative path is relative to the working directory. */
	config = test_load_ok("tls: { ca_file: good/ca.pem }\n");
	assert_string_equal(config->tls.ca_file, expected);
	config_release(config);
	free(expected);
}

/* The route from the SPEC example, field by field. */
static void test_spec_example_routes(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/spec_example.yaml", out);
	const struct route *r;

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	assert_int_equal(config->listener_count, 2);
	assert_non_null(config->listeners[1].upstream);
	assert_true(config->listeners[1].upstream->tls);
	assert_string_equal(config->listeners[1].upstream->authority, "storage.googleapis.com");
	assert_int_equal(config->route_count, 2);
	r = &config->routes[0];
	assert_string_equal(r->match_host, "storage.googleapis.com");
	assert_string_equal(r->match_path_prefix, "/upload/storage/v1/b/");
	assert_int_equal(r->match_method_count, 2);
	assert_string_equal(r->match_methods[1], "PATCH");
	assert_int_equal(r->idempotent.when_present_count, 5);
	assert_int_equal(r->idempotent.when_present[0].kind, WHEN_PRESENT_QUERY);
	assert_string_equal(r->idempotent.when_present[0].name, "ifGenerationMatch");
	assert_int_equal(r->idempotent.when_present[4].kind, WHEN_PRESENT_JSON_FIELD);
	assert_string_equal(r->idempotent.when_present[4].name, "etag");
	assert_int_equal(r->retry.on, RETRY_ON_CONNECT_FAILURE | RETRY_ON_RESET | RETRY_ON_TIMEOUT);
	assert_true(test_on_code(&r->retry, 500));
	assert_false(test_on_code(&r->retry, 501));
	assert_int_equal(r->retry.max_backoff_ms, 64000);
	assert_int_equal(r->retry.deadline_ms, 600000);
	assert_int_equal(r->retry.max_attempts, 5);
	r = &config->routes[1];
	assert_string_equal(r->name, "never-retry-payments");
	assert_null(r->match_host);
	assert_string_equal(r->match_path_prefix, "/v1/charges");
	assert_int_equal(r->retry.max_attempts, 1);
	config_release(config);
}

static void test_sidecar_values(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/sidecar.yaml", out);
	const struct sockaddr_in6 *sin6;
	char text[INET6_ADDRSTRLEN];

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	assert_int_equal(ntohl(((struct sockaddr_in *)&config->listeners[0].addr)->sin_addr.s_addr),
			 0x7f000001);
	sin6 = (const struct sockaddr_in6 *)&config->listeners[1].addr;
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_int_equal(ntohs(sin6->sin6_port), 8081);
	assert_string_equal(config->listeners[1].upstream->host, "2001:db8::1");
	assert_string_equal(config->listeners[1].upstream->authority, "[2001:db8::1]:9000");
	assert_string_equal(config->listeners[2].upstream->host, "backend.internal");
	assert_string_equal(config->listeners[2].upstream->authority, "backend.internal");
	assert_string_equal(config->listeners[2].upstream->text, "HTTP://Backend.Internal:80");
	assert_true(config->admin_remote);
	/* Host bits are cleared: 10.1.2.3/8 is 10.0.0.0/8. */
	inet_ntop(AF_INET, &((struct sockaddr_in *)&config->allow_clients[0].addr)->sin_addr, text,
		  sizeof(text));
	assert_string_equal(text, "10.0.0.0");
	assert_int_equal(config->allow_clients[1].prefix_len, 32);
	assert_string_equal(config->allow_hosts[1], "*.example.org");
	assert_string_equal(config->allow_hosts[2], "::1");
	assert_string_equal(config->routes[0].match_host, "api.example.com");
	assert_int_equal(config->routes[0].upstream->port, 8443);
	assert_true(config->routes[0].retry.jitter_full);
	assert_false(config->routes[0].retry.honor_retry_after);
	config_release(config);
}

static void test_units(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/units.yaml", out);

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	assert_int_equal(config->limits.max_header_bytes, 65536);
	assert_int_equal(config->limits.max_uri_bytes, 1024);
	assert_int_equal(config->limits.max_body_bytes, 2ULL << 30);
	assert_int_equal(config->limits.client_timeout_ms, 1500);
	assert_int_equal(config->limits.connect_timeout_ms, 250);
	assert_int_equal(config->limits.try_timeout_ms, 120000);
	assert_int_equal(config->limits.pool_idle_timeout_ms, 3600000);
	assert_int_equal(config->limits.tunnel_idle_timeout_ms, 30000);
	assert_true(config->default_route.retry.multiplier == 1.5);
	assert_true(config->default_route.retry.budget.min_per_second == 0.5);
	config_release(config);
}

/* retry.on takes a 2xx or 3xx: an operator may know that an upstream's
 * 202 means "not ready yet, ask again" (a 1xx is refused: bad_retry_on). */
static void test_retry_on_success_codes(void **state)
{
	struct config *config = test_load_ok("defaults:\n  retry:\n    on: [202, 307, reset]\n");
	const struct retry_policy *retry = &config->default_route.retry;

	assert_int_equal(retry->on, RETRY_ON_RESET);
	assert_true(retry->on_codes[202 / 8] & (1u << (202 % 8)));
	assert_true(retry->on_codes[307 / 8] & (1u << (307 % 8)));
	assert_false(retry->on_codes[503 / 8] & (1u << (503 % 8)));
	config_release(config);
}

/* good/health_hedge.yaml, field by field. */
static void test_health_hedge_fixture(void **state)
{
	char *errors;
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/health_hedge.yaml", out);
	const struct route *r;

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	assert_int_equal(config->health.down_after, 0);
	assert_int_equal(config->health.probe_interval_ms, 1500);
	assert_false(config->health.hold);
	assert_int_equal(config->default_route.retry.try_timeout_ms, 10000);
	assert_int_equal(config->default_route.retry.hedge.after_ms, 250);
	assert_int_equal(config->route_count, 4);
	r = &config->routes[0];
	assert_int_equal(r->retry.try_timeout_ms, 2000);
	assert_int_equal(r->retry.hedge.after_ms, 250);
	assert_int_equal(r->retry.hedge.max, 3);
	r = &config->routes[1];
	assert_int_equal(r->retry.try_timeout_ms, 10000);
	assert_int_equal(r->retry.hedge.after_ms, 1000);
	assert_int_equal(r->retry.hedge.max, 2);
	for (size_t i = 2; i < 4; i++) {
		r = &config->routes[i];
		assert_int_equal(r->retry.try_timeout_ms, 10000);
		assert_int_equal(r->retry.hedge.after_ms, 250);
		assert_int_equal(r->retry.hedge.max, 1);
	}
	config_release(config);
}

/* All errors come out, sorted by position, even though the tables read
 * routes after defaults. */
static void test_errors_in_document_order(void **state)
{
	test_load_fails(
		"routes:\n"
		"  - name: a\n"
		"    retry: { max_attempts: 0 }\n"
		"defaults:\n"
		"  retry: { deadline: soon }\n"
		"limits:\n"
		"  try_timeout: 0s\n",
		"test.yaml:3:28: routes[0].retry.max_attempts: expected a whole number of at "
		"least 1, got \"0\"\n"
		"test.yaml:5:22: defaults.retry.deadline: expected a duration like 32s, got "
		"\"soon\"\n"
		"test.yaml:7:16: limits.try_timeout: must be longer than 0s\n");
}

/* A whole number past what a count holds says so, rather than that it is
 * not a whole number. */
static void test_count_too_large(void **state)
{
	test_load_fails("limits:\n  max_connections: 5000000000\n  pool_max_idle: 4294967296\n"
			"defaults:\n  retry: { max_attempts: 99999999999 }\n",
			"test.yaml:2:20: limits.max_connections: too large (at most "
			"4294967295)\n"
			"test.yaml:3:18: limits.pool_max_idle: too large (at most 4294967295)\n"
			"test.yaml:5:26: defaults.retry.max_attempts: too large (at most "
			"4294967295)\n");
}

/* Leading zeros add no value: a number padded past the digit limit is the
 * number it writes, not one too large; a long fraction still counts. */
static void test_leading_zeros(void **state)
{
	struct config *config =
		test_load_ok("limits:\n  max_connections: 00000000000000000000000012\n"
			     "  max_header_bytes: 0000000000000000000064KiB\n"
			     "  connect_timeout: 00000000000000000000002.5s\n"
			     "defaults:\n  retry: { max_attempts: 0000000000000005, multiplier: "
			     "0000000000000000003 }\n");

	assert_int_equal(config->limits.max_connections, 12);
	assert_int_equal(config->limits.max_header_bytes, 64 * 1024);
	assert_int_equal(config->limits.connect_timeout_ms, 2500);
	assert_int_equal(config->default_route.retry.max_attempts, 5);
	assert_true(config->default_route.retry.multiplier == 3.0);
	config_release(config);
	test_load_fails("defaults:\n  retry: { max_attempts: 0000009999999999999999 }\n",
			"test.yaml:2:26: defaults.retry.max_attempts: too large (at most "
			"4294967295)\n");
}

/* A YAML merge key is not a key the config has: say that, not which short
 * key it is a couple of edits from. */
static void test_merge_key(void **state)
{
	test_load_fails("defaults:\n  retry:\n    <<: {max_attempts: 3}\n",
			"test.yaml:3:5: defaults.retry.<<: merge keys are not supported; write "
			"the keys out\n");
	/* quoted, "<<" is an ordinary key (YAML 1.1's merge key is a plain
	 * scalar), unknown like any other */
	test_load_fails("defaults:\n  retry:\n    \"<<\": {max_attempts: 3}\n",
			"test.yaml:3:5: defaults.retry.<<: unknown key\n");
}

static void test_did_you_mean(void **state)
{
	test_load_fails("limits:\n  max_conections: 5\n  frobnicate: 1\n",
			"test.yaml:2:3: limits.max_conections: unknown key (did you mean "
			"\"max_connections\"?)\n"
			"test.yaml:3:3: limits.frobnicate: unknown key\n");
}

/* A path or key with a newline in it stays on its error's line: every line
 * starts with file:line:column, as tools reading the errors expect. */
static void test_control_bytes_in_messages(void **state)
{
	test_load_fails(
		"limits:\n  spool_dir: \"/no/such\\ndir\"\n"
		"routes:\n  - name: a\n    tls: {ca_file: \"/no\\tca\"}\n"
		"\"bad\\rkey\": 1\n",
		"test.yaml:2:14: limits.spool_dir: cannot use \"/no/such\\x0adir\": No "
		"such file or directory\n"
		"test.yaml:5:20: routes[0].tls.ca_file: cannot read \"/no\\x09ca\": No such "
		"file or directory\n"
		"test.yaml:6:1: bad\\x0dkey: unknown key\n");
	/* the same for what the YAML reader itself refuses: a duplicate key,
	 * a tag (libyaml decodes %0A in it) and a key path around another;
	 * the rest of the file is still checked, and every error comes in
	 * the file's order */
	test_load_fails("\"a\\nb\": 1\n\"a\\nb\": 2\nx: !<%0Afoo> 1\n\"k\\ny\": {a: 1, a: 2}\n",
			"test.yaml:1:1: a\\x0ab: unknown key\n"
			"test.yaml:2:1: a\\x0ab: duplicate key, first at line 1\n"
			"test.yaml:3:1: x: unknown key\n"
			"test.yaml:3:4: x: tags are not supported (found \"\\x0afoo\")\n"
			"test.yaml:4:1: k\\x0ay: unknown key\n"
			"test.yaml:4:16: k\\x0ay.a: duplicate key, first at line 4\n");
	/* a value quoted in a message is escaped once, where it is quoted:
	 * the message's own escaping leaves its backslashes alone */
	test_load_fails("limits:\n  max_header_bytes: \"a\\nb\"\n  max_uri_bytes: \"c\\\\d\"\n"
			"  max_connections: \"q\\\"x\"\n",
			"test.yaml:2:21: limits.max_header_bytes: expected a size like 64KiB "
			"(units: KiB, MiB, GiB), got \"a\\x0ab\"\n"
			"test.yaml:3:18: limits.max_uri_bytes: expected a size like 64KiB "
			"(units: KiB, MiB, GiB), got \"c\\\\d\"\n"
			"test.yaml:4:20: limits.max_connections: expected a whole number of at "
			"least 1, got \"q\\\"x\"\n");
}

/* A backslash the file holds is written doubled wherever the file's text
 * is named (a key, a path, a value, a key the YAML reader refuses), so it
 * cannot be read as one of the escapes above. */
static void test_backslashes_in_messages(void **state)
{
	test_load_fails("limits:\n  spool_dir: '/no\\x0a'\n"
			"routes:\n  - name: a\n    tls: {ca_file: '/no\\tca'}\n"
			"'bad\\x0dkey': 1\n",
			"test.yaml:2:14: limits.spool_dir: cannot use \"/no\\\\x0a\": No such "
			"file or directory\n"
			"test.yaml:5:20: routes[0].tls.ca_file: cannot read \"/no\\\\tca\": No "
			"such file or directory\n"
			"test.yaml:6:1: bad\\\\x0dkey: unknown key\n");
	test_load_fails("'k\\y': {a: 1, a: 2}\n",
			"test.yaml:1:1: k\\\\y: unknown key\n"
			"test.yaml:1:15: k\\\\y.a: duplicate key, first at line 1\n");
}

/* admin: with a null value (~, null, nothing after the colon) is no admin
 * listener, as the key left out is and as a null is for fleet:, intercept:
 * and tls.ca_file, not an address refused as "~". */
static void test_admin_null(void **state)
{
	static const char *const texts[] = { "admin: ~\n", "admin: null\n", "admin:\n",
					     "admin: # disabled for now\nlog: {level: info}\n" };

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct config *config = test_load_ok(texts[i]);

		assert_null(config->admin_address);
		config_release(config);
	}
	/* quoted, it is text: an address, and not one */
	test_load_fails("admin: \"~\"\n",
			"test.yaml:1:8: admin: invalid address \"~\": expected host:port\n");
}

static void test_hold_release(void **state)
{
	struct config *config = test_load_ok("admin: 127.0.0.1:9901\n");

	assert_ptr_equal(config_hold(config), config);
	assert_int_equal(config->refs, 2);
	config_release(config);
	assert_int_equal(config->refs, 1);
	assert_string_equal(config->admin_address, "127.0.0.1:9901");
	config_release(config);
	config_release(NULL);
}

/* intercept: the patterns as allow_hosts takes them, the CA's paths made
 * absolute against the config file, and the CA loaded with the config. */
/* limits.spool_max and spool_dir: a directory named relative to the config
 * file is stored absolute; the spool is off by default. */
static void test_spool(void **state)
{
	char *errors, expected[PATH_MAX + 8];
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/spool.yaml", out);

	fclose(out);
	if (config == NULL)
		fail_msg("good/spool.yaml should load, got:\n%s", errors);
	free(errors);
	assert_int_equal(config->limits.spool_max, 64 * 1024 * 1024);
	assert_non_null(realpath("good", expected));
	assert_string_equal(config->limits.spool_dir, expected);
	config_release(config);

	/* spool_max is compared with replay_buffer whichever comes first */
	test_load_fails("limits:\n  spool_max: 4MiB\n  replay_buffer: 8MiB\n",
			"test.yaml:2:14: limits.spool_max: must be 0 (off) or more than "
			"replay_buffer (8388608 bytes)\n");
	/* the default replay_buffer is 8MiB */
	test_load_fails("limits: {spool_max: 8MiB}\n",
			"test.yaml:1:21: limits.spool_max: must be 0 (off) or more than "
			"replay_buffer (8388608 bytes)\n");
	/* the default directory is blamed on the key that turned the spool on */
	config = test_load_ok("limits: {spool_max: 0, spool_dir: /tmp}\n");
	assert_int_equal(config->limits.spool_max, 0);
	config_release(config);
	/* a directory in which no file can be made, whoever runs the test:
	 * its permission lets the process itself in, and its lookup answers
	 * ENOENT for any name that is no descriptor (in /proc, a user other
	 * than root would read EACCES where root reads ENOENT) */
	snprintf(expected, sizeof(expected),
		 "test.yaml:1:38: limits.spool_dir: cannot make a spool file in \"/proc/%ld/fd\": "
		 "No such file or directory\n",
		 (long)getpid());
	test_load_fails("limits: {spool_max: 1GiB, spool_dir: /proc/self/fd}\n", expected);

	/* spool_total: 1GiB by default, 0 for no cap, never below spool_max */
	config = test_load_ok("limits: {spool_max: 16MiB, spool_dir: /tmp}\n");
	assert_int_equal(config->limits.spool_total, 1ULL << 30);
	config_release(config);
	config = test_load_ok("limits: {spool_max: 2GiB, spool_total: 0, spool_dir: /tmp}\n");
	assert_int_equal(config->limits.spool_total, 0);
	config_release(config);
	/* left at its default, the cap makes room for one body over 1GiB */
	config = test_load_ok("limits: {spool_max: 2GiB, spool_dir: /tmp}\n");
	assert_int_equal(config->limits.spool_total, 2ULL << 30);
	config_release(config);
	config = test_load_ok("limits: {spool_max: 16MiB, spool_total: 16MiB, spool_dir: /tmp}\n");
	assert_int_equal(config->limits.spool_total, 16 * 1024 * 1024);
	config_release(config);
	test_load_fails("limits: {spool_max: 16MiB, spool_total: 8MiB, spool_dir: /tmp}\n",
			"test.yaml:1:41: limits.spool_total: must be 0 (no cap) or at least "
			"spool_max (16777216 bytes)\n");
	/* a spool_total that is not a size is refused once, not compared too */
	test_load_fails("limits: {spool_max: 2GiB, spool_total: lots, spool_dir: /tmp}\n",
			"test.yaml:1:40: limits.spool_total: expected a size like 64KiB (units: "
			"KiB, MiB, GiB), got \"lots\"\n");
	/* the spool off: spool_total says nothing */
	config = test_load_ok("limits: {spool_max: 0, spool_total: 1KiB}\n");
	config_release(config);
	/* another key's error hides neither check: all errors are reported */
	snprintf(expected, sizeof(expected),
		 "test.yaml:1:27: limits.max_connections: expected a whole number of at "
		 "least 1, got \"0\"\n"
		 "test.yaml:1:60: limits.spool_total: must be 0 (no cap) or at least "
		 "spool_max (2147483648 bytes)\n"
		 "test.yaml:1:77: limits.spool_dir: cannot make a spool file in \"/proc/%ld/fd\": "
		 "No such file or directory\n",
		 (long)getpid());
	test_load_fails("limits: {max_connections: 0, spool_max: 2GiB, spool_total: 1GiB, "
			"spool_dir: /proc/self/fd}\n",
			expected);
}

/* retry_memory: 256MiB by default, 0 for no cap, never below replay_buffer
 * or retry_response_buffer */
static void test_retry_memory(void **state)
{
	struct config *config;

	(void)state;
	config = test_load_ok("limits: {retry_memory: 0}\n");
	assert_int_equal(config->limits.retry_memory, 0);
	config_release(config);
	config = test_load_ok("limits: {replay_buffer: 1MiB, retry_memory: 1MiB}\n");
	assert_int_equal(config->limits.retry_memory, 1024 * 1024);
	config_release(config);
	/* left at its default, the cap makes room for one body of replay_buffer */
	config = test_load_ok("limits: {replay_buffer: 512MiB}\n");
	assert_int_equal(config->limits.retry_memory, 512ULL << 20);
	config_release(config);
	/* ... and for one response of retry_response_buffer */
	config = test_load_ok("limits: {retry_response_buffer: 300MiB}\n");
	assert_int_equal(config->limits.retry_memory, 300ULL << 20);
	config_release(config);
	test_load_fails("limits: {replay_buffer: 2MiB, retry_memory: 1MiB}\n",
			"test.yaml:1:45: limits.retry_memory: must be 0 (no cap) or at least "
			"replay_buffer and retry_response_buffer (2097152 bytes)\n");
	/* one that is not a size is refused once, not compared too */
	test_load_fails("limits: {retry_memory: lots}\n",
			"test.yaml:1:24: limits.retry_memory: expected a size like 64KiB (units: "
			"KiB, MiB, GiB), got \"lots\"\n");
}

static void test_intercept(void **state)
{
	char *errors, *cert = realpath("ca/ca.pem", NULL), *key = realpath("ca/ca-key.pem", NULL);
	size_t len;
	FILE *out = open_memstream(&errors, &len);
	struct config *config = config_load_file("good/intercept.yaml", out);
	static const char *const hosts[] = { "api.example.com", "*.googleapis.com", "127.0.0.1",
					     "::1", "*" };
	const struct intercept_config *ic;
	struct ca *ca;
	X509 *leaf;
	EVP_PKEY *leaf_key;
	char err[256];

	fclose(out);
	if (config == NULL)
		fail_msg("%s", errors);
	free(errors);
	ic = &config->intercept;
	assert_int_equal(ic->host_count, 5);
	for (size_t i = 0; i < 5; i++)
		assert_string_equal(ic->hosts[i], hosts[i]);
	assert_string_equal(ic->ca_cert, cert);
	assert_string_equal(ic->ca_key, key);
	assert_non_null(ic->ca);
	assert_int_equal(ca_leaf(ic->ca, "api.example.com", 15, time(NULL), &leaf, &leaf_key, err,
				 sizeof(err)),
			 0);
	assert_int_equal(ca_leaves_made(ic->ca), 1);
	/* whoever holds the CA keeps it past the config */
	ca = ca_hold(ic->ca);
	config_release(config);
	assert_int_equal(
		ca_leaf(ca, "api.example.com", 15, time(NULL), &leaf, &leaf_key, err, sizeof(err)),
		0);
	assert_int_equal(ca_leaves_made(ca), 1);
	ca_release(ca);

	/* from memory, relative paths are relative to the working directory */
	config = test_load_ok("intercept:\n"
			      "  hosts: [\"*.Example.com\"]\n"
			      "  ca_cert: ca/ca.pem\n"
			      "  ca_key: ca/ca-key.pem\n");
	assert_string_equal(config->intercept.hosts[0], "*.example.com");
	assert_string_equal(config->intercept.ca_cert, cert);
	assert_non_null(config->intercept.ca);
	assert_int_equal(config->intercept.server_first_after_ms, 2000);
	config_release(config);
	config = test_load_ok("intercept:\n"
			      "  hosts: [a.example]\n"
			      "  ca_cert: ca/ca.pem\n"
			      "  ca_key: ca/ca-key.pem\n"
			      "  server_first_after: 0s\n");
	assert_int_equal(config->intercept.server_first_after_ms, 0);
	config_release(config);

	/* absent, or left empty with its keys commented out: nothing is
	 * intercepted */
	config = test_load_ok("log: { level: info }\n");
	assert_null(config->intercept.ca);
	assert_int_equal(config->intercept.host_count, 0);
	config_release(config);
	config = test_load_ok("intercept:\n"
			      "#  hosts: [api.example.com]\n");
	assert_null(config->intercept.ca);
	config_release(config);

	/* the CA's failure points at the file to blame */
	test_load_fails(
		"intercept:\n"
		"  hosts: [api.example.com]\n"
		"  ca_cert: ca/ca.pem\n"
		"  ca_key: ca-open/ca-key.pem\n",
		"test.yaml:4:11: intercept.ca_key: readable by group or others (mode 0644): "
		"chmod 600 it\n");
	test_load_fails("intercept: { hosts: [a.example], ca_cert: leaf/cert.pem, "
			"ca_key: ca/ca-key.pem }\n",
			"test.yaml:1:43: intercept.ca_cert: not a CA certificate (basicConstraints "
			"CA:TRUE is missing)\n");
	/* other errors in the section do not hide the CA's */
	test_load_fails("intercept:\n"
			"  hosts: [\"a:1\"]\n"
			"  ca_cert: ca/ca.pem\n"
			"  ca_key: ca-other/ca-key.pem\n"
			"  extra: 1\n",
			"test.yaml:2:11: intercept.hosts[0]: invalid host pattern \"a:1\": a host "
			"pattern has no port\n"
			"test.yaml:4:11: intercept.ca_key: does not match the certificate\n"
			"test.yaml:5:3: intercept.extra: unknown key\n");
	test_load_fails("intercept: [api.example.com]\n",
			"test.yaml:1:12: intercept: expected a mapping, got a list\n");
	free(cert);
	free(key);
}

static void test_parse_duration(void **state)
{
	static const struct {
		const char *text;
		int rc;
		uint64_t ms;
	} cases[] = {
		{ "250ms", 0, 250 },
		{ "1s", 0, 1000 },
		{ "5m", 0, 300000 },
		{ "1h", 0, 3600000 },
		{ "0s", 0, 0 },
		{ "0ms", 0, 0 },
		{ "1.5s", 0, 1500 },
		{ "0.25s", 0, 250 },
		{ "1.5m", 0, 90000 },
		{ "0.001s", 0, 1 },
		{ "007s", 0, 7000 },
		{ "1.0ms", 0, 1 },
		{ "1.5ms", -1, 0 },
		{ "0.0001s", -1, 0 },
		{ "32", -1, 0 },
		{ "fast", -1, 0 },
		{ "", -1, 0 },
		{ "s", -1, 0 },
		{ "1", -1, 0 },
		{ "1 s", -1, 0 },
		{ " 1s", -1, 0 },
		{ "1s ", -1, 0 },
		{ "-1s", -1, 0 },
		{ "+1s", -1, 0 },
		{ "1S", -1, 0 },
		{ "1d", -1, 0 },
		{ "1.s", -1, 0 },
		{ ".5s", -1, 0 },
		{ "1e3ms", -1, 0 },
		{ "1sec", -1, 0 },
		{ "999999999999999999h", -1, 0 },
		/* trailing zeros of a fraction change nothing */
		{ "1.7500000000000h", 0, 6300000 },
		{ "0.500000000000000m", 0, 30000 },
		{ "2.000000000000000s", 0, 2000 },
		{ "0.123456789012345h", -1, 0 }, /* no whole millisecond, and over 64 bits */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ms = 12345;
		int rc = config_values_duration(cases[i].text, &ms);

		if (rc != cases[i].rc || (rc == 0 && ms != cases[i].ms))
			fail_msg("\"%s\": rc %d ms %llu", cases[i].text, rc,
				 (unsigned long long)ms);
	}
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *text;
		int rc;
		uint64_t bytes;
	} cases[] = {
		{ "0", 0, 0 },		{ "1024", 0, 1024 },	{ "64KiB", 0, 65536 },
		{ "8MiB", 0, 8 << 20 }, { "1GiB", 0, 1 << 30 }, { "1000GiB", 0, 1000ULL << 30 },
		{ "64KB", -1, 0 },	{ "64kib", -1, 0 },	{ "64 KiB", -1, 0 },
		{ "1.5MiB", -1, 0 },	{ "KiB", -1, 0 },	{ "", -1, 0 },
		{ "-1", -1, 0 },	{ "1TiB", -1, 0 },	{ "big", -1, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t bytes = 12345;
		int rc = config_values_size(cases[i].text, &bytes);

		if (rc != cases[i].rc || (rc == 0 && bytes != cases[i].bytes))
			fail_msg("\"%s\": rc %d bytes %llu", cases[i].text, rc,
				 (unsigned long long)bytes);
	}
}

static void test_parse_upstream_url(void **state)
{
	static const struct {
		const char *text;
		bool tls;
		const char *host;
		unsigned port;
		const char *authority;
	} good[] = {
		{ "http://example.com", false, "example.com", 80, "example.com" },
		{ "https://example.com", true, "example.com", 443, "example.com" },
		{ "https://example.com/", true, "example.com", 443, "example.com" },
		{ "https://Example.COM:8443", true, "example.com", 8443, "example.com:8443" },
		{ "http://example.com:443", false, "example.com", 443, "example.com:443" },
		{ "https://example.com:443", true, "example.com", 443, "example.com" },
		{ "HTTPS://api.example.com", true, "api.example.com", 443, "api.example.com" },
		{ "http://127.0.0.1:8080", false, "127.0.0.1", 8080, "127.0.0.1:8080" },
		{ "http://[::1]", false, "::1", 80, "[::1]" },
		{ "https://[2001:db8::1]:9443", true, "2001:db8::1", 9443, "[2001:db8::1]:9443" },
		{ "http://my_host-1.internal", false, "my_host-1.internal", 80,
		  "my_host-1.internal" },
		{ "http://a-b.c-d.example:81", false, "a-b.c-d.example", 81, "a-b.c-d.example:81" },
		{ "http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
		  false, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", 80,
		  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com" },
		/* absolute: the dot stays in the host, for the resolver, and is
		 * left out of the Host field */
		{ "https://API.example.com.:8443/", true, "api.example.com.", 8443,
		  "api.example.com:8443" },
		{ "http://localhost.", false, "localhost.", 80, "localhost" },
	};
	static const char *const bad[] = {
		"ftp://example.com",
		"example.com",
		"//example.com",
		"http:/example.com",
		"http://",
		"http://:80",
		"http://example.com/v1",
		"http://example.com//",
		"http://example.com?x=1",
		"http://example.com/?x=1",
		"http://example.com#top",
		"http://user@example.com",
		"http://user:pw@example.com",
		"http://example.com:0",
		"http://example.com:65536",
		"http://example.com:",
		"http://example.com:http",
		"http://[::1",
		"http://[::1]x",
		"http://[example.com]",
		"http://::1",
		"http://exa mple.com",
		"http://example..com",
		"http://.example.com",
		"http://example.com..",
		"http://.",
		"http://.:80",
		"http://[::1].",
		/* labels as DNS has them */
		"http://-example.com",
		"http://example-.com",
		"http://api.-x.example",
		"http://a-.example.com",
		"http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com",
		/* a last label of digits is no name (no top-level domain is
		 * all digits): an IPv4 address, whole and exact, or nothing; the
		 * resolver would only be asked for these, and fail every time */
		"http://127.1",
		"http://10.0.0.256:8080",
		"http://1.2.3.4.5",
		"http://0x7f.1",
		"http://127.0.0.1.",
		"http://010.0.0.1",
		"http://api.example.123",
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct upstream_url url;
		const char *why;

		if (config_values_url(good[i].text, &url, &why) != 0)
			fail_msg("\"%s\" should parse", good[i].text);
		assert_int_equal(url.tls, good[i].tls);
		assert_string_equal(url.host, good[i].host);
		assert_int_equal(url.port, good[i].port);
		assert_string_equal(url.authority, good[i].authority);
		assert_string_equal(url.text, good[i].text);
		config_values_url_free(&url);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct upstream_url url;
		const char *why;

		if (config_values_url(bad[i], &url, &why) == 0)
			fail_msg("\"%s\" should not parse", bad[i]);
	}
}

/* A connect to the second address reaches a socket bound to the first: the
 * admin endpoint's check, which --explain makes too. */
static void test_connect_reaches(void **state)
{
	static const struct {
		const char *bound, *to;
		bool reaches;
	} cases[] = {
		{ "127.0.0.1:9901", "127.0.0.1:9901", true },
		{ "127.0.0.1:9901", "0.0.0.0:9901", true },
		{ "127.0.0.1:9901", "[::ffff:127.0.0.1]:9901", true },
		{ "127.0.0.1:9901", "127.0.0.1:9902", false },
		{ "127.0.0.1:9901", "127.0.0.2:9901", false },
		{ "127.0.0.1:9901", "[::1]:9901", false },
		{ "0.0.0.0:9901", "127.0.0.2:9901", true },
		{ "0.0.0.0:9901", "192.0.2.1:9901", false },
		/* 0.0.0.0 takes IPv4 alone: [::1] on its port is another socket */
		{ "0.0.0.0:9901", "[::1]:9901", false },
		{ "0.0.0.0:9901", "[::]:9901", false },
		{ "0.0.0.0:9901", "[::ffff:127.0.0.1]:9901", true },
		{ "[::]:9901", "127.0.0.1:9901", true },
		{ "[::1]:9901", "[::]:9901", true },
		{ "[::]:9901", "[::1]:9901", true },
		/* a socket on an IPv4-mapped address takes IPv4 connects */
		{ "[::ffff:127.0.0.1]:9901", "127.0.0.1:9901", true },
		{ "[::ffff:127.0.0.1]:9901", "[::ffff:127.0.0.1]:9901", true },
		{ "[::ffff:127.0.0.1]:9901", "0.0.0.0:9901", true },
		{ "[::ffff:127.0.0.1]:9901", "127.0.0.2:9901", false },
		{ "[::ffff:0.0.0.0]:9901", "127.0.0.2:9901", true },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sockaddr_storage bound, to;
		socklen_t bound_len, to_len;
		const char *why;

		assert_int_equal(config_values_address(cases[i].bound, &bound, &bound_len, &why),
				 0);
		assert_int_equal(config_values_address(cases[i].to, &to, &to_len, &why), 0);
		if (config_values_connect_reaches(&bound, (const struct sockaddr *)&to, to_len) !=
		    cases[i].reaches)
			fail_msg("%s to %s: expected %s", cases[i].to, cases[i].bound,
				 cases[i].reaches ? "reaches" : "does not reach");
	}
}

/* A socket bound to 0.0.0.0 or [::] takes connects to every address of
 * this host, not only its loopback ones: the machine's own interface
 * addresses (found with getifaddrs, no traffic) reach it on its port, and
 * not on another port. Skipped on a host with loopback alone. */
static void test_connect_reaches_own_addresses(void **state)
{
	struct ifaddrs *list, *ifa;
	int seen = 0;

	(void)state;
	if (getifaddrs(&list) < 0)
		skip();
	for (ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
		struct sockaddr_storage to, v4_any, v6_any;
		socklen_t to_len, any_len;
		const char *why;
		char text[INET6_ADDRSTRLEN];
		int family = ifa->ifa_addr != NULL ? ifa->ifa_addr->sa_family : AF_UNSPEC;

		if (family != AF_INET && family != AF_INET6)
			continue;
		to_len = family == AF_INET ? sizeof(struct sockaddr_in)
					   : sizeof(struct sockaddr_in6);
		memset(&to, 0, sizeof(to));
		memcpy(&to, ifa->ifa_addr, to_len);
		if (config_values_is_loopback(&to))
			continue;
		((struct sockaddr_in *)&to)->sin_port = htons(9901); /* same place in both */
		inet_ntop(family,
			  family == AF_INET ? (void *)&((struct sockaddr_in *)&to)->sin_addr
					    : (void *)&((struct sockaddr_in6 *)&to)->sin6_addr,
			  text, sizeof(text));
		assert_int_equal(config_values_address("0.0.0.0:9901", &v4_any, &any_len, &why), 0);
		assert_int_equal(config_values_address("[::]:9901", &v6_any, &any_len, &why), 0);
		/* [::] is dual-stack; 0.0.0.0 takes IPv4 alone */
		if (!config_values_connect_reaches(&v6_any, (const struct sockaddr *)&to, to_len))
			fail_msg("%s:9901 should reach [::]:9901", text);
		if (family == AF_INET &&
		    !config_values_connect_reaches(&v4_any, (const struct sockaddr *)&to, to_len))
			fail_msg("%s:9901 should reach 0.0.0.0:9901", text);
		((struct sockaddr_in *)&to)->sin_port = htons(9902);
		if (config_values_connect_reaches(&v6_any, (const struct sockaddr *)&to, to_len))
			fail_msg("%s:9902 should not reach [::]:9901", text);
		seen++;
	}
	freeifaddrs(list);
	if (seen == 0)
		skip();
}

/* Out of descriptors, whether an address is this host's cannot be asked
 * of the kernel: neither a yes (a refusal as a loop) nor a no (a connect
 * to what may be the proxy itself), but -1 with errno, which the proxy
 * takes as its own shortage. An address elsewhere (TEST-NET-1, never
 * connected to) on a wildcard socket's port. */
static void test_connect_reaches_cannot_tell_without_descriptors(void **state)
{
	struct sockaddr_storage any, to;
	socklen_t any_len, to_len;
	struct rlimit saved, low;
	const char *why;
	int fd, reaches, err;

	(void)state;
	assert_int_equal(config_values_address("0.0.0.0:9901", &any, &any_len, &why), 0);
	assert_int_equal(config_values_address("192.0.2.1:9901", &to, &to_len, &why), 0);
	assert_int_equal(config_values_connect_reaches(&any, (const struct sockaddr *)&to, to_len),
			 0);
	/* the lowest free descriptor number taken, and the limit just above
	 * it: every number below the limit is taken */
	fd = dup(0);
	assert_true(fd >= 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	low = saved;
	low.rlim_cur = (rlim_t)fd + 1;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	errno = 0;
	reaches = config_values_connect_reaches(&any, (const struct sockaddr *)&to, to_len);
	err = errno;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	close(fd);
	assert_int_equal(reaches, -1);
	assert_int_equal(err, EMFILE);
	/* a loopback address needs no look: still a yes */
	assert_int_equal(config_values_address("127.0.0.1:9901", &to, &to_len, &why), 0);
	assert_int_equal(config_values_connect_reaches(&any, (const struct sockaddr *)&to, to_len),
			 1);
}

/* Refuse socket(AF_NETLINK, ...) with EAFNOSUPPORT, as systemd's
 * RestrictAddressFamilies= without AF_NETLINK (the shipped unit's) does:
 * getifaddrs() then fails with plenty of descriptors. */
static bool test_deny_netlink(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAFNOSUPPORT & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(filter) / sizeof(filter[0]), filter };

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* A kernel that refuses the interfaces' list for a reason other than the
 * proxy's own shortage (no netlink socket allowed) is no shortage: an
 * address the bind probe takes as this host's counts as its own (the
 * safe side, a refusal), not -1, which would fail every try to it as the
 * proxy's shortage and close idle pooled connections for nothing. Run in
 * a child: the filter cannot be taken off. */
static void test_connect_reaches_interfaces_refused(void **state)
{
	struct ifaddrs *list, *ifa;
	struct sockaddr_storage to, any;
	socklen_t to_len = 0, any_len;
	const char *why;
	pid_t child;
	int status;

	(void)state;
	if (getifaddrs(&list) < 0)
		skip();
	for (ifa = list; ifa != NULL && to_len == 0; ifa = ifa->ifa_next) {
		if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != AF_INET)
			continue;
		memset(&to, 0, sizeof(to));
		memcpy(&to, ifa->ifa_addr, sizeof(struct sockaddr_in));
		if (!config_values_is_loopback(&to))
			to_len = sizeof(struct sockaddr_in);
	}
	freeifaddrs(list);
	if (to_len == 0)
		skip(); /* no IPv4 address but loopback's */
	((struct sockaddr_in *)&to)->sin_port = htons(9901);
	assert_int_equal(config_values_address("0.0.0.0:9901", &any, &any_len, &why), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int reaches;

		if (!test_deny_netlink())
			_exit(77);
		if (getifaddrs(&list) == 0)
			_exit(78); /* the filter did not take */
		reaches = config_values_connect_reaches(&any, (const struct sockaddr *)&to, to_len);
		_exit(reaches == 1 ? 0 : 10 + reaches);
	}
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77 || WEXITSTATUS(status) == 78)
		skip();
	/* 9: -1, 10: 0 */
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_fixtures),
		cmocka_unit_test(test_bad_fixtures),
		cmocka_unit_test(test_bad_fixtures_paired),
		cmocka_unit_test(test_embedded_default),
		cmocka_unit_test(test_text_name_in_errors),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_load_reports_lines),
		cmocka_unit_test(test_load_reports_in_order),
		cmocka_unit_test(test_load_missing_file),
		cmocka_unit_test(test_load_regular_only),
		cmocka_unit_test(test_load_oversized_file),
		cmocka_unit_test(test_load_good_and_embedded),
		cmocka_unit_test(test_default_path),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_inheritance),
		cmocka_unit_test(test_inheritance_any_order),
		cmocka_unit_test(test_try_timeout_inheritance),
		cmocka_unit_test(test_hedge_inheritance),
		cmocka_unit_test(test_hedge_after_try_timeout),
		cmocka_unit_test(test_backoff_past_deadline),
		cmocka_unit_test(test_health_hedge_fixture),
		cmocka_unit_test(test_relative_ca_file),
		cmocka_unit_test(test_spec_example_routes),
		cmocka_unit_test(test_sidecar_values),
		cmocka_unit_test(test_units),
		cmocka_unit_test(test_errors_in_document_order),
		cmocka_unit_test(test_count_too_large),
		cmocka_unit_test(test_leading_zeros),
		cmocka_unit_test(test_admin_null),
		cmocka_unit_test(test_merge_key),
		cmocka_unit_test(test_did_you_mean),
		cmocka_unit_test(test_hold_release),
		cmocka_unit_test(test_intercept),
		cmocka_unit_test(test_spool),
		cmocka_unit_test(test_retry_memory),
		cmocka_unit_test(test_control_bytes_in_messages),
		cmocka_unit_test(test_backslashes_in_messages),
		cmocka_unit_test(test_retry_on_success_codes),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_upstream_url),
		cmocka_unit_test(test_connect_reaches),
		cmocka_unit_test(test_connect_reaches_own_addresses),
		cmocka_unit_test(test_connect_reaches_cannot_tell_without_descriptors),
		cmocka_unit_test(test_connect_reaches_interfaces_refused),
	};

	return cmocka_run_group_tests(tests, test_setup, test_teardown);
}
