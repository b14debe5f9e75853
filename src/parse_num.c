/* The numbers of settings: integers with an optional K, M or G suffix (and B), and doubles. Only
 * the C library is used, so the shared heap (heap/shared_heap.c), which does not link libtutti,
 * compiles this file too and reads its settings with the same syntax. */
#include "parse_num.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

static int suffix_shift(char c) {
  switch (toupper((unsigned char)c)) {
    case 'K':
      return 10;
    case 'M':
      return 20;
    case 'G':
      return 30;
    default:
      return 0;
  }
}

const char *tutti_parse_int(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (end == s || isspace((unsigned char)*s)) return "is not an integer";
  if (errno == ERANGE) return "is out of range (more than 64 bits)";
  int shift = suffix_shift(*end);
  if (shift) {
    end++;
    if (v > (INT64_MAX >> shift) || v < (INT64_MIN >> shift))
      return "is out of range (more than 64 bits with its suffix)";
    v = (long long)((uint64_t)v << shift); /* exact: |v| << shift fits, checked above */
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return "has trailing text (allowed: a number, then K, M or G, then B)";
  *out = v;
  return NULL;
}

const char *tutti_parse_double(const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || isspace((unsigned char)*s)) return "is not a number";
  if (*end != '\0') return "has trailing text";
  if (errno == ERANGE || isinf(v)) return "is out of range";
  if (isnan(v)) return "is not a number";
  *out = v;
  return NULL;
}
