/* calibrate.h — `dtpc calibrate`: measure this machine's collectives and
 * kernels through libdtpc and write a hardware profile (docs/cost-model.md). */
#ifndef DTPC_CALIBRATE_H
#define DTPC_CALIBRATE_H

/* `dtpc calibrate --backend local|mpi --device cpu [--ranks N] [--quick]
 * -o PROFILE.json`: argv as main's, the command at argv[1]. Exit status: 0
 * written, 1 a measurement failed, 2 usage or I/O error. */
int calibrate_main(int argc, char **argv);
#endif
