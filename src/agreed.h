/* Settings every rank must agree on, compared at bootstrap (agreed.c). */
#ifndef TUTTI_AGREED_H_
#define TUTTI_AGREED_H_

#include <stddef.h>

#include "core.h"

/* This process's fingerprint of the agreed settings ("NAME=value;" for each that is set). */
void agreed_settings_format(char *out, size_t len);
/* 0 when the fingerprints are equal; else 1 and a message naming the first differing setting,
 * both ranks, their hosts and values. */
int agreed_settings_explain(const char *fp_a, int rank_a, const char *host_a, const char *fp_b,
                            int rank_b, const char *host_b, char *msg, size_t len);

#endif
