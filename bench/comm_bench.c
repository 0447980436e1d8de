/* comm_bench.c — collective bandwidth, in the manner of nccl-tests.
 *
 *   comm_bench [--json FILE] [--max-size BYTES]
 *	the local backend with 2 and 4 ranks (threads), and single-thread
 *	memcpy on the same sizes for reference
 *   mpirun -np N comm_bench --mpi [--json FILE] [--max-size BYTES]
 *	the mpi backend (our wrapper) and plain MPI_Allgather, MPI_Allreduce,
 *	MPI_Alltoall on MPI_COMM_WORLD
 *
 * Sizes 4 KiB .. 64 MiB in steps of 4. `size` counts as nccl-tests do: the
 * gathered buffer (all_gather, in place), the reduced buffer (all_reduce, in
 * place), one rank's send buffer (all_to_all). Each point: two warm-up calls, then as many
 * timed calls as fit in about 0.25 s (5 .. 500), each started together
 * (barrier) and timed on every rank; a call's time is the slowest rank's and
 * the point's time is the median call. algbw = size / time; busbw = algbw *
 * (n-1)/n (all_gather, all_to_all) or 2(n-1)/n (all_reduce). #wrong counts
 * the wrong words of the last call's result on all ranks; any makes the exit
 * status 1. The local tables add two references: single-thread memcpy
 * (%mc = busbw / that) and `par`, what each of the N threads copies per
 * second while all N memcpy their own buffers at once (%par = busbw / that).
 * With more ranks than cores, or on a machine busy with other work, par
 * shows what the ranks really had: busbw cannot exceed it. */
#include <cjson/cJSON.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/median.h"
#include "runtime/comm.h"

enum { MAXR = 8, NSIZES = 8, WARMUP = 2, MIN_ITERS = 5, MAX_ITERS = 500 };
static const double BUDGET_S = 0.25;
static const size_t MIN_SIZE = 4 << 10;

/* COPY: every rank memcpys `size` bytes of its own at once, the most the
 * local backend's ranks could move together on this machine. */
enum coll { AG, AR, A2A, NCOLL, COPY = NCOLL, NKIND };
static const char *const coll_name[NKIND] = { "all_gather", "all_reduce", "all_to_all", "memcpy" };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}


static double bus_factor(enum coll k, int n)
{
	return (k == AR ? 2.0 : 1.0) * (n - 1) / n;
}

/* ---- results ----------------------------------------------------------------------- */

struct point {
	double time, algbw, busbw; /* s, bytes/s */
	long wrong;
};

static size_t sizes[NSIZES];
static int nsizes;
static double memcpy_bw[NSIZES];
static bool any_wrong;
static bool root = true; /* prints and writes: false on MPI ranks but 0 */

static void print_table(const char *backend, int nr, struct point (*p)[NSIZES], bool with_memcpy)
{
	printf("\n%s, %d ranks%s\n%9s", backend, nr,
	       with_memcpy ? " (%mc, %par: busbw / memcpy, / par)" : "", "size");
	if (with_memcpy)
		printf(" %8s %6s", "memcpy", "par");
	for (int k = 0; k < NCOLL; k++)
		printf(" | %-*s", with_memcpy ? 39 : 34, coll_name[k]);
	printf("\n%9s", "B");
	if (with_memcpy)
		printf(" %8s %6s", "GB/s", "GB/s");
	for (int k = 0; k < NCOLL; k++)
		printf(" | %9s %6s %6s %s %6s", "time us", "algbw", "busbw",
		       with_memcpy ? "%mc %par" : "   ", "#wrong");
	printf("\n");
	for (int s = 0; s < nsizes; s++) {
		printf("%9zu", sizes[s]);
		if (with_memcpy)
			printf(" %8.2f %6.2f", memcpy_bw[s] / 1e9, p[COPY][s].algbw / 1e9);
		for (int k = 0; k < NCOLL; k++) {
			const struct point *q = &p[k][s];
			printf(" | %9.1f %6.2f %6.2f", q->time * 1e6, q->algbw / 1e9, q->busbw / 1e9);
			if (with_memcpy)
				printf(" %3.0f %4.0f", 100 * q->busbw / memcpy_bw[s],
				       100 * q->busbw / p[COPY][s].algbw);
			else
				printf("    ");
			printf(" %6ld", q->wrong);
		}
		printf("\n");
	}
	fflush(stdout);
}

static void add_json(cJSON *arr, const char *backend, int nr, struct point (*p)[NSIZES],
		     bool with_memcpy)
{
	for (int k = 0; k < (with_memcpy ? NKIND : NCOLL); k++)
		for (int s = 0; s < nsizes; s++) {
			const struct point *q = &p[k][s];
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "backend", backend);
			cJSON_AddNumberToObject(o, "ranks", nr);
			cJSON_AddStringToObject(o, "op", coll_name[k]);
			cJSON_AddNumberToObject(o, "size", (double)sizes[s]);
			cJSON_AddNumberToObject(o, "time_us", q->time * 1e6);
			cJSON_AddNumberToObject(o, "algbw_gbps", q->algbw / 1e9);
			cJSON_AddNumberToObject(o, "busbw_gbps", q->busbw / 1e9);
			if (with_memcpy) {
				cJSON_AddNumberToObject(o, "busbw_over_memcpy", q->busbw / memcpy_bw[s]);
				cJSON_AddNumberToObject(o, "busbw_over_par", q->busbw / p[COPY][s].algbw);
			}
			cJSON_AddNumberToObject(o, "wrong", (double)q->wrong);
			cJSON_AddItemToArray(arr, o);
		}
}

/* ---- one rank's side of a point ----------------------------------------------------- */

/* How the ranks of a run act together: threads or MPI processes. */
struct team {
	int rank, nr;
	uint32_t op; /* the next collective's tag */
	void (*barrier)(struct team *t);
	int (*bcast_int)(struct team *t, int v);        /* rank 0's v, everywhere */
	long (*sum_long)(struct team *t, long v);       /* on rank 0 */
	void (*max_times)(struct team *t, double *v, int n); /* per element, on rank 0 */
	void *shared;
};

/* What a rank calls: a comm (local or mpi backend) or plain MPI. */
struct impl {
	struct comm *c; /* NULL: plain MPI on MPI_COMM_WORLD */
	struct comm_group g;
	int ranks[MAXR];
};

struct bufs {
	size_t size, piece; /* bytes: the point's size, one rank's piece */
	uint32_t *send, *recv;
	float *buf, *pristine;
	size_t counts[MAXR], displs[MAXR];
};

/* Word i of stream s: what rank r sends (to rank j, for all_to_all). */
static uint32_t word(uint32_t s, size_t i)
{
	return (uint32_t)i * 2654435761u ^ (s + 1) * 0x9e3779b9u;
}

/* Small integers: every sum is exact, whatever the order. */
static float value(int r, size_t i)
{
	return (float)((i + (size_t)r * 7) % 61 + 1);
}

static void setup(struct bufs *b, enum coll k, size_t size, int rank, int nr)
{
	memset(b, 0, sizeof *b);
	b->size = size;
	b->piece = size / (size_t)nr;
	for (int i = 0; i < nr; i++) {
		b->counts[i] = b->piece;
		b->displs[i] = b->piece * (size_t)i;
	}
	size_t pw = b->piece / 4;
	switch (k) {
	case AG:
		/* in place: a rank's piece is already where it belongs */
		b->recv = calloc(1, size);
		for (size_t i = 0; i < pw; i++)
			b->recv[(size_t)rank * pw + i] = word((uint32_t)rank, i);
		break;
	case AR:
		b->buf = malloc(size);
		b->pristine = malloc(size);
		for (size_t i = 0; i < size / 4; i++)
			b->pristine[i] = value(rank, i);
		memcpy(b->buf, b->pristine, size);
		break;
	case A2A:
	case COPY:
		b->send = malloc(size);
		b->recv = calloc(1, size);
		for (int j = 0; j < nr; j++)
			for (size_t i = 0; i < pw; i++)
				b->send[(size_t)j * pw + i] = word((uint32_t)(rank * MAXR + j), i);
		break;
	case NKIND:
		break;
	}
}

static long verify(const struct bufs *b, enum coll k, int rank, int nr)
{
	long bad = 0;
	size_t pw = b->piece / 4;
	switch (k) {
	case AG:
		for (int j = 0; j < nr; j++)
			for (size_t i = 0; i < pw; i++)
				bad += b->recv[(size_t)j * pw + i] != word((uint32_t)j, i);
		break;
	case AR:
		for (size_t i = 0; i < b->size / 4; i++) {
			float want = 0;
			for (int r = 0; r < nr; r++)
				want += value(r, i);
			bad += b->buf[i] != want;
		}
		break;
	case A2A:
		for (int j = 0; j < nr; j++)
			for (size_t i = 0; i < pw; i++)
				bad += b->recv[(size_t)j * pw + i] != word((uint32_t)(j * MAXR + rank), i);
		break;
	case COPY:
		bad = memcmp(b->recv, b->send, b->size) != 0;
		break;
	case NKIND:
		break;
	}
	return bad;
}

static void release(struct bufs *b)
{
	free(b->send);
	free(b->recv);
	free(b->buf);
	free(b->pristine);
}

/* One collective of kind k: through MPI itself where the impl has no comm
 * (the plain baseline), else through the backend's. */
static int call(struct impl *im, struct bufs *b, enum coll k, uint32_t op)
{
	struct comm *c = im->c;
	int n = (int)b->piece;
	struct comm_tag t = { .op = op, .what = coll_name[k] };
	switch (k) {
	case AG:
		if (!c)
			return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->recv, n, MPI_BYTE,
					     MPI_COMM_WORLD);
		return c->ops->allgatherv(c, &im->g, t, (char *)b->recv + b->displs[im->g.me],
					  b->recv, b->counts, b->displs);
	case AR:
		if (!c)
			return MPI_Allreduce(MPI_IN_PLACE, b->buf, (int)(b->size / 4), MPI_FLOAT,
					     MPI_SUM, MPI_COMM_WORLD);
		return c->ops->allreduce_f32(c, &im->g, t, b->buf, b->size / 4);
	case A2A:
		if (!c)
			return MPI_Alltoall(b->send, n, MPI_BYTE, b->recv, n, MPI_BYTE, MPI_COMM_WORLD);
		return c->ops->alltoallv(c, &im->g, t, b->send, b->counts, b->displs, b->recv,
					 b->counts, b->displs);
	case COPY:
		memcpy(b->recv, b->send, b->size);
		return 0;
	case NKIND:
		break;
	}
	return -1;
}

/* One point on this rank; rank 0 gets the result. */
static struct point measure(struct team *t, struct impl *im, enum coll k, size_t size)
{
	struct bufs b;
	double times[MAX_ITERS];
	long bad = 0;
	setup(&b, k, size, t->rank, t->nr);
	double warm = 0;
	for (int it = 0; it < WARMUP; it++) {
		if (k == AR)
			memcpy(b.buf, b.pristine, size);
		t->barrier(t);
		double t0 = now();
		bad += call(im, &b, k, t->op++) != 0;
		warm = now() - t0;
	}
	int iters = (int)(BUDGET_S / (warm > 1e-7 ? warm : 1e-7));
	iters = t->bcast_int(t, iters < MIN_ITERS ? MIN_ITERS : iters > MAX_ITERS ? MAX_ITERS : iters);
	for (int it = 0; it < iters; it++) {
		if (k == AR)
			memcpy(b.buf, b.pristine, size);
		t->barrier(t);
		double t0 = now();
		bad += call(im, &b, k, t->op++) != 0;
		times[it] = now() - t0;
	}
	bad = bad ? (long)(size / 4) : verify(&b, k, t->rank, t->nr);
	release(&b);
	t->max_times(t, times, iters);
	struct point p = { .wrong = t->sum_long(t, bad) };
	if (t->rank == 0) {
		p.time = median(times, iters);
		p.algbw = (double)size / p.time;
		p.busbw = k == COPY ? p.algbw : p.algbw * bus_factor(k, t->nr);
		any_wrong = any_wrong || p.wrong;
	}
	return p;
}

static void run_points(struct team *t, struct impl *im, int nkind, struct point (*p)[NSIZES])
{
	for (int k = 0; k < nkind; k++)
		for (int s = 0; s < nsizes; s++) {
			struct point q = measure(t, im, (enum coll)k, sizes[s]);
			if (t->rank == 0)
				p[k][s] = q;
		}
}

/* ---- local: ranks as threads ------------------------------------------------------------ */

struct shared {
	pthread_barrier_t bar;
	int iv;
	long lv[MAXR];
	double *tv[MAXR];
	struct comm_local_world *w;
	struct point (*p)[NSIZES];
};

static void th_barrier(struct team *t)
{
	pthread_barrier_wait(&((struct shared *)t->shared)->bar);
}

static int th_bcast_int(struct team *t, int v)
{
	struct shared *s = t->shared;
	if (t->rank == 0)
		s->iv = v;
	th_barrier(t);
	v = s->iv;
	th_barrier(t);
	return v;
}

static long th_sum_long(struct team *t, long v)
{
	struct shared *s = t->shared;
	s->lv[t->rank] = v;
	th_barrier(t);
	long sum = 0;
	for (int r = 0; r < t->nr; r++)
		sum += s->lv[r];
	th_barrier(t);
	return sum;
}

static void th_max_times(struct team *t, double *v, int n)
{
	struct shared *s = t->shared;
	s->tv[t->rank] = v;
	th_barrier(t);
	if (t->rank == 0)
		for (int r = 1; r < t->nr; r++)
			for (int i = 0; i < n; i++)
				v[i] = s->tv[r][i] > v[i] ? s->tv[r][i] : v[i];
	th_barrier(t);
}

struct th_arg {
	struct shared *s;
	int rank, nr;
};

static void *th_main(void *p)
{
	struct th_arg *a = p;
	struct team t = { .rank = a->rank, .nr = a->nr, .barrier = th_barrier,
			  .bcast_int = th_bcast_int, .sum_long = th_sum_long,
			  .max_times = th_max_times, .shared = a->s };
	struct impl im = { .c = comm_local_create(a->s->w, a->rank) };
	im.g = comm_world_group(im.c, im.ranks);
	run_points(&t, &im, NKIND, a->s->p);
	im.c->ops->free(im.c);
	return NULL;
}

static void run_local(int nr, struct point (*p)[NSIZES])
{
	struct shared s = { .w = comm_local_world_create(nr, 60000), .p = p };
	pthread_barrier_init(&s.bar, NULL, (unsigned)nr);
	pthread_t th[MAXR];
	struct th_arg a[MAXR];
	for (int r = 0; r < nr; r++) {
		a[r] = (struct th_arg){ &s, r, nr };
		pthread_create(&th[r], NULL, th_main, &a[r]);
	}
	for (int r = 0; r < nr; r++)
		pthread_join(th[r], NULL);
	pthread_barrier_destroy(&s.bar);
	comm_local_world_free(s.w);
}

static void measure_memcpy(void)
{
	for (int s = 0; s < nsizes; s++) {
		size_t n = sizes[s];
		char *src = malloc(n), *dst = malloc(n);
		memset(src, 1, n);
		memset(dst, 2, n);
		double times[MAX_ITERS], t0 = now();
		memcpy(dst, src, n);
		double warm = now() - t0;
		int iters = (int)(BUDGET_S / 2 / (warm > 1e-7 ? warm : 1e-7));
		iters = iters < MIN_ITERS ? MIN_ITERS : iters > MAX_ITERS ? MAX_ITERS : iters;
		for (int it = 0; it < iters; it++) {
			t0 = now();
			memcpy(dst, src, n);
			times[it] = now() - t0;
			/* keep the copy from being elided or hoisted */
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		memcpy_bw[s] = (double)n / median(times, iters);
		free(src);
		free(dst);
	}
}

/* ---- mpi ----------------------------------------------------------------------------------- */

static void mpi_barrier(struct team *t)
{
	MPI_Barrier(MPI_COMM_WORLD);
}

static int mpi_bcast_int(struct team *t, int v)
{
	MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
	return v;
}

static long mpi_sum_long(struct team *t, long v)
{
	long sum = 0;
	MPI_Reduce(&v, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	return sum;
}

static void mpi_max_times(struct team *t, double *v, int n)
{
	MPI_Reduce(t->rank ? v : MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
}

static int run_mpi(cJSON *arr)
{
	struct impl mine = { .c = comm_mpi_create(600000) }, plain = { 0 };
	if (!mine.c) {
		fprintf(stderr, "comm_bench: %s\n", g_error()->msg);
		return 2;
	}
	if (mine.c->world > MAXR) {
		fprintf(stderr, "comm_bench: at most %d ranks\n", MAXR);
		mine.c->ops->free(mine.c);
		return 2;
	}
	mine.g = comm_world_group(mine.c, mine.ranks);
	struct team t = { .rank = mine.c->rank, .nr = mine.c->world, .barrier = mpi_barrier,
			  .bcast_int = mpi_bcast_int, .sum_long = mpi_sum_long,
			  .max_times = mpi_max_times };
	struct point p[2][NKIND][NSIZES];
	run_points(&t, &mine, NCOLL, p[0]);
	run_points(&t, &plain, NCOLL, p[1]);
	root = t.rank == 0;
	if (root) {
		print_table("mpi backend (nonblocking + MPI_Test polling)", t.nr, p[0], false);
		print_table("plain MPI (MPI_Allgather, MPI_Allreduce, MPI_Alltoall)", t.nr, p[1], false);
		add_json(arr, "mpi", t.nr, p[0], false);
		add_json(arr, "plain_mpi", t.nr, p[1], false);
	}
	mine.c->ops->free(mine.c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *json = NULL;
	bool use_mpi = false;
	size_t max_size = 64 << 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mpi")) {
			use_mpi = true;
		} else if (!strcmp(argv[i], "--json") && i + 1 < argc) {
			json = argv[++i];
		} else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) {
			max_size = strtoull(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: comm_bench [--mpi] [--json FILE] [--max-size BYTES]\n");
			return 2;
		}
	}
	for (size_t s = MIN_SIZE; s <= max_size && nsizes < NSIZES; s *= 4)
		sizes[nsizes++] = s;

	cJSON *doc = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	cJSON_AddItemToObject(doc, "results", arr);
	if (use_mpi) {
		int st = run_mpi(arr);
		if (st) {
			cJSON_Delete(doc);
			return st;
		}
	} else {
		measure_memcpy();
		cJSON *mc = cJSON_AddArrayToObject(doc, "memcpy");
		for (int s = 0; s < nsizes; s++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "size", (double)sizes[s]);
			cJSON_AddNumberToObject(o, "gbps", memcpy_bw[s] / 1e9);
			cJSON_AddItemToArray(mc, o);
		}
		for (int nr = 2; nr <= 4; nr += 2) {
			struct point p[NKIND][NSIZES];
			run_local(nr, p);
			print_table("local backend", nr, p, true);
			add_json(arr, "local", nr, p, true);
		}
	}
	if (json && root) {
		char *text = cJSON_Print(doc);
		FILE *f = fopen(json, "w");
		if (!f || fputs(text, f) < 0 || fclose(f)) {
			fprintf(stderr, "comm_bench: cannot write %s\n", json);
			any_wrong = true;
		}
		free(text);
	}
	cJSON_Delete(doc);
	if (any_wrong)
		fprintf(stderr, "comm_bench: wrong results (see #wrong)\n");
	return any_wrong;
}
