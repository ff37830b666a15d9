/* Command line, config selection, signals; builds the proxy and runs it. */

#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "ca.h"
#include "config.h"
#include "explain.h"
#include "log.h"
#include "proxy.h"
#include "xmalloc.h"

#ifndef RETRYPROXY_VERSION
#define RETRYPROXY_VERSION "0.0.0"
#endif

enum main_exit {
	MAIN_EXIT_OK = 0,      /* clean shutdown, or --check passed */
	MAIN_EXIT_CONFIG = 1,  /* bad config or usage */
	MAIN_EXIT_RUNTIME = 2, /* cannot bind, ... */
};

struct main_signals {
	struct proxy *proxy;
	const char *config_path; /* NULL: embedded */
	bool named;		 /* -c named it: a reload reads it; else it looks again */
};

static void main_usage(FILE *out)
{
	fprintf(out,
		"usage: retryproxy [-c FILE] [--check] [--version] [--help]\n"
		"       retryproxy [-c FILE] --explain METHOD URL [-H 'Name: value']... "
		"[--body FILE]\n"
		"       retryproxy --make-ca DIR\n"
		"\n"
		"  -c, --config FILE  use this config file; without it ./conf/retryproxy.yaml,\n"
		"                     then /etc/retryproxy/retryproxy.yaml, then the embedded "
		"default\n"
		"  --check            validate the config, print ok or the errors, and exit\n"
		"  --explain METHOD URL\n"
		"                     print what the proxy would do with this request (route,\n"
		"                     upstream, idempotent, retry_on, max_attempts, deadline,\n"
		"                     waits) without listening or sending anything\n"
		"  -H, --header 'Name: value'\n"
		"                     a request header for --explain; repeatable\n"
		"  --body FILE        the request body for --explain\n"
		"  --make-ca DIR      create a local CA for HTTPS interception (intercept:):\n"
		"                     DIR/ca.pem and DIR/ca-key.pem; never overwrites them\n"
		"  --version          print the version and exit\n"
		"  -h, --help         print this help and exit\n"
		"\n"
		"signals: SIGHUP reloads the config; SIGTERM and SIGINT drain and exit;\n"
		"         SIGUSR1 and SIGUSR2 are ignored\n");
}

/* A path as a YAML value: plain when that reads back the same, else quoted. */
static void main_print_yaml_path(const char *path)
{
	bool plain = path[0] != '\0' && strchr("~!&*|>'\"%@`-?:,[]{}#", path[0]) == NULL;

	for (const char *p = path; plain && *p != '\0'; p++)
		plain = (unsigned char)*p > 0x20 && *p != 0x7f && strchr("#:,[]{}\"'", *p) == NULL;
	if (plain) {
		fputs(path, stdout);
		return;
	}
	putchar('"');
	for (const char *p = path; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if ((unsigned char)*p < 0x20 || *p == 0x7f)
			printf("\\x%02x", (unsigned char)*p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* A path as one shell word: as it is when nothing in it is special to a
 * shell, else in single quotes. */
static void main_print_shell_path(const char *path)
{
	bool plain = path[0] != '\0';

	for (const char *p = path; plain && *p != '\0'; p++)
		plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			       "/._-+,:@%=",
			       *p) != NULL;
	if (plain) {
		fputs(path, stdout);
		return;
	}
	putchar('\'');
	for (const char *p = path; *p != '\0'; p++) {
		if (*p == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*p);
	}
	putchar('\'');
}

/* dir/name, allocated; realpath leaves no trailing slash, a DIR as given may
 * have one. */
static char *main_path_join(const char *dir, const char *name)
{
	size_t dir_len = strlen(dir), name_len = strlen(name);
	bool slash = dir_len > 0 && dir[dir_len - 1] == '/';
	char *path = xmalloc(dir_len + 1 + name_len + 1);

	memcpy(path, dir, dir_len);
	if (!slash)
		path[dir_len++] = '/';
	memcpy(path + dir_len, name, name_len + 1);
	return path;
}

/* What --check, --explain, --make-ca, --version and --help print is their
 * answer: one that did not reach its file (a full disk, a closed pipe) is
 * no answer, whatever it said, and a script must not take it for one. */
static int main_answer_written(const char *option)
{
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "retryproxy: %s: cannot write the answer: %s\n", option,
			errno != 0 ? strerror(errno) : "write error");
		return MAIN_EXIT_RUNTIME;
	}
	return MAIN_EXIT_OK;
}

/* --make-ca DIR: make the CA, then say what was made and what to do next.
 * Paths are printed whole, so that one with spaces or quotes reads back as
 * itself: shell-quoted in the text, a YAML scalar in the config lines. */
static int main_make_ca(const char *dir)
{
	char err[512], *abs, *cert, *key;
	const char *shown;

	if (ca_make(dir, err, sizeof(err)) < 0) {
		fprintf(stderr, "retryproxy: --make-ca %s: %s\n", dir, err);
		return MAIN_EXIT_CONFIG;
	}
	abs = realpath(dir, NULL);
	shown = abs != NULL ? abs : dir;
	cert = main_path_join(shown, "ca.pem");
	key = main_path_join(shown, "ca-key.pem");
	printf("Made a local certificate authority for HTTPS interception:\n"
	       "  certificate: ");
	main_print_shell_path(cert);
	printf(" (mode 0644); clients must trust it\n"
	       "  private key: ");
	main_print_shell_path(key);
	printf(" (mode 0600); keep it secret: whoever has it\n"
	       "               can impersonate any host to every client that trusts the "
	       "certificate\n"
	       "\n"
	       "Next steps:\n"
	       "1. Add to the config file, with the hosts whose HTTPS requests to retry:\n"
	       "\n"
	       "intercept:\n"
	       "  hosts: [\"api.example.com\", \"*.googleapis.com\"]\n"
	       "  ca_cert: ");
	main_print_yaml_path(cert);
	printf("\n  ca_key: ");
	main_print_yaml_path(key);
	printf("\n"
	       "\n"
	       "2. Make the clients trust ");
	main_print_shell_path(cert);
	printf(": curl --cacert, SSL_CERT_FILE,\n"
	       "   REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, a Java keystore or the system\n"
	       "   store (README.md, \"HTTPS interception\", shows each).\n"
	       "3. ca-key.pem must belong to the user the proxy runs as: chown it if that\n"
	       "   is another user, and keep it mode 0600.\n"
	       "4. retryproxy --check -c CONFIG, then reload the proxy (SIGHUP).\n");
	free(cert);
	free(key);
	free(abs);
	return main_answer_written("--make-ca");
}

/* SIGTERM or SIGINT before the proxy's own handlers are in place (the
 * config still loading, a FIFO's writer or a slow trust store awaited):
 * nothing is open that a drain would finish, so stopping now is the clean
 * shutdown the signal asks for, exit 0, not a death by the signal. */
static void main_on_early_stop(int sig)
{
	(void)sig;
	_exit(MAIN_EXIT_OK);
}

/* Do a and b name the same config, NULL for the embedded one? */
static bool main_same_path(const char *a, const char *b)
{
	return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void main_on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct main_signals *s = arg;

	if (sig == SIGUSR1 || sig == SIGUSR2) {
		log_info("%s: ignored: the logs go to stderr, with no file to reopen; "
			 "SIGHUP reloads the config, SIGTERM drains and exits",
			 sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
		return;
	}
	if (sig == SIGHUP) {
		/* a config found, not named, is looked for again: one written
		 * to /etc/retryproxy since the start is the one to run; but
		 * one that was there and is gone (a deploy renaming files into
		 * place) must not bring the embedded default in its stead */
		if (!s->named) {
			const char *found = config_default_path();

			if (found == NULL && s->config_path != NULL) {
				char why[512];

				snprintf(why, sizeof(why),
					 "%s is gone and no other config file was found",
					 s->config_path);
				proxy_reload_refused(s->proxy, why);
				return;
			}
			if (!main_same_path(found, s->config_path)) {
				/* another file than the one running: worth more than
				 * an info line (a stray ./conf/ in the working directory) */
				log_warn("SIGHUP: reloading %s in place of %s: the config search "
					 "finds it first now",
					 found != NULL ? found : "<embedded>",
					 s->config_path != NULL ? s->config_path : "<embedded>");
				/* the running file's name stays until another runs */
				if (proxy_reload(s->proxy, found) == 0)
					s->config_path = found;
				return;
			}
		}
		log_info("SIGHUP: reloading %s",
			 s->config_path != NULL ? s->config_path : "<embedded>");
		proxy_reload(s->proxy, s->config_path);
		return;
	}
	log_info("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	proxy_drain(s->proxy);
}

/* Print one config error line and count it. */
static void main_report(const char *line, void *arg)
{
	size_t *count = arg;

	fprintf(stderr, "%s\n", line);
	(*count)++;
}

/* Load path or the embedded default, printing every error and a count. */
static struct config *main_load(const char *path)
{
	size_t count = 0;
	struct config *config = config_load(path, CONFIG_SOURCE_ANY, main_report, &count);

	if (config == NULL)
		fprintf(stderr, "retryproxy: %s: %zu error%s\n", path != NULL ? path : "<embedded>",
			count, count == 1 ? "" : "s");
	return config;
}

/* --explain: load the config as a start would, then explain the request. */
static int main_explain(const char *config_path, const struct explain_request *request)
{
	struct config *config;
	int rc;

	if (config_path == NULL)
		config_path = config_default_path();
	config = main_load(config_path);
	if (config == NULL)
		return MAIN_EXIT_CONFIG;
	rc = explain_run(config, request, stdout, stderr);
	config_release(config);
	if (rc != 0)
		return MAIN_EXIT_CONFIG;
	return main_answer_written("--explain");
}

/* Options that name one thing may appear once: a second -c would otherwise
 * replace the first without a word, and the proxy would run on a config
 * its user did not mean. */
static bool main_given_once(const void *already, const char *option)
{
	if (already == NULL)
		return true;
	fprintf(stderr, "retryproxy: %s given twice\n", option);
	return false;
}

/* What the command line asks for. */
struct main_command {
	const char *config_path; /* -c; NULL: the search */
	const char *make_ca_dir;
	const char *answer; /* "--version" or "--help": the first given */
	struct explain_request explain;
	bool check;
};

/* The options without a short name, by a value past any character. */
enum main_long_only {
	MAIN_OPT_CHECK = 256,
	MAIN_OPT_EXPLAIN,
	MAIN_OPT_BODY,
	MAIN_OPT_MAKE_CA,
	MAIN_OPT_VERSION,
};

/* "+": the options end at the first word that is none, which is then a
 * stray word (an error) rather than one moved to the end; ":": a missing
 * value is told from an unknown option. */
#define MAIN_SHORT_OPTIONS "+:c:H:h"

static const struct option main_options[] = {
	{ "config", required_argument, NULL, 'c' },
	{ "check", no_argument, NULL, MAIN_OPT_CHECK },
	{ "explain", required_argument, NULL, MAIN_OPT_EXPLAIN },
	{ "header", required_argument, NULL, 'H' },
	{ "body", required_argument, NULL, MAIN_OPT_BODY },
	{ "make-ca", required_argument, NULL, MAIN_OPT_MAKE_CA },
	{ "version", no_argument, NULL, MAIN_OPT_VERSION },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Is word ("--name" or "--name=value") a prefix of more than one long
 * option's name? getopt_long refuses it then, as it does an unknown one. */
static bool main_option_ambiguous(const char *word)
{
	size_t len = strcspn(word + 2, "=");
	unsigned matches = 0;

	for (const struct option *o = main_options; o->name != NULL; o++) {
		if (strlen(o->name) == len && strncmp(o->name, word + 2, len) == 0)
			return false;
		if (strncmp(o->name, word + 2, len) == 0)
			matches++;
	}
	return matches > 1;
}

/* Does option (its value in optarg) name a file or directory? An empty
 * value (-c "$CONF" with the variable unset) names nothing to put in an
 * error: false after saying so. */
static bool main_name_given(const char *option, const char *what)
{
	if (optarg[0] != '\0')
		return true;
	fprintf(stderr, "retryproxy: %s: the %s name is empty\n", option, what);
	return false;
}

/* Read argv into cmd with getopt_long: "-c FILE", "-cFILE", "--config FILE",
 * "--config=FILE" and a long option shortened to a unique prefix ("--conf")
 * all read alike. false after saying on stderr what is wrong, with the
 * usage. headers has room for argc entries. */
static bool main_parse(int argc, char **argv, struct main_command *cmd, const char **headers)
{
	opterr = 0; /* the errors are said here, naming the option as written */
	for (;;) {
		/* the word getopt_long reads now: a long option's whole, or
		 * the rest of a cluster of short ones */
		const char *word = optind < argc ? argv[optind] : "";
		bool is_long = strncmp(word, "--", 2) == 0 && word[2] != '\0';
		int index = -1, opt;
		char name[32];
		bool once = true;

		opt = getopt_long(argc, argv, MAIN_SHORT_OPTIONS, main_options, &index);
		if (opt == -1)
			break;
		if (opt == '?' || opt == ':') {
			const char *why = "unknown option";

			/* a long option given a value it does not take (optopt
			 * is that option then), or one with no value left */
			if (opt == ':' || (is_long && optopt != 0))
				why = "missing or unexpected argument";
			else if (is_long && main_option_ambiguous(word))
				why = "ambiguous option";
			/* a long option is named as written, a short one alone
			 * (it may stand in a cluster) */
			if (!is_long)
				snprintf(name, sizeof(name), "-%c", optopt);
			fprintf(stderr, "retryproxy: %s: %s\n", why, is_long ? word : name);
			main_usage(stderr);
			return false;
		}
		/* named in full, however it was shortened or spelt */
		if (index >= 0)
			snprintf(name, sizeof(name), "--%s", main_options[index].name);
		else
			snprintf(name, sizeof(name), "-%c", opt);
		switch (opt) {
		case 'c':
			once = main_given_once(cmd->config_path, name) &&
			       main_name_given(name, "file");
			cmd->config_path = optarg;
			break;
		case MAIN_OPT_CHECK:
			cmd->check = true;
			break;
		case MAIN_OPT_EXPLAIN:
			once = main_given_once(cmd->explain.method, name);
			cmd->explain.method = optarg;
			/* the URL is the word after the method */
			if (once && optind >= argc) {
				fprintf(stderr, "retryproxy: missing or unexpected argument: %s\n",
					name);
				once = false;
			}
			if (once)
				cmd->explain.url = argv[optind++];
			break;
		case 'H':
			headers[cmd->explain.header_count++] = optarg;
			break;
		case MAIN_OPT_BODY:
			once = main_given_once(cmd->explain.body_path, name) &&
			       main_name_given(name, "file");
			cmd->explain.body_path = optarg;
			break;
		case MAIN_OPT_MAKE_CA:
			once = main_given_once(cmd->make_ca_dir, name) &&
			       main_name_given(name, "directory");
			cmd->make_ca_dir = optarg;
			break;
		default: /* --version, --help, -h */
			/* answered once the rest is read: a stray word or an
			 * unknown option after it is a usage error too */
			if (cmd->answer == NULL)
				cmd->answer = opt == MAIN_OPT_VERSION ? "--version" : "--help";
			break;
		}
		if (!once) {
			main_usage(stderr);
			return false;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "retryproxy: missing or unexpected argument: %s\n", argv[optind]);
		main_usage(stderr);
		return false;
	}
	cmd->explain.headers = headers;
	return true;
}

/* Do the options read go together? false after saying on stderr why, with
 * the usage. Checked before --help or --version answers, which answer only
 * a command line that is valid without them. */
static bool main_options_go_together(const struct main_command *cmd)
{
	const char *why = NULL;

	if (cmd->explain.method == NULL &&
	    (cmd->explain.header_count > 0 || cmd->explain.body_path != NULL))
		why = "-H and --body go with --explain";
	else if (cmd->explain.method != NULL && (cmd->check || cmd->make_ca_dir != NULL))
		why = "--explain takes no --check or --make-ca";
	/* --make-ca reads no config: an option that would need one is a
	 * mistake, not something to ignore */
	else if (cmd->make_ca_dir != NULL && (cmd->config_path != NULL || cmd->check))
		why = "--make-ca takes no other option";
	if (why == NULL)
		return true;
	fprintf(stderr, "retryproxy: %s\n", why);
	main_usage(stderr);
	return false;
}

/* --check's word for a TLS verification opt-out, as a start warns of it. */
static void main_check_warn_unverified(const char *text, void *arg)
{
	fprintf(stderr, "%s: warning: %s\n", (const char *)arg, text);
}

int main(int argc, char **argv)
{
	struct main_command cmd = { 0 };
	const char **headers = xcalloc((size_t)argc, sizeof(*headers));
	const char *config_path;
	bool check;
	struct config *config;
	struct proxy *proxy;
	struct main_signals signals;
	static const int sig_numbers[] = { SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2 };
	enum { SIG_COUNT = sizeof(sig_numbers) / sizeof(sig_numbers[0]) };
	struct event *sig_events[SIG_COUNT];
	bool bind_failed;
	sigset_t hup, ending;
	int i;

	/* a file size limit reached makes a spool write fail with EFBIG, the
	 * check of spool_dir when a config loads (--check, --explain) included */
	signal(SIGXFSZ, SIG_IGN);
	/* a write to a closed pipe fails with EPIPE rather than killing: an
	 * answer (--check's ok, --explain's, --version's) nobody reads is
	 * exit 2 naming why, and a client gone mid-write is that client's
	 * error, not the proxy's end */
	signal(SIGPIPE, SIG_IGN);
	/* SIGUSR1 and SIGUSR2 mean "reopen the logs" or "reload" to other
	 * servers (nginx, Squid, HAProxy): one sent out of that habit must
	 * not kill the proxy by the default action, taking its buffered log
	 * lines along; while it serves, the loop says each is ignored */
	signal(SIGUSR1, SIG_IGN);
	signal(SIGUSR2, SIG_IGN);
	if (!main_parse(argc, argv, &cmd, headers)) {
		free(headers);
		return MAIN_EXIT_CONFIG;
	}
	if (!main_options_go_together(&cmd)) {
		free(headers);
		return MAIN_EXIT_CONFIG;
	}
	if (cmd.answer != NULL) {
		free(headers);
		if (strcmp(cmd.answer, "--version") == 0) {
			printf("retryproxy %s\n", RETRYPROXY_VERSION);
			return main_answer_written("--version");
		}
		main_usage(stdout);
		return main_answer_written("--help");
	}
	config_path = cmd.config_path;
	check = cmd.check;
	if (cmd.explain.method != NULL) {
		int rc = main_explain(config_path, &cmd.explain);

		free(headers);
		return rc;
	}
	free(headers);
	if (cmd.make_ca_dir != NULL)
		return main_make_ca(cmd.make_ca_dir);
	/* a reload asked for while the proxy starts (a service manager's, a
	 * deploy's) must not kill it by the default action before its handler
	 * is in place, nor be lost: it is blocked until then, the config's
	 * loading included, which can take a while (a trust store, a spool_dir
	 * on a slow disk), and runs once the proxy serves, reading the config
	 * again (it may have changed after this start read it) */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	if (!check) {
		sigprocmask(SIG_BLOCK, &hup, NULL);
		signal(SIGTERM, main_on_early_stop);
		signal(SIGINT, main_on_early_stop);
	}
	signals.named = config_path != NULL;
	if (config_path == NULL) {
		config_path = config_default_path();
		/* found, not named: say which, as a start logs it */
		if (check)
			fprintf(stderr, "retryproxy: checking config: %s\n",
				config_path != NULL ? config_path : "<embedded>");
	}
	config = main_load(config_path);
	if (config == NULL)
		return MAIN_EXIT_CONFIG;
	if (check) {
		/* the warnings a start would log, so that a config is not
		 * passed without them */
		config_tls_opt_outs(config, main_check_warn_unverified, (void *)config->source);
		config_release(config);
		printf("ok\n");
		return main_answer_written("--check");
	}
	/* without -c the SPEC has it say which config it found, whatever
	 * log.level quiets from then on */
	log_configure(signals.named ? config->log_level : LOG_LEVEL_INFO, config->log_format);
	log_info("retryproxy %s starting; config: %s", RETRYPROXY_VERSION,
		 config_path != NULL ? config_path : "<embedded>");
	log_configure(config->log_level, config->log_format);
	/* Buffer blocks of up to 256 KiB (reads of up to 32 KiB, and what
	 * collects in an output) come and go with every response: keep them
	 * on the heap instead of mapping each one, and keep freed memory
	 * instead of handing it back and faulting it in again a moment later. */
	mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 16 * 1024 * 1024);
	/* libevent's allocations fail the way the proxy's own do: they abort,
	 * so buffer space it returns never needs a check; and the blocks of
	 * its buffers are reused rather than freed and allocated per request */
	event_set_mem_functions(xmalloc_event, xrealloc, xmalloc_event_free);
	proxy = proxy_new(config, &bind_failed);
	if (proxy == NULL)
		return bind_failed ? MAIN_EXIT_RUNTIME : MAIN_EXIT_CONFIG;
	signals.proxy = proxy;
	signals.config_path = config_path;
	for (i = 0; i < SIG_COUNT; i++) {
		sig_events[i] = evsignal_new(proxy->base, sig_numbers[i], main_on_signal, &signals);
		evsignal_add(sig_events[i], NULL);
	}
	/* a SIGHUP that came meanwhile is handled now, by the loop */
	sigprocmask(SIG_UNBLOCK, &hup, NULL);
	proxy_run(proxy);
	/* on the way out a further SIGTERM (a service manager asking again, a
	 * second ^C) must not kill it by the default action that freeing the
	 * events puts back, before the last log lines are written: blocked
	 * while the events go, then ignored as well (which discards one that
	 * came meanwhile); only SIGKILL ends the last steps now */
	sigemptyset(&ending);
	for (i = 0; i < SIG_COUNT; i++)
		sigaddset(&ending, sig_numbers[i]);
	sigprocmask(SIG_BLOCK, &ending, NULL);
	for (i = 0; i < SIG_COUNT; i++) {
		event_free(sig_events[i]);
		signal(sig_numbers[i], SIG_IGN);
	}
	proxy_free(proxy);
	xmalloc_event_trim();
	log_info("stopped");
	return MAIN_EXIT_OK;
}
