/* fuzz_profile.c — libFuzzer target: the hardware profile loader of
 * `dtpc cost` and `dtpc suggest` (cost_hw_parse, cost/profile.c).
 *
 * Any crash, sanitizer report, leak or hang is a bug; so is an error that
 * is empty or not one line, or a profile accepted with a number outside
 * its kind's range (docs/cost-model.md, "Profiles": what keeps every
 * prediction finite): a rate below 1 per second, a time above 1e6 s, a
 * count below 1, an intra-node link missing, p2p_ctas not below sms.
 *
 *   make BUILD=build build/fuzz/fuzz_profile
 *   build/fuzz/fuzz_profile -max_total_time=60 /tmp/profile_corpus tests/fuzz/profile_corpus
 *
 * tests/fuzz/profile_corpus/ holds the shipped profiles (hw/) and hostile
 * ones. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rate(double x)
{
	return isfinite(x) && x >= 1 && x <= 1e30;
}

static int time_s(double x)
{
	return x >= 0 && x <= 1e6;
}

static int rates_ok(const struct rates *r)
{
	int ok = rate(r->linear.peak) && rate(r->attention.peak) && time_s(r->linear.fixed) &&
		 time_s(r->attention.fixed) && time_s(r->attention.score) &&
		 time_s(r->linear.score) && time_s(r->launch);
	for (int m = 0; m < M_N; m++)
		ok = ok && rate(r->op_bw[m]);
	return ok;
}

static int link_ok(const struct link *l, double sms)
{
	int ok = l->p2p_ctas >= 0 && (l->p2p_ctas == 0 || l->p2p_ctas < sms) &&
		 (l->channel_bw == 0 || rate(l->channel_bw)) && l->ngroups >= 0 &&
		 l->ngroups <= MAX_TABLE;
	for (int c = 0; c < CO_N; c++)
		ok = ok && time_s(l->alpha[c]) && rate(l->busbw[c]);
	for (int k = 0; ok && k < l->ngroups; k++) {
		ok = l->group_size[k] >= 2 && l->groups[k].at_work >= 1;
		for (int c = 0; c < CO_N; c++)
			ok = ok && time_s(l->groups[k].alpha[c]) && rate(l->groups[k].busbw[c]);
	}
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct hw h; /* 100 kB: not on the stack */
	char err[512];
	if (!cost_hw_parse((const char *)data, size, "fuzz.json", &h, err, sizeof err)) {
		if (!err[0] || !memchr(err, '\0', sizeof err) || strchr(err, '\n'))
			abort();
		return 0;
	}
	int ok = h.ranks_per_node >= 1 && h.threads_per_node >= 0 && h.memory >= 1 &&
		 h.memory <= 1e30 && time_s(h.launch) && h.sms >= 0 && h.default_dtype >= 0 &&
		 h.default_dtype < DT_N && h.dt[h.default_dtype].present && h.intra.present &&
		 link_ok(&h.intra, h.sms) && (!h.inter.present || link_ok(&h.inter, h.sms));
	for (int d = 0; ok && d < DT_N; d++) {
		if (!h.dt[d].present)
			continue;
		ok = rates_ok(&h.dt[d].base) && h.dt[d].nrows >= 0 && h.dt[d].nrows <= MAX_TABLE &&
		     (!h.dt[d].nrows || h.threads_per_node >= 1);
		for (int k = 0; ok && k < h.dt[d].nrows; k++)
			ok = h.dt[d].row_ranks[k] >= 1 && rates_ok(&h.dt[d].rows[k]);
	}
	if (!ok)
		abort();
	return 0;
}
