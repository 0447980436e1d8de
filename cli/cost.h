/* cost.h — predicting a plan's step time before launch (`dtpc cost`,
 * `dtpc suggest`); the model is docs/cost-model.md. */
#ifndef DTPC_COST_H
#define DTPC_COST_H

/* `dtpc cost FILE.plan ...` and `dtpc suggest FILE.plan ...`: argv as
 * main's, the command at argv[1]. Exit status: 0 done, 1 the plan does not
 * compile (suggest: no mesh does), 2 usage or I/O error (an unreadable or
 * malformed profile among them). */
int cost_main(int argc, char **argv);
int suggest_main(int argc, char **argv);
#endif
