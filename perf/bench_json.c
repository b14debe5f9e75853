/* JSON results (-J) with cJSON (Debian's libcjson-dev): the document is built in memory and the
 * file rewritten after every row, so a run that dies half-way leaves valid JSON with the rows
 * measured so far. Schema in bench.h. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

struct bench_json {
  char *path;
  cJSON *doc, *results;
};

static void bench_json_options(cJSON *doc, const bench_opts_t *o) {
  cJSON *opt = cJSON_AddObjectToObject(doc, "options");
  cJSON_AddNumberToObject(opt, "minbytes", (double)o->min_bytes);
  cJSON_AddNumberToObject(opt, "maxbytes", (double)o->max_bytes);
  cJSON_AddNumberToObject(opt, "stepbytes", (double)o->step_bytes);
  cJSON_AddNumberToObject(opt, "stepfactor", o->step_factor);
  cJSON_AddNumberToObject(opt, "iters", o->iters);
  cJSON_AddNumberToObject(opt, "warmup_iters", o->warmup);
  cJSON_AddNumberToObject(opt, "agg_iters", o->agg_iters);
  cJSON_AddNumberToObject(opt, "check", o->check);
  cJSON_AddNumberToObject(opt, "average", o->average);
  cJSON_AddNumberToObject(opt, "timeout", o->timeout_s);
  cJSON_AddNumberToObject(opt, "iter_bytes", (double)o->iter_bytes);
  cJSON_AddBoolToObject(opt, "report_cputime", o->cputime);
  cJSON_AddStringToObject(opt, "datatype", o->type_arg ? o->type_arg : "");
  cJSON_AddStringToObject(opt, "op", o->op_arg ? o->op_arg : "");
  if (o->root == BENCH_ROOT_ALL)
    cJSON_AddStringToObject(opt, "root", "all");
  else
    cJSON_AddNumberToObject(opt, "root", o->root);
}

static void bench_json_env(cJSON *doc) {
  char load[128] = "";
  FILE *l = fopen("/proc/loadavg", "r");
  if (l) {
    if (!fgets(load, sizeof(load), l)) load[0] = '\0';
    fclose(l);
  }
  load[strcspn(load, "\n")] = '\0';
  char when[64] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(doc, "loadavg", load);
  cJSON_AddStringToObject(doc, "started", when);
  cJSON_AddNumberToObject(doc, "cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
}

/* Writes the document as it stands; returns 0 on success. */
static int bench_json_write(const bench_json_t *j) {
  char *text = cJSON_Print(j->doc);
  FILE *f = text ? fopen(j->path, "w") : NULL;
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0) ok = 0;
  cJSON_free(text);
  return ok ? 0 : -1;
}

bench_json_t *bench_json_open(const bench_opts_t *o, const char *tool, const char *collective,
                              const char *library, int nranks, const char *const *hosts) {
  bench_json_t *j = calloc(1, sizeof(*j));
  cJSON *doc = cJSON_CreateObject();
  if (!j || !doc || !(j->path = strdup(o->json_path))) {
    fprintf(stderr, "%s: out of memory\n", tool);
    exit(2);
  }
  j->doc = doc;
  cJSON_AddStringToObject(doc, "tool", tool);
  cJSON_AddStringToObject(doc, "collective", collective);
  cJSON_AddStringToObject(doc, "library", library);
  cJSON_AddNumberToObject(doc, "nranks", nranks);
  cJSON_AddItemToObject(doc, "hosts", cJSON_CreateStringArray(hosts, nranks));
  bench_json_env(doc);
  bench_json_options(doc, o);
  j->results = cJSON_AddArrayToObject(doc, "results");
  if (bench_json_write(j) != 0) {
    fprintf(stderr, "%s: cannot write the JSON results to '%s'\n", tool, o->json_path);
    exit(2);
  }
  return j;
}

static cJSON *bench_json_half(const bench_result_t *r) {
  cJSON *h = cJSON_CreateObject();
  cJSON_AddNumberToObject(h, "time_us", r->time_us);
  cJSON_AddNumberToObject(h, "algbw", r->algbw);
  cJSON_AddNumberToObject(h, "busbw", r->busbw);
  if (r->wrong < 0)
    cJSON_AddNullToObject(h, "wrong");
  else
    cJSON_AddNumberToObject(h, "wrong", r->wrong);
  return h;
}

void bench_json_row(bench_json_t *j, size_t bytes, size_t count, const char *type, const char *op,
                    int root, const bench_result_t *out_of_place, const bench_result_t *in_place) {
  if (!j) return;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddNumberToObject(row, "size", (double)bytes);
  cJSON_AddNumberToObject(row, "count", (double)count);
  cJSON_AddStringToObject(row, "type", type);
  cJSON_AddStringToObject(row, "redop", op);
  cJSON_AddNumberToObject(row, "root", root);
  cJSON_AddItemToObject(row, "out_of_place", bench_json_half(out_of_place));
  cJSON_AddItemToObject(row, "in_place", bench_json_half(in_place));
  cJSON_AddItemToArray(j->results, row);
  if (bench_json_write(j) != 0) fprintf(stderr, "cannot write the JSON results to '%s'\n", j->path);
}

void bench_json_close(bench_json_t *j, int results_wrong, double avg_busbw) {
  if (!j) return;
  cJSON_AddNumberToObject(j->doc, "results_wrong", results_wrong);
  cJSON_AddNumberToObject(j->doc, "avg_busbw", avg_busbw);
  if (bench_json_write(j) != 0) fprintf(stderr, "cannot write the JSON results to '%s'\n", j->path);
  cJSON_Delete(j->doc);
  free(j->path);
  free(j);
}
