/* graph_file.c — mmap a graph file and validate it. */
#include "graph/graph_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/error.h"

bool graph_file_open(struct graph_file *f, const char *path)
{
	memset(f, 0, sizeof *f);
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		g_raise(G_ERR_IO, "cannot open: %s", strerror(errno));
		return false;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		g_raise(G_ERR_IO, "not a regular file");
		close(fd);
		return false;
	}
	if (st.st_size == 0) {
		g_raise(G_ERR_FORMAT, "empty file: not a graph");
		close(fd);
		return false;
	}
	/* a mapping is page-aligned, as graph_parse requires */
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		g_raise(G_ERR_IO, "cannot map: %s", strerror(errno));
		return false;
	}
	if (!graph_parse(map, (size_t)st.st_size, &f->g)) {
		munmap(map, (size_t)st.st_size);
		return false;
	}
	f->map = map;
	f->len = (size_t)st.st_size;
	return true;
}

void graph_file_close(struct graph_file *f)
{
	if (f->map)
		munmap(f->map, f->len);
	f->map = NULL;
}
