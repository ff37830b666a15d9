/* The config loader: any bytes must load or be refused with error lines,
 * never crash, leak or print a line that is not file:line:col: key: message. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *errors = NULL;
	size_t errors_len = 0;
	FILE *err = open_memstream(&errors, &errors_len);
	struct config *config;
	const char *line;

	if (err == NULL)
		return 0;
	config = config_load_text((const char *)data, size, "fuzz.yaml", err);
	fclose(err);
	if (config != NULL) {
		/* a config that loads names its listeners and routes */
		if (config->listener_count == 0 || config->default_route.name == NULL)
			abort();
		config_release(config);
	} else {
		/* refused: at least one error, each line naming the file */
		if (errors_len == 0)
			abort();
		for (line = errors; line < errors + errors_len;) {
			const char *end = memchr(line, '\n', (size_t)(errors + errors_len - line));

			if (strncmp(line, "fuzz.yaml:", 10) != 0 || end == NULL)
				abort();
			line = end + 1;
		}
	}
	free(errors);
	return 0;
}
