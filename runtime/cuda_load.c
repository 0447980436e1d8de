/* cuda_load.c — the CUDA device and the nccl backend, loaded when first
 * asked for (runtime/cuda/cuda_api.h says why they live apart).
 *
 * libdtpc_cuda.so is looked for beside the program or library holding this
 * code, then in ../lib from there (an installed bin/dtpc), then by the
 * dynamic loader's own search (LD_LIBRARY_PATH). A build without nvcc has no
 * such library and says so. */
#define _GNU_SOURCE /* dladdr */
#include <stdio.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/device.h"

#ifdef DTPC_HAVE_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "runtime/cuda/cuda_api.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct dtpc_cuda_api *api;
static char why[768];
/* an object of this module, for dladdr to name the file holding it */
static const char anchor;

/* Opens dir/rel; true when it holds a usable table. */
static bool try_open(const char *dir, const char *rel)
{
	char path[PATH_MAX];
	if (dir)
		snprintf(path, sizeof path, "%s/%s", dir, rel);
	else
		snprintf(path, sizeof path, "%s", rel);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		/* the first reason is the one worth telling */
		if (!why[0])
			snprintf(why, sizeof why, "%s", dlerror());
		return false;
	}
	const struct dtpc_cuda_api *t = dlsym(h, "dtpc_cuda_api");
	if (!t || t->version != DTPC_CUDA_API_VERSION) {
		snprintf(why, sizeof why, "%.600s is from another version of dtpc", path);
		dlclose(h);
		return false;
	}
	t->share_errors(g_error_record);
	api = t;
	return true;
}

/* The folder of the file at path (in place), or NULL without one. */
static const char *folder(char *path)
{
	char *slash = strrchr(path, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	return path;
}

static void load(void)
{
	char here[PATH_MAX] = "", exe[PATH_MAX] = "";
	Dl_info info;
	if (dladdr(&anchor, &info) && info.dli_fname)
		snprintf(here, sizeof here, "%s", info.dli_fname);
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n > 0 ? n : 0] = 0;
	const char *dirs[] = { folder(here), folder(exe) };
	for (int i = 0; i < 2 && !api; i++)
		if (dirs[i] && !try_open(dirs[i], "libdtpc_cuda.so"))
			try_open(dirs[i], "../lib/libdtpc_cuda.so");
	if (!api)
		try_open(NULL, "libdtpc_cuda.so");
}

static const struct dtpc_cuda_api *cuda(void)
{
	pthread_once(&once, load);
	return api;
}

struct dev *dev_cuda_create(int ordinal)
{
	if (!cuda()) {
		g_raise(G_ERR_DEVICE, "cannot load dtpc's CUDA library: %s", why);
		return NULL;
	}
	return api->dev_create(ordinal);
}

int dev_cuda_count(void)
{
	return cuda() ? api->dev_count() : 0;
}

const char *dev_cuda_unavailable(void)
{
	static _Thread_local char text[sizeof why + 64];
	if (!cuda()) {
		snprintf(text, sizeof text, "cannot load dtpc's CUDA library: %s", why);
		return text;
	}
	return api->dev_count() > 0 ? NULL : "no GPU is visible to this process";
}

/* The nccl backend's table entries, or NULL with why there are none raised. */
static const struct dtpc_cuda_api *nccl_api(void)
{
	if (!cuda()) {
		g_raise(COMM_FAILED, "cannot load dtpc's CUDA library: %s", why);
		return NULL;
	}
	if (!api->nccl_create) {
		g_raise(COMM_FAILED, "this build of dtpc has no nccl backend (built without NCCL)");
		return NULL;
	}
	return api;
}

struct comm *comm_nccl_create(int timeout_ms)
{
	return nccl_api() ? api->nccl_create(timeout_ms) : NULL;
}

int comm_nccl_unique_id(void *out)
{
	return nccl_api() ? api->nccl_unique_id(out) : -1;
}

struct comm *comm_nccl_init(const void *id, int rank, int world, int timeout_ms)
{
	return nccl_api() ? api->nccl_init(id, rank, world, timeout_ms) : NULL;
}
#else
struct dev *dev_cuda_create(int ordinal)
{
	g_raise(G_ERR_DEVICE, "this build of dtpc has no CUDA device (built without nvcc)");
	return NULL;
}

int dev_cuda_count(void)
{
	return 0;
}

const char *dev_cuda_unavailable(void)
{
	return "this build of dtpc has no CUDA device (built without nvcc)";
}

static void no_nccl(void)
{
	g_raise(COMM_FAILED, "this build of dtpc has no nccl backend (built without CUDA)");
}

struct comm *comm_nccl_create(int timeout_ms)
{
	no_nccl();
	return NULL;
}

int comm_nccl_unique_id(void *out)
{
	no_nccl();
	return -1;
}

struct comm *comm_nccl_init(const void *id, int rank, int world, int timeout_ms)
{
	no_nccl();
	return NULL;
}
#endif
