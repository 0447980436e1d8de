/* main.c — the dtpc command line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "compiler/arena.h"
#include "compiler/config.h"
#include "compiler/driver.h"
#include "compiler/fmt.h"
#include "compiler/version.h"
#include "cost.h"
#include "embed.h"
#include "inspect.h"
#include "run.h"
#include "runtime/graph_file.h"
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
	"  --seed S               seed of generated weights and inputs (default 1)\n"
	"  --weights PATH         bind weights by name: a safetensors file, a folder with\n"
	"                         one (or sharded: *.safetensors.index.json), or a\n"
	"                         folder of per-rank files from dtpc shard\n"
	"  --inputs FILE          bind inputs by name from a safetensors file\n"
	"  --save-outputs FILE    write the (whole) outputs as safetensors\n"
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


static const char *need_value(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc)
		return NULL;
	return argv[++*i];
}

/* --mesh and --context each give the body of one statement of their own
 * kind. A ';' or a brace outside strings and comments would end it and
 * smuggle in others: a mesh through --context, or rules that would be
 * dropped unread. */
static bool one_statement(const char *text)
{
	for (const char *p = text; *p; p++) {
		if (*p == '"') {
			/* a string ends at its quote or, unterminated, at the line */
			for (p++; *p && *p != '"' && *p != '\n'; p++)
				p += *p == '\\' && p[1];
		} else if (*p == '#') {
			p += strcspn(p, "\n");
		} else if (strchr(";{}", *p)) {
			return false;
		}
		if (!*p)
			break;
	}
	return true;
}

/* -d g: the compiled graph as `dtpc inspect` shows rank 0 */
static void dump_graph(const struct g_graph *g, size_t len, FILE *out)
{
	inspect_graph(g, len, 0, INSPECT_TEXT, out);
}

/* check and compile share their options; compile adds -o and -v. */
static int cmd_check(int argc, char **argv, int first, bool compile)
{
	struct arena *a = arena_create();
	struct check_opts o = { .format = FMT_TEXT, .color = isatty(2), .dump_graph = dump_graph };
	o.co.defines = ARENA_ARRAY(a, struct override, argc);
	const char *out_path = NULL;
	bool verbose = false;
	int rc = 2;
	for (int i = first; i < argc; i++) {
		const char *s = argv[i], *v;
		if (compile && !strcmp(s, "-o")) {
			if (!(out_path = need_value(argc, argv, &i)))
				goto missing;
			continue;
		}
		if (compile && !strcmp(s, "-v")) {
			verbose = true;
			continue;
		}
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			rc = 0;
			goto out;
		} else if (!strcmp(s, "--plan")) {
			if (!(o.co.plan = need_value(argc, argv, &i)))
				goto missing;
		} else if (!strcmp(s, "--mesh")) {
			if (!(o.co.mesh = need_value(argc, argv, &i)))
				goto missing;
			if (!one_statement(o.co.mesh)) {
				rc = diag_usage_error("--mesh takes the axes of one mesh statement, such as "
					       "--mesh \"ring = 2, tp = 2\", not '%s'", o.co.mesh);
				goto out;
			}
		} else if (!strcmp(s, "--context")) {
			if (!(o.co.context = need_value(argc, argv, &i)))
				goto missing;
			if (!one_statement(o.co.context)) {
				rc = diag_usage_error("--context takes the options of one context statement, "
					       "such as --context 'rotate_method = \"alltoall\"', "
					       "not '%s'", o.co.context);
				goto out;
			}
		} else if (!strcmp(s, "--config")) {
			if (!(v = need_value(argc, argv, &i)))
				goto missing;
			if (!(o.co.config = config_path(a, v, stderr)))
				goto out; /* rc 2: unreadable, as a plan file */
		} else if (!strcmp(s, "--dtype")) {
			if (!(o.co.dtype = need_value(argc, argv, &i)))
				goto missing;
			/* a word: checked (with a "did you mean") as the plan's setting */
			if (!*o.co.dtype || o.co.dtype[strspn(o.co.dtype, "abcdefghijklmnopqrstuvwxyz"
							      "0123456789")]) {
				rc = diag_usage_error("--dtype takes f32, bf16 or f16, not '%s'",
						      o.co.dtype);
				goto out;
			}
		} else if (!strcmp(s, "--world")) {
			if (!(v = need_value(argc, argv, &i)))
				goto missing;
			char *end;
			long long w = strtoll(v, &end, 10);
			if (*end || w < 1) {
				rc = diag_usage_error("--world needs a positive integer, not '%s'", v);
				goto out;
			}
			o.co.world = w;
		} else if (!strncmp(s, "-D", 2)) {
			v = s[2] ? s + 2 : need_value(argc, argv, &i);
			if (!v)
				goto missing;
			const char *eq = strchr(v, '=');
			if (!eq || eq == v) {
				rc = diag_usage_error("-D needs NAME=VALUE, not '%s'", v);
				goto out;
			}
			struct override *d = &o.co.defines[o.co.ndefines++];
			d->name = arena_strndup(a, v, (size_t)(eq - v));
			d->val = value_from_cli(a, eq + 1);
			d->from_cli = true;
		} else if (!strcmp(s, "--format")) {
			if (!(v = need_value(argc, argv, &i)))
				goto missing;
			if (!strcmp(v, "json"))
				o.format = FMT_JSON;
			else if (!strcmp(v, "text"))
				o.format = FMT_TEXT;
			else if (!strcmp(v, "sarif") && !compile)
				o.format = FMT_SARIF;
			else {
				rc = diag_usage_error("--format is text or json%s, not '%s'",
					       compile ? "" : " or sarif", v);
				goto out;
			}
		} else if (!strcmp(s, "--color")) {
			o.color = true;
		} else if (!strcmp(s, "--no-color")) {
			o.color = false;
		} else if (!strcmp(s, "-q")) {
			o.quiet = true;
		} else if (!strcmp(s, "--no-fuse")) {
			o.co.no_fuse = true;
		} else if (!strncmp(s, "-d", 2)) {
			v = s[2] ? s + 2 : need_value(argc, argv, &i);
			if (!v)
				goto missing;
			for (const char *p = v; *p; p++) {
				if (*p == 'i')
					o.dumps |= DUMP_IR;
				else if (*p == 's')
					o.dumps |= DUMP_STYLES;
				else if (*p == 'l')
					o.dumps |= DUMP_LAYOUT;
				else if (*p == 'g')
					o.dumps |= DUMP_GRAPH;
				else if (*p == 'f')
					o.dumps |= DUMP_FUSE;
				else {
					rc = diag_usage_error("-d takes i, s, l, f and g, not '%s'", v);
					goto out;
				}
			}
		} else if (s[0] == '-' && s[1]) {
			rc = diag_usage_error("unknown option '%s'", s);
			goto out;
		} else if (o.file) {
			rc = diag_usage_error("one plan file at a time ('%s')", s);
			goto out;
		} else {
			o.file = s;
		}
	}
	if (!o.file) {
		rc = diag_usage_error("%s", "a plan file is needed");
		goto out;
	}
	if (compile && !out_path) {
		rc = diag_usage_error("%s", "compiling needs -o FILE.graph");
		goto out;
	}
	rc = compile ? driver_compile(&o, out_path, verbose, stdout, stderr)
		     : driver_check(&o, stdout, stderr);
	goto out;
missing:
	rc = diag_usage_error("option '%s' needs a value", argv[argc - 1]);
out:
	arena_free(a);
	return rc;
}

static int cmd_inspect(int argc, char **argv)
{
	const char *file = NULL, *block = NULL, *axis = NULL;
	int64_t rank = -1;
	enum inspect_format f = INSPECT_TEXT;
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i], *v;
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			return 0;
		}
		if (!strcmp(s, "--rank")) {
			if (!(v = need_value(argc, argv, &i)))
				return diag_usage_error("option '%s' needs a value", s);
			char *end;
			rank = strtoll(v, &end, 10);
			if (*end || rank < 0)
				return diag_usage_error("--rank needs a rank number, not '%s'", v);
		} else if (!strcmp(s, "--block") || !strcmp(s, "--axis")) {
			if (!(v = need_value(argc, argv, &i)))
				return diag_usage_error("option '%s' needs a value", s);
			*(s[2] == 'b' ? &block : &axis) = v;
		} else if (!strcmp(s, "--format")) {
			if (!(v = need_value(argc, argv, &i)))
				return diag_usage_error("option '%s' needs a value", s);
			if (!strcmp(v, "text"))
				f = INSPECT_TEXT;
			else if (!strcmp(v, "json"))
				f = INSPECT_JSON;
			else if (!strcmp(v, "dot"))
				f = INSPECT_DOT;
			else
				return diag_usage_error("--format is text, json or dot, not '%s'", v);
		} else if (s[0] == '-') {
			return diag_usage_error("unknown option '%s'", s);
		} else if (file) {
			return diag_usage_error("one graph file at a time ('%s')", s);
		} else {
			file = s;
		}
	}
	if (!file)
		return diag_usage_error("%s", "inspect needs a graph file");
	if ((block || axis) && f != INSPECT_DOT)
		return diag_usage_error("%s", "--block and --axis shape the picture: they go with --format dot");
	struct graph_file gf;
	char err[256];
	if (!driver_readable(file, stderr))
		return 2;
	if (!graph_file_open(&gf, file, err, sizeof err)) {
		fprintf(stderr, "dtpc: %s: %s\n", file, err);
		return 2;
	}
	int rc = f == INSPECT_DOT ? inspect_dot(&gf.g, rank, block, axis, stdout)
				  : inspect_graph(&gf.g, gf.len, rank, f, stdout);
	graph_file_close(&gf);
	return rc;
}

static int cmd_fmt(int argc, char **argv)
{
	bool check = false;
	int n = 0;
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i];
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			return 0;
		}
		if (!strcmp(s, "--check"))
			check = true;
		else if (s[0] == '-' && s[1])
			return diag_usage_error("unknown option '%s'", s);
		else
			argv[2 + n++] = argv[i];
	}
	if (!n)
		return diag_usage_error("%s", "fmt needs plan files or folders");
	return fmt_main(argv + 2, n, check, stdout, stderr);
}

static int cmd_embed(int argc, char **argv)
{
	const char *file = NULL, *out = NULL, *symbol = "dtpc_embedded_graph";
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i];
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			return 0;
		}
		if (!strcmp(s, "-o") || !strcmp(s, "--symbol")) {
			const char *v = need_value(argc, argv, &i);
			if (!v)
				return diag_usage_error("option '%s' needs a value", s);
			*(s[1] == 'o' ? &out : &symbol) = v;
		} else if (s[0] == '-') {
			return diag_usage_error("unknown option '%s'", s);
		} else if (file) {
			return diag_usage_error("one graph file at a time ('%s')", s);
		} else {
			file = s;
		}
	}
	if (!file)
		return diag_usage_error("%s", "embed needs a graph file");
	if (!out)
		return diag_usage_error("%s", "embed needs -o FILE.c or -o FILE.o");
	return embed_graph(file, out, symbol, stderr);
}

static int cmd_timeline(int argc, char **argv)
{
	const char *file = NULL, *out = NULL;
	long width = 1200;
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i], *v;
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			return 0;
		}
		if (!strcmp(s, "-o") || !strcmp(s, "--width")) {
			if (!(v = need_value(argc, argv, &i)))
				return diag_usage_error("option '%s' needs a value", s);
			if (s[1] == 'o') {
				out = v;
				continue;
			}
			char *end;
			width = strtol(v, &end, 10);
			/* under 300 pixels the lane names leave no room for spans */
			if (*end || width < 300 || width > 100000)
				return diag_usage_error("--width needs 300 to 100000 pixels, not '%s'", v);
		} else if (s[0] == '-') {
			return diag_usage_error("unknown option '%s'", s);
		} else if (file) {
			return diag_usage_error("one trace at a time ('%s')", s);
		} else {
			file = s;
		}
	}
	if (!file)
		return diag_usage_error("%s", "timeline needs a trace file");
	if (!out)
		return diag_usage_error("%s", "timeline needs -o FILE.svg (or -o - for standard output)");
	return timeline_svg(file, out, (int)width, stderr);
}

static int cmd_run(int argc, char **argv)
{
	struct run_opts o = { .seed = 1, .steps = 1, .tolerance = 1e-5, .timeout_ms = 120000,
			      .cuda_graph = true, .progress = isatty(2) };
	bool device_given = false;
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i], *v = NULL;
		if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
			print_usage();
			return 0;
		}
		if (!strcmp(s, "--verify")) {
			o.verify = true;
			continue;
		}
		if (s[0] == '-' && !(v = need_value(argc, argv, &i)))
			return diag_usage_error("option '%s' needs a value", s);
		char *end = NULL;
		if (!strcmp(s, "--backend")) {
			if (!strcmp(v, "local"))
				o.backend = RUN_LOCAL;
			else if (!strcmp(v, "mpi"))
				o.backend = RUN_MPI;
			else if (!strcmp(v, "nccl"))
				o.backend = RUN_NCCL;
			else
				return diag_usage_error("--backend is local, mpi or nccl, not '%s'", v);
		} else if (!strcmp(s, "--device")) {
			if (!strcmp(v, "cpu"))
				o.device = DTPC_DEVICE_CPU;
			else if (!strcmp(v, "cuda"))
				o.device = DTPC_DEVICE_CUDA;
			else
				return diag_usage_error("--device is cpu or cuda, not '%s'", v);
			device_given = true;
		} else if (!strcmp(s, "--dtype")) {
			o.dtype_set = true;
			if (!strcmp(v, "f32"))
				o.dtype = DTPC_F32;
			else if (!strcmp(v, "bf16"))
				o.dtype = DTPC_BF16;
			else if (!strcmp(v, "f16"))
				o.dtype = DTPC_F16;
			else
				return diag_usage_error("--dtype is f32, bf16 or f16, not '%s'", v);
		} else if (!strcmp(s, "--cuda-graph")) {
			if (strcmp(v, "on") && strcmp(v, "off"))
				return diag_usage_error("--cuda-graph is on or off, not '%s'", v);
			o.cuda_graph = !strcmp(v, "on");
		} else if (!strcmp(s, "--threads")) {
			long n = strtol(v, &end, 10);
			if (*end || n < 1 || n > 4096)
				return diag_usage_error("--threads needs 1 to 4096, not '%s'", v);
			o.threads = (int)n;
		} else if (!strcmp(s, "--ranks")) {
			long n = strtol(v, &end, 10);
			if (*end || n < 1 || n > 4096)
				return diag_usage_error("--ranks needs 1 to 4096, not '%s'", v);
			o.ranks = (int)n;
		} else if (!strcmp(s, "--seed")) {
			o.seed = strtoull(v, &end, 10);
			if (*end)
				return diag_usage_error("--seed needs an integer, not '%s'", v);
		} else if (!strcmp(s, "--steps")) {
			long n = strtol(v, &end, 10);
			if (*end || n < 1 || n > 1000000)
				return diag_usage_error("--steps needs a positive integer, not '%s'", v);
			o.steps = (int)n;
		} else if (!strcmp(s, "--timeout")) {
			double t = strtod(v, &end);
			if (*end || !(t > 0) || t > 86400)
				return diag_usage_error("--timeout needs seconds, not '%s'", v);
			o.timeout_ms = (int)(t * 1000) ? (int)(t * 1000) : 1;
		} else if (!strcmp(s, "--tolerance")) {
			o.tolerance_set = true;
			o.tolerance = strtod(v, &end);
			if (*end || !(o.tolerance >= 0))
				return diag_usage_error("--tolerance needs a number, not '%s'", v);
		} else if (!strcmp(s, "--weights")) {
			o.weights = v;
		} else if (!strcmp(s, "--inputs")) {
			o.inputs = v;
		} else if (!strcmp(s, "--save-outputs")) {
			o.save_outputs = v;
		} else if (!strcmp(s, "--trace")) {
			o.trace = v;
		} else if (s[0] == '-') {
			return diag_usage_error("unknown option '%s'", s);
		} else if (o.graph) {
			return diag_usage_error("one graph file at a time ('%s')", s);
		} else {
			o.graph = s;
		}
	}
	if (!o.graph)
		return diag_usage_error("%s", "run needs a graph file");
	if (o.backend != RUN_LOCAL && o.ranks)
		return diag_usage_error("%s", "--ranks is for the local backend; mpirun -np sets the ranks");
	if (o.backend == RUN_NCCL) {
		if (device_given && o.device != DTPC_DEVICE_CUDA)
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
