/* median.h — the median of timings, shared by the commands that measure
 * (run, calibrate) and the benchmarks. */
#ifndef DTPC_MEDIAN_H
#define DTPC_MEDIAN_H

/* The median of v[0..n), n >= 1 (the mean of the middle two when n is
 * even); sorts v in place. */
double median(double *v, int n);
#endif
