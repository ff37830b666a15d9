#include "file_read.h"

#include <stdlib.h>

#include "xmalloc.h"

char *file_read_all(FILE *f, size_t max, size_t *len)
{
	size_t cap = 8192, n = 0;
	char *text = xmalloc(cap);

	while (n < max) {
		size_t room = cap - 1 - n; /* a byte kept for the NUL */
		size_t got;

		if (room == 0) {
			cap *= 2;
			text = xrealloc(text, cap);
			continue;
		}
		if (room > max - n)
			room = max - n;
		got = fread(text + n, 1, room, f);
		n += got;
		/* fread() reads all it is asked unless the file ended or failed */
		if (got < room)
			break;
	}
	if (ferror(f)) {
		free(text);
		return NULL;
	}
	text[n] = '\0';
	*len = n;
	return text;
}
