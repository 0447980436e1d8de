/* main.c — the dtpc command line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "calibrate.h"
#include "compiler/arena.h"
#include "compiler/config.h"
#include "compiler/driver.h"
#include "compiler/fmt.h"
#include "graph/version.h"
#include "cost.h"
#include "embed.h"
#include "inspect.h"
#include "run.h"
#include "graph/error.h"
#include "graph/graph_file.h"
#include "shard.h"
#include "timeline.h"

static const char usage[] =
	"usage: dtpc check FILE.plan [options]            check a plan before launch\n"
	"       dtpc FILE.plan -o FILE.graph [options] [-v]  compile a plan to a graph\n"
	"                 (FILE.plan '-': the plan on standard input)\n"
	"       dtpc inspect FILE.graph [--rank R] [--format text|json|dot]\n"
	"                 dot: repeat blocks collapsed; [--block N|NAME.N] opens one,\n"
	"                 [--axis NAME] draws only the collectives over that axis\n"
	"       dtpc run FILE.graph [run options]              replay a graph on N ranks\n"
	"       dtpc shard FILE.graph --weights CHECKPOINT --out FOLDER\n"
	"                                 each rank's slices as its own file, for --weights\n"
	"       dtpc timeline TRACE.json -o FILE.svg|- [--width PX]\n"
	"                                 a run's trace as a picture: a lane per rank and row\n"
	"       dtpc fmt [--check] FILE|FOLDER|-...        lay plan files out canonically;\n"
	"                                 --check names those that would change (exit 1)\n"
	"       dtpc embed FILE.graph -o FILE.c|FILE.o [--symbol NAME]\n"
	"                                 the graph as linkable data: NAME[] and NAME_size\n"
	"                                 (default dtpc_embedded_graph); .o through $CC\n"
	"       dtpc cost FILE.plan --hw PROFILE [--dtype D] [--format F] [check's options]\n"
	"       dtpc suggest FILE.plan --world N --hw PROFILE [--max-mem BYTES] [--top K]\n"
	"                                 predicted step time per mesh (docs/cost-model.md)\n"
	"       dtpc calibrate --backend local|mpi --device cpu [--ranks N] -o PROFILE.json\n"
	"                                 measure this machine into a hardware profile\n"
	"       dtpc --help | --version\n"
	"\n"
	"options of check and compile:\n"
	"  --plan NAME            check only this plan (default: every plan in FILE)\n"
	"  --world N              the world size the job will have (must equal the mesh)\n"
	"  --mesh AXES            replace the plan's mesh: --mesh \"ring = 2, tp = 2\"\n"
	"  --context OPTIONS      override context options:\n"
	"                         --context 'rotate_method = \"alltoall\"'\n"
	"  --config PATH          model parameters from a diffusers config.json (or the\n"
	"                         folder holding one): after the plan's own, before -D\n"
	"  --dtype f32|bf16|f16   replace the plan's dtype setting (the storage dtype)\n"
	"  -D NAME=VALUE          override a model parameter (after the plan's and\n"
	"                         --config's)\n"
	"  --format FORMAT        diagnostics and summary as text (default) or json;\n"
	"                         (check) sarif: diagnostics as SARIF 2.1.0 (code scanning)\n"
	"  --color / --no-color   colour diagnostics (default: when stderr is a terminal)\n"
	"  -d PASSES              dump after passes: i (IR), s (styles), l (layouts),\n"
	"                         f (each linear fused with its activation), g (the\n"
	"                         lowered graph, rank 0); f and g: compile only\n"
	"  --no-fuse              (compile) keep each linear and the gelu / silu that\n"
	"                         reads it as two ops (default: one linear_act)\n"
	"  --expose GLOB          the tensors of the modules GLOB matches become outputs\n"
	"                         too, named as the modules (one rank; repeatable)\n"
	"  -q                     quiet: no summary and no standalone notes (errors stay)\n"
	"  -o FILE.graph          (compile) where to write the graph\n"
	"  -v                     (compile) print the compile report: the communication\n"
	"                         by collective and axis, the activation arena and the\n"
	"                         weight bytes (text: first and last rank; --format\n"
	"                         json: every rank, docs/schemas/report.schema.json)\n"
	"\n";

/* The run options: one string literal past 4095 characters is beyond what
 * ISO C asks compilers to take. */
static const char usage_run[] =
	"options of run:\n"
	"  --backend local|mpi|nccl  threads of this process (default), one MPI process\n"
	"                         per rank (mpirun -np N dtpc run FILE --backend mpi), or\n"
	"                         one process per GPU over NCCL (alone: one rank; under\n"
	"                         mpirun: MPI's ranks; implies --device cuda)\n"
	"  --device cpu|cuda      where the ranks compute (default cpu); local ranks share\n"
	"                         the GPUs round-robin, moving collectives' bytes through\n"
	"                         host memory\n"
	"  --cuda-graph on|off    replay steps after the first as one CUDA graph where\n"
	"                         the graph has no collective (default on)\n"
	"  --dtype f32|bf16|f16   storage dtype of activations and weights (default: the\n"
	"                         graph's; narrower only); accumulation is float32\n"
	"  --ranks N              local ranks (default: the graph's world size)\n"
	"  --seed S               seed of generated weights and inputs (default 1), used\n"
	"                         where --weights or --inputs is not given (a note says so)\n"
	"  --weights PATH         bind weights by name: a safetensors file, a folder with\n"
	"                         one (or sharded: *.safetensors.index.json), or a\n"
	"                         folder of per-rank files from dtpc shard\n"
	"  --inputs FILE          bind inputs by name from a safetensors file\n"
	"                         (tensors the graph does not use: a note names them)\n"
	"  --save-outputs FILE    write the (whole) outputs as safetensors\n"
	"  --allow-seeded         let --save-outputs write outputs of seeded weights or\n"
	"                         inputs (else refused, exit 2)\n"
	"  --allow-nonfinite      an output holding NaN or Inf is no failure (else each\n"
	"                         such output is named with its count, exit 1)\n"
	"  --verify               compare with the model run unsharded on one rank;\n"
	"                         fail above --tolerance (default 1e-5; 2e-2 for bf16\n"
	"                         and f16: the reference is float32), normwise:\n"
	"                         max |out - ref| / max |ref| per output\n"
	"  --trace FILE.json      Chrome/Perfetto trace, one track per rank\n"
	"  --steps K              forward passes (default 1); the median time is printed;\n"
	"                         on a terminal, a line shows the steps done, the time\n"
	"                         per step and an estimate of the time left\n"
	"  --threads T            CPU threads per rank for its kernels and the BLAS\n"
	"                         (default: cores / ranks on this machine)\n"
	"  --timeout SECONDS      bound on every wait for another rank (default 120)\n"
	"\n"
	"exit status: 0 clean, 1 errors in the plan (or a failed run), 2 usage or I/O error\n";

static void print_usage(void)
{
	fputs(usage, stdout);
	fputs(usage_run, stdout);
}


/* -d g: the compiled graph as `dtpc inspect` shows rank 0 */
static void dump_graph(const struct g_graph *g, size_t len, FILE *out)
{
	inspect_graph(g, len, 0, INSPECT_TEXT, out);
}

struct check_cli {
	struct arena *a;
	struct check_opts o;
};

static int opt_dtype(void *ctx, const char *name, const char *v)
{
	struct check_cli *c = ctx;
	(void)name;
	c->o.co.dtype = v;
	/* a word: checked (with a "did you mean") as the plan's setting */
	if (!*v || v[strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789")])
		return diag_usage_error("--dtype takes f32, bf16 or f16, not '%s'", v);
	return 0;
}

static int opt_dumps(void *ctx, const char *name, const char *v)
{
	struct check_cli *c = ctx;
	(void)name;
	static const char letters[] = "islfg";
	static const unsigned passes[] = { DUMP_IR, DUMP_STYLES, DUMP_LAYOUT, DUMP_FUSE, DUMP_GRAPH };
	for (const char *p = v; *p; p++) {
		const char *at = strchr(letters, *p);
		if (!at)
			return diag_usage_error("-d takes i, s, l, f and g, not '%s'", v);
		c->o.dumps |= passes[at - letters];
	}
	return 0;
}

/* check and compile share their options; compile adds -o and -v. */
static int cmd_check(int argc, char **argv, int first, bool compile)
{
	struct check_cli c = { .a = arena_create(),
			       .o = { .format = FMT_TEXT, .color = isatty(2),
				      .dump_graph = dump_graph } };
	struct check_opts *o = &c.o;
	o->co.defines = ARENA_ARRAY(c.a, struct override, argc);
	o->co.expose = ARENA_ARRAY(c.a, const char *, argc);
	struct cli_plan_opts plan_opts = { c.a, &o->co };
	static const char *const formats[] = { "text", "json", "sarif", NULL };
	static const char *const compile_formats[] = { "text", "json", NULL };
	const char *out_path = NULL;
	bool verbose = false;
	int format = FMT_TEXT;
	struct cli_opt t[] = {
		OPT_PLAN_OPTIONS(&plan_opts),
		OPT_CALL("--dtype", opt_dtype, &c),
		OPT_NUM("--world", CLI_I64, &o->co.world, "a positive integer", 1, 1e15),
		OPT_WORD("--format", &format, compile ? compile_formats : formats),
		OPT_SET("--color", &o->color),
		OPT_CLEAR("--no-color", &o->color),
		OPT_SET("-q", &o->quiet),
		OPT_CALL_ATTACHED("-d", opt_dumps, &c),
		OPT_CALL("--expose", cli_opt_expose, &plan_opts),
		OPT_STR("-o", &out_path),
		OPT_SET("-v", &verbose),
		OPT_SET("--no-fuse", &o->co.no_fuse),
		OPT_END,
	};
	if (!compile) /* -o, -v and --no-fuse are compile's */
		t[sizeof t / sizeof *t - 4] = (struct cli_opt)OPT_END;
	int rc = cli_parse(argc, argv, first, t,
			    &(struct cli_rest){ &o->file, "plan file", .help = print_usage,
						.missing = "a plan file is needed" });
	o->format = (enum out_format)format;
	if (rc >= 0)
		;
	else if (compile && !out_path)
		rc = diag_usage_error("%s", "compiling needs -o FILE.graph");
	else
		rc = compile ? driver_compile(o, out_path, verbose, stdout, stderr)
			     : driver_check(o, stdout, stderr);
	arena_free(c.a);
	return rc;
}

static int cmd_inspect(int argc, char **argv)
{
	const char *file = NULL, *block = NULL, *axis = NULL;
	int64_t rank = -1;
	int f = INSPECT_TEXT;
	_Static_assert(INSPECT_TEXT == 0 && INSPECT_JSON == 1 && INSPECT_DOT == 2,
		       "the order of --format's words");
	static const char *const formats[] = { "text", "json", "dot", NULL };
	const struct cli_opt t[] = {
		OPT_NUM("--rank", CLI_I64, &rank, "a rank number", 0, 1e15),
		OPT_STR("--block", &block),
		OPT_STR("--axis", &axis),
		OPT_WORD("--format", &f, formats),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &file, "graph file", .help = print_usage,
						.missing = "inspect needs a graph file" });
	if (rc >= 0)
		return rc;
	if ((block || axis) && f != INSPECT_DOT)
		return diag_usage_error("%s", "--block and --axis shape the picture: they go with --format dot");
	struct graph_file gf;
	if (!driver_readable(file, stderr))
		return 2;
	if (!graph_file_open(&gf, file)) {
		fprintf(stderr, "dtpc: %s: %s\n", file, g_error()->msg);
		return 2;
	}
	rc = f == INSPECT_DOT ? inspect_dot(&gf.g, rank, block, axis, stdout)
			      : inspect_graph(&gf.g, gf.len, rank, (enum inspect_format)f, stdout);
	graph_file_close(&gf);
	return rc;
}

static int cmd_fmt(int argc, char **argv)
{
	bool check = false;
	int n = 0;
	const char **files = malloc((size_t)argc * sizeof *files);
	if (!files)
		return diag_usage_error("%s", "out of memory");
	const struct cli_opt t[] = { OPT_SET("--check", &check), OPT_END };
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ .files = files, .nfiles = &n, .help = print_usage });
	if (rc < 0 && !n)
		rc = diag_usage_error("%s", "fmt needs plan files or folders");
	if (rc < 0)
		rc = fmt_main((char **)files, n, check, stdout, stderr);
	free(files);
	return rc;
}

static int cmd_embed(int argc, char **argv)
{
	const char *file = NULL, *out = NULL, *symbol = "dtpc_embedded_graph";
	const struct cli_opt t[] = {
		OPT_STR("-o", &out),
		OPT_STR("--symbol", &symbol),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &file, "graph file", .help = print_usage,
						.missing = "embed needs a graph file" });
	if (rc >= 0)
		return rc;
	if (!out)
		return diag_usage_error("%s", "embed needs -o FILE.c or -o FILE.o");
	return embed_graph(file, out, symbol, stderr);
}

static int cmd_timeline(int argc, char **argv)
{
	const char *file = NULL, *out = NULL;
	int width = 1200;
	/* under 300 pixels the lane names leave no room for spans */
	const struct cli_opt t[] = {
		OPT_STR("-o", &out),
		OPT_NUM("--width", CLI_INT, &width, "300 to 100000 pixels", 300, 100000),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &file, "trace", .help = print_usage,
						.missing = "timeline needs a trace file" });
	if (rc >= 0)
		return rc;
	if (!out)
		return diag_usage_error("%s", "timeline needs -o FILE.svg (or -o - for standard output)");
	return timeline_svg(file, out, width, stderr);
}

static int cmd_run(int argc, char **argv)
{
	struct run_opts o = { .seed = 1, .steps = 1, .tolerance = 1e-5, .timeout_ms = 120000,
			      .cuda_graph = true, .progress = isatty(2) };
	static const char *const backends[] = { "local", "mpi", "nccl", NULL };
	static const char *const devices[] = { "cpu", "cuda", NULL };
	static const char *const dtypes[] = { "f32", "bf16", "f16", NULL };
	static const char *const on_off[] = { "off", "on", NULL };
	_Static_assert(RUN_LOCAL == 0 && RUN_MPI == 1 && RUN_NCCL == 2, "--backend's words");
	_Static_assert(DTPC_DEVICE_CPU == 0 && DTPC_DEVICE_CUDA == 1, "--device's words");
	_Static_assert(DTPC_F32 == 0 && DTPC_BF16 == 1 && DTPC_F16 == 2, "--dtype's words");
	int backend = RUN_LOCAL, device = -1, dtype = -1, cuda_graph = 1;
	double timeout_s = 0, tolerance = -1;
	const struct cli_opt t[] = {
		OPT_SET("--verify", &o.verify),
		OPT_SET("--allow-seeded", &o.allow_seeded),
		OPT_SET("--allow-nonfinite", &o.allow_nonfinite),
		OPT_WORD("--backend", &backend, backends),
		OPT_WORD("--device", &device, devices),
		OPT_WORD("--dtype", &dtype, dtypes),
		OPT_WORD("--cuda-graph", &cuda_graph, on_off),
		OPT_NUM("--threads", CLI_INT, &o.threads, "1 to 4096", 1, 4096),
		OPT_NUM("--ranks", CLI_INT, &o.ranks, "1 to 4096", 1, 4096),
		OPT_NUM("--seed", CLI_U64, &o.seed, "an integer", 0, 0),
		OPT_NUM("--steps", CLI_INT, &o.steps, "a positive integer", 1, 1000000),
		OPT_NUM("--timeout", CLI_REAL, &timeout_s, "seconds", 1e-300, 86400),
		OPT_NUM("--tolerance", CLI_REAL, &tolerance, "a number", 0, 1e308),
		OPT_STR("--weights", &o.weights),
		OPT_STR("--inputs", &o.inputs),
		OPT_STR("--save-outputs", &o.save_outputs),
		OPT_STR("--trace", &o.trace),
		OPT_END,
	};
	int rc = cli_parse(argc, argv, 2, t,
			    &(struct cli_rest){ &o.graph, "graph file", .help = print_usage,
						.missing = "run needs a graph file" });
	if (rc >= 0)
		return rc;
	o.backend = (enum run_backend)backend;
	o.device = device < 0 ? DTPC_DEVICE_CPU : (dtpc_device)device;
	o.dtype_set = dtype >= 0;
	o.dtype = dtype < 0 ? DTPC_F32 : (dtpc_dtype)dtype;
	o.cuda_graph = cuda_graph;
	if (timeout_s > 0)
		o.timeout_ms = (int)(timeout_s * 1000) ? (int)(timeout_s * 1000) : 1;
	o.tolerance_set = tolerance >= 0;
	if (o.tolerance_set)
		o.tolerance = tolerance;
	if (o.backend != RUN_LOCAL && o.ranks)
		return diag_usage_error("%s", "--ranks is for the local backend; mpirun -np sets the ranks");
	if (o.backend == RUN_NCCL) {
		if (device >= 0 && o.device != DTPC_DEVICE_CUDA)
			return diag_usage_error("%s", "the nccl backend computes on the CUDA device");
		o.device = DTPC_DEVICE_CUDA;
	}
	const char *no = dtpc_device_unavailable(o.device);
	if (no)
		return diag_usage_error("--device %s: %s", dtpc_device_name(o.device), no);
	return o.backend == RUN_LOCAL ? run_local(&o) : run_mpi(&o);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return diag_usage_error("%s", "missing command");
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		print_usage();
		return 0;
	}
	if (!strcmp(cmd, "--version")) {
		printf("dtpc %s\n", DTPC_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "check"))
		return cmd_check(argc, argv, 2, false);
	if (!strcmp(cmd, "inspect"))
		return cmd_inspect(argc, argv);
	if (!strcmp(cmd, "run"))
		return cmd_run(argc, argv);
	if (!strcmp(cmd, "shard"))
		return shard_main(argc, argv);
	if (!strcmp(cmd, "embed"))
		return cmd_embed(argc, argv);
	if (!strcmp(cmd, "timeline"))
		return cmd_timeline(argc, argv);
	if (!strcmp(cmd, "fmt"))
		return cmd_fmt(argc, argv);
	if (!strcmp(cmd, "cost"))
		return cost_main(argc, argv);
	if (!strcmp(cmd, "suggest"))
		return suggest_main(argc, argv);
	if (!strcmp(cmd, "calibrate"))
		return calibrate_main(argc, argv);
	/* compile: a plan file, or "-" for a plan on standard input */
	if ((cmd[0] != '-' && strchr(cmd, '.')) || !strcmp(cmd, "-"))
		return cmd_check(argc, argv, 1, true);
	return diag_usage_error("unknown command '%s'", cmd);
}
