/* shard.h — `dtpc shard`: a checkpoint cut into per-rank files for one graph
 * (runtime/weights.h describes the folder). */
#ifndef DTPC_SHARD_H
#define DTPC_SHARD_H

/* argv[1] is "shard". Exit status: 0 written, 1 the checkpoint does not
 * fit the graph (or is malformed), 2 usage or I/O error. */
int shard_main(int argc, char **argv);
#endif
